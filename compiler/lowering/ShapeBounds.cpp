#include "compiler/lowering/ShapeBounds.h"
#include "compiler/lowering/SymbolicDims.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"

#include <algorithm>
#include <cstring>
#include <sstream>

using namespace mlir;

namespace dsc {

// Tensors up to this size keep their values during shape evaluation when they are computed
// from known values: the shapes, indices and axes that later ops' shapes depend on.
constexpr int64_t kTrackedValueElements = 64;

namespace {

// Where an element of a small tensor comes from: a graph input's dimension, or (dim < 0) the
// input's values.
struct Source {
  unsigned argument;
  int64_t dim;
  bool operator==(const Source &other) const {
    return argument == other.argument && dim == other.dim;
  }
};
using Sources = SmallVector<Source, 2>;

class BoundEvaluator {
public:
  BoundEvaluator(ShapeBounds &bounds, func::FuncOp func, bool dynamicFallback)
      : bounds_(bounds), func_(func), dims_(InputDims::of(func)),
        dynamicFallback_(dynamicFallback) {}
  LogicalResult evaluateBlock(Block &block);

private:
  LogicalResult evaluateOp(Operation *op);
  LogicalResult evaluateIf(onnx::IfOp op);
  LogicalResult setUnbounded(Operation *op, std::string why = "") {
    for (Value result : op->getResults())
      bounds_.entries[result] = {runtimeDType(result.getType()), {}, nullptr, false, why};
    return success();
  }
  void set(Value value, dsrt::DType dtype, const dsrt::Shape &shape,
           std::shared_ptr<dsrt::OwnedTensor> data = nullptr) {
    bounds_.entries[value] = {dtype, SmallVector<int64_t>(shape.begin(), shape.end()),
                              std::move(data)};
  }
  std::vector<Sources> sourcesOf(Value value) const;
  void traceSources(Operation *op, llvm::StringRef name, ArrayRef<Value> operands,
                    const std::vector<dsrt::ops::OutputSpec> &specs);
  std::string targetWhy(Value target) const;

