// Attention sinks on the CUDA session against the fake driver: the GPT-OSS fixture's plan
// (gptoss-ts-eager, compiled with its GPU kernels) runs every tfm.attention step on the
// device, through the kernels with SINKS, in prefill, decode and the serving engine's step
// program (the paged kernels); only its tfm.moe steps, which have no GPU kernel yet, take the
// host fallback. ORT GenAI's llama with head_sink, which has no MoE, runs its serving step
// in strict mode (a fallback step would fail it). The kernels' arithmetic is
// AttentionSinksEmulationTest.cpp's and PagedAttentionEmulationTest.cpp's.
#include "FakeDriver.h"
#include "TestPlans.h"
#include "cuda/CudaSession.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsrt::cuda {
namespace {

std::unique_ptr<CudaSession> createSession(const std::shared_ptr<PlanFile> &plan, bool strict,
                                           int64_t blockSize = 0, int64_t blocks = 0) {
  fake::reset();
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.strict = strict;
  options.graphs = false;  // every launch eager, so that the fake records each kernel
  options.kvBlockSize = blockSize;
  options.kvBlocks = blocks;
  if (blockSize > 0)
    options.onlyPrograms = {"step"};
  std::unique_ptr<CudaSession> session;
  Status status = CudaSession::create(plan, 0, options, session);
  EXPECT_TRUE(status.isOk()) << status.message();
  return session;
}

using test::launchedKernels;
using test::openPlanFile;

bool endsWith(const std::string &name, const std::string &suffix) {
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Every tfm.attention step of `program`'s last run on the device, every step that fell back
// a tfm.moe; returns the attention steps.
size_t expectAttentionOnTheDevice(CudaSession &session, const char *program) {
  const dsp::Program &steps = *session.program(program);
  const std::vector<StepPlacement> &placements = session.lastPlacements(program);
  EXPECT_EQ(placements.size(), steps.steps()->size());
  size_t attention = 0;
  for (size_t i = 0; i < placements.size(); ++i) {
    const std::string op = steps.steps()->Get(static_cast<uint32_t>(i))->op()->str();
    SCOPED_TRACE(std::string(program) + " step " + std::to_string(i) + " " + op);
    if (op == "tfm.attention") {
      EXPECT_EQ(placements[i], StepPlacement::Device);
      ++attention;
    } else if (placements[i] == StepPlacement::Fallback) {
      EXPECT_EQ(op, "tfm.moe");
    }
  }
  return attention;
}

// The attention kernels launched: each one with sinks (SINKS last, or before PAGED), and as
// many prefill or decode launches as the program has attention steps.
void expectSinkKernels(const PlanFile &plan, const char *kind, size_t attentionSteps,
                       const std::string &suffix) {
  size_t launched = 0;
  for (const std::string &name : launchedKernels(plan)) {
    if (name.rfind("attention_prefill", 0) != 0 && name.rfind("attention_decode", 0) != 0)
      continue;
    EXPECT_TRUE(endsWith(name, suffix)) << name;
    launched += name.rfind(kind, 0) == 0;
  }
  EXPECT_EQ(launched, attentionSteps) << kind;
}

TEST(CudaSinksSession, GptOssAttendsOnTheDevice) {
  std::shared_ptr<PlanFile> plan =
      openPlanFile("DSRT_TEST_GPTOSS_PLAN", DSRT_TEST_GPTOSS_PLAN_DEFAULT);
  ASSERT_NE(plan, nullptr);
  std::unique_ptr<CudaSession> session = createSession(plan, /*strict=*/false);
  ASSERT_NE(session, nullptr);
  fake::state().launches.clear();
  Status prefill = test::runTokens(*session, "prefill", 5, 5);
  ASSERT_TRUE(prefill.isOk()) << prefill.message();
  const size_t prefillAttention = expectAttentionOnTheDevice(*session, "prefill");
  EXPECT_EQ(prefillAttention, 2u);  // the sliding layer and the full one
  expectSinkKernels(*plan, "attention_prefill", prefillAttention, "_SINKS1");

  fake::state().launches.clear();
  Status decode = test::runTokens(*session, "decode", 6, 1);
  ASSERT_TRUE(decode.isOk()) << decode.message();
  const size_t decodeAttention = expectAttentionOnTheDevice(*session, "decode");
  EXPECT_EQ(decodeAttention, 2u);
  expectSinkKernels(*plan, "attention_decode", decodeAttention, "_SINKS1");
}

// The serving engine's step: a prompt chunk of three rows and a decode row, through the
// paged prefill and decode kernels with sinks.
void runServingStep(const char *variable, const char *fallback, bool strict) {
  std::shared_ptr<PlanFile> plan = openPlanFile(variable, fallback);
  ASSERT_NE(plan, nullptr);
  std::unique_ptr<CudaSession> session = createSession(plan, strict, 4, 6);
  ASSERT_NE(session, nullptr);
  const std::vector<int32_t> first{3, 1}, second{0};
  std::vector<ops::KvPagedRow> rows{{first.data(), 2, 4}, {first.data(), 2, 5},
                                    {first.data(), 2, 6}, {second.data(), 1, 2}};
  ASSERT_TRUE(session->setPagedRows(rows).isOk());
  const dsp::Program &step = *session->program("step");
  const dsp::ModelInfo &model = *plan->plan().model();
  std::vector<int64_t> ids{7, 10, 13, 16}, positions{4, 5, 6, 2}, ones(4, 1), sampled{0, 1, 2, 3};
  for (size_t i = 0; i < step.inputs()->size(); ++i) {
    const std::string name = plan->plan().tensors()->Get(step.inputs()->Get(i))->name()->str();
    std::vector<int64_t> *values = name == model.input_ids()->str()        ? &ids
                                   : name == model.position_ids()->str()   ? &positions
                                   : name == model.attention_mask()->str() ? &ones
                                   : name == "logits_rows"                 ? &sampled
                                                                           : nullptr;
    ASSERT_NE(values, nullptr) << "step input " << name;
    TensorRef value{DType::I64, name == "logits_rows" ? Shape{4} : Shape{4, 1}, values->data()};
    ASSERT_TRUE(session->setInput("step", i, value).isOk()) << name;
  }
  fake::state().launches.clear();
  Status run = session->run("step");
  ASSERT_TRUE(run.isOk()) << run.message();
  const size_t attention = expectAttentionOnTheDevice(*session, "step");
  EXPECT_GT(attention, 0u);
  expectSinkKernels(*plan, "attention_prefill", attention, "_SINKS1_PAGED1");
  expectSinkKernels(*plan, "attention_decode", attention, "_SINKS1_PAGED1");
}

TEST(CudaSinksSession, GptOssServingStepOnThePagedKernels) {
  runServingStep("DSRT_TEST_GPTOSS_SERVING_PLAN", DSRT_TEST_GPTOSS_SERVING_PLAN_DEFAULT,
                 /*strict=*/false);
}

TEST(CudaSinksSession, HeadSinkServingStepIsStrict) {
  runServingStep("DSRT_TEST_SINKS_SERVING_PLAN", DSRT_TEST_SINKS_SERVING_PLAN_DEFAULT,
                 /*strict=*/true);
}

} // namespace
} // namespace dsrt::cuda
