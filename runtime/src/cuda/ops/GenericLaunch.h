// What the generic path's launchers (GenericOps.cpp, GenericMatMul.cpp) share: how a step
// without its kernel asks for the fallback, and the check that a kernel was specialised for
// the step in hand.
#ifndef DSRT_CUDA_OPS_GENERICLAUNCH_H
#define DSRT_CUDA_OPS_GENERICLAUNCH_H

#include "cuda/GpuOps.h"

namespace dsrt::cuda {

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

// ONNX MatMul of f32 (generic_matmul.cuh), in GenericMatMul.cpp.
Status runGenericMatMul(StepContext &context);

} // namespace dsrt::cuda

#endif
