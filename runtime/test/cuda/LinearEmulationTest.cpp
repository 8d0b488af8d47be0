// tfm.linear's CUDA launcher (runtime/src/cuda/ops/LinearOps.cpp) and its kernel templates
// (codegen/kernels/gemv.cuh, linear_epilogue.cuh, convert_activations.cuh,
// dequantize_int8.cuh) run on the host through the attention test's emulation of CUDA's
// threads, barriers and warp shuffles (CudaEmulation.h), against a double-precision
// reference computed here from the same stored (f32 or bf16, or int8 with scales) weights.
// cuBLASLt is replaced by a host GEMM over the operands the launcher hands it, so the prefill
// path checks the dequantization, conversion and epilogue kernels and the launcher's wiring,
// not cuBLASLt. f16 weights are left out: gemv unpacks them with PTX (inline asm). f16
// scales (and f16 dequantized weights and activations on the int8 GEMM path) are in: the
// kernels read and write them through dsc_load_float / dsc_store_float, whose f16
// instances are replaced here by the runtime's conversions (both exact f16 -> f32 and
// round-to-nearest-even f32 -> f16, as PTX's cvt).
// Tolerance: |gpu − ref| <= 1e-5 + 1e-5·Σ|x·w| per element (f32 sums in another order;
// scales are read exactly, so int8's gemv has the same bound). On the GEMM path the
// operands are rounded to the GEMM dtype: bf16-converted activations (and bf16 dequantized
// int8 weights) 1e-2 relative, 2 x bf16's unit roundoff 2^-8 ≈ 7.8e-3; f16 2e-3, 2 x 2^-11
// ≈ 1e-3; f32 scales 1e-5 (w^ = q·s rounded once in f32).
#include "CudaEmulation.h"

#include "dsc_common.cuh"

#include "EmulatedHalf.h"
#include "core/Tensor.h"

#include "cuda/GpuOps.h"

#include <gtest/gtest.h>

#include <cmath>
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
  std::function<void(void **)> slots[6];
  std::map<std::string, int64_t> constants[6];
  size_t count = 2;
  // The dynamic shared memory gemv's blocks share (blocks run one after another).
  float *sharedX = nullptr;
};

} // namespace

// The families: each template specialisation the tests run.
#include "LinearEmulationFamilies.inc"

namespace dsrt::test {
namespace {

using namespace dsrt::cuda;

DevicePtr address(const void *pointer) { return reinterpret_cast<DevicePtr>(pointer); }

class EmulatedLinear : public StepContext {
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

  std::vector<std::optional<DeviceTensor>> inputs;
  std::vector<DeviceTensor> outputs;
  int gemvLaunches = 0, gemms = 0;
  // What gemmTakesEpilogue answers (cuBLASLt's heuristic), and the GEMMs run with one.
  bool cublasEpilogues = false;
  int epilogueGemms = 0;
  unsigned gemvGrid = 0;  // the last gemv launch's blocks (before the emulation's cap)
  uint32_t gemvSharedBytes = 0;
  int launchesPerSlot[6] = {};
  size_t partBytes = size_t(64) << 20;  // scratchPartBytes()

