// What the NCCL tests share: communicators created the way every rank's process creates
// them, on threads of an in-process group, on "device 0" without touching CUDA.
#ifndef DSRT_TEST_COMM_NCCLTESTSUPPORT_H
#define DSRT_TEST_COMM_NCCLTESTSUPPORT_H

#include "comm/InProcessGroup.h"
#include "comm/Nccl.h"

#include <memory>
#include <thread>
#include <vector>

namespace dsrt::test {

// NcclCollectives::create on each of `size` ranks at once; `comms` gets the communicators
// (null where creation failed), the result each rank's status.
inline std::vector<Status> createNcclOnEveryRank(
    int size, std::vector<std::unique_ptr<NcclCollectives>> &comms) {
  InProcessGroup group(size);
  std::vector<Status> results(size, Status::ok());
  comms.clear();
  comms.resize(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      results[rank] = NcclCollectives::create(group.member(rank), comms[rank],
                                              [](int, int &device) {
                                                device = 0;
                                                return Status::ok();
                                              });
    });
  for (std::thread &thread : threads)
    thread.join();
  return results;
}

} // namespace dsrt::test

#endif
