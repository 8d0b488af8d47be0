// The plan's kernels on the fake driver: one module per Kernel (the device's cubin when the
// plan has one, else the PTX), functions by entry name, and what launchers get of them
// (constants, launches, shared memory above 48 KiB, capture). The GPT-2 fixture is given
// kernels by rewriting its header (runtime/test/plan/PlanTestSupport.h).
#include "FakeDriver.h"
#include "PlanTestSupport.h"
#include "TestPlans.h"
#include "cuda/CudaSession.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace dsrt::cuda {
namespace {

constexpr uint32_t kLargeShared = 64 << 10;

std::vector<uint8_t> bytesOf(const std::string &text) {
  return std::vector<uint8_t>(text.c_str(), text.c_str() + text.size() + 1);  // with NUL
}

std::unique_ptr<dsp::KernelT> kernel(const std::string &name, const std::string &ptx,
                                     const std::string &arch, const std::string &cubin,
                                     int64_t block) {
  auto made = std::make_unique<dsp::KernelT>();
  made->name = name;
  made->entry = name + "_entry";
  made->kind = name;
  made->ptx = bytesOf(ptx);
  made->ptx_arch = "compute_80";
  auto binary = std::make_unique<dsp::KernelBinaryT>();
  binary->arch = arch;
  binary->cubin = bytesOf(cubin);
  made->binaries.push_back(std::move(binary));
  auto constant = std::make_unique<dsp::AttrT>();
  constant->name = "BLOCK";
  constant->kind = dsp::AttrKind::int_;
  constant->i = block;
  made->constants.push_back(std::move(constant));
  return made;
}

int launcherErrors = 0;
Status normLauncher(StepContext &context) {
  if (context.kernelCount() != 1 || context.kernelConstant(0, "BLOCK", -1) != 128 ||
      context.kernelConstant(0, "MISSING", -7) != -7)
    ++launcherErrors;
  return context.launch(0, Dim3{2, 1, 1}, Dim3{128, 1, 1}, kLargeShared, nullptr);
}
Status headLauncher(StepContext &context) {
  if (context.kernelConstant(0, "BLOCK", -1) != 256)
    ++launcherErrors;
  return context.launch(0, Dim3{1, 1, 1}, Dim3{256, 1, 1}, 0, nullptr);
}
GpuOpFn normAndHead(std::string_view op) {
  if (op == "tfm.layer_norm")
    return normLauncher;
  return op == "tfm.lm_head" ? headLauncher : nullptr;
}

TEST(CudaKernels, LoadedPerPlanKernelAndLaunched) {
  std::shared_ptr<PlanFile> original;
  ASSERT_TRUE(test::openGpt2Plan(original));
  size_t norms = 0, heads = 0;
  std::vector<uint8_t> file = plantest::rewriteHeader(
      plantest::readFile(original->path()), [&](dsp::PlanT &plan) {
        plan.kernels.clear();
        // The sampling kernel's index was into the list just cleared.
        if (plan.model)
          plan.model->sampling_kernel = -1;
        // The fake device is sm_80: kernel 0 has its cubin, kernel 1 only sm_90's.
        plan.kernels.push_back(kernel("norm", "PTX-norm", "sm_80", "CUBIN-norm-80", 128));
        plan.kernels.push_back(kernel("head", "PTX-head", "sm_90", "CUBIN-head-90", 256));
        for (auto &program : plan.programs)
          for (auto &step : program->steps) {
            step->kernels.clear();
            if (step->op == "tfm.layer_norm")
              step->kernels.push_back(0);
            else if (step->op == "tfm.lm_head")
              step->kernels.push_back(1);
          }
      });
  plantest::ScratchDir scratch;
  std::string path = scratch.file("kernels.dsp");
  plantest::writeFile(path, file);
  std::unique_ptr<PlanFile> opened;
  Status status = PlanFile::open(path, opened);
  ASSERT_TRUE(status.isOk()) << status.message();
  for (const dsp::Program *program : *opened->plan().programs())
    if (program->name()->str() == "forward")
      for (const dsp::Step *step : *program->steps()) {
        norms += step->op()->str() == "tfm.layer_norm" && step->kernels()->size() == 1;
        heads += step->op()->str() == "tfm.lm_head" && step->kernels()->size() == 1;
      }
  ASSERT_GT(norms, 0u);
  ASSERT_GT(heads, 0u);

  fake::reset();
  launcherErrors = 0;
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.findOp = normAndHead;
  std::unique_ptr<CudaSession> session;
  status = CudaSession::create(std::move(opened), 0, options, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(fake::state().moduleImages, (std::vector<std::string>{"CUBIN-norm-80", "PTX-head"}));
  EXPECT_EQ(fake::state().functionNames, (std::vector<std::string>{"norm_entry", "head_entry"}));

  std::vector<float> logits, reference;
  ASSERT_TRUE(test::runForward(*session, logits, reference));
  EXPECT_EQ(launcherErrors, 0);
  const std::vector<fake::Launch> &launches = fake::state().launches;
  ASSERT_EQ(launches.size(), norms + heads);
  size_t large = 0;
  for (const fake::Launch &launch : launches) {
    EXPECT_FALSE(launch.captured);
    large += launch.sharedBytes == kLargeShared && launch.block[0] == 128 && launch.grid[0] == 2;
  }
  EXPECT_EQ(large, norms);
  // Asked for once: the function keeps the larger limit.
  EXPECT_EQ(fake::state().sharedMemoryLimits, (std::vector<int>{static_cast<int>(kLargeShared)}));
  const std::vector<StepPlacement> &placements = session->lastPlacements("forward");
  const dsp::Program &forward = *session->program("forward");
  for (size_t i = 0; i < placements.size(); ++i) {
    std::string op = forward.steps()->Get(i)->op()->str();
    if (op == "tfm.layer_norm" || op == "tfm.lm_head")
      EXPECT_EQ(placements[i], StepPlacement::Device) << "step " << i;
  }
}

} // namespace
} // namespace dsrt::cuda
