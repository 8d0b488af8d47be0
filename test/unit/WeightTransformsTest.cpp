// The plan writer's weight transforms against hand-computed results.
#include "codegen/WeightTransforms.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace {

using dsc::WeightTransform;
using dsrt::DType;

std::vector<float> apply(const std::vector<float> &input, const dsrt::Shape &shape,
                         const std::vector<WeightTransform> &transforms, dsrt::Shape &outShape) {
  DType outDtype;
  EXPECT_TRUE(dsc::transformedType(DType::F32, shape, transforms, outDtype, outShape).isOk());
  std::vector<float> out(dsrt::elementCount(outShape));
  dsrt::Status status = dsc::applyWeightTransforms(
      reinterpret_cast<const uint8_t *>(input.data()), DType::F32, shape, transforms,
      reinterpret_cast<uint8_t *>(out.data()));
  EXPECT_TRUE(status.isOk()) << status.message();
  return out;
}

TEST(WeightTransformsTest, TransposeThenSliceLikeAColumnParallelShard) {
  // A 2x3 [in, out] Conv1D weight becomes [out, in] = 3x2, then rank 1 of 2 takes out rows
  // [2, 3): the row that was column 2.
  std::vector<float> weight = {1, 2, 3, 4, 5, 6};
  dsrt::Shape shape;
  auto transposed = apply(weight, {2, 3}, {WeightTransform::transpose({1, 0})}, shape);
  EXPECT_EQ(shape, (dsrt::Shape{3, 2}));
  EXPECT_EQ(transposed, (std::vector<float>{1, 4, 2, 5, 3, 6}));
  auto shard = apply(weight, {2, 3},
                     {WeightTransform::transpose({1, 0}), WeightTransform::slice(0, 2, 1)}, shape);
  EXPECT_EQ(shape, (dsrt::Shape{1, 2}));
  EXPECT_EQ(shard, (std::vector<float>{3, 6}));
}

TEST(WeightTransformsTest, SliceOfAnInnerAxis) {
  std::vector<float> weight(2 * 3 * 4);
  for (size_t i = 0; i < weight.size(); ++i)
    weight[i] = static_cast<float>(i);
  dsrt::Shape shape;
  auto out = apply(weight, {2, 3, 4}, {WeightTransform::slice(2, 1, 2)}, shape);
  EXPECT_EQ(shape, (dsrt::Shape{2, 3, 2}));
  EXPECT_EQ(out, (std::vector<float>{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22}));
}

TEST(WeightTransformsTest, GroupedSliceTakesThePartOfEveryBlock) {
  // Rows 0..11 of a [12, 1] weight as 3 blocks of 4 ([q | k | v] with 2 heads of 2): rank 1
  // of 2 keeps rows [2, 4) of each block, i.e. head 1 of q, k and v.
  std::vector<float> weight(12);
  for (size_t i = 0; i < weight.size(); ++i)
    weight[i] = static_cast<float>(i);
  dsrt::Shape shape;
  auto out = apply(weight, {12, 1}, {WeightTransform::slice(0, 2, 2, /*groups=*/3)}, shape);
  EXPECT_EQ(shape, (dsrt::Shape{6, 1}));
  EXPECT_EQ(out, (std::vector<float>{2, 3, 6, 7, 10, 11}));
  // BLOOM's per-head [heads = 2, (q, k, v) = 3, d = 2] rows: the keys are offset d of each
  // head's block of 3d.
  auto keys = apply(weight, {12, 1}, {WeightTransform::slice(0, 2, 2, /*groups=*/2)}, shape);
  EXPECT_EQ(keys, (std::vector<float>{2, 3, 8, 9}));
  DType dtype;
  EXPECT_FALSE(dsc::transformedType(DType::F32, {12, 1}, {WeightTransform::slice(0, 3, 2, 3)},
                                    dtype, shape)
                   .isOk());
}

