// The CPU backend's fast linear kernels (ops/fast) against the reference kernel of
// tfm.linear / tfm.lm_head, over every stored weight dtype, every kernel path (the stream
// kernel up to 4 rows, the blocks up to 32 rows of fp32 weights and 64 of narrow ones,
// oneDNN's sgemm on fp32 tiles above), the kernels of each instruction
// set (the widest the CPU has here; ctest runs the file again capped to AVX2 and to the
// portable kernels), ragged shapes (features and inputs that are not multiples of the vector width,
// int8 groups of 24, int4 groups of 8 and 26) and the fused epilogue. int4 weights are dtype
// U8 here, as LinearWeights takes them: codes two to a byte (docs/int4.md).
//
// Tolerance: both results are fp32 sums of the same products in different orders, so each
// is within n·u·Σ|x·w| of the exact sum (n = in + 2 terms with the bias, u = 2^-24) and they
// differ by at most twice that; the activation and the residual add a few ulps of the result.
// Where int8 weights meet the AVX-512 VNNI kernel (up to 64 rows, groups of whole 64-input
// chunks), and int4 weights theirs (up to 64 rows, groups of whole 32-input blocks: the
// default where the CPU has VNNI), x itself is quantized to int8 in blocks of 32, each input
// off by at most half its block's step max|x_block| / 127: that adds Σ_k |w_k| · step_k / 2
// (times GELU's slope, at most 1.13).
#include "OpTestUtil.h"

#include "ops/ThreadPool.h"
#include "ops/fast/FastKernels.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>

