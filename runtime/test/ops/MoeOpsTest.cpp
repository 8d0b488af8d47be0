// tfm.moe against the computation the exports write (every expert, weighted by its column of
// the routing weights; tools/fixtures' MoE exporter), in double, GPT-OSS's clamped SwiGLU
// included; that the experts no token
// chose are never read; and the errors for malformed steps.
#include "OpTestUtil.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace dsrt::test {
namespace {

using ops::Attr;
using ops::AttrMap;

struct Moe {
  int64_t rows, hidden, experts, inter, topK;
  OwnedTensor x, logits, gateUp, down, gateUpBias, downBias;
};

Moe randomMoe(int64_t rows, int64_t hidden, int64_t experts, int64_t inter, int64_t topK,
              std::mt19937 &rng) {
  return {rows, hidden, experts, inter, topK,
          randomF32({rows, hidden}, rng), randomF32({rows, experts}, rng),
          randomF32({experts * 2 * inter, hidden}, rng), randomF32({experts * hidden, inter}, rng),
          randomF32({experts * 2 * inter}, rng), randomF32({experts * hidden}, rng)};
}

AttrMap moeAttrs(int64_t topK, const char *scoring, bool normalize) {
  return {{"top_k", Attr::ofInt(topK)}, {"scoring", Attr::ofString(scoring)},
          {"normalize", Attr::ofInt(normalize)}, {"activation", Attr::ofString("silu")}};
}

// GPT-OSS's clamped SwiGLU where `limit` is set, written out from transformers'
// GptOssExperts._apply_gate: gate.clamp(max=l), up.clamp(-l, l), (up + 1) * gate *
// sigmoid(gate * alpha).
struct Glu {
  double alpha = 0, limit = 0;
  bool clamped() const { return limit > 0; }
};

// down(silu(gate x + b) * (up x + b)) + b for one row x [hidden], in double: gateUp
// [2 * inter, hidden] (gate rows, then up rows), down [hidden, inter]; biases may be null.
std::vector<double> siluMlp(const float *x, const float *gateUp, const float *down,
                            int64_t hidden, int64_t inter, const float *gateUpBias,
                            const float *downBias, Glu glu = {}) {
  std::vector<double> h(inter), y(hidden);
  for (int64_t j = 0; j < inter; ++j) {
    double g = gateUpBias ? gateUpBias[j] : 0, u = gateUpBias ? gateUpBias[inter + j] : 0;
    for (int64_t k = 0; k < hidden; ++k) {
      g += double(gateUp[j * hidden + k]) * x[k];
      u += double(gateUp[(inter + j) * hidden + k]) * x[k];
    }
    if (glu.clamped()) {
      g = std::min(g, glu.limit);
      u = std::max(-glu.limit, std::min(u, glu.limit));
      h[j] = (u + 1) * (g / (1 + std::exp(-g * glu.alpha)));
    } else {
      h[j] = g / (1 + std::exp(-g)) * u;
    }
  }
  for (int64_t o = 0; o < hidden; ++o) {
    y[o] = downBias ? downBias[o] : 0;
    for (int64_t j = 0; j < inter; ++j)
      y[o] += double(down[o * inter + j]) * h[j];
  }
  return y;
}

// sum_e dense[t, e] * down_e(silu(gate_e x) * up_e x) over all experts, dense the chosen
// experts' scores (zero elsewhere), in double.
std::vector<double> denseReference(const Moe &m, const char *scoring, bool normalize,
                                   bool biases, Glu glu = {}) {
  auto x = values<float>(m.x), logits = values<float>(m.logits);
  auto gateUp = values<float>(m.gateUp), down = values<float>(m.down);
  auto gateUpBias = values<float>(m.gateUpBias), downBias = values<float>(m.downBias);
  std::vector<double> out(m.rows * m.hidden, 0.0);
  for (int64_t t = 0; t < m.rows; ++t) {
    std::vector<double> scores(m.experts);
    double top = *std::max_element(logits.begin() + t * m.experts,
                                   logits.begin() + (t + 1) * m.experts);
    double sum = 0;
    for (int64_t e = 0; e < m.experts; ++e) {
      double z = logits[t * m.experts + e];
      scores[e] = std::string(scoring) == "softmax" ? std::exp(z - top) : 1 / (1 + std::exp(-z));
      sum += scores[e];
    }
    if (std::string(scoring) == "softmax")
      for (double &s : scores)
        s /= sum;
    std::vector<int64_t> order(m.experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
    std::vector<double> dense(m.experts, 0.0);
    double chosen = 0;
    for (int64_t i = 0; i < m.topK; ++i)
      chosen += scores[order[i]];
    for (int64_t i = 0; i < m.topK; ++i)
      dense[order[i]] = normalize ? scores[order[i]] / chosen : scores[order[i]];
    for (int64_t e = 0; e < m.experts; ++e) {
      std::vector<double> y = siluMlp(
          x.data() + t * m.hidden, gateUp.data() + e * 2 * m.inter * m.hidden,
          down.data() + e * m.hidden * m.inter, m.hidden, m.inter,
          biases ? gateUpBias.data() + e * 2 * m.inter : nullptr,
          biases ? downBias.data() + e * m.hidden : nullptr, glu);
      for (int64_t o = 0; o < m.hidden; ++o)
        out[t * m.hidden + o] += dense[e] * y[o];
    }
  }
  return out;
}

// Each kernel, scoring, renormalisation and bias against the dense sum: within 1e-5 plus
// 1e-5 of the largest |value| (f32 sums of 16-48 products of standard-normal values).
TEST(Moe, EqualsEveryExpertWeightedByItsRoutingColumn) {
  std::mt19937 rng(7);
  Moe m = randomMoe(9, 16, 6, 5, 2, rng);
  for (bool fast : {false, true})
    for (const char *scoring : {"softmax", "sigmoid"})
      for (bool normalize : {true, false})
        for (bool biases : {false, true}) {
          std::vector<OwnedTensor> outputs;
          std::vector<const OwnedTensor *> inputs = {&m.x, &m.logits, &m.gateUp, &m.down};
          if (biases)
            inputs.insert(inputs.end(), {&m.gateUpBias, &m.downBias});
          Status status = run("tfm.moe", inputs, outputs, moeAttrs(m.topK, scoring, normalize),
                              1, nullptr, nullptr, fast);
          ASSERT_TRUE(status.isOk()) << status.message();
          ASSERT_EQ(outputs[0].shape, (Shape{m.rows, m.hidden}));
          std::vector<double> want = denseReference(m, scoring, normalize, biases);
          auto got = values<float>(outputs[0]);
          double largest = 0;
          for (double v : want)
            largest = std::max(largest, std::abs(v));
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * largest)
                << "element " << i << (fast ? " fast" : " reference") << " " << scoring
                << (normalize ? " normalised" : "") << (biases ? " with biases" : "");
        }
}

// f16 experts (a half plan's): the fast kernel reads them as stored, the reference widens
// them; both give the dense sum of the same (rounded) weights.
TEST(Moe, HalfWeightsAsStored) {
  std::mt19937 rng(11);
  Moe m = randomMoe(3, 8, 4, 4, 2, rng);
  auto roundToHalf = [](OwnedTensor &t) {
    OwnedTensor half = f16(t.shape, values<float>(t));
    t = f32(t.shape, halfValues(half));
    return half;
  };
  OwnedTensor gateUp16 = roundToHalf(m.gateUp), down16 = roundToHalf(m.down);
  std::vector<double> want = denseReference(m, "softmax", true, false);
  for (bool fast : {false, true}) {
    std::vector<OwnedTensor> outputs;
    Status status = run("tfm.moe", {&m.x, &m.logits, &gateUp16, &down16}, outputs,
                        moeAttrs(2, "softmax", true), 1, nullptr, nullptr, fast);
    ASSERT_TRUE(status.isOk()) << status.message();
    auto got = values<float>(outputs[0]);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-4) << "element " << i << (fast ? " fast" : "");
  }
}

