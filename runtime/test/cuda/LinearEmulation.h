// The host emulation of tfm.linear's CUDA launcher (runtime/src/cuda/ops/LinearOps.cpp) and
// kernel templates, shared by LinearEmulationTest.cpp (float and int8 weights) and
// LinearInt4EmulationTest.cpp (int4): a StepContext whose launches run the templates
// specialised as LinearRules.cpp specialises them (the test's families, LinearKernels)
// through CudaEmulation.h, and checkLinear, which runs one family's step over random rows
// and compares with a double-precision reference computed from the same stored weights.
// Included once per test file, before that file's families: everything here has internal
// linkage.
#pragma once
#include "CudaEmulation.h"

#include "dsc_common.cuh"

#include "EmulatedHalf.h"
#include "core/Tensor.h"

#include "TestStepTensors.h"
#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <utility>

namespace {

template <typename... Params, size_t... I>
void invokeWith(void (*kernel)(Params...), void **args, std::index_sequence<I...>) {
  std::tuple<std::decay_t<Params>...> values;
  (std::memcpy(&std::get<I>(values), args[I], sizeof(std::get<I>(values))), ...);
  kernel(std::get<I>(values)...);
}
template <typename... Params> void invokeKernel(void (*kernel)(Params...), void **args) {
  invokeWith(kernel, args, std::index_sequence_for<Params...>{});
}

struct LinearKernels {
  std::function<void(void **)> slots[8];
  std::map<std::string, int64_t> constants[8];
  size_t count = 2;
  // The dynamic shared memory gemv's blocks share (blocks run one after another).
  float *sharedX = nullptr;
};

} // namespace

namespace dsrt::test {
namespace {

using namespace dsrt::cuda;

DevicePtr address(const void *pointer) { return reinterpret_cast<DevicePtr>(pointer); }

class EmulatedLinear : public TestStepTensors {
public:
  EmulatedLinear(LinearKernels kernels, std::string op) : kernels_(std::move(kernels)),
                                                          op_(std::move(op)) {
    // The step's attribute goes with the kernels generated for it.
    if (kernels_.constants[0].count("GATED"))
      attrs_["gated"] = ops::Attr::ofInt(1);
    for (const char *name : {"LOGIT_SCALE_BITS", "LOGIT_CAP_BITS"})
      if (kernels_.constants[0].count(name)) {
        const uint32_t bits = static_cast<uint32_t>(kernels_.constants[0][name]);
        float value = 0;
        std::memcpy(&value, &bits, sizeof value);
        attrs_[name == std::string("LOGIT_CAP_BITS") ? "logit_cap" : "logit_scale"] =
            ops::Attr::ofFloat(value);
      }
    if (kernels_.constants[0].count("NORM")) {
      attrs_["norm"] = ops::Attr::ofString(kernels_.constants[0]["NORM"] == 1 ? "rms" : "layer");
      attrs_["norm_epsilon"] = ops::Attr::ofFloat(kNormEpsilon);
    }
  }
  static constexpr float kNormEpsilon = 1e-5f;

  int gemvLaunches = 0, gemms = 0;
  // What gemmTakesEpilogue answers (cuBLASLt's heuristic), and the GEMMs run with one.
  bool cublasEpilogues = false;
  int epilogueGemms = 0;
  unsigned gemvGrid = 0;  // the last gemv launch's blocks (before the emulation's cap)
  uint32_t gemvSharedBytes = 0;
  int launchesPerSlot[8] = {};
  size_t partBytes = size_t(64) << 20;  // scratchPartBytes()