TEST(WeightTransformsTest, ConvertRoundsToHalf) {
  std::vector<float> weight = {1.0f, 0.1f, -65504.0f};
  std::vector<uint16_t> out(3);
  ASSERT_TRUE(dsc::applyWeightTransforms(reinterpret_cast<const uint8_t *>(weight.data()),
                                         DType::F32, {3}, {WeightTransform::convert(DType::F16)},
                                         reinterpret_cast<uint8_t *>(out.data()))
                  .isOk());
  EXPECT_EQ(out[0], 0x3c00);  // 1.0
  EXPECT_EQ(out[1], 0x2e66);  // 0.1 to nearest half
  EXPECT_EQ(out[2], 0xfbff);  // -65504, the most negative half
}

// Granite's residual_multiplier folded into o_proj: every element times the factor, in
// order with the other transforms, and rounded once to a half weight's dtype.
TEST(WeightTransformsTest, ScaleMultipliesEveryElement) {
  dsrt::Shape shape;
  std::vector<float> out = apply({1, 2, 3, 4, 5, 6}, {2, 3},
                                 {WeightTransform::transpose({1, 0}), WeightTransform::scale(0.25),
                                  WeightTransform::slice(0, 1, 2)},
                                 shape);
  EXPECT_EQ(shape, (dsrt::Shape{2, 2}));
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1.25f, 0.75f, 1.5f}));
  uint16_t half[2] = {0x3c00, 0xbc00};  // f16 1.0, -1.0
  uint16_t scaled[2] = {};
  ASSERT_TRUE(dsc::applyWeightTransforms(reinterpret_cast<const uint8_t *>(half), DType::F16,
                                         {2}, {WeightTransform::scale(1.0 / 3.0)},
                                         reinterpret_cast<uint8_t *>(scaled))
                  .isOk());
  EXPECT_EQ(scaled[0], 0x3555);  // 1/3 to nearest half
  EXPECT_EQ(scaled[1], 0xb555);
}

TEST(WeightTransformsTest, TransformsThatDoNotApplyAreErrors) {
  DType dtype;
  dsrt::Shape shape;
  EXPECT_EQ(dsc::transformedType(DType::F32, {2, 3}, {WeightTransform::transpose({0, 0})}, dtype,
                                 shape).message(),
            "weight transform 0: transpose is not a permutation");
  EXPECT_EQ(dsc::transformedType(DType::F32, {2, 3}, {WeightTransform::slice(1, 2, 2)}, dtype,
                                 shape).message(),
            "weight transform 0: slice [2, +2) along axis 1 does not fit [2, 3]");
  EXPECT_EQ(dsc::transformedType(DType::I64, {2}, {WeightTransform::convert(DType::F16)}, dtype,
                                 shape).message(),
            "weight transform 0: cannot convert i64 to f16 (f32, f16 and bf16 convert)");
  EXPECT_EQ(dsc::transformedType(DType::F32, {2}, {WeightTransform::scale(0)}, dtype, shape)
                .message(),
            "weight transform 0: cannot scale f32 by 0.000000 (f32, f16 and bf16 scale, by a "
            "finite nonzero factor)");
}

// int8 values and scales of a float [rows, cols] weight, and what was lost.
struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> scales;
  dsrt::Shape scaleShape;
  dsc::QuantizationError error;
};

Quantized quantize(const std::vector<float> &w, const dsrt::Shape &shape, int64_t groupSize,
                   DType scaleDtype = DType::F32) {
  Quantized out;
  out.q.resize(w.size());
  const auto *source = reinterpret_cast<const uint8_t *>(w.data());
  dsrt::Status status = dsc::applyWeightTransforms(
      source, DType::F32, shape, {WeightTransform::quantizeInt8(groupSize, scaleDtype)},
      reinterpret_cast<uint8_t *>(out.q.data()), &out.error);
  EXPECT_TRUE(status.isOk()) << status.message();
  DType scaleType;
  EXPECT_TRUE(dsc::transformedType(DType::F32, shape, {WeightTransform::quantScales(groupSize)},
                                   scaleType, out.scaleShape)
                  .isOk());
  EXPECT_EQ(scaleType, DType::F32);
  out.scales.resize(dsrt::elementCount(out.scaleShape));
  status = dsc::applyWeightTransforms(source, DType::F32, shape,
                                      {WeightTransform::quantScales(groupSize)},
                                      reinterpret_cast<uint8_t *>(out.scales.data()));
  EXPECT_TRUE(status.isOk()) << status.message();
  return out;
}

