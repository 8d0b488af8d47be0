// dsc-recognize-layers: the matching helpers its patterns share.
#include "compiler/recognize/LayerMatching.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <functional>
#include <map>
#include <optional>

using namespace mlir;

namespace dsc::layers {


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

bool near(std::optional<double> value, double expected, double tolerance) {
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

bool isScalarConstant(Value value) {
  auto constant = value.getDefiningOp<onnx::ConstantOp>();
  auto type = constant ? dyn_cast<RankedTensorType>(constant.getType()) : RankedTensorType();
  return type && type.getNumElements() == 1;
}

// The value is a graph output, possibly through a float Cast (GPT-J's logits) or a
// monotonic cap, cap * tanh(x / cap) (Gemma-2's final_logit_softcapping), which keeps
// every row's order of the vocabulary.
bool returnsValue(Value value) {
  return llvm::any_of(value.getUsers(), [&](Operation *user) {
    if (isa<func::ReturnOp, onnx::YieldOp>(user))
      return true;
    if (auto cast = dyn_cast<onnx::CastOp>(user))
      return throughCast(cast.getOutput()) == value && returnsValue(cast.getOutput());
    bool byPositiveScalar = isa<onnx::DivOp, onnx::MulOp>(user) &&
                            user->getOperand(0) == value &&
                            isScalarConstant(user->getOperand(1)) &&
                            scalarConstant(user->getOperand(1)).value_or(0) > 0;
    if ((byPositiveScalar || isa<onnx::TanhOp>(user)) && value.hasOneUse())
      return returnsValue(user->getResult(0));
    return false;
  });
}


// A float elementwise op of one tensor and scalars (activation subgraphs, residual
// branches).
bool isElementwise(Operation *op) {
  return isa<onnx::AddOp, onnx::SubOp, onnx::MulOp, onnx::DivOp, onnx::PowOp, onnx::NegOp,
             onnx::SqrtOp, onnx::ErfOp, onnx::TanhOp, onnx::SigmoidOp>(op) ||
         (isa<onnx::CastOp>(op) && isa<FloatType>(getElementTypeOrSelf(op->getResult(0))) &&
          isa<FloatType>(getElementTypeOrSelf(op->getOperand(0))));
}

} // namespace dsc::layers
