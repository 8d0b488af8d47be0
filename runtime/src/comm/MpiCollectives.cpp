#include "comm/MpiCollectives.h"

#ifdef DSRT_HAVE_MPI
#include <mpi.h>

#include <climits>
#include <cstdlib>
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

class MpiCollectives : public ops::Collectives {
public:
  MpiCollectives(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allReduceSum(float *data, int64_t count) override {
    if (count > INT_MAX)
      return Status::error("MPI: all-reduce of more than 2^31 elements");
    int code = MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD);
    return code == MPI_SUCCESS ? Status::ok() : mpiError("MPI_Allreduce", code);
  }

  Status allReduceMax(uint64_t *data, int64_t count) override {
    if (count > INT_MAX)
      return Status::error("MPI: all-reduce of more than 2^31 elements");
    int code = MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_UINT64_T, MPI_MAX,
                             MPI_COMM_WORLD);
    return code == MPI_SUCCESS ? Status::ok() : mpiError("MPI_Allreduce", code);
  }

  Status allGather(const void *mine, const std::vector<int64_t> &bytes, void *out) override {
    std::vector<int> counts, displacements;
    int64_t offset = 0;
    for (int64_t b : bytes) {
      if (b > INT_MAX || offset > INT_MAX)
        return Status::error("MPI: all-gather of more than 2 GiB");
      counts.push_back(static_cast<int>(b));
      displacements.push_back(static_cast<int>(offset));
      offset += b;
    }
    int code = MPI_Allgatherv(mine, counts[rank_], MPI_BYTE, out, counts.data(),
                              displacements.data(), MPI_BYTE, MPI_COMM_WORLD);
    return code == MPI_SUCCESS ? Status::ok() : mpiError("MPI_Allgatherv", code);
  }

private:
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
