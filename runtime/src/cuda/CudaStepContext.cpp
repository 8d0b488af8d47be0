// What the CUDA session does for launchers: kernel launches, scratch memory, cuBLASLt,
// device copies.
#include "cuda/CudaStepContext.h"

#include "cuda/CublasLt.h"

#include <algorithm>

namespace dsrt::cuda {
namespace {

constexpr size_t kScratchAlignment = 256;
constexpr size_t kMinScratchBlock = size_t(4) << 20;

} // namespace

Status CudaStepContext::launch(size_t slot, Dim3 grid, Dim3 block, uint32_t sharedBytes,
                               void **args) {
  if (slot >= kernelCount()) {
    missingKernel = true;
    return error("the plan has no kernel ", slot, " for this step (a CPU-only plan, or "
                 "its kernel rule declined)");
  }
  int kernel = step_.kernels()->Get(slot);
  if (kernel < 0 || static_cast<size_t>(kernel) >= session_.functions_.size())
    return error("kernel index ", kernel, " is not one of the plan's ",
                 session_.functions_.size(), " kernels");
  if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
      static_cast<uint64_t>(block.x) * block.y * block.z > 1024)
    return error("kernel ", slot, ": invalid launch shape grid (", grid.x, ", ", grid.y,
                 ", ", grid.z, ") block (", block.x, ", ", block.y, ", ", block.z, ")");
  const DriverApi &driver = *session_.driver_;
  CUfunction function = session_.functions_[kernel];
  int &allowed = session_.functionSharedBytes_[kernel];
  if (static_cast<int>(sharedBytes) > allowed) {
    // Above 48 KiB, dynamic shared memory must be asked for.
    CUresult result = driver.cuFuncSetAttribute(
        function, kFuncAttributeMaxDynamicSharedSizeBytes, static_cast<int>(sharedBytes));
    if (result != kCudaSuccess)
      return error("kernel ", slot, " with ", sharedBytes, " bytes of shared memory: ",
                   driverErrorText(driver, result, "cuFuncSetAttribute"));
    allowed = static_cast<int>(sharedBytes);
  }
  CUresult result = driver.cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y,
                                          block.z, sharedBytes, session_.stream_, args,
                                          nullptr);
  if (result != kCudaSuccess)
    return error("kernel '", kernelName(kernel), "': ",
                 driverErrorText(driver, result, "cuLaunchKernel"));
  if (!session_.capturing_) {  // a captured kernel runs with its graph's replays
    ++session_.stats_.kernelLaunches;
    if (static_cast<size_t>(kernel) < session_.launchCounts_.size())
      ++session_.launchCounts_[kernel];
  }
  return Status::ok();
}

int CudaStepContext::residentBlocksPerMultiprocessor(size_t slot, unsigned threads,
                                                     uint32_t sharedBytes) {
  if (slot >= kernelCount())
    return 0;
  int kernel = step_.kernels()->Get(slot);
  if (kernel < 0 || static_cast<size_t>(kernel) >= session_.functions_.size())
    return 0;
  // Asked once per shape: a prefill that is not captured in a graph asks at every step.
  const auto key = std::make_tuple(kernel, threads, sharedBytes);
  auto known = session_.residentBlocks_.find(key);
  if (known != session_.residentBlocks_.end())
    return known->second;
  int blocks = 0;
  const DriverApi &driver = *session_.driver_;
  if (static_cast<int>(sharedBytes) > session_.functionSharedBytes_[kernel] ||
      driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, session_.functions_[kernel], static_cast<int>(threads), sharedBytes) !=
          kCudaSuccess)
    blocks = 0;  // above 48 KiB before the launch allows it, or the driver cannot say
  session_.residentBlocks_[key] = std::max(blocks, 0);
  return std::max(blocks, 0);
}

int64_t CudaStepContext::kernelConstant(size_t slot, std::string_view name,
                                        int64_t fallback) const {
  if (slot >= kernelCount())
    return fallback;
  const auto *kernels = session_.plan_->plan().kernels();
  int kernel = step_.kernels()->Get(slot);
  if (!kernels || kernel < 0 || static_cast<size_t>(kernel) >= kernels->size())
    return fallback;
  const dsp::Kernel &entry = *kernels->Get(kernel);
  if (entry.constants())
    for (const dsp::Attr *constant : *entry.constants())
      if (constant->name() && constant->name()->string_view() == name)
        return constant->i();
  return fallback;
}

