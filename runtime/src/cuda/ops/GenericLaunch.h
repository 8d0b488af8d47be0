// What the generic path's launchers (GenericOps.cpp, GenericMatMul.cpp, GenericIndexing.cpp)
// share: how a step without its kernel asks for the fallback, the check that a kernel was
// specialised for the step in hand, and the grid of an elementwise kernel.
#ifndef DSRT_CUDA_OPS_GENERICLAUNCH_H
#define DSRT_CUDA_OPS_GENERICLAUNCH_H

#include "cuda/GpuOps.h"

#include <algorithm>
#include <cstdint>

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

// The product of shape[begin, end).
inline int64_t product(const Shape &shape, size_t begin, size_t end) {
  int64_t result = 1;
  for (size_t d = begin; d < end; ++d)
    result *= shape[d];
  return result;
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

// ONNX MatMul of f32 (generic_matmul.cuh), in GenericMatMul.cpp.
Status runGenericMatMul(StepContext &context);
// ONNX GatherND and GatherElements (generic_gather_nd.cuh, generic_gather_elements.cuh), in
// GenericIndexing.cpp.
Status runGenericGatherND(StepContext &context);
Status runGenericGatherElements(StepContext &context);

} // namespace dsrt::cuda

#endif
