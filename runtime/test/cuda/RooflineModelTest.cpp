// The performance model (tools/dsp-roofline/RooflineModel.h) against the CUDA executor: each
// program of the fixture plans runs eagerly (graphs off) with the real launchers on the fake
// driver, which records every cuLaunchKernel, and the launches of that run, the session's
// kernel_launches and the placement of every step must be what the model predicted from the
// plan alone. Rows stay at most 8 (the gemv path), or for the int8 plan 12 (every linear's
// tile GEMM, gemm_dequant), and nothing falls back (strict), so the runs never reach
// cuBLASLt, which the fake driver cannot stand in for.
//
// What the runs confirm: host placement of shape arithmetic (Shape, and steps whose read
// inputs are all host-known) and the device placement of the rest; views sharing their
// input's slot launch nothing, a Reshape of a program input launches one copy; Split one
// launch (generic_split); tfm.attention 3 launches (rotary, split-KV decode, combine) for one
// new token over the session cache, 2 (rotary, prefill) otherwise, with or without the
// cache (forward); tfm.linear and tfm.lm_head one gemv up to 8 rows, also for int8
// weights, and int8 ones from 9 rows the tile GEMM (+ the conversion, + the epilogue where a
// bias, activation or logit epilogue is left); embedding, layer and RMS norms and gated_act
// one; tfm.moe one per kernel of its step (four, six with a shared expert); the collectives
// no kernel.
// Not confirmed here: the collectives' device copies and NCCL calls (the fake driver
// records neither), the GEMM path's launches (LinearOpsTest.cpp checks the launcher's) and
// the rows of prefill's last-position LM head (3 tokens or 1 row: both one gemv).
#include "FakeDriver.h"
#include "RooflineModel.h"
#include "TestPlans.h"
#include "comm/InProcessGroup.h"
#include "cuda/CudaSession.h"
#include "session/PlanChecks.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <set>
#include <thread>