TEST(WeightTransformsTest, Int8PerChannelRoundsHalfToEven) {
  // Row 0's largest |w| is 127/128, so its scale is exactly 1/128 and the others are -63.5,
  // 31.5 and 0.5 steps: ties, which go to the even neighbour.
  Quantized r = quantize({0.9921875f, -0.49609375f, 0.24609375f, 0.00390625f, 0, 0, 0, 0},
                         {2, 4}, 0);
  EXPECT_EQ(r.scaleShape, (dsrt::Shape{2, 1}));
  EXPECT_EQ(r.scales[0], 1.0f / 128.0f);
  EXPECT_EQ(r.scales[1], 0.0f);  // an all-zero row
  EXPECT_EQ(r.q, (std::vector<int8_t>{127, -64, 32, 0, 0, 0, 0, 0}));
}

TEST(WeightTransformsTest, Int8GroupsHaveTheirOwnScales) {
  // Scales 1/64 and 1/256 (largest |w| 127/64 and 127/256); -63.5 and 62.5 steps round to
  // even.
  Quantized r = quantize({1.984375f, -0.9921875f, 0.49609375f, 0.244140625f}, {1, 4}, 2);
  EXPECT_EQ(r.scaleShape, (dsrt::Shape{1, 2}));
  EXPECT_EQ(r.scales[0], 1.0f / 64.0f);
  EXPECT_EQ(r.scales[1], 1.0f / 256.0f);
  EXPECT_EQ(r.q, (std::vector<int8_t>{127, -64, 127, 62}));
}

// Against a direct reading of the definition: every element within half a step of its
// dequantized value (the step as stored in f16), the group's largest at +-127, and the
// reported errors recomputed here.
TEST(WeightTransformsTest, Int8ErrorIsHalfAStepOfTheStoredScale) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int64_t rows = 6, cols = 96, group = 32, groups = cols / group;
  std::vector<float> w(rows * cols);
  for (float &x : w)
    x = normal(random);
  Quantized r = quantize(w, {rows, cols}, group, DType::F16);
  double maxRelative = 0, lost = 0, magnitude = 0;
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t g = 0; g < groups; ++g) {
      float absMax = 0;
      int largest = 0;
      for (int64_t k = g * group; k < (g + 1) * group; ++k)
        absMax = std::max(absMax, std::fabs(w[row * cols + k]));
      // The scale as f16 stores it: an f32 scale of more precision would not be honest.
      uint16_t half;
      float scale = r.scales[row * groups + g], stored;
      dsrt::convertFloats(DType::F32, &scale, DType::F16, &half, 1);
      dsrt::convertFloats(DType::F16, &half, DType::F32, &stored, 1);
      for (int64_t k = g * group; k < (g + 1) * group; ++k) {
        const int q = r.q[row * cols + k];
        ASSERT_LE(std::abs(q), 127);
        largest = std::max(largest, std::abs(q));
        const double error = std::fabs(w[row * cols + k] - q * static_cast<double>(stored));
        EXPECT_LE(error, 0.5 * stored * (1 + 1e-6) + (std::abs(q) == 127 ? absMax * 1e-3 : 0))
            << "row " << row << " k " << k;
        maxRelative = std::max(maxRelative, error / absMax);
        lost += error;
        magnitude += std::fabs(w[row * cols + k]);
      }
      EXPECT_EQ(largest, 127);
    }
  ASSERT_TRUE(r.error.measured);
  EXPECT_EQ(r.error.groups, rows * groups);
  EXPECT_NEAR(r.error.maxRelative, maxRelative, 1e-9);
  EXPECT_NEAR(r.error.meanRelative, lost / magnitude, 1e-9);
  EXPECT_LE(r.error.maxRelative, 1.0 / 254 + 1e-3);
}

