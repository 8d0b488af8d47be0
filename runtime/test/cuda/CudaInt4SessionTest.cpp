// int4 plans as dsc writes them (--dtype int4: u8 [out, in / 2] codes, scales in groups of
// 32 in the compute dtype; CMake fixture cuda_int4_plans) in a CUDA session over the fake
// driver with the real launchers (runtime/src/cuda/ops): every int4 tfm.linear and
// tfm.lm_head has the int4 kernels (gemv with WT 9, dequantize_int4; LinearRules.cpp) and is
// run by LinearOps.cpp on the device, none on the host fallback. GPT-2 keeps an int8 LM head
// beside its int4 linears; the Llama (bf16 compute, --int4-lm-head) has an int4 head, gated
// projections and norm prologues. The fake driver records launches instead of running them,
// so this checks the compiler's and the launcher's agreement, not values (the emulation
// tests, LinearInt4EmulationTest.cpp, and test/gpu/int4.test do). Rows stay at most 8, the
// gemv path (the dequantize + GEMM path would call the real cuBLASLt on fake device memory),
// or, for prompts of 9 to 512 rows, the tile GEMM (gemm_dequant), a kernel launch like any.
#include "FakeDriver.h"
#include "cuda/CudaSession.h"
#include "plan/PlanFile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace dsrt::cuda {
namespace {

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

int64_t constantOf(const dsp::Kernel &kernel, const char *name) {
  if (kernel.constants())
    for (const dsp::Attr *attr : *kernel.constants())
      if (attr->name() && attr->name()->str() == name)
        return attr->i();
  return -1;
}

struct Linears {
  size_t int4 = 0, int8 = 0, int4Heads = 0;
};

// The last run of `program`: no step on the host fallback; every int4 linear and LM head
// (weight u8 beside scales) with gemv WT 9 and dequantize_int4 as its kernels 0 and 2 and
// run on the device; int8 ones (WT 8) as well.
Linears checkProgram(CudaSession &session, const char *program) {
  const dsp::Plan &plan = session.plan().plan();
  const dsp::Program &found = *session.program(program);
  const std::vector<StepPlacement> &placements = session.lastPlacements(program);
  EXPECT_EQ(placements.size(), found.steps()->size());
  Linears linears;
  for (size_t i = 0; i < placements.size() && i < found.steps()->size(); ++i) {
    const dsp::Step &step = *found.steps()->Get(i);
    const std::string op = step.op()->str();
    EXPECT_NE(placements[i], StepPlacement::Fallback) << program << " step " << i << " " << op;
    if (op != "tfm.linear" && op != "tfm.lm_head")
      continue;
    EXPECT_EQ(placements[i], StepPlacement::Device) << program << " step " << i << " " << op;
    const auto weightType = plan.tensors()->Get(step.inputs()->Get(1))->dtype();
    const bool int4 = weightType == dsp::DType::u8, int8 = weightType == dsp::DType::i8;
    if (!int4 && !int8)
      continue;
    EXPECT_TRUE(step.kernels() && step.kernels()->size() >= 3) << program << " step " << i;
    if (!step.kernels() || step.kernels()->size() < 3)
      continue;
    const dsp::Kernel &gemv = *plan.kernels()->Get(step.kernels()->Get(0));
    const dsp::Kernel &dequantize = *plan.kernels()->Get(step.kernels()->Get(2));
    EXPECT_EQ(gemv.kind()->str(), "gemv");
    EXPECT_EQ(constantOf(gemv, "WT"), int4 ? 9 : 8) << program << " step " << i;
    EXPECT_EQ(dequantize.kind()->str(), int4 ? "dequantize_int4" : "dequantize_int8");
    if (int4) {
      EXPECT_EQ(constantOf(gemv, "GS"), 32) << program << " step " << i;
      ++linears.int4;
      linears.int4Heads += op == "tfm.lm_head";
    } else {
      ++linears.int8;
    }
  }
  return linears;
}

void runInt4Plan(const char *variable, const char *fallbackPath, size_t int4Linears,
                 bool int4Head) {
  std::shared_ptr<PlanFile> plan;
  std::unique_ptr<CudaSession> session;
  Status status = fake::openSession(variable, fallbackPath, false, plan, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  if (!plan)
    GTEST_SKIP() << "the int4 plan has no kernels (dsc found no NVRTC)";
  ASSERT_NE(plan->plan().options(), nullptr);
  ASSERT_EQ(plan->plan().options()->dtype()->str(), "int4");

  // Prefill of 4 tokens, then two decode steps: 4 and 1 rows, gemv only.
  std::vector<int64_t> ids = {37, 122, 254, 228}, mask(4, 1), positions = {0, 1, 2, 3};
  ASSERT_NO_FATAL_FAILURE(bind(*session, "prefill", ids, mask, positions));
  status = session->run("prefill");
  ASSERT_TRUE(status.isOk()) << status.message();
  for (const char *program : {"prefill", "decode"}) {
    if (program == std::string("decode"))
      for (int64_t step = 0; step < 2; ++step) {
        std::vector<int64_t> next = {5 + step}, decodeMask(static_cast<size_t>(5 + step), 1),
                             position = {4 + step};
        ASSERT_NO_FATAL_FAILURE(bind(*session, "decode", next, decodeMask, position));
        status = session->run("decode");
        ASSERT_TRUE(status.isOk()) << status.message();
      }
    const Linears linears = checkProgram(*session, program);
    EXPECT_EQ(linears.int4, int4Linears) << program;
    EXPECT_EQ(linears.int4Heads, int4Head ? 1u : 0u) << program;
    EXPECT_EQ(linears.int8, int4Head ? 0u : 1u) << program << ": the int8 LM head";
  }
  // gemv's launches (256 threads): at least one per linear of each run.
  size_t gemvs = 0;
  for (const fake::Launch &launch : fake::state().launches)
    gemvs += launch.block[0] == 256;
  EXPECT_GE(gemvs, 3 * int4Linears);
}

// A prompt of 12 tokens: every int4 (and int8) linear takes the tile GEMM (gemm_dequant, its
// last kernel), which the session's launch counts (DSRT_CUDA_LAUNCH_COUNTS) name; nothing is
// dequantized into scratch and no step falls back.
void runTilePrefill(const char *variable, const char *fallbackPath, size_t int4Linears,
                    bool int4Head) {
  std::shared_ptr<PlanFile> plan;
  std::unique_ptr<CudaSession> session;
  Status status = fake::openSession(variable, fallbackPath, true, plan, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  if (!plan)
    GTEST_SKIP() << "the int4 plan has no kernels (dsc found no NVRTC)";
  std::vector<int64_t> ids, mask(12, 1), positions;
  for (int64_t i = 0; i < 12; ++i) {
    ids.push_back(37 + 11 * i);
    positions.push_back(i);
  }
  ASSERT_NO_FATAL_FAILURE(bind(*session, "prefill", ids, mask, positions));
  status = session->run("prefill");
  ASSERT_TRUE(status.isOk()) << status.message();
  const Linears linears = checkProgram(*session, "prefill");
  EXPECT_EQ(linears.int4, int4Linears);
  EXPECT_EQ(linears.int4Heads, int4Head ? 1u : 0u);

  // Every quantized linear's last kernel is the tile GEMM, with the weight's WT.
  const dsp::Plan &plans = session->plan().plan();
  const dsp::Program &prefill = *session->program("prefill");
  size_t tiles = 0;
  for (const dsp::Step *step : *prefill.steps()) {
    const std::string op = step->op()->str();
    if ((op != "tfm.linear" && op != "tfm.lm_head") || !step->kernels())
      continue;
    const auto weightType = plans.tensors()->Get(step->inputs()->Get(1))->dtype();
    if (weightType != dsp::DType::u8 && weightType != dsp::DType::i8)
      continue;
    const dsp::Kernel &last =
        *plans.kernels()->Get(step->kernels()->Get(step->kernels()->size() - 1));
    EXPECT_EQ(last.kind()->str(), "gemm_dequant");
    EXPECT_EQ(constantOf(last, "WT"), weightType == dsp::DType::u8 ? 9 : 8);
    ++tiles;
  }
  EXPECT_EQ(tiles, linears.int4 + linears.int8);

  long long tileLaunches = 0;
  for (const auto &[kernel, launches] : fake::endCountingSession(session)) {
    EXPECT_NE(kernel.rfind("dequantize_int", 0), 0u) << launches << " launches of " << kernel;
    if (kernel.rfind("gemm_dequant", 0) == 0)
      tileLaunches += launches;
  }
  // One per linear of the layers, over the prompt's 12 rows; the prefill's LM head takes the
  // last row only (gemv).
  EXPECT_EQ(tileLaunches, static_cast<long long>(int4Linears - (int4Head ? 1 : 0)));
}

// GPT-2 (2 layers: qkv, out, fc, proj), int4 in groups of 32, its LM head int8.
TEST(CudaInt4FakeSession, Gpt2Int4LinearsAndInt8HeadRunTheirKernels) {
  runInt4Plan("DSRT_TEST_INT4_PLAN", DSRT_TEST_INT4_PLAN_DEFAULT, 8, false);
}

// Llama (2 layers: qkv with its rms prologue, o_proj, gated gate_up with its prologue, down),
// bf16 compute, the LM head int4 too.
TEST(CudaInt4FakeSession, LlamaInt4LinearsAndInt4HeadRunTheirKernels) {
  runInt4Plan("DSRT_TEST_INT4_HEAD_PLAN", DSRT_TEST_INT4_HEAD_PLAN_DEFAULT, 9, true);
}

// Prompts of 12 rows through the tile GEMM, GPT-2's and the Llama's.
TEST(CudaInt4FakeSession, PromptsTakeTheTileGemm) {
  runTilePrefill("DSRT_TEST_INT4_PLAN", DSRT_TEST_INT4_PLAN_DEFAULT, 8, false);
  runTilePrefill("DSRT_TEST_INT4_HEAD_PLAN", DSRT_TEST_INT4_HEAD_PLAN_DEFAULT, 9, true);
}

} // namespace
} // namespace dsrt::cuda