  ShapeBounds &bounds_;
  mutable func::FuncOp func_;
  InputDims dims_;
  bool dynamicFallback_;
  // Per element of the small tensors shape arithmetic computes, the inputs' dimensions and
  // values it was computed from: what a Reshape that cannot be bounded names.
  llvm::DenseMap<Value, std::vector<Sources>> sources_;
};

std::optional<std::vector<int64_t>> integerValues(const ShapeBounds::Entry *entry) {
  if (!entry || !entry->value)
    return std::nullopt;
  const dsrt::OwnedTensor &t = *entry->value;
  int64_t n = dsrt::elementCount(t.shape);
  std::vector<int64_t> out(n);
  if (t.dtype == dsrt::DType::I64) {
    if (n > 0)  // an empty tensor's storage may be null, which memcpy must not be given
      std::memcpy(out.data(), t.storage.data(), n * sizeof(int64_t));
  }
  else if (t.dtype == dsrt::DType::I32)
    for (int64_t i = 0; i < n; ++i)
      out[i] = reinterpret_cast<const int32_t *>(t.storage.data())[i];
  else
    return std::nullopt;
  return out;
}

std::vector<Sources> BoundEvaluator::sourcesOf(Value value) const {
  if (auto it = sources_.find(value); it != sources_.end())
    return it->second;
  // An input read for its values: every element comes from them.
  if (auto argument = dyn_cast<BlockArgument>(value);
      argument && argument.getOwner()->getParentOp() == func_.getOperation())
    if (const ShapeBounds::Entry *entry = bounds_.lookup(value);
        entry && dsrt::elementCount(dsrt::Shape(entry->shape.begin(), entry->shape.end())) <=
                     kTrackedValueElements)
      return std::vector<Sources>(
          dsrt::elementCount(dsrt::Shape(entry->shape.begin(), entry->shape.end())),
          Sources{{argument.getArgNumber(), -1}});
  return {};
}

// Follows element by element the ops that move a shape's numbers (Shape, Gather, Slice,
// Concat, the views and casts); any other op's elements each come from all its operands'.
void BoundEvaluator::traceSources(Operation *op, llvm::StringRef name, ArrayRef<Value> operands,
                                  const std::vector<dsrt::ops::OutputSpec> &specs) {
  if (specs.size() != 1 || dsrt::elementCount(specs[0].shape) > kTrackedValueElements)
    return;
  const size_t count = size_t(dsrt::elementCount(specs[0].shape));
  std::vector<Sources> out;
  auto operandSources = [&](size_t i) {
    return i < operands.size() && operands[i] ? sourcesOf(operands[i]) : std::vector<Sources>();
  };
  if (name == "Shape" && !operands.empty()) {
    auto argument = dyn_cast<BlockArgument>(operands[0]);
    auto shape = dyn_cast<onnx::ShapeOp>(op);
    const ShapeBounds::Entry *entry = bounds_.lookup(operands[0]);
    if (!argument || argument.getOwner()->getParentOp() != func_.getOperation() || !shape ||
        !entry)
      return;
    int64_t rank = int64_t(entry->shape.size());
    auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + rank : i, 0, rank); };
    int64_t start = clamp(shape.getStart().value_or(0));
    for (size_t i = 0; i < count; ++i)
      out.push_back({{argument.getArgNumber(), start + int64_t(i)}});
  } else if (name == "Cast" || name == "Identity" || name == "Squeeze" || name == "Unsqueeze" ||
             name == "Reshape" || name == "Flatten") {
    out = operandSources(0);
  } else if (name == "Concat") {
    for (size_t i = 0; i < operands.size(); ++i) {
      std::vector<Sources> part = operandSources(i);
      const ShapeBounds::Entry *entry = operands[i] ? bounds_.lookup(operands[i]) : nullptr;
      size_t n = entry ? size_t(dsrt::elementCount(
                             dsrt::Shape(entry->shape.begin(), entry->shape.end())))
                       : 0;
      if (part.size() != n)
        part.assign(n, {});
      out.insert(out.end(), part.begin(), part.end());
    }
  } else if ((name == "Gather" || name == "Slice") && operands.size() >= 2) {
    std::vector<Sources> data = operandSources(0);
    std::vector<int64_t> picked;
    auto n = int64_t(data.size());
    if (name == "Gather") {
      if (auto indices = integerValues(bounds_.lookup(operands[1])))
        for (int64_t i : *indices)
          picked.push_back(i < 0 ? i + n : i);
    } else if (operands.size() >= 3) {
      auto starts = integerValues(bounds_.lookup(operands[1]));
      auto ends = integerValues(bounds_.lookup(operands[2]));
      std::optional<std::vector<int64_t>> steps;
      if (operands.size() >= 5 && operands[4] && !isa<NoneType>(operands[4].getType()))
        steps = integerValues(bounds_.lookup(operands[4]));
      int64_t step = steps && steps->size() == 1 ? (*steps)[0] : 1;
      if (starts && ends && starts->size() == 1 && ends->size() == 1 && step > 0) {
        auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
        for (int64_t i = clamp((*starts)[0]); i < clamp((*ends)[0]); i += step)
          picked.push_back(i);
      }
    }
    if (picked.size() == count)
      for (int64_t i : picked)
        out.push_back(i >= 0 && i < n ? data[i] : Sources());
  }
  if (out.size() != count) {
    // Every element from everything its operands came from.
    Sources all;
    for (size_t i = 0; i < operands.size(); ++i)
      for (const Sources &element : operandSources(i))
        for (const Source &source : element)
          if (!llvm::is_contained(all, source))
            all.push_back(source);
    if (all.empty())
      return;
    out.assign(count, all);
  }
  sources_[op->getResult(0)] = std::move(out);
}

// Which of the inputs' dimensions or values a Reshape's target comes from, in words; empty
// when it comes from none (a constant, or a shape the graph computes from its data).
std::string BoundEvaluator::targetWhy(Value target) const {
  std::vector<Sources> elements = sourcesOf(target);
  std::ostringstream out;
  bool any = false;
  auto inputName = [&](unsigned argument) {
    auto name = func_.getArgAttrOfType<StringAttr>(argument, "onnx.name");
    return name ? name.getValue().str() : "input " + std::to_string(argument);
  };
  for (auto [k, element] : llvm::enumerate(elements)) {
    if (element.empty())
      continue;
    out << (any ? "; " : "") << "its target's dimension " << k << " comes from ";
    any = true;
    for (auto [i, source] : llvm::enumerate(element)) {
      out << (i ? " and " : "");
      if (source.dim < 0) {
        out << "the values of '" << inputName(source.argument)
            << "', which the plan's limits do not bound";
        continue;
      }
      out << "'" << inputName(source.argument) << "' dimension " << source.dim;
      auto dims = func_.getArgAttrOfType<ArrayAttr>(source.argument, "onnx.dims");
      llvm::StringRef symbol;
      if (dims && source.dim < int64_t(dims.size()))
        if (auto text = dyn_cast<StringAttr>(dims[source.dim]))
          symbol = text.getValue();
      out << " (" << (symbol.empty() ? std::string() : "'" + symbol.str() + "', ")
          << dims_.describe(source.argument, unsigned(source.dim));
      if (const ShapeBounds::Entry *entry = bounds_.lookup(func_.getArgument(source.argument));
          entry && source.dim < int64_t(entry->shape.size()))
        out << ": " << entry->shape[source.dim] << " here";
      out << ")";
    }
  }
  return any ? out.str() : "";
}

