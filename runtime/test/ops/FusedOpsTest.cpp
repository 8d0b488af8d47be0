// The fused forms of tfm.linear (activation and residual in the epilogue) and of the norms
// (residual add + norm, two outputs) against references computed here in double precision
// from the formulas, and against the unfused chain of steps they replace.
#include "OpTestUtil.h"

#include <cmath>
#include <random>

namespace dsrt::test {
namespace {

OwnedTensor toF16(const OwnedTensor &t) { return f16(t.shape, values<float>(t)); }

double activationReference(const std::string &kind, double x) {
  if (kind == "gelu_erf") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (kind == "gelu_tanh")
    return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  if (kind == "gelu_quick") return x / (1 + std::exp(-1.702 * x));
  if (kind == "silu") return x / (1 + std::exp(-x));
  if (kind == "relu") return x > 0 ? x : 0;
  if (kind == "relu2") return x > 0 ? x * x : 0;
  return x; // "none"
}

void expectNear(const std::vector<float> &actual, const std::vector<double> &expected,
                double tolerance, const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], tolerance * (1 + std::abs(expected[i])))
        << what << " at " << i;
}

// act(x . w^T + b) + residual, x [rows, in], w [out, in].
std::vector<double> linearReference(const OwnedTensor &x, const OwnedTensor &w,
                                    const OwnedTensor &b, const OwnedTensor *residual,
                                    const std::string &kind) {
  std::vector<float> xv = values<float>(x), wv = values<float>(w), bv = values<float>(b);
  int64_t out = w.shape[0], in = w.shape[1], rows = x.ref().elements() / in;
  std::vector<float> rv = residual ? values<float>(*residual) : std::vector<float>();
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = bv[o];
      for (int64_t k = 0; k < in; ++k)
        sum += double(xv[r * in + k]) * wv[o * in + k];
      double value = activationReference(kind, sum);
      y[r * out + o] = residual ? value + rv[r * out + o] : value;
    }
  return y;
}

class FusedLinearKindTest : public ::testing::TestWithParam<const char *> {};

TEST_P(FusedLinearKindTest, EpilogueMatchesFormulaAndUnfusedSteps) {
  const std::string kind = GetParam();
  std::mt19937 rng(7);
  OwnedTensor x = randomF32({2, 3, 16}, rng), w = randomF32({8, 16}, rng),
              b = randomF32({8}, rng), residual = randomF32({2, 3, 8}, rng);
  ops::AttrMap attrs = {{"activation", ops::Attr::ofString(kind)}};

  OwnedTensor fused = run1("tfm.linear", {&x, &w, &b, nullptr, &residual}, attrs);
  EXPECT_EQ(fused.shape, (Shape{2, 3, 8}));
  expectNear(values<float>(fused), linearReference(x, w, b, &residual, kind), 1e-5,
             "linear+" + kind + "+residual");

  // Activation only: no residual input.
  OwnedTensor activated = run1("tfm.linear", {&x, &w, &b}, attrs);
  expectNear(values<float>(activated), linearReference(x, w, b, nullptr, kind), 1e-5,
             "linear+" + kind);

  // The steps the fusion replaces compute the same values.
  OwnedTensor plain = run1("tfm.linear", {&x, &w, &b});
  OwnedTensor act = kind == "none"
                        ? std::move(plain)
                        : run1("tfm.activation", {&plain}, {{"kind", ops::Attr::ofString(kind)}});
  OwnedTensor chain = run1("tfm.residual_add", {&act, &residual});
  std::vector<float> a = values<float>(fused), c = values<float>(chain);
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], c[i], 1e-5 * (1 + std::abs(c[i]))) << "unfused chain at " << i;
}

INSTANTIATE_TEST_SUITE_P(Kinds, FusedLinearKindTest,
                         ::testing::Values("none", "gelu_erf", "gelu_tanh", "gelu_quick", "silu",
                                           "relu", "relu2"));

TEST(FusedLinearTest, HalfPrecisionEpilogue) {
  std::mt19937 rng(11);
  OwnedTensor x = randomF32({4, 16}, rng), w = randomF32({8, 16}, rng), b = randomF32({8}, rng),
              residual = randomF32({4, 8}, rng);
  OwnedTensor xh = toF16(x), wh = toF16(w), bh = toF16(b), rh = toF16(residual);
  OwnedTensor fused = run1("tfm.linear", {&xh, &wh, &bh, nullptr, &rh},
                           {{"activation", ops::Attr::ofString("gelu_tanh")}});
  ASSERT_EQ(fused.dtype, DType::F16);
  // The reference from the fp16-rounded operands; the result is rounded once to fp16
  // (relative step 2^-11), values here are below ~30: 2e-2 absolute covers it.
  OwnedTensor xr = f32(x.shape, halfValues(xh)), wr = f32(w.shape, halfValues(wh)),
              br = f32(b.shape, halfValues(bh)), rr = f32(residual.shape, halfValues(rh));
  std::vector<double> expected = linearReference(xr, wr, br, &rr, "gelu_tanh");
  std::vector<float> actual = halfValues(fused);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], 2e-2) << i;
}

