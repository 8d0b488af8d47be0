#include "session/Session.h"

#include "cpu/Session.h"
#include "cuda/CudaDriver.h"
#include "cuda/CudaSession.h"

#include <atomic>
#include <iostream>
#include <mutex>

namespace dsrt {

namespace {

// DSRT_DEVICE_CUDA's fallback to the CPU: said once, unless strict mode forbids it.
Status cudaUnavailable(const std::string &whyNot) {
  if (cuda::strictDeviceFromEnvironment())
    return Status::error("strict device mode (DSRT_STRICT_DEVICE=1): no usable CUDA device (" +
                         whyNot + ")");
  static std::once_flag said;
  std::call_once(said, [&] {
    std::cerr << "dsrt: no usable CUDA device (" << whyNot << "); running on the CPU\n";
  });
  return Status::ok();
}

std::atomic<const cuda::DriverApi *> driverForTests{nullptr};

// A CUDA session of `options` where a device is usable; `created` false where there is
// none and the CPU should run the plan instead.
Status createCudaSession(std::shared_ptr<PlanFile> &plan, int rank,
                         cuda::CudaSessionOptions options, std::unique_ptr<Session> &out,
                         bool &created) {
  created = false;
  std::string whyNot;
  if (const cuda::DriverApi *driver = driverForTests.load())
    options.driver = driver;
  if ((options.driver ? cuda::availableDeviceCount(*options.driver, &whyNot)
                      : cuda::availableDeviceCount(&whyNot)) == 0)
    return cudaUnavailable(whyNot);
  std::unique_ptr<cuda::CudaSession> session;
  DSRT_RETURN_IF_ERROR(cuda::CudaSession::create(std::move(plan), rank, options, session));
  out = std::move(session);
  created = true;
  return Status::ok();
}

} // namespace

void setCudaDriverForTests(const cuda::DriverApi *driver) { driverForTests = driver; }

Status createSession(std::shared_ptr<PlanFile> plan, int rank, DeviceKind device,
                     ops::Collectives *collectives, std::unique_ptr<Session> &out,
                     cuda::DeviceCollectives *deviceCollectives) {
  if (device == DeviceKind::Cuda) {
    cuda::CudaSessionOptions options;
    options.collectives = collectives;
    options.deviceCollectives = deviceCollectives;  // null: staged over `collectives`
    bool created = false;
    DSRT_RETURN_IF_ERROR(createCudaSession(plan, rank, options, out, created));
    if (created)
      return Status::ok();
  }
  std::unique_ptr<CpuSession> session;
  CpuSessionOptions options;
  options.reference = device == DeviceKind::CpuReference;
  DSRT_RETURN_IF_ERROR(CpuSession::create(std::move(plan), rank, session, collectives, options));
  out = std::move(session);
  return Status::ok();
}

Status createPagedSession(std::shared_ptr<PlanFile> plan, int rank, DeviceKind device,
                          ops::Collectives *collectives, const PagedKvOptions &paged,
                          std::unique_ptr<Session> &out) {
  if (device == DeviceKind::Cuda && paged.int8Cache)
    return Status::error("the int8 KV cache runs on the CPU backends only: the CUDA paged "
                         "attention kernels read the plan's f16 or f32 cache");
  if (device == DeviceKind::Cuda) {
    // The block pool on the device; the collectives staged through host memory (the
    // engine's ranks are threads or MPI processes).
    cuda::CudaSessionOptions options;
    options.collectives = collectives;
    options.kvBlockSize = paged.blockSize;
    options.kvBlocks = paged.memoryFraction > 0 ? paged.gpuMostBlocks : paged.blocks;
    options.kvMemoryFraction = paged.memoryFraction;
    options.onlyPrograms = paged.programs;
    bool created = false;
    DSRT_RETURN_IF_ERROR(createCudaSession(plan, rank, options, out, created));
    if (created)
      return Status::ok();
  }
  std::unique_ptr<CpuSession> session;
  CpuSessionOptions options;
  options.reference = device == DeviceKind::CpuReference;
  options.kvBlockSize = paged.blockSize;
  options.kvBlocks = paged.blocks;
  options.onlyPrograms = paged.programs;
  options.rowInvariant = paged.rowInvariant;
  options.exactFloatRows = paged.exactFloatRows;
  options.kvInt8 = paged.int8Cache;
  DSRT_RETURN_IF_ERROR(CpuSession::create(std::move(plan), rank, session, collectives, options));
  out = std::move(session);
  return Status::ok();
}

} // namespace dsrt