namespace dsrt::test {
namespace {

struct Case {
  DType dtype;
  int64_t groups;  // int8 and int4 only
  int64_t rows, in, out;
  DType scales = DType::F32;  // int8 and int4: the scales as stored (the compute dtype)
  bool int8Activations = false;  // int8: the plan asks for int8 activations (int8_activations)
};

std::string caseName(const Case &c) {
  const bool grouped = c.dtype == DType::I8 || c.dtype == DType::U8;
  return std::string(c.dtype == DType::U8 ? "int4" : dtypeName(c.dtype)) +
         (grouped ? "_g" + std::to_string(c.groups) : "") +
         "_r" + std::to_string(c.rows) + "_in" + std::to_string(c.in) + "_out" +
         std::to_string(c.out) +
         (grouped && c.scales != DType::F32 ? std::string("_scales_") + dtypeName(c.scales) : "") +
         (c.int8Activations ? "_int8_activations" : "");
}

// The weight in `dtype` and its value as fp32 (what both kernels multiply by).
struct Weight {
  OwnedTensor stored, scales;
  std::vector<float> value;  // [out, in], dequantized
};

// Rounds the f32 scales to the case's scale dtype, in place: the values the expected results
// multiply by, each exactly representable as stored.
void storeScales(const Case &c, OwnedTensor &scales) {
  if (c.scales == DType::F32)
    return;
  const int64_t n = c.out * c.groups;
  OwnedTensor narrow(c.scales, {c.out, c.groups});
  convertFloats(DType::F32, scales.storage.data(), c.scales, narrow.storage.data(), n);
  convertFloats(c.scales, narrow.storage.data(), DType::F32, scales.storage.data(), n);
}

// The scales as the kernels are given them, in the case's dtype (exactly: storeScales).
OwnedTensor scalesAsStored(const Case &c, const OwnedTensor &scales) {
  if (c.scales == DType::F32)
    return scales;
  OwnedTensor narrow(c.scales, {c.out, c.groups});
  convertFloats(DType::F32, scales.storage.data(), c.scales, narrow.storage.data(),
                c.out * c.groups);
  return narrow;
}

Weight randomWeight(const Case &c, std::mt19937 &rng) {
  Weight w;
  std::normal_distribution<float> normal;
  w.value.resize(static_cast<size_t>(c.out * c.in));
  w.stored = OwnedTensor(c.dtype, {c.out, c.dtype == DType::U8 ? c.in / 2 : c.in});
  if (c.dtype == DType::U8) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(1e-2f, 2e-1f);
    w.scales = OwnedTensor(DType::F32, {c.out, c.groups});
    auto *scales = reinterpret_cast<float *>(w.scales.storage.data());
    for (int64_t i = 0; i < c.out * c.groups; ++i)
      scales[i] = scale(rng);
    storeScales(c, w.scales);
    for (uint8_t &pair : w.stored.storage)
      pair = static_cast<uint8_t>(byte(rng));
    for (int64_t o = 0; o < c.out; ++o)
      for (int64_t k = 0; k < c.in; ++k) {
        const uint8_t pair = w.stored.storage[o * (c.in / 2) + k / 2];
        const int q = (k % 2 == 0 ? pair & 0xF : pair >> 4) - 8;
        w.value[o * c.in + k] = q * scales[o * c.groups + k / (c.in / c.groups)];
      }
    return w;
  }
  if (c.dtype == DType::I8) {
    std::uniform_int_distribution<int> level(-127, 127);
    std::uniform_real_distribution<float> scale(1e-3f, 2e-2f);
    w.scales = OwnedTensor(DType::F32, {c.out, c.groups});
    auto *scales = reinterpret_cast<float *>(w.scales.storage.data());
    for (int64_t i = 0; i < c.out * c.groups; ++i)
      scales[i] = scale(rng);
    storeScales(c, w.scales);
    auto *q = reinterpret_cast<int8_t *>(w.stored.storage.data());
    for (int64_t o = 0; o < c.out; ++o)
      for (int64_t k = 0; k < c.in; ++k) {
        q[o * c.in + k] = static_cast<int8_t>(level(rng));
        w.value[o * c.in + k] = q[o * c.in + k] * scales[o * c.groups + k / (c.in / c.groups)];
      }
    return w;
  }
  for (float &v : w.value)
    v = normal(rng);
  convertFloats(DType::F32, w.value.data(), c.dtype, w.stored.storage.data(), c.out * c.in);
  convertFloats(c.dtype, w.stored.storage.data(), DType::F32, w.value.data(), c.out * c.in);
  return w;
}

// Whether dotRows quantizes x for this case (DotVnni.cpp for int8, DotInt4Vnni.cpp for
// int4); through linear(), only up to 64 rows of int8 weights take dotRows (more go to
// sgemm), and of int4 up to 64 where int8 activations multiply them, else up to 4.
bool quantizesActivations(const Case &c) {
  if (c.dtype == DType::U8)
    return ops::fast::int4QuantizesActivations(c.in / c.groups, c.rows);
  ops::fast::LinearWeights shape;
  shape.dtype = c.dtype;
  shape.in = c.in;
  shape.groups = c.groups;
  shape.int8Activations = c.int8Activations;
  return ops::fast::int8QuantizesActivations(shape, c.rows);
}

// Σ_k |w_k| · step_k / 2, step_k = max |x| over k's block of 32 / 127.
double activationQuantization(const float *x, const float *w, int64_t in) {
  double sum = 0;
  for (int64_t b = 0; b < in; b += 32) {
    double maximum = 0;
    for (int64_t k = b; k < std::min<int64_t>(in, b + 32); ++k)
      maximum = std::max(maximum, double(std::fabs(x[k])));
    for (int64_t k = b; k < std::min<int64_t>(in, b + 32); ++k)
      sum += std::fabs(double(w[k])) * maximum / 127 / 2;
  }
  return sum * (1 + 1e-6);
}

// The kernels' view of a case's weight, with its scales as `scales` holds them (the case's
// scale dtype: scalesAsStored; or w.scales, f32, for a case whose scales are f32).
ops::fast::LinearWeights linearWeights(const Case &c, const Weight &w, const OwnedTensor &scales) {
  ops::fast::LinearWeights weights;
  weights.dtype = c.dtype;
  weights.data = w.stored.storage.data();
  weights.out = c.out;
  weights.in = c.in;
  if (c.dtype == DType::I8 || c.dtype == DType::U8) {
    weights.scales = scales.storage.data();
    weights.scaleType = scales.dtype;
    weights.groups = c.groups;
  }
  weights.int8Activations = c.int8Activations;
  return weights;
}

class FastLinearTest : public ::testing::TestWithParam<Case> {};

TEST_P(FastLinearTest, EqualsTheReferenceKernel) {
  const Case c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.rows * 131 + c.in * 7 + c.out));
  Weight w = randomWeight(c, rng);
  OwnedTensor x = randomF32({c.rows, c.in}, rng), bias = randomF32({c.out}, rng),
              residual = randomF32({c.rows, c.out}, rng);
  const auto *xv = reinterpret_cast<const float *>(x.storage.data());
  const auto *bv = reinterpret_cast<const float *>(bias.storage.data());
  ops::AttrMap attrs{{"activation", ops::Attr::ofString("gelu_tanh")}};
  if (c.int8Activations)
    attrs["int8_activations"] = ops::Attr::ofInt(1);
  const OwnedTensor storedScales = scalesAsStored(c, w.scales);
  const OwnedTensor *scales =
      c.dtype == DType::I8 || c.dtype == DType::U8 ? &storedScales : nullptr;
  for (const char *op : {"tfm.linear", "tfm.lm_head"}) {
    bool lmHead = std::string(op) == "tfm.lm_head";
    std::vector<const OwnedTensor *> inputs{&x, &w.stored, &bias, scales};
    if (!lmHead)
      inputs.push_back(&residual);
    ops::AttrMap headAttrs;
    if (c.int8Activations)
      headAttrs["int8_activations"] = ops::Attr::ofInt(1);
    const ops::AttrMap &opAttrs = lmHead ? headAttrs : attrs;
    std::vector<OwnedTensor> fast, reference;
    Status status = run(op, inputs, fast, opAttrs, 1, nullptr, nullptr, /*fastKernels=*/true);
    ASSERT_TRUE(status.isOk()) << status.message();
    status = run(op, inputs, reference, opAttrs, 1, nullptr, nullptr, /*fastKernels=*/false);
    ASSERT_TRUE(status.isOk()) << status.message();
    std::vector<float> got = values<float>(fast[0]), want = values<float>(reference[0]);
    ASSERT_EQ(got.size(), want.size());
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t o = 0; o < c.out; ++o) {
        double magnitude = std::fabs(bv[o]);
        for (int64_t k = 0; k < c.in; ++k)
          magnitude += std::fabs(double(xv[r * c.in + k]) * w.value[o * c.in + k]);
        double bound = 2.0 * (c.in + 2) * std::ldexp(1.0, -24) * magnitude +
                       8 * std::ldexp(1.0, -24) * std::fabs(want[r * c.out + o]) + 1e-30;
        if (quantizesActivations(c))
          bound += 1.13 * activationQuantization(xv + r * c.in, w.value.data() + o * c.in, c.in);
        // x rounded to bf16, and the weights where they are not bf16: each within 2^-8
        // relative (bf16's unit roundoff: 8 significant bits), so each product within
        // 2^-7 + 2^-16 (times GELU's slope, at most 1.13).
        if (ops::fast::bf16PromptGemm(c.dtype, c.rows))
          bound += 1.13 * (std::ldexp(1.0, -7) + std::ldexp(1.0, -16)) * magnitude;
        ASSERT_LE(std::fabs(got[r * c.out + o] - want[r * c.out + o]), bound)
            << op << " row " << r << " feature " << o << ": fast " << got[r * c.out + o]
            << ", reference " << want[r * c.out + o];
      }
  }
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 9, 33, 65})
      for (auto [in, out] : {std::pair<int64_t, int64_t>{64, 13}, {5, 130}, {770, 64}})
        all.push_back({dtype, 1, rows, in, out});
  // int8: per channel, groups of 24 (not whole vectors), groups of 32; and the VNNI
  // kernel's shapes: per channel over whole 64-input chunks, groups of 64 and of 128.
  for (int64_t rows : {1, 3, 8, 9, 33, 65})
    for (auto [in, groups] : {std::pair<int64_t, int64_t>{96, 1}, {96, 4}, {256, 8}, {13, 1},
                              {256, 1}, {256, 4}, {768, 6}})
      all.push_back({DType::I8, groups, rows, in, 37});
  // int4: groups of 32, 64 and 128 (the usual), seven groups of 32 and one of 96 (the VNNI
  // kernel's last step masked to 3 and 1 blocks), of 8 (half an AVX-512 vector) and of 26 (a
  // vector and a scalar tail).
  for (int64_t rows : {1, 2, 4, 5, 9, 33, 65})
    for (auto [in, groups] : {std::pair<int64_t, int64_t>{256, 8}, {256, 4}, {256, 2},
                              {224, 7}, {96, 1}, {40, 5}, {52, 2}})
      all.push_back({DType::U8, groups, rows, in, 37});
  // Scales stored in f16 and bf16 (a plan's compute dtype), which the kernels read as they
  // are: each kernel path of int8 and int4 (decode, prompt blocks, groups over several steps).
  for (DType scales : {DType::F16, DType::BF16})
    for (int64_t rows : {1, 5, 33})
      for (auto [dtype, in, groups] : {std::tuple<DType, int64_t, int64_t>{DType::I8, 256, 1},
                                       {DType::I8, 256, 4}, {DType::U8, 256, 8},
                                       {DType::U8, 224, 7}, {DType::U8, 256, 2}}) {
        Case c{dtype, groups, rows, in, 37};
        c.scales = scales;
        all.push_back(c);
      }
  // An int4 plan's int8 layers (its LM head: groups of 32) take int8 activations where its
  // int4 layers do: the VNNI kernel with two groups per 64-input chunk; 96 inputs (three
  // groups of 32, not whole chunks) stay on the f32-activation kernels.
  for (int64_t rows : {1, 2, 3, 33, 65})
    for (auto [in, groups] : {std::pair<int64_t, int64_t>{256, 8}, {64, 2}, {96, 3},
                              {256, 2}}) {
      Case c{DType::I8, groups, rows, in, 37};
      c.int8Activations = true;
      all.push_back(c);
    }
  // Long prompts (from 256 rows): converted weights go to the GEMM 512 features at a time,
  // each widened 64 at a time; 1100 features end on a partial tile and a partial part.
  for (auto [dtype, groups] : {std::pair<DType, int64_t>{DType::F32, 1}, {DType::F16, 1},
                               {DType::BF16, 1}, {DType::I8, 1}, {DType::I8, 2},
                               {DType::U8, 2}})
    all.push_back({dtype, groups, 300, 64, 1100});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Shapes, FastLinearTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return caseName(info.param);
                         });