// tfm.lm_head's logit epilogue (dsc-fuse-logit-epilogue): z * logit_scale, then
// cap * tanh(. / cap), on the reference and the fast kernels, against the formula in double
// precision and against the unfused steps (Div, Tanh, Mul) it replaces. The cap of 3 is
// below the largest |z * scale| here, so the tanh bends.
TEST(FusedLmHeadTest, LogitScaleAndCapMatchFormulaAndUnfusedSteps) {
  std::mt19937 rng(13);
  OwnedTensor x = randomF32({2, 3, 16}, rng), w = randomF32({40, 16}, rng),
              zeros = f32({40}, std::vector<float>(40, 0.0f));
  const float scale = 0.75f, cap = 3.0f;
  ops::AttrMap attrs = {{"logit_scale", ops::Attr::ofFloat(scale)},
                        {"logit_cap", ops::Attr::ofFloat(cap)}};
  std::vector<double> expected = linearReference(x, w, zeros, nullptr, "none");
  double bent = 0;
  for (double &z : expected) {
    bent = std::max(bent, std::abs(z * scale) - std::abs(cap * std::tanh(z * scale / cap)));
    z = cap * std::tanh(z * scale / cap);
  }
  EXPECT_GT(bent, 0.1);
  for (bool fast : {false, true}) {
    std::vector<OwnedTensor> outputs;
    Status status = run("tfm.lm_head", {&x, &w}, outputs, attrs, 1, nullptr, nullptr, fast);
    ASSERT_TRUE(status.isOk()) << status.message();
    expectNear(values<float>(outputs[0]), expected, 1e-5,
               fast ? "fast lm_head epilogue" : "reference lm_head epilogue");
  }
  // The unfused steps: Gemma-2's graph, with the scale first.
  OwnedTensor plain = run1("tfm.lm_head", {&x, &w});
  OwnedTensor scaleT = f32({}, {scale}), capT = f32({}, {cap});
  OwnedTensor scaled = run1("Mul", {&plain, &scaleT});
  OwnedTensor divided = run1("Div", {&scaled, &capT});
  OwnedTensor tanh = run1("Tanh", {&divided});
  OwnedTensor chain = run1("Mul", {&tanh, &capT});
  OwnedTensor fused = run1("tfm.lm_head", {&x, &w}, attrs);
  std::vector<float> a = values<float>(fused), c = values<float>(chain);
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], c[i], 1e-5 * (1 + std::abs(c[i]))) << "unfused chain at " << i;
  // A cap that is not positive, or a scale that is not finite, is an error naming both.
  EXPECT_NE(errorOf("tfm.lm_head", {&x, &w}, {{"logit_cap", ops::Attr::ofFloat(-1.0f)}})
                .find("logit_cap finite and positive"),
            std::string::npos);
  EXPECT_NE(errorOf("tfm.lm_head", {&x, &w},
                    {{"logit_scale", ops::Attr::ofFloat(std::nanf(""))}})
                .find("logit_scale must be finite"),
            std::string::npos);
}

TEST(FusedLinearTest, RejectsBadResidualAndActivation) {
  OwnedTensor x = f32({1, 2}, {1, 2}), w = f32({3, 2}, {1, 0, 0, 1, 1, 1});
  OwnedTensor wrongShape = f32({1, 2}, {0, 0}), good = f32({1, 3}, {1, 1, 1});
  EXPECT_NE(errorOf("tfm.linear", {&x, &w, nullptr, nullptr, &wrongShape})
                .find("residual must have the result's shape [1, 3]"),
            std::string::npos);
  EXPECT_NE(errorOf("tfm.linear", {&x, &w, nullptr, nullptr, &good},
                    {{"activation", ops::Attr::ofString("swish2")}})
                .find("unknown activation kind 'swish2'"),
            std::string::npos);
  // x . w^T = [1, 2, 3], relu keeps it, + 1.
  EXPECT_EQ(values<float>(run1("tfm.linear", {&x, &w, nullptr, nullptr, &good},
                               {{"activation", ops::Attr::ofString("relu")}})),
            (std::vector<float>{2, 3, 4}));
}

// norm(x + residual) and x + residual, by the formula.
void normReference(const OwnedTensor &x, const OwnedTensor &residual, const OwnedTensor &scale,
                   const OwnedTensor *bias, bool rms, float epsilon, std::vector<double> &norm,
                   std::vector<double> &sum) {
  std::vector<float> xv = values<float>(x), rv = values<float>(residual),
                     sv = values<float>(scale);
  std::vector<float> bv = bias ? values<float>(*bias) : std::vector<float>();
  int64_t n = scale.shape[0], rows = x.ref().elements() / n;
  norm.assign(xv.size(), 0);
  sum.assign(xv.size(), 0);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, square = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum[r * n + i] = double(xv[r * n + i]) + rv[r * n + i];
      mean += sum[r * n + i];
    }
    mean = rms ? 0 : mean / n;
    for (int64_t i = 0; i < n; ++i)
      square += (sum[r * n + i] - mean) * (sum[r * n + i] - mean);
    double inverse = 1 / std::sqrt(square / n + epsilon);
    for (int64_t i = 0; i < n; ++i)
      norm[r * n + i] = (sum[r * n + i] - mean) * inverse * sv[i] + (bias ? bv[i] : 0);
  }
}

