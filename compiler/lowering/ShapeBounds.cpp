#include "compiler/lowering/ShapeBounds.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"

#include <cstring>

using namespace mlir;

namespace dsc {

// Tensors up to this size keep their values during shape evaluation when they are computed
// from known values: the shapes, indices and axes that later ops' shapes depend on.
constexpr int64_t kTrackedValueElements = 64;

namespace {

class BoundEvaluator {
public:
  explicit BoundEvaluator(ShapeBounds &bounds) : bounds_(bounds) {}
  LogicalResult evaluateBlock(Block &block);

private:
  LogicalResult evaluateOp(Operation *op);
  LogicalResult evaluateIf(onnx::IfOp op);
  LogicalResult setUnbounded(Operation *op) {
    for (Value result : op->getResults())
      bounds_.entries[result] = {runtimeDType(result.getType()), {}, nullptr, false};
    return success();
  }
  void set(Value value, dsrt::DType dtype, const dsrt::Shape &shape,
           std::shared_ptr<dsrt::OwnedTensor> data = nullptr) {
    bounds_.entries[value] = {dtype, SmallVector<int64_t>(shape.begin(), shape.end()),
                              std::move(data)};
  }
  ShapeBounds &bounds_;
};

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
    // dynamic; any other failure is an error in the model.
    if (status.message().find(dsrt::ops::kUnknownValue) != std::string::npos)
      return setUnbounded(op);
    return op->emitOpError() << "cannot be bounded under the plan's limits: "
                             << status.message();
  }

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
                                           ArrayRef<SmallVector<int64_t>> inputShapes) {
  ShapeBounds bounds;
  for (auto [argument, shape] : llvm::zip(func.getArguments(), inputShapes))
    bounds.entries[argument] = {runtimeDType(argument.getType()), shape, nullptr};
  BoundEvaluator evaluator(bounds);
  if (failed(evaluator.evaluateBlock(func.getBody().front())))
    return failure();
  return bounds;
}

} // namespace dsc
