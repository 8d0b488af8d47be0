// The reference implementation of every op of the generic path: shape inference and
// computation, on the CPU, with fp32 accumulation. The CPU backend runs plan steps with it;
// the compiler folds constants and evaluates shape bounds with it.
//
// Op names and operand orders are those of the onnx dialect's normalised form
// (dialects/onnx/IR/OnnxOps.td): axes, split sizes and the like are inputs, never
// attributes; an absent optional input is a null pointer; Cast's `to` is a DType attribute.
#ifndef DSRT_OPS_OPS_H
#define DSRT_OPS_OPS_H

#include "core/Status.h"
#include "core/Tensor.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dsrt::ops {

struct Attr {
  enum class Kind { Int, Float, String, Ints, Floats, Tensor, Type };
  Kind kind = Kind::Int;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  OwnedTensor tensor;
  DType type = DType::Undefined;

  static Attr ofInt(int64_t v);
  static Attr ofFloat(float v);
  static Attr ofString(std::string v);
  static Attr ofInts(std::vector<int64_t> v);
  static Attr ofFloats(std::vector<float> v);
  static Attr ofTensor(OwnedTensor v);
  static Attr ofType(DType v);
};

using AttrMap = std::map<std::string, Attr, std::less<>>;

// Typed access with ONNX's defaults; a present attribute of the wrong kind is an error.
Status getInt(const AttrMap &attrs, std::string_view name, int64_t fallback, int64_t &out);
Status getFloat(const AttrMap &attrs, std::string_view name, float fallback, float &out);
Status getString(const AttrMap &attrs, std::string_view name, std::string fallback,
                 std::string &out);
Status getInts(const AttrMap &attrs, std::string_view name, std::vector<int64_t> &out,
               bool &present);

struct OutputSpec {
  DType dtype = DType::Undefined;
  Shape shape;
};

using Inputs = std::vector<const TensorRef *>;   // null: an absent optional input
using Outputs = std::vector<TensorRef *>;

inline constexpr const char *kUnknownValue = "is unknown";

bool isSupported(std::string_view op);
std::vector<std::string> supportedOps();

// Output dtypes and shapes from the inputs' dtypes and shapes, and from the values of the
// inputs that determine shapes (Reshape's shape, Slice's starts, ...). When such a value is
// unknown (data == null) the result is an error that names the input and contains
// kUnknownValue (the compiler then allocates the outputs when the step runs). `numOutputs` is the
// number of outputs the step has (Split, Dropout, LayerNormalization).
Status inferShapes(std::string_view op, const AttrMap &attrs, const Inputs &inputs,
                   size_t numOutputs, std::vector<OutputSpec> &outputs);

// Computes the outputs, whose dtypes, shapes and storage the caller prepared from
// inferShapes. Inputs and outputs do not alias.
Status compute(std::string_view op, const AttrMap &attrs, const Inputs &inputs,
               const Outputs &outputs);

// Threads the kernels may use (default: the hardware's); 1 makes everything sequential.
void setThreadCount(int threads);

} // namespace dsrt::ops

#endif
