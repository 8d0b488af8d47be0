// Elementwise, cast, reduction, matmul and normalisation kernels: the tricky cases of ONNX's
// semantics and the errors.
#include "OpTestUtil.h"

#include <algorithm>

#include <cmath>
#include <limits>

namespace dsrt::test {
namespace {

using ops::Attr;
using ops::AttrMap;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Binary, BroadcastsLikeNumpy) {
  OwnedTensor a = f32({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  OwnedTensor b = f32({4, 1}, {10, 20, 30, 40});
  OwnedTensor y = run1("Add", {&a, &b});
  ASSERT_EQ(y.shape, (Shape{2, 4, 3}));
  std::vector<float> v = values<float>(y);
  EXPECT_EQ(v[0], 11);
  EXPECT_EQ(v[3 * 3 + 2], 43);            // [0, 3, 2]
  EXPECT_EQ(v[12 + 2 * 3 + 1], 35);       // [1, 2, 1]
  OwnedTensor c = f32({2, 2}, {1, 2, 3, 4});
  EXPECT_NE(errorOf("Mul", {&a, &c}).find("do not broadcast"), std::string::npos);
  OwnedTensor i = i64({1}, {1});
  EXPECT_NE(errorOf("Add", {&c, &i}).find("same dtype"), std::string::npos);
}

TEST(Binary, IntegerDivisionAndModulo) {
  OwnedTensor a = i64({4}, {7, -7, 7, -7});
  OwnedTensor b = i64({4}, {2, 2, -2, -2});
  EXPECT_EQ(values<int64_t>(run1("Div", {&a, &b})), (std::vector<int64_t>{3, -3, -3, 3}));
  // fmod = 0: the sign of the divisor (Python's %); fmod = 1: the sign of the dividend.
  EXPECT_EQ(values<int64_t>(run1("Mod", {&a, &b})), (std::vector<int64_t>{1, 1, -1, -1}));
  AttrMap cStyle{{"fmod", Attr::ofInt(1)}};
  EXPECT_EQ(values<int64_t>(run1("Mod", {&a, &b}, cStyle)),
            (std::vector<int64_t>{1, -1, 1, -1}));
  OwnedTensor zero = i64({1}, {0});
  EXPECT_NE(errorOf("Div", {&a, &zero}).find("division by zero"), std::string::npos);
  EXPECT_NE(errorOf("Mod", {&a, &zero}).find("division by zero"), std::string::npos);
  // INT64_MIN / -1 overflows; it wraps instead of trapping.
  OwnedTensor minimum = i64({1}, {std::numeric_limits<int64_t>::min()});
  OwnedTensor minusOne = i64({1}, {-1});
  EXPECT_EQ(values<int64_t>(run1("Div", {&minimum, &minusOne}))[0],
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(values<int64_t>(run1("Mod", {&minimum, &minusOne}))[0], 0);
  OwnedTensor fa = f32({2}, {-7.5f, 7.5f}), fb = f32({2}, {2, -2});
  EXPECT_EQ(values<float>(run1("Mod", {&fa, &fb})), (std::vector<float>{0.5f, -0.5f}));
  EXPECT_EQ(values<float>(run1("Mod", {&fa, &fb}, cStyle)), (std::vector<float>{-1.5f, 1.5f}));
}

TEST(Binary, PowMixedTypes) {
  OwnedTensor base = i64({3}, {2, 3, -2});
  OwnedTensor exponent = i64({3}, {10, -1, 3});
  EXPECT_EQ(values<int64_t>(run1("Pow", {&base, &exponent})),
            (std::vector<int64_t>{1024, 0, -8}));
  OwnedTensor half = f32({1}, {0.5f});
  OwnedTensor x = f32({2}, {4, 9});
  EXPECT_EQ(values<float>(run1("Pow", {&x, &half})), (std::vector<float>{2, 3}));
  OwnedTensor intExponent = i32({1}, {2});
  EXPECT_EQ(values<float>(run1("Pow", {&x, &intExponent})), (std::vector<float>{16, 81}));
}

TEST(Binary, MaxMinPropagateNaNAndTakeManyInputs) {
  OwnedTensor a = f32({3}, {1, kNaN, 5});
  OwnedTensor b = f32({1}, {2});
  OwnedTensor c = f32({3}, {0, 0, 7});
  std::vector<float> m = values<float>(run1("Max", {&a, &b, &c}));
  EXPECT_EQ(m[0], 2);
  EXPECT_TRUE(std::isnan(m[1]));
  EXPECT_EQ(m[2], 7);
  EXPECT_EQ(values<float>(run1("Min", {&a}))[2], 5);
}

TEST(Binary, ComparisonsLogicAndWhere) {
  OwnedTensor a = f32({3}, {1, 2, 3}), b = f32({1}, {2});
  EXPECT_EQ(values<uint8_t>(run1("Less", {&a, &b})), (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_EQ(values<uint8_t>(run1("GreaterOrEqual", {&a, &b})), (std::vector<uint8_t>{0, 1, 1}));
  OwnedTensor p = boolean({2, 1}, {1, 0}), q = boolean({2}, {1, 0});
  EXPECT_EQ(values<uint8_t>(run1("And", {&p, &q})), (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ(values<uint8_t>(run1("Or", {&p, &q})), (std::vector<uint8_t>{1, 1, 1, 0}));
  EXPECT_EQ(values<uint8_t>(run1("Equal", {&p, &p})), (std::vector<uint8_t>{1, 1}));
  OwnedTensor x = f32({2, 1}, {10, 20}), y = f32({3}, {-1, -2, -3});
  EXPECT_EQ(values<float>(run1("Where", {&p, &x, &y})),
            (std::vector<float>{10, 10, 10, -1, -2, -3}));
  EXPECT_NE(errorOf("And", {&a, &b}).find("dtype f32"), std::string::npos);
}

TEST(Unary, FunctionsClipAndGelu) {
  OwnedTensor x = f32({4}, {-2, -0.5f, 0, 3});
  EXPECT_EQ(values<float>(run1("Relu", {&x})), (std::vector<float>{0, 0, 0, 3}));
  EXPECT_EQ(values<float>(run1("Abs", {&x})), (std::vector<float>{2, 0.5f, 0, 3}));
  EXPECT_EQ(values<float>(run1("Floor", {&x})), (std::vector<float>{-2, -1, 0, 3}));
  std::vector<float> sigmoid = values<float>(run1("Sigmoid", {&x}));
  EXPECT_NEAR(sigmoid[0], 1 / (1 + std::exp(2.0f)), 1e-7);
  OwnedTensor extreme = f32({2}, {-1000, 1000});
  EXPECT_EQ(values<float>(run1("Sigmoid", {&extreme})), (std::vector<float>{0, 1}));
  std::vector<float> exact = values<float>(run1("Gelu", {&x}));
  EXPECT_NEAR(exact[3], 0.5 * 3 * (1 + std::erf(3 / std::sqrt(2.0))), 1e-6);
  std::vector<float> tanhForm = values<float>(run1("Gelu", {&x}, {{"approximate",
                                                                  Attr::ofString("tanh")}}));
  EXPECT_NEAR(tanhForm[0], 0.5 * -2 * (1 + std::tanh(0.7978845608 * (-2 + 0.044715 * -8))),
              1e-6);
  EXPECT_NE(errorOf("Gelu", {&x}, {{"approximate", Attr::ofString("fast")}}), "");
  OwnedTensor low = f32({}, {-1}), high = f32({}, {1});
  EXPECT_EQ(values<float>(run1("Clip", {&x, &low, nullptr})), (std::vector<float>{-1, -0.5f, 0, 3}));
  EXPECT_EQ(values<float>(run1("Clip", {&x, nullptr, &high})), (std::vector<float>{-2, -0.5f, 0, 1}));
  EXPECT_EQ(values<float>(run1("Clip", {&x, &high, &low})), (std::vector<float>{-1, -1, -1, -1}));
  OwnedTensor ints = i64({2}, {-3, 4});
  EXPECT_EQ(values<int64_t>(run1("Neg", {&ints})), (std::vector<int64_t>{3, -4}));
  EXPECT_NE(errorOf("Sqrt", {&ints}).find("dtype"), std::string::npos);
  OwnedTensor nan = f32({2}, {kNaN, 1});
  EXPECT_EQ(values<uint8_t>(run1("IsNaN", {&nan})), (std::vector<uint8_t>{1, 0}));
}

TEST(Cast, RulesBetweenDTypes) {
  OwnedTensor x = f32({5}, {1.9f, -1.9f, kNaN, 1e20f, -1e20f});
  AttrMap toI32{{"to", Attr::ofType(DType::I32)}};
  EXPECT_EQ(values<int32_t>(run1("Cast", {&x}, toI32)),
            (std::vector<int32_t>{1, -1, 0, std::numeric_limits<int32_t>::max(),
                                  std::numeric_limits<int32_t>::min()}));
  AttrMap toBool{{"to", Attr::ofType(DType::Bool)}};
  EXPECT_EQ(values<uint8_t>(run1("Cast", {&x}, toBool)), (std::vector<uint8_t>{1, 1, 1, 1, 1}));
  OwnedTensor y = f32({1}, {1.0f + std::ldexp(1.0f, -11)});
  OwnedTensor h = run1("Cast", {&y}, {{"to", Attr::ofType(DType::F16)}});
  EXPECT_EQ(values<uint16_t>(h)[0], 0x3c00);
  OwnedTensor wide = i64({1}, {300});
  EXPECT_EQ(values<uint8_t>(run1("Cast", {&wide}, {{"to", Attr::ofType(DType::U8)}}))[0], 44);
  OwnedTensor like = f16({1}, {0});
  EXPECT_EQ(run1("CastLike", {&x, &like}).dtype, DType::F16);
  EXPECT_NE(errorOf("Cast", {&x}), "");  // 'to' is required
}

TEST(Reduce, AxesKeepdimsAndNoop) {
  OwnedTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  OwnedTensor axes = i64({1}, {-1});
  OwnedTensor y = run1("ReduceSum", {&x, &axes}, {{"keepdims", Attr::ofInt(0)}});
  EXPECT_EQ(y.shape, (Shape{2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{6, 15}));
  OwnedTensor all = run1("ReduceMean", {&x, nullptr});
  EXPECT_EQ(all.shape, (Shape{1, 1}));
  EXPECT_EQ(values<float>(all)[0], 3.5f);
  OwnedTensor none = i64({0}, {});
  OwnedTensor same = run1("ReduceSum", {&x, &none}, {{"noop_with_empty_axes", Attr::ofInt(1)}});
  EXPECT_EQ(same.shape, x.shape);
  EXPECT_EQ(values<float>(same), values<float>(x));
  OwnedTensor nan = f32({3}, {1, kNaN, 3});
  EXPECT_TRUE(std::isnan(values<float>(run1("ReduceMax", {&nan, nullptr}))[0]));
  OwnedTensor repeated = i64({2}, {0, -2});
  EXPECT_NE(errorOf("ReduceSum", {&x, &repeated}).find("more than once"), std::string::npos);
  OwnedTensor empty = f32({0, 2}, {});
  EXPECT_EQ(values<float>(run1("ReduceSum", {&empty, nullptr}))[0], 0);
  EXPECT_EQ(values<float>(run1("ReduceMax", {&empty, nullptr}))[0],
            -std::numeric_limits<float>::infinity());
}

TEST(Reduce, HalfAccumulatesInFloat) {
  // 4096 ones: an f16 accumulator would stop growing at 2048.
  OwnedTensor ones = f16({4096}, std::vector<float>(4096, 1.0f));
  EXPECT_EQ(halfValues(run1("ReduceMean", {&ones, nullptr}))[0], 1.0f);
  EXPECT_EQ(halfValues(run1("ReduceSum", {&ones, nullptr}))[0], 4096.0f);
}

TEST(HalfPrecision, MatMulSoftmaxAndNormAccumulateInFloat) {
  // Sums of 4096 ones: an f16 accumulator would stop growing at 2048.
  OwnedTensor ones = f16({4096}, std::vector<float>(4096, 1.0f));
  EXPECT_EQ(halfValues(run1("MatMul", {&ones, &ones}))[0], 4096.0f);
  EXPECT_EQ(halfValues(run1("Softmax", {&ones}))[0], 1.0f / 4096);
  OwnedTensor row = f16({1, 4096}, std::vector<float>(4096, 1.0f));
  OwnedTensor scale = f16({4096}, std::vector<float>(4096, 1.0f));
  std::vector<OwnedTensor> outputs;
  ASSERT_TRUE(run("LayerNormalization", {&row, &scale, nullptr}, outputs, {}, 2).isOk());
  EXPECT_EQ(halfValues(outputs[0])[0], 0.0f);
  EXPECT_EQ(outputs[1].dtype, DType::F32);  // stash_type 1
  EXPECT_EQ(values<float>(outputs[1])[0], 1.0f);
  OwnedTensor bf = tensor<uint16_t>(DType::BF16, {2}, {floatToBfloat16(1.5f),
                                                        floatToBfloat16(-2.0f)});
  OwnedTensor bfSum = run1("Add", {&bf, &bf});
  EXPECT_EQ(bfloat16ToFloat(values<uint16_t>(bfSum)[1]), -4.0f);
}

TEST(Reduce, CumSumExclusiveReverse) {
  OwnedTensor x = f32({4}, {1, 2, 3, 4});
  OwnedTensor axis = i32({}, {0});
  EXPECT_EQ(values<float>(run1("CumSum", {&x, &axis})), (std::vector<float>{1, 3, 6, 10}));
  AttrMap both{{"exclusive", Attr::ofInt(1)}, {"reverse", Attr::ofInt(1)}};
  EXPECT_EQ(values<float>(run1("CumSum", {&x, &axis}, both)), (std::vector<float>{9, 7, 4, 0}));
  OwnedTensor bad = i64({}, {1});
  EXPECT_NE(errorOf("CumSum", {&x, &bad}).find("out of range"), std::string::npos);
}

// Plain triple loop, the reference for the optimised kernel.
std::vector<float> naiveMatMul(const std::vector<float> &a, const std::vector<float> &b,
                               int64_t M, int64_t K, int64_t N) {
  std::vector<float> c(M * N, 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n)
        c[m * N + n] += a[m * K + k] * b[k * N + n];
  return c;
}

TEST(MatMul, VectorsAndBroadcastBatches) {
  OwnedTensor v = f32({3}, {1, 2, 3});
  OwnedTensor dot = run1("MatMul", {&v, &v});
  EXPECT_EQ(dot.shape, Shape{});
  EXPECT_EQ(values<float>(dot)[0], 14);
  std::vector<float> av(2 * 1 * 2 * 3), bv(3 * 3 * 4);
  for (size_t i = 0; i < av.size(); ++i)
    av[i] = float(i % 7) - 3;
  for (size_t i = 0; i < bv.size(); ++i)
    bv[i] = float(i % 5) * 0.5f;
  OwnedTensor a = f32({2, 1, 2, 3}, av), b = f32({3, 3, 4}, bv);
  OwnedTensor y = run1("MatMul", {&a, &b});
  ASSERT_EQ(y.shape, (Shape{2, 3, 2, 4}));
  std::vector<float> got = values<float>(y);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      std::vector<float> ab(av.begin() + i * 6, av.begin() + i * 6 + 6);
      std::vector<float> bb(bv.begin() + j * 12, bv.begin() + j * 12 + 12);
      std::vector<float> want = naiveMatMul(ab, bb, 2, 3, 4);
      for (int64_t e = 0; e < 8; ++e)
        EXPECT_FLOAT_EQ(got[(i * 3 + j) * 8 + e], want[e]);
    }
  OwnedTensor wrong = f32({2, 2}, {1, 2, 3, 4});
  EXPECT_NE(errorOf("MatMul", {&v, &wrong}).find("inner dimensions"), std::string::npos);
}

TEST(MatMul, ThreadedEqualsSequential) {
  const int64_t M = 130, K = 70, N = 90;
  std::vector<float> av(M * K), bv(K * N);
  for (size_t i = 0; i < av.size(); ++i)
    av[i] = std::sin(float(i));
  for (size_t i = 0; i < bv.size(); ++i)
    bv[i] = std::cos(float(i));
  OwnedTensor a = f32({M, K}, av), b = f32({K, N}, bv);
  ops::setThreadCount(1);
  std::vector<float> sequential = values<float>(run1("MatMul", {&a, &b}));
  ops::setThreadCount(4);
  std::vector<float> threaded = values<float>(run1("MatMul", {&a, &b}));
  ops::setThreadCount(0);
  EXPECT_EQ(sequential, threaded);
  std::vector<float> want = naiveMatMul(av, bv, M, K, N);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(sequential[i], want[i], 1e-4f * (1 + std::fabs(want[i])));
}

TEST(MatMul, GemmTransposesAndBroadcastsC) {
  OwnedTensor a = f32({3, 2}, {1, 4, 2, 5, 3, 6});   // A^T = [[1,2,3],[4,5,6]]
  OwnedTensor b = f32({2, 3}, {1, 3, 5, 2, 4, 6});   // B^T = [[1,2],[3,4],[5,6]]
  OwnedTensor c = f32({2}, {100, 200});
  AttrMap attrs{{"transA", Attr::ofInt(1)}, {"transB", Attr::ofInt(1)},
                {"alpha", Attr::ofFloat(2)}, {"beta", Attr::ofFloat(0.5f)}};
  OwnedTensor y = run1("Gemm", {&a, &b, &c}, attrs);
  ASSERT_EQ(y.shape, (Shape{2, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{2 * 22 + 50, 2 * 28 + 100, 2 * 49 + 50,
                                                  2 * 64 + 100}));
  OwnedTensor badC = f32({3}, {1, 2, 3});
  EXPECT_NE(errorOf("Gemm", {&a, &b, &badC}, attrs).find("broadcast"), std::string::npos);
}

TEST(Normalization, SoftmaxAlongAxis) {
  OwnedTensor x = f32({2, 2}, {0, 1, 0, 3});
  std::vector<float> y = values<float>(run1("Softmax", {&x}, {{"axis", Attr::ofInt(0)}}));
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_FLOAT_EQ(y[1], 1 / (1 + std::exp(2.0f)));
  std::vector<float> logs = values<float>(run1("LogSoftmax", {&x}));
  EXPECT_FLOAT_EQ(logs[0], -std::log(1 + std::exp(1.0f)));
  OwnedTensor large = f32({2}, {1000, 1000});
  EXPECT_EQ(values<float>(run1("Softmax", {&large})), (std::vector<float>{0.5f, 0.5f}));
}

TEST(Normalization, LayerNormalizationWithStatistics) {
  OwnedTensor x = f32({2, 2}, {1, 3, 0, 4});
  OwnedTensor scale = f32({2}, {1, 2}), bias = f32({1}, {10});
  std::vector<OwnedTensor> outputs;
  Status status = run("LayerNormalization", {&x, &scale, &bias}, outputs,
                      {{"epsilon", Attr::ofFloat(0)}}, 3);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(values<float>(outputs[0]), (std::vector<float>{9, 12, 9, 12}));
  EXPECT_EQ(outputs[1].shape, (Shape{2, 1}));
  EXPECT_EQ(values<float>(outputs[1]), (std::vector<float>{2, 2}));
  EXPECT_EQ(values<float>(outputs[2]), (std::vector<float>{1, 0.5f}));
  OwnedTensor badScale = f32({3}, {1, 2, 3});
  EXPECT_NE(errorOf("LayerNormalization", {&x, &badScale, nullptr}).find("Scale"),
            std::string::npos);
}

TEST(Errors, ArgumentsAreChecked) {
  OwnedTensor x = f32({2}, {1, 2});
  EXPECT_NE(errorOf("Add", {&x}).find("inputs"), std::string::npos);
  EXPECT_NE(errorOf("Gemm", {&x, nullptr}).find("required"), std::string::npos);
  EXPECT_NE(errorOf("Frobnicate", {&x}).find("no kernel"), std::string::npos);
  EXPECT_NE(errorOf("Dropout", {&x}, {}, 3).find("outputs"), std::string::npos);
  // compute() refuses outputs that do not match what the op produces.
  OwnedTensor small(DType::F32, {1});
  TensorRef in = x.ref(), out = small.ref();
  Status status = ops::compute("Neg", {}, {&in}, {&out});
  EXPECT_NE(status.message().find("but the op produces"), std::string::npos);
  // Shapes alone are enough for ops whose output shape does not depend on values.
  TensorRef shapeOnly{DType::F32, {4, 1}, nullptr}, other{DType::F32, {3}, nullptr};
  std::vector<ops::OutputSpec> specs;
  ASSERT_TRUE(ops::inferShapes("Add", {}, {&shapeOnly, &other}, 1, specs).isOk());
  EXPECT_EQ(specs[0].shape, (Shape{4, 3}));
  EXPECT_TRUE(ops::isSupported("ScatterND"));
  // Every op of the onnx dialect but Weight, Constant, NoValue, If, Yield; and the 10
  // recognised tfm ops (tfm.moe the latest), the fuse pass's tfm.gated_act_packed and the 2
  // collectives (docs/transformer-ops.md).
  std::vector<std::string> all = ops::supportedOps();
  size_t transformer = std::count_if(all.begin(), all.end(), [](const std::string &op) {
    return op.rfind("tfm.", 0) == 0;
  });
  EXPECT_EQ(all.size() - transformer, 69u);
  EXPECT_EQ(transformer, 13u);
}

} // namespace
} // namespace dsrt::test
