// NcclCollectives' watchdog without a GPU: DSRT_NCCL points at a fake libnccl
// (FakeNcclLibrary.c) whose "kernels" block until ncclCommAbort, whose asynchronous error
// the test sets, and which counts aborts, destroys and any call on a dead communicator.
// Every test uses the same fake, reset before it, so they may also share a process.
#include "comm/CollectiveTimeout.h"
#include "comm/InProcessGroup.h"
#include "comm/Nccl.h"
#include "NcclTestSupport.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

namespace dsrt::test {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct FakeNccl {
  void (*setAsyncError)(int) = nullptr;
  int (*waitForAbort)(double) = nullptr;
  long (*count)(const char *) = nullptr;
  void (*reset)() = nullptr;
};

// The controls of the very library the communicator opens: dlopen of the same path gives
// the same copy.
const FakeNccl &fake() {
  static const FakeNccl controls = [] {
    FakeNccl made;
    void *library = dlopen(DSRT_FAKE_NCCL, RTLD_NOW | RTLD_LOCAL);
    if (!library)
      return made;
    made.setAsyncError =
        reinterpret_cast<void (*)(int)>(dlsym(library, "dsrt_fake_nccl_set_async_error"));
    made.waitForAbort =
        reinterpret_cast<int (*)(double)>(dlsym(library, "dsrt_fake_nccl_wait_for_abort"));
    made.count = reinterpret_cast<long (*)(const char *)>(dlsym(library, "dsrt_fake_nccl_count"));
    made.reset = reinterpret_cast<void (*)()>(dlsym(library, "dsrt_fake_nccl_reset"));
    return made;
  }();
  return controls;
}

class NcclWatchdog : public ::testing::Test {
protected:
  void SetUp() override {
    setenv("DSRT_NCCL", DSRT_FAKE_NCCL, 1);
    ASSERT_TRUE(fake().setAsyncError && fake().waitForAbort && fake().count && fake().reset)
        << "cannot load the fake NCCL " << DSRT_FAKE_NCCL << ": " << dlerror();
    fake().reset();
  }

  // Communicators of `size` ranks, created together as every rank's process would; on
  // "device 0" without CUDA.
  static std::vector<std::unique_ptr<NcclCollectives>> communicators(int size) {
    std::vector<std::unique_ptr<NcclCollectives>> comms;
    std::vector<Status> results = createNcclOnEveryRank(size, comms);
    for (int rank = 0; rank < size; ++rank)
      EXPECT_TRUE(results[rank].isOk()) << "rank " << rank << ": " << results[rank].message();
    return comms;
  }

