// Run under mpirun: every process checks the MPI communicator's collectives; exit status 0
// only when all ranks agree they hold. With --stall-rank R, rank R never arrives and the
// others must end the job after DSRT_COLLECTIVE_TIMEOUT. With --kill-rank R, rank R dies by
// SIGKILL between two collectives, and the job must end rather than hang.
#include "CollectivesCheck.h"
#include "comm/MpiCollectives.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

int main(int argc, char **argv) {
  std::unique_ptr<dsrt::ops::Collectives> collectives;
  dsrt::Status status = dsrt::createMpiCollectives(collectives);
  if (!status.isOk()) {
    std::fprintf(stderr, "dsrt-mpi-check: %s\n", status.message().c_str());
    return 2;
  }
  // --stall-rank R: rank R never joins the collectives (a rank that failed or runs another
  // program), and stays alive long enough that only the others' timeout can end the job.
  if (argc == 3 && std::string(argv[1]) == "--stall-rank" &&
      collectives->rank() == std::atoi(argv[2])) {
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  // --kill-rank R: every rank starts a run of all-reduces (a generation's steps); rank R is
  // killed after the second, with no chance to say goodbye.
  if (argc == 3 && std::string(argv[1]) == "--kill-rank") {
    for (int step = 0; step < 4; ++step) {
      if (step == 2 && collectives->rank() == std::atoi(argv[2]))
        std::raise(SIGKILL);
      float value = 1;
      status = collectives->allReduceSum(&value, 1);
      if (!status.isOk()) {
        std::fprintf(stderr, "rank %d: %s\n", collectives->rank(), status.message().c_str());
        return 1;
      }
    }
    return 0;
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
