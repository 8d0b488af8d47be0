// int4 plans as dsc writes them (--dtype int4: u8 [out, in / 2] codes, scales in groups of
// 32 in the compute dtype; CMake fixture cuda_int4_plans) in a CUDA session over the fake
// driver with the real launchers (runtime/src/cuda/ops): every int4 tfm.linear and
// tfm.lm_head has the int4 kernels (gemv with WT 9, dequantize_int4; LinearRules.cpp) and is
// run by LinearOps.cpp on the device, none on the host fallback. GPT-2 keeps an int8 LM head
// beside its int4 linears; the Llama (bf16 compute, --int4-lm-head) has an int4 head, gated
// projections and norm prologues. The fake driver records launches instead of running them,
// so this checks the compiler's and the launcher's agreement, not values (the emulation
// tests, LinearInt4EmulationTest.cpp, and test/gpu/int4.test do). Rows stay at most 8, the
// gemv path: the GEMM path would call the real cuBLASLt on fake device memory.
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
  const char *path = std::getenv(variable);
  std::unique_ptr<PlanFile> opened;
  Status status = PlanFile::open(path && *path ? path : fallbackPath, opened);
  ASSERT_TRUE(status.isOk()) << status.message();
  std::shared_ptr<PlanFile> plan = std::move(opened);
  if (!plan->plan().kernels() || plan->plan().kernels()->size() == 0)
    GTEST_SKIP() << "the int4 plan has no kernels (dsc found no NVRTC)";
  ASSERT_NE(plan->plan().options(), nullptr);
  ASSERT_EQ(plan->plan().options()->dtype()->str(), "int4");

  fake::reset();
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.graphs = false;  // every decode step through the launchers
  std::unique_ptr<CudaSession> session;
  status = CudaSession::create(plan, 0, options, session);
  ASSERT_TRUE(status.isOk()) << status.message();

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

// GPT-2 (2 layers: qkv, out, fc, proj), int4 in groups of 32, its LM head int8.
TEST(CudaInt4FakeSession, Gpt2Int4LinearsAndInt8HeadRunTheirKernels) {
  runInt4Plan("DSRT_TEST_INT4_PLAN", DSRT_TEST_INT4_PLAN_DEFAULT, 8, false);
}

// Llama (2 layers: qkv with its rms prologue, o_proj, gated gate_up with its prologue, down),
// bf16 compute, the LM head int4 too.
TEST(CudaInt4FakeSession, LlamaInt4LinearsAndInt4HeadRunTheirKernels) {
  runInt4Plan("DSRT_TEST_INT4_HEAD_PLAN", DSRT_TEST_INT4_HEAD_PLAN_DEFAULT, 9, true);
}

} // namespace
} // namespace dsrt::cuda