// The portable kernel (what a CPU without AVX2 runs) on the same shapes.
TEST(FastLinearKernels, PortableEqualsTheChosenKernel) {
  std::mt19937 rng(7);
  for (const Case &c : cases()) {
    Weight w = randomWeight(c, rng);
    OwnedTensor x = randomF32({c.rows, c.in}, rng);
    const OwnedTensor storedScales = scalesAsStored(c, w.scales);
    const ops::fast::LinearWeights weights = linearWeights(c, w, storedScales);
    const auto *xv = reinterpret_cast<const float *>(x.storage.data());
    std::vector<float> portable(static_cast<size_t>(c.rows * c.out)), chosen(portable.size());
    ops::fast::dotRowsPortable(xv, c.rows, weights, 0, c.out, portable.data(), c.out);
    ops::fast::dotRows(xv, c.rows, weights, 0, c.out, chosen.data(), c.out);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t o = 0; o < c.out; ++o) {
        double magnitude = 0;
        for (int64_t k = 0; k < c.in; ++k)
          magnitude += std::fabs(double(xv[r * c.in + k]) * w.value[o * c.in + k]);
        double quantization = quantizesActivations(c)
                                  ? activationQuantization(xv + r * c.in,
                                                           w.value.data() + o * c.in, c.in)
                                  : 0.0;
        ASSERT_NEAR(portable[r * c.out + o], chosen[r * c.out + o],
                    2.0 * (c.in + 1) * std::ldexp(1.0, -24) * magnitude + quantization + 1e-30)
            << caseName(c) << " row " << r << " feature " << o;
      }
  }
}

// The serving engine's batch invariance (rowInvariant): each of 300 rows multiplied with the
// 299 others equals that row multiplied alone, for every stored weight dtype, within the f32
// summation-order bound (2·(in + 1)·2^-24·Σ|x·w|). A row's int8 quantization is its own
// whatever the rows beside it, so the quantized kernels add nothing. Without the option, 300
// rows of half and quantized weights take the bf16 GEMM where the CPU multiplies bf16 (x
// rounded to 8 bits: some 2^-8 relative), and int4 weights lose the int8 activations a row
// alone has, either of which is far outside this bound.
TEST(FastLinearKernels, RowInvariantRowsEqualTheirRowAlone) {
  std::mt19937 rng(11);
  for (auto [dtype, groups] : {std::pair<DType, int64_t>{DType::F32, 1}, {DType::F16, 1},
                               {DType::BF16, 1}, {DType::I8, 1}, {DType::I8, 4},
                               {DType::U8, 8}, {DType::U8, 4}}) {
    const Case c{dtype, groups, 300, 256, 70};
    Weight w = randomWeight(c, rng);
    OwnedTensor x = randomF32({c.rows, c.in}, rng);
    const ops::fast::LinearWeights weights = linearWeights(c, w, w.scales);
    auto *xv = reinterpret_cast<float *>(x.storage.data());
    std::vector<float> together(static_cast<size_t>(c.rows * c.out)), alone(c.out);
    // bf16 weights also against an x held in bf16 (a bf16 plan's activations), which the
    // bf16 GEMM may take as it is: x's values rounded to bf16 first, so that both calls see
    // the same numbers.
    std::vector<uint16_t> xBf16;
    if (c.dtype == DType::BF16) {
      xBf16.resize(static_cast<size_t>(c.rows * c.in));
      convertFloats(DType::F32, xv, DType::BF16, xBf16.data(), c.rows * c.in);
      convertFloats(DType::BF16, xBf16.data(), DType::F32, xv, c.rows * c.in);
    }
    ops::fast::linear(xBf16.empty() ? xv : nullptr, c.rows, weights, together.data(),
                      [](int64_t, int64_t) {}, xBf16.empty() ? nullptr : xBf16.data(),
                      /*rowInvariant=*/true);
    for (int64_t r = 0; r < c.rows; r += 23) {
      ops::fast::linear(xv + r * c.in, 1, weights, alone.data(), [](int64_t, int64_t) {},
                        nullptr, /*rowInvariant=*/true);
      for (int64_t o = 0; o < c.out; ++o) {
        double magnitude = 0;
        for (int64_t k = 0; k < c.in; ++k)
          magnitude += std::fabs(double(xv[r * c.in + k]) * w.value[o * c.in + k]);
        ASSERT_NEAR(together[r * c.out + o], alone[o],
                    2.0 * (c.in + 1) * std::ldexp(1.0, -24) * magnitude + 1e-30)
            << caseName(c) << " row " << r << " feature " << o;
      }
    }
  }
}

