// Mixture-of-experts plans as dsc writes them (CMake fixture cuda_moe_plans: today's
// Qwen3-MoE export in f32, int8 and int4 experts, and Qwen2-MoE's with its shared expert) in a
// strict CUDA session over the fake driver with the real launchers: every tfm.moe step has
// moeRule's kernels (moe_route, moe_experts for gate-up and down, moe_combine, and the shared
// expert's two moe_experts) and runs on the device, no step on the host fallback, and the
// decode program is captured into a graph (nothing of the MoE launcher reads the device).
// The fake driver records launches instead of running them, so this checks the compiler's
// and the launcher's agreement, not values (MoeEmulationTest.cpp and test/gpu/moe.test do).
#include "FakeDriver.h"
#include "TestPlans.h"
#include "comm/InProcessGroup.h"
#include "cuda/CudaSession.h"
#include "plan/PlanFile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace dsrt::cuda {
namespace {

// The MoE steps of `program`'s last run: each on the device with moeRule's kernels, whose
// expert weight dtype (WT of slot 1) is `weightType`; no step of the program on the fallback.
size_t checkMoeSteps(CudaSession &session, const char *program, bool shared, int64_t weightType) {
  const dsp::Plan &plan = session.plan().plan();
  const dsp::Program &found = *session.program(program);
  const std::vector<StepPlacement> &placements = session.lastPlacements(program);
  EXPECT_EQ(placements.size(), found.steps()->size());
  size_t moes = 0;
  for (size_t i = 0; i < placements.size() && i < found.steps()->size(); ++i) {
    const dsp::Step &step = *found.steps()->Get(i);
    const std::string op = step.op()->str();
    EXPECT_NE(placements[i], StepPlacement::Fallback) << program << " step " << i << " " << op;
    if (op != "tfm.moe")
      continue;
    ++moes;
    EXPECT_EQ(placements[i], StepPlacement::Device) << program << " step " << i;
    std::vector<std::string> kinds;
    for (uint32_t k = 0; step.kernels() && k < step.kernels()->size(); ++k)
      kinds.push_back(plan.kernels()->Get(step.kernels()->Get(k))->kind()->str());
    std::vector<std::string> expected = {"moe_route", "moe_experts", "moe_experts", "moe_combine"};
    if (shared)
      expected.insert(expected.end(), {"moe_experts", "moe_experts"});
    EXPECT_EQ(kinds, expected) << program << " step " << i;
    // The routed experts' weight dtype is in the gate-up kernel's name (KernelSpec::name).
    if (kinds.size() >= 2)
      EXPECT_NE(plan.kernels()->Get(step.kernels()->Get(1))->name()->str().find(
                    "_WT" + std::to_string(weightType) + "_"),
                std::string::npos)
          << program << " step " << i;
  }
  return moes;
}

// A plan of the MoE fixtures (compiled by ctest's dsrt-cuda-compile-moe-* fixtures): in
// $DSRT_TEST_MOE_PLAN_DIR where set (a sanitiser build's run reads the main build's plans,
// .ci/run), else this build's directory.
std::string moePlanPath(const char *name) {
  const char *dir = std::getenv("DSRT_TEST_MOE_PLAN_DIR");
  return std::string(dir && *dir ? dir : DSRT_TEST_MOE_PLAN_DIR) + "/" + name;
}

void runMoePlan(const char *path, bool shared, int64_t weightType, size_t moeSteps) {
  std::unique_ptr<PlanFile> opened;
  Status status = PlanFile::open(path, opened);
  ASSERT_TRUE(status.isOk()) << status.message();
  std::shared_ptr<PlanFile> plan = std::move(opened);
  if (!plan->plan().kernels() || plan->plan().kernels()->size() == 0)
    GTEST_SKIP() << "the MoE plan has no kernels (dsc found no NVRTC)";

  fake::reset();
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.strict = true;  // a step on the fallback, or a failed capture, fails the run
  std::unique_ptr<CudaSession> session;
  status = CudaSession::create(plan, 0, options, session);
  ASSERT_TRUE(status.isOk()) << status.message();

  status = test::runTokens(*session, "prefill", 4, 4);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(checkMoeSteps(*session, "prefill", shared, weightType), moeSteps);
  const size_t eagerLaunches = fake::state().launches.size();
  for (int64_t step = 0; step < 3; ++step) {
    status = test::runTokens(*session, "decode", 5 + step, 1);
    ASSERT_TRUE(status.isOk()) << status.message();
  }
  EXPECT_EQ(checkMoeSteps(*session, "decode", shared, weightType), moeSteps);
  const SessionStats stats = session->stats();
  EXPECT_EQ(stats.fallbackSteps, 0u);
  EXPECT_EQ(stats.graphCaptures, 1u) << "decode was not captured";
  // The MoE kernels were launched: in the prefill eagerly, in decode into the graph.
  std::map<const void *, std::string> names;
  for (size_t f = 0; f < fake::state().functions.size(); ++f)
    names[fake::state().functions[f]] = fake::state().functionNames[f];
  size_t routes = 0, capturedRoutes = 0, experts = 0;
  for (size_t l = 0; l < fake::state().launches.size(); ++l) {
    const fake::Launch &launch = fake::state().launches[l];
    const std::string &name = names[launch.function];
    if (name == "moe_route") {
      ++routes;
      capturedRoutes += launch.captured;
      EXPECT_EQ(launch.grid[0], 1u);  // one block routes every row
    }
    experts += name == "moe_experts" && l < eagerLaunches;
  }
  EXPECT_GE(routes - capturedRoutes, moeSteps);  // the prefill's (and an eager decode's)
  EXPECT_EQ(capturedRoutes, moeSteps);           // the captured decode's
  EXPECT_EQ(experts, moeSteps * (shared ? 4 : 2));
}

// Qwen3-MoE (2 layers, 8 experts, renormalised top-2), f32 experts.
TEST(CudaMoeFakeSession, Qwen3MoeStepsRunOnTheDevice) {
  runMoePlan(moePlanPath("moe-qwen3moe.dsp").c_str(), false, 1, 2);
}

// Mixtral (4 experts) with int8 experts in groups of 8 (f16 scales), and int4 experts (two
// codes a byte).
TEST(CudaMoeFakeSession, Int8AndInt4ExpertsRunOnTheDevice) {
  runMoePlan(moePlanPath("moe-mixtral-int8.dsp").c_str(), false, 8, 2);
  runMoePlan(moePlanPath("moe-mixtral-int4.dsp").c_str(), false, 9, 2);
}

// Qwen3-MoE at --dtype int8 (the default plan): its float weights are stored in f16, its
// attention's q/k norm scales among them, which the attention kernels read in f32 (the
// session's converted copies). The launcher refused the f16 scales before, failing the
// prefill; strict, so nothing may take the fallback either.
TEST(CudaMoeFakeSession, Qwen3MoeInt8AttendsWithItsQkNormsOnTheDevice) {
  runMoePlan(moePlanPath("moe-qwen3moe-int8.dsp").c_str(), false, 8, 2);
}

// Qwen2-MoE: the shared expert's two kernels after the routed experts'.
TEST(CudaMoeFakeSession, Qwen2MoeSharedExpertRunsOnTheDevice) {
  runMoePlan(moePlanPath("moe-qwen2moe.dsp").c_str(), true, 1, 2);
}

// Qwen3-MoE with --ep 2: two in-process ranks on the fake GPU, each holding 4 of the 8 experts.
// Every MoE step runs on the device on both ranks, its expert kernels over a grid of the
// rank's 4 experts, and the partial sums meet in the plan's all-reduce (staged, so decode is
// eager: graphs are not expected).
TEST(CudaMoeFakeSession, ExpertParallelRanksRunTheirExpertsOnTheDevice) {
  std::unique_ptr<PlanFile> opened;
  Status status = PlanFile::open(moePlanPath("moe-qwen3moe-ep2.dsp").c_str(), opened);
  ASSERT_TRUE(status.isOk()) << status.message();
  std::shared_ptr<PlanFile> plan = std::move(opened);
  ASSERT_EQ(plan->rankCount(), 2);
  if (!plan->plan().kernels() || plan->plan().kernels()->size() == 0)
    GTEST_SKIP() << "the MoE plan has no kernels (dsc found no NVRTC)";
  fake::reset();
  InProcessGroup group(2);
  std::vector<std::string> errors(2);
  std::vector<size_t> moeSteps(2);
  auto rank = [&](int r) {
    CudaSessionOptions options;
    options.driver = &fake::driver();
    options.collectives = &group.member(r);
    options.strict = true;
    std::unique_ptr<CudaSession> session;
    Status status = CudaSession::create(plan, r, options, session);
    if (status.isOk())
      status = test::runTokens(*session, "prefill", 3, 3);
    if (status.isOk())
      status = test::runTokens(*session, "decode", 4, 1);
    if (!status.isOk()) {
      group.abort();
      errors[r] = status.message();
      return;
    }
    moeSteps[r] = checkMoeSteps(*session, "decode", false, 1);
  };
  std::thread zero(rank, 0), one(rank, 1);
  zero.join();
  one.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(moeSteps[r], 2u) << "rank " << r;
  }
  std::map<const void *, std::string> names;
  for (size_t f = 0; f < fake::state().functions.size(); ++f)
    names[fake::state().functions[f]] = fake::state().functionNames[f];
  size_t experts = 0;
  for (const fake::Launch &launch : fake::state().launches)
    if (names[launch.function] == "moe_experts") {
      EXPECT_EQ(launch.grid[1], 4u) << "a rank's expert grid is its 4 experts";
      ++experts;
    }
  // 2 ranks x 2 layers x (gate-up, down) x (prefill, decode).
  EXPECT_EQ(experts, 16u);
}

} // namespace
} // namespace dsrt::cuda
