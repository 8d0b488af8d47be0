// The plan writer's weight transforms against hand-computed results.
#include "codegen/WeightTransforms.h"

#include <gtest/gtest.h>

#include <cstring>

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
}

} // namespace