// With int8 activations (a CPU with AVX-512 VNNI) an int8 row's result is bit for bit the
// same whatever its step: the dot kernel (1 or 2 rows with AMX, up to 4 without), the AMX
// tiles (from 3) and the VNNI tiles (from 5, DSRT_INT8_AMX=0: ctest's
// dsrt-ops-int8-vnni-tiles) sum the same exact block sums in the same f32 order. Within the
// summation bound was not enough: a near tie over a 151,936-token vocabulary then went
// another way in another step (docs/serving.md, "Batch invariance"). Per channel, groups of
// 64 and of 32, a row whose inputs end in half a chunk (2784), 70 outputs (the last 6 by
// the dot kernel in every step); int4 weights too (their dot kernel up to 7 rows, the tiles
// from 8, the codes unpacked in registers), in groups of 32 and 64, and in 2784.
TEST(FastLinearKernels, Int8RowsEqualTheirRowAloneBitForBit) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw"))
    GTEST_SKIP() << "no AVX-512 VNNI here: int8 rows take f32 activations";
  std::mt19937 rng(13);
  int compared = 0;
  struct Shape {
    DType dtype;
    int64_t in, groups;
  };
  for (auto [dtype, in, groups] : {Shape{DType::I8, 256, 1}, Shape{DType::I8, 256, 4},
                                   Shape{DType::I8, 256, 8}, Shape{DType::I8, 2784, 1},
                                   Shape{DType::U8, 256, 8}, Shape{DType::U8, 768, 12},
                                   Shape{DType::U8, 2784, 87}}) {
    // f16 scales, as plans store them: the tiles convert a panel's at once.
    const Case c{dtype, groups, 37, in, 70, DType::F16, /*int8Activations=*/true};
    Weight w = randomWeight(c, rng);
    OwnedTensor x = randomF32({c.rows, c.in}, rng);
    const ops::fast::LinearWeights weights = linearWeights(c, w, w.scales);
    // (Not where the kernels are capped: DSRT_CPU_ISA, DSRT_INT4_ACTIVATIONS=f32.)
    if (dtype == DType::I8 &&
        !ops::fast::int8QuantizesActivations(weights, 1, /*rowInvariant=*/true))
      GTEST_SKIP() << "int8 rows take f32 activations in this configuration";
    if (dtype == DType::U8 &&
        !ops::fast::int4QuantizesActivations(in / groups, 1, /*rowInvariant=*/true))
      continue;  // int4 rows keep f32 activations here (DSRT_INT4_ACTIVATIONS=f32)
    auto *xv = reinterpret_cast<float *>(x.storage.data());
    std::vector<float> together(static_cast<size_t>(c.rows * c.out));
    ops::fast::linear(xv, c.rows, weights, together.data(), [](int64_t, int64_t) {}, nullptr,
                      /*rowInvariant=*/true);
    for (int64_t step : {1, 2, 3, 4, 5, 7, 8, 16}) {
      std::vector<float> part(static_cast<size_t>(step * c.out));
      for (int64_t r = 0; r + step <= c.rows; r += 7) {
        ops::fast::linear(xv + r * c.in, step, weights, part.data(), [](int64_t, int64_t) {},
                          nullptr, /*rowInvariant=*/true);
        for (int64_t i = 0; i < step * c.out; ++i, ++compared)
          ASSERT_EQ(std::memcmp(&part[i], &together[r * c.out + i], sizeof(float)), 0)
              << dtypeName(dtype) << " in " << in << ", " << groups << " groups: row "
              << r + i / c.out
              << " output " << i % c.out << " in a step of " << step << ": " << part[i]
              << " against " << together[r * c.out + i] << " among 37";
      }
    }
  }
  EXPECT_GT(compared, 0);
}

// tfm.activation and tfm.gated_act on the fast kernels (exp within 2 ulp, erf within 1.2e-7,
// vectorised) against the reference's libm: within 2e-6 of the result's magnitude plus 1e-7
// (erf's absolute error, times |x| / 2 in GELU, near x = 0), over [-12, 12], the
// saturated tails and the float extremes.
TEST(FastActivations, EqualTheReferenceKernel) {
  std::vector<float> inputs{0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, 80.0f, -80.0f, 100.0f, -100.0f};
  for (int i = -1200; i <= 1200; ++i)
    inputs.push_back(i * 0.01f + 0.003f);
  const int64_t n = static_cast<int64_t>(inputs.size());
  OwnedTensor x = f32({n}, inputs), gate = f32({n}, std::vector<float>(inputs.rbegin(), inputs.rend()));
  for (const char *kind : {"gelu_erf", "gelu_tanh", "gelu_quick", "silu", "relu", "relu2"}) {
    for (const char *op : {"tfm.activation", "tfm.gated_act"}) {
      bool gated = std::string(op) == "tfm.gated_act";
      std::vector<const OwnedTensor *> in{&x};
      if (gated)
        in.push_back(&gate);
      ops::AttrMap attrs{{"kind", ops::Attr::ofString(kind)}};
      std::vector<OwnedTensor> fast, reference;
      ASSERT_TRUE(run(op, in, fast, attrs, 1, nullptr, nullptr, true).isOk());
      ASSERT_TRUE(run(op, in, reference, attrs, 1, nullptr, nullptr, false).isOk());
      std::vector<float> got = values<float>(fast[0]), want = values<float>(reference[0]);
      for (int64_t i = 0; i < n; ++i) {
        float scale = gated ? std::fabs(inputs[n - 1 - i]) : 1.0f;
        ASSERT_NEAR(got[i], want[i], 2e-6 * std::fabs(want[i]) + 1e-7 * scale)
            << op << " " << kind << " at x = " << inputs[i];
      }
    }
  }
}

// tfm.gated_act_packed (the joined gate-up projection's [rows, 2n]) computes what
// tfm.gated_act computes from the two halves, element for element, on both kernel sets;
// an odd width is refused.
TEST(FastActivations, PackedEqualsTheTwoInputForm) {
  const int64_t rows = 3, half = 37;
  std::mt19937 rng(5);
  std::vector<float> joined = values<float>(randomF32({rows, 2 * half}, rng)), gate, up;
  for (int64_t r = 0; r < rows; ++r) {
    gate.insert(gate.end(), joined.begin() + r * 2 * half, joined.begin() + r * 2 * half + half);
    up.insert(up.end(), joined.begin() + r * 2 * half + half, joined.begin() + (r + 1) * 2 * half);
  }
  OwnedTensor x = f32({rows, 2 * half}, joined), g = f32({rows, half}, gate),
              u = f32({rows, half}, up);
  for (const char *kind : {"gelu_erf", "silu", "relu"}) {
    for (bool fastKernels : {true, false}) {
      ops::AttrMap attrs{{"kind", ops::Attr::ofString(kind)}};
      std::vector<OwnedTensor> packed, pair;
      ASSERT_TRUE(run("tfm.gated_act_packed", {&x}, packed, attrs, 1, nullptr, nullptr,
                      fastKernels).isOk());
      ASSERT_TRUE(
          run("tfm.gated_act", {&g, &u}, pair, attrs, 1, nullptr, nullptr, fastKernels).isOk());
      EXPECT_EQ(packed[0].ref().shape, (Shape{rows, half}));
      EXPECT_EQ(values<float>(packed[0]), values<float>(pair[0])) << kind << " " << fastKernels;
    }
  }
  OwnedTensor odd = f32({2, 5}, std::vector<float>(10, 1.0f));
  std::vector<OwnedTensor> out;
  Status status = run("tfm.gated_act_packed", {&odd}, out, {{"kind", ops::Attr::ofString("silu")}});
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("even last dimension"), std::string::npos) << status.message();
}

