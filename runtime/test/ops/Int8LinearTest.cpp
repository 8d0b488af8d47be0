// tfm.linear with an int8 weight and its scales (docs/int8.md), or an int4 one (docs/int4.md),
// against the formula computed here in double precision: w^[o, k] = q[o, k] * scales[o, k /
// (in / groups)], an int4 q being the code at nibble k of the row (the even k low) minus 8.
#include "OpTestUtil.h"

#include "ops/fast/FastKernels.h"

#include <cmath>
#include <random>

namespace dsrt::test {
namespace {

OwnedTensor randomInt8(Shape shape, std::mt19937 &rng) {
  OwnedTensor t(DType::I8, shape);
  std::uniform_int_distribution<int> level(-127, 127);
  for (uint8_t &byte : t.storage)
    byte = static_cast<uint8_t>(static_cast<int8_t>(level(rng)));
  return t;
}

std::vector<float> randomValues(int64_t count, std::mt19937 &rng, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> v(static_cast<size_t>(count));
  for (float &x : v)
    x = uniform(rng);
  return v;
}

// silu(x . w^T + b) + residual with w^ dequantized from q and the scales as stored.
std::vector<double> reference(const std::vector<float> &x, const OwnedTensor &q,
                              const std::vector<float> &scales, int64_t groups,
                              const std::vector<float> &bias,
                              const std::vector<float> &residual) {
  const int64_t out = q.shape[0], in = q.shape[1], rows = static_cast<int64_t>(x.size()) / in;
  const auto *levels = reinterpret_cast<const int8_t *>(q.storage.data());
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = bias[o];
      for (int64_t k = 0; k < in; ++k)
        sum += double(x[r * in + k]) * levels[o * in + k] * scales[o * groups + k / (in / groups)];
      double activated = sum / (1 + std::exp(-sum));
      y[r * out + o] = activated + residual[r * out + o];
    }
  return y;
}

class Int8LinearTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(Int8LinearTest, DequantizesEachGroupWithItsScale) {
  const int64_t groups = GetParam(), rows = 5, in = 64, out = 12;
  std::mt19937 rng(static_cast<unsigned>(groups));
  OwnedTensor q = randomInt8({out, in}, rng);
  std::vector<float> xv = randomValues(rows * in, rng, -1, 1);
  // Scales stored as f16, as --compute-dtype fp16 stores them; the reference reads the same
  // rounded values.
  OwnedTensor scales = f16({out, groups}, randomValues(out * groups, rng, 1e-3f, 2e-2f));
  std::vector<float> scaleValues = halfValues(scales);
  OwnedTensor bias = f16({out}, randomValues(out, rng, -0.5f, 0.5f));
  std::vector<float> biasValues = halfValues(bias);
  std::vector<float> residualValues = randomValues(rows * out, rng, -1, 1);
  OwnedTensor x = f32({rows, in}, xv), residual = f32({rows, out}, residualValues);

  OwnedTensor y = run1("tfm.linear", {&x, &q, &bias, &scales, &residual},
                       {{"activation", ops::Attr::ofString("silu")}});
  ASSERT_EQ(y.shape, (Shape{rows, out}));
  std::vector<double> expected =
      reference(xv, q, scaleValues, groups, biasValues, residualValues);
  std::vector<float> actual = values<float>(y);
  // f32 accumulation of 64 products of magnitude below ~2.6: 1e-5 relative to 1 + |y|.
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], 1e-5 * (1 + std::abs(expected[i]))) << i;
}

INSTANTIATE_TEST_SUITE_P(Groups, Int8LinearTest, ::testing::Values(1, 2, 4, 64));

// An int8 LM head's step has tfm.linear's positions (hidden, weight, none, scales) and the
// same arithmetic, without bias or epilogue.
TEST(Int8LinearTest, LmHeadTakesTheLinearPositions) {
  std::mt19937 rng(5);
  const int64_t rows = 3, in = 32, vocab = 20, groups = 2;
  OwnedTensor q = randomInt8({vocab, in}, rng);
  std::vector<float> xv = randomValues(rows * in, rng, -1, 1);
  std::vector<float> scaleValues = randomValues(vocab * groups, rng, 1e-3f, 2e-2f);
  OwnedTensor x = f32({rows, in}, xv), scales = f32({vocab, groups}, scaleValues);
  OwnedTensor logits = run1("tfm.lm_head", {&x, &q, nullptr, &scales});
  std::vector<float> actual = values<float>(logits);
  const auto *levels = reinterpret_cast<const int8_t *>(q.storage.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < vocab; ++v) {
      double sum = 0;
      for (int64_t k = 0; k < in; ++k)
        sum += double(xv[r * in + k]) * levels[v * in + k] * scaleValues[v * groups + k / (in / groups)];
      ASSERT_NEAR(actual[r * vocab + v], sum, 1e-5 * (1 + std::abs(sum))) << r << ", " << v;
    }
}

