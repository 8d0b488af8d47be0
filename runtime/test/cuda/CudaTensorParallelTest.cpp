// Two tensor-parallel ranks (threads) sharing the fake GPU: the collectives run through
// their launchers (ops/CollectiveOps.cpp) on StagedCollectives over an in-process group,
// everything else through the fallback. Each rank's logits must be the CPU backend's.
#include "FakeDriver.h"
#include "comm/InProcessGroup.h"
#include "cpu/Session.h"
#include "cuda/CudaSession.h"

#include "TestPlans.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>

namespace dsrt::cuda {
namespace {

GpuOpFn collectivesOnly(std::string_view op) {
  return op == "tfm.all_reduce" || op == "tfm.all_gather" ? findGpuOp(op) : nullptr;
}

// Prefill of 3 tokens then 2 decodes, batch 1; the logits of every run, in order.
Status generate(Session &session, std::vector<std::vector<float>> &logits) {
  for (int64_t total = 3; total <= 5; ++total) {
    logits.emplace_back();
    DSRT_RETURN_IF_ERROR(test::runTokens(session, total == 3 ? "prefill" : "decode", total,
                                         total == 3 ? 3 : 1, &logits.back()));
  }
  return Status::ok();
}

TEST(CudaTensorParallel, StagedCollectivesMatchTheCpu) {
  const char *path = std::getenv("DSRT_TEST_TP2_PLAN");
  if (!path || !*path)
    path = DSRT_TEST_TP2_PLAN_DEFAULT;
  std::unique_ptr<PlanFile> opened;
  Status opening = PlanFile::open(path, opened);
  ASSERT_TRUE(opening.isOk()) << opening.message();
  std::shared_ptr<PlanFile> plan = std::move(opened);
  ASSERT_EQ(plan->rankCount(), 2);
  fake::reset();
  InProcessGroup gpuGroup(2), cpuGroup(2);
  std::vector<std::vector<std::vector<float>>> gpu(2), cpu(2);
  std::vector<std::string> errors(2);
  auto rank = [&](int r) {
    CudaSessionOptions options;
    options.driver = &fake::driver();
    options.findOp = collectivesOnly;
    options.collectives = &gpuGroup.member(r);
    std::unique_ptr<CudaSession> session;
    Status status = CudaSession::create(plan, r, options, session);
    if (status.isOk())
      status = generate(*session, gpu[r]);
    if (!status.isOk()) {
      gpuGroup.abort();
      errors[r] = "cuda: " + status.message();
      return;
    }
    for (const char *program : {"prefill", "decode"}) {
      const dsp::Program &found = *session->program(program);
      const std::vector<StepPlacement> &placements = session->lastPlacements(program);
      for (size_t i = 0; i < placements.size(); ++i) {
        std::string op = found.steps()->Get(i)->op()->str();
        if ((op == "tfm.all_reduce" || op == "tfm.all_gather") &&
            placements[i] != StepPlacement::Device)
          errors[r] += std::string(program) + " step " + std::to_string(i) + " (" + op +
                       ") did not run on the device; ";
      }
    }
    std::unique_ptr<CpuSession> reference;
    status = CpuSession::create(plan, r, reference, &cpuGroup.member(r));
    if (status.isOk())
      status = generate(*reference, cpu[r]);
    if (!status.isOk()) {
      cpuGroup.abort();
      errors[r] += "cpu: " + status.message();
    }
  };
  std::thread zero(rank, 0), one(rank, 1);
  zero.join();
  one.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
    ASSERT_EQ(gpu[r].size(), cpu[r].size());
    for (size_t run = 0; run < gpu[r].size(); ++run) {
      ASSERT_EQ(gpu[r][run].size(), cpu[r][run].size());
      ASSERT_FALSE(gpu[r][run].empty());
      size_t bad = 0;
      for (size_t i = 0; i < gpu[r][run].size(); ++i)
        bad += !(std::fabs(gpu[r][run][i] - cpu[r][run][i]) <=
                 1e-5f * std::max(1.0f, std::fabs(cpu[r][run][i])));
      EXPECT_EQ(bad, 0u) << "rank " << r << ", run " << run;
    }
  }
}

} // namespace
} // namespace dsrt::cuda