// tfm.layer_norm and tfm.rms_norm on the fast kernels (fp32, vectorised, rows over the
// pool) against the reference (fp64 sums): rows of 768 and of 37 (a vector tail), offset
// from zero so that the mean matters, with and without bias and the residual form. With
// u = 2^-24, the fp32 mean is off by at most δm = (n + 1)·u·max|x|; the sum of squares by a
// relative (n + 3)·u plus n·δm²/S (S the exact sum of squares about the mean), which moves
// 1/σ by at most half that plus 3u: ε. An output then moves by at most
// |scale|/σ·(δm + |x - mean|·(ε + 4u)) plus 2u of its magnitude and the bias's.
TEST(FastNorm, EqualsTheReferenceKernel) {
  const double u = std::ldexp(1.0, -24);
  for (int64_t n : {768, 37}) {
    for (const char *op : {"tfm.layer_norm", "tfm.rms_norm"}) {
      for (int variant = 0; variant < 3; ++variant) {  // plain, with bias, residual form
        bool rms = std::string(op) == "tfm.rms_norm";
        if (rms && variant == 1)
          continue;  // an RMS norm has no bias
        const int64_t rows = 5;
        std::mt19937 rng(static_cast<unsigned>(n + variant * 7 + (rms ? 100 : 0)));
        std::vector<float> xs = values<float>(randomF32({rows, n}, rng));
        for (int64_t i = 0; i < rows * n; ++i)
          xs[i] += 3.0f + float(i / n);  // a row mean of 3 to 7
        OwnedTensor x = f32({rows, n}, xs), scale = randomF32({n}, rng),
                    bias = randomF32({n}, rng), residual = randomF32({rows, n}, rng);
        std::vector<const OwnedTensor *> in{&x, &scale};
        if (!rms)
          in.push_back(variant == 1 ? &bias : nullptr);
        if (variant == 2)
          in.push_back(&residual);
        ops::AttrMap attrs{{"epsilon", ops::Attr::ofFloat(1e-5f)}};
        std::vector<OwnedTensor> fast, reference;
        size_t results = variant == 2 ? 2 : 1;
        Status status = run(op, in, fast, attrs, results, nullptr, nullptr, true);
        ASSERT_TRUE(status.isOk()) << op << ": " << status.message();
        status = run(op, in, reference, attrs, results, nullptr, nullptr, false);
        ASSERT_TRUE(status.isOk()) << op << ": " << status.message();
        ASSERT_EQ(fast.size(), reference.size());
        std::vector<float> source = xs;
        if (variant == 2) {
          std::vector<float> r = values<float>(residual);
          for (size_t i = 0; i < source.size(); ++i)
            source[i] += r[i];  // what both kernels normalise, rounded as they round it
          EXPECT_EQ(values<float>(fast[1]), values<float>(reference[1])) << "the sum";
        }
        std::vector<float> got = values<float>(fast[0]), want = values<float>(reference[0]);
        std::vector<float> scales = values<float>(scale), biases = values<float>(bias);
        for (int64_t r = 0; r < rows; ++r) {
          const float *row = source.data() + r * n;
          double mean = 0, maximum = 0, squares = 0;
          for (int64_t i = 0; i < n; ++i) {
            mean += rms ? 0.0 : row[i] / double(n);
            maximum = std::max(maximum, std::fabs(double(row[i])));
          }
          for (int64_t i = 0; i < n; ++i)
            squares += (row[i] - mean) * (row[i] - mean);
          double inverse = 1.0 / std::sqrt(squares / n + 1e-5);
          double deltaMean = rms ? 0.0 : (n + 1) * u * maximum;
          double epsilon = 0.5 * ((n + 3) * u + n * deltaMean * deltaMean / squares) + 3 * u;
          for (int64_t i = 0; i < n; ++i) {
            double b = variant == 1 ? std::fabs(biases[i]) : 0.0;
            double bound = std::fabs(scales[i]) * inverse *
                               (deltaMean + std::fabs(row[i] - mean) * (epsilon + 4 * u)) +
                           2 * u * (std::fabs(want[r * n + i]) + b) + 1e-30;
            ASSERT_NEAR(got[r * n + i], want[r * n + i], bound)
                << op << " n " << n << " variant " << variant << " row " << r << " i " << i;
          }
        }
      }
    }
  }
}

// tfm.attention on the fast kernels (vectorised query-key products and probability-value
// sums) against the reference: left padding, grouped heads, head_dim 40 (a vector tail),
// with rotary, ALiBi and a window. The products differ by summation order only: each score
// by at most δ = 2·D·u·scale·D·max|q|·max|k| (rotation can grow an element by √2, counted
// twice), and softmax weights that move by at most 2δ in total move an output by at most
// 2δ·max|v|. The exponentials (2 ulp each) move the normalised weights by at most 2^-21
// relative: another 2^-21·max|v|, doubled for the sum's rounding. The sum over S keys of
// weights (summing to 1) times values, in another order, moves an output by at most
// 2·S·u·max|v|.
TEST(FastAttention, EqualsTheReferenceKernel) {
  const int64_t B = 2, S = 9, H = 4, KH = 2, D = 40;
  for (int variant = 0; variant < 4; ++variant) {
    ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(H)},
                          {"num_kv_heads", ops::Attr::ofInt(KH)},
                          {"head_dim", ops::Attr::ofInt(D)},
                          {"scale", ops::Attr::ofFloat(1.0f / std::sqrt(float(D)))},
                          {"causal", ops::Attr::ofInt(1)}};
    if (variant == 1) {
      attrs["rotary_dim"] = ops::Attr::ofInt(D);
      attrs["rotary_base"] = ops::Attr::ofFloat(10000.0f);
    } else if (variant == 2) {
      attrs["alibi"] = ops::Attr::ofInt(1);
    } else if (variant == 3) {
      attrs["window"] = ops::Attr::ofInt(3);
    }
    std::mt19937 rng(variant + 11);
    OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, KH * D}, rng),
                v = randomF32({B, S, KH * D}, rng);
    std::vector<int64_t> maskValues(B * S, 1), positionValues(B * S);
    maskValues[S] = maskValues[S + 1] = 0;  // row 1: two tokens of left padding
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0, seen = 0; s < S; ++s)
        positionValues[b * S + s] = maskValues[b * S + s] ? seen++ : 1;
    OwnedTensor mask = i64({B, S}, maskValues), positions = i64({B, S}, positionValues);
    std::vector<OwnedTensor> fast, reference;
    std::vector<const OwnedTensor *> in{&q, &k, &v, &mask, nullptr, nullptr, &positions};
    ASSERT_TRUE(run("tfm.attention", in, fast, attrs, 1, nullptr, nullptr, true).isOk());
    ASSERT_TRUE(run("tfm.attention", in, reference, attrs, 1, nullptr, nullptr, false).isOk());
    auto maxAbs = [](const OwnedTensor &t) {
      double m = 0;
      for (float x : values<float>(t))
        m = std::max(m, double(std::fabs(x)));
      return m;
    };
    double delta = 2.0 * D * std::ldexp(1.0, -24) / std::sqrt(double(D)) * D * 2 * maxAbs(q) *
                   maxAbs(k);
    double bound = 2 * delta * maxAbs(v) + std::ldexp(1.0, -20) * maxAbs(v) +
                   2.0 * S * std::ldexp(1.0, -24) * maxAbs(v) + 1e-30;
    std::vector<float> got = values<float>(fast[0]), want = values<float>(reference[0]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], bound) << "variant " << variant << " element " << i;
  }
}

