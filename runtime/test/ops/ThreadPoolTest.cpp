// The kernels' thread pool: work is shared, every index runs once, and nested or
// concurrent calls neither deadlock nor lose work.
#include "ops/Ops.h"
#include "ops/ThreadPool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace dsrt::ops {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceOnSeveralThreads) {
  setThreadCount(4);
  std::vector<std::atomic<int>> hits(1000);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  parallelFor(1000, 10, [&](int64_t begin, int64_t end) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    for (int64_t i = begin; i < end; ++i)
      ++hits[i];
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let the workers take some
  });
  for (const auto &hit : hits)
    EXPECT_EQ(hit.load(), 1);
  EXPECT_GT(threads.size(), 1u);
  setThreadCount(0);
}

TEST(ThreadPool, NestedAndConcurrentCallsComplete) {
  setThreadCount(3);
  std::atomic<int64_t> total{0};
  auto work = [&] {
    parallelFor(64, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        parallelFor(10, 1, [&](int64_t b, int64_t e) { total += e - b; });  // runs inline
    });
  };
  std::thread other(work);
  work();
  other.join();
  EXPECT_EQ(total.load(), 2 * 64 * 10);
  setThreadCount(1);
  int64_t sequential = 0;
  parallelFor(100, 1, [&](int64_t b, int64_t e) { sequential += e - b; });
  EXPECT_EQ(sequential, 100);
  setThreadCount(0);
}

} // namespace
} // namespace dsrt::ops
