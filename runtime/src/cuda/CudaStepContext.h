// The StepContext (GpuOps.h) the CUDA session hands a launcher for one step: the step's
// inputs and outputs on the device, its kernels, and the session's services (scratch,
// cuBLASLt, copies, the KV cache, the sequence lengths, the collectives).
#ifndef DSRT_CUDA_CUDASTEPCONTEXT_H
#define DSRT_CUDA_CUDASTEPCONTEXT_H

#include "cuda/CudaSession.h"

namespace dsrt::cuda {

// What a launcher sees of the session for one step.
class CudaStepContext final : public StepContext {
public:
  CudaStepContext(CudaSession &session, const dsp::Step &step,
                  const CudaSession::CompiledStep &compiled, bool cacheProgram)
      : session_(session), step_(step), compiled_(compiled), cacheProgram_(cacheProgram) {}

  std::vector<DeviceTensor> inputs;
  std::vector<bool> present;
  std::vector<TensorRef> hostInputs;
  std::vector<bool> hostPresent;
  std::vector<DeviceTensor> outputs;
  bool missingKernel = false;

  std::string_view op() const override { return compiled_.op; }
  const ops::AttrMap &attrs() const override { return compiled_.attrs; }
  size_t inputCount() const override { return inputs.size(); }
  const DeviceTensor *input(size_t index) const override {
    return index < inputs.size() && present[index] ? &inputs[index] : nullptr;
  }
  const TensorRef *hostInput(size_t index) const override {
    return index < hostInputs.size() && hostPresent[index] ? &hostInputs[index] : nullptr;
  }
  size_t outputCount() const override { return outputs.size(); }
  const DeviceTensor &output(size_t index) const override { return outputs.at(index); }

  Status launch(size_t slot, Dim3 grid, Dim3 block, uint32_t sharedBytes,
                void **args) override;
  size_t kernelCount() const override { return step_.kernels() ? step_.kernels()->size() : 0; }
  int64_t kernelConstant(size_t slot, std::string_view name,
                         int64_t fallback) const override;
  Status gemm(const GemmDesc &gemm) override {
    Status status = session_.gemm(gemm);
    return status.isOk() ? status : error(status.message());
  }
  bool gemmTakesEpilogue(const GemmDesc &gemm) override {
    return session_.gemmTakesEpilogue(gemm);
  }
  Status scratch(size_t bytes, DevicePtr &out) override {
    Status status = session_.scratch(bytes, out);
    return status.isOk() ? status : error(status.message());
  }
  Status arrivalCounters(size_t count, DevicePtr &out) override {
    Status status = session_.arrivalCounters(count, out);
    return status.isOk() ? status : error(status.message());
  }
  const DeviceKvLayer *kvLayer(int64_t layer) const override {
    if (layer < 0 || static_cast<size_t>(layer) >= session_.kvLayers_.size())
      return nullptr;
    return &session_.kvLayers_[layer];
  }
  const DevicePagedRows *pagedRows() const override {
    return cacheProgram_ && session_.pagedRowsSet_ ? &session_.pagedRows_ : nullptr;
  }
  DevicePtr sequenceLengths() const override {
    return cacheProgram_ ? session_.sequenceLengths_ : 0;
  }
  const int32_t *hostSequenceLengths() const override {
    return session_.hostSequenceLengths_;
  }
  DeviceCollectives *collectives() override {
    // A launcher asks for the group to enqueue a collective: the next wait is guarded.
    session_.collectivesPending_ = session_.deviceCollectives_ != nullptr;
    return session_.deviceCollectives_;
  }
  int rank() const override { return session_.rank_; }
  StreamHandle stream() const override { return session_.stream_; }
  int multiprocessorCount() const override { return session_.multiprocessors_; }
  int residentBlocksPerMultiprocessor(size_t slot, unsigned threads,
                                      uint32_t sharedBytes) override;
  int computeCapability() const override { return session_.computeCapability_; }
  bool capturing() const override { return session_.capturing_; }
  Status copy(DevicePtr dst, size_t dstPitch, DevicePtr src, size_t srcPitch,
              size_t widthBytes, size_t height) override {
    Status status = session_.copy2D(dst, dstPitch, src, srcPitch, widthBytes, height);
    return status.isOk() ? status : error(status.message());
  }

private:
  std::string kernelName(int kernel) const;

  CudaSession &session_;
  const dsp::Step &step_;
  const CudaSession::CompiledStep &compiled_;
  bool cacheProgram_;
};

} // namespace dsrt::cuda

#endif
