// Run under mpirun: every process checks the MPI communicator's collectives; exit status 0
// only when all ranks agree they hold.
#include "CollectivesCheck.h"
#include "comm/MpiCollectives.h"

#include <cstdio>
#include <memory>

int main() {
  std::unique_ptr<dsrt::ops::Collectives> collectives;
  dsrt::Status status = dsrt::createMpiCollectives(collectives);
  if (!status.isOk()) {
    std::fprintf(stderr, "dsrt-mpi-check: %s\n", status.message().c_str());
    return 2;
  }
  std::string problem = dsrt::test::checkCollectives(*collectives);
  // Every rank's verdict reaches rank 0, so one failing rank fails the run.
  float failures = problem.empty() ? 0.0f : 1.0f;
  status = collectives->allReduceSum(&failures, 1);
  if (!problem.empty())
    std::fprintf(stderr, "rank %d: %s\n", collectives->rank(), problem.c_str());
  if (collectives->rank() == 0)
    std::printf("%d MPI ranks: %s\n", collectives->size(),
                failures == 0 && status.isOk() ? "collectives hold" : "FAILED");
  return failures == 0 && status.isOk() ? 0 : 1;
}
