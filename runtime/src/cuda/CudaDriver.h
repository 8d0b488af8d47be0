// The CUDA driver API reached through dlopen: libdsrt builds and loads on machines without
// CUDA, and a session only needs libcuda once it runs on a GPU. The types and enum values
// below are the few of cuda.h the backend uses, declared here by hand (checked against the
// CUDA 13 header) so that no CUDA header is needed to build the runtime.
//
// The entry points live in a table (DriverApi) rather than being called directly so that
// the session logic can be tested against a fake driver in host memory.
#ifndef DSRT_CUDA_CUDADRIVER_H
#define DSRT_CUDA_CUDADRIVER_H

#include "core/Status.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace dsrt::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUgraph = struct CUgraph_st *;
using CUgraphExec = struct CUgraphExec_st *;

enum : int {
  kCudaSuccess = 0,
  kCudaErrorNoDevice = 100,
  kCudaErrorNotReady = 600,
};
enum : int {
  kDeviceAttributeMultiprocessorCount = 16,
  kDeviceAttributeComputeCapabilityMajor = 75,
  kDeviceAttributeComputeCapabilityMinor = 76,
};
constexpr unsigned kStreamNonBlocking = 0x1;
constexpr unsigned kEventDefault = 0x0;
constexpr unsigned kEventDisableTiming = 0x2;
constexpr unsigned kMemHostAllocPortable = 0x1;
constexpr int kStreamCaptureModeThreadLocal = 1;
constexpr int kFuncAttributeMaxDynamicSharedSizeBytes = 8;
constexpr int kMemoryTypeDevice = 2;

// CUDA_MEMCPY2D (cuda.h), for the strided device-to-device copies of the collectives.
struct Memcpy2D {
  size_t srcXInBytes = 0, srcY = 0;
  int srcMemoryType = 0;
  const void *srcHost = nullptr;
  CUdeviceptr srcDevice = 0;
  void *srcArray = nullptr;
  size_t srcPitch = 0;
  size_t dstXInBytes = 0, dstY = 0;
  int dstMemoryType = 0;
  void *dstHost = nullptr;
  CUdeviceptr dstDevice = 0;
  void *dstArray = nullptr;
  size_t dstPitch = 0;
  size_t WidthInBytes = 0, Height = 0;
};

// The entry points the backend calls, with cuda.h's signatures. Where the driver exports a
// versioned symbol (cuMemAlloc_v2, ...), that is the one resolved: the unversioned names
// are the ABI of CUDA 3.x and older.
struct DriverApi {
  CUresult (*cuInit)(unsigned flags) = nullptr;
  CUresult (*cuGetErrorName)(CUresult error, const char **name) = nullptr;
  CUresult (*cuGetErrorString)(CUresult error, const char **text) = nullptr;
  CUresult (*cuDriverGetVersion)(int *version) = nullptr;
  CUresult (*cuDeviceGetCount)(int *count) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice *device, int ordinal) = nullptr;
  CUresult (*cuDeviceGetName)(char *name, int length, CUdevice device) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int *value, int attribute, CUdevice device) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *context, CUdevice device) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext context) = nullptr;
  CUresult (*cuStreamCreate)(CUstream *stream, unsigned flags) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream stream) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream stream) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr *pointer, size_t bytes) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr pointer) = nullptr;
  CUresult (*cuMemGetInfo)(size_t *free, size_t *total) = nullptr;
  CUresult (*cuMemHostAlloc)(void **pointer, size_t bytes, unsigned flags) = nullptr;
  CUresult (*cuMemFreeHost)(void *pointer) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr destination, const void *source, size_t bytes,
                                CUstream stream) = nullptr;
  CUresult (*cuMemcpyDtoHAsync)(void *destination, CUdeviceptr source, size_t bytes,
                                CUstream stream) = nullptr;
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr destination, CUdeviceptr source, size_t bytes,
                                CUstream stream) = nullptr;
  CUresult (*cuMemcpy2DAsync)(const Memcpy2D *copy, CUstream stream) = nullptr;
  CUresult (*cuMemsetD8Async)(CUdeviceptr destination, unsigned char value, size_t count,
                              CUstream stream) = nullptr;
  CUresult (*cuEventCreate)(CUevent *event, unsigned flags) = nullptr;
  CUresult (*cuEventDestroy)(CUevent event) = nullptr;
  CUresult (*cuEventRecord)(CUevent event, CUstream stream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent event) = nullptr;
  CUresult (*cuEventElapsedTime)(float *milliseconds, CUevent start, CUevent end) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule *module, const void *image) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule module) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction *function, CUmodule module,
                                  const char *name) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction function, int attribute, int value) = nullptr;
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *blocks, CUfunction function,
                                                         int blockSize,
                                                         size_t dynamicSharedBytes) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned gridX, unsigned gridY,
                             unsigned gridZ, unsigned blockX, unsigned blockY, unsigned blockZ,
                             unsigned sharedBytes, CUstream stream, void **params,
                             void **extra) = nullptr;
  CUresult (*cuStreamBeginCapture)(CUstream stream, int mode) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream stream, CUgraph *graph) = nullptr;
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *exec, CUgraph graph,
                                          unsigned long long flags) = nullptr;
  CUresult (*cuGraphLaunch)(CUgraphExec exec, CUstream stream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec exec) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph graph) = nullptr;
};

// Opens the driver library (DSRT_LIBCUDA when set, else libcuda.so.1 / libcuda.so on the
// loader path, never the toolkit's stub: core/LibraryLoader.h);
// `library` says which (with the file it resolved to). Resolves every
// entry point, without calling any of them. A new handle on every call (tests); the
// session uses processDriver().
Status openDriver(DriverApi &out, std::string &library);

// The process's driver, opened and initialised (cuInit) on first use; the same result on
// every later call. Null with the reason in `whyNot` when there is none.
const DriverApi *processDriver(std::string *whyNot = nullptr);

// Devices `driver` can run on, or 0 with the reason in `whyNot` (no library, no device,
// a driver error). The tools and the GPU tests call it to decide whether to run.
int availableDeviceCount(const DriverApi &driver, std::string *whyNot = nullptr);
int availableDeviceCount(std::string *whyNot = nullptr);

// "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
std::string driverErrorText(const DriverApi &driver, CUresult result, const char *call);

} // namespace dsrt::cuda

#endif
