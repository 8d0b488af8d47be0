// CUDA for the host, for the tests that run the kernel templates (codegen/kernels/*.cuh)
// without a GPU through their launchers (runtime/src/cuda/ops): the execution model and the
// built-ins of runtime/test/cuda/CudaEmulation.h (the one emulation every such test uses), a
// registry of the templates' host builds by their specialised name, and a StepContext whose
// "device" memory is host memory and whose launches run those builds over the grid.
// Include it, then the templates, then #undef the qualifier macros (__global__ ...).
#ifndef DSC_TEST_CODEGEN_HOSTCUDA_H
#define DSC_TEST_CODEGEN_HOSTCUDA_H

#include "CudaEmulation.h"

#include "codegen/kernels/KernelRules.h"
#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dsc::codegen {
namespace {

// A kernel argument as cuLaunchKernel receives it: a pointer to the value.
template <typename T> T arg(void **args, int index) {
  T value;
  std::memcpy(&value, args[index], sizeof value);
  return value;
}

struct HostKernel {
  void (*run)(void **args);
  bool cooperative;  // its block's threads must run concurrently
};
std::map<std::string, HostKernel> &hostKernels() {
  static std::map<std::string, HostKernel> kernels;
  return kernels;
}
bool registerHostKernel(const std::string &name, void (*run)(void **), bool cooperative) {
  hostKernels()[name] = {run, cooperative};
  return true;
}

namespace cuda = dsrt::cuda;

// A StepContext over host memory: launches run the registered host build of the slot's
// kernel (specs[slot].name()) over the whole grid, block after block: one emulated thread
// at a time, or (a cooperative kernel) the block's threads as fibers.
class HostStepContext : public cuda::StepContext {
public:
  std::string opName;
  dsrt::ops::AttrMap attributes;
  std::vector<std::optional<cuda::DeviceTensor>> inputs;
  std::vector<const dsrt::TensorRef *> hostInputs;  // null: known on the device only
  std::vector<cuda::DeviceTensor> outputs;
  std::vector<KernelSpec> specs;
  int launches = 0;
  bool missingKernel = false;  // a launch of a slot the step does not have (the fallback)

  std::string_view op() const override { return opName; }
  const dsrt::ops::AttrMap &attrs() const override { return attributes; }
  size_t inputCount() const override { return inputs.size(); }
  const cuda::DeviceTensor *input(size_t index) const override {
    return index < inputs.size() && inputs[index] ? &*inputs[index] : nullptr;
  }
  const dsrt::TensorRef *hostInput(size_t index) const override {
    return index < hostInputs.size() ? hostInputs[index] : nullptr;
  }
  size_t outputCount() const override { return outputs.size(); }
  const cuda::DeviceTensor &output(size_t index) const override { return outputs.at(index); }

  // Runs the host build of kernel `slot` over the whole grid, block after block
  // (CudaEmulation.h): one emulated thread at a time, or (a cooperative kernel) the block's
  // threads as fibers.
  dsrt::Status launch(size_t slot, cuda::Dim3 grid, cuda::Dim3 block, uint32_t sharedBytes,
                      void **args) override {
    if (slot >= specs.size()) {
      missingKernel = true;
      return error("no kernel in slot ", slot);
    }
    auto kernel = hostKernels().find(specs[slot].name());
    if (kernel == hostKernels().end())
      return error("no host build of ", specs[slot].name());
    if (grid.x == 0 || grid.y != 1 || grid.z != 1 || block.x == 0 || block.x > 1024 ||
        block.y != 1 || block.z != 1 || sharedBytes != 0)
      return error("unexpected launch configuration");
    ++launches;
    if (kernel->second.cooperative && block.x % 32 != 0)
      return error("a cooperative kernel's block must be whole warps");
    cuda_emulation::launch({grid.x, 1, 1}, {block.x, 1, 1},
                           [&] { kernel->second.run(args); }, kernel->second.cooperative);
    return dsrt::Status::ok();
  }
  size_t kernelCount() const override { return specs.size(); }
  int64_t kernelConstant(size_t slot, std::string_view name, int64_t fallback) const override {
    if (slot >= specs.size())
      return fallback;
    for (const auto &[constant, value] : specs[slot].constants)
      if (constant == name)
        return value;
    return fallback;
  }
  dsrt::Status gemm(const cuda::GemmDesc &) override { return error("no gemm here"); }
  dsrt::Status scratch(size_t, cuda::DevicePtr &) override { return error("no scratch here"); }
  const cuda::DeviceKvLayer *kvLayer(int64_t) const override { return nullptr; }
  cuda::DevicePtr sequenceLengths() const override { return 0; }
  const int32_t *hostSequenceLengths() const override { return nullptr; }
  cuda::DeviceCollectives *collectives() override { return nullptr; }
  int rank() const override { return 0; }
  cuda::StreamHandle stream() const override { return nullptr; }
  int multiprocessorCount() const override { return 2; }
  int computeCapability() const override { return 80; }
  bool capturing() const override { return false; }
};

} // namespace
} // namespace dsc::codegen

#endif
