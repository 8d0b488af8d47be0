#include "comm/MpiCollectives.h"

#include "comm/CollectiveTimeout.h"

#ifdef DSRT_HAVE_MPI
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#endif

namespace dsrt {

#ifdef DSRT_HAVE_MPI
namespace {

Status mpiError(const char *call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Status::error(std::string("MPI: ") + call + " failed: " + std::string(text, length));
}

// Read once: the polling loop asks for every collective.
double collectiveTimeout() {
  static const double seconds = collectiveTimeoutSeconds();
  return seconds;
}

// Polls a non-blocking collective until it completes. A rank that never arrives (it failed,
// or runs another program) would hang the others forever, as blocking MPI does: past the
// timeout the collective cannot be cancelled, nor MPI used again, so the job ends here
// (MPI_Abort, after saying why on stderr), as torch.distributed's NCCL watchdog ends it.
// `timed` false: waiting for work that has not come yet (allGatherUntimed).
Status complete(MPI_Request &request, const char *call, int rank, bool timed = true) {
  const auto start = std::chrono::steady_clock::now();
  const double timeout = timed ? collectiveTimeout() : 0;
  for (long polls = 0;; ++polls) {
    int done = 0;
    int code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS)
      return mpiError(call, code);
    if (done)
      return Status::ok();
    if (polls < 4096)
      continue;  // a decode step's collectives finish within microseconds: poll tightly
    double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout > 0 && waited > timeout) {
      std::fprintf(stderr,
                   "dsrt: MPI rank %d waited %.0f s in %s for the other ranks "
                   "(DSRT_COLLECTIVE_TIMEOUT=%g s): a rank failed or runs another program; "
                   "ending the job\n",
                   rank, waited, call, timeout);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
      return Status::error(std::string("MPI: ") + call + " timed out");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

class MpiCollectives : public ops::Collectives {
public:
  MpiCollectives(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allReduceSum(float *data, int64_t count) override {
    if (count > INT_MAX)
      return Status::error("MPI: all-reduce of more than 2^31 elements");
    MPI_Request request;
    int code = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                              MPI_COMM_WORLD, &request);
    return code == MPI_SUCCESS ? complete(request, "MPI_Iallreduce (sum)", rank_)
                               : mpiError("MPI_Iallreduce", code);
  }

  Status allReduceMax(uint64_t *data, int64_t count) override {
    if (count > INT_MAX)
      return Status::error("MPI: all-reduce of more than 2^31 elements");
    MPI_Request request;
    int code = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_UINT64_T,
                              MPI_MAX, MPI_COMM_WORLD, &request);
    return code == MPI_SUCCESS ? complete(request, "MPI_Iallreduce (max)", rank_)
                               : mpiError("MPI_Iallreduce", code);
  }

  Status allGather(const void *mine, const std::vector<int64_t> &bytes, void *out) override {
    return gather(mine, bytes, out, true);
  }

  Status allGatherUntimed(const void *mine, const std::vector<int64_t> &bytes,
                          void *out) override {
    return gather(mine, bytes, out, false);
  }

private:
  Status gather(const void *mine, const std::vector<int64_t> &bytes, void *out, bool timed) {
    std::vector<int> counts, displacements;
    int64_t offset = 0;
    for (int64_t b : bytes) {
      if (b > INT_MAX || offset > INT_MAX)
        return Status::error("MPI: all-gather of more than 2 GiB");
      counts.push_back(static_cast<int>(b));
      displacements.push_back(static_cast<int>(offset));
      offset += b;
    }
    MPI_Request request;
    int code = MPI_Iallgatherv(mine, counts[rank_], MPI_BYTE, out, counts.data(),
                               displacements.data(), MPI_BYTE, MPI_COMM_WORLD, &request);
    return code == MPI_SUCCESS ? complete(request, "MPI_Iallgatherv", rank_, timed)
                               : mpiError("MPI_Iallgatherv", code);
  }

  int rank_, size_;
};

void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

} // namespace

Status createMpiCollectives(std::unique_ptr<ops::Collectives> &out) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int code = MPI_Init(nullptr, nullptr);
    if (code != MPI_SUCCESS)
      return mpiError("MPI_Init", code);
    std::atexit(finalizeAtExit);
  }
  // Errors come back as codes, so that a failed collective is a status, not an abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  out = std::make_unique<MpiCollectives>(rank, size);
  return Status::ok();
}

#else

Status createMpiCollectives(std::unique_ptr<ops::Collectives> &) {
  return Status::error("this libdsrt was built without MPI (install libopenmpi-dev and "
                       "rebuild)");
}

#endif

} // namespace dsrt