// A decode step reads only its token's k experts: the others' weights are NaN here, and
// the result is finite and equal to the dense sum of the chosen ones.
TEST(Moe, ExpertsNoTokenChoseAreNotRead) {
  std::mt19937 rng(3);
  Moe m = randomMoe(1, 8, 4, 4, 2, rng);
  m.logits = f32({1, 4}, {0.5f, 3.0f, -1.0f, 2.0f});  // experts 1 and 3
  std::vector<double> want = denseReference(m, "softmax", true, false);
  auto poison = [](OwnedTensor &t, int64_t expert, int64_t rows) {
    auto *data = reinterpret_cast<float *>(t.storage.data());
    const int64_t width = t.shape[1];
    std::fill(data + expert * rows * width, data + (expert + 1) * rows * width,
              std::numeric_limits<float>::quiet_NaN());
  };
  for (int64_t unchosen : {0, 2}) {
    poison(m.gateUp, unchosen, 2 * m.inter);
    poison(m.down, unchosen, m.hidden);
  }
  for (bool fast : {false, true}) {
    std::vector<OwnedTensor> outputs;
    Status status = run("tfm.moe", {&m.x, &m.logits, &m.gateUp, &m.down}, outputs,
                        moeAttrs(2, "softmax", true), 1, nullptr, nullptr, fast);
    ASSERT_TRUE(status.isOk()) << status.message();
    auto got = values<float>(outputs[0]);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
  }
}

