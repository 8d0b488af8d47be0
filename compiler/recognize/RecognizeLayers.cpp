// dsc-recognize-layers: see Passes.td.
//
// The importer leaves most intermediate types unranked, and the patterns need ranks and
// hidden sizes. So the pass first evaluates the graph's shapes with the runtime's kernels
// (compiler/lowering/ShapeBounds) at a few splits of batch, cached and new tokens and
// refines every type that all of them agree on: a dimension that is the same at every
// probe is static, one that changes is dynamic. Then the patterns run greedily; each
// declines with the reason it gives to notifyMatchFailure, and the reasons of ops that stay
// generic go to the report.
#include "compiler/recognize/Passes.h"
#include "compiler/recognize/RecognitionReport.h"

#include "compiler/lowering/ShapeBounds.h"
#include "compiler/lowering/SymbolicDims.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cmath>
#include <functional>
#include <map>
#include <optional>

namespace dsc {
#define GEN_PASS_DEF_RECOGNIZELAYERS
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

//===----------------------------------------------------------------------===//
// Shapes at probes, and the types they prove.
//===----------------------------------------------------------------------===//

// Batch, cached and new tokens of each probe: distinct numbers, so that a dimension equal
// at every probe does not depend on them. Optimum's merged decoder runs its cache branch
// only with one new token and its other branch only without cached tokens, so two probes
// have each.
using Probe = TokenSplit;
constexpr Probe kProbes[] = {{2, 3, 5}, {3, 4, 7}, {2, 6, 1}, {3, 5, 1}, {2, 0, 5}, {3, 0, 7}};

using ProbeShapes = llvm::DenseMap<Value, SmallVector<SmallVector<int64_t>, 6>>;
// Values seen at a probe with more than one new token, and at one with cached tokens: for
// a value seen only at the others, a dimension of 1 may be the new tokens and one of 0 the
// cached ones.
struct ProbeCoverage {
  llvm::DenseSet<Value> multiToken, withPast;
};

// Shapes of every value at each probe the function runs at (a probe it cannot run at, or a
// value whose shape depends on input values, contributes nothing).
ProbeShapes probeShapes(func::FuncOp func, ProbeCoverage &coverage) {
  ProbeShapes shapes;
  for (BlockArgument argument : func.getArguments())
    if (!isa<RankedTensorType>(argument.getType()))
      return shapes;
  InputDims inputDims = InputDims::of(func);
  for (const Probe &probe : kProbes) {
    SmallVector<SmallVector<int64_t>> inputs;
    for (unsigned index = 0; index < func.getNumArguments(); ++index)
      inputs.push_back(inputDims.shapeAt(index, probe));
    FailureOr<ShapeBounds> bounds;
    {
      ScopedDiagnosticHandler silence(func.getContext(), [](Diagnostic &) { return success(); });
      bounds = evaluateShapeBounds(func, inputs);
    }
    if (failed(bounds))
      continue;
    for (auto &[value, entry] : bounds->entries) {
      if (!entry.bounded)
        continue;
      shapes[value].push_back(entry.shape);
      if (probe.fresh > 1)
        coverage.multiToken.insert(value);
      if (probe.past > 0)
        coverage.withPast.insert(value);
    }
  }
  return shapes;
}

// The type the probes prove for `value`, or null when fewer than two probes saw it or they
// disagree on its rank.
RankedTensorType provenType(Value value, const ProbeShapes &shapes,
                            const ProbeCoverage &coverage) {
  auto it = shapes.find(value);
  if (it == shapes.end() || it->second.size() < 2)
    return {};
  const SmallVector<SmallVector<int64_t>, 6> &seen = it->second;
  SmallVector<int64_t> dims(seen.front().begin(), seen.front().end());
  for (const auto &shape : seen) {
    if (shape.size() != dims.size())
      return {};
    for (auto [d, size] : llvm::enumerate(shape))
      if (dims[d] != size)
        dims[d] = ShapedType::kDynamic;
  }
  for (int64_t &dim : dims)
    if ((dim == 1 && !coverage.multiToken.contains(value)) ||
        (dim == 0 && !coverage.withPast.contains(value)))
      dim = ShapedType::kDynamic;
  auto type = cast<TensorType>(value.getType());
  if (auto ranked = dyn_cast<RankedTensorType>(type)) {
    if (ranked.getRank() != static_cast<int64_t>(dims.size()))
      return {};
    for (auto [d, size] : llvm::enumerate(ranked.getShape()))
      if (!ShapedType::isDynamic(size))
        dims[d] = size;
  }
  return RankedTensorType::get(dims, type.getElementType());
}

// Refines the result types of the onnx ops (If branches included); the function's result
// types follow what it returns.
void refineTypes(func::FuncOp func, const ProbeShapes &shapes, const ProbeCoverage &coverage) {
  func.walk([&](Operation *op) {
    // An If's bound is the larger of its branches, not a type both branches have.
    if (!op->getDialect() || op->getDialect()->getNamespace() != "onnx" ||
        op->getNumRegions() != 0)
      return;
    for (Value result : op->getResults()) {
      if (!isa<TensorType>(result.getType()))
        continue;
      if (RankedTensorType type = provenType(result, shapes, coverage))
        result.setType(type);
    }
  });
}

void syncFunctionType(func::FuncOp func) {
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  auto type = FunctionType::get(func.getContext(), func.getArgumentTypes(),
                                ret.getOperandTypes());
  if (type != func.getFunctionType())
    func.setFunctionType(type);
}

//===----------------------------------------------------------------------===//
// Matching helpers.
//===----------------------------------------------------------------------===//

template <typename OpTy> OpTy defining(Value value) {
  return value ? value.getDefiningOp<OpTy>() : OpTy();
}

// A one-element constant (any rank), as a double.
std::optional<double> scalarConstant(Value value) {
  auto constant = defining<onnx::ConstantOp>(value);
  if (!constant)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || dense.getNumElements() != 1)
    return std::nullopt;
  if (isa<FloatType>(dense.getElementType()))
    return (*dense.getValues<APFloat>().begin()).convertToDouble();
  if (isa<IntegerType>(dense.getElementType()))
    return static_cast<double>((*dense.getValues<APInt>().begin()).getSExtValue());
  return std::nullopt;
}

