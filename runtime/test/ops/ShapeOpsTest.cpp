// Shape, data-movement and indexing kernels: ONNX's index arithmetic and the errors.
#include "OpTestUtil.h"

#include <limits>

namespace dsrt::test {
namespace {

using ops::Attr;
using ops::AttrMap;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

OwnedTensor iota(Shape shape) {
  OwnedTensor t(DType::F32, shape);
  float *p = reinterpret_cast<float *>(t.storage.data());
  for (int64_t i = 0; i < elementCount(shape); ++i)
    p[i] = float(i);
  return t;
}

TEST(Shape, ShapeAndSize) {
  OwnedTensor x = iota({2, 3, 4});
  EXPECT_EQ(values<int64_t>(run1("Shape", {&x})), (std::vector<int64_t>{2, 3, 4}));
  AttrMap range{{"start", Attr::ofInt(-2)}, {"end", Attr::ofInt(100)}};
  EXPECT_EQ(values<int64_t>(run1("Shape", {&x}, range)), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(run1("Shape", {&x}, {{"start", Attr::ofInt(2)}, {"end", Attr::ofInt(1)}}).shape,
            (Shape{0}));
  EXPECT_EQ(values<int64_t>(run1("Size", {&x}))[0], 24);
  // Shape and Size read no values: compute() accepts inputs without data.
  TensorRef shapeOnly{DType::F32, {5, 6}, nullptr};
  OwnedTensor out(DType::I64, {2});
  TensorRef outRef = out.ref();
  ASSERT_TRUE(ops::compute("Shape", {}, {&shapeOnly}, {&outRef}).isOk());
  EXPECT_EQ(values<int64_t>(out), (std::vector<int64_t>{5, 6}));
}

TEST(Shape, ReshapeZeroMinusOneAndAllowzero) {
  OwnedTensor x = iota({2, 3, 4});
  OwnedTensor shape = i64({3}, {0, -1, 2});
  EXPECT_EQ(run1("Reshape", {&x, &shape}).shape, (Shape{2, 6, 2}));
  OwnedTensor two = i64({2}, {-1, -1});
  EXPECT_NE(errorOf("Reshape", {&x, &two}).find("more than one -1"), std::string::npos);
  OwnedTensor wrong = i64({2}, {5, 5});
  EXPECT_NE(errorOf("Reshape", {&x, &wrong}).find("cannot reshape"), std::string::npos);
  OwnedTensor empty(DType::F32, {0, 3});
  OwnedTensor zeros = i64({2}, {3, 0});
  AttrMap allowZero{{"allowzero", Attr::ofInt(1)}};
  EXPECT_EQ(run1("Reshape", {&empty, &zeros}, allowZero).shape, (Shape{3, 0}));
  OwnedTensor zeroAndMinus = i64({2}, {0, -1});
  EXPECT_NE(errorOf("Reshape", {&empty, &zeroAndMinus}, allowZero), "");
  // Without the shape's values the output shape is unknown: an error that says so.
  TensorRef data = x.ref();
  TensorRef unknown{DType::I64, {3}, nullptr};
  std::vector<ops::OutputSpec> specs;
  Status status = ops::inferShapes("Reshape", {}, {&data, &unknown}, 1, specs);
  EXPECT_NE(status.message().find("'shape' is unknown"), std::string::npos) << status.message();
}

// Every op whose output shape depends on an input's values says so with kUnknownValue when
// that value is missing (the compiler then sizes the output when the step runs).
TEST(Shape, UnknownShapeValuesAreReportedAsSuch) {
  TensorRef data{DType::F32, {2, 3}, nullptr};
  TensorRef ints{DType::I64, {2}, nullptr}, scalar{DType::I64, {}, nullptr};
  TensorRef one{DType::I64, {1}, nullptr};
  struct Case {
    const char *op;
    ops::Inputs inputs;
    size_t outputs;
  };
  std::vector<Case> cases = {
      {"Reshape", {&data, &ints}, 1},      {"Expand", {&data, &ints}, 1},
      {"Tile", {&data, &ints}, 1},         {"ConstantOfShape", {&ints}, 1},
      {"Range", {&scalar, &scalar, &scalar}, 1},
      {"Squeeze", {&data, &one}, 1},       {"Unsqueeze", {&data, &one}, 1},
      {"Split", {&data, &ints}, 2},        {"ReduceSum", {&data, &one}, 1},
      {"Slice", {&data, &one, &one, nullptr, nullptr}, 1}};
  for (const Case &c : cases) {
    std::vector<ops::OutputSpec> specs;
    Status status = ops::inferShapes(c.op, {}, c.inputs, c.outputs, specs);
    EXPECT_NE(status.message().find(ops::kUnknownValue), std::string::npos)
        << c.op << ": " << status.message();
  }
}

TEST(Shape, FlattenSqueezeUnsqueeze) {
  OwnedTensor x = iota({2, 3, 4});
  EXPECT_EQ(run1("Flatten", {&x}, {{"axis", Attr::ofInt(-1)}}).shape, (Shape{6, 4}));
  EXPECT_EQ(run1("Flatten", {&x}, {{"axis", Attr::ofInt(3)}}).shape, (Shape{24, 1}));
  EXPECT_EQ(run1("Flatten", {&x}, {{"axis", Attr::ofInt(0)}}).shape, (Shape{1, 24}));
  OwnedTensor ones = iota({1, 3, 1});
  EXPECT_EQ(run1("Squeeze", {&ones, nullptr}).shape, (Shape{3}));
  OwnedTensor last = i64({1}, {-1});
  EXPECT_EQ(run1("Squeeze", {&ones, &last}).shape, (Shape{1, 3}));
  OwnedTensor middle = i64({1}, {1});
  EXPECT_NE(errorOf("Squeeze", {&ones, &middle}).find("not 1"), std::string::npos);
  OwnedTensor axes = i64({2}, {-1, 0});
  EXPECT_EQ(run1("Unsqueeze", {&x, &axes}).shape, (Shape{1, 2, 3, 4, 1}));
  OwnedTensor twice = i64({2}, {1, 1});
  EXPECT_NE(errorOf("Unsqueeze", {&x, &twice}).find("more than once"), std::string::npos);
}

TEST(Shape, ConstantOfShapeAndRange) {
  OwnedTensor dims = i64({2}, {2, 3});
  OwnedTensor zeros = run1("ConstantOfShape", {&dims});
  EXPECT_EQ(zeros.dtype, DType::F32);
  EXPECT_EQ(values<float>(zeros), std::vector<float>(6, 0.0f));
  AttrMap seven{{"value", Attr::ofTensor(i64({1}, {7}))}};
  EXPECT_EQ(values<int64_t>(run1("ConstantOfShape", {&dims}, seven)),
            std::vector<int64_t>(6, 7));
  OwnedTensor scalarShape = i64({0}, {});
  EXPECT_EQ(run1("ConstantOfShape", {&scalarShape}).shape, Shape{});
  OwnedTensor start = i64({}, {10}), limit = i64({}, {1}), delta = i64({}, {-3});
  EXPECT_EQ(values<int64_t>(run1("Range", {&start, &limit, &delta})),
            (std::vector<int64_t>{10, 7, 4}));
  OwnedTensor up = i64({}, {3});
  EXPECT_EQ(run1("Range", {&start, &limit, &up}).shape, (Shape{0}));
  OwnedTensor fs = f32({}, {0}), fl = f32({}, {1}), fd = f32({}, {0.3f});
  EXPECT_EQ(run1("Range", {&fs, &fl, &fd}).shape, (Shape{4}));
  OwnedTensor zero = i64({}, {0});
  EXPECT_NE(errorOf("Range", {&start, &limit, &zero}).find("zero"), std::string::npos);
  OwnedTensor huge = i64({}, {kMax}), tiny = i64({}, {kMin}), one = i64({}, {1});
  EXPECT_NE(errorOf("Range", {&tiny, &huge, &one}).find("too many"), std::string::npos);
}

TEST(Movement, SliceClampsAndStepsBackwards) {
  OwnedTensor x = iota({5});
  auto slice = [&](std::vector<int64_t> s, std::vector<int64_t> e, std::vector<int64_t> st) {
    OwnedTensor starts = i64({int64_t(s.size())}, s), ends = i64({int64_t(e.size())}, e);
    OwnedTensor steps = i64({int64_t(st.size())}, st);
    return values<float>(run1("Slice", {&x, &starts, &ends, nullptr, &steps}));
  };
  EXPECT_EQ(slice({1}, {kMax}, {1}), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(slice({-1}, {kMin}, {-1}), (std::vector<float>{4, 3, 2, 1, 0}));
  EXPECT_EQ(slice({10}, {-10}, {-2}), (std::vector<float>{4, 2, 0}));
  EXPECT_EQ(slice({-100}, {2}, {1}), (std::vector<float>{0, 1}));
  EXPECT_EQ(slice({3}, {1}, {1}), (std::vector<float>{}));
  EXPECT_EQ(slice({0}, {5}, {kMax}), (std::vector<float>{0}));
  EXPECT_EQ(slice({4}, {kMin}, {kMin}), (std::vector<float>{4}));
  OwnedTensor m = iota({3, 4});
  OwnedTensor starts = i32({1}, {1}), ends = i32({1}, {3}), axes = i32({1}, {-1});
  OwnedTensor y = run1("Slice", {&m, &starts, &ends, &axes, nullptr});
  EXPECT_EQ(y.shape, (Shape{3, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  OwnedTensor zeroStep = i32({1}, {0});
  EXPECT_NE(errorOf("Slice", {&m, &starts, &ends, &axes, &zeroStep}).find("zero"),
            std::string::npos);
  OwnedTensor empty(DType::F32, {0});
  OwnedTensor back = i64({1}, {-1}), toFront = i64({1}, {kMin}), minusOne = i64({1}, {-1});
  EXPECT_EQ(run1("Slice", {&empty, &back, &toFront, nullptr, &minusOne}).shape, (Shape{0}));
}

TEST(Movement, TransposeExpandTileConcatSplit) {
  OwnedTensor x = iota({2, 3});
  EXPECT_EQ(values<float>(run1("Transpose", {&x})), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_NE(errorOf("Transpose", {&x}, {{"perm", Attr::ofInts({0, 0})}}), "");
  OwnedTensor column = f32({2, 1}, {1, 2});
  OwnedTensor shape = i64({3}, {2, 1, 3});
  OwnedTensor expanded = run1("Expand", {&column, &shape});
  EXPECT_EQ(expanded.shape, (Shape{2, 2, 3}));
  EXPECT_EQ(values<float>(expanded)[3], 2);
  OwnedTensor repeats = i64({2}, {2, 2});
  EXPECT_EQ(values<float>(run1("Tile", {&column, &repeats})),
            (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2}));
  OwnedTensor y = iota({2, 1});
  AttrMap axis1{{"axis", Attr::ofInt(-1)}};
  EXPECT_EQ(values<float>(run1("Concat", {&x, &y}, axis1)),
            (std::vector<float>{0, 1, 2, 0, 3, 4, 5, 1}));
  EXPECT_NE(errorOf("Concat", {&x, &y}, {{"axis", Attr::ofInt(0)}}).find("does not match"),
            std::string::npos);
  EXPECT_NE(errorOf("Concat", {&x, &y}).find("required"), std::string::npos);
  // Equal parts with the last one smaller (opset 18), or the sizes given.
  OwnedTensor seven = iota({7});
  std::vector<OwnedTensor> parts;
  ASSERT_TRUE(run("Split", {&seven, nullptr}, parts, {}, 3).isOk());
  EXPECT_EQ(parts[0].shape, (Shape{3}));
  EXPECT_EQ(values<float>(parts[2]), (std::vector<float>{6}));
  OwnedTensor sizes = i64({2}, {2, 5});
  ASSERT_TRUE(run("Split", {&seven, &sizes}, parts, {}, 2).isOk());
  EXPECT_EQ(values<float>(parts[0]), (std::vector<float>{0, 1}));
  OwnedTensor badSizes = i64({2}, {2, 4});
  EXPECT_NE(errorOf("Split", {&seven, &badSizes}, {}, 2).find("add up"), std::string::npos);
  OwnedTensor five = iota({5});
  EXPECT_NE(errorOf("Split", {&five, nullptr}, {}, 4), "");  // 2, 2, 2 leaves -1
}

TEST(Movement, TriluWithK) {
  OwnedTensor x = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(values<float>(run1("Trilu", {&x, nullptr})),
            (std::vector<float>{1, 2, 3, 0, 5, 6, 0, 0, 9}));
  OwnedTensor k = i64({}, {-1});
  EXPECT_EQ(values<float>(run1("Trilu", {&x, &k}, {{"upper", Attr::ofInt(0)}})),
            (std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  OwnedTensor far = i64({}, {kMin});
  EXPECT_EQ(values<float>(run1("Trilu", {&x, &far})), values<float>(x));
  OwnedTensor vector = f32({3}, {1, 2, 3});
  EXPECT_NE(errorOf("Trilu", {&vector, nullptr}).find("rank"), std::string::npos);
}

TEST(Indexing, GatherNegativeAndOutOfRange) {
  OwnedTensor data = iota({3, 2});
  OwnedTensor indices = i64({2, 2}, {0, -1, 2, 1});
  OwnedTensor y = run1("Gather", {&data, &indices});
  EXPECT_EQ(y.shape, (Shape{2, 2, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{0, 1, 4, 5, 4, 5, 2, 3}));
  OwnedTensor column = i32({}, {-1});
  OwnedTensor c = run1("Gather", {&data, &column}, {{"axis", Attr::ofInt(1)}});
  EXPECT_EQ(c.shape, (Shape{3}));
  EXPECT_EQ(values<float>(c), (std::vector<float>{1, 3, 5}));
  OwnedTensor outside = i64({1}, {3});
  EXPECT_NE(errorOf("Gather", {&data, &outside}).find("out of range"), std::string::npos);
  OwnedTensor before = i64({1}, {-4});
  EXPECT_NE(errorOf("Gather", {&data, &before}).find("out of range"), std::string::npos);
}

// The ONNX node tests check GatherND's values (gathernd_example_*); these check the
// index-tuple form the dynamo exporter uses on a padding mask, and the refusals.
TEST(Indexing, GatherNDTuplesAndBatchDims) {
  OwnedTensor mask = iota({2, 3});
  OwnedTensor pairs = i64({2, 2, 2}, {0, 2, 1, -1, 1, 0, 0, 0});
  OwnedTensor picked = run1("GatherND", {&mask, &pairs});
  EXPECT_EQ(picked.shape, (Shape{2, 2}));
  EXPECT_EQ(values<float>(picked), (std::vector<float>{2, 5, 3, 0}));
  OwnedTensor rows = i64({1}, {1});
  OwnedTensor row = run1("GatherND", {&mask, &rows});
  EXPECT_EQ(row.shape, (Shape{3}));
  EXPECT_EQ(values<float>(row), (std::vector<float>{3, 4, 5}));
  OwnedTensor perBatch = i64({2, 1}, {2, 0});
  OwnedTensor byBatch = run1("GatherND", {&mask, &perBatch}, {{"batch_dims", Attr::ofInt(1)}});
  EXPECT_EQ(byBatch.shape, (Shape{2}));
  EXPECT_EQ(values<float>(byBatch), (std::vector<float>{2, 3}));
  OwnedTensor outside = i64({1, 2}, {2, 0});
  EXPECT_NE(errorOf("GatherND", {&mask, &outside}).find("out of range"), std::string::npos);
  OwnedTensor tooLong = i64({1, 3}, {0, 0, 0});
  EXPECT_NE(errorOf("GatherND", {&mask, &tooLong}).find("do not fit"), std::string::npos);
}

TEST(Indexing, GatherElementsAndScatterND) {
  OwnedTensor data = iota({2, 2});
  OwnedTensor indices = i64({2, 2}, {1, 0, -1, 1});
  EXPECT_EQ(values<float>(run1("GatherElements", {&data, &indices}, {{"axis", Attr::ofInt(1)}})),
            (std::vector<float>{1, 0, 3, 3}));
  OwnedTensor bad = i64({1, 1}, {2});
  EXPECT_NE(errorOf("GatherElements", {&data, &bad}).find("out of range"), std::string::npos);
  OwnedTensor tooWide = i64({1, 3}, {0, 0, 0});
  EXPECT_NE(errorOf("GatherElements", {&data, &tooWide}), "");

  OwnedTensor where = i64({2, 1}, {1, 1});
  OwnedTensor updates = f32({2, 2}, {10, 20, 30, 40});
  AttrMap add{{"reduction", Attr::ofString("add")}};
  EXPECT_EQ(values<float>(run1("ScatterND", {&data, &where, &updates}, add)),
            (std::vector<float>{0, 1, 42, 63}));
  OwnedTensor point = i64({1, 2}, {-1, 0});
  OwnedTensor one = f32({1}, {-5});
  EXPECT_EQ(values<float>(run1("ScatterND", {&data, &point, &one})),
            (std::vector<float>{0, 1, -5, 3}));
  OwnedTensor outside = i64({1, 2}, {0, 2});
  EXPECT_NE(errorOf("ScatterND", {&data, &outside, &one}).find("out of range"),
            std::string::npos);
  EXPECT_NE(errorOf("ScatterND", {&data, &where, &one}).find("updates"), std::string::npos);
}

TEST(Dropout, IdentityWithMask) {
  OwnedTensor x = iota({3});
  std::vector<OwnedTensor> outputs;
  ASSERT_TRUE(run("Dropout", {&x, nullptr, nullptr}, outputs, {}, 2).isOk());
  EXPECT_EQ(values<float>(outputs[0]), values<float>(x));
  EXPECT_EQ(values<uint8_t>(outputs[1]), (std::vector<uint8_t>{1, 1, 1}));
  OwnedTensor training = boolean({}, {1}), ratio = f32({}, {0.5f}), none = f32({}, {0});
  EXPECT_NE(errorOf("Dropout", {&x, &ratio, &training}).find("training"), std::string::npos);
  EXPECT_EQ(errorOf("Dropout", {&x, &none, &training}), "");
  // The output shape does not depend on training_mode, so shapes alone suffice.
  TensorRef data = x.ref(), unknownMode{DType::Bool, {}, nullptr};
  std::vector<ops::OutputSpec> specs;
  EXPECT_TRUE(ops::inferShapes("Dropout", {}, {&data, nullptr, &unknownMode}, 2, specs).isOk());
}

} // namespace
} // namespace dsrt::test
