// cuBLASLt through dlopen. Without a GPU: the toolkit's library loads and every entry point
// the backend calls resolves; a wrong DSRT_CUBLASLT is an error naming the library, and a
// library that lacks the entry points is an error naming them. With a GPU (skipped
// otherwise): C = A·Bᵀ against a double-precision host reference, for f32 (no TF32: 1e-5
// relative), f16 and bf16 operands (the operands are rounded to the type on the host first,
// so only accumulation order differs: 1e-4 relative), the accumulate forms (onto C, and
// onto a separate addend: C ≠ D), and the epilogue (bias, ReLU, tanh-GELU). Each test
// runs in its own process (gtest_discover_tests), so setenv does not leak between them.
#include "cuda/CublasLt.h"
#include "cuda/CudaDriver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

namespace dsrt::test {
namespace {

using cuda::CublasLt;

const char *kToolkitCublasLt = "/usr/local/cuda/lib64/libcublasLt.so";

bool exists(const char *path) { return std::ifstream(path).good(); }

TEST(CublasLtTest, ToolkitLibraryResolvesEveryFunction) {
  unsetenv("DSRT_CUBLASLT");
  if (!exists(kToolkitCublasLt))
    GTEST_SKIP() << kToolkitCublasLt << " is not installed";
  std::string path;
  Status status = CublasLt::probeLibrary(path);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_NE(path.find("libcublasLt.so"), std::string::npos) << path;
}

TEST(CublasLtTest, ExplicitLibraryIsTheOneLoaded) {
  if (!exists(kToolkitCublasLt))
    GTEST_SKIP() << kToolkitCublasLt << " is not installed";
  setenv("DSRT_CUBLASLT", kToolkitCublasLt, 1);
  std::string path;
  Status status = CublasLt::probeLibrary(path);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(path, kToolkitCublasLt);
}

TEST(CublasLtTest, MissingLibraryIsAnErrorNamingIt) {
  setenv("DSRT_CUBLASLT", "/nonexistent/libcublasLt.so", 1);
  std::string path;
  Status probe = CublasLt::probeLibrary(path);
  ASSERT_FALSE(probe.isOk());
  EXPECT_NE(probe.message().find("/nonexistent/libcublasLt.so"), std::string::npos)
      << probe.message();
  EXPECT_NE(probe.message().find("cuBLASLt"), std::string::npos) << probe.message();
  // open() fails the same way before it needs a GPU, and leaves no object behind.
  std::unique_ptr<CublasLt> blas;
  Status open = CublasLt::open(blas);
  ASSERT_FALSE(open.isOk());
  EXPECT_NE(open.message().find("/nonexistent/libcublasLt.so"), std::string::npos)
      << open.message();
  EXPECT_EQ(blas, nullptr);
}

TEST(CublasLtTest, LibraryWithoutTheEntryPointsIsAnErrorNamingThem) {
  // Any shared library that is not cuBLASLt: the C library is always there.
  setenv("DSRT_CUBLASLT", "libc.so.6", 1);
  std::string path;
  Status probe = CublasLt::probeLibrary(path);
  ASSERT_FALSE(probe.isOk());
  EXPECT_NE(probe.message().find("lacks cublasLtCreate"), std::string::npos) << probe.message();
  EXPECT_NE(probe.message().find("cublasLtMatmul"), std::string::npos) << probe.message();
}

// ---- on a GPU --------------------------------------------------------------------------

class CublasLtGpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    unsetenv("DSRT_CUBLASLT");
    std::string whyNot;
    driver_ = cuda::processDriver(&whyNot);
    if (!driver_ || cuda::availableDeviceCount(*driver_, &whyNot) < 1)
      GTEST_SKIP() << "no GPU: " << whyNot;
    ASSERT_TRUE(check(driver_->cuDeviceGet(&device_, 0), "cuDeviceGet"));
    ASSERT_TRUE(check(driver_->cuDevicePrimaryCtxRetain(&context_, device_),
                      "cuDevicePrimaryCtxRetain"));
    retained_ = true;
    ASSERT_TRUE(check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
    ASSERT_TRUE(check(driver_->cuStreamCreate(&stream_, cuda::kStreamNonBlocking),
                      "cuStreamCreate"));
    Status status = CublasLt::open(blas_);
    ASSERT_TRUE(status.isOk()) << status.message();
    ASSERT_TRUE(check(driver_->cuMemAlloc(&workspace_, CublasLt::kWorkspaceBytes), "cuMemAlloc"));
  }

