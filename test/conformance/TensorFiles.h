// TensorProto files (the node-test layout's input_N.pb / output_N.pb) as runtime tensors.
#ifndef DSC_TEST_CONFORMANCE_TENSORFILES_H
#define DSC_TEST_CONFORMANCE_TENSORFILES_H

#include "core/Tensor.h"

#include <cstdint>
#include <filesystem>
#include <string>

namespace dsc::conformance {

// The runtime dtype of an ONNX TensorProto data type; Undefined when there is none.
dsrt::DType dtypeOfOnnx(int32_t onnxType);

// Reads a serialized TensorProto. `declared` is the dtype the model gives the value: ONNX
// 1.12's generator wrote bfloat16 test tensors as UINT16 bit patterns, which are read back
// as the bf16 they stand for. On failure returns false with `error` set.
bool readTensorFile(const std::filesystem::path &path, dsrt::DType declared,
                    dsrt::OwnedTensor &out, std::string &error);

} // namespace dsc::conformance

#endif