LogicalResult BoundEvaluator::evaluateBlock(Block &block) {
  for (Operation &op : block)
    if (failed(evaluateOp(&op)))
      return failure();
  return success();
}

// Both branches run in the bound evaluation (the condition is data); the If's bound is the
// larger of the two in every dimension. A branch may fail at this split of the tokens
// (Optimum's cache branch takes one new token only): the other branch then bounds the If,
// and the failing branch's values get bounds from the splits where it runs.
LogicalResult BoundEvaluator::evaluateIf(onnx::IfOp op) {
  SmallVector<onnx::YieldOp> yields;
  SmallVector<Diagnostic> swallowed;
  for (Region *region : {&op.getThenBranch(), &op.getElseBranch()}) {
    LogicalResult result = success();
    {
      ScopedDiagnosticHandler capture(op.getContext(), [&](Diagnostic &diagnostic) {
        swallowed.push_back(std::move(diagnostic));
        return success();
      });
      result = evaluateBlock(region->front());
    }
    if (succeeded(result))
      yields.push_back(cast<onnx::YieldOp>(region->front().getTerminator()));
  }
  if (yields.empty()) {
    for (Diagnostic &diagnostic : swallowed)
      op.getContext()->getDiagEngine().emit(std::move(diagnostic));
    return failure();
  }
  for (auto [index, result] : llvm::enumerate(op.getResults())) {
    const ShapeBounds::Entry *first = bounds_.lookup(yields.front().getOutputs()[index]);
    bool bounded = llvm::all_of(yields, [&](onnx::YieldOp yield) {
      return bounds_.lookup(yield.getOutputs()[index])->bounded;
    });
    if (!bounded) {
      bounds_.entries[result] = {first->dtype, {}, nullptr, false};
      continue;
    }
    dsrt::Shape shape(first->shape.begin(), first->shape.end());
    for (onnx::YieldOp yield : yields) {
      const ShapeBounds::Entry *entry = bounds_.lookup(yield.getOutputs()[index]);
      if (entry->shape.size() != shape.size())
        return op.emitOpError("branches give results of different ranks, which a plan cannot "
                              "bound");
      for (auto [a, b] : llvm::zip(shape, entry->shape))
        a = std::max(a, b);
    }
    set(result, first->dtype, shape);
  }
  return success();
}