// A shared expert (Qwen2-MoE's) adds sigmoid(x . gate) * down(silu(gate_s x) * up_s x) to
// every row, after the routed experts.
TEST(Moe, SharedExpertOnEveryRow) {
  std::mt19937 rng(13);
  Moe m = randomMoe(5, 8, 4, 3, 2, rng);
  const int64_t sharedInter = 6;
  OwnedTensor sharedGateUp = randomF32({2 * sharedInter, m.hidden}, rng);
  OwnedTensor sharedDown = randomF32({m.hidden, sharedInter}, rng);
  OwnedTensor sharedGate = randomF32({1, m.hidden}, rng);
  std::vector<double> want = denseReference(m, "softmax", true, false);
  auto x = values<float>(m.x), gu = values<float>(sharedGateUp), dn = values<float>(sharedDown),
       g = values<float>(sharedGate);
  for (int64_t t = 0; t < m.rows; ++t) {
    double gate = 0;
    for (int64_t k = 0; k < m.hidden; ++k)
      gate += double(g[k]) * x[t * m.hidden + k];
    std::vector<double> y = siluMlp(x.data() + t * m.hidden, gu.data(), dn.data(), m.hidden,
                                    sharedInter, nullptr, nullptr);
    for (int64_t o = 0; o < m.hidden; ++o)
      want[t * m.hidden + o] += y[o] / (1 + std::exp(-gate));
  }
  for (bool fast : {false, true}) {
    std::vector<OwnedTensor> outputs;
    Status status = run("tfm.moe",
                        {&m.x, &m.logits, &m.gateUp, &m.down, nullptr, nullptr, &sharedGateUp,
                         &sharedDown, &sharedGate},
                        outputs, moeAttrs(2, "softmax", true), 1, nullptr, nullptr, fast);
    ASSERT_TRUE(status.isOk()) << status.message();
    auto got = values<float>(outputs[0]);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-4) << "element " << i << (fast ? " fast" : "");
  }
}

// Both kernels over quantized experts (m's float weights hold their dequantized values)
// against the dense double sum, softmax top-2 renormalised.
void expectQuantizedExperts(const Moe &m, const OwnedTensor &gateUpCodes,
                            const OwnedTensor &downCodes, const OwnedTensor &gateUpScales,
                            const OwnedTensor &downScales) {
  std::vector<double> want = denseReference(m, "softmax", true, false);
  for (bool fast : {false, true}) {
    std::vector<OwnedTensor> outputs;
    Status status = run("tfm.moe",
                        {&m.x, &m.logits, &gateUpCodes, &downCodes, nullptr, nullptr, nullptr,
                         nullptr, nullptr, &gateUpScales, &downScales},
                        outputs, moeAttrs(2, "softmax", true), 1, nullptr, nullptr, fast);
    ASSERT_TRUE(status.isOk()) << status.message();
    auto got = values<float>(outputs[0]);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-4 * std::abs(want[i]))
          << "element " << i << (fast ? " fast" : "");
  }
}

