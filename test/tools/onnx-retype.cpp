// Test helper: declares another element type for one graph input or output of a binary ONNX
// model, everything else unchanged (issue 46: a model whose attention_mask is declared
// bfloat16 made the generator write past its buffer). Lit and the fuzz seeds build the
// mutated fixtures with it instead of committing copies of them.
//
//   onnx-retype in.onnx NAME TYPE -o out.onnx     TYPE: an ONNX TensorProto type name,
//                                                 e.g. bfloat16, float16, int64, bool
#include "onnx/onnx_pb.h"

#include <fstream>
#include <iostream>
#include <string>

namespace {
[[noreturn]] void fail(const std::string &message) {
  std::cerr << "onnx-retype: " << message << "\n";
  std::exit(2);
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 6 || std::string(argv[4]) != "-o")
    fail("usage: onnx-retype in.onnx NAME TYPE -o out.onnx");
  const std::string input = argv[1], name = argv[2], typeName = argv[3], output = argv[5];
  onnx::TensorProto_DataType type;
  std::string upper;
  for (char c : typeName)
    upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!onnx::TensorProto_DataType_Parse(upper, &type))
    fail("'" + typeName + "' is no TensorProto type");
  onnx::ModelProto model;
  {
    std::ifstream in(input, std::ios::binary);
    if (!in || !model.ParseFromIstream(&in))
      fail("cannot read a ModelProto from " + input);
  }
  int changed = 0;
  for (auto *values : {model.mutable_graph()->mutable_input(), model.mutable_graph()->mutable_output()})
    for (onnx::ValueInfoProto &value : *values)
      if (value.name() == name) {
        value.mutable_type()->mutable_tensor_type()->set_elem_type(type);
        ++changed;
      }
  if (changed == 0)
    fail(input + " has no graph input or output '" + name + "'");
  std::ofstream out(output, std::ios::binary);
  if (!out || !model.SerializeToOstream(&out))
    fail("cannot write " + output);
  return 0;
}