  std::string_view op() const override { return op_; }
  const ops::AttrMap &attrs() const override { return attrs_; }
  size_t inputCount() const override { return inputs.size(); }
  const DeviceTensor *input(size_t index) const override {
    return index < inputs.size() && inputs[index] ? &*inputs[index] : nullptr;
  }
  const TensorRef *hostInput(size_t) const override { return nullptr; }
  size_t outputCount() const override { return outputs.size(); }
  const DeviceTensor &output(size_t index) const override { return outputs.at(index); }
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
  const DeviceKvLayer *kvLayer(int64_t) const override { return nullptr; }
  DevicePtr sequenceLengths() const override { return 0; }
  const int32_t *hostSequenceLengths() const override { return nullptr; }
  DeviceCollectives *collectives() override { return nullptr; }
  int rank() const override { return 0; }
  StreamHandle stream() const override { return nullptr; }
  int multiprocessorCount() const override { return 2; }
  int computeCapability() const override { return 90; }
  bool capturing() const override { return false; }

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
void checkLinear(LinearKernels kernels, int64_t rows, int64_t n, double tolerance,
                 int64_t kRun = 0, size_t partBytes = 0, unsigned *gemvGrid = nullptr,
                 bool cublasEpilogues = false) {
  const int64_t k = kRun > 0 ? kRun : kernels.constants[0]["K"];
  const DType weightType = static_cast<DType>(kernels.constants[0]["WT"]);
  const int64_t act = kernels.constants[0]["ACT"];
  const bool hasBias = kernels.constants[0]["HAS_BIAS"] != 0;
  const bool hasResidual = kernels.constants[0]["HAS_RESIDUAL"] != 0;
  const DType biasType = static_cast<DType>(kernels.constants[0]["BIAS_DT"]);
  const bool gated = kernels.constants[0].count("GATED") != 0;
  const int64_t width = gated ? n / 2 : n;
  const bool int8 = weightType == DType::I8;
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
    wStored.resize(n * k);
    for (int64_t o = 0; o < n; ++o)
      for (int64_t p = 0; p < k; ++p) {
        const int q = quantized(random);
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
  step.inputs.push_back(DeviceTensor{weightType, {n, k}, address(wStored.data())});
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
  // A conversion launches only where the GEMM's dtype is not the input's.
  const DType gemmType = int8 ? scaleType : weightType;
  if (!norm && rows > 8)
    EXPECT_EQ(step.launchesPerSlot[int8 ? 3 : 2], gemmType != inputType ? 1 : 0)
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
  EXPECT_EQ(step.gemvLaunches, rows <= 8 ? 1 : 0);
  EXPECT_EQ(step.gemms, rows <= 8 ? 0 : parts);
  if (cublasEpilogues && rows > 8) {
    const bool logits = logitScale != 1.0 || logitCap != 0.0;
    const bool inCublas = !gated && !logits && (hasBias || act != -1) &&
                          (act == -1 || act == 1 || act == 4) && !(act != -1 && hasResidual);
    EXPECT_EQ(step.epilogueGemms, inCublas ? parts : 0) << "GEMMs with cuBLASLt's epilogue";
    if (inCublas)
      EXPECT_EQ(step.launchesPerSlot[1], 0) << "epilogue kernel launches";
  }
  if (int8)
    EXPECT_EQ(step.launchesPerSlot[2], rows <= 8 ? 0 : parts) << "dequantize_int8 launches";
  if (norm) {
    // gemv normalises the rows it stages (48 KiB with the reduction's 128 bytes); otherwise
    // the norm kernel runs first, in f32, or on the GEMM path its second kernel (OUT_DT,
    // the last slot, where the kernels have it), which writes the GEMM's f16/bf16 operand
    // so that the activations are not converted.
    const bool staged = rows <= 8 && rows * k * 4 + 128 <= 48 * 1024;
    const bool operandKernel = kernels.constants[kernels.count - 1].count("OUT_DT") != 0;
    const size_t normSlot = kernels.count - (operandKernel ? 2 : 1);
    const bool writesOperand = operandKernel && rows > 8;
    EXPECT_EQ(step.launchesPerSlot[normSlot], staged || writesOperand ? 0 : 1)
        << "norm kernel launches";
    if (operandKernel)
      EXPECT_EQ(step.launchesPerSlot[kernels.count - 1], writesOperand ? 1 : 0)
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
      double got = y[r * width + o];
      if (!(std::fabs(got - expected) <=
            1e-5 + tolerance * (magnitude + 1) + outputRounding * std::fabs(expected)) &&
          bad++ < 5)
        ADD_FAILURE() << "rows " << rows << " y[" << r << ", " << o << "] = " << got
                      << ", expected " << expected;
    }
}

TEST(LinearEmulationTest, F32GemvWithGeluBiasAndResidual) {
  for (int64_t rows : {1, 3, 8})
    checkLinear(f32_gelu::kernels(), rows, 40, 1e-5);
}

// The LM head's logit scale and cap, in gemv (up to 8 rows) and in the epilogue kernel
// after the GEMM (more). The cap of 2 bends the larger logits (|z · 0.5| up to ~5 here).
TEST(LinearEmulationTest, LmHeadLogitEpilogueInGemvAndAfterTheGemm) {
  for (int64_t rows : {1, 5, 20})
    checkLinear(f32_logit_cap::kernels(), rows, 48, 1e-5);
  checkLinear(bf16_logit_scale::kernels(), 2, 40, 1e-5);
  // The GEMM's activations are rounded to bf16: 2^-8 relative each (as above).
  checkLinear(bf16_logit_scale::kernels(), 12, 40, 1e-2);
}

// The plan's half activations (dsc-activation-dtype): an f16 input staged and widened (1
// and 7 rows), read as halves where it is not (8 rows of 1600), and taken by the GEMM as
// its operand (12 rows: no conversion), into f16 weights and into int8 weights with f16
// scales; a bf16 input converted for f32 weights; a gated
// linear's bf16 result from gemv and from the epilogue. The GEMM path's tolerance is the
// bf16 operand rounding's of Bf16GemmPathConvertsTheActivations where the GEMM multiplies
// in bf16; otherwise as f32's (the input is exact in its own dtype).
TEST(LinearEmulationTest, HalfActivationsInAndOut) {
  for (int64_t rows : {1, 7, 8, 12})
    checkLinear(f16_input::kernels(), rows, 6, 1e-5);
  for (int64_t rows : {1, 9})
    checkLinear(bf16_input_f32_weights::kernels(), rows, 10, 1e-5);
  // int8: the dequantized f16 weights round each weight too (2^-11 relative, as
  // ResidualAloneIsTheGemmsAddend's).
  for (int64_t rows : {1, 8})
    checkLinear(i8_f16_input::kernels(), rows, 6, 1e-5);
  checkLinear(i8_f16_input::kernels(), 12, 6, 2e-3);
  for (int64_t rows : {1, 3, 8})
    checkLinear(bf16_gated_output::kernels(), rows, 24, 1e-5);
  checkLinear(bf16_gated_output::kernels(), 11, 24, 1e-2);
}

TEST(LinearEmulationTest, F32GemmPathEpilogue) {
  checkLinear(f32_gelu::kernels(), 11, 24, 1e-5);
}

TEST(LinearEmulationTest, Bf16ScalarGemvWithSiluAndBf16Bias) {
  for (int64_t rows : {1, 5})
    checkLinear(bf16_silu::kernels(), rows, 24, 1e-5);
}

TEST(LinearEmulationTest, Bf16GemmPathConvertsTheActivations) {
  // The activations are rounded to bf16 for the GEMM: 2^-8 relative each.
  checkLinear(bf16_silu::kernels(), 9, 16, 1e-2);
  checkLinear(bf16_plain::kernels(), 12, 16, 1e-2);
}

TEST(LinearEmulationTest, Bf16VectorGemvPlain) {
  for (int64_t rows : {1, 2, 8})
    checkLinear(bf16_plain::kernels(), rows, 20, 1e-5);
}

// int8 gemv: scales are read exactly, so the bound is the f32 sums' order alone.
TEST(LinearEmulationTest, Int8GemvPerChannelF16Scales) {
  for (int64_t rows : {1, 2, 5, 8})
    checkLinear(i8_channel_f16::kernels(), rows, 24, 1e-5);
}

TEST(LinearEmulationTest, Int8GemvGroup16Bf16Scales) {
  for (int64_t rows : {1, 3, 8})
    checkLinear(i8_group16_bf16::kernels(), rows, 20, 1e-5);
}

TEST(LinearEmulationTest, Int8GemvGroup64F32Scales) {
  for (int64_t rows : {1, 4, 8})
    checkLinear(i8_group64_f32::kernels(), rows, 18, 1e-5);
}

TEST(LinearEmulationTest, Int8GemvGroup24TakesTheScalarPath) {
  for (int64_t rows : {1, 6, 8})
    checkLinear(i8_group24_f16::kernels(), rows, 18, 1e-5);
}

// Rows of 1104 in-features: each lane sums several 16-byte loads.
TEST(LinearEmulationTest, LongRowsLoopOverSeveralLoadsPerLane) {
  for (int64_t rows : {1, 8}) {
    checkLinear(i8_long_group48_f16::kernels(), rows, 6, 1e-5);
    checkLinear(i8_long_channel_bf16::kernels(), rows, 6, 1e-5);
    checkLinear(f32_long::kernels(), rows, 6, 1e-5);
  }
  checkLinear(i8_long_group48_f16::kernels(), 9, 6, 2e-3);  // the GEMM path
}

// A residual without a bias or an activation is the GEMM's addend (cuBLASLt's C, the output
// its D), with no epilogue: whole, and in 3 parts of 2 rows, each GEMM adding its columns of
// the residual (the addend offset as C's columns are).
TEST(LinearEmulationTest, ResidualAloneIsTheGemmsAddend) {
  checkLinear(i8_long_group48_f16::kernels(), 12, 6, 2e-3);
  checkLinear(i8_long_group48_f16::kernels(), 12, 6, 2e-3, 0, 2 * 1104 * 2);
}

// A rank of an uneven split: fewer in-features than the kernels' K, the same group size
// (per channel: one group of the rank's row; 40 is not a multiple of 16, the scalar path).
TEST(LinearEmulationTest, Int8GemvOnAnUnevenShard) {
  checkLinear(i8_group16_bf16::kernels(), 2, 12, 1e-5, 48);
  checkLinear(i8_channel_f16::kernels(), 3, 12, 1e-5, 40);
  checkLinear(i8_group16_bf16::kernels(), 10, 12, 1e-2, 48);  // the GEMM path
}

// Gated: each warp reads a gate row and its up row (gemv), or the epilogue gates the joined
// product (GEMM path); the output is half as wide as the weight.
TEST(LinearEmulationTest, GatedGemvMultipliesTheHalves) {
  for (int64_t rows : {1, 3, 8}) {
    checkLinear(f32_gated_silu::kernels(), rows, 40, 1e-5);
    checkLinear(bf16_gated_gelu::kernels(), rows, 24, 1e-5);
    checkLinear(i8_gated_group16::kernels(), rows, 20, 1e-5);
  }
}

TEST(LinearEmulationTest, GatedGemmPathGatesInTheEpilogue) {
  checkLinear(f32_gated_silu::kernels(), 11, 40, 1e-5);
  checkLinear(bf16_gated_gelu::kernels(), 9, 24, 1e-2);   // bf16 activations: 2 x 2^-8
  checkLinear(i8_gated_group16::kernels(), 10, 20, 1e-2);  // bf16 dequantized weight
}

// A gated step whose kernels are not gated (a plan written before the fusion, read by a
// runtime that knows it) is refused, not run with the wrong output width.
TEST(LinearEmulationTest, GatedStepNeedsGatedKernels) {
  const int64_t k = 1104;  // f32_long's K: no bias, no residual, as this step
  std::vector<float> x(k, 0.5f), w(8 * k, 0.25f), y(4, 0.0f);
  EmulatedLinear step(f32_long::kernels(), "tfm.linear");
  step.attrs_["gated"] = ops::Attr::ofInt(1);
  step.attrs_["activation"] = ops::Attr::ofString("silu");
  step.inputs.push_back(DeviceTensor{DType::F32, {1, k}, address(x.data())});
  step.inputs.push_back(DeviceTensor{DType::F32, {8, k}, address(w.data())});
  step.inputs.push_back(std::nullopt);
  step.outputs.push_back(DeviceTensor{DType::F32, {1, 4}, address(y.data())});
  std::vector<GpuOpInfo> ops;
  addLinearGpuOps(ops);
  Status status = ops[0].run(step);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("gated"), std::string::npos) << status.message();
  EXPECT_EQ(step.gemvLaunches, 0);
}

// Kernels generated for another logit cap than the step's (or for none) are refused before
// anything runs: the cap is compiled in.
TEST(LinearEmulationTest, LogitCapNeedsKernelsWithThatCap) {
  const int64_t k = 64;  // f32_logit_cap's K: no bias, no residual
  std::vector<float> x(k, 0.5f), w(8 * k, 0.25f), y(8, 0.0f);
  for (float cap : {0.0f, 30.0f}) {
    EmulatedLinear step(f32_logit_cap::kernels(), "tfm.lm_head");
    if (cap == 0.0f)
      step.attrs_.erase("logit_cap");
    else
      step.attrs_["logit_cap"] = ops::Attr::ofFloat(cap);
    step.inputs.push_back(DeviceTensor{DType::F32, {1, k}, address(x.data())});
    step.inputs.push_back(DeviceTensor{DType::F32, {8, k}, address(w.data())});
    step.outputs.push_back(DeviceTensor{DType::F32, {1, 8}, address(y.data())});
    std::vector<GpuOpInfo> ops;
    addLinearGpuOps(ops);
    Status status = ops[0].run(step);
    ASSERT_FALSE(status.isOk()) << cap;
    EXPECT_NE(status.message().find("another logit scale or cap"), std::string::npos)
        << status.message();
    EXPECT_EQ(step.gemvLaunches, 0);
  }
}

// The GEMM path: w^ = q·scale in the scales' dtype, the activations converted to it.
TEST(LinearEmulationTest, Int8GemmPathDequantizesInTheScalesDtype) {
  checkLinear(i8_group64_f32::kernels(), 11, 20, 1e-5);   // f32: w^ rounded once in f32
  checkLinear(i8_channel_f16::kernels(), 9, 16, 2e-3);    // f16: 2 x 2^-11
  checkLinear(i8_group24_f16::kernels(), 10, 12, 2e-3);
  checkLinear(i8_group16_bf16::kernels(), 12, 16, 1e-2);  // bf16: 2 x 2^-8
}

// A weight larger than a part of scratch is dequantized and multiplied in parts, each
// GEMM writing its columns of the output (ldc = n): 3 and 5 rows per part (no 64-row
// block fits), the last part shorter.
// cuBLASLt's epilogue, where its heuristic has one: a bias and tanh-GELU (bf16, after the
// layer-norm prologue's operand kernel), a bias beside a residual (f32: the residual is the
// GEMM's addend), a bias alone (a bf16 input into f32 weights), and an int8 weight in 4
// parts, each GEMM with its slice of the bias (ReLU). An activation beside a residual
// (f32_gelu) and SiLU stay in the epilogue kernel. Tolerances as the same families' GEMM
// paths above (bf16 operands 1e-2, f32 1e-5).
TEST(LinearEmulationTest, CublasEpilogueTakesTheBiasAndActivation) {
  checkLinear(bf16_layer_gelu::kernels(), 12, 24, 1e-2, 0, 0, nullptr, true);
  checkLinear(f32_split8::kernels(), 10, 24, 1e-5, 0, 0, nullptr, true);
  checkLinear(bf16_input_f32_weights::kernels(), 9, 10, 1e-5, 0, 0, nullptr, true);
  checkLinear(i8_relu_bias::kernels(), 12, 200, 1e-2, 0, 64 * 64 * 2, nullptr, true);
  checkLinear(f32_gelu::kernels(), 11, 24, 1e-5, 0, 0, nullptr, true);
  checkLinear(bf16_silu::kernels(), 12, 24, 1e-2, 0, 0, nullptr, true);
}

TEST(LinearEmulationTest, Int8GemmPathInParts) {
  checkLinear(i8_group64_f32::kernels(), 11, 20, 1e-5, 0, 3 * 128 * 4);  // 7 parts
  checkLinear(i8_channel_f16::kernels(), 9, 16, 2e-3, 0, 5 * 64 * 2);    // 4 parts
}

// A norm prologue against the rows normalised in double: gemv normalising its staged rows
// (1, 3 and 8 rows), and the norm kernel into scratch before the GEMM (11 rows) or before a
// gemv whose rows are too long to stage (8 rows of 1600); before an f16/bf16 GEMM the
// norm's second kernel writes the GEMM's operand (bf16 at 10 rows, int8's bf16 at 12).
TEST(LinearEmulationTest, NormPrologueInGemvAndApart) {
  for (int64_t rows : {1, 3, 8, 11})
    checkLinear(f32_rms::kernels(), rows, 40, 1e-5);
  for (int64_t rows : {1, 8})
    checkLinear(bf16_layer_gelu::kernels(), rows, 24, 1e-5);
  checkLinear(bf16_layer_gelu::kernels(), 10, 24, 1e-2);  // bf16-converted activations
  // A plan's from before the operand norm kernel: the f32 norm, then the conversion.
  checkLinear(bf16_layer_gelu_before::kernels(), 10, 24, 1e-2);
  for (int64_t rows : {2, 12})
    checkLinear(i8_gated_layer::kernels(), rows, 32, rows <= 8 ? 1e-5 : 1e-2);
  for (int64_t rows : {1, 8})
    checkLinear(f32_rms_long::kernels(), rows, 24, 1e-5);
}

// Split-K: each feature's SPLIT_K warps sum their parts of the row and meet in shared
// memory; the emulated device has 2 multiprocessors, so the grid is ceil(features *
// SPLIT_K / 8) blocks, at most 8. The sums are in another order: the same 1e-5 bound.
TEST(LinearEmulationTest, SplitKForNarrowLayers) {
  struct Case {
    LinearKernels (*kernels)();
    int64_t n;
    unsigned grid;
  };
  const Case cases[] = {
      {f32_split8::kernels, 8, 8},          // 8 warps per feature
      {f32_split8::kernels, 3, 3},          // fewer features than a block holds
      {i8_split2::kernels, 24, 6},          // 2
      {f32_gated_split4::kernels, 16, 4},   // gated: 8 features of [gate; up], 4 each
      {f32_rms_long::kernels, 24, 6},       // 2, after a norm prologue's staged rows
      {f32_gelu::kernels, 40, 5},           // SPLIT_K 1: one warp each
      {bf16_plain::kernels, 20, 3},         // a plan's gemv from before split-K
  };
  for (const Case &c : cases)
    for (int64_t rows : {1, 3, 8}) {
      unsigned grid = 0;
      checkLinear(c.kernels(), rows, c.n, 1e-5, 0, 0, &grid);
      EXPECT_EQ(grid, c.grid) << "n " << c.n << ", rows " << rows;
    }
}

} // namespace
} // namespace dsrt::test