// Random codes of `bits` (8: int8; 4: int4, two a byte, the even input low, code - 8) with
// scales per group of inputs, as dsc-quantize-weights writes them; `weights` becomes their
// dequantized values, the dense reference's.
void quantizeExperts(OwnedTensor &weights, int bits, int64_t groups, float minScale,
                     float maxScale, std::mt19937 &rng, OwnedTensor &codes, OwnedTensor &scales) {
  const int64_t rows = weights.shape[0], in = weights.shape[1];
  std::uniform_int_distribution<int> code(bits == 8 ? -127 : 0, bits == 8 ? 127 : 15);
  std::uniform_real_distribution<float> scale(minScale, maxScale);
  codes = bits == 8 ? OwnedTensor(DType::I8, {rows, in}) : OwnedTensor(DType::U8, {rows, in / 2});
  scales = OwnedTensor(DType::F32, {rows, groups});
  auto *s = reinterpret_cast<float *>(scales.storage.data());
  auto *w = reinterpret_cast<float *>(weights.storage.data());
  for (int64_t i = 0; i < rows * groups; ++i)
    s[i] = scale(rng);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < in; ++k) {
      int value = code(rng);
      if (bits == 8) {
        codes.storage[static_cast<size_t>(r * in + k)] = static_cast<uint8_t>(value);
      } else {
        uint8_t &pair = codes.storage[static_cast<size_t>(r * (in / 2) + k / 2)];
        pair = static_cast<uint8_t>(k % 2 == 0 ? (pair & 0xF0) | value
                                               : (pair & 0x0F) | (value << 4));
        value -= 8;
      }
      w[r * in + k] = value * s[r * groups + k / (in / groups)];
    }
}

// int8 experts: both kernels equal the dense sum over the dequantized weights.
TEST(Moe, Int8ExpertsWithGroupScales) {
  std::mt19937 rng(17);
  Moe m = randomMoe(4, 8, 4, 4, 2, rng);
  OwnedTensor gateUpCodes, gateUpScales, downCodes, downScales;
  quantizeExperts(m.gateUp, 8, 2, 0.001f, 0.01f, rng, gateUpCodes, gateUpScales);
  quantizeExperts(m.down, 8, 2, 0.001f, 0.01f, rng, downCodes, downScales);
  expectQuantizedExperts(m, gateUpCodes, downCodes, gateUpScales, downScales);
}

// int4 experts (--dtype int4: MatMulNBits' and tfm.linear's int4 layout): the same. The
// groups (4 inputs) are below the int8-activation kernels' 32, so the fast kernel's x stays
// exact and int8's bound holds.
TEST(Moe, Int4ExpertsWithGroupScales) {
  std::mt19937 rng(19);
  Moe m = randomMoe(4, 8, 4, 4, 2, rng);
  OwnedTensor gateUpCodes, gateUpScales, downCodes, downScales;
  quantizeExperts(m.gateUp, 4, 2, 0.05f, 0.2f, rng, gateUpCodes, gateUpScales);
  quantizeExperts(m.down, 4, 2, 0.05f, 0.2f, rng, downCodes, downScales);
  expectQuantizedExperts(m, gateUpCodes, downCodes, gateUpScales, downScales);
}

AttrMap swigluAttrs(float alpha, float limit) {
  AttrMap attrs = moeAttrs(2, "softmax", true);
  attrs["swiglu_alpha"] = Attr::ofFloat(alpha);
  attrs["swiglu_limit"] = Attr::ofFloat(limit);
  return attrs;
}

// GPT-OSS's experts: biases on gate, up and down, the clamped SwiGLU with a limit inside the
// spread of the gate and up values (|x . w| reaches 4-8 here, so both clamps cut and both
// pass some), against the dense double sum of every expert. Alpha and limit are not
// GPT-OSS's 1.702 and 7, so that a kernel that hard-coded them would fail.
TEST(Moe, ClampedSwigluWithBiases) {
  std::mt19937 rng(19);
  Moe m = randomMoe(7, 16, 4, 6, 2, rng);
  const Glu glu{1.3, 2.5};
  std::vector<double> want = denseReference(m, "softmax", true, true, glu);
  std::vector<double> unclamped = denseReference(m, "softmax", true, true, Glu{1.3, 1e9});
  double largest = 0, clampEffect = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, std::abs(want[i]));
    clampEffect = std::max(clampEffect, std::abs(want[i] - unclamped[i]));
  }
  ASSERT_GT(clampEffect, 0.1) << "the limit must cut some gate or up values";
  for (bool fast : {false, true}) {
    std::vector<OwnedTensor> outputs;
    Status status = run("tfm.moe", {&m.x, &m.logits, &m.gateUp, &m.down, &m.gateUpBias,
                                    &m.downBias},
                        outputs, swigluAttrs(glu.alpha, glu.limit), 1, nullptr, nullptr, fast);
    ASSERT_TRUE(status.isOk()) << status.message();
    auto got = values<float>(outputs[0]);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * largest)
          << "element " << i << (fast ? " fast" : " reference");
  }
}