  void TearDown() override {
    if (!driver_)
      return;
    blas_.reset();
    for (cuda::CUdeviceptr pointer : allocations_)
      driver_->cuMemFree(pointer);
    if (workspace_)
      driver_->cuMemFree(workspace_);
    if (stream_)
      driver_->cuStreamDestroy(stream_);
    if (retained_)
      driver_->cuDevicePrimaryCtxRelease(device_);
  }

  ::testing::AssertionResult check(cuda::CUresult result, const char *call) {
    if (result == cuda::kCudaSuccess)
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << cuda::driverErrorText(*driver_, result, call);
  }

  // Uploads `bytes` bytes; the allocation is freed by TearDown.
  cuda::CUdeviceptr upload(const void *data, size_t bytes) {
    cuda::CUdeviceptr pointer = 0;
    EXPECT_TRUE(check(driver_->cuMemAlloc(&pointer, bytes), "cuMemAlloc"));
    if (!pointer)
      return 0;
    allocations_.push_back(pointer);
    EXPECT_TRUE(check(driver_->cuMemcpyHtoDAsync(pointer, data, bytes, stream_),
                      "cuMemcpyHtoDAsync"));
    EXPECT_TRUE(check(driver_->cuStreamSynchronize(stream_), "cuStreamSynchronize"));
    return pointer;
  }

