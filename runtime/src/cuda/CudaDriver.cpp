#include "cuda/CudaDriver.h"

#include "core/LibraryLoader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace dsrt::cuda {
namespace {

// The first of `names` the library exports: the versioned names come first.
template <typename Fn>
bool resolve(void *library, Fn &slot, std::initializer_list<const char *> names,
             std::string &missing) {
  for (const char *name : names) {
    if (void *symbol = dlsym(library, name)) {
      slot = reinterpret_cast<Fn>(symbol);
      return true;
    }
  }
  missing = *names.begin();
  return false;
}

} // namespace

Status openDriver(DriverApi &out, std::string &library) {
  // Never closed: the driver keeps threads and state that outlive any one session.
  // The search (core/LibraryLoader.h) never takes the toolkit's stub for the driver.
  const LibrarySpec spec = cudaDriverLibrary();
  LoadedLibrary found = findLibrary(spec);
  if (!found.handle) {
    library.clear();
    return Status::error(found.failure(spec));
  }
  library = found.describe();
  void *handle = found.handle;
  DriverApi api;
  std::string missing;
  bool ok = resolve(handle, api.cuInit, {"cuInit"}, missing) &&
            resolve(handle, api.cuGetErrorName, {"cuGetErrorName"}, missing) &&
            resolve(handle, api.cuGetErrorString, {"cuGetErrorString"}, missing) &&
            resolve(handle, api.cuDriverGetVersion, {"cuDriverGetVersion"}, missing) &&
            resolve(handle, api.cuDeviceGetCount, {"cuDeviceGetCount"}, missing) &&
            resolve(handle, api.cuDeviceGet, {"cuDeviceGet"}, missing) &&
            resolve(handle, api.cuDeviceGetName, {"cuDeviceGetName"}, missing) &&
            resolve(handle, api.cuDeviceGetAttribute, {"cuDeviceGetAttribute"}, missing) &&
            resolve(handle, api.cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"},
                    missing) &&
            resolve(handle, api.cuDevicePrimaryCtxRelease,
                    {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}, missing) &&
            resolve(handle, api.cuCtxSetCurrent, {"cuCtxSetCurrent"}, missing) &&
            resolve(handle, api.cuStreamCreate, {"cuStreamCreate"}, missing) &&
            resolve(handle, api.cuStreamDestroy, {"cuStreamDestroy_v2", "cuStreamDestroy"},
                    missing) &&
            resolve(handle, api.cuStreamSynchronize, {"cuStreamSynchronize"}, missing) &&
            resolve(handle, api.cuMemAlloc, {"cuMemAlloc_v2"}, missing) &&
            resolve(handle, api.cuMemFree, {"cuMemFree_v2"}, missing) &&
            resolve(handle, api.cuMemGetInfo, {"cuMemGetInfo_v2"}, missing) &&
            resolve(handle, api.cuMemHostAlloc, {"cuMemHostAlloc"}, missing) &&
            resolve(handle, api.cuMemFreeHost, {"cuMemFreeHost"}, missing) &&
            resolve(handle, api.cuMemcpyHtoDAsync, {"cuMemcpyHtoDAsync_v2"}, missing) &&
            resolve(handle, api.cuMemcpyDtoHAsync, {"cuMemcpyDtoHAsync_v2"}, missing) &&
            resolve(handle, api.cuMemcpyDtoDAsync, {"cuMemcpyDtoDAsync_v2"}, missing) &&
            resolve(handle, api.cuMemcpy2DAsync, {"cuMemcpy2DAsync_v2"}, missing) &&
            resolve(handle, api.cuMemsetD8Async, {"cuMemsetD8Async"}, missing) &&
            resolve(handle, api.cuEventCreate, {"cuEventCreate"}, missing) &&
            resolve(handle, api.cuEventDestroy, {"cuEventDestroy_v2", "cuEventDestroy"},
                    missing) &&
            resolve(handle, api.cuEventRecord, {"cuEventRecord"}, missing) &&
            resolve(handle, api.cuEventSynchronize, {"cuEventSynchronize"}, missing) &&
            resolve(handle, api.cuEventElapsedTime,
                    {"cuEventElapsedTime_v2", "cuEventElapsedTime"}, missing) &&
            resolve(handle, api.cuModuleLoadData, {"cuModuleLoadData"}, missing) &&
            resolve(handle, api.cuModuleUnload, {"cuModuleUnload"}, missing) &&
            resolve(handle, api.cuModuleGetFunction, {"cuModuleGetFunction"}, missing) &&
            resolve(handle, api.cuFuncSetAttribute, {"cuFuncSetAttribute"}, missing) &&
            resolve(handle, api.cuOccupancyMaxActiveBlocksPerMultiprocessor,
                    {"cuOccupancyMaxActiveBlocksPerMultiprocessor"}, missing) &&
            resolve(handle, api.cuLaunchKernel, {"cuLaunchKernel"}, missing) &&
            resolve(handle, api.cuStreamBeginCapture, {"cuStreamBeginCapture_v2"}, missing) &&
            resolve(handle, api.cuStreamEndCapture, {"cuStreamEndCapture"}, missing) &&
            resolve(handle, api.cuGraphInstantiateWithFlags, {"cuGraphInstantiateWithFlags"},
                    missing) &&
            resolve(handle, api.cuGraphLaunch, {"cuGraphLaunch"}, missing) &&
            resolve(handle, api.cuGraphExecDestroy, {"cuGraphExecDestroy"}, missing) &&
            resolve(handle, api.cuGraphDestroy, {"cuGraphDestroy"}, missing);
  if (!ok)
    return Status::error("the CUDA driver library '" + library + "' has no " + missing +
                         ": the driver is too old (CUDA 12 or later is needed)");
  out = api;
  return Status::ok();
}

const DriverApi *processDriver(std::string *whyNot) {
  static std::once_flag once;
  static DriverApi api;
  static bool loaded = false;
  static std::string reason;
  std::call_once(once, [] {
    std::string library;
    Status status = openDriver(api, library);
    if (!status.isOk()) {
      reason = status.message();
      return;
    }
    CUresult result = api.cuInit(0);
    if (result != kCudaSuccess) {
      reason = "the CUDA driver (" + library + ") did not initialise: " +
               driverErrorText(api, result, "cuInit");
      return;
    }
    loaded = true;
  });
  if (!loaded && whyNot)
    *whyNot = reason;
  return loaded ? &api : nullptr;
}

int availableDeviceCount(const DriverApi &driver, std::string *whyNot) {
  int count = 0;
  CUresult result = driver.cuDeviceGetCount(&count);
  if (result != kCudaSuccess) {
    if (whyNot)
      *whyNot = "cannot count CUDA devices: " +
                driverErrorText(driver, result, "cuDeviceGetCount");
    return 0;
  }
  if (count <= 0 && whyNot)
    *whyNot = "the CUDA driver sees no device";
  return count > 0 ? count : 0;
}

int availableDeviceCount(std::string *whyNot) {
  const DriverApi *driver = processDriver(whyNot);
  return driver ? availableDeviceCount(*driver, whyNot) : 0;
}

std::string driverErrorText(const DriverApi &driver, CUresult result, const char *call) {
  const char *name = nullptr, *text = nullptr;
  if (driver.cuGetErrorName)
    driver.cuGetErrorName(result, &name);
  if (driver.cuGetErrorString)
    driver.cuGetErrorString(result, &text);
  std::string message = std::string(call) + ": ";
  message += name ? name : "CUDA error " + std::to_string(result);
  if (text)
    message += std::string(" (") + text + ")";
  return message;
}

} // namespace dsrt::cuda
