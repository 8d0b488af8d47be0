// The element type a pass's `dtype` option names: f16 or bf16, or none for f32
// (dsc-kv-cache-dtype, dsc-activation-dtype).
#ifndef DSC_COMPILER_QUANTIZE_HALFDTYPE_H
#define DSC_COMPILER_QUANTIZE_HALFDTYPE_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace dsc {

// `out` is f16, bf16, or null for "f32"; anything else is an error on `module` naming
// `what` ("the KV cache's dtype").
inline mlir::LogicalResult parseHalfDtype(mlir::ModuleOp module, llvm::StringRef dtype,
                                          llvm::StringRef what, mlir::Type &out) {
  mlir::Builder b(module.getContext());
  out = dtype == "f16" ? b.getF16Type() : dtype == "bf16" ? mlir::Type(b.getBF16Type())
                                                          : mlir::Type();
  if (!out && dtype != "f32")
    return module.emitError() << what << " must be f16, bf16 or f32, not '" << dtype << "'";
  return mlir::success();
}

} // namespace dsc

#endif