bool near(std::optional<double> value, double expected, double tolerance = 1e-6) {
  return value && std::fabs(*value - expected) <= tolerance * std::max(1.0, std::fabs(expected));
}

RankedTensorType rankedFloat(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType()) ? type : RankedTensorType();
}

// A float-to-float Cast (the fp32 round trips exporters put around norms) looked through.
Value throughCast(Value value) {
  if (auto cast = defining<onnx::CastOp>(value))
    if (isa<FloatType>(getElementTypeOrSelf(cast.getInput().getType())) &&
        isa<FloatType>(getElementTypeOrSelf(cast.getType())))
      return cast.getInput();
  return value;
}

// The users of `value`, which must all be in `group`.
bool usedOnlyBy(Value value, const llvm::SmallPtrSetImpl<Operation *> &group) {
  return llvm::all_of(value.getUsers(), [&](Operation *user) { return group.contains(user); });
}

// Axes of a Reduce op (operand or default), normalised against `rank`.
std::optional<SmallVector<int64_t>> reduceAxes(Value axes, int64_t rank) {
  if (!axes || isa<NoneType>(axes.getType()))
    return std::nullopt;
  auto constant = defining<onnx::ConstantOp>(axes);
  if (!constant)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense)
    return std::nullopt;
  SmallVector<int64_t> result;
  for (APInt axis : dense.getValues<APInt>()) {
    int64_t a = axis.getSExtValue();
    result.push_back(a < 0 ? a + rank : a);
  }
  return result;
}

// A ReduceMean over the last dimension only, keeping it.
bool isLastAxisMean(onnx::ReduceMeanOp mean) {
  auto type = dyn_cast<RankedTensorType>(mean.getData().getType());
  if (!type || mean.getKeepdims() != 1)
    return false;
  std::optional<SmallVector<int64_t>> axes = reduceAxes(mean.getAxes(), type.getRank());
  return axes && axes->size() == 1 && axes->front() == type.getRank() - 1;
}

// The other operand of a binary op, when one of them is `value`.
Value otherOperand(Operation *op, Value value) {
  if (op->getNumOperands() != 2)
    return {};
  if (op->getOperand(0) == value)
    return op->getOperand(1);
  if (op->getOperand(1) == value)
    return op->getOperand(0);
  return {};
}

Operation *singleUser(Value value) {
  if (!value.hasOneUse())
    return nullptr;
  return *value.getUsers().begin();
}

// A weight as a tfm.weight (optionally transposed [in, out] -> [out, in]), created next to
// the onnx.Weight so that it dominates every use.
Value tfmWeight(PatternRewriter &rewriter, onnx::WeightOp weight, bool transpose) {
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointAfter(weight);
  SmallVector<Attribute> transforms;
  if (transpose)
    transforms.push_back(tfm::TransposeAttr::get(rewriter.getContext(), {1, 0}));
  ArrayAttr transformList = transforms.empty() ? ArrayAttr() : rewriter.getArrayAttr(transforms);
  // One tfm.weight per weight and transforms: the earlier ones sit right after the onnx.Weight.
  for (Operation *op = weight->getNextNode(); op && isa<tfm::WeightOp>(op); op = op->getNextNode()) {
    auto existing = cast<tfm::WeightOp>(op);
    if (existing.getName() == weight.getName() && existing.getTransformsAttr() == transformList)
      return existing;
  }
  return tfm::WeightOp::create(rewriter, weight.getLoc(), weight.getName(),
                               cast<RankedTensorType>(weight.getType()), transforms);
}

// A 1-D weight of `size` elements (a norm's scale or bias, a linear bias).
onnx::WeightOp vectorWeight(Value value, int64_t size) {
  auto weight = defining<onnx::WeightOp>(value);
  if (!weight)
    return {};
  auto type = cast<RankedTensorType>(weight.getType());
  if (type.getRank() != 1 || (size >= 0 && type.getDimSize(0) != size) ||
      !isa<FloatType>(type.getElementType()))
    return {};
  return weight;
}

// The value is a graph output, possibly through a float Cast (GPT-J's logits).
bool returnsValue(Value value) {
  return llvm::any_of(value.getUsers(), [&](Operation *user) {
    if (isa<func::ReturnOp, onnx::YieldOp>(user))
      return true;
    auto cast = dyn_cast<onnx::CastOp>(user);
    return cast && throughCast(cast.getOutput()) == value && returnsValue(cast.getOutput());
  });
}

//===----------------------------------------------------------------------===//
// Base: patterns record why they decline an op, for the report.
//===----------------------------------------------------------------------===//

using DeclineLog = llvm::DenseMap<Operation *, std::string>;

template <typename OpTy> struct RecognitionPattern : OpRewritePattern<OpTy> {
  RecognitionPattern(MLIRContext *context, DeclineLog &log)
      : OpRewritePattern<OpTy>(context), log(log) {}

  LogicalResult decline(PatternRewriter &rewriter, Operation *op, const llvm::Twine &reason) const {
    std::string text = reason.str();
    log[op] = text;
    return rewriter.notifyMatchFailure(op, text);
  }
  void recognised(Operation *op) const { log.erase(op); }

  DeclineLog &log;
};

//===----------------------------------------------------------------------===//
// Embedding: Gather(table [rows, hidden], ids) on axis 0.
//===----------------------------------------------------------------------===//

