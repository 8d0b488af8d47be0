// Reading small constants of the onnx dialect (shape and index operands) in passes.
#ifndef DSC_DIALECTS_ONNX_IR_ONNXCONSTANTS_H
#define DSC_DIALECTS_ONNX_IR_ONNXCONSTANTS_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Value.h"

#include <optional>

namespace dsc::onnx {

// The integer a constant one-element index tensor holds (a Slice's bound, a Gather's index);
// none for anything else.
inline std::optional<int64_t> constantIndex(mlir::Value value) {
  mlir::DenseIntElementsAttr attr;
  if (!value || !mlir::matchPattern(value, mlir::m_Constant(&attr)) || attr.getNumElements() != 1)
    return std::nullopt;
  return (*attr.getValues<llvm::APInt>().begin()).getSExtValue();
}

} // namespace dsc::onnx

#endif