  std::string_view op() const override { return op_; }
  const ops::AttrMap &attrs() const override { return attrs_; }
  Status launch(size_t slot, Dim3 grid, Dim3 block, uint32_t sharedBytes,
                void **args) override {
    if (slot >= kernels_.count)
      return error("no kernel in slot ", slot);
    if (block.x % 32 != 0 || block.x == 0 || block.y != 1 || block.z != 1 || grid.x == 0)
      return error("unexpected launch shape");
    if (slot != 0 && sharedBytes != 0)
      return error("shared memory for a kernel that declares none");
    // More grid than needed is fine on a GPU but slow here: the kernels stride over their
    // work, so the emulation may run fewer blocks than asked (still at least two, so that
    // the striding is exercised).
    unsigned blocks = std::min(grid.x, 3u);
    cuda_emulation::launch({blocks, 1, 1}, {block.x, 1, 1},
                                [&] { kernels_.slots[slot](args); });
    gemvLaunches += slot == 0;
    if (slot == 0) {
      gemvGrid = grid.x;
      gemvSharedBytes = sharedBytes;
    }
    ++launchesPerSlot[slot];
    return Status::ok();
  }
  size_t kernelCount() const override { return kernels_.count; }
  int64_t kernelConstant(size_t slot, std::string_view name, int64_t fallback) const override {
    if (slot >= kernels_.count)
      return fallback;
    auto found = kernels_.constants[slot].find(std::string(name));
    return found == kernels_.constants[slot].end() ? fallback : found->second;
  }
  size_t scratchPartBytes() const override { return partBytes; }
  // cuBLASLt's contract (GpuOps.h) on the host: C = act(A·Bᵀ (+ addend or C) + bias) in
  // the operands' stored types, C's rows ldc elements apart.
  Status gemm(const GemmDesc &desc) override {
    ++gemms;
    const int64_t ldc = desc.ldc ? desc.ldc : desc.n;
    if (ldc < desc.n)
      return error("gemm ldc below n");
    if (desc.hasEpilogue() && !cublasEpilogues)
      return error("a gemm with the epilogue gemmTakesEpilogue declined");
    epilogueGemms += desc.hasEpilogue();
    std::vector<float> a(desc.m * desc.k), b(desc.n * desc.k), bias(desc.n, 0.0f);
    if (!convertFloats(desc.aType, reinterpret_cast<const void *>(desc.a), DType::F32, a.data(),
                       desc.m * desc.k) ||
        !convertFloats(desc.bType, reinterpret_cast<const void *>(desc.b), DType::F32, b.data(),
                       desc.n * desc.k) ||
        (desc.bias && !convertFloats(desc.biasType, reinterpret_cast<const void *>(desc.bias),
                                     DType::F32, bias.data(), desc.n)))
      return error("gemm types");
    float *c = reinterpret_cast<float *>(desc.c);
    for (int64_t i = 0; i < desc.m; ++i)
      for (int64_t j = 0; j < desc.n; ++j) {
        const float *addend =
            desc.addend ? reinterpret_cast<const float *>(desc.addend) : c;
        double sum = desc.accumulate ? addend[i * ldc + j] : 0.0;
        for (int64_t p = 0; p < desc.k; ++p)
          sum += double(a[i * desc.k + p]) * b[j * desc.k + p];
        sum += bias[j];
        if (desc.activation == GemmActivation::Relu)
          sum = std::max(sum, 0.0);
        else if (desc.activation == GemmActivation::GeluTanh)
          sum = 0.5 * sum * (1.0 + std::tanh(0.79788456080286536 * (sum + 0.044715 * sum * sum * sum)));
        c[i * ldc + j] = static_cast<float>(sum);
      }
    return Status::ok();
  }
  bool gemmTakesEpilogue(const GemmDesc &desc) override {
    return cublasEpilogues && desc.hasEpilogue();
  }
  Status scratch(size_t bytes, DevicePtr &out) override {
    scratch_.emplace_back((bytes + 15) / 16);
    out = address(scratch_.back().data());
    return Status::ok();
  }
  // Zero before each launch, and each launch must leave them at zero (checked by the test).
  std::vector<int32_t> counters;
  Status arrivalCounters(size_t count, DevicePtr &out) override {
    if (counters.size() < count)
      counters.assign(count, 0);
    out = address(counters.data());
    return Status::ok();
  }
  int rank() const override { return 0; }
  int multiprocessorCount() const override { return 2; }
  int computeCapability() const override { return 90; }

