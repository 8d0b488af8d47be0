// Verifiers of the onnx ops. They check what the types say statically (ranks, known
// dimensions, attribute ranges); dimensions that are dynamic are left to shape inference.
#include "dialects/onnx/IR/OnnxDialect.h"

#include "dialects/common/BranchVerification.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallBitVector.h"

using namespace mlir;

namespace dsc::onnx {

static RankedTensorType rankedOrNull(Type type) { return dyn_cast<RankedTensorType>(type); }

LogicalResult verifyAxis(Operation *op, Type type, int64_t axis, StringRef what) {
  auto ranked = rankedOrNull(type);
  if (!ranked)
    return success();
  int64_t rank = ranked.getRank();
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return op->emitOpError() << what << " " << axis << " is out of range for rank " << rank;
  return success();
}

LogicalResult verifyBroadcast(Operation *op) {
  SmallVector<RankedTensorType> inputs;
  bool allRanked = true;
  for (Type type : op->getOperandTypes()) {
    if (auto ranked = rankedOrNull(type))
      inputs.push_back(ranked);
    else
      allRanked = false;
  }
  int64_t rank = 0;
  for (auto type : inputs)
    rank = std::max(rank, type.getRank());
  // kDynamic: unknown; otherwise the broadcast extent (1 when every operand has 1 there).
  SmallVector<int64_t> extent(rank, 1);
  SmallVector<bool> dynamic(rank, false);
  for (auto type : inputs) {
    int64_t offset = rank - type.getRank();
    for (auto [i, dim] : llvm::enumerate(type.getShape())) {
      int64_t at = offset + i;
      if (ShapedType::isDynamic(dim)) {
        dynamic[at] = true;
        continue;
      }
      if (dim == 1)
        continue;
      if (extent[at] != 1 && extent[at] != dim)
        return op->emitOpError() << "operands are not broadcast-compatible: dimension " << at
                                 << " is " << extent[at] << " in one operand and " << dim
                                 << " in another";
      extent[at] = dim;
    }
  }
  if (!allRanked)
    return success();
  for (Type type : op->getResultTypes()) {
    auto result = rankedOrNull(type);
    if (!result)
      continue;
    if (result.getRank() != rank)
      return op->emitOpError() << "result has rank " << result.getRank()
                               << " but the operands broadcast to rank " << rank;
    for (int64_t i = 0; i < rank; ++i) {
      int64_t dim = result.getDimSize(i);
      if (ShapedType::isDynamic(dim))
        continue;
      // Where an operand is dynamic, the broadcast extent is only bounded below by `extent`.
      bool known = extent[i] != 1 || !dynamic[i];
      if (known && dim != extent[i])
        return op->emitOpError() << "result dimension " << i << " is " << dim
                                 << " but the operands broadcast to " << extent[i];
    }
  }
  return success();
}

LogicalResult WeightOp::verify() {
  if (getName().empty())
    return emitOpError("needs the name of an initializer");
  return success();
}

LogicalResult ConstantOp::verify() {
  if (getValue().getType() != getOutput().getType())
    return emitOpError() << "value has type " << getValue().getType() << " but the result is "
                         << getOutput().getType();
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError() << "approximate must be \"none\" or \"tanh\", not \""
                         << getApproximate() << "\"";
  return success();
}

LogicalResult ClipOp::verify() {
  Type element = getElementTypeOrSelf(getInput().getType());
  if (getElementTypeOrSelf(getOutput().getType()) != element)
    return emitOpError("result element type differs from the input's");
  for (Value bound : {getMin(), getMax()}) {
    auto type = dyn_cast<TensorType>(bound.getType());
    if (!type)
      continue;
    if (type.getElementType() != element)
      return emitOpError() << "bound of type " << type << " does not match the input's "
                           << element;
    if (type.hasStaticShape() && type.getNumElements() != 1)
      return emitOpError("bounds must be scalars");
  }
  return success();
}

LogicalResult CastOp::verify() {
  Type to = getTo();
  if (!isa<FloatType, IntegerType>(to))
    return emitOpError() << "cannot cast to " << to;
  if (getElementTypeOrSelf(getOutput().getType()) != to)
    return emitOpError() << "result element type " << getElementTypeOrSelf(getOutput().getType())
                         << " differs from to = " << to;
  return success();
}

LogicalResult MatMulOp::verify() {
  auto a = rankedOrNull(getA().getType());
  auto b = rankedOrNull(getB().getType());
  if ((a && a.getRank() == 0) || (b && b.getRank() == 0))
    return emitOpError("operands must have rank 1 or more");
  if (!a || !b)
    return success();
  int64_t k1 = a.getDimSize(a.getRank() - 1);
  int64_t k2 = b.getDimSize(b.getRank() == 1 ? 0 : b.getRank() - 2);
  if (!ShapedType::isDynamic(k1) && !ShapedType::isDynamic(k2) && k1 != k2)
    return emitOpError() << "contracted dimensions differ: " << k1 << " and " << k2;
  return success();
}

LogicalResult GemmOp::verify() {
  auto a = rankedOrNull(getA().getType());
  auto b = rankedOrNull(getB().getType());
  if ((a && a.getRank() != 2) || (b && b.getRank() != 2))
    return emitOpError("A and B must be 2-D");
  if (!a || !b)
    return success();
  int64_t k1 = a.getDimSize(getTransA() ? 0 : 1);
  int64_t k2 = b.getDimSize(getTransB() ? 1 : 0);
  if (!ShapedType::isDynamic(k1) && !ShapedType::isDynamic(k2) && k1 != k2)
    return emitOpError() << "contracted dimensions differ: " << k1 << " and " << k2;
  if (auto c = dyn_cast<TensorType>(getC().getType());
      c && c.getElementType() != a.getElementType())
    return emitOpError("C must have the element type of A and B");
  return success();
}

LogicalResult LayerNormalizationOp::verify() {
  Type element = getElementTypeOrSelf(getX().getType());
  if (getElementTypeOrSelf(getY().getType()) != element)
    return emitOpError("Y must have the element type of X");
  if (getElementTypeOrSelf(getScale().getType()) != element)
    return emitOpError("Scale must have the element type of X");
  if (auto b = dyn_cast<TensorType>(getB().getType()); b && b.getElementType() != element)
    return emitOpError("B must have the element type of X");
  if (getEpsilon().convertToFloat() < 0)
    return emitOpError("epsilon must not be negative");
  return verifyAxis(*this, getX().getType(), getAxis(), "axis");
}

LogicalResult ConstantOfShapeOp::verify() {
  Type element = Float32Type::get(getContext());
  if (auto value = getValueAttr()) {
    if (value.getNumElements() != 1)
      return emitOpError("value must hold exactly one element");
    element = value.getElementType();
  }
  if (getElementTypeOrSelf(getOutput().getType()) != element)
    return emitOpError() << "result element type must be " << element;
  if (auto shape = rankedOrNull(getInput().getType()); shape && shape.getRank() != 1)
    return emitOpError("shape must be 1-D");
  return success();
}

LogicalResult FlattenOp::verify() {
  if (auto ranked = rankedOrNull(getInput().getType())) {
    int64_t rank = ranked.getRank(), axis = static_cast<int64_t>(getAxis());
    if (axis < -rank || axis > rank)
      return emitOpError() << "axis " << axis << " is out of range for rank " << rank;
  }
  return success();
}

LogicalResult TransposeOp::verify() {
  auto input = rankedOrNull(getData().getType());
  auto result = rankedOrNull(getTransposed().getType());
  auto permAttr = getPerm();
  if (!permAttr || !input)
    return success();
  int64_t rank = input.getRank();
  if (static_cast<int64_t>(permAttr->size()) != rank)
    return emitOpError() << "perm has " << permAttr->size() << " entries for rank " << rank;
  llvm::SmallBitVector seen(rank);
  SmallVector<int64_t> perm;
  for (Attribute entry : *permAttr) {
    int64_t p = cast<IntegerAttr>(entry).getInt();
    if (p < 0 || p >= rank || seen.test(p))
      return emitOpError("perm is not a permutation");
    seen.set(p);
    perm.push_back(p);
  }
  if (!result)
    return success();
  if (result.getRank() != rank)
    return emitOpError("result rank differs from the input's");
  for (int64_t i = 0; i < rank; ++i) {
    int64_t in = input.getDimSize(perm[i]), out = result.getDimSize(i);
    if (!ShapedType::isDynamic(in) && !ShapedType::isDynamic(out) && in != out)
      return emitOpError() << "result dimension " << i << " is " << out << ", expected " << in;
  }
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  std::optional<int64_t> rank;
  for (Type type : getInputs().getTypes()) {
    auto ranked = rankedOrNull(type);
    if (!ranked)
      continue;
    if (rank && *rank != ranked.getRank())
      return emitOpError("inputs have different ranks");
    rank = ranked.getRank();
  }
  if (!rank)
    return success();
  // I64Attr accessors return uint64_t; axes are signed.
  int64_t axis = static_cast<int64_t>(getAxis());
  if (axis < -*rank || axis >= *rank)
    return emitOpError() << "axis " << axis << " is out of range for rank " << *rank;
  if (axis < 0)
    axis += *rank;
  for (int64_t d = 0; d < *rank; ++d) {
    if (d == axis)
      continue;
    int64_t known = ShapedType::kDynamic;
    for (Type type : getInputs().getTypes()) {
      auto ranked = rankedOrNull(type);
      if (!ranked || ranked.isDynamicDim(d))
        continue;
      if (!ShapedType::isDynamic(known) && known != ranked.getDimSize(d))
        return emitOpError() << "inputs differ in dimension " << d << " (" << known << " and "
                             << ranked.getDimSize(d) << ")";
      known = ranked.getDimSize(d);
    }
  }
  return success();
}

LogicalResult SplitOp::verify() {
  if (getOutputs().empty())
    return emitOpError("needs at least one output");
  Type element = getElementTypeOrSelf(getInput().getType());
  for (Type type : getOutputs().getTypes())
    if (getElementTypeOrSelf(type) != element)
      return emitOpError("outputs must have the element type of the input");
  if (auto split = rankedOrNull(getSplit().getType());
      split && split.hasStaticShape() &&
      split.getNumElements() != static_cast<int64_t>(getOutputs().size()))
    return emitOpError() << "split has " << split.getNumElements() << " sizes for "
                         << getOutputs().size() << " outputs";
  return verifyAxis(*this, getInput().getType(), getAxis(), "axis");
}

LogicalResult GatherOp::verify() {
  return verifyAxis(*this, getData().getType(), getAxis(), "axis");
}

LogicalResult GatherElementsOp::verify() {
  auto data = rankedOrNull(getData().getType());
  auto indices = rankedOrNull(getIndices().getType());
  if (data && indices && data.getRank() != indices.getRank())
    return emitOpError("data and indices must have the same rank");
  return verifyAxis(*this, getData().getType(), getAxis(), "axis");
}

LogicalResult GatherNDOp::verify() {
  int64_t batchDims = getBatchDims();
  if (batchDims < 0)
    return emitOpError() << "batch_dims " << batchDims << " is negative";
  auto data = rankedOrNull(getData().getType());
  auto indices = rankedOrNull(getIndices().getType());
  if (data && batchDims >= data.getRank())
    return emitOpError() << "batch_dims " << batchDims << " must be less than the rank of data";
  if (indices && batchDims >= indices.getRank())
    return emitOpError() << "batch_dims " << batchDims
                         << " must be less than the rank of indices";
  if (data && indices && !indices.isDynamicDim(indices.getRank() - 1)) {
    int64_t k = indices.getDimSize(indices.getRank() - 1);
    if (k < 1 || k > data.getRank() - batchDims)
      return emitOpError() << "index tuples of length " << k << " do not fit data of rank "
                           << data.getRank() << " after " << batchDims << " batch dimensions";
  }
  return success();
}

// The scatters' reduction: how an update combines with what it lands on.
static LogicalResult verifyReduction(Operation *op, StringRef reduction) {
  if (!llvm::is_contained({"none", "add", "mul", "max", "min"}, reduction))
    return op->emitOpError() << "unknown reduction \"" << reduction << "\"";
  return success();
}

LogicalResult ScatterNDOp::verify() { return verifyReduction(*this, getReduction()); }

LogicalResult ScatterElementsOp::verify() {
  if (failed(verifyReduction(*this, getReduction())))
    return failure();
  auto data = rankedOrNull(getData().getType());
  auto indices = rankedOrNull(getIndices().getType());
  auto updates = rankedOrNull(getUpdates().getType());
  if (data && indices && data.getRank() != indices.getRank())
    return emitOpError("data and indices must have the same rank");
  if (indices && updates) {
    if (indices.getRank() != updates.getRank())
      return emitOpError("indices and updates must have the same shape");
    for (auto [i, u] : llvm::zip(indices.getShape(), updates.getShape()))
      if (!ShapedType::isDynamic(i) && !ShapedType::isDynamic(u) && i != u)
        return emitOpError("indices and updates must have the same shape");
  }
  return verifyAxis(*this, getData().getType(), static_cast<int64_t>(getAxis()), "axis");
}

LogicalResult RangeOp::verify() {
  for (Value operand : {getStart(), getLimit(), getDelta()})
    if (auto ranked = rankedOrNull(operand.getType()); ranked && ranked.getRank() != 0)
      return emitOpError("start, limit and delta must be scalars");
  return success();
}

// A tensor that must hold one element (TopK's K, OneHot's depth): ONNX allows a scalar or
// a one-element vector.
static LogicalResult verifyOneElement(Operation *op, Value value, StringRef what) {
  auto ranked = rankedOrNull(value.getType());
  if (ranked && ranked.hasStaticShape() &&
      (ranked.getRank() > 1 || ranked.getNumElements() != 1))
    return op->emitOpError() << what << " must hold one element, not " << ranked;
  return success();
}

LogicalResult TopKOp::verify() {
  if (failed(verifyOneElement(*this, getK(), "K")))
    return failure();
  for (auto [name, value] : {std::pair<StringRef, int64_t>{"largest", getLargest()},
                             std::pair<StringRef, int64_t>{"sorted", getSorted()}})
    if (value != 0 && value != 1)
      return emitOpError() << name << " must be 0 or 1, not " << value;
  auto x = rankedOrNull(getX().getType());
  if (x && x.getRank() == 0)
    return emitOpError("X must have rank 1 or more");
  return verifyAxis(*this, getX().getType(), static_cast<int64_t>(getAxis()), "axis");
}

LogicalResult OneHotOp::verify() {
  if (failed(verifyOneElement(*this, getDepth(), "depth")))
    return failure();
  if (auto values = rankedOrNull(getValues().getType());
      values && values.hasStaticShape() &&
      (values.getRank() != 1 || values.getNumElements() != 2))
    return emitOpError() << "values must be [off_value, on_value], not " << values;
  auto indices = rankedOrNull(getIndices().getType());
  if (!indices)
    return success();
  // The new axis may also go after the last: it counts in the result's rank.
  int64_t rank = indices.getRank() + 1, axis = static_cast<int64_t>(getAxis());
  if (axis < -rank || axis >= rank)
    return emitOpError() << "axis " << axis << " is out of range for a result of rank "
                         << rank;
  if (auto output = rankedOrNull(getOutput().getType()); output && output.getRank() != rank)
    return emitOpError() << "the result has rank " << output.getRank() << ", expected "
                         << rank;
  return success();
}

LogicalResult NonZeroOp::verify() {
  auto y = rankedOrNull(getY().getType());
  if (!y)
    return success();
  if (y.getRank() != 2)
    return emitOpError("the result must have rank 2 (a row per dimension of X)");
  // A scalar reads as a vector of one element, as numpy's nonzero does.
  auto x = rankedOrNull(getX().getType());
  if (x && !y.isDynamicDim(0) && y.getDimSize(0) != std::max<int64_t>(x.getRank(), 1))
    return emitOpError() << "the result has " << y.getDimSize(0) << " rows for X of rank "
                         << x.getRank();
  return success();
}

LogicalResult IfOp::verify() { return verifyTwoWayBranch(*this, getCond()); }

} // namespace dsc::onnx

#define GET_OP_CLASSES
#include "dialects/onnx/IR/OnnxOps.cpp.inc"
