// The serving engine on the CUDA session against the fake driver (FakeDriver.h, through
// setCudaDriverForTests): its KV budget where the GPU's free memory decides it
// (kv_cache_memory_fraction, and the default), which only the sessions can read once the
// weights are placed. The steps' arithmetic on a GPU is test/gpu/engine-paged*.test's.
#include "FakeDriver.h"
#include "TestPlans.h"
#include "engine/Engine.h"
#include "session/Session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace dsrt::cuda {
namespace {

constexpr int64_t kBlockSize = 4;
constexpr size_t kWorkspace = size_t(32) << 20;  // cuBLASLt's, set aside

struct FakeEngine {
  FakeEngine() { setCudaDriverForTests(&fake::driver()); }
  ~FakeEngine() { setCudaDriverForTests(nullptr); }
};

Status createEngine(const std::shared_ptr<PlanFile> &plan, size_t deviceBytes,
                    double fraction, std::unique_ptr<engine::Engine> &out) {
  fake::reset();
  fake::state().deviceBytes = deviceBytes;
  engine::EngineOptions options;
  options.device = DeviceKind::Cuda;
  options.blockSize = kBlockSize;
  options.kvCacheMemoryFraction = fraction;
  return engine::Engine::create(plan, options, out);
}

TEST(CudaEngine, AMemoryFractionIsOfWhatTheWeightsLeaveOnTheGpu) {
  FakeEngine fakeEngine;
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openServingPlan(plan));
  const uint64_t perBlock = test::pagedBytesPerBlock(*plan, kBlockSize);
  std::unique_ptr<engine::Engine> engine;
  Status status = createEngine(plan, size_t(256) << 20, 0.05, engine);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(fake::state().freeAnswers.size(), 1u) << "one session, one reading";
  const size_t free = fake::state().freeAnswers[0];
  ASSERT_LT(free, size_t(256) << 20);
  const auto expected = static_cast<int64_t>(
      static_cast<uint64_t>(0.05 * static_cast<double>(free - kWorkspace)) / perBlock);
  ASSERT_GT(expected, 1);
  EXPECT_EQ(engine->stats().totalBlocks, expected);
  EXPECT_EQ(engine->stats().bytesPerBlock, perBlock);
  engine.reset();

  // What does not hold one block is refused, and names the GPU.
  status = createEngine(plan, size_t(256) << 20, 1e-12, engine);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("less than one block"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("free on cuda:0"), std::string::npos) << status.message();
}

// With no budget given, the pool is the full reservation (a max_seq_len sequence for every
// row a step may run) where the GPU holds it, else 0.9 of what the weights leave free.
TEST(CudaEngine, TheDefaultBudgetFollowsTheGpu) {
  FakeEngine fakeEngine;
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openServingPlan(plan));
  const uint64_t perBlock = test::pagedBytesPerBlock(*plan, kBlockSize);
  const dsp::Limits &limits = *plan->plan().limits();
  const int64_t rows = std::max<int64_t>(limits.max_batch(), limits.max_tokens_per_step());
  const int64_t positionsPerBlock = kBlockSize;
  const int64_t full = rows * limits.max_seq_len() / positionsPerBlock;
  std::unique_ptr<engine::Engine> engine;
  Status status = createEngine(plan, size_t(1) << 30, 0, engine);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(fake::state().freeAnswers.size(), 1u);
  const size_t used = (size_t(1) << 30) - fake::state().freeAnswers[0];
  ASSERT_GT(0.9 * static_cast<double>((size_t(1) << 30) - used - kWorkspace),
            static_cast<double>(full * perBlock))
      << "the fake GPU should hold the full reservation";
  EXPECT_EQ(engine->stats().totalBlocks, full);
  engine.reset();

  // A GPU with room for 10 blocks' worth beside the weights: 0.9 of it.
  const size_t tight = used + kWorkspace + 10 * perBlock;
  status = createEngine(plan, tight, 0, engine);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(fake::state().freeAnswers.size(), 1u);
  ASSERT_EQ(fake::state().freeAnswers[0], tight - used) << "the session placed what it had";
  EXPECT_EQ(engine->stats().totalBlocks, 9);
}

} // namespace
} // namespace dsrt::cuda