  ops::AttrMap attrs_;

private:
  LinearKernels kernels_;
  std::string op_;
  struct alignas(16) Chunk {
    float values[4];
  };
  std::vector<std::vector<Chunk>> scratch_;
};

double activate(int64_t kind, double x) {
  switch (kind) {
  case 0: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  case 1: return 0.5 * x * (1.0 + std::tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
  case 2: return x / (1.0 + std::exp(-1.702 * x));
  case 3: return x / (1.0 + std::exp(-x));
  case 4: return x > 0 ? x : 0.0;
  default: return x;
  }
}

// What checkLinear ran, for a test that compares two runs of the same family: the outputs
// (widened to f32) and, per output, Σ|x·w| as the tolerance scales it (gated: the bound's
// product form).
struct LinearRun {
  std::vector<float> y;
  std::vector<double> magnitude;
};

// The tile GEMM (gemm_dequant) is the last slot of int8 and int4 families that have it
// (LinearEmulationFamily.inc's EMU_TILE_GEMM), as LinearRules.cpp places it.
bool hasTileGemm(const LinearKernels &kernels) {
  return kernels.count > 2 && kernels.constants[kernels.count - 1].count("TILE_N") != 0;
}

// LinearOps.cpp's threshold as the environment sets it (DSRT_CUDA_TILE_GEMM_ROWS).
int64_t tileGemmRowsFromEnvironment() {
  const char *value = std::getenv("DSRT_CUDA_TILE_GEMM_ROWS");
  return value && *value ? std::atoll(value) : 512;
}

// Runs tfm.linear over `rows` random rows with the family's kernels and compares with the
// reference (a gated family's weight has n rows, [gate; up], and its output n / 2 features,
// act(gate + bias) * (up + bias)); `tolerance` is relative to Σ|x·w| of each element. int8 families (WT 8) get
// random q in [-127, 127] and positive scales [n, k / GS] (GS 0: [n, 1]), and the reference
// multiplies x with w^ = q · scale (the stored scale) in double. `kRun` (0: K) is the
// in-feature count of a rank of an uneven tensor-parallel split, which runs the plan's
// kernels specialised for rank 0's K.
// `partBytes` (0: the session's default) is the scratch a dequantized part of an int8
// weight may take, so that a small test runs its GEMM in several parts.
// `gemvGrid`, when given, receives the gemv launch's block count.
// `cublasEpilogues`: the context's cuBLASLt takes the epilogues it is offered (a bias, ReLU
// or tanh-GELU, not beside both an activation and a residual; not gated, not logits), and
// the epilogue kernel must then not run.
// `run`, when given, receives the outputs and their magnitudes.
void checkLinear(LinearKernels kernels, int64_t rows, int64_t n, double tolerance,
                 int64_t kRun = 0, size_t partBytes = 0, unsigned *gemvGrid = nullptr,
                 bool cublasEpilogues = false, LinearRun *run = nullptr) {
  const int64_t k = kRun > 0 ? kRun : kernels.constants[0]["K"];
  const DType weightType = static_cast<DType>(kernels.constants[0]["WT"]);
  const int64_t act = kernels.constants[0]["ACT"];
  const bool hasBias = kernels.constants[0]["HAS_BIAS"] != 0;
  const bool hasResidual = kernels.constants[0]["HAS_RESIDUAL"] != 0;
  const DType biasType = static_cast<DType>(kernels.constants[0]["BIAS_DT"]);
  const bool gated = kernels.constants[0].count("GATED") != 0;
  const int64_t width = gated ? n / 2 : n;
  // int8 and int4 (the stored u8, two codes a byte) share the quantized slots and checks.
  const bool int4 = weightType == DType::U8;
  const bool int8 = weightType == DType::I8 || int4;
  const DType scaleType = int8 ? static_cast<DType>(kernels.constants[0]["SDT"]) : DType::F32;
  const int64_t groupSize = int8 && kernels.constants[0]["GS"] > 0 ? kernels.constants[0]["GS"]
                                                                   : k;
  const int64_t groups = k / groupSize;
  // An LM head's logit epilogue: z * scale, then cap * tanh(. / cap) (cap 0: none).
  auto bitsFloat = [&](const char *name, uint32_t none) {
    const auto found = kernels.constants[0].find(name);
    const uint32_t bits = found == kernels.constants[0].end() ? none
                                                              : static_cast<uint32_t>(found->second);
    float value = 0;
    std::memcpy(&value, &bits, sizeof value);
    return double(value);
  };
  const double logitScale = bitsFloat("LOGIT_SCALE_BITS", 0x3f800000u),
               logitCap = bitsFloat("LOGIT_CAP_BITS", 0u);

  std::mt19937 random(static_cast<unsigned>(rows * 1000 + n + k));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto randoms = [&](int64_t count) {
    std::vector<float> values(count);
    for (float &value : values)
      value = uniform(random);
    return values;
  };
  std::vector<float> x = randoms(rows * k), w = randoms(n * k), bias = randoms(n),
                     residual = randoms(rows * n), y(rows * width, -7.0f);
  // The plan's half activations: the input as stored (the reference reads it back), and a
  // gated result's dtype (widened below).
  auto constantType = [&](const char *name) {
    const auto found = kernels.constants[0].find(name);
    return found == kernels.constants[0].end() ? DType::F32 : static_cast<DType>(found->second);
  };
  const DType inputType = constantType("XT"), outputType = constantType("OUT_DT");
  std::vector<uint8_t> xStored(x.size() * dtypeSize(inputType)),
      yStored(y.size() * dtypeSize(outputType));
  ASSERT_TRUE(convertFloats(DType::F32, x.data(), inputType, xStored.data(), rows * k));
  ASSERT_TRUE(convertFloats(inputType, xStored.data(), DType::F32, x.data(), rows * k));
  ASSERT_TRUE(convertFloats(DType::F32, y.data(), outputType, yStored.data(), rows * width));
  // Stored in the kernels' dtypes; the reference reads the stored values back.
  std::vector<uint8_t> wStored, biasStored(bias.size() * dtypeSize(biasType)), scalesStored;
  if (int8) {
    std::uniform_int_distribution<int> quantized(-127, 127);
    std::uniform_real_distribution<float> scale(1e-3f, 2e-2f);
    std::vector<float> scales(n * groups);
    for (float &value : scales)
      value = scale(random);
    scalesStored.resize(scales.size() * dtypeSize(scaleType));
    ASSERT_TRUE(convertFloats(DType::F32, scales.data(), scaleType, scalesStored.data(),
                              n * groups));
    ASSERT_TRUE(convertFloats(scaleType, scalesStored.data(), DType::F32, scales.data(),
                              n * groups));
    // int4: codes in [0, 15] packed as MatMulNBits packs them (docs/int4.md), the even
    // input in the low nibble; the value is code - 8.
    std::uniform_int_distribution<int> codes(0, 15);
    wStored.assign(int4 ? n * k / 2 : n * k, 0);
    for (int64_t o = 0; o < n; ++o)
      for (int64_t p = 0; p < k; ++p) {
        const int code = int4 ? codes(random) : 0;
        const int q = int4 ? code - 8 : quantized(random);
        if (int4)
          wStored[(o * k + p) / 2] |= static_cast<uint8_t>(code << (p % 2 ? 4 : 0));
        else
          wStored[o * k + p] = static_cast<uint8_t>(static_cast<int8_t>(q));
        w[o * k + p] = static_cast<float>(double(q) * scales[o * groups + p / groupSize]);
      }
  } else {
    wStored.resize(w.size() * dtypeSize(weightType));
    ASSERT_TRUE(convertFloats(DType::F32, w.data(), weightType, wStored.data(), n * k));
    ASSERT_TRUE(convertFloats(weightType, wStored.data(), DType::F32, w.data(), n * k));
  }
  ASSERT_TRUE(convertFloats(DType::F32, bias.data(), biasType, biasStored.data(), n));
  ASSERT_TRUE(convertFloats(biasType, biasStored.data(), DType::F32, bias.data(), n));

  // A norm prologue: scale in [0.5, 1.5] and bias as stored; the reference multiplies the
  // rows of x normalised in double.
  const int64_t norm = kernels.constants[0].count("NORM") ? kernels.constants[0]["NORM"] : 0;
  const DType normScaleType =
      norm ? static_cast<DType>(kernels.constants[0]["NORM_SCALE_DT"]) : DType::F32;
  const int64_t normBiasCode = norm ? kernels.constants[0]["NORM_BIAS_DT"] : 0;
  const DType normBiasType = normBiasCode ? static_cast<DType>(normBiasCode) : DType::F32;
  std::vector<float> normScale = randoms(k), normBias = randoms(k);
  for (float &value : normScale)
    value = 1.0f + 0.5f * value;
  std::vector<uint8_t> normScaleStored(k * dtypeSize(normScaleType)),
      normBiasStored(k * dtypeSize(normBiasType));
  ASSERT_TRUE(convertFloats(DType::F32, normScale.data(), normScaleType, normScaleStored.data(), k));
  ASSERT_TRUE(convertFloats(normScaleType, normScaleStored.data(), DType::F32, normScale.data(), k));
  ASSERT_TRUE(convertFloats(DType::F32, normBias.data(), normBiasType, normBiasStored.data(), k));
  ASSERT_TRUE(convertFloats(normBiasType, normBiasStored.data(), DType::F32, normBias.data(), k));
  std::vector<double> xRef(x.begin(), x.end());
  if (norm)
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, variance = 0;
      if (norm == 2) {
        for (int64_t p = 0; p < k; ++p)
          mean += x[r * k + p];
        mean /= k;
      }
      for (int64_t p = 0; p < k; ++p)
        variance += (x[r * k + p] - mean) * (x[r * k + p] - mean);
      const double inverse = 1.0 / std::sqrt(variance / k + EmulatedLinear::kNormEpsilon);
      for (int64_t p = 0; p < k; ++p)
        xRef[r * k + p] = (x[r * k + p] - mean) * inverse * normScale[p] +
                          (normBiasCode ? normBias[p] : 0.0);
    }

  EmulatedLinear step(kernels, "tfm.linear");
  step.cublasEpilogues = cublasEpilogues;
  if (partBytes)
    step.partBytes = partBytes;
  step.inputs.push_back(DeviceTensor{inputType, {rows, k}, address(xStored.data())});
  step.inputs.push_back(
      DeviceTensor{weightType, {n, int4 ? k / 2 : k}, address(wStored.data())});
  if (hasBias)
    step.inputs.push_back(DeviceTensor{biasType, {n}, address(biasStored.data())});
  else
    step.inputs.push_back(std::nullopt);
  if (int8)
    step.inputs.push_back(DeviceTensor{scaleType, {n, groups}, address(scalesStored.data())});
  else
    step.inputs.push_back(std::nullopt);
  if (hasResidual)
    step.inputs.push_back(DeviceTensor{DType::F32, {rows, n}, address(residual.data())});
  if (norm) {
    step.inputs.resize(5);
    step.inputs.push_back(DeviceTensor{normScaleType, {k}, address(normScaleStored.data())});
    if (normBiasCode)
      step.inputs.push_back(DeviceTensor{normBiasType, {k}, address(normBiasStored.data())});
  }
  step.outputs.push_back(DeviceTensor{outputType, {rows, width}, address(yStored.data())});

  std::vector<GpuOpInfo> ops;
  addLinearGpuOps(ops);
  ASSERT_FALSE(ops.empty());
  Status status = ops[0].run(step);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_TRUE(convertFloats(outputType, yStored.data(), DType::F32, y.data(), rows * width));
  // The tile GEMM, where the family has it, takes 9 to DSRT_CUDA_TILE_GEMM_ROWS rows instead
  // of dequantize + GEMM; the operand is prepared for it as for the GEMM.
  const bool tileKernel = hasTileGemm(kernels);
  const size_t tileSlots = tileKernel ? 1 : 0;
  const bool tilePath = tileKernel && rows > 8 && rows <= tileGemmRowsFromEnvironment();
  if (tileKernel)
    EXPECT_EQ(step.launchesPerSlot[kernels.count - 1], tilePath ? 1 : 0) << "gemm_dequant launches";
  for (int32_t counter : step.counters)
    EXPECT_EQ(counter, 0) << "an arrival counter the launch left set";
  // A conversion launches only where the GEMM's dtype is not the input's.
  // (Where the input needs none, the slot after the dequantization is the tile GEMM's.)
  const DType gemmType = int8 ? scaleType : weightType;
  const size_t conversionSlot = int8 ? 3 : 2;
  if (!norm && rows > 8 && !(tileKernel && conversionSlot == kernels.count - 1))
    EXPECT_EQ(step.launchesPerSlot[conversionSlot], gemmType != inputType ? 1 : 0)
        << "convert_activations launches";
  // A half result is the kernels' f32 value rounded once: half a step of its dtype.
  const double outputRounding = outputType == DType::F16   ? 0x1p-11
                                : outputType == DType::BF16 ? 0x1p-8
                                                            : 0.0;
  if (gemvGrid)
    *gemvGrid = step.gemvGrid;
  // The weight's rows in parts of whole 64-row blocks when a part is smaller than the weight.
  int64_t parts = 1;
  if (int8 && partBytes) {
    int64_t partRows = static_cast<int64_t>(partBytes) / (k * int64_t(dtypeSize(scaleType)));
    partRows = std::max<int64_t>(1, partRows);
    if (partRows < n && partRows >= 64)
      partRows -= partRows % 64;
    parts = (n + partRows - 1) / partRows;
  }
  if (tilePath)
    parts = 0;  // no GEMM, no dequantization
  EXPECT_EQ(step.gemvLaunches, rows <= 8 ? 1 : 0);
  EXPECT_EQ(step.gemms, rows <= 8 ? 0 : parts);
  if (cublasEpilogues && rows > 8 && !tilePath) {
    const bool logits = logitScale != 1.0 || logitCap != 0.0;
    const bool inCublas = !gated && !logits && (hasBias || act != -1) &&
                          (act == -1 || act == 1 || act == 4) && !(act != -1 && hasResidual);
    EXPECT_EQ(step.epilogueGemms, inCublas ? parts : 0) << "GEMMs with cuBLASLt's epilogue";
    if (inCublas)
      EXPECT_EQ(step.launchesPerSlot[1], 0) << "epilogue kernel launches";
  }
  if (int8)
    EXPECT_EQ(step.launchesPerSlot[2], rows <= 8 ? 0 : parts) << "dequantize_int8 / dequantize_int4 launches";
  if (norm) {
    // gemv normalises the rows it stages (48 KiB with the reduction's 128 bytes); otherwise
    // the norm kernel runs first, in f32, or on the GEMM path its second kernel (OUT_DT,
    // the last slot, where the kernels have it), which writes the GEMM's f16/bf16 operand
    // so that the activations are not converted.
    const bool staged = rows <= 8 && rows * k * 4 + 128 <= 48 * 1024;
    const size_t lastNorm = kernels.count - 1 - tileSlots;
    const bool operandKernel = kernels.constants[lastNorm].count("OUT_DT") != 0;
    const size_t normSlot = lastNorm - (operandKernel ? 1 : 0);
    const bool writesOperand = operandKernel && rows > 8;
    EXPECT_EQ(step.launchesPerSlot[normSlot], staged || writesOperand ? 0 : 1)
        << "norm kernel launches";
    if (operandKernel)
      EXPECT_EQ(step.launchesPerSlot[lastNorm], writesOperand ? 1 : 0)
          << "operand norm kernel launches";
    const size_t convertSlot = int8 ? 3 : 2;
    if (writesOperand)
      EXPECT_EQ(step.launchesPerSlot[convertSlot], 0) << "conversions after the operand norm";
  }

  // Row o's product with row r of x, bias included, and Σ|x·w|.
  auto product = [&](int64_t r, int64_t o, double &magnitude) {
    double sum = hasBias ? bias[o] : 0.0;
    for (int64_t p = 0; p < k; ++p) {
      sum += xRef[r * k + p] * w[o * k + p];
      magnitude += std::fabs(xRef[r * k + p] * w[o * k + p]);
    }
    return sum;
  };
  // int4 (f32 rows in and out, no logit epilogue): the CPU's reference tfm.linear
  // (runtime/src/ops/TransformerLinear.cpp, f32 sums over its own dequantization) on the
  // same stored tensors as well, an implementation the kernels share nothing with. Each is
  // within the bound below of the exact value, so they are within twice it of each other.
  std::vector<float> cpu;
  const bool logits = logitScale != 1.0 || logitCap != 0.0;
  if (int4 && inputType == DType::F32 && outputType == DType::F32 && !logits) {
    static const char *const kActivations[] = {"gelu_erf", "gelu_tanh", "gelu_quick", "silu",
                                               "relu",     "relu2"};
    ops::AttrMap attrs = step.attrs_;
    attrs["activation"] = ops::Attr::ofString(act >= 0 && act < 6 ? kActivations[act] : "none");
    cpu.assign(y.size(), 0.0f);
    TensorRef xCpu{DType::F32, {rows, k}, x.data()},
        wCpu{DType::U8, {n, k / 2}, wStored.data()},
        biasCpu{biasType, {n}, biasStored.data()},
        scalesCpu{scaleType, {n, groups}, scalesStored.data()},
        residualCpu{DType::F32, {rows, n}, residual.data()},
        normScaleCpu{normScaleType, {k}, normScaleStored.data()},
        normBiasCpu{normBiasType, {k}, normBiasStored.data()},
        yCpu{DType::F32, {rows, width}, cpu.data()};
    ops::Inputs inputs = {&xCpu, &wCpu, hasBias ? &biasCpu : nullptr, &scalesCpu,
                          hasResidual ? &residualCpu : nullptr};
    if (norm) {
      inputs.push_back(&normScaleCpu);
      inputs.push_back(normBiasCode ? &normBiasCpu : nullptr);
    }
    Status computed = ops::compute("tfm.linear", attrs, inputs, {&yCpu});
    ASSERT_TRUE(computed.isOk()) << computed.message();
  }
  if (run) {
    run->y = y;
    run->magnitude.assign(y.size(), 0.0);
  }
  int bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < width; ++o) {
      double magnitude = 0;
      double expected = activate(act, product(r, o, magnitude));
      if (gated) {
        // |act(g)·u - act(g')·u'| grows with both factors: the bound scales by the larger.
        double gateMagnitude = magnitude, up = product(r, width + o, magnitude);
        magnitude = gateMagnitude * (std::fabs(up) + 1) + (magnitude - gateMagnitude) *
                                                              (std::fabs(expected) + 1);
        expected *= up;
      }
      if (hasResidual)
        expected += residual[r * n + o];
      expected *= logitScale;
      if (logitCap != 0)
        expected = logitCap * std::tanh(expected / logitCap);
      if (run)
        run->magnitude[r * width + o] = magnitude;
      double got = y[r * width + o];
      if (!(std::fabs(got - expected) <=
            1e-5 + tolerance * (magnitude + 1) + outputRounding * std::fabs(expected)) &&
          bad++ < 5)
        ADD_FAILURE() << "rows " << rows << " y[" << r << ", " << o << "] = " << got
                      << ", expected " << expected;
      if (!cpu.empty() && !(std::fabs(got - cpu[r * width + o]) <=
                            2 * (1e-5 + tolerance * (magnitude + 1))) &&
          bad++ < 5)
        ADD_FAILURE() << "rows " << rows << " y[" << r << ", " << o << "] = " << got
                      << ", the CPU's reference linear " << cpu[r * width + o];
    }
  if (!cpu.empty())
    EXPECT_EQ(bad, 0) << "against the double reference and the CPU's";
}

} // namespace
} // namespace dsrt::test