// The same over a half session cache (cache_dtype f16 and bf16): the fast kernels read the
// cache's rows as stored (the products and the weighted sum widen them), the reference
// widens them first; both write the new keys and values rounded, bit for bit the same, and
// both attend the same stored values, so the bound above holds (with |k| and |v| those of
// the cache, which rounding keeps within 2^-8 of the f32 ones: the bound takes 2 max|x|).
TEST(FastAttention, EqualsTheReferenceOverAHalfCache) {
  const int64_t B = 2, P = 5, S = 3, T = P + S, H = 4, KH = 2, D = 40, capacity = 12;
  for (DType cacheType : {DType::F16, DType::BF16}) {
    ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(H)},
                          {"num_kv_heads", ops::Attr::ofInt(KH)},
                          {"head_dim", ops::Attr::ofInt(D)},
                          {"scale", ops::Attr::ofFloat(1.0f / std::sqrt(float(D)))},
                          {"causal", ops::Attr::ofInt(1)},
                          {"rotary_dim", ops::Attr::ofInt(D)},
                          {"rotary_base", ops::Attr::ofFloat(10000.0f)},
                          {"cache_layer", ops::Attr::ofInt(0)},
                          {"cache_dtype", ops::Attr::ofType(cacheType)}};
    std::mt19937 rng(cacheType == DType::F16 ? 5 : 6);
    OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, KH * D}, rng),
                v = randomF32({B, S, KH * D}, rng);
    // The cache's earlier rows, random and already rounded; row 1 has one token of padding.
    OwnedTensor past = randomF32({2, B, KH, capacity, D}, rng);
    std::vector<uint16_t> stored(past.storage.size() / sizeof(float));
    ASSERT_TRUE(convertFloats(DType::F32, past.storage.data(), cacheType, stored.data(),
                              static_cast<int64_t>(stored.size())));
    std::vector<int64_t> maskValues(B * T, 1), positionValues(B * S);
    maskValues[T] = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        positionValues[b * S + s] = P + s - b;
    OwnedTensor mask = i64({B, T}, maskValues), positions = i64({B, S}, positionValues);
    std::vector<const OwnedTensor *> in{&q, &k, &v, &mask, nullptr, nullptr, &positions};
    std::vector<uint16_t> caches[2] = {stored, stored};
    std::vector<OwnedTensor> outputs[2];
    const size_t half = stored.size() / 2;
    for (int fast = 0; fast < 2; ++fast) {
      ops::KvCache cache;
      cache.layers.push_back({cacheType, B, KH, capacity, D, caches[fast].data(),
                              caches[fast].data() + half});
      Status status = run("tfm.attention", in, outputs[fast], attrs, 1, &cache, nullptr, fast);
      ASSERT_TRUE(status.isOk()) << status.message();
    }
    EXPECT_EQ(caches[0], caches[1]) << "both write the new keys and values rounded alike";
    EXPECT_NE(caches[0], stored) << "the new keys and values were written";
    auto maxAbs = [](const OwnedTensor &t) {
      double m = 0;
      for (float x : values<float>(t))
        m = std::max(m, double(std::fabs(x)));
      return m;
    };
    const double qMax = maxAbs(q), kvMax = 2 * std::max({maxAbs(k), maxAbs(v), maxAbs(past)});
    double delta = 2.0 * D * std::ldexp(1.0, -24) / std::sqrt(double(D)) * D * 2 * qMax * kvMax;
    double bound = 2 * delta * kvMax + std::ldexp(1.0, -20) * kvMax +
                   2.0 * T * std::ldexp(1.0, -24) * kvMax + 1e-30;
    std::vector<float> got = values<float>(outputs[1][0]), want = values<float>(outputs[0][0]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], bound) << dtypeName(cacheType) << " element " << i;
  }
}