  // C[m, n] (+)= A[m, k]·B[n, k]ᵀ with A and B stored as `type`, against a double
  // reference over the values as rounded to `type`. With `ldc` > n, C's rows are ldc apart
  // (the columns of a wider output) and the columns past n must stay as they were.
  // With `separateAddend` (and `accumulate`): the product is added to another buffer of C's
  // layout (GemmDesc::addend, cuBLASLt's C ≠ D), which must stay as it was.
  // With `biasType` (not Undefined) and/or `activation`: cuBLASLt's epilogue,
  // C = act(A·Bᵀ (+ addend) + bias), checked only where takesEpilogue says the heuristic
  // has it (`taken` receives the answer); the bias is rounded to its type first.
  void checkGemm(int64_t m, int64_t n, int64_t k, DType type, bool accumulate,
                 double tolerance, int64_t ldc = 0, bool separateAddend = false,
                 DType biasType = DType::Undefined,
                 cuda::GemmActivation activation = cuda::GemmActivation::None,
                 bool *taken = nullptr) {
    const int64_t stride = ldc ? ldc : n;
    std::mt19937 random(static_cast<unsigned>(m * 131 + n * 7 + k));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> a(m * k), b(n * k), c(m * stride), addend(m * stride);
    for (float &value : a)
      value = uniform(random);
    for (float &value : b)
      value = uniform(random);
    for (float &value : c)
      value = uniform(random);
    for (float &value : addend)
      value = uniform(random);
    const size_t elementBytes = dtypeSize(type);
    std::vector<unsigned char> aStored(a.size() * elementBytes), bStored(b.size() * elementBytes);
    ASSERT_TRUE(convertFloats(DType::F32, a.data(), type, aStored.data(), m * k));
    ASSERT_TRUE(convertFloats(DType::F32, b.data(), type, bStored.data(), n * k));
    // The reference multiplies what the GPU sees.
    ASSERT_TRUE(convertFloats(type, aStored.data(), DType::F32, a.data(), m * k));
    ASSERT_TRUE(convertFloats(type, bStored.data(), DType::F32, b.data(), n * k));

    cuda::GemmDesc gemm;
    gemm.m = m;
    gemm.n = n;
    gemm.k = k;
    gemm.a = upload(aStored.data(), aStored.size());
    gemm.aType = type;
    gemm.b = upload(bStored.data(), bStored.size());
    gemm.bType = type;
    gemm.c = upload(c.data(), c.size() * sizeof(float));
    gemm.ldc = ldc;
    gemm.accumulate = accumulate;
    if (separateAddend) {
      gemm.addend = upload(addend.data(), addend.size() * sizeof(float));
      ASSERT_TRUE(gemm.addend);
    }
    std::vector<float> bias(n, 0.0f);
    if (biasType != DType::Undefined) {
      for (float &value : bias)
        value = uniform(random);
      std::vector<unsigned char> biasStored(n * dtypeSize(biasType));
      ASSERT_TRUE(convertFloats(DType::F32, bias.data(), biasType, biasStored.data(), n));
      ASSERT_TRUE(convertFloats(biasType, biasStored.data(), DType::F32, bias.data(), n));
      gemm.bias = upload(biasStored.data(), biasStored.size());
      gemm.biasType = biasType;
      ASSERT_TRUE(gemm.bias);
    }
    gemm.activation = activation;
    ASSERT_TRUE(gemm.a && gemm.b && gemm.c);
    if (gemm.hasEpilogue()) {
      const bool takes = blas_->takesEpilogue(gemm, CublasLt::kWorkspaceBytes);
      if (taken)
        *taken = takes;
      std::printf("cuBLASLt epilogue (bias %s, activation %d) over %s: %s\n",
                  biasType == DType::Undefined ? "none" : dtypeName(biasType),
                  static_cast<int>(activation), dtypeName(type), takes ? "taken" : "declined");
      if (!takes)
        return;
    }
    Status status = blas_->matmul(gemm, workspace_, CublasLt::kWorkspaceBytes, stream_);
    ASSERT_TRUE(status.isOk()) << status.message();
    std::vector<float> result(m * stride);
    ASSERT_TRUE(check(driver_->cuMemcpyDtoHAsync(result.data(), gemm.c,
                                                 result.size() * sizeof(float), stream_),
                      "cuMemcpyDtoHAsync"));
    ASSERT_TRUE(check(driver_->cuStreamSynchronize(stream_), "cuStreamSynchronize"));
    // What the product is added to.
    const std::vector<float> &before = separateAddend ? addend : c;
    if (separateAddend) {
      std::vector<float> after(addend.size());
      ASSERT_TRUE(check(driver_->cuMemcpyDtoHAsync(after.data(), gemm.addend,
                                                   after.size() * sizeof(float), stream_),
                        "cuMemcpyDtoHAsync"));
      ASSERT_TRUE(check(driver_->cuStreamSynchronize(stream_), "cuStreamSynchronize"));
      EXPECT_EQ(after, addend) << "the addend was written";
    }

    int bad = 0;
    for (int64_t i = 0; i < m && bad < 5; ++i)
      for (int64_t j = 0; j < n && bad < 5; ++j) {
        double expected = (accumulate ? before[i * stride + j] : 0.0) + bias[j], magnitude = 0;
        for (int64_t p = 0; p < k; ++p) {
          expected += double(a[i * k + p]) * b[j * k + p];
          magnitude += std::fabs(double(a[i * k + p]) * b[j * k + p]);
        }
        if (activation == cuda::GemmActivation::Relu)
          expected = std::max(expected, 0.0);
        else if (activation == cuda::GemmActivation::GeluTanh)
          expected = 0.5 * expected *
                     (1.0 + std::tanh(0.79788456080286536 *
                                      (expected + 0.044715 * expected * expected * expected)));
        // Relative to the sum of magnitudes: cancellation must not make a correct
        // accumulation order look wrong. cuBLASLt's GELU may take tanh from the hardware's
        // approximation (tanh.approx.f32, relative error about 2^-11): 1e-3 of the value more.
        double allowed =
            tolerance * (magnitude + (accumulate ? std::fabs(before[i * stride + j]) : 0) +
                         std::fabs(bias[j])) +
            (activation == cuda::GemmActivation::GeluTanh ? 1e-3 * std::fabs(expected) : 0) +
            1e-6;
        if (std::fabs(result[i * stride + j] - expected) > allowed) {
          ++bad;
          ADD_FAILURE() << dtypeName(type) << " m=" << m << " n=" << n << " k=" << k << " C["
                        << i << "," << j << "] = " << result[i * stride + j] << ", expected "
                        << expected;
        }
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = n; j < stride; ++j)
        ASSERT_EQ(result[i * stride + j], c[i * stride + j])
            << "C[" << i << "," << j << "] is past the GEMM's columns";
  }

