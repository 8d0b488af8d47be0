// Verifiers of the generic path's tensor ops (PlanTensorOps.td).
#include "dialects/plan/IR/PlanDialect.h"

#include "dialects/common/BranchVerification.h"
#include "dialects/common/WeightConcatVerification.h"

#include "mlir/IR/TypeUtilities.h"

using namespace mlir;

namespace dsc::plan {

// Arena slots are aligned to this many bytes; the plan file's arena has the same alignment.
constexpr int64_t kSlotAlignment = 64;

static LogicalResult verifyBound(Operation *op, Type type, ArrayRef<int64_t> bound,
                                 unsigned index) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  // An unranked result with an empty bound is dynamic: allocated when its step runs.
  if (!ranked && bound.empty())
    return success();
  if (!ranked)
    return op->emitOpError() << "result " << index << " needs a ranked type to have a bound";
  if (static_cast<int64_t>(bound.size()) != ranked.getRank())
    return op->emitOpError() << "max_shapes[" << index << "] has " << bound.size()
                             << " dimensions for a result of rank " << ranked.getRank();
  for (auto [i, dim] : llvm::enumerate(ranked.getShape())) {
    if (bound[i] < 0)
      return op->emitOpError() << "max_shapes[" << index << "] is negative";
    if (!ShapedType::isDynamic(dim) && bound[i] != dim)
      return op->emitOpError() << "max_shapes[" << index << "] dimension " << i << " is "
                               << bound[i] << " but the type says " << dim;
  }
  return success();
}

// The per-result bounds and arena offsets of plan.exec and plan.if.
static LogicalResult verifySlots(Operation *op, std::optional<ArrayAttr> maxShapes,
                                 std::optional<ArrayRef<int64_t>> offsets) {
  if (maxShapes) {
    if (maxShapes->size() != op->getNumResults())
      return op->emitOpError() << "has " << maxShapes->size() << " max_shapes for "
                               << op->getNumResults() << " results";
    for (auto [index, bound] : llvm::enumerate(maxShapes->getAsRange<DenseI64ArrayAttr>()))
      if (failed(verifyBound(op, op->getResult(index).getType(), bound.asArrayRef(), index)))
        return failure();
  }
  if (offsets) {
    if (offsets->size() != op->getNumResults())
      return op->emitOpError() << "has " << offsets->size() << " arena_offsets for "
                               << op->getNumResults() << " results";
    if (!maxShapes)
      return op->emitOpError("has arena_offsets but no max_shapes to size the slots");
    for (auto [index, offset] : llvm::enumerate(*offsets)) {
      bool dynamic = !isa<RankedTensorType>(op->getResult(index).getType());
      if (dynamic ? offset != -1 : (offset < 0 || offset % kSlotAlignment != 0))
        return op->emitOpError() << "arena offset " << offset << " is not "
                                 << (dynamic ? "-1 for a dynamic result"
                                             : "a non-negative multiple of 64");
    }
  }
  return success();
}

LogicalResult ReturnOp::verify() {
  if (auto names = getNames(); names && names->size() != getOutputs().size())
    return emitOpError() << "has " << names->size() << " names for " << getOutputs().size()
                         << " outputs";
  return success();
}

LogicalResult InputOp::verify() {
  auto type = cast<RankedTensorType>(getValue().getType());
  if (auto dims = getDims(); dims && static_cast<int64_t>(dims->size()) != type.getRank())
    return emitOpError() << "names " << dims->size() << " dimensions of a rank-"
                         << type.getRank() << " tensor";
  if (auto bound = getMaxShape())
    return verifyBound(*this, type, *bound, 0);
  return success();
}

LogicalResult ConstantOp::verify() {
  if (getValue().getType() != getOutput().getType())
    return emitOpError() << "value has type " << getValue().getType() << " but the result is "
                         << getOutput().getType();
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult WeightTensorOp::verify() {
  if (getName().empty())
    return emitOpError("needs the name of a weight");
  auto transforms = getTransforms();
  if (!transforms)
    return success();
  if (!getSourceType())
    return emitOpError("has transforms but no source_type to apply them to");
  for (auto [index, transform] : llvm::enumerate(transforms->getAsRange<DictionaryAttr>())) {
    auto kind = transform.getAs<StringAttr>("kind");
    bool ok = kind && ((kind == "transpose" && transform.getAs<ArrayAttr>("perm")) ||
                       (kind == "slice" && transform.getAs<IntegerAttr>("axis") &&
                        transform.getAs<IntegerAttr>("offset") &&
                        transform.getAs<IntegerAttr>("size")) ||
                       (kind == "shard" && transform.getAs<IntegerAttr>("axis") &&
                        transform.getAs<ArrayAttr>("offsets") &&
                        transform.getAs<ArrayAttr>("sizes") &&
                        transform.getAs<IntegerAttr>("groups")) ||
                       (kind == "convert" && transform.getAs<TypeAttr>("to")) ||
                       (kind == "scale" && transform.getAs<FloatAttr>("factor")) ||
                       ((kind == "quantize_int8" || kind == "quant_scales" ||
                         kind == "quantize_int4" || kind == "quant_scales_int4") &&
                        transform.getAs<IntegerAttr>("group_size")));
    if (!ok)
      return emitOpError() << "transform " << index
                           << " must be a transpose (perm), a slice (axis, offset, size, "
                              "groups?), a shard (axis, offsets, sizes, groups), a convert "
                              "(to), a scale (factor), a quantize_int8, quant_scales, "
                              "quantize_int4 or quant_scales_int4 (group_size)";
  }
  return success();
}

LogicalResult WeightConcatOp::verify() {
  return verifyWeightConcat(
      *this, getParts(), getOutput(),
      [](Value part) { return static_cast<bool>(part.getDefiningOp<WeightTensorOp>()); },
      "plan.weight_tensor", getRankParts() ? *getRankParts() : ArrayRef<int64_t>());
}

LogicalResult ExecOp::verify() {
  if (getOp().empty())
    return emitOpError("needs the name of an op");
  for (Type type : getInputs().getTypes())
    if (!isa<TensorType, NoneType>(type))
      return emitOpError() << "input of type " << type << " is neither a tensor nor none";
  if (getKernels() && getKernelDecline())
    return emitOpError("has kernels and a kernel decline; a step has one or the other");
  return verifySlots(*this, getMaxShapes(), getArenaOffsets());
}

LogicalResult IfOp::verify() {
  if (failed(verifyTwoWayBranch(*this, getCond())))
    return failure();
  return verifySlots(*this, getMaxShapes(), getArenaOffsets());
}

} // namespace dsc::plan