uint32_t bitsOf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// The attention's one score arithmetic (DotKernels.h's keyScoresBy): a decode row's scores
// (keyScores, which reduces sixteen keys at once on AVX-512) and a prompt tile's (scoreTile,
// the queries in the lanes) must agree bit for bit, or a request's tokens would depend on how
// the engine cut its prompt into steps. Keys as stored (f32, f16, bf16) against the same
// keys widened; widths with and without a scalar tail; runs of keys with and without a whole
// sixteen; 16 and 48 queries; one key all zeros against negative queries (the sum's -0 is
// +0). Both are also within the f32 bound of the float64 dot: D·2^-24·Σ|q·k|.
TEST(FastLinearKernels, PromptTileScoresEqualDecodeRowScoresBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  int compared = 0;
  for (DType keyType : {DType::F32, DType::F16, DType::BF16})
    for (int64_t width : {64, 128, 80, 96, 72, 8, 200})
      for (int64_t count : {1, 15, 16, 17, 40})
        for (int64_t queries : {16, 48}) {
          std::vector<float> keyValues(static_cast<size_t>(count * width));
          for (float &v : keyValues)
            v = normal(rng);
          std::fill(keyValues.begin(), keyValues.begin() + width, 0.0f);
          std::vector<uint8_t> keys(static_cast<size_t>(count * width) * dtypeSize(keyType));
          ASSERT_TRUE(convertFloats(DType::F32, keyValues.data(), keyType, keys.data(),
                                    count * width));
          std::vector<float> widened(keyValues.size());
          ASSERT_TRUE(convertFloats(keyType, keys.data(), DType::F32, widened.data(),
                                    count * width));
          std::vector<float> queryRows(static_cast<size_t>(queries * width)),
              queriesT(queryRows.size());
          for (float &v : queryRows)
            v = -std::fabs(normal(rng));
          for (int64_t r = 0; r < queries; ++r)
            for (int64_t d = 0; d < width; ++d)
              queriesT[d * queries + r] = queryRows[r * width + d];
          std::vector<float> tile(static_cast<size_t>(count * queries), 1.0f);
          ops::fast::scoreTile(widened.data(), count, width, queriesT.data(), queries,
                               tile.data());
          std::vector<float> row(static_cast<size_t>(count), 1.0f);
          for (int64_t r = 0; r < queries; ++r) {
            const float *query = queryRows.data() + r * width;
            ops::fast::keyScores(query, keys.data(), keyType, count, width, row.data());
            for (int64_t t = 0; t < count; ++t) {
              ASSERT_EQ(bitsOf(tile[t * queries + r]), bitsOf(row[t]))
                  << dtypeName(keyType) << " width " << width << " key " << t << " of "
                  << count << ", query " << r << ": " << tile[t * queries + r] << " against "
                  << row[t];
              double exact = 0, magnitude = 0;
              for (int64_t d = 0; d < width; ++d) {
                exact += double(query[d]) * widened[t * width + d];
                magnitude += std::fabs(double(query[d]) * widened[t * width + d]);
              }
              ASSERT_NEAR(row[t], exact, double(width) * std::ldexp(1.0, -24) * magnitude)
                  << dtypeName(keyType) << " width " << width << " key " << t;
              ++compared;
            }
          }
        }
  EXPECT_GT(compared, 0);
}

// The prompt tiles' softmax (columnMaxima, softmaxColumns, a row per lane) against a decode
// row's steps (TransformerPagedAttention.cpp: std::max from the initial maximum, s - max,
// exponentiate over the row's range, the sum in key order from the initial sum, each weight
// divided by it), bit for bit: rows of 1 to 70 keys (exponentiate's tail at every offset),
// masked keys (-inf) in the tile, an initial maximum and sum (a sink's) in some rows.
TEST(FastLinearKernels, PromptTileSoftmaxEqualsDecodeRowSoftmaxBitForBit) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal;
  const float negativeInfinity = -std::numeric_limits<float>::infinity();
  const int64_t ld = 32;
  int compared = 0;
  for (int64_t keys : {1, 7, 16, 33, 70}) {
    std::vector<float> scores(static_cast<size_t>(keys * ld));
    for (float &v : scores)
      v = 4.0f * normal(rng);
    // Row r sees keys [begin, end): the others are masked.
    std::vector<int64_t> begin(ld), end(ld);
    std::vector<float> maximum(ld, negativeInfinity), sum(ld, 0.0f);
    for (int64_t r = 0; r < ld; ++r) {
      begin[r] = static_cast<int64_t>(rng() % keys);
      end[r] = begin[r] + 1 + static_cast<int64_t>(rng() % (keys - begin[r]));
      for (int64_t j = 0; j < keys; ++j)
        if (j < begin[r] || j >= end[r])
          scores[j * ld + r] = negativeInfinity;
      if (r % 3 == 0)
        maximum[r] = normal(rng);
    }
    const std::vector<float> initialMaximum = maximum;
    std::vector<float> tile = scores;
    ops::fast::columnMaxima(tile.data(), keys, ld, maximum.data());
    for (int64_t r = 0; r < ld; r += 3)
      sum[r] = std::exp(initialMaximum[r] - maximum[r]);
    const std::vector<float> initialSum = sum;
    ops::fast::softmaxColumns(tile.data(), keys, ld, maximum.data(), sum.data());
    for (int64_t r = 0; r < ld; ++r) {
      std::vector<float> row;
      float top = initialMaximum[r];
      for (int64_t j = begin[r]; j < end[r]; ++j) {
        row.push_back(scores[j * ld + r]);
        top = std::max(top, row.back());
      }
      ASSERT_EQ(bitsOf(maximum[r]), bitsOf(top)) << keys << " keys, row " << r;
      for (float &v : row)
        v -= top;
      ops::fast::exponentiate(row.data(), static_cast<int64_t>(row.size()));
      float total = initialSum[r];
      for (float v : row)
        total += v;
      ASSERT_EQ(bitsOf(sum[r]), bitsOf(total)) << keys << " keys, row " << r;
      for (int64_t j = 0; j < keys; ++j) {
        const bool seen = j >= begin[r] && j < end[r];
        const float want = seen ? row[j - begin[r]] / total : 0.0f;
        ASSERT_EQ(bitsOf(tile[j * ld + r]), bitsOf(want))
            << keys << " keys, row " << r << ", key " << j << ": " << tile[j * ld + r]
            << " against " << want;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0);
}

// A decode row's weights times the values over a paged cache's blocks (weightedSum run after
// run, accumulating) equal one chain over all the keys (a contiguous cache's one call) and a
// prompt tile's multiplyTile (the weights read transposed, accumulating tile after tile), bit
// for bit; widths with and without a scalar tail, runs of 1, 13 and 16 keys.
TEST(FastLinearKernels, ValueSumsAreOneChainWhateverTheRuns) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  int compared = 0;
  for (int64_t width : {64, 72, 8, 200})
    for (int64_t run : {1, 13, 16}) {
      const int64_t count = 70, ld = 16;
      std::vector<float> weights(static_cast<size_t>(count)), values(count * width);
      for (float &v : weights)
        v = std::fabs(normal(rng));
      for (float &v : values)
        v = normal(rng);
      std::vector<float> whole(static_cast<size_t>(width)), runs(whole.size(), 0.0f);
      ops::fast::weightedSum(weights.data(), values.data(), count, width, whole.data());
      for (int64_t t = 0; t < count; t += run)
        ops::fast::weightedSum(weights.data() + t, values.data() + t * width,
                               std::min(run, count - t), width, runs.data(), true);
      // The weights as a [keys, ld] tile whose lane 3 is this row.
      std::vector<float> tile(static_cast<size_t>(count * ld), 0.5f);
      for (int64_t t = 0; t < count; ++t)
        tile[t * ld + 3] = weights[t];
      std::vector<float> tiled(static_cast<size_t>(4 * width));
      for (int64_t t0 = 0; t0 < count; t0 += 64)
        ops::fast::multiplyTile(tile.data() + t0 * ld, 1, ld, values.data() + t0 * width, width,
                                4, std::min<int64_t>(64, count - t0), width, tiled.data(), width,
                                t0 > 0);
      for (int64_t d = 0; d < width; ++d) {
        ASSERT_EQ(bitsOf(runs[d]), bitsOf(whole[d])) << "width " << width << " runs " << run;
        ASSERT_EQ(bitsOf(tiled[3 * width + d]), bitsOf(whole[d]))
            << "width " << width << " element " << d;
        ++compared;
      }
    }
  EXPECT_GT(compared, 0);
}