struct EmbeddingPattern : RecognitionPattern<onnx::GatherOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::GatherOp gather, PatternRewriter &rewriter) const override {
    auto table = defining<onnx::WeightOp>(gather.getData());
    if (!table)
      return failure(); // shape arithmetic, not a lookup
    auto tableType = cast<RankedTensorType>(table.getType());
    if (tableType.getRank() != 2 || !isa<FloatType>(tableType.getElementType()))
      return decline(rewriter, gather, "the table is not a 2-D float weight");
    if (gather.getAxis() != 0)
      return decline(rewriter, gather, "the lookup is not along the table's rows (axis 0)");
    auto ids = dyn_cast<RankedTensorType>(gather.getIndices().getType());
    if (!ids || ids.getRank() < 1)
      return decline(rewriter, gather, "the ids have no known rank of at least 1");
    SmallVector<int64_t> shape(ids.getShape());
    shape.push_back(tableType.getDimSize(1));
    auto type = RankedTensorType::get(shape, tableType.getElementType());
    Value weight = tfmWeight(rewriter, table, /*transpose=*/false);
    auto embedding = tfm::EmbeddingOp::create(rewriter, gather.getLoc(), type, gather.getIndices(),
                                              weight, rewriter.getI64IntegerAttr(0),
                                              IntegerAttr());
    recognised(gather);
    rewriter.replaceOp(gather, embedding.getOutput());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Norms.
//===----------------------------------------------------------------------===//

// onnx.LayerNormalization (opset 17) over the last axis.
struct LayerNormOpPattern : RecognitionPattern<onnx::LayerNormalizationOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::LayerNormalizationOp norm,
                                PatternRewriter &rewriter) const override {
    RankedTensorType type = rankedFloat(norm.getX());
    if (!type)
      return decline(rewriter, norm, "the input has no known rank");
    int64_t axis = static_cast<int64_t>(norm.getAxis());
    if (axis < 0)
      axis += type.getRank();
    if (axis != type.getRank() - 1)
      return decline(rewriter, norm, "it normalises more than the last axis");
    if (!norm.getMean().use_empty() || !norm.getInvStdDev().use_empty())
      return decline(rewriter, norm, "its mean or inverse deviation is used");
    int64_t hidden = type.getDimSize(axis);
    onnx::WeightOp scale = vectorWeight(norm.getScale(), hidden);
    if (!scale)
      return decline(rewriter, norm, "the scale is not a weight of the hidden size");
    onnx::WeightOp bias;
    if (!isa<NoneType>(norm.getB().getType()) && !(bias = vectorWeight(norm.getB(), hidden)))
      return decline(rewriter, norm, "the bias is not a weight of the hidden size");
    auto layerNorm = tfm::LayerNormOp::create(
        rewriter, norm.getLoc(), type, norm.getX(), tfmWeight(rewriter, scale, false),
        bias ? tfmWeight(rewriter, bias, false) : Value(),
        rewriter.getF32FloatAttr(norm.getEpsilon().convertToFloat()));
    recognised(norm);
    rewriter.replaceAllUsesWith(norm.getY(), layerNorm.getOutput());
    rewriter.eraseOp(norm);
    return success();
  }
};

// The decomposed norms, anchored on the variance ReduceMean(Pow(d, 2)) (or Mul(d, d)):
//   LayerNorm: d = Sub(x, ReduceMean(x)); Div(d, Sqrt(Add(var, eps))) -> Mul scale -> Add bias
//   RMSNorm:   d = x; Mul(x, Div(1, Sqrt(Add(var, eps)))) (or Reciprocal, or Div(x, Sqrt))
//              -> Mul weight
// with float Casts (fp16 exports) allowed around d and before the scale.
struct DecomposedNormPattern : RecognitionPattern<onnx::ReduceMeanOp> {
  using RecognitionPattern::RecognitionPattern;

  LogicalResult matchAndRewrite(onnx::ReduceMeanOp variance,
                                PatternRewriter &rewriter) const override {
    Operation *square = variance.getData().getDefiningOp();
    Value deviation;
    if (auto pow = dyn_cast_or_null<onnx::PowOp>(square)) {
      if (!near(scalarConstant(pow.getY()), 2.0))
        return failure();
      deviation = pow.getX();
    } else if (auto mul = dyn_cast_or_null<onnx::MulOp>(square)) {
      if (mul.getA() != mul.getB())
        return failure();
      deviation = mul.getA();
    } else {
      return failure(); // a mean, not a variance
    }
    llvm::SmallPtrSet<Operation *, 16> group;
    group.insert(square);
    group.insert(variance);
    if (!isLastAxisMean(variance))
      return decline(rewriter, variance, "the variance is not over the last axis alone");

    // eps and the square root.
    Operation *addEps = singleUser(variance.getReduced());
    std::optional<double> eps =
        addEps && isa<onnx::AddOp>(addEps)
            ? scalarConstant(otherOperand(addEps, variance.getReduced()))
            : std::nullopt;
    if (!eps)
      return decline(rewriter, variance, "the variance is not followed by Add(eps)");
    auto sqrt = dyn_cast_or_null<onnx::SqrtOp>(singleUser(addEps->getResult(0)));
    if (!sqrt)
      return decline(rewriter, variance, "Add(eps) is not followed by Sqrt");
    group.insert(addEps);
    group.insert(sqrt);

    // LayerNorm when the deviation is x - mean(x).
    Value centred = throughCast(deviation);
    if (auto sub = defining<onnx::SubOp>(centred)) {
      auto mean = defining<onnx::ReduceMeanOp>(sub.getB());
      if (mean && mean.getData() == sub.getA())
        return rewriteLayerNorm(rewriter, variance, group, sub, mean, deviation, sqrt, *eps);
    }
    return rewriteRmsNorm(rewriter, variance, group, deviation, sqrt, *eps);
  }

