// What the tfm ops' verifiers (TfmOps.cpp, TfmAttentionVerify.cpp) share: dimensions that
// may be dynamic, and their messages.
#ifndef DSC_DIALECTS_TFM_IR_VERIFYHELPERS_H
#define DSC_DIALECTS_TFM_IR_VERIFYHELPERS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

#include <string>

namespace dsc::tfm {

inline bool isDyn(int64_t dim) { return mlir::ShapedType::isDynamic(dim); }

// True when two dimensions may be equal (one is dynamic or both agree).
inline bool compatible(int64_t a, int64_t b) { return isDyn(a) || isDyn(b) || a == b; }

inline std::string dimString(int64_t dim) {
  return isDyn(dim) ? std::string("?") : std::to_string(dim);
}

// Checks that dimension `index` of `type` may be `expected`.
inline mlir::LogicalResult expectDim(mlir::Operation *op, mlir::RankedTensorType type,
                                     int64_t index, int64_t expected, llvm::StringRef what) {
  int64_t dim = type.getDimSize(index);
  if (!compatible(dim, expected))
    return op->emitOpError() << what << " is " << dim << ", expected " << expected;
  return mlir::success();
}

// `narrow` is the plan's activation dtype (f16 or bf16) where the op computes in `wide`
// f32 (dsc-activation-dtype).
inline bool isActivationStorage(mlir::Type narrow, mlir::Type wide) {
  return (narrow.isF16() || narrow.isBF16()) && wide.isF32();
}

inline mlir::RankedTensorType ranked(mlir::Value value) {
  return value ? llvm::dyn_cast<mlir::RankedTensorType>(value.getType())
               : mlir::RankedTensorType();
}

} // namespace dsc::tfm

#endif
