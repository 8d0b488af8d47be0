// The CUDA session puts the host's waits on collectives under DeviceCollectives::guard (the
// NCCL watchdog, runtime/test/comm/NcclWatchdogTest.cpp): every run of a tensor-parallel
// program whose stream holds collectives, eager or a replayed CUDA graph, waits through it
// and names its program, and the guard's error is the run's.
#include "FakeDriver.h"
#include "comm/InProcessGroup.h"
#include "cuda/CudaSession.h"
#include "cuda/StagedCollectives.h"

#include "TestPlans.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

namespace dsrt::cuda {
namespace {

// Records the guards and collectives; forwards the collectives to `inner` when there is one
// (staged: correct results) or does nothing (capturable, so that decode is captured).
class RecordingCollectives final : public DeviceCollectives {
public:
  RecordingCollectives(int rank, int size, DeviceCollectives *inner)
      : rank_(rank), size_(size), inner_(inner) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allReduceSum(DevicePtr data, int64_t count, StreamHandle stream) override {
    ++collectives;
    return inner_ ? inner_->allReduceSum(data, count, stream) : Status::ok();
  }
  Status allGather(DevicePtr mine, const std::vector<int64_t> &bytes, DevicePtr out,
                   StreamHandle stream) override {
    ++collectives;
    return inner_ ? inner_->allGather(mine, bytes, out, stream) : Status::ok();
  }
  bool capturable() const override { return !inner_; }
  Status guard(const char *step, const std::function<Status()> &wait) override {
    steps.emplace_back(step);
    Status status = wait();
    return failWith.empty() ? status : Status::error(failWith);
  }

  std::vector<std::string> steps;  // each guard's
  int collectives = 0;
  std::string failWith;  // the guard's error when set, as after NCCL's watchdog aborted

private:
  int rank_, size_;
  DeviceCollectives *inner_;
};

std::shared_ptr<PlanFile> tp2Plan() {
  const char *path = std::getenv("DSRT_TEST_TP2_PLAN");
  if (!path || !*path)
    path = DSRT_TEST_TP2_PLAN_DEFAULT;
  std::unique_ptr<PlanFile> opened;
  Status opening = PlanFile::open(path, opened);
  EXPECT_TRUE(opening.isOk()) << opening.message();
  return std::shared_ptr<PlanFile>(std::move(opened));
}


GpuOpFn collectivesOnly(std::string_view op) {
  return op == "tfm.all_reduce" || op == "tfm.all_gather" ? findGpuOp(op) : nullptr;
}

// Two ranks, staged collectives under the recording guard, everything else through the
// fallback (whose waits come after collectives too).
TEST(CudaCollectiveGuard, EveryWaitOnCollectivesIsGuarded) {
  std::shared_ptr<PlanFile> plan = tp2Plan();
  ASSERT_TRUE(plan);
  fake::reset();
  InProcessGroup group(2);
  std::vector<std::string> errors(2);
  std::vector<std::vector<std::string>> steps(2);
  std::vector<int> collectives(2);
  auto rank = [&](int r) {
    StagedCollectives staged(fake::driver(), group.member(r));
    RecordingCollectives recording(r, 2, &staged);
    CudaSessionOptions options;
    options.driver = &fake::driver();
    options.findOp = collectivesOnly;
    options.collectives = &group.member(r);
    options.deviceCollectives = &recording;
    std::unique_ptr<CudaSession> session;
    Status status = CudaSession::create(plan, r, options, session);
    if (status.isOk())
      status = test::runTokens(*session, "prefill", 3, 3);
    if (status.isOk())
      status = test::runTokens(*session, "decode", 4, 1);
    if (!status.isOk()) {
      group.abort();
      errors[r] = status.message();
    }
    steps[r] = recording.steps;
    collectives[r] = recording.collectives;
    if (!status.isOk())
      return;
    // What NCCL's watchdog gives once it aborted, on rank 1 only: that run's error. Rank 1
    // then leaves the group, as a failed rank does, and rank 0's run ends as it may.
    if (r == 1) {
      size_t before = recording.steps.size();
      recording.failWith = "NCCL: 'decode' on rank 1 did not finish within 1 s";
      status = test::runTokens(*session, "decode", 5, 1);
      group.abort();
      if (status.isOk())
        errors[r] = "the guard's error did not reach the run";
      else if (status.message().find("NCCL: 'decode' on rank 1 did not finish") ==
               std::string::npos)
        errors[r] = status.message();
      else if (recording.steps.size() == before)
        errors[r] = "the failing run was not guarded";
    } else {
      (void)test::runTokens(*session, "decode", 5, 1);
    }
  };
  std::thread zero(rank, 0), one(rank, 1);
  zero.join();
  one.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
    ASSERT_GT(collectives[r], 0) << "the plan ran no collective";
    int prefill = 0, decode = 0;
    for (const std::string &step : steps[r]) {
      EXPECT_TRUE(step == "prefill" || step == "decode") << step;
      EXPECT_FALSE(step == "prefill" && decode > 0) << "a prefill guard after a decode's";
      prefill += step == "prefill";
      decode += step == "decode";
    }
    EXPECT_GE(prefill, 1) << "rank " << r;
    EXPECT_GE(decode, 1) << "rank " << r;
    // At most one guarded wait per collective: the flag is cleared by each wait.
    EXPECT_LE(static_cast<int>(steps[r].size()), collectives[r]) << "rank " << r;
  }
}

// One rank on a capturable group: decode is captured, and a replay, which enqueues its
// collectives without calling the group, still waits through the guard.
TEST(CudaCollectiveGuard, GraphReplaysAreGuarded) {
  std::shared_ptr<PlanFile> plan = tp2Plan();
  ASSERT_TRUE(plan);
  fake::reset();
  RecordingCollectives recording(0, 2, nullptr);
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.deviceCollectives = &recording;
  std::unique_ptr<CudaSession> session;
  Status status = CudaSession::create(plan, 0, options, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_TRUE(test::runTokens(*session, "prefill", 3, 3).isOk());
  // Eager (decides on graphs), then eager and captured, then replayed.
  for (int64_t total = 4; total <= 5; ++total) {
    status = test::runTokens(*session, "decode", total, 1);
    ASSERT_TRUE(status.isOk()) << status.message();
  }
  if (session->graphCount() == 0)
    GTEST_SKIP() << "decode was not captured; see the session's reason on stderr";
  ASSERT_EQ(session->graphReplays(), 0u);
  size_t guards = recording.steps.size();
  int collectives = recording.collectives;
  status = test::runTokens(*session, "decode", 6, 1);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(session->graphReplays(), 1u);
  EXPECT_EQ(recording.collectives, collectives) << "the replay called the group again";
  ASSERT_EQ(recording.steps.size(), guards + 1) << "the replay's wait was not guarded";
  EXPECT_EQ(recording.steps.back(), "decode");
}

} // namespace
} // namespace dsrt::cuda