LogicalResult BoundEvaluator::evaluateOp(Operation *op) {
  if (isa<onnx::YieldOp, func::ReturnOp, onnx::NoValueOp>(op))
    return success();
  if (isa<onnx::WeightOp, tfm::WeightOp, tfm::ConcatWeightsOp>(op)) {
    auto type = cast<RankedTensorType>(storedWeightType(op->getResult(0).getType()));
    set(op->getResult(0), runtimeDType(type),
        dsrt::Shape(type.getShape().begin(), type.getShape().end()));
    return success();
  }
  if (auto constant = dyn_cast<onnx::ConstantOp>(op)) {
    auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
    if (!dense)
      return constant.emitOpError("holds a constant that is not dense");
    auto value = std::make_shared<dsrt::OwnedTensor>(tensorFromAttr(dense));
    set(constant, value->dtype, value->shape, value);
    return success();
  }
  if (auto branch = dyn_cast<onnx::IfOp>(op))
    return evaluateIf(branch);

  FailureOr<dsrt::ops::AttrMap> attrs = kernelAttributes(op);
  if (failed(attrs))
    return failure();
  SmallVector<Value> operands = stepInputs(op);
  std::vector<dsrt::TensorRef> refs(operands.size());
  dsrt::ops::Inputs inputs;
  bool allValues = true;
  for (auto [i, operand] : llvm::enumerate(operands)) {
    if (!operand || isa<NoneType>(operand.getType())) {
      inputs.push_back(nullptr);
      continue;
    }
    const ShapeBounds::Entry *entry = bounds_.lookup(operand);
    if (!entry)
      return op->emitOpError() << "operand " << i << " has no bound";
    if (!entry->bounded)
      return setUnbounded(op);
    refs[i] = {entry->dtype, dsrt::Shape(entry->shape.begin(), entry->shape.end()),
               entry->value ? entry->value->storage.data() : nullptr};
    allValues &= entry->value != nullptr;
    inputs.push_back(&refs[i]);
  }
  std::string name = stepName(op);
  std::vector<dsrt::ops::OutputSpec> specs;
  dsrt::Status status =
      dsrt::ops::inferShapes(name, *attrs, inputs, op->getNumResults(), specs);
  if (!status.isOk()) {
    // Shapes that follow from values nobody knows before the program runs make the results
    // dynamic (a Reshape says which of its target's dimensions); so does a Reshape whose
    // target comes from the inputs' dimensions in a way the limits cannot meet, under
    // dynamicFallback. Any other failure is an error in the model.
    bool reshape = name == "Reshape" && operands.size() >= 2 && operands[1];
    if (status.message().find(dsrt::ops::kUnknownValue) != std::string::npos) {
      std::string why = reshape ? targetWhy(operands[1]) : "";
      return setUnbounded(op, why.empty() ? "" : "its result is a dynamic tensor, allocated "
                                                  "when it runs: " + why);
    }
    if (reshape && dynamicFallback_) {
      std::string why = targetWhy(operands[1]);
      if (!why.empty())
        return setUnbounded(
            op, "its result is a dynamic tensor, allocated when it runs: under the plan's "
                "limits it cannot be bounded (" + status.message() + "), and " + why +
                    ", which the limits size by its role alone, not by the data's "
                    "dimensions it must match");
    }
    return op->emitOpError() << "cannot be bounded under the plan's limits: "
                             << status.message();
  }
  traceSources(op, name, operands, specs);

  // Shape and Size read only shapes; other small results are computed when every input
  // value is known, so that later Reshape/Expand/Slice shapes resolve. Floats count too:
  // exporters compute sizes as Cast -> Div -> Floor -> Cast. Weights are never known, so
  // no real float data is evaluated.
  bool tracked = true;
  for (const auto &spec : specs)
    tracked &= dsrt::elementCount(spec.shape) <= kTrackedValueElements;
  bool readsOnlyShapes = name == "Shape" || name == "Size";
  std::vector<std::shared_ptr<dsrt::OwnedTensor>> values(specs.size());
  if (tracked && (allValues || readsOnlyShapes)) {
    std::vector<dsrt::TensorRef> outRefs(specs.size());
    dsrt::ops::Outputs outputs;
    for (size_t o = 0; o < specs.size(); ++o) {
      values[o] = std::make_shared<dsrt::OwnedTensor>(specs[o].dtype, specs[o].shape);
      outRefs[o] = values[o]->ref();
      outputs.push_back(&outRefs[o]);
    }
    if (!dsrt::ops::compute(name, *attrs, inputs, outputs).isOk())
      values.assign(specs.size(), nullptr);
  }
  for (auto [o, result] : llvm::enumerate(op->getResults())) {
    if (o >= specs.size())
      return op->emitOpError("the kernel gives fewer results than the op has");
    set(result, specs[o].dtype, specs[o].shape, values[o]);
  }
  return success();
}

} // namespace

FailureOr<ShapeBounds> evaluateShapeBounds(func::FuncOp func,
                                           ArrayRef<SmallVector<int64_t>> inputShapes,
                                           bool dynamicFallback) {
  ShapeBounds bounds;
  for (auto [argument, shape] : llvm::zip(func.getArguments(), inputShapes))
    bounds.entries[argument] = {runtimeDType(argument.getType()), shape, nullptr};
  BoundEvaluator evaluator(bounds, func, dynamicFallback);
  if (failed(evaluator.evaluateBlock(func.getBody().front())))
    return failure();
  return bounds;
}

} // namespace dsc
