#include "session/Session.h"

#include "cpu/Session.h"
#include "cuda/CudaDriver.h"
#include "cuda/CudaSession.h"

#include <iostream>
#include <mutex>

namespace dsrt {

Status createSession(std::shared_ptr<PlanFile> plan, int rank, DeviceKind device,
                     ops::Collectives *collectives, std::unique_ptr<Session> &out,
                     cuda::DeviceCollectives *deviceCollectives) {
  if (device == DeviceKind::Cuda) {
    std::string whyNot;
    if (cuda::availableDeviceCount(&whyNot) > 0) {
      cuda::CudaSessionOptions options;
      options.collectives = collectives;
      options.deviceCollectives = deviceCollectives;  // null: staged over `collectives`
      std::unique_ptr<cuda::CudaSession> session;
      DSRT_RETURN_IF_ERROR(cuda::CudaSession::create(std::move(plan), rank, options, session));
      out = std::move(session);
      return Status::ok();
    }
    if (cuda::strictDeviceFromEnvironment())
      return Status::error("strict device mode (DSRT_STRICT_DEVICE=1): no usable CUDA device (" +
                           whyNot + ")");
    static std::once_flag said;
    std::call_once(said, [&] {
      std::cerr << "dsrt: no usable CUDA device (" << whyNot << "); running on the CPU\n";
    });
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
  if (device == DeviceKind::Cuda)
    return Status::error("the paged KV cache runs on the CPU backends for now (device cpu or "
                         "cpu-reference); the CUDA attention kernels do not read block tables "
                         "yet");
  std::unique_ptr<CpuSession> session;
  CpuSessionOptions options;
  options.reference = device == DeviceKind::CpuReference;
  options.kvBlockSize = paged.blockSize;
  options.kvBlocks = paged.blocks;
  options.onlyPrograms = paged.programs;
  DSRT_RETURN_IF_ERROR(CpuSession::create(std::move(plan), rank, session, collectives, options));
  out = std::move(session);
  return Status::ok();
}

} // namespace dsrt