// int8 experts with float biases and the clamped SwiGLU (GPT-OSS at --dtype int8): the dense
// double sum over the dequantized weights.
TEST(Moe, Int8ClampedSwigluWithBiases) {
  std::mt19937 rng(23);
  Moe m = randomMoe(5, 8, 4, 4, 2, rng);
  // One scale per row, 0.02: codes up to 127 give weights up to 2.5, so the clamps cut.
  OwnedTensor gateUpCodes, gateUpScales, downCodes, downScales;
  quantizeExperts(m.gateUp, 8, 1, 0.02f, 0.02f, rng, gateUpCodes, gateUpScales);
  quantizeExperts(m.down, 8, 1, 0.02f, 0.02f, rng, downCodes, downScales);
  const Glu glu{1.702, 3.0};
  std::vector<double> want = denseReference(m, "softmax", true, true, glu);
  for (bool fast : {false, true}) {
    std::vector<OwnedTensor> outputs;
    Status status = run("tfm.moe",
                        {&m.x, &m.logits, &gateUpCodes, &downCodes, &m.gateUpBias, &m.downBias,
                         nullptr, nullptr, nullptr, &gateUpScales, &downScales},
                        outputs, swigluAttrs(glu.alpha, glu.limit), 1, nullptr, nullptr, fast);
    ASSERT_TRUE(status.isOk()) << status.message();
    auto got = values<float>(outputs[0]);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-4 * std::abs(want[i]))
          << "element " << i << (fast ? " fast" : "");
  }
}

TEST(Moe, MalformedStepsAreNamed) {
  std::mt19937 rng(5);
  Moe m = randomMoe(2, 8, 4, 4, 2, rng);
  auto error = [&](std::vector<const OwnedTensor *> inputs, AttrMap attrs) {
    std::vector<OwnedTensor> outputs;
    Status status = run("tfm.moe", inputs, outputs, attrs);
    EXPECT_FALSE(status.isOk());
    return status.message();
  };
  std::vector<const OwnedTensor *> inputs = {&m.x, &m.logits, &m.gateUp, &m.down};
  EXPECT_NE(error(inputs, moeAttrs(5, "softmax", true)).find("top_k 5 must be between 1 and the 4 experts"),
            std::string::npos);
  EXPECT_NE(error(inputs, moeAttrs(2, "relu", true)).find("scoring must be softmax or sigmoid"),
            std::string::npos);
  OwnedTensor shortDown = randomF32({3 * 8, 4}, rng);
  EXPECT_NE(error({&m.x, &m.logits, &m.gateUp, &shortDown}, moeAttrs(2, "softmax", true))
                .find("are not 4 experts"),
            std::string::npos);
  OwnedTensor otherRows = randomF32({3, 4}, rng);
  EXPECT_NE(error({&m.x, &otherRows, &m.gateUp, &m.down}, moeAttrs(2, "softmax", true))
                .find("router logits"),
            std::string::npos);
  EXPECT_NE(error({&m.x, &m.logits, &m.gateUp, &m.down, &m.gateUpBias, nullptr},
                  moeAttrs(2, "softmax", true))
                .find("both biases or neither"),
            std::string::npos);
  AttrMap alphaOnly = moeAttrs(2, "softmax", true);
  alphaOnly["swiglu_alpha"] = Attr::ofFloat(1.702f);
  EXPECT_NE(error(inputs, alphaOnly).find("swiglu_alpha and swiglu_limit come together"),
            std::string::npos);
  EXPECT_NE(error(inputs, swigluAttrs(1.702f, -7.0f)).find("positive limit"),
            std::string::npos);
}

} // namespace
} // namespace dsrt::test
