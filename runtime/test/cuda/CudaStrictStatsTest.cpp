// The CUDA session's strict device mode and counters (Session::setStrict, stats()) against
// the fake driver, and the staged collectives through the host.
#include "FakeSessions.h"
#include "comm/InProcessGroup.h"
#include "cpu/Session.h"
#include "cuda/StagedCollectives.h"

#include <gtest/gtest.h>

#include <thread>

namespace dsrt::cuda {
namespace {

void createStrictFake(FakeSession &out, GpuOpFn (*findOp)(std::string_view), bool strict,
                      bool graphs = true) {
  ASSERT_NO_FATAL_FAILURE(createFake(out, findOp, size_t(64) << 20, graphs));
  out.session->setStrict(strict);
}

size_t eagerFakeLaunches() {
  size_t count = 0;
  for (const fake::Launch &launch : fake::state().launches)
    count += !launch.captured;
  return count;
}

// The weights are the only upload of a session's creation: bytes uploaded is the weight
// image, byte for byte, and nothing has run yet.
TEST(CudaStrictAndStats, CreationUploadsTheWeightsOnly) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, everyOp));
  SessionStats stats = fake.session->stats();
  EXPECT_GT(stats.bytesUploaded, 0u);
  EXPECT_EQ(stats.bytesUploaded, fake.session->memory().weights);
  size_t faked = 0;
  for (const fake::HostToDevice &copy : fake::state().hostToDevice)
    faked += copy.bytes;
  EXPECT_EQ(stats.bytesUploaded, faked);
  EXPECT_EQ(stats.bytesDownloaded, 0u);
  EXPECT_EQ(stats.kernelLaunches, 0u);
  EXPECT_EQ(stats.fallbackSteps, 0u);
  EXPECT_EQ(stats.graphCaptures, 0u);
  EXPECT_EQ(stats.graphReplays, 0u);
}

// allButAttention: tfm.attention has no launcher. Without strict mode the step falls back
// and is counted; in strict mode the run fails, naming that step (index and op).
TEST(CudaStrictAndStats, AFallbackStepFailsOnlyInStrictMode) {
  size_t attentionStep = 0;
  {
    FakeSession fake;
    ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, allButAttention, false));
    std::vector<float> logits, reference;
    ASSERT_TRUE(test::runForward(*fake.session, logits, reference));
    const std::vector<StepPlacement> &placements = fake.session->lastPlacements("forward");
    size_t fallbacks = 0;
    bool first = true;
    for (size_t i = 0; i < placements.size(); ++i)
      if (placements[i] == StepPlacement::Fallback) {
        ++fallbacks;
        if (first)
          attentionStep = i;
        first = false;
      }
    ASSERT_GT(fallbacks, 0u);
    EXPECT_EQ(fake.session->program("forward")->steps()->Get(attentionStep)->op()->str(),
              "tfm.attention");
    SessionStats stats = fake.session->stats();
    EXPECT_EQ(stats.fallbackSteps, fallbacks);
    EXPECT_EQ(stats.kernelLaunches, eagerFakeLaunches());
    // The fallback downloads its inputs and the caller's logits came down too.
    EXPECT_GT(stats.bytesDownloaded, logits.size() * sizeof(float));
    EXPECT_GT(stats.bytesUploaded, fake.session->memory().weights);
  }
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, allButAttention, true));
  ASSERT_TRUE(test::bindForward(*fake.session));
  Status status = fake.session->run("forward");
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("strict device mode"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("step " + std::to_string(attentionStep) + " (tfm.attention"),
            std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("no GPU launcher"), std::string::npos) << status.message();
  EXPECT_EQ(fake.session->stats().fallbackSteps, 0u);
}

// A step whose op needs kernels and has none in the plan (the CPU-only plan): strict mode
// says the plan has no GPU kernel for it.
TEST(CudaStrictAndStats, AStepWithoutKernelsFailsInStrictMode) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, everyOp, size_t(64) << 20, true, false));
  fake.session->setStrict(true);
  ASSERT_TRUE(test::bindForward(*fake.session));
  Status status = fake.session->run("forward");
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("the plan has no GPU kernel for it"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("step "), std::string::npos) << status.message();
}

