// The tensor-parallel group on the device when there is no NCCL: each collective copies the
// rank's data to the host, runs the host group's collective (ops::Collectives: threads of
// one process, or MPI), and copies the result back. Correct, not fast, and it synchronises
// the stream, so it is never captured into a CUDA graph. It is what lets several ranks share
// one GPU, which NCCL cannot do.
#ifndef DSRT_CUDA_STAGEDCOLLECTIVES_H
#define DSRT_CUDA_STAGEDCOLLECTIVES_H

#include "cuda/CudaDriver.h"
#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <vector>

namespace dsrt::cuda {

class StagedCollectives final : public DeviceCollectives {
public:
  // `driver` and `group` are kept, not owned; the caller's CUDA context must be current
  // when a collective runs.
  StagedCollectives(const DriverApi &driver, ops::Collectives &group)
      : driver_(driver), group_(group) {}

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  Status allReduceSum(DevicePtr data, int64_t count, StreamHandle stream) override;
  Status allGather(DevicePtr mine, const std::vector<int64_t> &bytes, DevicePtr out,
                   StreamHandle stream) override;
  bool capturable() const override { return false; }

private:
  Status check(CUresult result, const char *call) const;

  const DriverApi &driver_;
  ops::Collectives &group_;
  std::vector<float> floats_;
  std::vector<uint8_t> mine_, gathered_;
};

} // namespace dsrt::cuda

#endif
