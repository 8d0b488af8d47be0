// CudaSession::topLogits against the fake driver (FakeDriver.h): without the plan's sampling
// kernel it is Session's host selection over output(); with it, it launches the kernel once
// per call, one block per row. The kernel's own results are checked on the host emulation
// (SampleTopkEmulationTest.cpp).
#include "FakeDriver.h"
#include "TestPlans.h"
#include "cuda/CudaSession.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace dsrt::cuda {
namespace {

Status countingLauncher(StepContext &context) {
  for (size_t slot = 0; slot < context.kernelCount(); ++slot)
    DSRT_RETURN_IF_ERROR(context.launch(slot, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, nullptr));
  return Status::ok();
}
GpuOpFn noLaunchers(std::string_view) { return nullptr; }
GpuOpFn everyOp(std::string_view) { return countingLauncher; }
bool anyOp(std::string_view) { return true; }

// No sampling kernel (a `--arch none` plan), no launchers: the logits come back through
// the fallback, and topLogits must be the stable-sorted head of each row's last position.
TEST(CudaSampling, WithoutTheKernelSelectsOnTheHost) {
  fake::reset();
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openGpt2Plan(plan, /*cpuOnly=*/true));
  ASSERT_TRUE(plan->plan().model());
  EXPECT_EQ(plan->plan().model()->sampling_kernel(), -1);
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.findOp = noLaunchers;
  std::unique_ptr<CudaSession> session;
  Status status = CudaSession::create(plan, 0, options, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  std::vector<float> logits, reference;
  ASSERT_TRUE(test::runForward(*session, logits, reference));
  TensorRef out;
  ASSERT_TRUE(session->output("forward", 0, out).isOk());
  ASSERT_GE(out.shape.size(), 2u);
  const int64_t rows = out.shape[0], vocab = out.shape.back(), perRow = out.elements() / rows;
  const int64_t count = 7;
  std::vector<std::vector<float>> values;
  std::vector<std::vector<int64_t>> ids;
  status = session->topLogits("forward", 0, count, values, ids);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(values.size(), static_cast<size_t>(rows));
  ASSERT_EQ(ids.size(), static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float *last = logits.data() + r * perRow + perRow - vocab;
    std::vector<int64_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return last[a] > last[b]; });
    ASSERT_EQ(values[r].size(), static_cast<size_t>(count));
    ASSERT_EQ(ids[r].size(), static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_EQ(ids[r][i], order[i]) << "row " << r << " rank " << i;
      EXPECT_EQ(values[r][i], last[order[i]]) << "row " << r << " rank " << i;
    }
  }
  EXPECT_TRUE(fake::state().launches.empty());
  // A count past the vocabulary is an error, not a short answer.
  EXPECT_FALSE(session->topLogits("forward", 0, vocab + 1, values, ids).isOk());
}

// With the kernel: one launch of the plan's sampling function per call, a block per row
// of BLOCK threads. (The fake runs nothing, so only the launch is checked.)
TEST(CudaSampling, WithTheKernelLaunchesIt) {
  fake::reset();
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openGpt2Plan(plan));
  const dsp::ModelInfo *model = plan->plan().model();
  if (!model || model->sampling_kernel() < 0)
    GTEST_SKIP() << "the fixture plan has no generated kernels (no NVRTC at compile time)";
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.findOp = everyOp;
  options.launchesWithoutKernels = anyOp;
  options.graphs = false;
  std::unique_ptr<CudaSession> session;
  Status status = CudaSession::create(plan, 0, options, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  std::vector<float> logits, reference;
  ASSERT_TRUE(test::runForward(*session, logits, reference));
  TensorRef out;
  ASSERT_TRUE(session->output("forward", 0, out).isOk());
  size_t before = fake::state().launches.size();
  std::vector<std::vector<float>> values;
  std::vector<std::vector<int64_t>> ids;
  status = session->topLogits("forward", 0, 3, values, ids);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(fake::state().launches.size(), before + 1);
  const fake::Launch &launch = fake::state().launches.back();
  EXPECT_EQ(launch.grid[0], static_cast<unsigned>(out.shape[0]));
  EXPECT_EQ(launch.block[0], 1024u);
  ASSERT_EQ(values.size(), static_cast<size_t>(out.shape[0]));
  EXPECT_EQ(values[0].size(), 3u);
  EXPECT_EQ(ids[0].size(), 3u);
  // Past the device bound the host selects: no launch.
  before = fake::state().launches.size();
  if (out.shape.back() > CudaSession::kMaxDeviceTopLogits) {
    ASSERT_TRUE(session->topLogits("forward", 0, CudaSession::kMaxDeviceTopLogits + 1, values,
                                   ids)
                    .isOk());
    EXPECT_EQ(fake::state().launches.size(), before);
  }
}

} // namespace
} // namespace dsrt::cuda