  // Mul(y, scale) [+ Add(bias)] after the normalised value (possibly through a Cast).
  struct Affine {
    Operation *mul = nullptr, *add = nullptr;
    onnx::WeightOp scale, bias;
    Value output;
  };
  Affine matchAffine(Value normalised, int64_t hidden, bool withBias,
                     llvm::SmallPtrSetImpl<Operation *> &group) const {
    Affine affine;
    Value y = normalised;
    if (Operation *user = singleUser(y); user && isa<onnx::CastOp>(user)) {
      group.insert(user);
      y = user->getResult(0);
    }
    Operation *mul = singleUser(y);
    if (!mul || !isa<onnx::MulOp>(mul))
      return affine;
    affine.scale = vectorWeight(otherOperand(mul, y), hidden);
    if (!affine.scale)
      return affine;
    affine.mul = mul;
    affine.output = mul->getResult(0);
    if (!withBias)
      return affine;
    if (Operation *add = singleUser(affine.output); add && isa<onnx::AddOp>(add))
      if (onnx::WeightOp bias = vectorWeight(otherOperand(add, affine.output), hidden)) {
        affine.add = add;
        affine.bias = bias;
        affine.output = add->getResult(0);
      }
    return affine;
  }

  // The norm's input: x, or what a float Cast converted into x when the norm's output has
  // that type again (the fp16 round trip).
  static Value normInput(Value x, Value output) {
    Value inner = throughCast(x);
    if (inner != x && getElementTypeOrSelf(inner.getType()) == getElementTypeOrSelf(output.getType()))
      return inner;
    return x;
  }

  LogicalResult rewriteLayerNorm(PatternRewriter &rewriter, onnx::ReduceMeanOp variance,
                                 llvm::SmallPtrSetImpl<Operation *> &group, onnx::SubOp sub,
                                 onnx::ReduceMeanOp mean, Value deviation,
                                 onnx::SqrtOp sqrt, double eps) const {
    if (!isLastAxisMean(mean))
      return decline(rewriter, variance, "the mean is not over the last axis alone");
    auto div = dyn_cast_or_null<onnx::DivOp>(singleUser(sqrt.getY()));
    if (!div || throughCast(div.getA()) != sub.getResult())
      return decline(rewriter, variance, "the deviation is not divided by the square root");
    group.insert(sub);
    group.insert(mean);
    group.insert(div);
    if (deviation != sub.getResult())
      group.insert(deviation.getDefiningOp());
    if (div.getA() != sub.getResult() && div.getA() != deviation)
      group.insert(div.getA().getDefiningOp());
    Value x = sub.getA();
    RankedTensorType inputType = rankedFloat(x);
    if (!inputType)
      return decline(rewriter, variance, "the input has no known rank");
    int64_t hidden = inputType.getDimSize(inputType.getRank() - 1);
    Affine affine = matchAffine(div.getC(), hidden, /*withBias=*/true, group);
    if (!affine.mul)
      return decline(rewriter, variance, "the normalised value is not scaled by a weight");
    group.insert(affine.mul);
    if (affine.add)
      group.insert(affine.add);
    for (Operation *op : group)
      if (op != affine.output.getDefiningOp())
        for (Value result : op->getResults())
          if (!usedOnlyBy(result, group))
            return decline(rewriter, variance,
                           "an intermediate value is used outside the layer norm");
    Value input = normInput(x, affine.output);
    RankedTensorType type = rankedFloat(input);
    if (getElementTypeOrSelf(affine.output.getType()) != type.getElementType())
      return decline(rewriter, variance, "the output type differs from the input type");
    Operation *anchor = affine.output.getDefiningOp();
    rewriter.setInsertionPoint(anchor);
    auto norm = tfm::LayerNormOp::create(
        rewriter, anchor->getLoc(), type, input, tfmWeight(rewriter, affine.scale, false),
        affine.bias ? tfmWeight(rewriter, affine.bias, false) : Value(),
        rewriter.getF32FloatAttr(static_cast<float>(eps)));
    recognised(variance);
    rewriter.replaceAllUsesWith(affine.output, norm.getOutput());
    return success();
  }

