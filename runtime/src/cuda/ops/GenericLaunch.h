// What the generic path's launchers (GenericOps.cpp, GenericMovement.cpp, GenericMatMul.cpp,
// GenericIndexing.cpp) share: how a step without its kernel asks for the fallback, the
// checks that a kernel was specialised for the step in hand, shapes and strides, values the
// host knows, and the grid of an elementwise kernel.
#ifndef DSRT_CUDA_OPS_GENERICLAUNCH_H
#define DSRT_CUDA_OPS_GENERICLAUNCH_H

#include "cuda/GpuOps.h"
#include "ops/Strided.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dsrt::cuda {

inline constexpr int64_t kMaxGridX = 2147483647;
inline constexpr unsigned kBlock = 256;  // the elementwise kernels' threads per block

// A step without a kernel (its rule declined, or a CPU-only plan) runs on the fallback:
// launching the absent slot is how a launcher tells the session so (the launch fails and
// marks the step).
inline Status requireKernel(StepContext &context) {
  if (context.kernelCount() < 1)
    return context.launch(0, Dim3{}, Dim3{}, 0, nullptr);
  return Status::ok();
}

// The kernel's constant `name` must be `expected`: the code was specialised for it.
inline Status checkConstant(StepContext &context, const char *name, int64_t expected) {
  int64_t compiled = context.kernelConstant(0, name, -1);
  if (compiled != expected)
    return context.error("the kernel was generated for ", name, " = ", compiled,
                         ", the step needs ", expected);
  return Status::ok();
}

// The templates' rank limit (their shape structs hold six dims).
inline constexpr int64_t kMaxRank = 6;
// The kernel's RANK, which must hold `rank` dimensions.
inline Status rankOf(StepContext &context, size_t rank, int64_t &compiled) {
  compiled = context.kernelConstant(0, "RANK", -1);
  if (compiled < 0 || compiled > kMaxRank || static_cast<int64_t>(rank) > compiled)
    return context.error("the kernel was generated for rank ", compiled, ", the step has ",
                         rank);
  return Status::ok();
}

inline Status checkElementSize(StepContext &context, DType dtype) {
  return checkConstant(context, "ES", static_cast<int64_t>(dtypeSize(dtype)));
}

using ops::contiguousStrides;  // ops/Strided.h: the host kernels' row-major strides

// Writes `values` (one per dimension of a shape of rank values.size()) right-aligned into
// `slots[0, rank)`, with `fill` before them: a shape padded on the left to the kernel's rank.
inline void placeRightAligned(const std::vector<int64_t> &values, int64_t rank, long long fill,
                              long long *slots) {
  int64_t offset = rank - static_cast<int64_t>(values.size());
  for (int64_t d = 0; d < kMaxRank; ++d)
    slots[d] = fill;
  for (size_t d = 0; d < values.size(); ++d)
    slots[offset + static_cast<int64_t>(d)] = values[d];
}

// The strides of `in` read as the broadcast `out` (right-aligned, 0 along broadcast
// dimensions), or an error when `in` does not broadcast to `out`.
inline Status broadcastStrides(StepContext &context, const Shape &in, const Shape &out,
                               std::vector<int64_t> &strides) {
  if (in.size() > out.size())
    return context.error("an input of shape ", shapeString(in), " does not broadcast to ",
                         shapeString(out));
  strides.assign(out.size(), 0);
  std::vector<int64_t> own = contiguousStrides(in);
  size_t offset = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] != 1 && in[d] != out[offset + d])
      return context.error("an input of shape ", shapeString(in), " does not broadcast to ",
                           shapeString(out));
    strides[offset + d] = in[d] == 1 ? 0 : own[d];
  }
  return Status::ok();
}