TEST(WeightTransformsTest, Int8RefusesWhatItCannotQuantize) {
  DType dtype;
  dsrt::Shape shape;
  EXPECT_EQ(dsc::transformedType(DType::F32, {2, 6}, {WeightTransform::quantizeInt8(4, DType::F16)},
                                 dtype, shape)
                .message(),
            "weight transform 0: int8 quantization: group size 4 does not divide the 6 input "
            "features");
  EXPECT_EQ(dsc::transformedType(DType::F32, {6}, {WeightTransform::quantScales(0)}, dtype, shape)
                .message(),
            "weight transform 0: int8 scales needs a float [out, in] weight, not f32 [6]");
  std::vector<float> huge = {1e7f, 1.0f};
  std::vector<int8_t> q(2);
  dsrt::Status status = dsc::applyWeightTransforms(
      reinterpret_cast<const uint8_t *>(huge.data()), DType::F32, {1, 2},
      {WeightTransform::quantizeInt8(0, DType::F16)}, reinterpret_cast<uint8_t *>(q.data()));
  EXPECT_NE(status.message().find("overflows f16"), std::string::npos) << status.message();
  std::vector<float> notFinite = {NAN, 1.0f};
  status = dsc::applyWeightTransforms(
      reinterpret_cast<const uint8_t *>(notFinite.data()), DType::F32, {1, 2},
      {WeightTransform::quantizeInt8(0, DType::F32)}, reinterpret_cast<uint8_t *>(q.data()));
  EXPECT_NE(status.message().find("not finite"), std::string::npos) << status.message();
}

// int4 (docs/int4.md): the codes of a float [rows, cols] weight, unpacked, and the scales.
struct Quantized4 {
  std::vector<int> codes;  // 0..15, one per element
  std::vector<uint8_t> packed;
  std::vector<float> scales;
  dsc::QuantizationError error;
};

Quantized4 quantize4(const std::vector<float> &w, const dsrt::Shape &shape, int64_t groupSize,
                     DType scaleDtype = DType::F32) {
  Quantized4 out;
  DType dtype;
  dsrt::Shape packedShape;
  EXPECT_TRUE(dsc::transformedType(DType::F32, shape,
                                   {WeightTransform::quantizeInt4(groupSize, scaleDtype)}, dtype,
                                   packedShape)
                  .isOk());
  EXPECT_EQ(dtype, DType::U8);
  EXPECT_EQ(packedShape, (dsrt::Shape{shape[0], shape[1] / 2}));
  out.packed.assign(w.size() / 2, 0xAB);  // every nibble must be written
  const auto *source = reinterpret_cast<const uint8_t *>(w.data());
  dsrt::Status status = dsc::applyWeightTransforms(
      source, DType::F32, shape, {WeightTransform::quantizeInt4(groupSize, scaleDtype)},
      out.packed.data(), &out.error);
  EXPECT_TRUE(status.isOk()) << status.message();
  for (uint8_t pair : out.packed) {
    out.codes.push_back(pair & 0xF);
    out.codes.push_back(pair >> 4);
  }
  out.scales.resize(static_cast<size_t>(shape[0] * shape[1] / groupSize));
  status = dsc::applyWeightTransforms(source, DType::F32, shape,
                                      {WeightTransform::quantScalesInt4(groupSize)},
                                      reinterpret_cast<uint8_t *>(out.scales.data()));
  EXPECT_TRUE(status.isOk()) << status.message();
  return out;
}

TEST(WeightTransformsTest, Int4PacksCodesLowNibbleFirst) {
  // Group 0 is exact at scale 1/8 (7, -4, 2 and 1 steps), which no other scale is: codes are
  // steps + 8. Group 1 is all zero.
  Quantized4 r = quantize4({0.875f, -0.5f, 0.25f, 0.125f, 0, 0, 0, 0}, {1, 8}, 4);
  EXPECT_EQ(r.scales, (std::vector<float>{0.125f, 0.0f}));
  EXPECT_EQ(r.codes, (std::vector<int>{15, 4, 10, 9, 8, 8, 8, 8}));
  EXPECT_EQ(r.packed[0], 0x4F);  // element 0 in the low nibble
}