  LogicalResult rewriteRmsNorm(PatternRewriter &rewriter, onnx::ReduceMeanOp variance,
                               llvm::SmallPtrSetImpl<Operation *> &group, Value deviation,
                               onnx::SqrtOp sqrt, double eps) const {
    Value x = deviation;
    Operation *user = singleUser(sqrt.getY());
    Value normalised;
    if (auto div = dyn_cast_or_null<onnx::DivOp>(user)) {
      group.insert(div);
      if (div.getA() == x) {
        normalised = div.getC(); // x / sqrt(...)
      } else if (near(scalarConstant(div.getA()), 1.0)) {
        Operation *mul = singleUser(div.getC());
        if (mul && isa<onnx::MulOp>(mul) && otherOperand(mul, div.getC()) == x) {
          group.insert(mul);
          normalised = mul->getResult(0);
        }
      }
    } else if (auto reciprocal = dyn_cast_or_null<onnx::ReciprocalOp>(user)) {
      group.insert(reciprocal);
      Operation *mul = singleUser(reciprocal.getY());
      if (mul && isa<onnx::MulOp>(mul) && otherOperand(mul, reciprocal.getY()) == x) {
        group.insert(mul);
        normalised = mul->getResult(0);
      }
    }
    if (!normalised)
      return decline(rewriter, variance,
                     "the input is not multiplied by the reciprocal square root");
    RankedTensorType inputType = rankedFloat(x);
    if (!inputType)
      return decline(rewriter, variance, "the input has no known rank");
    int64_t hidden = inputType.getDimSize(inputType.getRank() - 1);
    Affine affine = matchAffine(normalised, hidden, /*withBias=*/false, group);
    if (!affine.mul)
      return decline(rewriter, variance, "the normalised value is not scaled by a weight");
    group.insert(affine.mul);
    for (Operation *op : group)
      if (op != affine.mul)
        for (Value result : op->getResults())
          if (!usedOnlyBy(result, group))
            return decline(rewriter, variance, "an intermediate value is used outside the RMS norm");
    Value input = normInput(x, affine.output);
    RankedTensorType type = rankedFloat(input);
    if (getElementTypeOrSelf(affine.output.getType()) != type.getElementType())
      return decline(rewriter, variance, "the output type differs from the input type");
    rewriter.setInsertionPoint(affine.mul);
    auto norm = tfm::RmsNormOp::create(rewriter, affine.mul->getLoc(), type, input,
                                       tfmWeight(rewriter, affine.scale, false),
                                       rewriter.getF32FloatAttr(static_cast<float>(eps)));
    recognised(variance);
    rewriter.replaceAllUsesWith(affine.output, norm.getOutput());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Linear layers and the LM head.
//===----------------------------------------------------------------------===//

// A weight as [out, in]: an onnx.Weight [in, out] (transposed when the plan is written), or
// a Transpose of a weight already [out, in] (a tied embedding table).
struct LinearWeight {
  onnx::WeightOp weight;
  bool transpose = false;
  int64_t in = 0, out = 0;
};
std::optional<LinearWeight> linearWeight(Value value) {
  LinearWeight result;
  if (auto weight = defining<onnx::WeightOp>(value)) {
    result.weight = weight;
    result.transpose = true;
  } else if (auto transpose = defining<onnx::TransposeOp>(value)) {
    result.weight = defining<onnx::WeightOp>(transpose.getData());
    auto perm = transpose.getPerm();
    if (!result.weight ||
        (perm && (perm->size() != 2 || cast<IntegerAttr>((*perm)[0]).getInt() != 1)))
      return std::nullopt;
  } else {
    return std::nullopt;
  }
  auto type = cast<RankedTensorType>(result.weight.getType());
  if (type.getRank() != 2 || !isa<FloatType>(type.getElementType()))
    return std::nullopt;
  result.in = type.getDimSize(result.transpose ? 0 : 1);
  result.out = type.getDimSize(result.transpose ? 1 : 0);
  return result;
}

RankedTensorType withLastDim(RankedTensorType type, int64_t last) {
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = last;
  return RankedTensorType::get(shape, type.getElementType());
}

// MatMul(x, W) (+ Add(bias)): tfm.linear, or tfm.lm_head when the result is the output.
struct MatMulPattern : RecognitionPattern<onnx::MatMulOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::MatMulOp matmul, PatternRewriter &rewriter) const override {
    std::optional<LinearWeight> weight = linearWeight(matmul.getB());
    auto rightType = dyn_cast<RankedTensorType>(matmul.getB().getType());
    if (!weight && rightType && rightType.getRank() >= 3)
      return decline(rewriter, matmul, kProductOfActivations);
    if (!weight)
      return decline(rewriter, matmul, "the right operand is not a 2-D weight");
    RankedTensorType inputType = rankedFloat(matmul.getA());
    if (!inputType || inputType.getRank() < 2)
      return decline(rewriter, matmul, "the input has no known rank of at least 2");
    int64_t in = inputType.getDimSize(inputType.getRank() - 1);
    if (!ShapedType::isDynamic(in) && in != weight->in)
      return decline(rewriter, matmul, "the input features do not match the weight");
    auto type = withLastDim(inputType, weight->out);
    Value result = matmul.getY();
    Value weightValue = tfmWeight(rewriter, weight->weight, weight->transpose);

    bool isHead = returnsValue(result);
    Operation *biasAdd = singleUser(result);
    onnx::WeightOp bias;
    if (biasAdd && isa<onnx::AddOp>(biasAdd))
      bias = vectorWeight(otherOperand(biasAdd, result), weight->out);
    if (bias && returnsValue(biasAdd->getResult(0)))
      isHead = true;
    rewriter.setInsertionPoint(matmul);
    if (isHead) {
      // The bias (GPT-J's untied head) stays an onnx.Add after the head.
      auto head = tfm::LmHeadOp::create(rewriter, matmul.getLoc(), type, matmul.getA(),
                                        weightValue, /*scales=*/Value(),
                                        rewriter.getI64IntegerAttr(0), IntegerAttr());
      recognised(matmul);
      rewriter.replaceAllUsesWith(result, head.getLogits());
      rewriter.eraseOp(matmul);
      return success();
    }
    auto linear = tfm::LinearOp::create(rewriter, matmul.getLoc(), type, matmul.getA(),
                                        weightValue,
                                        bias ? tfmWeight(rewriter, bias, false) : Value(),
                                        Value(), tfm::Parallelism::replicated);
    recognised(matmul);
    if (bias) {
      rewriter.replaceAllUsesWith(biasAdd->getResult(0), linear.getOutput());
      rewriter.eraseOp(biasAdd);
    } else {
      rewriter.replaceAllUsesWith(result, linear.getOutput());
    }
    rewriter.eraseOp(matmul);
    return success();
  }
};

// Gemm(A, B, C) with alpha = beta = 1: tfm.linear; GPT-2's Conv1D
// Reshape(x, [-1, in]) -> Gemm -> Reshape(back to x's leading dimensions) becomes one
// tfm.linear on x when every probe shows the reshapes restore x's shape.
struct GemmPattern : RecognitionPattern<onnx::GemmOp> {
  GemmPattern(MLIRContext *context, DeclineLog &log, const ProbeShapes &shapes)
      : RecognitionPattern(context, log), shapes(shapes) {}

