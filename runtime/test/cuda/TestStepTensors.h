// The tensors of a StepContext for the launcher tests (the emulation harnesses and the
// recording context): the step's inputs, an absent one empty, and its outputs, as the tests
// fill them. Each harness adds how it launches, allocates and answers the rest.
#ifndef DSRT_TEST_CUDA_TESTSTEPTENSORS_H
#define DSRT_TEST_CUDA_TESTSTEPTENSORS_H

#include "cuda/GpuOps.h"

#include <optional>
#include <vector>

namespace dsrt::test {

class TestStepTensors : public cuda::StepContext {
public:
  std::vector<std::optional<cuda::DeviceTensor>> inputs;
  std::vector<cuda::DeviceTensor> outputs;

  size_t inputCount() const override { return inputs.size(); }
  const cuda::DeviceTensor *input(size_t index) const override {
    return index < inputs.size() && inputs[index] ? &*inputs[index] : nullptr;
  }
  const TensorRef *hostInput(size_t) const override { return nullptr; }
  size_t outputCount() const override { return outputs.size(); }
  const cuda::DeviceTensor &output(size_t index) const override { return outputs.at(index); }

  // A step without a KV cache, collectives or a stream, not captured: what the linear and
  // MoE harnesses answer (the attention harness overrides them).
  const cuda::DeviceKvLayer *kvLayer(int64_t) const override { return nullptr; }
  cuda::DevicePtr sequenceLengths() const override { return 0; }
  const int32_t *hostSequenceLengths() const override { return nullptr; }
  cuda::DeviceCollectives *collectives() override { return nullptr; }
  cuda::StreamHandle stream() const override { return nullptr; }
  bool capturing() const override { return false; }
};

} // namespace dsrt::test

#endif