// The decode attention reads an int8 KV cache's codes and scales as they are
// (keyScoresInt8, weightedSumInt8); the prompt chunks' kernel reads the same rows widened to
// f32 (widenRows: q * scale). A request's tokens must not depend on which read its cached
// positions (a preempted request recomputes its generated tokens as a prompt), so both must
// give the widened rows' results bit for bit, on every ISA (ctest's -avx2 and -portable).
TEST(FastLinearKernels, Int8KvReadsEqualTheWidenedRowsBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> code(-127, 127);
  int compared = 0;
  for (int64_t width : {64, 128, 80, 96, 16, 48})  // whole vectors (FastKernels.h)
    for (int64_t count : {1, 15, 16, 17, 40}) {
      const int64_t groups = width % 32 == 0 ? width / 32 : 1;
      std::vector<int8_t> codes(static_cast<size_t>(count * width));
      std::vector<float> scales(static_cast<size_t>(count * groups)), query(width),
          weights(static_cast<size_t>(count));
      for (int8_t &q : codes)
        q = static_cast<int8_t>(code(rng));
      for (float &v : scales)
        v = std::fabs(normal(rng)) / 127.0f;
      scales[0] = 0.0f;  // a row of zeros quantizes to scale 0
      for (float &v : query)
        v = normal(rng);
      for (float &v : weights)
        v = std::fabs(normal(rng));
      ops::fast::LinearWeights asRows;
      asRows.dtype = DType::I8;
      asRows.data = codes.data();
      asRows.out = count;
      asRows.in = width;
      asRows.scales = scales.data();
      asRows.scaleType = DType::F32;
      asRows.groups = groups;
      std::vector<float> widened(static_cast<size_t>(count * width));
      ops::fast::widenRows(asRows, 0, count, widened.data());
      std::vector<float> wantScores(static_cast<size_t>(count)), gotScores(wantScores.size(), 1);
      ops::fast::keyScores(query.data(), widened.data(), DType::F32, count, width,
                           wantScores.data());
      ops::fast::keyScoresInt8(query.data(), codes.data(), scales.data(), groups, count, width,
                               gotScores.data());
      std::vector<float> wantSum(static_cast<size_t>(width)), gotSum(wantSum.size(), 1);
      ops::fast::weightedSum(weights.data(), widened.data(), count, width, wantSum.data());
      ops::fast::weightedSumInt8(weights.data(), codes.data(), scales.data(), groups, count,
                                 width, gotSum.data());
      for (int64_t t = 0; t < count; ++t, ++compared)
        ASSERT_EQ(std::memcmp(&gotScores[t], &wantScores[t], sizeof(float)), 0)
            << "width " << width << " key " << t << " of " << count << ": " << gotScores[t]
            << " against " << wantScores[t];
      for (int64_t d = 0; d < width; ++d, ++compared)
        ASSERT_EQ(std::memcmp(&gotSum[d], &wantSum[d], sizeof(float)), 0)
            << "width " << width << " value " << d << " over " << count << " rows: "
            << gotSum[d] << " against " << wantSum[d];
    }
  EXPECT_GT(compared, 0);
}

// The kernels this test ran are the ones a build from the README gets: build.sh installs
// oneDNN, and the ISA is the widest this CPU has, unless the test's environment caps them
// (ctest's dsrt-ops-fast-avx2 and -portable entries), or asks for the VNNI kernel
// (dsrt-ops-fast-vnni) or int4's exact f32 activations (dsrt-ops-fast-int4-f32).
TEST(FastLinearKernels, TheExpectedKernelsRan) {
  auto env = [](const char *name) {
    const char *set = std::getenv(name);
    return std::string(set ? set : "");
  };
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
              __builtin_cpu_supports("f16c");
  bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  bool vnni = avx512 && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vnni");
  std::string cap = env("DSRT_CPU_ISA");
  std::string isa = cap == "scalar" || !avx2                  ? "scalar"
                    : cap == "avx2" || !avx512                ? "avx2"
                    : cap != "avx512-vnni" || !vnni           ? "avx512"
                                                              : "avx512-vnni";
  const bool dnnl = env("DSRT_DNNL") != "none";
  std::string expected = std::string(dnnl ? "onednn sgemm + " : "");
  // Prompts' GEMMs in bf16: asked for, or of bf16 weights where the CPU has bf16 products.
  const bool bf16Products =
      __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  // oneDNN's bf16 GEMM needs AVX-512 (F, BW, VL, DQ): without it the library answers
  // unimplemented and the prompts stay in f32, asked or not.
  const bool bf16Gemm = avx512 && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (dnnl && bf16Gemm && env("DSRT_PREFILL_GEMM") == "bf16")
    expected += "bf16 prompt gemm + ";
  else if (dnnl && bf16Products && env("DSRT_PREFILL_GEMM") != "f32")
    expected += "bf16 prompt gemm of half, int8 and int4 weights + ";
  expected += isa;
  // int4 decode multiplies int8 activations where the CPU has VNNI and the kernels are not
  // capped below AVX-512, unless DSRT_INT4_ACTIVATIONS=f32 (ctest's dsrt-ops-fast-int4-f32).
  const bool avx512Kernels = vnni && (isa == "avx512" || isa == "avx512-vnni");
  const bool int8Vnni =
      avx512Kernels && (env("DSRT_INT8_ACTIVATIONS") == "int8" || isa == "avx512-vnni");
  const bool int4Vnni = avx512Kernels && env("DSRT_INT4_ACTIVATIONS") != "f32";
  if (int8Vnni && int4Vnni)
    expected += " (int8 and int4 up to 64 rows: avx512-vnni, int8 activations)";
  else if (int4Vnni)
    expected += " (int4 up to 64 rows: avx512-vnni, int8 activations)";
  else if ((isa == "avx2" || isa == "avx512") && env("DSRT_INT4_ACTIVATIONS") != "f32")
    expected += " (int4 up to 64 rows: avx2, int8 activations)";
  else if (int8Vnni)
    expected += " (int8 up to 64 rows: avx512-vnni, int8 activations)";
  EXPECT_EQ(std::string(ops::fast::linearKernelsDescription()), expected);
  EXPECT_EQ(std::string(ops::fast::cpuIsa()), isa);
}

} // namespace
} // namespace dsrt::test