// Several decode steps: one capture for the bucket, replays after it; the counters agree
// with what the fake driver saw. Strict mode has nothing to refuse.
TEST(CudaStrictAndStats, CapturedDecodeCountsCapturesAndReplays) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, everyOp, true));
  if (!fake.session->program("decode") || !fake.session->program("prefill"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  DecodeInputs inputs;
  ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
  Status status = fake.session->run("prefill");
  ASSERT_TRUE(status.isOk()) << status.message();
  for (int64_t past = 3; past < 8; ++past) {
    ASSERT_TRUE(bind(*fake.session, "decode", past, 1, inputs));
    status = fake.session->run("decode");
    ASSERT_TRUE(status.isOk()) << status.message();
    EXPECT_FALSE(logitsOf(*fake.session, "decode").empty());
  }
  SessionStats stats = fake.session->stats();
  EXPECT_EQ(stats.graphCaptures, 1u);
  EXPECT_EQ(stats.graphReplays, 3u);  // the first decode decides, the second captures
  EXPECT_EQ(stats.graphReplays, static_cast<uint64_t>(fake::state().graphLaunches));
  EXPECT_EQ(stats.fallbackSteps, 0u);
  EXPECT_EQ(stats.kernelLaunches, eagerFakeLaunches());
  if (fake.plan->plan().kernels() && fake.plan->plan().kernels()->size())
    EXPECT_GT(stats.kernelLaunches, 0u);
  EXPECT_GT(stats.bytesDownloaded, 0u);
}

// The fake driver fails the capture: without strict mode decode goes on eagerly (and says
// so on stderr); in strict mode it is an error naming the program and bucket.
TEST(CudaStrictAndStats, AFailedCaptureFailsOnlyInStrictMode) {
  for (bool strict : {false, true}) {
    SCOPED_TRACE(strict ? "strict" : "not strict");
    FakeSession fake;
    ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, everyOp, strict));
    if (!fake.session->program("decode") || !fake.session->program("prefill"))
      GTEST_SKIP() << "the plan has no session-cache programs";
    DecodeInputs inputs;
    ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
    ASSERT_TRUE(fake.session->run("prefill").isOk());
    ASSERT_TRUE(bind(*fake.session, "decode", 3, 1, inputs));
    ASSERT_TRUE(fake.session->run("decode").isOk());
    fake::state().failCaptures = 1;
    ASSERT_TRUE(bind(*fake.session, "decode", 4, 1, inputs));
    testing::internal::CaptureStderr();
    Status status = fake.session->run("decode");
    std::string said = testing::internal::GetCapturedStderr();
    EXPECT_EQ(fake.session->stats().graphCaptures, 0u);
    if (!strict) {
      ASSERT_TRUE(status.isOk()) << status.message();
      EXPECT_NE(said.find("could not be captured"), std::string::npos) << said;
      ASSERT_TRUE(bind(*fake.session, "decode", 5, 1, inputs));
      ASSERT_TRUE(fake.session->run("decode").isOk());  // eager: nothing replays
      EXPECT_EQ(fake.session->stats().graphReplays, 0u);
      continue;
    }
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("strict device mode"), std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find("program 'decode'"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("could not be captured"), std::string::npos)
        << status.message();
    // The bucket stays without a graph: every later decode in it fails too.
    ASSERT_TRUE(bind(*fake.session, "decode", 5, 1, inputs));
    status = fake.session->run("decode");
    EXPECT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("would run eagerly"), std::string::npos) << status.message();
  }
}

