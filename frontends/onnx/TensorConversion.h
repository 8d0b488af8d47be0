// ONNX types and tensors as MLIR types and attributes.
#ifndef DSC_FRONTENDS_ONNX_TENSORCONVERSION_H
#define DSC_FRONTENDS_ONNX_TENSORCONVERSION_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include <string>

namespace onnx {
class TypeProto;
} // namespace onnx

namespace dsc::onnx_frontend {

// "FLOAT16", "STRING", ... (the number when ONNX does not define it), for messages.
std::string onnxTypeName(int32_t onnxType);

// The MLIR element type of an ONNX data type, or null when it is not supported.
mlir::Type convertElementType(mlir::MLIRContext &context, int32_t onnxType);

struct ConvertedType {
  mlir::TensorType type;                 // null when the TypeProto says too little
  llvm::SmallVector<std::string> dimNames;  // per dimension: the symbol, "" when static or unnamed
  bool hasSymbolicDims = false;
};

// Converts a tensor TypeProto. A missing shape gives an unranked tensor. Returns false with
// `error` set for non-tensor types, unsupported element types and negative dimensions.
bool convertType(mlir::MLIRContext &context, const ::onnx::TypeProto &proto, ConvertedType &out,
                 std::string &error);

// A dense attribute over little-endian raw bytes in ONNX's layout (one byte per bool).
mlir::DenseElementsAttr denseFromBytes(mlir::RankedTensorType type,
                                       llvm::ArrayRef<uint8_t> bytes);

} // namespace dsc::onnx_frontend

#endif
