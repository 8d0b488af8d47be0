// Run under mpirun: rank 0's NCCL unique id, broadcast over MPI, must arrive identical on
// every rank (each rank gathers everyone's copy and compares). Exit 77 (ctest's skip) when
// this machine cannot create one.
#include "comm/MpiCollectives.h"
#include "comm/Nccl.h"

#include <cstdio>
#include <memory>

int main() {
  std::unique_ptr<dsrt::ops::Collectives> mpi;
  dsrt::Status status = dsrt::createMpiCollectives(mpi);
  if (!status.isOk()) {
    std::fprintf(stderr, "dsrt-nccl-id-check: %s\n", status.message().c_str());
    return 2;
  }
  std::vector<uint8_t> id;
  status = dsrt::bootstrapNcclUniqueId(*mpi, id);
  // Every rank learns whether rank 0 could create one.
  if (!status.isOk()) {
    std::fprintf(stderr, "rank %d: %s\n", mpi->rank(), status.message().c_str());
    return status.message().find("could not") != std::string::npos ||
                   status.message().find("NCCL") != std::string::npos
               ? 77
               : 1;
  }
  int size = mpi->size();
  std::vector<uint8_t> all(id.size() * size);
  status = mpi->allGather(id.data(), std::vector<int64_t>(size, int64_t(id.size())), all.data());
  if (!status.isOk()) {
    std::fprintf(stderr, "rank %d: %s\n", mpi->rank(), status.message().c_str());
    return 1;
  }
  bool same = true, zero = true;
  for (int r = 0; r < size; ++r)
    for (size_t i = 0; i < id.size(); ++i) {
      same &= all[r * id.size() + i] == id[i];
      zero &= id[i] == 0;
    }
  if (mpi->rank() == 0)
    std::printf("%d MPI ranks: NCCL unique id %s\n", size,
                same && !zero ? "identical on every rank" : "DIFFERS or is empty");
  return same && !zero ? 0 : 1;
}
