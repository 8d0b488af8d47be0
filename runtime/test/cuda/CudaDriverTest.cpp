// The driver loader and the session factory on a machine without a usable GPU.
#include "FakeDriver.h"
#include "TestPlans.h"
#include "cpu/Session.h"
#include "cuda/CudaDriver.h"
#include "session/Session.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace dsrt::cuda {
namespace {

TEST(CudaDriver, MissingLibraryIsNamed) {
  ::setenv("DSRT_LIBCUDA", "/nonexistent/libcuda-test.so", 1);
  DriverApi api;
  std::string library;
  Status status = openDriver(api, library);
  ::unsetenv("DSRT_LIBCUDA");
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("/nonexistent/libcuda-test.so"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("DSRT_LIBCUDA"), std::string::npos) << status.message();
  EXPECT_EQ(api.cuInit, nullptr);
}

TEST(CudaDriver, NoDeviceHereHasAReason) {
  std::string whyNot;
  int count = availableDeviceCount(&whyNot);
  if (count > 0)
    GTEST_SKIP() << count << " CUDA device(s) present";
  EXPECT_EQ(count, 0);
  EXPECT_FALSE(whyNot.empty());
}

TEST(CudaDriver, CountsTheFakeDevices) {
  fake::reset();
  std::string whyNot;
  EXPECT_EQ(availableDeviceCount(fake::driver(), &whyNot), 1);
  fake::state().deviceCount = 0;
  EXPECT_EQ(availableDeviceCount(fake::driver(), &whyNot), 0);
  EXPECT_NE(whyNot.find("no device"), std::string::npos) << whyNot;
  fake::reset();
}

TEST(CudaDriver, ErrorTextNamesCallAndError) {
  std::string text = driverErrorText(fake::driver(), 2, "cuMemAlloc");
  EXPECT_EQ(text, "cuMemAlloc: CUDA_ERROR_FAKE_2 (fake driver error)");
}

// Without a GPU, DeviceKind::Cuda gives a CPU session that computes what the CPU backend
// computes: the fixture's PyTorch logits within the fp32 plans' tolerance.
TEST(CudaFactory, FallsBackToTheCpu) {
  std::string whyNot;
  if (availableDeviceCount(&whyNot) > 0)
    GTEST_SKIP() << "a CUDA device is present: no fallback to test";
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openGpt2Plan(plan));
  std::unique_ptr<Session> session;
  testing::internal::CaptureStderr();
  Status status = createSession(plan, 0, DeviceKind::Cuda, nullptr, session);
  std::string said = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(session->device(), DeviceKind::Cpu);
  EXPECT_EQ(session->deviceName(), "cpu");
  EXPECT_NE(said.find("running on the CPU"), std::string::npos) << said;
  std::vector<float> logits, reference;
  ASSERT_TRUE(test::runForward(*session, logits, reference));
  test::expectClose(logits, reference, 1e-4f);
}

} // namespace
} // namespace dsrt::cuda