  const cuda::DriverApi *driver_ = nullptr;
  cuda::CUdevice device_ = 0;
  cuda::CUcontext context_ = nullptr;
  bool retained_ = false;
  cuda::CUstream stream_ = nullptr;
  cuda::CUdeviceptr workspace_ = 0;
  std::vector<cuda::CUdeviceptr> allocations_;
  std::unique_ptr<CublasLt> blas_;
};

TEST_F(CublasLtGpuTest, F32MatchesTheReferenceWithoutTf32) {
  // TF32 would round the operands to 10 mantissa bits: errors near 1e-3, not 1e-5.
  checkGemm(17, 33, 64, DType::F32, false, 1e-5);
  checkGemm(64, 300, 2050, DType::F32, false, 1e-5);
}

TEST_F(CublasLtGpuTest, HalfTypesAccumulateInF32) {
  checkGemm(16, 96, 768, DType::F16, false, 1e-4);
  checkGemm(9, 300, 64, DType::BF16, false, 1e-4);
}

TEST_F(CublasLtGpuTest, AccumulateAddsToC) {
  checkGemm(12, 40, 64, DType::F32, true, 1e-5);
  checkGemm(12, 40, 64, DType::F16, true, 1e-4);
}

// A linear's residual as the GEMM's C and its output as D (LinearOps.cpp), and as the int8
// launcher's parts do it, columns of a wider output.
TEST_F(CublasLtGpuTest, AccumulateOntoASeparateAddend) {
  checkGemm(12, 40, 64, DType::F32, true, 1e-5, 0, true);
  checkGemm(33, 256, 128, DType::BF16, true, 1e-4, 0, true);
  checkGemm(20, 72, 128, DType::F16, true, 1e-4, 200, true);
}

// The int8 launcher's parts of a weight write their columns of a wider output.
TEST_F(CublasLtGpuTest, ColumnsOfAWiderOutput) {
  checkGemm(20, 64, 128, DType::F16, false, 1e-4, 200);
  checkGemm(20, 72, 128, DType::BF16, true, 1e-4, 200);
  cuda::GemmDesc gemm;
  gemm.m = gemm.n = gemm.k = 8;
  gemm.a = gemm.b = gemm.c = workspace_;  // never dereferenced: refused before any launch
  gemm.ldc = 4;
  Status status = blas_->matmul(gemm, workspace_, CublasLt::kWorkspaceBytes, stream_);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("row stride 4 is less than its 8 columns"), std::string::npos)
      << status.message();
}

// The prefill linears' epilogue (LinearOps.cpp): the f32 bias of an f32 product must be
// taken (it is D's own type); a half bias beside the f32 product is taken or declined as
// the library decides (printed), and correct where taken.
TEST_F(CublasLtGpuTest, EpilogueAddsTheBiasThenActivates) {
  bool taken = false;
  checkGemm(33, 96, 64, DType::F16, false, 1e-4, 0, false, DType::F32,
            cuda::GemmActivation::GeluTanh, &taken);
  EXPECT_TRUE(taken) << "f16 GEMM, f32 bias, GELU";
  checkGemm(20, 64, 128, DType::F32, true, 1e-5, 0, true, DType::F32,
            cuda::GemmActivation::None, &taken);
  EXPECT_TRUE(taken) << "f32 GEMM onto an addend, f32 bias";
  checkGemm(17, 40, 64, DType::BF16, false, 1e-4, 0, false, DType::Undefined,
            cuda::GemmActivation::Relu, &taken);
  EXPECT_TRUE(taken) << "bf16 GEMM, ReLU";
  // An int8 weight's part: columns of a wider output.
  checkGemm(20, 64, 128, DType::F16, false, 1e-4, 200, false, DType::F32,
            cuda::GemmActivation::Relu, &taken);
  EXPECT_TRUE(taken) << "f16 GEMM into columns of a wider C, f32 bias, ReLU";
  checkGemm(24, 80, 64, DType::F16, false, 1e-4, 0, false, DType::F16,
            cuda::GemmActivation::GeluTanh);
  checkGemm(24, 80, 64, DType::BF16, true, 1e-4, 0, true, DType::BF16,
            cuda::GemmActivation::None);
}

TEST_F(CublasLtGpuTest, MixedOperandTypesAreRefused) {
  cuda::GemmDesc gemm;
  gemm.m = gemm.n = gemm.k = 8;
  gemm.a = gemm.b = gemm.c = workspace_;  // never dereferenced: refused before any launch
  gemm.aType = DType::F32;
  gemm.bType = DType::F16;
  Status status = blas_->matmul(gemm, workspace_, CublasLt::kWorkspaceBytes, stream_);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("equal types"), std::string::npos) << status.message();
}

} // namespace
} // namespace dsrt::test
