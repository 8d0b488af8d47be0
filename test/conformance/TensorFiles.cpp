#include "TensorFiles.h"

#include "frontends/onnx/WeightStore.h"

#include "onnx/onnx_pb.h"

#include <fstream>

namespace dsc::conformance {

using dsrt::DType;

DType dtypeOfOnnx(int32_t onnxType) {
  switch (onnxType) {
  case onnx::TensorProto::FLOAT: return DType::F32;
  case onnx::TensorProto::FLOAT16: return DType::F16;
  case onnx::TensorProto::BFLOAT16: return DType::BF16;
  case onnx::TensorProto::DOUBLE: return DType::F64;
  case onnx::TensorProto::INT64: return DType::I64;
  case onnx::TensorProto::INT32: return DType::I32;
  case onnx::TensorProto::INT16: return DType::I16;
  case onnx::TensorProto::INT8: return DType::I8;
  case onnx::TensorProto::UINT8: return DType::U8;
  case onnx::TensorProto::BOOL: return DType::Bool;
  case onnx::TensorProto::UINT16: return DType::U16;
  case onnx::TensorProto::UINT32: return DType::U32;
  case onnx::TensorProto::UINT64: return DType::U64;
  default: return DType::Undefined;
  }
}

bool readTensorFile(const std::filesystem::path &path, DType declared, dsrt::OwnedTensor &out,
                    std::string &error) {
  std::ifstream file(path, std::ios::binary);
  onnx::TensorProto proto;
  if (!file || !proto.ParseFromIstream(&file)) {
    error = "cannot parse " + path.string();
    return false;
  }
  DType dtype = dtypeOfOnnx(proto.data_type());
  if (dtype == DType::U16 && declared == DType::BF16)
    dtype = DType::BF16;
  std::vector<uint8_t> bytes;
  if (dtype == DType::Undefined ||
      !dsc::onnx_frontend::decodeInlineTensor(proto, bytes, error)) {
    error = path.filename().string() + ": " +
            (error.empty() ? "unsupported data type " + std::to_string(proto.data_type())
                           : error);
    return false;
  }
  out = dsrt::OwnedTensor(dtype, dsrt::Shape(proto.dims().begin(), proto.dims().end()));
  if (bytes.size() != out.storage.size()) {
    error = path.filename().string() + ": size mismatch";
    return false;
  }
  out.storage = std::move(bytes);
  if (dtype == DType::Bool)
    for (uint8_t &byte : out.storage)
      byte = byte != 0;
  return true;
}

} // namespace dsc::conformance
