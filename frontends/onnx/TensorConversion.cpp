#include "frontends/onnx/TensorConversion.h"

#include "mlir/IR/Builders.h"

#include "onnx/onnx_pb.h"

namespace dsc::onnx_frontend {

using ::onnx::TensorProto;

std::string onnxTypeName(int32_t onnxType) {
  if (TensorProto::DataType_IsValid(onnxType))
    return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(onnxType));
  // Types newer than the onnx.proto dsc is built with (ONNX 1.15 on: 4-bit and 8-bit
  // floats, 4-bit integers such as a QDQ export's int4 weights), named as ONNX names them.
  switch (onnxType) {
  case 17: return "FLOAT8E4M3FN";
  case 18: return "FLOAT8E4M3FNUZ";
  case 19: return "FLOAT8E5M2";
  case 20: return "FLOAT8E5M2FNUZ";
  case 21: return "UINT4";
  case 22: return "INT4";
  case 23: return "FLOAT4E2M1";
  case 24: return "FLOAT8E8M0";
  default: return std::to_string(onnxType);
  }
}

mlir::Type convertElementType(mlir::MLIRContext &context, int32_t onnxType) {
  mlir::Builder b(&context);
  switch (onnxType) {
  case TensorProto::FLOAT: return b.getF32Type();
  case TensorProto::FLOAT16: return b.getF16Type();
  case TensorProto::BFLOAT16: return b.getBF16Type();
  case TensorProto::DOUBLE: return b.getF64Type();
  case TensorProto::INT64: return b.getI64Type();
  case TensorProto::INT32: return b.getI32Type();
  case TensorProto::INT16: return b.getI16Type();
  case TensorProto::INT8: return b.getI8Type();
  case TensorProto::BOOL: return b.getI1Type();
  case TensorProto::UINT8: return b.getIntegerType(8, /*isSigned=*/false);
  case TensorProto::UINT16: return b.getIntegerType(16, false);
  case TensorProto::UINT32: return b.getIntegerType(32, false);
  case TensorProto::UINT64: return b.getIntegerType(64, false);
  default: return nullptr;
  }
}

bool convertType(mlir::MLIRContext &context, const ::onnx::TypeProto &proto, ConvertedType &out,
                 std::string &error) {
  out = ConvertedType();
  if (proto.value_case() == ::onnx::TypeProto::VALUE_NOT_SET)
    return true;
  if (!proto.has_tensor_type()) {
    error = "has a non-tensor type (sequence, map, optional or sparse), which is not supported";
    return false;
  }
  const auto &tensor = proto.tensor_type();
  if (tensor.elem_type() == TensorProto::UNDEFINED)
    return true;
  mlir::Type element = convertElementType(context, tensor.elem_type());
  if (!element) {
    error = "has element type " + onnxTypeName(tensor.elem_type()) + ", which is not supported";
    return false;
  }
  if (!tensor.has_shape()) {
    out.type = mlir::UnrankedTensorType::get(element);
    return true;
  }
  llvm::SmallVector<int64_t> shape;
  for (const auto &dim : tensor.shape().dim()) {
    if (dim.has_dim_value()) {
      if (dim.dim_value() < 0) {
        error = "has a negative dimension";
        return false;
      }
      shape.push_back(dim.dim_value());
      out.dimNames.emplace_back();
    } else {
      shape.push_back(mlir::ShapedType::kDynamic);
      out.dimNames.push_back(dim.has_dim_param() ? dim.dim_param() : std::string());
      out.hasSymbolicDims |= dim.has_dim_param() && !dim.dim_param().empty();
    }
  }
  out.type = mlir::RankedTensorType::get(shape, element);
  return true;
}

mlir::DenseElementsAttr denseFromBytes(mlir::RankedTensorType type,
                                       llvm::ArrayRef<uint8_t> bytes) {
  if (type.getElementType().isInteger(1)) {
    // MLIR packs i1 as bits; ONNX stores a byte per bool.
    llvm::SmallVector<bool> values(bytes.begin(), bytes.end());
    for (bool &value : values)
      value = value != 0;
    return mlir::DenseElementsAttr::get(type, llvm::ArrayRef<bool>(values));
  }
  return mlir::DenseElementsAttr::getFromRawBuffer(
      type, llvm::ArrayRef<char>(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
}

} // namespace dsc::onnx_frontend