TEST(FusedNormTest, ResidualFormsGiveNormAndSum) {
  std::mt19937 rng(3);
  OwnedTensor x = randomF32({2, 3, 16}, rng), residual = randomF32({2, 3, 16}, rng),
              scale = randomF32({16}, rng), bias = randomF32({16}, rng);
  for (bool rms : {false, true}) {
    std::string op = rms ? "tfm.rms_norm" : "tfm.layer_norm";
    float epsilon = 1e-5f;
    ops::AttrMap attrs = {{"epsilon", ops::Attr::ofFloat(epsilon)}};
    std::vector<const OwnedTensor *> inputs =
        rms ? std::vector<const OwnedTensor *>{&x, &scale, &residual}
            : std::vector<const OwnedTensor *>{&x, &scale, &bias, &residual};
    std::vector<OwnedTensor> outputs;
    Status status = run(op, inputs, outputs, attrs, 2);
    ASSERT_TRUE(status.isOk()) << status.message();
    ASSERT_EQ(outputs.size(), 2u);
    std::vector<double> norm, sum;
    normReference(x, residual, scale, rms ? nullptr : &bias, rms, epsilon, norm, sum);
    expectNear(values<float>(outputs[0]), norm, 1e-5, op + " output 0");
    expectNear(values<float>(outputs[1]), sum, 1e-6, op + " output 1");

    // The unfused pair: residual_add then the norm.
    OwnedTensor added = run1("tfm.residual_add", {&x, &residual});
    std::vector<const OwnedTensor *> plainInputs =
        rms ? std::vector<const OwnedTensor *>{&added, &scale}
            : std::vector<const OwnedTensor *>{&added, &scale, &bias};
    std::vector<float> unfused = values<float>(run1(op, plainInputs, attrs));
    std::vector<float> fused = values<float>(outputs[0]);
    for (size_t i = 0; i < fused.size(); ++i)
      ASSERT_NEAR(fused[i], unfused[i], 1e-6 * (1 + std::abs(unfused[i]))) << op << " " << i;
  }
}

TEST(FusedNormTest, LayerNormWithoutBiasTakesResidualAtInputThree) {
  OwnedTensor x = f32({1, 2}, {1, 2}), residual = f32({1, 2}, {2, 5}), ones = f32({2}, {1, 1});
  std::vector<OwnedTensor> outputs;
  Status status = run("tfm.layer_norm", {&x, &ones, nullptr, &residual}, outputs,
                      {{"epsilon", ops::Attr::ofFloat(0)}}, 2);
  ASSERT_TRUE(status.isOk()) << status.message();
  // Sum [3, 7]: mean 5, deviation 2, normalised [-1, 1].
  EXPECT_EQ(values<float>(outputs[1]), (std::vector<float>{3, 7}));
  EXPECT_NEAR(values<float>(outputs[0])[0], -1, 1e-6);
  EXPECT_NEAR(values<float>(outputs[0])[1], 1, 1e-6);
}

TEST(FusedNormTest, OutputCountMustMatchTheResidual) {
  OwnedTensor x = f32({1, 2}, {1, 2}), ones = f32({2}, {1, 1}), other = f32({2, 1}, {1, 2});
  EXPECT_NE(errorOf("tfm.rms_norm", {&x, &ones, &x}, {}, 1).find("2 outputs (norm, sum)"),
            std::string::npos);
  EXPECT_NE(errorOf("tfm.rms_norm", {&x, &ones}, {}, 2).find("1 output"), std::string::npos);
  EXPECT_NE(errorOf("tfm.rms_norm", {&x, &ones, &other}, {}, 2)
                .find("residual must have the input's shape [1, 2]"),
            std::string::npos);
}

TEST(FusedNormTest, HalfPrecisionNormalisesTheStoredSum) {
  // In fp16 the sum output is rounded; the norm is of that rounded sum, as the unfused
  // residual_add + norm compute it, so both agree exactly.
  std::mt19937 rng(5);
  OwnedTensor x = toF16(randomF32({3, 16}, rng)), residual = toF16(randomF32({3, 16}, rng)),
              scale = toF16(randomF32({16}, rng));
  std::vector<OwnedTensor> outputs;
  Status status = run("tfm.rms_norm", {&x, &scale, &residual}, outputs, {}, 2);
  ASSERT_TRUE(status.isOk()) << status.message();
  OwnedTensor added = run1("tfm.residual_add", {&x, &residual});
  EXPECT_EQ(values<uint16_t>(outputs[1]), values<uint16_t>(added));
  EXPECT_EQ(values<uint16_t>(outputs[0]), values<uint16_t>(run1("tfm.rms_norm", {&added, &scale})));
}

} // namespace
} // namespace dsrt::test
