// All tensor-parallel ranks of a plan in one process: one thread per rank, collectives
// through shared memory (docs/design.md §5), so TP plans run on one CPU or one GPU.
#ifndef DSRT_COMM_INPROCESSGROUP_H
#define DSRT_COMM_INPROCESSGROUP_H

#include "ops/Ops.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

namespace dsrt {

class InProcessGroup {
public:
  explicit InProcessGroup(int size);
  ~InProcessGroup();
  int size() const { return static_cast<int>(members_.size()); }
  ops::Collectives &member(int rank);
  // Wakes every rank waiting in a collective with an error (a rank failed, and the others
  // would wait for it forever); later collectives fail at once.
  void abort();
  // Waits until every rank has called it (false when the group was aborted).
  bool synchronize() { return barrier().isOk(); }
  // Makes an aborted group usable again; only when no rank is inside a collective.
  void reset();

private:
  class Member;
  Status barrier();

  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<const void *> published_;
  std::vector<std::unique_ptr<Member>> members_;
};

} // namespace dsrt

#endif
