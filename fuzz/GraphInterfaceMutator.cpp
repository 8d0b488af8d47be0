#include "fuzz/GraphInterfaceMutator.h"

#include <string>

namespace dsc::fuzz {
namespace {

template <typename T> T pick(std::mt19937_64 &random, std::initializer_list<T> values) {
  return values.begin()[random() % values.size()];
}

void mutateDimension(::onnx::TensorShapeProto &shape, std::mt19937_64 &random) {
  if (shape.dim_size() == 0 || random() % 8 == 0) {
    // A rank one higher or lower.
    if (shape.dim_size() > 0 && random() % 2)
      shape.mutable_dim()->RemoveLast();
    else
      shape.add_dim()->set_dim_value(pick<int64_t>(random, {1, 2, 3}));
    return;
  }
  ::onnx::TensorShapeProto::Dimension &dim = *shape.mutable_dim(random() % shape.dim_size());
  switch (random() % 4) {
  case 0: dim.set_dim_value(pick<int64_t>(random, {0, 1, 2, 3, 7, 16, 64, -1, 1 << 20})); break;
  // Symbols a real export uses, so that one input's dimension may become another's.
  case 1:
    dim.set_dim_param(pick<const char *>(
        random, {"batch_size", "sequence_length", "past_sequence_length", "total_sequence_length",
                 "s0", "s1", "fuzzed"}));
    break;
  case 2: dim.clear_value(); break;
  default: dim.set_denotation("fuzzed"); break;
  }
}

} // namespace

bool mutateGraphInterface(::onnx::ModelProto &model, std::mt19937_64 &random) {
  ::onnx::GraphProto &graph = *model.mutable_graph();
  const int inputs = graph.input_size(), outputs = graph.output_size();
  if (inputs + outputs == 0)
    return false;
  const int chosen = static_cast<int>(random() % (inputs + outputs));
  ::onnx::ValueInfoProto &value =
      chosen < inputs ? *graph.mutable_input(chosen) : *graph.mutable_output(chosen - inputs);
  ::onnx::TypeProto_Tensor &tensor = *value.mutable_type()->mutable_tensor_type();
  switch (random() % 4) {
  case 0:
  case 1:
    // Every TensorProto.DataType, undefined and a few past the last included.
    tensor.set_elem_type(static_cast<int32_t>(random() % 26));
    break;
  case 2: mutateDimension(*tensor.mutable_shape(), random); break;
  default: {
    // Another interface name (two inputs of one name), or one nothing defines.
    const int other = static_cast<int>(random() % (inputs + outputs));
    const std::string &name =
        other < inputs ? graph.input(other).name() : graph.output(other - inputs).name();
    value.set_name(random() % 2 ? name : value.name() + "_fuzzed");
    break;
  }
  }
  return true;
}

} // namespace dsc::fuzz