  // A host wait on a stream whose collective waits for a peer that never comes.
  static Status waitForPeer() {
    return fake().waitForAbort(60) ? Status::ok()
                                   : Status::error("the wait ended without an abort");
  }
};

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

TEST(CollectiveTimeout, ParsesTheEnvironmentLikeMpi) {
  unsetenv("DSRT_COLLECTIVE_TIMEOUT");
  EXPECT_EQ(collectiveTimeoutSeconds(), 300.0);
  const std::pair<const char *, double> cases[] = {
      {"2", 2.0}, {"0.5", 0.5}, {"0", 0.0}, {"", 300.0}, {"-1", 300.0}, {"5s", 300.0},
      {"soon", 300.0}, {"nan", 300.0}};
  for (const auto &[text, seconds] : cases) {
    setenv("DSRT_COLLECTIVE_TIMEOUT", text, 1);
    EXPECT_EQ(collectiveTimeoutSeconds(), seconds) << "DSRT_COLLECTIVE_TIMEOUT=" << text;
  }
}

TEST_F(NcclWatchdog, LoaderNeedsCommAbort) {
  int version = 0;
  Status status = probeNcclLibrary(DSRT_FAKE_NCCL, version);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(version, 22809);
  status = probeNcclLibrary(DSRT_FAKE_NCCL_WITHOUT_ABORT, version);
  EXPECT_TRUE(contains(status.message(), "has no ncclCommAbort")) << status.message();
}

TEST_F(NcclWatchdog, TimeoutAbortsAndNamesStepAndRank) {
  setenv("DSRT_COLLECTIVE_TIMEOUT", "1", 1);
  auto comms = communicators(2);
  ASSERT_TRUE(comms[0] && comms[1]);
  EXPECT_EQ(comms[1]->timeoutSeconds(), 1.0);
  // Rank 0 "died": it never takes part, so rank 1's wait only ends through the watchdog.
  auto start = Clock::now();
  Status status = comms[1]->guard("decode", waitForPeer);
  double waited = secondsSince(start);
  ASSERT_FALSE(status.isOk());
  const std::string &message = status.message();
  EXPECT_TRUE(contains(message, "NCCL: 'decode' on rank 1 did not finish within 1 s "
                                "(DSRT_COLLECTIVE_TIMEOUT)"))
      << message;
  EXPECT_TRUE(contains(message, "which ranks did not arrive is not known to NCCL")) << message;
  EXPECT_TRUE(contains(message, "the communicator was aborted")) << message;
  EXPECT_GE(waited, 0.9) << "aborted before the timeout";
  EXPECT_LT(waited, 10.0);
  EXPECT_EQ(fake().count("abort"), 1);
  EXPECT_TRUE(comms[1]->aborted());
  EXPECT_FALSE(comms[0]->aborted());

  // The communicator is dead: every later collective fails at once, without NCCL.
  start = Clock::now();
  Status reduced = comms[1]->allReduceSum(0x1000, 16, nullptr);
  Status gathered = comms[1]->allGather(0x1000, {4, 4}, 0x2000, nullptr);
  Status guarded = comms[1]->guard("decode", [] { return Status::ok(); });
  EXPECT_LT(secondsSince(start), 0.5);
  EXPECT_EQ(reduced.message(), message);
  EXPECT_EQ(gathered.message(), message);
  EXPECT_EQ(guarded.message(), message);
  EXPECT_EQ(fake().count("all_reduce"), 0);
  EXPECT_EQ(fake().count("broadcast"), 0);
  EXPECT_EQ(fake().count("abort"), 1);

  comms.clear();
  EXPECT_EQ(fake().count("destroy"), 1) << "only rank 0's communicator is left to destroy";
  EXPECT_EQ(fake().count("misuse"), 0) << "a call on an aborted or destroyed communicator";
}

TEST_F(NcclWatchdog, AsyncErrorAbortsBeforeTheTimeout) {
  setenv("DSRT_COLLECTIVE_TIMEOUT", "60", 1);
  auto comms = communicators(1);
  ASSERT_TRUE(comms[0]);
  auto start = Clock::now();
  Status status = comms[0]->guard("prefill", [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    fake().setAsyncError(6);  // ncclRemoteError: a peer's process exited
    return waitForPeer();
  });
  double waited = secondsSince(start);
  ASSERT_FALSE(status.isOk());
  EXPECT_TRUE(contains(status.message(),
                       "NCCL: 'prefill' on rank 0 failed: NCCL reported an asynchronous "
                       "error: remote process exited or there was a network error (fake "
                       "NCCL); the communicator was aborted"))
      << status.message();
  EXPECT_LT(waited, 10.0) << "not aborted until the timeout";
  EXPECT_EQ(fake().count("abort"), 1);
  EXPECT_EQ(comms[0]->allReduceSum(0x1000, 1, nullptr).message(), status.message());
  comms.clear();
  EXPECT_EQ(fake().count("destroy"), 0);
  EXPECT_EQ(fake().count("misuse"), 0);
}

TEST_F(NcclWatchdog, FinishedWaitsPassThrough) {
  setenv("DSRT_COLLECTIVE_TIMEOUT", "1", 1);
  auto comms = communicators(1);
  ASSERT_TRUE(comms[0]);
  NcclCollectives &comm = *comms[0];
  // Slower than a poll, faster than the timeout: watched, and left alone.
  Status status = comm.guard("decode", [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    return Status::ok();
  });
  EXPECT_TRUE(status.isOk()) << status.message();
  EXPECT_GT(fake().count("async_queries"), 0) << "the watchdog did not look during the wait";
  status = comm.guard("decode", [] { return Status::error("cuStreamSynchronize failed"); });
  EXPECT_EQ(status.message(), "cuStreamSynchronize failed");

  constexpr int kGuards = 10000;
  int calls = 0;
  auto start = Clock::now();
  for (int i = 0; i < kGuards; ++i)
    status = comm.guard("decode", [&calls] {
      ++calls;
      return Status::ok();
    });
  double seconds = secondsSince(start);
  EXPECT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(calls, kGuards);
  std::cout << "guard around a no-op wait: " << seconds / kGuards * 1e9 << " ns each ("
            << kGuards << " in " << seconds * 1e3 << " ms)\n";

  // An error while nobody waits is not acted on then (a collective may be being enqueued
  // on that thread), but the next wait sees it.
  fake().setAsyncError(6);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(fake().count("abort"), 0);
  EXPECT_FALSE(comm.aborted());
  EXPECT_TRUE(comm.allReduceSum(0x1000, 4, nullptr).isOk());
  EXPECT_EQ(fake().count("all_reduce"), 1);
  status = comm.guard("decode", waitForPeer);
  EXPECT_TRUE(contains(status.message(), "asynchronous error")) << status.message();
  EXPECT_EQ(fake().count("abort"), 1);
}

TEST_F(NcclWatchdog, ZeroTimeoutWaitsForever) {
  setenv("DSRT_COLLECTIVE_TIMEOUT", "0", 1);
  auto comms = communicators(1);
  ASSERT_TRUE(comms[0]);
  Status status = comms[0]->guard("decode", [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    return Status::ok();
  });
  EXPECT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(fake().count("abort"), 0);
}

TEST_F(NcclWatchdog, DestructorJoinsPromptly) {
  setenv("DSRT_COLLECTIVE_TIMEOUT", "1", 1);
  // Asleep (no wait yet), then awake (right after a wait, while it still polls).
  for (bool guarded : {false, true}) {
    auto comms = communicators(2);
    ASSERT_TRUE(comms[0] && comms[1]);
    if (guarded)
      for (auto &comm : comms)
        ASSERT_TRUE(comm->guard("decode", [] { return Status::ok(); }).isOk());
    auto start = Clock::now();
    comms.clear();
    EXPECT_LT(secondsSince(start), 2.0) << (guarded ? "after a wait" : "never waited");
  }
  EXPECT_EQ(fake().count("destroy"), 4);
  EXPECT_EQ(fake().count("abort"), 0);
  EXPECT_EQ(fake().count("misuse"), 0);
}

TEST_F(NcclWatchdog, DestructorAfterAnAbort) {
  setenv("DSRT_COLLECTIVE_TIMEOUT", "1", 1);
  auto comms = communicators(1);
  ASSERT_TRUE(comms[0]);
  EXPECT_FALSE(comms[0]->guard("decode", waitForPeer).isOk());
  auto start = Clock::now();
  comms.clear();
  EXPECT_LT(secondsSince(start), 2.0);
  EXPECT_EQ(fake().count("abort"), 1);
  EXPECT_EQ(fake().count("destroy"), 0) << "ncclCommAbort already freed the communicator";
  EXPECT_EQ(fake().count("misuse"), 0);
}

} // namespace
} // namespace dsrt::test
