// NCCL between the GPUs of a tensor-parallel group (docs/cuda-backend.md, "Collectives"):
// the device side of an MPI rank's collectives. libnccl is opened with dlopen and declared by
// hand (no CUDA or NCCL headers in the runtime), so libdsrt builds and starts without it;
// the unique id is bootstrapped over the host collectives (MPI).
#ifndef DSRT_COMM_NCCL_H
#define DSRT_COMM_NCCL_H

#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
  // on the device `select` makes current, and its watchdog thread. Collective: every rank
  // calls it, and every rank gets an error when one rank cannot take part (no libnccl, no
  // GPU, two ranks on one GPU), so that none waits for the others in NCCL. The watchdog's
  // timeout is DSRT_COLLECTIVE_TIMEOUT as set now.
  static Status create(ops::Collectives &bootstrap, std::unique_ptr<NcclCollectives> &out,
                       const SelectNcclDevice &select = {});
  // Stops and joins the watchdog, then destroys the communicator (unless it was aborted:
  // ncclCommAbort already freed it).
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

  // The watchdog, as torch.distributed's ProcessGroupNCCL has one: NCCL's kernels wait
  // forever for a peer that failed, and so does the host synchronising with them. While `wait`
  // runs, the communicator's thread polls ncclCommGetAsyncError every 100 ms and aborts
  // the communicator (ncclCommAbort, which ends its kernels) on an error or when the wait
  // has lasted DSRT_COLLECTIVE_TIMEOUT seconds; the result is then an error naming `step`,
  // this rank, the timeout and the cause, and every later collective and guard fails with
  // it at once. Costs a few uncontended mutex operations; no thread, no system call while
  // the watchdog is awake (it sleeps after a second without guards).
  Status guard(const char *step, const std::function<Status()> &wait) override;
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  double timeoutSeconds() const { return timeout_; }

  struct Api;  // the resolved NCCL functions

private:
  using Clock = std::chrono::steady_clock;

  NcclCollectives() = default;
  Status check(int result, const char *call) const;
  Status abortedError() const;
  void watch();  // the watchdog thread
  // Aborts the communicator; `what` ends the sentence "NCCL: '<step>' on rank <r> ...".
  // With mutex_ held, while the host waits.
  void abortLocked(const std::string &what);

  const Api *api_ = nullptr;
  void *comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, size_ = 1, device_ = -1;
  std::function<void()> releaseDevice_;

  double timeout_ = 300;  // seconds; 0: no timeout, asynchronous errors only
  std::thread watchdog_;
  std::mutex mutex_;  // everything below but aborted_
  std::condition_variable wake_;
  bool stopping_ = false;
  bool asleep_ = false;   // the watchdog waits for a guard without polling: notify it
  bool waiting_ = false;  // the host is inside guard's wait: the only time NCCL may be aborted
  const char *step_ = "";
  Clock::time_point waitStart_, lastWaitEnd_;
  // Written once, under mutex_, before aborted_ is set; read after aborted_ is seen.
  std::string abortMessage_;
  std::atomic<bool> aborted_{false};
};

} // namespace dsrt

#endif