  LogicalResult matchAndRewrite(onnx::GemmOp gemm, PatternRewriter &rewriter) const override {
    if (gemm.getTransA() != 0)
      return decline(rewriter, gemm, "the input is transposed (transA)");
    if (gemm.getAlpha().convertToDouble() != 1.0 ||
        (!isa<NoneType>(gemm.getC().getType()) && gemm.getBeta().convertToDouble() != 1.0))
      return decline(rewriter, gemm, "alpha or beta is not 1");
    auto weight = defining<onnx::WeightOp>(gemm.getB());
    auto weightType = weight ? cast<RankedTensorType>(weight.getType()) : RankedTensorType();
    if (!weightType || weightType.getRank() != 2)
      return decline(rewriter, gemm, "the right operand is not a 2-D weight");
    bool transpose = gemm.getTransB() == 0;
    int64_t in = weightType.getDimSize(transpose ? 0 : 1);
    int64_t out = weightType.getDimSize(transpose ? 1 : 0);
    onnx::WeightOp bias;
    if (!isa<NoneType>(gemm.getC().getType()) && !(bias = vectorWeight(gemm.getC(), out)))
      return decline(rewriter, gemm, "the bias is not a 1-D weight of the output size");
    RankedTensorType inputType = rankedFloat(gemm.getA());
    if (!inputType || inputType.getRank() != 2)
      return decline(rewriter, gemm, "the input is not known to be 2-D");
    if (!ShapedType::isDynamic(inputType.getDimSize(1)) && inputType.getDimSize(1) != in)
      return decline(rewriter, gemm, "the input features do not match the weight");

    Value input = gemm.getA();
    Value replaced = gemm.getY();
    RankedTensorType type = withLastDim(inputType, out);
    // Conv1D: look through the reshapes around the Gemm.
    auto flatten = defining<onnx::ReshapeOp>(gemm.getA());
    auto restore = dyn_cast_or_null<onnx::ReshapeOp>(singleUser(gemm.getY()));
    if (flatten && restore) {
      Value x = flatten.getData();
      RankedTensorType xType = rankedFloat(x);
      RankedTensorType restoredType = rankedFloat(restore.getReshaped());
      if (xType && restoredType && xType.getRank() == restoredType.getRank() &&
          restoredType.getDimSize(restoredType.getRank() - 1) == out && restoresLeading(x, restore.getReshaped())) {
        input = x;
        replaced = restore.getReshaped();
        type = withLastDim(xType, out);
      }
    }
    rewriter.setInsertionPoint(replaced.getDefiningOp());
    auto linear = tfm::LinearOp::create(rewriter, gemm.getLoc(), type, input,
                                        tfmWeight(rewriter, weight, transpose),
                                        bias ? tfmWeight(rewriter, bias, false) : Value(),
                                        Value(), tfm::Parallelism::replicated);
    recognised(gemm);
    rewriter.replaceAllUsesWith(replaced, linear.getOutput());
    if (replaced != gemm.getY())
      rewriter.eraseOp(replaced.getDefiningOp());
    rewriter.eraseOp(gemm);
    return success();
  }

  // At every probe that saw both, `restored` has the leading dimensions of `x`.
  bool restoresLeading(Value x, Value restored) const {
    auto a = shapes.find(x), b = shapes.find(restored);
    if (a == shapes.end() || b == shapes.end() || a->second.size() != b->second.size() ||
        a->second.size() < 2)
      return false;
    for (auto [sx, sr] : llvm::zip(a->second, b->second)) {
      if (sx.size() != sr.size())
        return false;
      for (size_t d = 0; d + 1 < sx.size(); ++d)
        if (sx[d] != sr[d])
          return false;
    }
    return true;
  }

  const ProbeShapes &shapes;
};

//===----------------------------------------------------------------------===//
// Activations: the elementwise subgraph around an Erf, Tanh or Sigmoid, checked
// numerically against each activation (which covers every order the exporters emit).
//===----------------------------------------------------------------------===//

bool isElementwise(Operation *op) {
  return isa<onnx::AddOp, onnx::SubOp, onnx::MulOp, onnx::DivOp, onnx::PowOp, onnx::NegOp,
             onnx::SqrtOp, onnx::ErfOp, onnx::TanhOp, onnx::SigmoidOp>(op) ||
         (isa<onnx::CastOp>(op) && isa<FloatType>(getElementTypeOrSelf(op->getResult(0))) &&
          isa<FloatType>(getElementTypeOrSelf(op->getOperand(0))));
}

double referenceActivation(tfm::ActivationKind kind, double x) {
  switch (kind) {
  case tfm::ActivationKind::gelu_erf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  case tfm::ActivationKind::gelu_tanh:
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  case tfm::ActivationKind::gelu_quick: return x / (1 + std::exp(-1.702 * x));
  case tfm::ActivationKind::silu: return x / (1 + std::exp(-x));
  case tfm::ActivationKind::relu: return x > 0 ? x : 0;
  }
  return 0;
}

struct ActivationRegion {
  Value input, output;
  llvm::SetVector<Operation *> ops;
};

