// NCCL between the GPUs of a tensor-parallel group (docs/cuda-backend.md, "Collectives"):
// the device side of an MPI rank's collectives. libnccl is opened with dlopen and declared by
// hand (no CUDA or NCCL headers in the runtime), so libdsrt builds and starts without it;
// the unique id is bootstrapped over the host collectives (MPI).
#ifndef DSRT_COMM_NCCL_H
#define DSRT_COMM_NCCL_H

#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dsrt {

// Where libnccl is looked for, in order: $DSRT_NCCL alone when set (a wrong path is an
// error, not a silent fallback), else the CUDA toolkit's libnccl.so.2 / libnccl.so, the
// same on the loader path, then PyTorch's wheels (core/LibraryLoader.h).
std::vector<std::string> ncclLibraryCandidates();

// Opens the library at `path` and resolves every NCCL function the communicator uses;
// `version` gets ncclGetVersion's code (22809 for 2.28.9). Needs no GPU. For tests and
// diagnostics: the communicator opens the library itself.
Status probeNcclLibrary(const std::string &path, int &version);

// ncclGetUniqueId on this rank and the 128 bytes broadcast to every rank of `bootstrap`
// (rank 0's), through the host collectives. A failure on rank 0 reaches every rank.
Status bootstrapNcclUniqueId(ops::Collectives &bootstrap, std::vector<uint8_t> &uniqueId);

// Makes the rank's GPU current on the calling thread and says which it is. The default
// retains the primary context of device `rank % device count` (or $DSRT_CUDA_DEVICE), the
// device the CUDA session picks for the rank, through libcuda opened with dlopen.
using SelectNcclDevice = std::function<Status(int rank, int &device)>;

class NcclCollectives final : public cuda::DeviceCollectives {
public:
  // A communicator of every rank of `bootstrap` (kept only for the duration of the call),
  // on the device `select` makes current. Collective: every rank calls it, and every rank
  // gets an error when one rank cannot take part (no libnccl, no GPU, two ranks on one GPU),
  // so that none waits for the others in NCCL.
  static Status create(ops::Collectives &bootstrap, std::unique_ptr<NcclCollectives> &out,
                       const SelectNcclDevice &select = {});
  ~NcclCollectives() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }
  Status allReduceSum(cuda::DevicePtr data, int64_t count, cuda::StreamHandle stream) override;
  // One ncclBroadcast per rank of its `bytes[rank]` bytes straight into their place in
  // `out`, grouped into one launch: ncclAllGather needs equal counts, and padding to the
  // largest would need a scratch buffer and a compacting copy on the device.
  Status allGather(cuda::DevicePtr mine, const std::vector<int64_t> &bytes, cuda::DevicePtr out,
                   cuda::StreamHandle stream) override;
  bool capturable() const override { return true; }

  struct Api;  // the resolved NCCL functions

private:
  NcclCollectives() = default;
  Status check(int result, const char *call) const;

  const Api *api_ = nullptr;
  void *comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, size_ = 1, device_ = -1;
  std::function<void()> releaseDevice_;
};

} // namespace dsrt

#endif
