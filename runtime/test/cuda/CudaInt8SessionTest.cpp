// An int8 plan as dsc writes it (gpt2-op17, --dtype int8 --int8-group-size 32: i8 weights,
// f16 scales and biases; ctest fixture cuda_plans) in a CUDA session over the fake driver
// with the real launchers (runtime/src/cuda/ops): every int8 tfm.linear and tfm.lm_head is
// handed to LinearOps.cpp with the tensors the session holds (stored dtypes, rank shapes)
// and the plan's kernels, whose constants (WT 8, SDT, GS, BIAS_DT) and slots the launcher
// checks against them. The fake driver records launches instead of running them, so this
// checks the compiler's and the launcher's agreement, not values (the emulation tests and
// the GPU suite do). Rows stay at most 8, the gemv path (the dequantize + GEMM path would call
// the real cuBLASLt on fake device memory), or take the tile GEMM (gemm_dequant: a kernel,
// for 9 to 512 rows).
#include "FakeDriver.h"
#include "cuda/CudaSession.h"
#include "plan/PlanFile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace dsrt::cuda {
namespace {

std::vector<int64_t> sequence(int64_t first, int64_t count) {
  std::vector<int64_t> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    values[static_cast<size_t>(i)] = first + i;
  return values;
}

// Binds input_ids, attention_mask and position_ids ([1, tokens] i64) of `program`.
void bind(CudaSession &session, const char *program, std::vector<int64_t> &ids,
          std::vector<int64_t> &mask, std::vector<int64_t> &positions) {
  const dsp::Program *found = session.program(program);
  ASSERT_NE(found, nullptr) << program;
  const auto *tensors = session.plan().plan().tensors();
  for (size_t i = 0; i < found->inputs()->size(); ++i) {
    std::string name = tensors->Get(found->inputs()->Get(i))->name()->str();
    std::vector<int64_t> *values = name == "input_ids"        ? &ids
                                   : name == "attention_mask" ? &mask
                                   : name == "position_ids"   ? &positions
                                                              : nullptr;
    ASSERT_NE(values, nullptr) << program << " has an unexpected input " << name;
    TensorRef value{DType::I64, {1, static_cast<int64_t>(values->size())}, values->data()};
    Status status = session.setInput(program, i, value);
    ASSERT_TRUE(status.isOk()) << status.message();
  }
}

// Every tfm.linear and tfm.lm_head of `program` ran on the device (its launcher accepted
// the step); returns how many there were.
size_t linearsOnTheDevice(CudaSession &session, const char *program) {
  const dsp::Program &found = *session.program(program);
  const std::vector<StepPlacement> &placements = session.lastPlacements(program);
  EXPECT_EQ(placements.size(), found.steps()->size());
  size_t linears = 0;
  for (size_t i = 0; i < placements.size() && i < found.steps()->size(); ++i) {
    const std::string op = found.steps()->Get(i)->op()->str();
    if (op != "tfm.linear" && op != "tfm.lm_head")
      continue;
    ++linears;
    EXPECT_EQ(placements[i], StepPlacement::Device) << program << " step " << i << " " << op;
  }
  return linears;
}

TEST(CudaInt8FakeSession, EveryInt8LinearIsAcceptedByItsLauncher) {
  std::shared_ptr<PlanFile> plan;
  std::unique_ptr<CudaSession> session;
  Status status = fake::openSession("DSRT_TEST_INT8_PLAN", DSRT_TEST_INT8_PLAN_DEFAULT, false,
                                    plan, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  if (!plan)
    GTEST_SKIP() << "the int8 plan has no kernels (dsc found no NVRTC)";
  ASSERT_NE(plan->plan().options(), nullptr);
  ASSERT_EQ(plan->plan().options()->dtype()->str(), "int8");

  // Prefill of 4 tokens, then two decode steps: 4 and 1 rows, gemv only.
  std::vector<int64_t> ids = {37, 122, 254, 228}, mask(4, 1), positions = sequence(0, 4);
  ASSERT_NO_FATAL_FAILURE(bind(*session, "prefill", ids, mask, positions));
  status = session->run("prefill");
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(linearsOnTheDevice(*session, "prefill"), 9u);  // 2 x (qkv, out, fc, proj), head
  for (int64_t step = 0; step < 2; ++step) {
    std::vector<int64_t> next = {5 + step}, decodeMask(static_cast<size_t>(5 + step), 1),
                         position = {4 + step};
    ASSERT_NO_FATAL_FAILURE(bind(*session, "decode", next, decodeMask, position));
    status = session->run("decode");
    ASSERT_TRUE(status.isOk()) << status.message();
    EXPECT_EQ(linearsOnTheDevice(*session, "decode"), 9u);
  }
  EXPECT_FALSE(fake::state().launches.empty());
  // The gemv grids (256 threads) are one wave of the blocks the occupancy calculator says fit:
  // 3 per multiprocessor of the fake's 4, asked once per kernel and shape, not per launch.
  const fake::State &driver = fake::state();
  ASSERT_FALSE(driver.occupancyQueries.empty());
  size_t gemvs = 0;
  for (const fake::Launch &launch : driver.launches)
    if (launch.block[0] == 256) {
      ++gemvs;
      EXPECT_LE(launch.grid[0], 12u);
    }
  EXPECT_GT(gemvs, driver.occupancyQueries.size());
  for (const auto &[threads, sharedBytes] : driver.occupancyQueries)
    EXPECT_EQ(threads, 256);
}

// A prompt of 12 tokens: each layer's int8 linear (f16 scales) launches the tile GEMM, its
// last kernel, and none dequantizes into scratch (the session's launch counts name them); the
// prefill's head takes its last row only, through gemv.
TEST(CudaInt8FakeSession, PromptLinearsTakeTheTileGemm) {
  std::shared_ptr<PlanFile> plan;
  std::unique_ptr<CudaSession> session;
  Status status = fake::openSession("DSRT_TEST_INT8_PLAN", DSRT_TEST_INT8_PLAN_DEFAULT, true,
                                    plan, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  if (!plan)
    GTEST_SKIP() << "the int8 plan has no kernels (dsc found no NVRTC)";
  std::vector<int64_t> ids = sequence(40, 12), mask(12, 1), positions = sequence(0, 12);
  ASSERT_NO_FATAL_FAILURE(bind(*session, "prefill", ids, mask, positions));
  status = session->run("prefill");
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(linearsOnTheDevice(*session, "prefill"), 9u);
  const std::map<std::string, long long> launches = fake::endCountingSession(session);
  const auto tile = launches.find("gemm_dequant_WT8_SDT2_GS32_TILE_M64_TILE_N64");
  ASSERT_NE(tile, launches.end());
  EXPECT_EQ(tile->second, 8);  // 2 x (qkv, out, fc, proj)
  for (const auto &[kernel, count] : launches)
    EXPECT_NE(kernel.rfind("dequantize_int8", 0), 0u) << count << " launches of " << kernel;
}

} // namespace
} // namespace dsrt::cuda