// Evaluates the region at `points` (values of the input); nullopt when an op is not
// interpretable.
std::optional<std::vector<double>> evaluateRegion(const ActivationRegion &region,
                                                  const std::vector<double> &points) {
  llvm::DenseMap<Value, std::vector<double>> values;
  values[region.input] = points;
  auto operand = [&](Value v) -> std::optional<std::vector<double>> {
    if (auto it = values.find(v); it != values.end())
      return it->second;
    if (std::optional<double> c = scalarConstant(v))
      return std::vector<double>(points.size(), *c);
    return std::nullopt;
  };
  SmallVector<Operation *> ordered(region.ops.begin(), region.ops.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  for (Operation *op : ordered) {
    std::vector<std::vector<double>> in;
    for (Value v : op->getOperands()) {
      auto value = operand(v);
      if (!value)
        return std::nullopt;
      in.push_back(std::move(*value));
    }
    std::vector<double> out(points.size());
    for (size_t i = 0; i < points.size(); ++i) {
      double a = in[0][i], b = in.size() > 1 ? in[1][i] : 0;
      if (isa<onnx::AddOp>(op)) out[i] = a + b;
      else if (isa<onnx::SubOp>(op)) out[i] = a - b;
      else if (isa<onnx::MulOp>(op)) out[i] = a * b;
      else if (isa<onnx::DivOp>(op)) out[i] = a / b;
      else if (isa<onnx::PowOp>(op)) out[i] = std::pow(a, b);
      else if (isa<onnx::NegOp>(op)) out[i] = -a;
      else if (isa<onnx::SqrtOp>(op)) out[i] = std::sqrt(a);
      else if (isa<onnx::ErfOp>(op)) out[i] = std::erf(a);
      else if (isa<onnx::TanhOp>(op)) out[i] = std::tanh(a);
      else if (isa<onnx::SigmoidOp>(op)) out[i] = 1 / (1 + std::exp(-a));
      else if (isa<onnx::CastOp>(op)) out[i] = a;
      else return std::nullopt;
    }
    values[op->getResult(0)] = std::move(out);
  }
  return operand(region.output);
}

template <typename AnchorOp> struct ActivationPattern : RecognitionPattern<AnchorOp> {
  using RecognitionPattern<AnchorOp>::RecognitionPattern;
  using RecognitionPattern<AnchorOp>::decline;
  using RecognitionPattern<AnchorOp>::recognised;

  LogicalResult matchAndRewrite(AnchorOp anchor, PatternRewriter &rewriter) const override {
    ActivationRegion region;
    region.ops.insert(anchor);
    // Backwards: elementwise ops on one tensor and scalar constants, down to the input.
    RankedTensorType type = rankedFloat(anchor->getResult(0));
    if (!type)
      return decline(rewriter, anchor, "the activation's type is not known");
    SmallVector<Value> worklist = {anchor->getOperand(0)};
    llvm::SmallSetVector<Value, 2> leaves;
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      if (scalarConstant(v))
        continue;
      Operation *def = v.getDefiningOp();
      bool inner = def && isElementwise(def) && def->getBlock() == anchor->getBlock() &&
                   v.getType() == type &&
                   llvm::all_of(def->getOperands(), [&](Value o) {
                     return scalarConstant(o) || o.getType() == type;
                   });
      if (!inner) {
        leaves.insert(v);
        continue;
      }
      if (region.ops.insert(def))
        llvm::append_range(worklist, def->getOperands());
    }
    if (leaves.size() != 1)
      return decline(rewriter, anchor, "the elementwise subgraph has more than one input");
    region.input = leaves.front();
    // Forwards: every elementwise user of the input or the region whose operands are all
    // in it (0.5 * x, the final x * ...).
    bool grown = true;
    auto inRegion = [&](Value v) {
      return v == region.input || scalarConstant(v) ||
             (v.getDefiningOp() && region.ops.contains(v.getDefiningOp()));
    };
    while (grown) {
      grown = false;
      SmallVector<Value> frontier = {region.input};
      for (Operation *op : region.ops)
        frontier.push_back(op->getResult(0));
      for (Value v : frontier)
        for (Operation *user : v.getUsers())
          if (!region.ops.contains(user) && isElementwise(user) &&
              user->getBlock() == anchor->getBlock() && user->getResult(0).getType() == type &&
              llvm::all_of(user->getOperands(), inRegion))
            grown |= region.ops.insert(user);
    }
    SmallVector<Value> outputs;
    for (Operation *op : region.ops)
      if (!usedOnlyBy(op->getResult(0), llvm::SmallPtrSet<Operation *, 16>(region.ops.begin(),
                                                                          region.ops.end())))
        outputs.push_back(op->getResult(0));
    if (outputs.size() != 1)
      return decline(rewriter, anchor, "an intermediate value of the activation is used elsewhere");
    region.output = outputs.front();

    std::vector<double> points;
    for (double x = -10; x <= 10; x += 0.125)
      points.push_back(x);
    std::optional<std::vector<double>> values = evaluateRegion(region, points);
    if (!values)
      return decline(rewriter, anchor, "the subgraph cannot be evaluated");
    std::optional<tfm::ActivationKind> kind;
    for (tfm::ActivationKind candidate :
         {tfm::ActivationKind::gelu_erf, tfm::ActivationKind::gelu_tanh,
          tfm::ActivationKind::gelu_quick, tfm::ActivationKind::silu}) {
      bool same = true;
      for (size_t i = 0; i < points.size() && same; ++i) {
        double expected = referenceActivation(candidate, points[i]);
        same = std::fabs((*values)[i] - expected) <= 1e-6 + 1e-5 * std::fabs(expected);
      }
      if (same) {
        kind = candidate;
        break;
      }
    }
    if (!kind)
      return decline(rewriter, anchor, "the subgraph computes no known activation");
    Operation *last = region.output.getDefiningOp();
    rewriter.setInsertionPoint(last);
    auto activation = tfm::ActivationOp::create(rewriter, anchor->getLoc(), type, *kind,
                                                region.input);
    recognised(anchor);
    rewriter.replaceAllUsesWith(region.output, activation.getOutput());
    return success();
  }
};

// The activation ops that need no subgraph: Relu, and Gelu (opset 20 or com.microsoft).
struct ReluPattern : RecognitionPattern<onnx::ReluOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::ReluOp relu, PatternRewriter &rewriter) const override {
    RankedTensorType type = rankedFloat(relu.getX());
    if (!type)
      return decline(rewriter, relu, "the input is not a float tensor of known rank");
    recognised(relu);
    rewriter.replaceOpWithNewOp<tfm::ActivationOp>(relu, type, tfm::ActivationKind::relu,
                                                   relu.getX());
    return success();
  }
};