namespace dsrt::cuda {
namespace {

using roofline::Placement;
using roofline::ProgramCost;

StepPlacement sessionPlacement(Placement placement) {
  switch (placement) {
  case Placement::Host: return StepPlacement::Host;
  case Placement::Device: return StepPlacement::Device;
  case Placement::Fallback: return StepPlacement::Fallback;
  case Placement::If: return StepPlacement::If;
  }
  return StepPlacement::NotRun;
}

using test::openPlanFile;

// One eager run of `program` at batch 1 over `total` positions, `tokens` of them new.
struct ProgramRun {
  const char *program;
  int64_t total, tokens;
};

// What the session did in one run, for comparing with the model.
struct Observed {
  uint64_t sessionLaunches = 0;
  std::vector<StepPlacement> placements;
};

Status runOnce(CudaSession &session, const ProgramRun &run, Observed &observed) {
  uint64_t before = session.stats().kernelLaunches;
  DSRT_RETURN_IF_ERROR(test::runTokens(session, run.program, run.total, run.tokens));
  observed.sessionLaunches = session.stats().kernelLaunches - before;
  observed.placements = session.lastPlacements(run.program);
  return Status::ok();
}

ProgramCost predict(const PlanFile &plan, int rank, const ProgramRun &run) {
  ProgramCost cost;
  Status status = roofline::modelProgram(plan.plan(), run.program, {rank, 1, run.total}, cost);
  EXPECT_TRUE(status.isOk()) << status.message();
  return cost;
}

void expectMatches(const ProgramCost &predicted, const Observed &observed, const ProgramRun &run) {
  SCOPED_TRACE(std::string(run.program) + " over " + std::to_string(run.total) + " positions");
  EXPECT_EQ(predicted.gemms, 0u) << "the run was meant to stay on the gemv path";
  EXPECT_EQ(predicted.fallback, 0u);
  EXPECT_EQ(observed.sessionLaunches, predicted.sessionLaunches());
  ASSERT_EQ(observed.placements.size(), predicted.steps.size());
  for (size_t i = 0; i < predicted.steps.size(); ++i)
    EXPECT_EQ(static_cast<int>(observed.placements[i]),
              static_cast<int>(sessionPlacement(predicted.steps[i].placement)))
        << "step " << i;
}

// Whether runTokens can bind every input of `program` (a generic-path forward with past
// inputs cannot).
bool takesTokensOnly(const PlanFile &plan, const dsp::Program &program) {
  for (uint32_t i = 0; program.inputs() && i < program.inputs()->size(); ++i) {
    std::string name = plan.plan().tensors()->Get(program.inputs()->Get(i))->name()->str();
    if (name != "input_ids" && name != "attention_mask" && name != "position_ids")
      return false;
  }
  return true;
}

// Every program the session can run at batch 1 with at most 8 rows per linear.
const ProgramRun kRuns[] = {{"forward", 3, 3}, {"prefill", 3, 3}, {"decode", 4, 1}, {"decode", 5, 1}};

// The int8 plan's prompts of 12 rows: the tile GEMM for every linear (f16 scales).
const ProgramRun kTileRuns[] = {{"forward", 12, 12}, {"prefill", 12, 12}};

void checkSingleRank(const std::shared_ptr<PlanFile> &plan, bool tileRuns = false) {
  if (!plan->plan().kernels() || plan->plan().kernels()->size() == 0)
    GTEST_SKIP() << plan->path() << " has no kernels (dsc found no NVRTC)";
  fake::reset();
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.graphs = false;  // every decode through the launchers, as DSRT_CUDA_GRAPHS=0
  options.strict = true;   // a step through the fallback fails the run
  std::unique_ptr<CudaSession> session;
  Status status = CudaSession::create(plan, 0, options, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  bool ranDecode = false;
  std::vector<ProgramRun> runs(std::begin(kRuns), std::end(kRuns));
  if (tileRuns)
    runs.insert(runs.end(), std::begin(kTileRuns), std::end(kTileRuns));
  for (const ProgramRun &run : runs) {
    const dsp::Program *program = session->program(run.program);
    if (!program || !takesTokensOnly(*plan, *program))
      continue;
    size_t before = fake::state().launches.size();
    Observed observed;
    status = runOnce(*session, run, observed);
    ASSERT_TRUE(status.isOk()) << status.message();
    ProgramCost predicted = predict(*plan, 0, run);
    EXPECT_EQ(fake::state().launches.size() - before, predicted.kernels)
        << plan->path() << ": " << run.program;
    expectMatches(predicted, observed, run);
    ranDecode |= std::string(run.program) == "decode";
  }
  EXPECT_TRUE(ranDecode) << plan->path() << " has no decode program";
}

TEST(RooflineModel, Gpt2EagerRunsLaunchWhatTheModelPredicts) {
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openGpt2Plan(plan));
  checkSingleRank(plan);
}

TEST(RooflineModel, Int8EagerRunsLaunchWhatTheModelPredicts) {
  checkSingleRank(openPlanFile("DSRT_TEST_INT8_PLAN", DSRT_TEST_INT8_PLAN_DEFAULT), true);
}

// Qwen2-MoE's plan: each tfm.moe step launches its six kernels (routing, the routed experts'
// gate-up and down, the shared expert's two, the weighted sum), one new token or three.
TEST(RooflineModel, MoeEagerRunsLaunchWhatTheModelPredicts) {
  checkSingleRank(openPlanFile("DSRT_TEST_MOE_PLAN", DSRT_TEST_MOE_PLAN_DEFAULT));
}

// Both ranks of the two-rank Llama, threads of one process on the fake GPU with staged
// collectives: prefill together, then one decode each, counted per rank by the session
// and in total by the fake driver.
TEST(RooflineModel, TensorParallelDecodeOfEachRankLaunchesWhatTheModelPredicts) {
  std::shared_ptr<PlanFile> plan = openPlanFile("DSRT_TEST_TP2_PLAN", DSRT_TEST_TP2_PLAN_DEFAULT);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->rankCount(), 2);
  if (!plan->plan().kernels() || plan->plan().kernels()->size() == 0)
    GTEST_SKIP() << "the TP plan has no kernels (dsc found no NVRTC)";
  fake::reset();
  InProcessGroup group(2);
  std::vector<std::unique_ptr<CudaSession>> sessions(2);
  std::vector<Observed> observed(2);
  std::vector<std::string> errors(2);
  auto inBoth = [&](const std::function<Status(int)> &work) {
    auto rank = [&](int r) {
      Status status = work(r);
      if (!status.isOk()) {
        group.abort();
        errors[r] += status.message();
      }
    };
    std::thread zero(rank, 0), one(rank, 1);
    zero.join();
    one.join();
  };
  inBoth([&](int r) {
    CudaSessionOptions options;
    options.driver = &fake::driver();
    options.collectives = &group.member(r);
    options.graphs = false;
    options.strict = true;
    DSRT_RETURN_IF_ERROR(CudaSession::create(plan, r, options, sessions[r]));
    return test::runTokens(*sessions[r], "prefill", 3, 3);
  });
  ASSERT_TRUE(errors[0].empty() && errors[1].empty()) << errors[0] << " / " << errors[1];
  const ProgramRun decode{"decode", 4, 1};
  size_t before = fake::state().launches.size();
  inBoth([&](int r) { return runOnce(*sessions[r], decode, observed[r]); });
  ASSERT_TRUE(errors[0].empty() && errors[1].empty()) << errors[0] << " / " << errors[1];
  ProgramCost rank0 = predict(*plan, 0, decode), rank1 = predict(*plan, 1, decode);
  EXPECT_EQ(fake::state().launches.size() - before, rank0.kernels + rank1.kernels);
  expectMatches(rank0, observed[0], decode);
  expectMatches(rank1, observed[1], decode);
  EXPECT_GT(rank0.collectives, 0u) << "a TP decode sums over the ranks";
}

// The model's table of launchers is the backend's, for every op the fixture plans use.
TEST(RooflineModel, KnowsWhichOpsHaveALauncher) {
  std::shared_ptr<PlanFile> gpt2, cpuOnly;
  ASSERT_TRUE(test::openGpt2Plan(gpt2));
  ASSERT_TRUE(test::openGpt2Plan(cpuOnly, /*cpuOnly=*/true));
  std::set<std::string> ops = {"Conv", "MatMul", "TopK", "If", "Shape", "Range"};
  for (const auto &plan : {gpt2, cpuOnly, openPlanFile("DSRT_TEST_TP2_PLAN", DSRT_TEST_TP2_PLAN_DEFAULT),
                           openPlanFile("DSRT_TEST_INT8_PLAN", DSRT_TEST_INT8_PLAN_DEFAULT)})
    for (const dsp::Program *program : *plan->plan().programs())
      for (uint32_t s = 0; program->steps() && s < program->steps()->size(); ++s)
        ops.insert(program->steps()->Get(s)->op()->str());
  for (const char *op : {"Neg", "IsNaN", "Gelu", "Or", "Where", "Transpose", "Expand", "CumSum",
                         "LogSoftmax", "ReduceMax", "tfm.residual_add", "tfm.activation", "tfm.moe"})
    ops.insert(op);
  for (const std::string &op : ops)
    EXPECT_EQ(roofline::hasGpuLauncher(op), findGpuOp(op) != nullptr) << op;
}

// The KV cache the model reads is the one the sessions allocate: f32 (GPT-2's and the TP 2
// Llama's) or f16 (the int8 plan's: --kv-cache-dtype follows its fp16 compute dtype).
TEST(RooflineModel, KvCacheLayersAreTheSessions) {
  std::shared_ptr<PlanFile> gpt2;
  ASSERT_TRUE(test::openGpt2Plan(gpt2));
  std::shared_ptr<PlanFile> tp2 = openPlanFile("DSRT_TEST_TP2_PLAN", DSRT_TEST_TP2_PLAN_DEFAULT);
  std::shared_ptr<PlanFile> int8 = openPlanFile("DSRT_TEST_INT8_PLAN", DSRT_TEST_INT8_PLAN_DEFAULT);
  for (const auto &plan : {gpt2, tp2, int8})
    for (int rank = 0; rank < plan->rankCount(); ++rank) {
      std::vector<KvLayerShape> session;
      std::vector<roofline::KvLayer> model;
      ASSERT_TRUE(kvCacheLayout(*plan, rank, session).isOk());
      ASSERT_TRUE(roofline::kvCacheLayers(plan->plan(), rank, model).isOk());
      ASSERT_EQ(model.size(), session.size()) << plan->path();
      ASSERT_FALSE(model.empty()) << plan->path();
      for (size_t layer = 0; layer < model.size(); ++layer) {
        EXPECT_EQ(model[layer].kvHeads, session[layer].kvHeads);
        EXPECT_EQ(model[layer].headDim, session[layer].headDim);
        EXPECT_EQ(model[layer].elementBytes,
                  static_cast<int64_t>(dtypeSize(session[layer].dtype)));
        EXPECT_EQ(session[layer].dtype, plan == int8 ? DType::F16 : DType::F32) << plan->path();
      }
      // A decode step over L positions reads L of the capacity's rows of every layer.
      const int64_t positions = 5;
      ProgramCost cost;
      ASSERT_TRUE(roofline::modelProgram(plan->plan(), "decode", {rank, 2, positions}, cost).isOk());
      uint64_t expected = 0;
      for (const KvLayerShape &layer : session)
        expected += 2 * layer.bytes() / layer.batch / layer.capacity * positions * 2;
      EXPECT_EQ(cost.kvBytes, expected) << plan->path() << " rank " << rank;
    }
}

} // namespace
} // namespace dsrt::cuda
