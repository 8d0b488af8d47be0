// What the CUDA session puts on the device once: the weights, the kernels' modules and the
// KV cache.
#include "cuda/CudaSession.h"
#include "cuda/CublasLt.h"

#include "session/PlanChecks.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

namespace dsrt::cuda {
namespace {

constexpr uint64_t kDeviceAlignment = 256;  // cudaMalloc's

uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

// One piece of the weight image: `bytes` bytes from `source` at `offset` in the device
// allocation.
struct UploadItem {
  const uint8_t *source = nullptr;
  uint64_t bytes = 0;
  uint64_t offset = 0;
};

} // namespace

// Weights keep their stored dtype on the device; those a generic-path op reads get a copy
// in the plan's dtype, converted on the host (as the CPU backend converts them). Everything
// goes up as one image through two pinned staging buffers: while chunk i transfers, chunk
// i + 1 is filled.
Status CudaSession::uploadWeights() {
  const dsp::Plan &header = plan_->plan();
  size_t count = slots_.size();
  std::vector<bool> needsConverted(count, false);
  if (header.programs())
    for (size_t p = 0; p < compiled_.size(); ++p) {
      const dsp::Program &program = *header.programs()->Get(p);
      for (size_t i = 0; i < compiled_[p].size(); ++i) {
        const dsp::Step &step = *program.steps()->Get(i);
        if (!step.inputs())
          continue;
        for (size_t j = 0; j < step.inputs()->size(); ++j) {
          const int input = step.inputs()->Get(static_cast<uint32_t>(j));
          if (input >= 0 && !compiled_[p][i].readsStored(j) &&
              slots_[input].kind == dsp::TensorKind::weight &&
              slots_[input].deviceDType != slots_[input].dtype)
            needsConverted[input] = true;
        }
      }
    }

  std::vector<UploadItem> items;
  std::vector<int> itemTensor;  // -1: a stored weight shared by tensors
  std::map<int, uint64_t> storedOffset;  // weight_index -> offset in the image
  std::vector<std::vector<uint8_t>> converted;
  uint64_t imageBytes = 0;
  for (size_t i = 0; i < count; ++i) {
    const dsp::Tensor &tensor = *header.tensors()->Get(i);
    if (tensor.kind() != dsp::TensorKind::weight)
      continue;
    TensorRef stored = section_->weight(tensor.weight_index());
    if (!storedOffset.count(tensor.weight_index())) {
      storedOffset[tensor.weight_index()] = imageBytes;
      items.push_back({static_cast<const uint8_t *>(stored.data), stored.bytes(), imageBytes});
      imageBytes = alignUp(imageBytes + stored.bytes(), kDeviceAlignment);
    }
    if (needsConverted[i]) {
      Slot &slot = slots_[i];
      std::vector<uint8_t> bytes(static_cast<size_t>(stored.elements()) *
                                 dtypeSize(slot.dtype));
      if (!convertFloats(stored.dtype, stored.data, slot.dtype, bytes.data(),
                         stored.elements()))
        return Status::error(plan_->path() + ": weight '" + str(tensor.name()) +
                             "': cannot convert it from " + dtypeName(stored.dtype) + " to " +
                             dtypeName(slot.dtype));
      converted.push_back(std::move(bytes));
      items.push_back({converted.back().data(), converted.back().size(), imageBytes});
      slot.converted = imageBytes;  // rebased below
      imageBytes = alignUp(imageBytes + converted.back().size(), kDeviceAlignment);
    }
  }
  if (items.empty())
    return Status::ok();
  DSRT_RETURN_IF_ERROR(allocate(imageBytes, weightBase_, "the weights"));
  memory_.weights = imageBytes;
  for (size_t i = 0; i < count; ++i) {
    const dsp::Tensor &tensor = *header.tensors()->Get(i);
    if (tensor.kind() != dsp::TensorKind::weight)
      continue;
    Slot &slot = slots_[i];
    slot.device = weightBase_ + storedOffset[tensor.weight_index()];
    slot.deviceCapacity = section_->weight(tensor.weight_index()).bytes();
    slot.deviceValid = true;
    if (needsConverted[i])
      slot.converted += weightBase_;
  }

  size_t chunk = std::max<size_t>(std::min<uint64_t>(options_.uploadChunkBytes, imageBytes), 1);
  void *staging[2] = {nullptr, nullptr};
  CUevent copied[2] = {nullptr, nullptr};
  bool pending[2] = {false, false};
  Status status = Status::ok();
  for (int b = 0; b < 2 && status.isOk(); ++b) {
    status = check(driver_->cuMemHostAlloc(&staging[b], chunk, kMemHostAllocPortable),
                   "cuMemHostAlloc");
    if (status.isOk())
      status = check(driver_->cuEventCreate(&copied[b], kEventDisableTiming), "cuEventCreate");
  }
  size_t next = 0;  // the first item not yet wholly copied
  uint64_t chunkIndex = 0;
  for (uint64_t start = 0; status.isOk() && start < imageBytes; start += chunk, ++chunkIndex) {
    int b = static_cast<int>(chunkIndex % 2);
    uint64_t length = std::min<uint64_t>(chunk, imageBytes - start);
    if (pending[b]) {  // its previous copy must have left the buffer
      status = check(driver_->cuEventSynchronize(copied[b]), "cuEventSynchronize");
      if (!status.isOk())
        break;
    }
    auto *buffer = static_cast<uint8_t *>(staging[b]);
    std::memset(buffer, 0, length);  // the alignment gaps
    uint64_t end = start + length;
    for (size_t k = next; k < items.size() && items[k].offset < end; ++k) {
      uint64_t from = std::max(start, items[k].offset);
      uint64_t to = std::min(end, items[k].offset + items[k].bytes);
      if (from < to)
        std::memcpy(buffer + (from - start), items[k].source + (from - items[k].offset),
                    to - from);
      if (items[k].offset + items[k].bytes <= end && k == next)
        ++next;
    }
    status = copyToDevice(weightBase_ + start, buffer, length);
    if (status.isOk())
      status = check(driver_->cuEventRecord(copied[b], stream_), "cuEventRecord");
    pending[b] = status.isOk();
  }
  // The staging buffers are freed only after every copy from them has finished.
  Status synced = sync();
  for (int b = 0; b < 2; ++b) {
    if (copied[b])
      driver_->cuEventDestroy(copied[b]);
    if (staging[b])
      driver_->cuMemFreeHost(staging[b]);
  }
  if (!status.isOk())
    return Status::error(plan_->path() + ": uploading the weights: " + status.message());
  return synced;
}

DevicePtr CudaSession::weightDevicePointer(int tensorIndex) const {
  if (tensorIndex < 0 || static_cast<size_t>(tensorIndex) >= slots_.size() ||
      slots_[tensorIndex].kind != dsp::TensorKind::weight)
    return 0;
  return slots_[tensorIndex].device;
}

// One module per plan kernel: the cubin for this device's architecture when the plan has
// it, else the PTX, which the driver compiles for the device.
Status CudaSession::loadKernels() {
  const auto *kernels = plan_->plan().kernels();
  if (!kernels)
    return Status::ok();
  std::string arch = "sm_" + std::to_string(computeCapability_);
  for (const dsp::Kernel *kernel : *kernels) {
    std::string name = str(kernel->name());
    const void *image = nullptr;
    std::string ptx;
    // An ELF image read in place: copied to 8-byte aligned memory first (a FlatBuffers
    // byte vector is only 4-byte aligned).
    std::vector<uint64_t> cubin;
    if (kernel->binaries())
      for (const dsp::KernelBinary *binary : *kernel->binaries())
        if (str(binary->arch()) == arch && binary->cubin() && binary->cubin()->size()) {
          cubin.assign((binary->cubin()->size() + 7) / 8, 0);
          std::memcpy(cubin.data(), binary->cubin()->data(), binary->cubin()->size());
          image = cubin.data();
        }
    if (!image) {
      if (!kernel->ptx() || !kernel->ptx()->size())
        return Status::error(plan_->path() + ": kernel '" + name + "' has no cubin for " +
                             arch + " and no PTX");
      // cuModuleLoadData reads PTX as a NUL-terminated string.
      ptx.assign(reinterpret_cast<const char *>(kernel->ptx()->data()), kernel->ptx()->size());
      image = ptx.c_str();
    }
    CUmodule module = nullptr;
    CUresult result = driver_->cuModuleLoadData(&module, image);
    if (result != kCudaSuccess)
      return Status::error(plan_->path() + ": kernel '" + name + "' (" +
                           (ptx.empty() ? arch + " cubin" : str(kernel->ptx_arch()) + " PTX") +
                           "): " + driverErrorText(*driver_, result, "cuModuleLoadData"));
    modules_.push_back(module);
    CUfunction function = nullptr;
    std::string entry = str(kernel->entry()).empty() ? str(kernel->kind()) : str(kernel->entry());
    result = driver_->cuModuleGetFunction(&function, module, entry.c_str());
    if (result != kCudaSuccess)
      return Status::error(plan_->path() + ": kernel '" + name + "' has no entry '" + entry +
                           "': " + driverErrorText(*driver_, result, "cuModuleGetFunction"));
    functions_.push_back(function);
    functionSharedBytes_.push_back(48 << 10);
  }
  return Status::ok();
}

// The cache layers kvCacheLayout finds, as on the CPU, zeroed on the device.
Status CudaSession::allocateKvCache() {
  std::vector<KvLayerShape> layers;
  DSRT_RETURN_IF_ERROR(kvCacheLayout(*plan_, rank_, layers));
  if (options_.kvBlockSize != 0 || options_.kvBlocks != 0) {
    if (layers.empty())
      return Status::error(plan_->path() + ": the plan has no session KV cache to page (no "
                                           "prefill and decode programs)");
    if (options_.kvMemoryFraction > 0 && options_.kvBlockSize > 0) {
      // Read now, with everything but the lazily allocated placed: the weights, the arena,
      // the inputs and the kernels. The cuBLASLt workspace, allocated at the first GEMM, is
      // set aside; the rest of 1 - fraction is the scratch's and the graphs'.
      size_t free = 0, total = 0;
      DSRT_RETURN_IF_ERROR(check(driver_->cuMemGetInfo(&free, &total), "cuMemGetInfo"));
      free -= std::min(free, CublasLt::kWorkspaceBytes);
      // The plan's ranks this GPU runs (rank % GPUs, or all where DSRT_CUDA_DEVICE pins them)
      // share it: the first to read leaves the later ones room for their weights. (Ranks of
      // another machine under MPI count too: their share is left unused, never overdrawn.)
      int sharing = 0;
      for (int r = 0; r < plan_->rankCount(); ++r)
        sharing += devicePinned_ || r % deviceCount_ == ordinal_ ? 1 : 0;
      free /= static_cast<size_t>(std::max(1, sharing));
      uint64_t perBlock = 0;  // keys and values of every layer, this rank's heads
      for (const KvLayerShape &shape : layers)
        perBlock += 2 * static_cast<uint64_t>(shape.kvHeads * options_.kvBlockSize *
                                              shape.headDim) *
                    dtypeSize(shape.dtype);
      const auto budget =
          static_cast<uint64_t>(options_.kvMemoryFraction * static_cast<double>(free));
      if (budget < perBlock) {
        return Status::error("kv_cache_memory_fraction " +
                             numberText(options_.kvMemoryFraction) + " of the " +
                             std::to_string(free) + " bytes free on " + deviceLabel_ +
                             " once the weights are placed is " + std::to_string(budget) +
                             " bytes, less than one block of " +
                             std::to_string(options_.kvBlockSize) + " positions (" +
                             std::to_string(perBlock) + " bytes over every layer)");
      }
      const uint64_t most = options_.kvBlocks > 0 ? options_.kvBlocks : INT32_MAX;
      options_.kvBlocks = static_cast<int64_t>(std::min(budget / perBlock, most));
    }
    if (options_.kvBlockSize < 1 || options_.kvBlocks < 1 || options_.kvBlocks > INT32_MAX)
      return Status::error("a paged KV cache needs a block size and a block count of at least "
                           "1 (and fewer than 2^31 blocks), not " +
                           std::to_string(options_.kvBlockSize) + " and " +
                           std::to_string(options_.kvBlocks));
    // Blocks of [kvHeads, blockSize, headDim]: DeviceKvLayer's batch and capacity.
    for (KvLayerShape &shape : layers) {
      shape.batch = options_.kvBlocks;
      shape.capacity = options_.kvBlockSize;
    }
    hostKvMirror_.blockSize = options_.kvBlockSize;
  }
  kvLayers_.resize(layers.size());
  for (size_t layer = 0; layer < layers.size(); ++layer) {
    const KvLayerShape &shape = layers[layer];
    size_t bytes = shape.bytes();
    DeviceKvLayer &entry = kvLayers_[layer];
    entry = {shape.dtype, shape.batch, shape.kvHeads, shape.capacity, shape.headDim, 0, 0};
    DSRT_RETURN_IF_ERROR(allocate(bytes, entry.key, "the KV cache"));
    DSRT_RETURN_IF_ERROR(allocate(bytes, entry.value, "the KV cache"));
    DSRT_RETURN_IF_ERROR(
        check(driver_->cuMemsetD8Async(entry.key, 0, bytes, stream_), "cuMemsetD8Async"));
    DSRT_RETURN_IF_ERROR(
        check(driver_->cuMemsetD8Async(entry.value, 0, bytes, stream_), "cuMemsetD8Async"));
    memory_.kvCache += 2 * bytes;
  }
  if (hostKvMirror_.blockSize != 0)
    DSRT_RETURN_IF_ERROR(initPagedCache());
  hostKvMirror_.layers.resize(kvLayers_.size());
  hostKvStorage_.resize(2 * kvLayers_.size());
  for (size_t layer = 0; layer < kvLayers_.size(); ++layer) {
    const DeviceKvLayer &entry = kvLayers_[layer];
    // The host mirror gets its storage when a fallback attention first needs it.
    hostKvMirror_.layers[layer] = {entry.dtype, entry.batch, entry.kvHeads, entry.capacity,
                                   entry.headDim, nullptr, nullptr};
  }
  return Status::ok();
}

// Row b of every layer becomes row sources[b]: each row's heads are `kvHeads` runs of its
// first `positions` positions, `head` bytes apart, gathered into scratch and then written
// back (a row may be both read and overwritten), two strided copies per row and tensor.
Status CudaSession::reorderKvRows(const std::vector<int64_t> &sources, int64_t positions) {
  if (hostKvMirror_.blockSize != 0)
    return Status::error("a paged KV cache's rows are the serving engine's blocks");
  for (const DeviceKvLayer &layer : kvLayers_)
    DSRT_RETURN_IF_ERROR(checkKvRowSources(sources, layer.batch));
  if (sources.empty() || positions <= 0)
    return Status::ok();
  auto runBytes = [&](const DeviceKvLayer &layer) {
    return static_cast<size_t>(std::min(positions, layer.capacity) * layer.headDim) *
           dtypeSize(layer.dtype);
  };
  // One buffer for every layer and tensor: the stream orders each use after the last.
  size_t most = 0;
  for (const DeviceKvLayer &layer : kvLayers_)
    most = std::max(most, static_cast<size_t>(layer.kvHeads) * runBytes(layer));
  DevicePtr held = 0;
  DSRT_RETURN_IF_ERROR(scratch(sources.size() * most, held));
  for (const DeviceKvLayer &layer : kvLayers_) {
    const size_t run = runBytes(layer);
    const size_t head = static_cast<size_t>(layer.capacity * layer.headDim) *
                        dtypeSize(layer.dtype);
    const size_t row = static_cast<size_t>(layer.kvHeads) * head;
    const auto heads = static_cast<size_t>(layer.kvHeads);
    for (DevicePtr base : {layer.key, layer.value}) {
      for (size_t b = 0; b < sources.size(); ++b)
        DSRT_RETURN_IF_ERROR(copy2D(held + b * heads * run, run,
                                    base + static_cast<size_t>(sources[b]) * row, head, run,
                                    heads));
      for (size_t b = 0; b < sources.size(); ++b)
        if (sources[b] != static_cast<int64_t>(b))
          DSRT_RETURN_IF_ERROR(copy2D(base + b * row, head, held + b * heads * run, run, run,
                                      heads));
    }
  }
  return Status::ok();
}

} // namespace dsrt::cuda