struct GeluPattern : RecognitionPattern<onnx::GeluOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::GeluOp gelu, PatternRewriter &rewriter) const override {
    RankedTensorType type = rankedFloat(gelu.getX());
    if (!type)
      return decline(rewriter, gelu, "the input has no known rank");
    tfm::ActivationKind kind = gelu.getApproximate() == "tanh" ? tfm::ActivationKind::gelu_tanh
                                                               : tfm::ActivationKind::gelu_erf;
    recognised(gelu);
    rewriter.replaceOpWithNewOp<tfm::ActivationOp>(gelu, type, kind, gelu.getX());
    return success();
  }
};

// act(gate) * up, the gated MLP (SwiGLU and friends).
struct GatedActPattern : OpRewritePattern<onnx::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(onnx::MulOp mul, PatternRewriter &rewriter) const override {
    for (auto [actValue, up] : {std::pair{mul.getA(), mul.getB()}, std::pair{mul.getB(), mul.getA()}}) {
      auto activation = defining<tfm::ActivationOp>(actValue);
      if (!activation || !actValue.hasOneUse() || up.getType() != actValue.getType() ||
          mul.getC().getType() != actValue.getType() || !defining<tfm::LinearOp>(up))
        continue;
      rewriter.setInsertionPoint(mul);
      auto gated = tfm::GatedActOp::create(rewriter, mul.getLoc(), actValue.getType(),
                                           activation.getKind(), activation.getInput(), up);
      rewriter.replaceOp(mul, gated.getOutput());
      rewriter.eraseOp(activation);
      return success();
    }
    return rewriter.notifyMatchFailure(mul, "not act(linear) * linear");
  }
};

//===----------------------------------------------------------------------===//
// Residual adds: a block's output added to its input, both [.., hidden].
//===----------------------------------------------------------------------===//

bool isBlockOutput(Value value) {
  Operation *def = value.getDefiningOp();
  return def && isa<tfm::LinearOp, tfm::EmbeddingOp, tfm::ResidualAddOp, tfm::AttentionOp>(def);
}

// `value` is computed from `source` by elementwise ops (a few levels deep).
bool dependsElementwise(Value value, Value source, int depth = 8) {
  if (value == source)
    return true;
  Operation *def = value.getDefiningOp();
  if (!def || depth == 0 || !isElementwise(def))
    return false;
  return llvm::any_of(def->getOperands(),
                      [&](Value operand) { return dependsElementwise(operand, source, depth - 1); });
}

struct ResidualAddPattern : OpRewritePattern<onnx::AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(onnx::AddOp add, PatternRewriter &rewriter) const override {
    RankedTensorType type = rankedFloat(add.getA());
    if (!type || type.getRank() < 2 || add.getB().getType() != type)
      return rewriter.notifyMatchFailure(add, "the operands are not tensors of one type");
    if (!isBlockOutput(add.getA()) && !isBlockOutput(add.getB()))
      return rewriter.notifyMatchFailure(add, "neither operand is a block's output");
    // x + 0.044715 x^3 inside a GELU is no residual connection.
    if (dependsElementwise(add.getA(), add.getB()) || dependsElementwise(add.getB(), add.getA()))
      return rewriter.notifyMatchFailure(add, "one operand is an elementwise function of the other");
    rewriter.replaceOpWithNewOp<tfm::ResidualAddOp>(add, type, add.getA(), add.getB());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// The pass.
//===----------------------------------------------------------------------===//

// Onnx ops a pattern anchors on; when they stay, the report says why.
bool isAnchor(Operation *op) {
  return isa<onnx::GatherOp, onnx::LayerNormalizationOp, onnx::ReduceMeanOp, onnx::MatMulOp,
             onnx::GemmOp, onnx::ErfOp, onnx::TanhOp, onnx::SigmoidOp, onnx::ReluOp,
             onnx::GeluOp>(op);
}

struct RecognizeLayersPass : impl::RecognizeLayersBase<RecognizeLayersPass> {
  using RecognizeLayersBase::RecognizeLayersBase;
  RecognizeLayersPass() = default;
  explicit RecognizeLayersPass(RecognitionDeclines *sink) : sink(sink) {}

  void runOnOperation() override {
    ModuleOp module = getOperation();
    DeclineLog log;
    for (auto func : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
      ProbeCoverage coverage;
      ProbeShapes shapes = probeShapes(func, coverage);
      refineTypes(func, shapes, coverage);
      MLIRContext *context = &getContext();
      RewritePatternSet patterns(context);
      patterns.add<EmbeddingPattern, LayerNormOpPattern, DecomposedNormPattern, MatMulPattern,
                   ReluPattern, GeluPattern, ActivationPattern<onnx::ErfOp>,
                   ActivationPattern<onnx::TanhOp>, ActivationPattern<onnx::SigmoidOp>>(context,
                                                                                          log);
      patterns.add<GemmPattern>(context, log, shapes);
      patterns.add<GatedActPattern, ResidualAddPattern>(context);
      GreedyRewriteConfig config;
      // Only the patterns rewrite: no folding, no constant hoisting, no region clean-up, so
      // what stays generic is exactly what the importer made.
      config.setUseTopDownTraversal(true)
          .enableFolding(false)
          .enableConstantCSE(false)
          .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
      if (failed(applyPatternsGreedily(func, std::move(patterns), config))) {
        func.emitError("layer recognition did not converge");
        return signalPassFailure();
      }
      syncFunctionType(func);
    }
    // What stayed generic, in program order.
    module.walk([&](Operation *op) {
      auto it = log.find(op);
      if (it == log.end() || !isAnchor(op))
        return;
      if (reportDeclines)
        op->emitRemark() << "left generic: " << it->second;
      if (sink)
        sink->generic.push_back({op->getName().stripDialect().str(), it->second});
    });
  }

  RecognitionDeclines *sink = nullptr;
};

} // namespace

std::unique_ptr<Pass> createRecognizeLayersWithReport(RecognitionDeclines *declines) {
  return std::make_unique<RecognizeLayersPass>(declines);
}

} // namespace dsc