// Against a direct reading of the definition: every element that is not clipped lies within
// half a step of its dequantized value (the step as f16 stores it); each group loses no more
// squared error than plain max-abs scaling (max|w| / 7), computed here; and the reported
// errors are recomputed here.
TEST(WeightTransformsTest, Int4ScaleSearchBeatsMaxAbsAndReportsItsError) {
  std::mt19937 random(11);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int64_t rows = 5, cols = 128, group = 32, groups = cols / group;
  std::vector<float> w(rows * cols);
  for (float &x : w)
    x = normal(random);
  Quantized4 r = quantize4(w, {rows, cols}, group, DType::F16);
  auto asF16 = [](float value) {
    uint16_t half;
    float back;
    dsrt::convertFloats(DType::F32, &value, DType::F16, &half, 1);
    dsrt::convertFloats(DType::F16, &half, DType::F32, &back, 1);
    return back;
  };
  double maxRelative = 0, lost = 0, magnitude = 0, searched = 0, plain = 0;
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t g = 0; g < groups; ++g) {
      float absMax = 0;
      for (int64_t k = g * group; k < (g + 1) * group; ++k)
        absMax = std::max(absMax, std::fabs(w[row * cols + k]));
      const float stored = asF16(r.scales[row * groups + g]);
      const float maxAbsScale = asF16(absMax / 7);
      double groupSearched = 0, groupPlain = 0;
      for (int64_t k = g * group; k < (g + 1) * group; ++k) {
        const float value = w[row * cols + k];
        const int q = r.codes[row * cols + k] - 8;
        const double error = std::fabs(value - q * static_cast<double>(stored));
        if (q > -8 && q < 7) {
          EXPECT_LE(error, 0.5 * stored * (1 + 1e-6)) << "row " << row << " k " << k;
        }
        const double plainLevel =
            std::clamp(std::nearbyint(value / maxAbsScale), -8.0f, 7.0f);
        groupSearched += error * error;
        groupPlain += std::pow(value - plainLevel * maxAbsScale, 2);
        maxRelative = std::max(maxRelative, error / absMax);
        lost += error;
        magnitude += std::fabs(value);
      }
      // The search sums its errors in f32 (WeightTransforms.cpp: it is an int4 compile's
      // cost), so between two nearly equal candidates it may take the one that is worse in
      // f64 by f32's rounding of a 32-term sum: 1e-5 relative covers it.
      EXPECT_LE(groupSearched, groupPlain * (1 + 1e-5)) << "row " << row << " group " << g;
      searched += groupSearched;
      plain += groupPlain;
    }
  EXPECT_LT(searched, plain) << "the search should beat max-abs scaling on normal weights";
  ASSERT_TRUE(r.error.measured);
  EXPECT_EQ(r.error.groups, rows * groups);
  EXPECT_NEAR(r.error.maxRelative, maxRelative, 1e-9);
  EXPECT_NEAR(r.error.meanRelative, lost / magnitude, 1e-9);
}

TEST(WeightTransformsTest, Int4RefusesOddOrNonDividingGroups) {
  DType dtype;
  dsrt::Shape shape;
  for (int64_t group : {0, 3, 5})
    EXPECT_EQ(dsc::transformedType(DType::F32, {2, 20},
                                   {WeightTransform::quantizeInt4(group, DType::F16)}, dtype,
                                   shape)
                  .message(),
              "weight transform 0: int4 quantization: group size " + std::to_string(group) +
                  " is not a positive even divisor of the 20 input features");
  EXPECT_EQ(dsc::transformedType(DType::F32, {20}, {WeightTransform::quantScalesInt4(4)}, dtype,
                                 shape)
                .message(),
            "weight transform 0: int4 scales needs a float [out, in] weight, not f32 [20]");
}

} // namespace
