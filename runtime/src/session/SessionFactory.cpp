#include "session/Session.h"

#include "cpu/Session.h"

namespace dsrt {

Status createSession(std::shared_ptr<PlanFile> plan, int rank, DeviceKind device,
                     ops::Collectives *collectives, std::unique_ptr<Session> &out,
                     cuda::DeviceCollectives *deviceCollectives) {
  if (device == DeviceKind::Cuda)
    return Status::error("the CUDA backend is not part of this build");
  std::unique_ptr<CpuSession> session;
  DSRT_RETURN_IF_ERROR(CpuSession::create(std::move(plan), rank, session, collectives));
  out = std::move(session);
  return Status::ok();
}

} // namespace dsrt
