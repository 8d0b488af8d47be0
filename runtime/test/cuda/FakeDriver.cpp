#include "FakeDriver.h"

#include "cuda/CudaSession.h"
#include "plan/PlanFile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <atomic>
#include <mutex>

namespace dsrt::cuda::fake {
namespace {

constexpr CUresult kInvalidValue = 1;
constexpr CUresult kCaptureUnsupported = 900;
constexpr CUresult kCaptureInvalidated = 901;

State &global() {
  static State instance;
  return instance;
}

std::map<CUdeviceptr, size_t> &allocations() {
  static std::map<CUdeviceptr, size_t> live;
  return live;
}

// A device pointer is valid when it lies inside a live allocation, with `bytes` after it.
bool inside(CUdeviceptr pointer, size_t bytes) {
  auto &live = allocations();
  auto it = live.upper_bound(pointer);
  if (it == live.begin())
    return false;
  --it;
  return pointer >= it->first && pointer + bytes <= it->first + it->second;
}

void violation(const char *what) {
  if (global().capturing)
    global().captureViolations.push_back(what);
}

// The staged collectives' tests call the fake from several threads.
std::mutex &lock() {
  static std::mutex mutex;
  return mutex;
}

// Atomic rather than under lock(): handles are made inside calls that hold it.
std::atomic<int> handleCounter{0};
template <typename Handle> Handle newHandle() {
  return reinterpret_cast<Handle>(static_cast<uintptr_t>(0x1000 + 16 * ++handleCounter));
}

CUresult init(unsigned) { return kCudaSuccess; }
CUresult errorName(CUresult error, const char **name) {
  static thread_local std::string text;
  text = "CUDA_ERROR_FAKE_" + std::to_string(error);
  *name = text.c_str();
  return kCudaSuccess;
}
CUresult errorString(CUresult, const char **text) {
  *text = "fake driver error";
  return kCudaSuccess;
}
CUresult driverVersion(int *version) {
  *version = 13000;
  return kCudaSuccess;
}
CUresult deviceCount(int *count) {
  *count = global().deviceCount;
  return kCudaSuccess;
}
CUresult deviceGet(CUdevice *device, int ordinal) {
  if (ordinal < 0 || ordinal >= global().deviceCount)
    return kInvalidValue;
  *device = ordinal;
  return kCudaSuccess;
}
CUresult deviceName(char *name, int length, CUdevice) {
  std::strncpy(name, "Fake GPU", static_cast<size_t>(length));
  return kCudaSuccess;
}
CUresult deviceAttribute(int *value, int attribute, CUdevice) {
  switch (attribute) {
  case kDeviceAttributeMultiprocessorCount: *value = 4; break;
  case kDeviceAttributeComputeCapabilityMajor: *value = 8; break;
  case kDeviceAttributeComputeCapabilityMinor: *value = 0; break;
  default: return kInvalidValue;
  }
  return kCudaSuccess;
}
CUresult retain(CUcontext *context, CUdevice) {
  *context = newHandle<CUcontext>();
  return kCudaSuccess;
}
CUresult release(CUdevice) { return kCudaSuccess; }
CUresult setCurrent(CUcontext) { return kCudaSuccess; }
CUresult streamCreate(CUstream *stream, unsigned) {
  *stream = newHandle<CUstream>();
  return kCudaSuccess;
}
CUresult streamDestroy(CUstream) { return kCudaSuccess; }
CUresult streamSynchronize(CUstream) {
  if (global().capturing) {
    violation("cuStreamSynchronize");
    return kCaptureUnsupported;
  }
  return kCudaSuccess;
}
CUresult memAlloc(CUdeviceptr *pointer, size_t bytes) {
  std::lock_guard<std::mutex> guard(lock());
  violation("cuMemAlloc");
  if (bytes == 0)
    return kInvalidValue;
  void *memory = std::calloc(bytes, 1);
  if (!memory)
    return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  allocations()[*pointer] = bytes;
  ++global().liveAllocations;
  return kCudaSuccess;
}
CUresult memFree(CUdeviceptr pointer) {
  std::lock_guard<std::mutex> guard(lock());
  auto it = allocations().find(pointer);
  if (it == allocations().end())
    return kInvalidValue;
  allocations().erase(it);
  std::free(reinterpret_cast<void *>(pointer));
  --global().liveAllocations;
  return kCudaSuccess;
}
// The device's memory is State::deviceBytes, less what is allocated on it.
CUresult memGetInfo(size_t *free, size_t *total) {
  std::lock_guard<std::mutex> guard(lock());
  size_t used = 0;
  for (const auto &allocation : allocations())
    used += allocation.second;
  *total = global().deviceBytes;
  *free = *total - std::min(*total, used);
  global().freeAnswers.push_back(*free);
  return kCudaSuccess;
}
CUresult hostAlloc(void **pointer, size_t bytes, unsigned) {
  std::lock_guard<std::mutex> guard(lock());
  *pointer = std::malloc(bytes ? bytes : 1);
  global().pinned.insert(*pointer);
  return kCudaSuccess;
}
CUresult freeHost(void *pointer) {
  std::lock_guard<std::mutex> guard(lock());
  global().pinned.erase(pointer);
  std::free(pointer);
  return kCudaSuccess;
}
CUresult copyHtoD(CUdeviceptr destination, const void *source, size_t bytes, CUstream) {
  std::lock_guard<std::mutex> guard(lock());
  if (!inside(destination, bytes))
    return kInvalidValue;
  if (global().capturing) {  // a graph would read the host memory at replay time
    violation("cuMemcpyHtoDAsync");
    return kCaptureUnsupported;
  }
  HostToDevice copy{destination, source, bytes,
                    std::vector<uint8_t>(static_cast<const uint8_t *>(source),
                                         static_cast<const uint8_t *>(source) + bytes)};
  global().hostToDevice.push_back(std::move(copy));
  std::memcpy(reinterpret_cast<void *>(destination), source, bytes);
  return kCudaSuccess;
}
CUresult copyDtoH(void *destination, CUdeviceptr source, size_t bytes, CUstream) {
  std::lock_guard<std::mutex> guard(lock());
  if (!inside(source, bytes))
    return kInvalidValue;
  if (global().capturing) {
    violation("cuMemcpyDtoHAsync");
    return kCaptureUnsupported;
  }
  std::memcpy(destination, reinterpret_cast<const void *>(source), bytes);
  return kCudaSuccess;
}
CUresult copyDtoD(CUdeviceptr destination, CUdeviceptr source, size_t bytes, CUstream) {
  std::lock_guard<std::mutex> guard(lock());
  if (!inside(destination, bytes) || !inside(source, bytes))
    return kInvalidValue;
  if (!global().capturing)  // captured: recorded, not run
    std::memmove(reinterpret_cast<void *>(destination), reinterpret_cast<const void *>(source),
                 bytes);
  return kCudaSuccess;
}
CUresult copy2D(const Memcpy2D *copy, CUstream) {
  std::lock_guard<std::mutex> guard(lock());
  if (copy->srcMemoryType != kMemoryTypeDevice || copy->dstMemoryType != kMemoryTypeDevice)
    return kInvalidValue;
  for (size_t row = 0; row < copy->Height; ++row)
    if (!inside(copy->srcDevice + row * copy->srcPitch, copy->WidthInBytes) ||
        !inside(copy->dstDevice + row * copy->dstPitch, copy->WidthInBytes))
      return kInvalidValue;
  if (!global().capturing)
    for (size_t row = 0; row < copy->Height; ++row)
      std::memmove(reinterpret_cast<void *>(copy->dstDevice + row * copy->dstPitch),
                   reinterpret_cast<const void *>(copy->srcDevice + row * copy->srcPitch),
                   copy->WidthInBytes);
  return kCudaSuccess;
}
CUresult memsetD8(CUdeviceptr destination, unsigned char value, size_t count, CUstream) {
  std::lock_guard<std::mutex> guard(lock());
  if (!inside(destination, count))
    return kInvalidValue;
  if (!global().capturing)
    std::memset(reinterpret_cast<void *>(destination), value, count);
  return kCudaSuccess;
}
CUresult eventCreate(CUevent *event, unsigned) {
  *event = newHandle<CUevent>();
  return kCudaSuccess;
}
CUresult eventDestroy(CUevent) { return kCudaSuccess; }
CUresult eventRecord(CUevent, CUstream) { return kCudaSuccess; }
CUresult eventSynchronize(CUevent) {
  if (global().capturing) {
    violation("cuEventSynchronize");
    return kCaptureUnsupported;
  }
  return kCudaSuccess;
}
CUresult eventElapsed(float *milliseconds, CUevent, CUevent) {
  *milliseconds = 1.0f;
  return kCudaSuccess;
}
CUresult moduleLoad(CUmodule *module, const void *image) {
  std::lock_guard<std::mutex> guard(lock());
  // The test images are short NUL-terminated strings.
  global().moduleImages.push_back(std::string(static_cast<const char *>(image)).substr(0, 16));
  *module = newHandle<CUmodule>();
  return kCudaSuccess;
}
CUresult moduleUnload(CUmodule) { return kCudaSuccess; }
CUresult moduleFunction(CUfunction *function, CUmodule, const char *name) {
  std::lock_guard<std::mutex> guard(lock());
  global().functionNames.push_back(name);
  *function = newHandle<CUfunction>();
  global().functions.push_back(*function);
  return kCudaSuccess;
}
CUresult funcSetAttribute(CUfunction, int attribute, int value) {
  if (attribute != kFuncAttributeMaxDynamicSharedSizeBytes)
    return kInvalidValue;
  std::lock_guard<std::mutex> guard(lock());
  global().sharedMemoryLimits.push_back(value);
  return kCudaSuccess;
}
CUresult occupancy(int *blocks, CUfunction, int blockSize, size_t sharedBytes) {
  if (!blocks || blockSize <= 0)
    return kInvalidValue;
  std::lock_guard<std::mutex> guard(lock());
  global().occupancyQueries.push_back({blockSize, sharedBytes});
  *blocks = global().residentBlocks;
  return kCudaSuccess;
}
CUresult launchKernel(CUfunction function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                      unsigned by, unsigned bz, unsigned shared, CUstream, void **, void **) {
  std::lock_guard<std::mutex> guard(lock());
  Launch launch;
  launch.function = function;
  launch.grid[0] = gx, launch.grid[1] = gy, launch.grid[2] = gz;
  launch.block[0] = bx, launch.block[1] = by, launch.block[2] = bz;
  launch.sharedBytes = shared;
  launch.captured = global().capturing;
  global().launches.push_back(launch);
  return kCudaSuccess;
}
CUresult beginCapture(CUstream, int) {
  if (global().capturing)
    return kInvalidValue;
  global().capturing = true;
  ++global().captures;
  return kCudaSuccess;
}
CUresult endCapture(CUstream, CUgraph *graph) {
  if (!global().capturing)
    return kInvalidValue;
  global().capturing = false;
  if (global().failCaptures > 0) {
    --global().failCaptures;
    *graph = nullptr;
    return kCaptureInvalidated;
  }
  *graph = newHandle<CUgraph>();
  return kCudaSuccess;
}
CUresult instantiate(CUgraphExec *exec, CUgraph, unsigned long long) {
  *exec = newHandle<CUgraphExec>();
  ++global().instantiations;
  return kCudaSuccess;
}
CUresult graphLaunch(CUgraphExec, CUstream) {
  ++global().graphLaunches;
  return kCudaSuccess;
}
CUresult graphExecDestroy(CUgraphExec) { return kCudaSuccess; }
CUresult graphDestroy(CUgraph) { return kCudaSuccess; }

DriverApi build() {
  DriverApi api;
  api.cuInit = init;
  api.cuGetErrorName = errorName;
  api.cuGetErrorString = errorString;
  api.cuDriverGetVersion = driverVersion;
  api.cuDeviceGetCount = deviceCount;
  api.cuDeviceGet = deviceGet;
  api.cuDeviceGetName = deviceName;
  api.cuDeviceGetAttribute = deviceAttribute;
  api.cuDevicePrimaryCtxRetain = retain;
  api.cuDevicePrimaryCtxRelease = release;
  api.cuCtxSetCurrent = setCurrent;
  api.cuStreamCreate = streamCreate;
  api.cuStreamDestroy = streamDestroy;
  api.cuStreamSynchronize = streamSynchronize;
  api.cuMemAlloc = memAlloc;
  api.cuMemFree = memFree;
  api.cuMemGetInfo = memGetInfo;
  api.cuMemHostAlloc = hostAlloc;
  api.cuMemFreeHost = freeHost;
  api.cuMemcpyHtoDAsync = copyHtoD;
  api.cuMemcpyDtoHAsync = copyDtoH;
  api.cuMemcpyDtoDAsync = copyDtoD;
  api.cuMemcpy2DAsync = copy2D;
  api.cuMemsetD8Async = memsetD8;
  api.cuEventCreate = eventCreate;
  api.cuEventDestroy = eventDestroy;
  api.cuEventRecord = eventRecord;
  api.cuEventSynchronize = eventSynchronize;
  api.cuEventElapsedTime = eventElapsed;
  api.cuModuleLoadData = moduleLoad;
  api.cuModuleUnload = moduleUnload;
  api.cuModuleGetFunction = moduleFunction;
  api.cuFuncSetAttribute = funcSetAttribute;
  api.cuOccupancyMaxActiveBlocksPerMultiprocessor = occupancy;
  api.cuLaunchKernel = launchKernel;
  api.cuStreamBeginCapture = beginCapture;
  api.cuStreamEndCapture = endCapture;
  api.cuGraphInstantiateWithFlags = instantiate;
  api.cuGraphLaunch = graphLaunch;
  api.cuGraphExecDestroy = graphExecDestroy;
  api.cuGraphDestroy = graphDestroy;
  return api;
}

} // namespace

State &state() { return global(); }

void reset() {
  State fresh;
  fresh.deviceCount = 1;
  global() = fresh;
}

const DriverApi &driver() {
  static const DriverApi api = build();
  return api;
}

Status openSession(const char *variable, const char *fallbackPath, bool launchCounts,
                   std::shared_ptr<PlanFile> &plan, std::unique_ptr<CudaSession> &session) {
  plan.reset();
  session.reset();
  const char *path = std::getenv(variable);
  std::unique_ptr<PlanFile> opened;
  DSRT_RETURN_IF_ERROR(PlanFile::open(path && *path ? path : fallbackPath, opened));
  if (!opened->plan().kernels() || opened->plan().kernels()->size() == 0)
    return Status::ok();
  plan = std::move(opened);
  reset();
  CudaSessionOptions options;
  options.driver = &driver();
  options.graphs = false;  // every decode step through the launchers
  if (launchCounts && setenv("DSRT_CUDA_LAUNCH_COUNTS", "1", 1) != 0)
    return Status::error("cannot set DSRT_CUDA_LAUNCH_COUNTS");
  Status created = CudaSession::create(plan, 0, options, session);
  if (launchCounts)
    unsetenv("DSRT_CUDA_LAUNCH_COUNTS");
  return created;
}

std::map<std::string, long long> endCountingSession(std::unique_ptr<CudaSession> &session) {
  testing::internal::CaptureStderr();
  session.reset();
  const std::string printed = testing::internal::GetCapturedStderr();
  std::map<std::string, long long> counts;
  const std::string prefix = "dsrt: ", middle = " launches of ";
  for (size_t at = 0, end; at < printed.size(); at = end + 1) {
    end = printed.find('\n', at);
    if (end == std::string::npos)
      end = printed.size();
    const std::string line = printed.substr(at, end - at);
    const size_t of = line.find(middle);
    if (line.rfind(prefix, 0) == 0 && of != std::string::npos)
      counts[line.substr(of + middle.size())] +=
          std::atoll(line.substr(prefix.size(), of - prefix.size()).c_str());
  }
  return counts;
}

} // namespace dsrt::cuda::fake