TEST(Int8LinearErrorsTest, WeightAndScalesMustAgree) {
  OwnedTensor x = f32({1, 4}, {1, 2, 3, 4});
  OwnedTensor q(DType::I8, {2, 4}), floatWeight = f32({2, 4}, {0, 0, 0, 0, 0, 0, 0, 0});
  OwnedTensor scales = f32({2, 2}, {1, 1, 1, 1}), threeGroups = f32({2, 3}, {1, 1, 1, 1, 1, 1});
  EXPECT_NE(errorOf("tfm.linear", {&x, &q}).find("weight"), std::string::npos)
      << "an int8 weight without scales";
  EXPECT_NE(errorOf("tfm.linear", {&x, &floatWeight, nullptr, &scales}).find("weight"),
            std::string::npos)
      << "scales with a float weight";
  EXPECT_NE(errorOf("tfm.linear", {&x, &q, nullptr, &threeGroups})
                .find("scales must be [2, groups] with groups dividing 4, not [2, 3]"),
            std::string::npos);
}

// int4: codes two to a byte, u8 [out, in / 2], in groups of 16 and 32 and one of 64.
class Int4LinearTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(Int4LinearTest, UnpacksNibblesAndScalesEachGroup) {
  const int64_t groups = GetParam(), rows = 3, in = 64, out = 10;
  std::mt19937 rng(static_cast<unsigned>(40 + groups));
  OwnedTensor packed(DType::U8, {out, in / 2});
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t &pair : packed.storage)
    pair = static_cast<uint8_t>(byte(rng));
  std::vector<float> xv = randomValues(rows * in, rng, -1, 1);
  OwnedTensor scales = f16({out, groups}, randomValues(out * groups, rng, 1e-3f, 2e-2f));
  std::vector<float> scaleValues = halfValues(scales);
  OwnedTensor x = f32({rows, in}, xv);
  for (bool fast : {false, true}) {
    std::vector<OwnedTensor> y;
    Status status = run("tfm.linear", {&x, &packed, nullptr, &scales}, y, {}, 1, nullptr,
                        nullptr, fast);
    ASSERT_TRUE(status.isOk()) << status.message();
    ASSERT_EQ(y[0].shape, (Shape{rows, out}));
    std::vector<float> actual = values<float>(y[0]);
    // Where the fast kernel quantizes x to int8 in blocks of 32 (AVX-512 VNNI, the default
    // there: docs/int4.md), each input is off by at most half its block's step
    // max|x_block| / 127, which adds sum_k |w_k| * step_k / 2.
    const bool quantizedX = fast && ops::fast::int4QuantizesActivations(in / groups, rows);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double sum = 0, activationBound = 0;
        for (int64_t k = 0; k < in; ++k) {
          const uint8_t pair = packed.storage[o * (in / 2) + k / 2];
          const int q = (k % 2 == 0 ? pair & 0xF : pair >> 4) - 8;
          const double w = q * double(scaleValues[o * groups + k / (in / groups)]);
          sum += double(xv[r * in + k]) * w;
          double blockMax = 0;
          for (int64_t j = k / 32 * 32; j < k / 32 * 32 + 32; ++j)
            blockMax = std::max(blockMax, double(std::fabs(xv[r * in + j])));
          activationBound += std::fabs(w) * blockMax / 127 / 2;
        }
        // f32 accumulation of 64 products of magnitude below 0.16.
        const double bound =
            1e-5 * (1 + std::abs(sum)) + (quantizedX ? activationBound * (1 + 1e-6) : 0.0);
        ASSERT_NEAR(actual[r * out + o], sum, bound)
            << (fast ? "fast" : "reference") << " row " << r << " feature " << o;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, Int4LinearTest, ::testing::Values(1, 2, 4));

TEST(Int4LinearErrorsTest, PackedShapeAndGroupsMustAgree) {
  OwnedTensor x = f32({1, 8}, {1, 2, 3, 4, 5, 6, 7, 8});
  OwnedTensor packed(DType::U8, {2, 4}), unpacked(DType::U8, {2, 8});
  OwnedTensor scales = f32({2, 2}, {1, 1, 1, 1}), oddGroups = f32({2, 8}, std::vector<float>(16, 1));
  EXPECT_TRUE(errorOf("tfm.linear", {&x, &packed, nullptr, &scales}).empty());
  EXPECT_NE(errorOf("tfm.linear", {&x, &unpacked, nullptr, &scales})
                .find("an int4 weight must be [out, 8 / 2] bytes, not [2, 8]"),
            std::string::npos);
  EXPECT_NE(errorOf("tfm.linear", {&x, &packed, nullptr, &oddGroups})
                .find("scales must be [2, groups] with groups dividing 8 into even groups"),
            std::string::npos)
      << "groups of one input would split a byte";
}

} // namespace
} // namespace dsrt::test
