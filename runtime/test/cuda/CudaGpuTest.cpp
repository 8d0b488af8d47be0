// The CUDA session on a real GPU, against the PyTorch reference and the CPU backend.
// Skipped (with the reason) where there is no usable driver or device.
#include "TestPlans.h"
#include "cpu/Session.h"
#include "cuda/CudaDriver.h"
#include "cuda/CudaSession.h"

#include <gtest/gtest.h>

namespace dsrt::cuda {
namespace {

#define SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                       \
    std::string whyNot;                                                                      \
    if (availableDeviceCount(&whyNot) == 0)                                                  \
      GTEST_SKIP() << whyNot;                                                                \
  } while (0)

TEST(CudaGpu, ForwardMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openGpt2Plan(plan));
  std::unique_ptr<Session> session;
  Status status = createSession(plan, 0, DeviceKind::Cuda, nullptr, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(session->device(), DeviceKind::Cuda);
  EXPECT_EQ(session->deviceName().rfind("cuda:", 0), 0u) << session->deviceName();
  std::vector<float> logits, reference;
  ASSERT_TRUE(test::runForward(*session, logits, reference));
  test::expectClose(logits, reference, 1e-4f);
  double bandwidth = 0;
  ASSERT_TRUE(session->measureCopyBandwidth(64 << 20, bandwidth).isOk());
  EXPECT_GT(bandwidth, 1e9);
}

// Prefill, then decodes: the first eager, the next ones in a captured graph (when every
// step runs on the device), all equal to the CPU backend's logits within 1e-4.
TEST(CudaGpu, DecodeMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openGpt2Plan(plan));
  if (!plan->plan().programs() || plan->rankCount() != 1)
    GTEST_SKIP() << "not a single-rank plan";
  std::unique_ptr<Session> gpu;
  Status status = createSession(plan, 0, DeviceKind::Cuda, nullptr, gpu);
  ASSERT_TRUE(status.isOk()) << status.message();
  if (!gpu->program("prefill") || !gpu->program("decode"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  std::unique_ptr<CpuSession> cpu;
  ASSERT_TRUE(CpuSession::create(plan, 0, cpu).isOk());
  int64_t limit = plan->plan().limits()->max_seq_len();
  for (int64_t total = 3; total <= std::min<int64_t>(limit, 8); ++total) {
    const char *program = total == 3 ? "prefill" : "decode";
    int64_t tokens = total == 3 ? 3 : 1, past = total - tokens;
    std::vector<int64_t> ids(tokens), mask(total, 1), positions(tokens);
    for (int64_t t = 0; t < tokens; ++t) {
      ids[t] = (37 * (past + t) + 11) % 300;
      positions[t] = past + t;
    }
    for (Session *session : {gpu.get(), static_cast<Session *>(cpu.get())}) {
      const dsp::Program *found = session->program(program);
      for (size_t i = 0; i < found->inputs()->size(); ++i) {
        std::string name = plan->plan().tensors()->Get(found->inputs()->Get(i))->name()->str();
        TensorRef value{DType::I64, {1, tokens}, name == "position_ids" ? positions.data()
                                                                           : ids.data()};
        if (name == "attention_mask")
          value = {DType::I64, {1, total}, mask.data()};
        ASSERT_TRUE(session->setInput(program, i, value).isOk());
      }
      status = session->run(program);
      ASSERT_TRUE(status.isOk()) << status.message();
    }
    TensorRef a, b;
    ASSERT_TRUE(gpu->output(program, 0, a).isOk());
    ASSERT_TRUE(cpu->output(program, 0, b).isOk());
    ASSERT_EQ(a.shape, b.shape);
    SCOPED_TRACE(std::string(program) + " at " + std::to_string(total) + " tokens");
    test::expectClose(std::vector<float>(a.as<float>(), a.as<float>() + a.elements()),
                      std::vector<float>(b.as<float>(), b.as<float>() + b.elements()), 1e-4f);
  }
}

} // namespace
} // namespace dsrt::cuda