std::string CudaStepContext::kernelName(int kernel) const {
  const auto *kernels = session_.plan_->plan().kernels();
  return kernels && kernels->Get(kernel)->name() ? kernels->Get(kernel)->name()->str()
                                                 : std::string();
}

Status CudaSession::scratch(size_t bytes, DevicePtr &out) {
  size_t need = (std::max<size_t>(bytes, 1) + kScratchAlignment - 1) / kScratchAlignment *
                kScratchAlignment;
  for (ScratchBlock &block : scratch_)
    if (block.size - block.used >= need) {
      out = block.base + block.used;
      block.used += need;
      return Status::ok();
    }
  if (capturing_) {
    captureProblem_ = "a step needs more scratch memory than the run before the capture";
    return Status::error(captureProblem_);
  }
  // Blocks are never freed while the session lives: captured graphs keep their addresses.
  size_t size = std::max({need, kMinScratchBlock, scratch_.empty() ? 0 : 2 * scratch_.back().size});
  ScratchBlock block;
  DSRT_RETURN_IF_ERROR(allocate(size, block.base, "scratch memory"));
  block.size = size;
  block.used = need;
  memory_.other += size;
  scratch_.push_back(block);
  out = block.base;
  return Status::ok();
}

Status CudaSession::arrivalCounters(size_t count, DevicePtr &out) {
  if (count > arrivalCapacity_) {
    if (capturing_) {
      captureProblem_ = "a step needs more arrival counters than the run before the capture";
      return Status::error(captureProblem_);
    }
    const size_t capacity = std::max<size_t>(count, 1024);
    DSRT_RETURN_IF_ERROR(
        allocate(capacity * sizeof(int32_t), arrivalCounters_, "arrival counters"));
    DSRT_RETURN_IF_ERROR(check(driver_->cuMemsetD8Async(arrivalCounters_, 0,
                                                        capacity * sizeof(int32_t), stream_),
                               "cuMemsetD8Async"));
    memory_.other += capacity * sizeof(int32_t);
    arrivalCapacity_ = capacity;
  }
  out = arrivalCounters_;
  return Status::ok();
}

Status CudaSession::openCublas() {
  if (cublas_)
    return Status::ok();
  if (capturing_) {
    captureProblem_ = "cuBLASLt was first needed while capturing";
    return Status::error(captureProblem_);
  }
  DSRT_RETURN_IF_ERROR(CublasLt::open(cublas_));
  DSRT_RETURN_IF_ERROR(
      allocate(CublasLt::kWorkspaceBytes, cublasWorkspace_, "the cuBLASLt workspace"));
  memory_.other += CublasLt::kWorkspaceBytes;
  return Status::ok();
}

// The heuristic's answer is host work, kept per problem: asking while a graph is captured
// enqueues nothing. A session whose cuBLASLt cannot open says no, and its gemm reports why.
bool CudaSession::gemmTakesEpilogue(const GemmDesc &gemm) {
  if (!cublas_ && capturing_)
    return false;  // gemm says why
  if (!openCublas().isOk())
    return false;
  return cublas_->takesEpilogue(gemm, CublasLt::kWorkspaceBytes);
}

Status CudaSession::gemm(const GemmDesc &gemm) {
  DSRT_RETURN_IF_ERROR(openCublas());
  DSRT_RETURN_IF_ERROR(
      cublas_->matmul(gemm, cublasWorkspace_, CublasLt::kWorkspaceBytes, stream_));
  if (!capturing_)
    ++stats_.kernelLaunches;
  return Status::ok();
}

Status CudaSession::copy2D(DevicePtr dst, size_t dstPitch, DevicePtr src, size_t srcPitch,
                           size_t widthBytes, size_t height) {
  if (!widthBytes || !height)
    return Status::ok();
  if (height == 1 || (dstPitch == widthBytes && srcPitch == widthBytes))
    return check(driver_->cuMemcpyDtoDAsync(dst, src, widthBytes * height, stream_),
                 "cuMemcpyDtoDAsync");
  if (dstPitch < widthBytes || srcPitch < widthBytes)
    return Status::error("a strided copy's pitch is narrower than its rows");
  Memcpy2D copy;
  copy.srcMemoryType = kMemoryTypeDevice;
  copy.srcDevice = src;
  copy.srcPitch = srcPitch;
  copy.dstMemoryType = kMemoryTypeDevice;
  copy.dstDevice = dst;
  copy.dstPitch = dstPitch;
  copy.WidthInBytes = widthBytes;
  copy.Height = height;
  return check(driver_->cuMemcpy2DAsync(&copy, stream_), "cuMemcpy2DAsync");
}

} // namespace dsrt::cuda
