// ONNX TensorProto files (.pb, the node-test layout) without protobuf: the runtime and its
// tools read inputs and write outputs in this format, and the runtime links no protobuf.
#ifndef DSRT_IO_TENSORPROTO_H
#define DSRT_IO_TENSORPROTO_H

#include "core/Status.h"
#include "core/Tensor.h"

#include <string>

namespace dsrt::io {

struct NamedTensor {
  std::string name;
  OwnedTensor tensor;
};

// Parses a serialized TensorProto: dims, data_type, name, and the data from raw_data or
// the typed fields. String tensors, segments and external data are refused.
Status parseTensorProto(const std::string &bytes, NamedTensor &out);
Status readTensorProto(const std::string &path, NamedTensor &out);

// Serializes with dims, data_type, name and raw_data.
std::string serializeTensorProto(const std::string &name, const TensorRef &tensor);
Status writeTensorProto(const std::string &path, const std::string &name,
                        const TensorRef &tensor);

// ONNX TensorProto.DataType <-> DType; Undefined when there is no counterpart.
DType dtypeFromOnnx(int32_t onnxType);
int32_t onnxFromDtype(DType dtype);

} // namespace dsrt::io

#endif
