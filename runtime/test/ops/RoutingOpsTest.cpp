// TopK, OneHot, NonZero and ScatterElements, the ops mixture-of-experts routing uses: the
// cases ONNX's node tests leave out (ties, NaN, indices out of range, unknown values). The
// expected values are worked out by hand from ONNX's operator definitions.
#include "OpTestUtil.h"

#include <cmath>
#include <limits>

namespace dsrt::test {
namespace {

using ops::Attr;
using ops::AttrMap;

// Runs TopK; its two outputs, values and indices.
std::vector<OwnedTensor> topK(const OwnedTensor &x, int64_t k, AttrMap attrs = {}) {
  OwnedTensor kTensor = i64({1}, {k});
  std::vector<OwnedTensor> outputs;
  Status status = run("TopK", {&x, &kTensor}, outputs, attrs, 2);
  EXPECT_TRUE(status.isOk()) << status.message();
  outputs.resize(2);
  return outputs;
}

TEST(TopK, EqualValuesKeepTheLowerIndexFirst) {
  OwnedTensor x = f32({2, 4}, {1, 3, 3, 2, 5, -1, 5, 5});
  auto largest = topK(x, 2);
  EXPECT_EQ(largest[0].shape, (Shape{2, 2}));
  EXPECT_EQ(values<float>(largest[0]), (std::vector<float>{3, 3, 5, 5}));
  EXPECT_EQ(values<int64_t>(largest[1]), (std::vector<int64_t>{1, 2, 0, 2}));
  auto smallest = topK(x, 3, {{"largest", Attr::ofInt(0)}});
  EXPECT_EQ(values<float>(smallest[0]), (std::vector<float>{1, 2, 3, -1, 5, 5}));
  EXPECT_EQ(values<int64_t>(smallest[1]), (std::vector<int64_t>{0, 3, 1, 1, 0, 2}));
}

TEST(TopK, AlongAnInnerAxis) {
  OwnedTensor x = i32({3, 2}, {1, 4, 3, 2, 3, 5});
  auto top = topK(x, 1, {{"axis", Attr::ofInt(0)}});
  EXPECT_EQ(top[0].shape, (Shape{1, 2}));
  EXPECT_EQ(values<int32_t>(top[0]), (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(values<int64_t>(top[1]), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(topK(x, 0, {{"axis", Attr::ofInt(0)}})[0].shape, (Shape{0, 2}));
}

// NaN ranks above every number, as in PyTorch's topk.
TEST(TopK, NaNIsTheLargest) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  OwnedTensor x = f32({4}, {1, nan, 2, -3});
  auto largest = topK(x, 2);
  EXPECT_TRUE(std::isnan(values<float>(largest[0])[0]));
  EXPECT_EQ(values<int64_t>(largest[1]), (std::vector<int64_t>{1, 2}));
  auto smallest = topK(x, 3, {{"largest", Attr::ofInt(0)}});
  EXPECT_EQ(values<int64_t>(smallest[1]), (std::vector<int64_t>{3, 0, 2}));
}

TEST(TopK, BadKIsRefusedAndAnUnknownKIsReported) {
  OwnedTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  OwnedTensor tooMany = i64({1}, {4}), negative = i64({1}, {-1});
  EXPECT_NE(errorOf("TopK", {&x, &tooMany}, {}, 2).find("K 4 is outside [0, 3]"),
            std::string::npos);
  EXPECT_NE(errorOf("TopK", {&x, &negative}, {}, 2).find("K -1"), std::string::npos);
  OwnedTensor scalar = f32({}, {1}), one = i64({1}, {1});
  EXPECT_NE(errorOf("TopK", {&scalar, &one}, {}, 2).find("rank 1 or more"), std::string::npos);

  TensorRef data = x.ref(), unknown{DType::I64, {1}, nullptr};
  std::vector<ops::OutputSpec> specs;
  Status status = ops::inferShapes("TopK", {}, {&data, &unknown}, 2, specs);
  EXPECT_NE(status.message().find(ops::kUnknownValue), std::string::npos) << status.message();
}

TEST(OneHot, NegativeAndOutOfRangeIndices) {
  // -1 is depth - 1; 5 is outside [-3, 3) and sets nothing.
  OwnedTensor indices = i64({2, 2}, {1, -1, 5, 0});
  OwnedTensor depth = i64({}, {3});
  OwnedTensor onOff = f32({2}, {0, 7});
  OwnedTensor last = run1("OneHot", {&indices, &depth, &onOff});
  EXPECT_EQ(last.shape, (Shape{2, 2, 3}));
  EXPECT_EQ(values<float>(last),
            (std::vector<float>{0, 7, 0, 0, 0, 7, 0, 0, 0, 7, 0, 0}));
  OwnedTensor first = run1("OneHot", {&indices, &depth, &onOff}, {{"axis", Attr::ofInt(0)}});
  EXPECT_EQ(first.shape, (Shape{3, 2, 2}));
  EXPECT_EQ(values<float>(first),
            (std::vector<float>{0, 0, 0, 7, 7, 0, 0, 0, 0, 7, 0, 0}));
}

// ONNX casts non-integer indices and depth to integers (truncating).
TEST(OneHot, FloatIndicesAndDepthAreTruncated) {
  OwnedTensor indices = f32({3}, {1.7f, -0.5f, std::numeric_limits<float>::infinity()});
  OwnedTensor depth = f32({1}, {2.9f});
  OwnedTensor onOff = i64({2}, {-1, 1});
  OwnedTensor out = run1("OneHot", {&indices, &depth, &onOff});
  EXPECT_EQ(out.shape, (Shape{3, 2}));
  EXPECT_EQ(values<int64_t>(out), (std::vector<int64_t>{-1, 1, 1, -1, -1, -1}));
}

TEST(OneHot, BadDepthOrValuesAreRefused) {
  OwnedTensor indices = i64({2}, {0, 1});
  OwnedTensor zero = i64({}, {0}), depth = i64({}, {2});
  OwnedTensor onOff = f32({2}, {0, 1}), three = f32({3}, {0, 1, 2});
  EXPECT_NE(errorOf("OneHot", {&indices, &zero, &onOff}).find("positive"), std::string::npos);
  EXPECT_NE(errorOf("OneHot", {&indices, &depth, &three}).find("[off_value, on_value]"),
            std::string::npos);
  EXPECT_NE(errorOf("OneHot", {&indices, &depth, &onOff}, {{"axis", Attr::ofInt(2)}}), "");
  OwnedTensor huge = i64({}, {int64_t(1) << 50});
  EXPECT_NE(errorOf("OneHot", {&indices, &huge, &onOff}).find("too many elements"),
            std::string::npos);

  TensorRef known = indices.ref(), unknown{DType::I64, {}, nullptr}, pair = onOff.ref();
  std::vector<ops::OutputSpec> specs;
  Status status = ops::inferShapes("OneHot", {}, {&known, &unknown, &pair}, 1, specs);
  EXPECT_NE(status.message().find(ops::kUnknownValue), std::string::npos) << status.message();
}

TEST(NonZero, CoordinatesInRowMajorOrder) {
  OwnedTensor x = f32({3, 2}, {1, 0, 0, -2, 3, -0.0f});
  OwnedTensor y = run1("NonZero", {&x});
  EXPECT_EQ(y.shape, (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{0, 1, 2, 0, 1, 0}));
  OwnedTensor mask = boolean({4}, {0, 1, 0, 1});
  EXPECT_EQ(values<int64_t>(run1("NonZero", {&mask})), (std::vector<int64_t>{1, 3}));
  float nan = std::numeric_limits<float>::quiet_NaN();
  OwnedTensor withNaN = f32({2}, {nan, 0});
  EXPECT_EQ(values<int64_t>(run1("NonZero", {&withNaN})), (std::vector<int64_t>{0}));
}

// A scalar reads as one element of a vector; none non-zero gives an empty row.
TEST(NonZero, ScalarsAndNothing) {
  OwnedTensor five = i64({}, {5}), zero = i64({}, {0}), zeros = f32({2, 2}, {0, 0, 0, 0});
  EXPECT_EQ(run1("NonZero", {&five}).shape, (Shape{1, 1}));
  EXPECT_EQ(run1("NonZero", {&zero}).shape, (Shape{1, 0}));
  EXPECT_EQ(run1("NonZero", {&zeros}).shape, (Shape{2, 0}));

  TensorRef unknown{DType::F32, {2, 3}, nullptr};
  std::vector<ops::OutputSpec> specs;
  Status status = ops::inferShapes("NonZero", {}, {&unknown}, 1, specs);
  EXPECT_NE(status.message().find(ops::kUnknownValue), std::string::npos) << status.message();
}

TEST(ScatterElements, WritesAlongTheAxis) {
  // ONNX's example: each update lands in its own column at the row its index names.
  OwnedTensor data = f32({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0});
  OwnedTensor indices = i64({2, 3}, {1, 0, 2, 0, 2, 1});
  OwnedTensor updates = f32({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f});
  EXPECT_EQ(values<float>(run1("ScatterElements", {&data, &indices, &updates})),
            (std::vector<float>{2.0f, 1.1f, 0, 1.0f, 0, 2.2f, 0, 2.1f, 1.2f}));
  OwnedTensor row = f32({1, 5}, {1, 2, 3, 4, 5});
  OwnedTensor negative = i32({1, 2}, {1, -3});
  OwnedTensor two = f32({1, 2}, {1.1f, 2.1f});
  EXPECT_EQ(values<float>(run1("ScatterElements", {&row, &negative, &two},
                               {{"axis", Attr::ofInt(1)}})),
            (std::vector<float>{1, 1.1f, 2.1f, 4, 5}));
}

TEST(ScatterElements, DuplicateIndicesUnderEachReduction) {
  OwnedTensor row = f32({1, 5}, {1, 2, 3, 4, 5});
  OwnedTensor same = i64({1, 2}, {1, 1});
  OwnedTensor two = f32({1, 2}, {1.5f, 3});
  auto scatter = [&](const char *reduction) {
    return values<float>(run1("ScatterElements", {&row, &same, &two},
                              {{"axis", Attr::ofInt(1)},
                               {"reduction", Attr::ofString(reduction)}}));
  };
  EXPECT_EQ(scatter("none"), (std::vector<float>{1, 3, 3, 4, 5}));  // the last one wins
  EXPECT_EQ(scatter("add"), (std::vector<float>{1, 6.5f, 3, 4, 5}));
  EXPECT_EQ(scatter("mul"), (std::vector<float>{1, 9, 3, 4, 5}));
  EXPECT_EQ(scatter("max"), (std::vector<float>{1, 3, 3, 4, 5}));
  EXPECT_EQ(scatter("min"), (std::vector<float>{1, 1.5f, 3, 4, 5}));
}

TEST(ScatterElements, BadIndicesAreErrorsNeverWrites) {
  OwnedTensor data = f32({2, 2}, {0, 1, 2, 3});
  OwnedTensor outside = i64({1, 2}, {0, 2}), below = i64({1, 2}, {-3, 0});
  OwnedTensor updates = f32({1, 2}, {9, 9});
  AttrMap axis1{{"axis", Attr::ofInt(1)}};
  EXPECT_NE(errorOf("ScatterElements", {&data, &outside, &updates}, axis1)
                .find("index 2 is out of range for a dimension of size 2"),
            std::string::npos);
  EXPECT_NE(errorOf("ScatterElements", {&data, &below, &updates}).find("index -3"),
            std::string::npos);
  OwnedTensor wide = i64({1, 3}, {0, 0, 0}), three = f32({1, 3}, {9, 9, 9});
  EXPECT_NE(errorOf("ScatterElements", {&data, &wide, &three}).find("exceed data"),
            std::string::npos);
  OwnedTensor one = f32({1, 1}, {9});
  EXPECT_NE(errorOf("ScatterElements", {&data, &outside, &one}).find("updates have shape"),
            std::string::npos);
  OwnedTensor flags = boolean({2}, {0, 1});
  OwnedTensor at = i64({1}, {0});
  OwnedTensor flag = boolean({1}, {1});
  EXPECT_NE(errorOf("ScatterElements", {&flags, &at, &flag},
                    {{"reduction", Attr::ofString("add")}})
                .find("needs numbers"),
            std::string::npos);
  EXPECT_EQ(values<uint8_t>(run1("ScatterElements", {&flags, &at, &flag})),
            (std::vector<uint8_t>{1, 1}));
}

} // namespace
} // namespace dsrt::test
