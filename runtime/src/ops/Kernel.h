// Internal to dsrt_ops: how a kernel is described, and the helpers every kernel file
// shares (error messages, axis normalisation, reading shape-defining inputs).
#ifndef DSRT_OPS_KERNEL_H
#define DSRT_OPS_KERNEL_H

#include "ops/Ops.h"

#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace dsrt::ops {

template <typename... Parts> std::string concat(const Parts &...parts) {
  std::ostringstream stream;
  (stream << ... << parts);
  return stream.str();
}

// One call of a kernel: the op, its attributes and inputs, and how many outputs the step
// has. Registry.cpp has already checked the input and output counts, that required inputs
// are present, and that every present input has a defined dtype and a valid shape.
struct KernelContext {
  std::string_view op;
  const AttrMap &attrs;
  const Inputs &inputs;
  size_t numOutputs;
  KvCache *cache = nullptr;
  Collectives *collectives = nullptr;
  bool fastKernels = false;  // SessionState::fastKernels
  bool rowInvariant = false;  // SessionState::rowInvariant
  bool exactFloatRows = false;  // SessionState::exactFloatRows

  const TensorRef *input(size_t index) const {
    return index < inputs.size() ? inputs[index] : nullptr;
  }
  template <typename... Parts> Status error(const Parts &...parts) const {
    return Status::error(concat(op, ": ", parts...));
  }
};

using InferFn = Status (*)(const KernelContext &, std::vector<OutputSpec> &);
// Called only after a successful InferFn; the outputs match what it returned.
using ComputeFn = Status (*)(const KernelContext &, const Outputs &);

constexpr int kAnyCount = -1;

struct KernelInfo {
  const char *name;
  int minInputs;
  int maxInputs;        // kAnyCount: variadic
  int requiredInputs;   // how many leading inputs must be present; kAnyCount: all given
  int minOutputs;
  int maxOutputs;       // kAnyCount: variadic
  InferFn infer;
  ComputeFn compute;
};

// Each kernel file contributes its table.
void addElementwiseKernels(std::vector<KernelInfo> &kernels);
void addBinaryKernels(std::vector<KernelInfo> &kernels);
void addCastKernels(std::vector<KernelInfo> &kernels);
void addMatMulKernels(std::vector<KernelInfo> &kernels);
void addNormalizationKernels(std::vector<KernelInfo> &kernels);
void addReduceKernels(std::vector<KernelInfo> &kernels);
void addShapeKernels(std::vector<KernelInfo> &kernels);
void addMovementKernels(std::vector<KernelInfo> &kernels);
void addGatherKernels(std::vector<KernelInfo> &kernels);
void addRoutingKernels(std::vector<KernelInfo> &kernels);
void addTransformerKernels(std::vector<KernelInfo> &kernels);
void addLinearKernels(std::vector<KernelInfo> &kernels);      // TransformerLinear.cpp
void addAttentionKernels(std::vector<KernelInfo> &kernels);   // TransformerAttention.cpp
void addCollectiveKernels(std::vector<KernelInfo> &kernels);  // TransformerCollectives.cpp
void addMoeKernels(std::vector<KernelInfo> &kernels);         // TransformerMoe.cpp

// Dtype sets for validation.
using DTypeMask = uint32_t;
constexpr DTypeMask maskOf(std::initializer_list<DType> dtypes) {
  DTypeMask mask = 0;
  for (DType dtype : dtypes)
    mask |= DTypeMask(1) << static_cast<unsigned>(dtype);
  return mask;
}
constexpr DTypeMask kFloatTypes = maskOf({DType::F32, DType::F16, DType::BF16, DType::F64});
constexpr DTypeMask kSignedIntTypes = maskOf({DType::I8, DType::I16, DType::I32, DType::I64});
constexpr DTypeMask kUnsignedIntTypes =
    maskOf({DType::U8, DType::U16, DType::U32, DType::U64});
constexpr DTypeMask kIntTypes = kSignedIntTypes | kUnsignedIntTypes;
constexpr DTypeMask kNumericTypes = kFloatTypes | kIntTypes;
constexpr DTypeMask kAllTypes = kNumericTypes | maskOf({DType::Bool});
constexpr DTypeMask kIndexTypes = maskOf({DType::I32, DType::I64});
// The integer types ONNX's arithmetic-heavy ops (MatMul, Gemm, reductions, CumSum) accept.
constexpr DTypeMask kWideIntTypes = maskOf({DType::I32, DType::I64, DType::U32, DType::U64});

inline bool inMask(DType dtype, DTypeMask mask) {
  return (mask >> static_cast<unsigned>(dtype)) & 1u;
}

// Fails unless input `index` (which must be present) has a dtype in `mask`.
Status checkDType(const KernelContext &ctx, size_t index, const char *name, DTypeMask mask);
// Fails unless inputs `a` and `b` have the same dtype.
Status checkSameDType(const KernelContext &ctx, size_t a, size_t b);

// Normalises `axis` into [0, rank) (or [0, rank] with `inclusiveEnd`), naming `what`.
Status normalizeAxis(const KernelContext &ctx, int64_t axis, int64_t rank, const char *what,
                     int64_t &out, bool inclusiveEnd = false);
// Normalises a list of axes; duplicates are an error.
Status normalizeAxes(const KernelContext &ctx, const std::vector<int64_t> &axes, int64_t rank,
                     const char *what, std::vector<int64_t> &out);

// The integer values of input `index` (i32 or i64, any shape); an error naming `name` when
// they are unknown (data == null: shape evaluation without values).
Status readIndexValues(const KernelContext &ctx, size_t index, const char *name,
                       std::vector<int64_t> &out);
// As readIndexValues, for a scalar (rank 0, or one element of rank 1).
Status readIndexScalar(const KernelContext &ctx, size_t index, const char *name, int64_t &out);
// The value of a one-element input of any numeric or bool dtype, as double.
Status readScalarAsDouble(const KernelContext &ctx, size_t index, const char *name,
                          double &out);

int64_t product(const Shape &shape, size_t begin, size_t end);

// Typed attribute access whose errors name the op.
Status intAttr(const KernelContext &ctx, std::string_view name, int64_t fallback,
               int64_t &out);
Status floatAttr(const KernelContext &ctx, std::string_view name, float fallback, float &out);
Status stringAttr(const KernelContext &ctx, std::string_view name, std::string fallback,
                  std::string &out);

// Shapes whose element count is not representable are rejected early.
Status checkShape(const KernelContext &ctx, const Shape &shape, const char *what);

} // namespace dsrt::ops

#endif