// The values of input `index`, known on the host (Slice's starts, CumSum's axis, a
// reduction's axes), as integers.
inline Status hostIndexValues(StepContext &context, size_t index, const char *what,
                              std::vector<int64_t> &values) {
  const TensorRef *tensor = context.hostInput(index);
  if (!tensor)
    return context.error(what, " is not known on the host");
  int64_t count = tensor->elements();
  if (count < 0)
    return context.error(what, " has an invalid shape");
  if (count > 0 && !tensor->data)
    return context.error(what, " is not known on the host");
  values.resize(static_cast<size_t>(count));
  if (tensor->dtype == DType::I64) {
    for (int64_t i = 0; i < count; ++i)
      values[i] = tensor->as<int64_t>()[i];
  } else if (tensor->dtype == DType::I32) {
    for (int64_t i = 0; i < count; ++i)
      values[i] = tensor->as<int32_t>()[i];
  } else {
    return context.error(what, " is ", dtypeName(tensor->dtype), ", not i64 or i32");
  }
  return Status::ok();
}

inline Status normalizeAxis(StepContext &context, int64_t axis, size_t rank, const char *what,
                            int64_t &out) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    return context.error(what, " ", axis, " is out of range for rank ", rank);
  out = axis < 0 ? axis + r : axis;
  return Status::ok();
}

// The product of shape[begin, end).
inline int64_t product(const Shape &shape, size_t begin, size_t end) {
  int64_t result = 1;
  for (size_t d = begin; d < end; ++d)
    result *= shape[d];
  return result;
}

// A contiguous tensor viewed as [outer, length, inner] around `axis`: the lines along the
// axis that a scan or a selection walks, one thread each.
struct Lines {
  long long outer, length, inner;
  long long count() const { return outer * inner; }
};
inline Lines linesAlong(const Shape &shape, int64_t axis) {
  return {product(shape, 0, axis), shape[axis], product(shape, axis + 1, shape.size())};
}

// Gather's kin: the step's kernel, data, indices and an output of data's dtype.
inline Status gatherOperands(StepContext &context, const DeviceTensor *&data,
                             const DeviceTensor *&indices) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  data = context.input(0);
  indices = context.inputCount() > 1 ? context.input(1) : nullptr;
  if (!data || !indices)
    return context.error("needs data and indices");
  if (context.output(0).dtype != data->dtype)
    return context.error("the output's dtype differs from the data's");
  return Status::ok();
}

// Enough blocks of kBlock threads for `count` elements, at most 32 per multiprocessor: the
// elementwise templates stride over what is left.
inline Dim3 gridFor(StepContext &context, int64_t count) {
  int64_t wanted = (count + kBlock - 1) / kBlock;
  int64_t enough = std::max(1, context.multiprocessorCount()) * int64_t(32);
  Dim3 grid;
  grid.x = static_cast<unsigned>(std::max<int64_t>(1, std::min({wanted, enough, kMaxGridX})));
  return grid;
}
inline Status launchElements(StepContext &context, int64_t count, void **args) {
  Dim3 threads;
  threads.x = kBlock;
  return context.launch(0, gridFor(context, count), threads, 0, args);
}

// The data movement ops (Reshape and its kin, Transpose, Expand, Slice, Concat, Split,
// Gather), in GenericMovement.cpp.
void addGenericMovementGpuOps(std::vector<GpuOpInfo> &ops);
// The output's bytes are the input's (Reshape and its kin; also a same-dtype Cast, and Max or
// Min of one input), in GenericMovement.cpp.
Status runContiguousCopy(StepContext &context);
// ONNX MatMul of f32 (generic_matmul.cuh), in GenericMatMul.cpp.
Status runGenericMatMul(StepContext &context);
// ONNX GatherND and GatherElements (generic_gather_nd.cuh, generic_gather_elements.cuh), in
// GenericIndexing.cpp.
Status runGenericGatherND(StepContext &context);
Status runGenericGatherElements(StepContext &context);
// ONNX TopK and OneHot (generic_topk.cuh, generic_onehot.cuh), in GenericIndexing.cpp.
Status runGenericTopK(StepContext &context);
Status runGenericOneHot(StepContext &context);

} // namespace dsrt::cuda

#endif
