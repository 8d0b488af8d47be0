// NCCL on a GPU (skipped without one): a one-rank communicator on the rank's device, whose
// all-reduce and uneven all-gather (grouped broadcasts) must move device buffers exactly;
// and two ranks on one GPU, which NCCL refuses, must both get an error (not one waiting
// for the other), the case in which dsrt_session_create_mpi falls back to host staging.
#include "comm/InProcessGroup.h"
#include "comm/Nccl.h"
#include "cuda/CudaDriver.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

namespace dsrt::test {
namespace {

using namespace dsrt::cuda;

class NcclGpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (availableDeviceCount(&why) == 0)
      GTEST_SKIP() << "no GPU: " << why;
    driver_ = processDriver(&why);
    ASSERT_NE(driver_, nullptr) << why;
  }
  const DriverApi *driver_ = nullptr;
};

#define CU_OK(call) ASSERT_EQ((call), kCudaSuccess) << #call

TEST_F(NcclGpuTest, OneRankMovesDeviceBuffers) {
  InProcessGroup group(1);
  std::unique_ptr<NcclCollectives> nccl;
  Status status = NcclCollectives::create(group.member(0), nccl);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(nccl->size(), 1);
  EXPECT_TRUE(nccl->capturable());
  // The primary context NCCL's set-up made current is the one the buffers live in.
  CUstream stream = nullptr;
  CU_OK(driver_->cuStreamCreate(&stream, kStreamNonBlocking));
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = 0.5f * float(i) - 7.0f;
  CUdeviceptr data = 0, gathered = 0;
  CU_OK(driver_->cuMemAlloc(&data, values.size() * sizeof(float)));
  CU_OK(driver_->cuMemAlloc(&gathered, values.size() * sizeof(float)));
  CU_OK(driver_->cuMemcpyHtoDAsync(data, values.data(), values.size() * sizeof(float), stream));
  status = nccl->allReduceSum(data, int64_t(values.size()), stream);
  EXPECT_TRUE(status.isOk()) << status.message();
  // 13 bytes: a part that is not a whole number of floats.
  status = nccl->allGather(data, {13}, gathered, stream);
  EXPECT_TRUE(status.isOk()) << status.message();
  std::vector<float> summed(values.size());
  std::vector<uint8_t> bytes(13);
  CU_OK(driver_->cuMemcpyDtoHAsync(summed.data(), data, summed.size() * sizeof(float), stream));
  CU_OK(driver_->cuMemcpyDtoHAsync(bytes.data(), gathered, bytes.size(), stream));
  CU_OK(driver_->cuStreamSynchronize(stream));
  EXPECT_EQ(summed, values);  // one rank: the sum is the value itself
  EXPECT_EQ(0, std::memcmp(bytes.data(), values.data(), bytes.size()));
  driver_->cuMemFree(data);
  driver_->cuMemFree(gathered);
  driver_->cuStreamDestroy(stream);
}

TEST_F(NcclGpuTest, TwoRanksOnOneGpuAgree) {
  InProcessGroup group(2);
  std::vector<Status> results(2, Status::ok());
  std::vector<std::unique_ptr<NcclCollectives>> comms(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank)
    threads.emplace_back([&, rank] {
      // Both on device 0, whatever the device count.
      results[rank] = NcclCollectives::create(
          group.member(rank), comms[rank], [this](int, int &device) {
            device = 0;
            CUdevice handle = 0;
            CUcontext context = nullptr;
            if (driver_->cuDeviceGet(&handle, 0) != kCudaSuccess ||
                driver_->cuDevicePrimaryCtxRetain(&context, handle) != kCudaSuccess ||
                driver_->cuCtxSetCurrent(context) != kCudaSuccess)
              return Status::error("cannot make device 0 current");
            return Status::ok();
          });
    });
  for (std::thread &thread : threads)
    thread.join();
  // NCCL versions differ on whether two ranks may share a GPU; the ranks must not.
  EXPECT_EQ(results[0].isOk(), results[1].isOk())
      << results[0].message() << " / " << results[1].message();
}

} // namespace
} // namespace dsrt::test
