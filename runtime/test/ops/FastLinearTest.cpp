// The CPU backend's fast linear kernels (ops/fast) against the reference kernel of
// tfm.linear / tfm.lm_head, over every stored weight dtype, every kernel path (the stream
// kernel up to 4 rows, the blocks up to 32 rows of fp32 weights and 64 of narrow ones, with
// AVX-512 fp32's rows as lanes up to 16, oneDNN's sgemm on fp32 tiles above), the kernels of
// each instruction
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
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 65})
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

// The engine's float weights: under rowInvariant a row's outputs are the very bits that row
// gets alone, at every row count (the kernels by row count and sgemm each sum in an order of
// their own, which a quantized next layer or an f16 cache can turn into another token:
// docs/serving.md, "Batch invariance"). Inputs that leave a scalar rest and outputs that
// leave a partial block.
namespace {
// The first row of x (c.rows rows) among which linear() gives another result than that row
// alone, both under the same invariance levels; -1 where none does.
int64_t firstRowUnlikeItsAlone(const Case &c, const ops::fast::LinearWeights &weights,
                               const float *x, bool exactFloatRows) {
  std::vector<float> together(static_cast<size_t>(c.rows * c.out)), alone(c.out);
  ops::fast::linear(x, c.rows, weights, together.data(), [](int64_t, int64_t) {}, nullptr,
                    /*rowInvariant=*/true, exactFloatRows);
  for (int64_t r = 0; r < c.rows; ++r) {
    ops::fast::linear(x + r * c.in, 1, weights, alone.data(), [](int64_t, int64_t) {}, nullptr,
                      /*rowInvariant=*/true, exactFloatRows);
    if (std::memcmp(together.data() + r * c.out, alone.data(), alone.size() * sizeof(float)))
      return r;
  }
  return -1;
}
} // namespace

TEST(FastLinearKernels, FloatRowsEqualTheirRowAloneBitForBit) {
  std::mt19937 rng(12);
  // Float weights, and integer ones where x stays f32 (int4 groups of 16 are not whole
  // blocks of 32; int8 where the CPU has no VNNI, or DSRT_INT8_ACTIVATIONS=f32).
  for (auto [dtype, groups, in] : {std::tuple<DType, int64_t, int64_t>{DType::F32, 1, 307},
                                   {DType::F16, 1, 307}, {DType::BF16, 1, 307},
                                   {DType::F32, 1, 1100},  // blocks of inputs (512, 512, 64)
                                   {DType::I8, 10, 320}, {DType::I8, 1, 320},
                                   {DType::U8, 20, 320}})
    for (int64_t rows : {2, 3, 4, 5, 9, 16, 17, 33, 40, 65, 100}) {
      const Case c{dtype, groups, rows, in, 101};
      Weight w = randomWeight(c, rng);
      OwnedTensor x = randomF32({c.rows, c.in}, rng);
      const ops::fast::LinearWeights weights = linearWeights(c, w, w.scales);
      const auto *xv = reinterpret_cast<const float *>(x.storage.data());
      ASSERT_EQ(-1, firstRowUnlikeItsAlone(c, weights, xv, /*exactFloatRows=*/true))
          << caseName(c);
    }
}

// In a batch-invariant session without exactFloatRows, integer weights whose x stays f32
// only for their shape (int8 groups of 28 or 16 where int8 x is wanted; int4 groups of 28 or
// 16) are summed as each row alone too: the rest of such a plan quantizes x, so these
// layers had been the one place where a row's step changed its bits (a 56-input down_proj
// gave a sampled request other tokens: docs/serving.md, "Batch invariance").
TEST(FastLinearKernels, IntegerRowsOfFloatXEqualTheirRowAloneWhereRowInvariant) {
  std::mt19937 rng(14);
  int compared = 0;
  for (auto [dtype, groups, in] : {std::tuple<DType, int64_t, int64_t>{DType::I8, 2, 56},
                                   {DType::I8, 20, 320}, {DType::U8, 2, 56},
                                   {DType::U8, 20, 320}})
    for (int64_t rows : {2, 3, 4, 5, 9, 16, 17, 33, 65, 100}) {
      const Case c{dtype, groups, rows, in, 101, DType::F16, /*int8Activations=*/true};
      Weight w = randomWeight(c, rng);
      OwnedTensor x = randomF32({c.rows, c.in}, rng);
      const ops::fast::LinearWeights weights = linearWeights(c, w, w.scales);
      // Where x is f32 for every layer (no VNNI for int8, DSRT_INT4_ACTIVATIONS=f32, the
      // portable kernels), the session promises f32 rounding only.
      if (!ops::fast::shapeKeepsIntegerXFloat(weights))
        continue;
      const auto *xv = reinterpret_cast<const float *>(x.storage.data());
      ASSERT_EQ(-1, firstRowUnlikeItsAlone(c, weights, xv, /*exactFloatRows=*/false))
          << caseName(c);
      ++compared;
    }
  if (compared == 0)
    GTEST_SKIP() << "x is f32 for every integer layer in this configuration";
}

// From 5 rows up to 16, fp32 weights' rows of x are the lanes of a vector on AVX-512
// (dotRowLanes: one chain of FMAs per row and output) and kernel blocks elsewhere (the same
// sums for a row however many rows share its block): either way a row's result is bit for
// bit the same among 5 rows as among 16, in any lane. 150 outputs: 9 panels of 16 and 6 by
// the blocks.
TEST(FastLinearKernels, F32RowsFrom5To16EqualEachOtherBitForBit) {
  std::mt19937 rng(13);
  const Case c{DType::F32, 1, 16, 770, 150};
  Weight w = randomWeight(c, rng);
  OwnedTensor x = randomF32({c.rows, c.in}, rng);
  const ops::fast::LinearWeights weights = linearWeights(c, w, w.scales);
  const auto *xv = reinterpret_cast<const float *>(x.storage.data());
  std::vector<float> sixteen(static_cast<size_t>(c.rows * c.out)), five(5 * c.out);
  ops::fast::dotRows(xv, 16, weights, 0, c.out, sixteen.data(), c.out);
  for (int64_t first : {0, 6, 11}) {
    ops::fast::dotRows(xv + first * c.in, 5, weights, 0, c.out, five.data(), c.out);
    ASSERT_EQ(std::memcmp(five.data(), sixteen.data() + first * c.out, five.size() * sizeof(float)),
              0)
        << "rows " << first << " to " << first + 4;
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
