// The kernels' default thread count (AvailableCpus.h): a CPU quota's count rounded up, and
// the affinity mask of the calling thread, which taskset and a container's cpuset set.
#include "ops/AvailableCpus.h"

#include <gtest/gtest.h>

#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace dsrt::ops {
namespace {

TEST(AvailableCpus, AQuotaAllowsItsCpusRoundedUp) {
  EXPECT_EQ(cpusOfQuota("max 100000\n"), 0);  // cgroup v2: no quota
  EXPECT_EQ(cpusOfQuota("200000 100000\n"), 2);
  EXPECT_EQ(cpusOfQuota("150000 100000"), 2);  // docker --cpus=1.5 may use parts of 2
  EXPECT_EQ(cpusOfQuota("50000 100000"), 1);
  EXPECT_EQ(cpusOfQuota("1 100000"), 1);
  EXPECT_EQ(cpusOfQuota(""), 0);
  EXPECT_EQ(cpusOfQuota("100000"), 0);
  EXPECT_EQ(cpusOfQuota("two 100000"), 0);
  EXPECT_EQ(cpusOfQuota("100000 0"), 0);
  EXPECT_EQ(cpusOfQuota(-1, 100000), 0);  // cgroup v1: cfs_quota_us of -1 is none
  EXPECT_EQ(cpusOfQuota(250000, 100000), 3);
  EXPECT_EQ(cpusOfQuota(100000, 100000), 1);
}

#if defined(__linux__)
// The count follows the calling thread's mask: one CPU is one thread, not the machine's.
TEST(AvailableCpus, FollowTheAffinityMask) {
  cpu_set_t all;
  CPU_ZERO(&all);
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  const int allowed = CPU_COUNT(&all);
  EXPECT_LE(availableCpus(), allowed);
  EXPECT_GE(availableCpus(), 1);
  int first = 0;
  while (!CPU_ISSET(first, &all))
    ++first;
  int counted = 0;
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof one, &one) == 0)
      counted = availableCpus();
  });
  pinned.join();
  EXPECT_EQ(counted, 1);
}
#endif

} // namespace
} // namespace dsrt::ops