// Strict mode turned on after decode was found unfit for graphs (a fallback step): the next
// decode fails, naming the step that kept it from being captured.
TEST(CudaStrictAndStats, StrictAfterAnEagerDecisionFails) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, allButAttention, false));
  if (!fake.session->program("decode") || !fake.session->program("prefill"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  DecodeInputs inputs;
  ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
  ASSERT_TRUE(fake.session->run("prefill").isOk());
  testing::internal::CaptureStderr();
  ASSERT_TRUE(bind(*fake.session, "decode", 3, 1, inputs));
  ASSERT_TRUE(fake.session->run("decode").isOk());
  testing::internal::GetCapturedStderr();
  EXPECT_GT(fake.session->stats().fallbackSteps, 0u);
  fake.session->setStrict(true);
  ASSERT_TRUE(bind(*fake.session, "decode", 4, 1, inputs));
  Status status = fake.session->run("decode");
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("would run without CUDA graphs"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("tfm.attention"), std::string::npos) << status.message();
}

// Graphs turned off by the caller: no graph is expected, so strict decode runs eagerly.
TEST(CudaStrictAndStats, StrictDecodeWithGraphsTurnedOff) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, everyOp, true, /*graphs=*/false));
  if (!fake.session->program("decode") || !fake.session->program("prefill"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  DecodeInputs inputs;
  ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
  ASSERT_TRUE(fake.session->run("prefill").isOk());
  for (int64_t past = 3; past < 6; ++past) {
    ASSERT_TRUE(bind(*fake.session, "decode", past, 1, inputs));
    Status status = fake.session->run("decode");
    ASSERT_TRUE(status.isOk()) << status.message();
  }
  EXPECT_EQ(fake.session->stats().graphCaptures, 0u);
  EXPECT_EQ(fake.session->stats().graphReplays, 0u);
}

// DSRT_STRICT_DEVICE=1 makes every CUDA session strict; the option does too.
TEST(CudaStrictAndStats, TheEnvironmentTurnsStrictModeOn) {
  ::setenv("DSRT_STRICT_DEVICE", "1", 1);
  FakeSession fake;
  createFake(fake, allButAttention);
  ::unsetenv("DSRT_STRICT_DEVICE");
  ASSERT_TRUE(fake.session);
  EXPECT_TRUE(fake.session->strict());
  ASSERT_TRUE(test::bindForward(*fake.session));
  Status status = fake.session->run("forward");
  EXPECT_NE(status.message().find("strict device mode"), std::string::npos) << status.message();
  fake.session->setStrict(false);
  EXPECT_FALSE(fake.session->strict());
  FakeSession plain;
  ASSERT_NO_FATAL_FAILURE(createFake(plain, everyOp));
  EXPECT_FALSE(plain.session->strict());
}

// The CPU backend has nothing to fall back from: strict mode changes nothing, the counters
// stay zero.
TEST(CudaStrictAndStats, TheCpuSessionIgnoresStrictMode) {
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openGpt2Plan(plan));
  std::unique_ptr<CpuSession> cpu;
  ASSERT_TRUE(CpuSession::create(plan, 0, cpu).isOk());
  cpu->setStrict(true);
  std::vector<float> logits, reference;
  ASSERT_TRUE(test::runForward(*cpu, logits, reference));
  SessionStats stats = cpu->stats();
  EXPECT_EQ(stats.kernelLaunches + stats.fallbackSteps + stats.graphCaptures +
                stats.graphReplays + stats.bytesUploaded + stats.bytesDownloaded,
            0u);
}

// Two ranks (threads) sharing the fake GPU, each summing and gathering its own buffer.
TEST(CudaStagedCollectives, SumAndGatherThroughTheHost) {
  fake::reset();
  const DriverApi &driver = fake::driver();
  InProcessGroup group(2);
  std::vector<std::vector<float>> sums(2), gathered(2);
  std::vector<std::string> errors(2);
  auto rank = [&](int r) {
    StagedCollectives staged(driver, group.member(r));
    CUdeviceptr data = 0, mine = 0, out = 0;
    driver.cuMemAlloc(&data, 4 * sizeof(float));
    driver.cuMemAlloc(&mine, 3 * sizeof(float));
    driver.cuMemAlloc(&out, 5 * sizeof(float));
    float values[4] = {1.0f + r, 2.0f + r, 3.0f + r, 4.0f + r};
    driver.cuMemcpyHtoDAsync(data, values, sizeof values, nullptr);
    // Uneven shards: rank 0 holds 3 floats, rank 1 holds 2.
    float shard[3] = {10.0f * r, 10.0f * r + 1, 10.0f * r + 2};
    driver.cuMemcpyHtoDAsync(mine, shard, sizeof shard, nullptr);
    Status status = staged.allReduceSum(data, 4, nullptr);
    if (status.isOk())
      status = staged.allGather(mine, {12, 8}, out, nullptr);
    errors[r] = status.message();
    sums[r].resize(4);
    gathered[r].resize(5);
    driver.cuMemcpyDtoHAsync(sums[r].data(), data, 4 * sizeof(float), nullptr);
    driver.cuMemcpyDtoHAsync(gathered[r].data(), out, 5 * sizeof(float), nullptr);
    EXPECT_FALSE(staged.capturable());
    for (CUdeviceptr pointer : {data, mine, out})
      driver.cuMemFree(pointer);
  };
  std::thread zero(rank, 0), one(rank, 1);
  zero.join();
  one.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(errors[r].empty()) << errors[r];
    EXPECT_EQ(sums[r], (std::vector<float>{3, 5, 7, 9}));
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 1, 2, 10, 11}));
  }
}

} // namespace
} // namespace dsrt::cuda
