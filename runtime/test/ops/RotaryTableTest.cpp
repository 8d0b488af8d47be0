// tfm.attention's rotary table (rotary_inv_freq) and attention factor
// (rotary_attention_factor): the scaled RoPE of Llama-3.x, Gemma-3, yarn and longrope
// exports, whose frequencies no base gives. Linear scaling by 4 is position
// interpolation: frequencies f/4 at position 4p turn each pair exactly as f at p (a power
// of two scales a float exactly), so the table at positions 4p must give what the base
// gives at p. An independent identity, not a second copy of the kernel's arithmetic.
#include "OpTestUtil.h"

#include <cmath>
#include <limits>
#include <random>

namespace dsrt::test {
namespace {

ops::AttrMap rotaryAttention(int64_t heads, int64_t headDim) {
  return {{"num_heads", ops::Attr::ofInt(heads)},  {"num_kv_heads", ops::Attr::ofInt(1)},
          {"head_dim", ops::Attr::ofInt(headDim)}, {"scale", ops::Attr::ofFloat(0.3f)},
          {"causal", ops::Attr::ofInt(1)},         {"rotary_dim", ops::Attr::ofInt(headDim)},
          {"rotary_base", ops::Attr::ofFloat(500000.0f)}};
}

TEST(RotaryTableTest, LinearScalingIsPositionInterpolation) {
  const int64_t B = 2, S = 6, H = 2, D = 16;
  std::mt19937 rng(3);
  OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, D}, rng),
              v = randomF32({B, S, D}, rng);
  OwnedTensor mask = i64({B, S}, {1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1});
  std::vector<int64_t> positions = {0, 1, 2, 3, 4, 5, 1, 0, 1, 2, 3, 4}, scaled;
  for (int64_t p : positions)
    scaled.push_back(4 * p);
  OwnedTensor atP = i64({B, S}, positions), at4P = i64({B, S}, scaled);

  ops::AttrMap base = rotaryAttention(H, D), table = base;
  std::vector<float> frequencies;
  ASSERT_TRUE(ops::rotaryInverseFrequencies(base, frequencies).isOk());
  ASSERT_EQ(frequencies.size(), size_t(D / 2));
  for (float &f : frequencies)
    f /= 4;
  table["rotary_inv_freq"] = ops::Attr::ofFloats(frequencies);

  std::vector<OwnedTensor> expected, got, unscaled;
  ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, &mask, nullptr, nullptr, &atP}, expected, base)
                  .isOk());
  Status status = run("tfm.attention", {&q, &k, &v, &mask, nullptr, nullptr, &at4P}, got, table);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, &mask, nullptr, nullptr, &at4P}, unscaled, base)
                  .isOk());
  std::vector<float> e = values<float>(expected[0]), g = values<float>(got[0]),
                     u = values<float>(unscaled[0]);
  double differsUnscaled = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    EXPECT_NEAR(g[i], e[i], 1e-6) << i;
    differsUnscaled = std::max(differsUnscaled, double(std::abs(u[i] - e[i])));
  }
  // The table matters: the base alone at 4p gives other numbers.
  EXPECT_GT(differsUnscaled, 1e-2);
}

// yarn's attention factor a scales cos and sin, so a whole-head rotation scales queries
// and keys by a: the scores by a², which scale / a² undoes, and the present keys by a.
TEST(RotaryTableTest, AttentionFactorScalesTheRotatedQueriesAndKeys) {
  const int64_t B = 2, S = 5, H = 2, D = 8;
  const float factor = 1.25f;
  std::mt19937 rng(5);
  OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, D}, rng),
              v = randomF32({B, S, D}, rng);
  OwnedTensor pastKey = randomF32({B, 1, 2, D}, rng), pastValue = randomF32({B, 1, 2, D}, rng);
  // Row 1 is left-padded by one cached token.
  OwnedTensor mask = i64({B, 2 + S}, {1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1});
  OwnedTensor positions = i64({B, S}, {2, 3, 4, 5, 6, 1, 2, 3, 4, 5});
  ops::AttrMap plain = rotaryAttention(H, D), scaled = plain;
  scaled["rotary_attention_factor"] = ops::Attr::ofFloat(factor);
  // The past keys carry the factor already (they were rotated with it).
  OwnedTensor scaledPast = pastKey;
  auto *data = reinterpret_cast<float *>(scaledPast.storage.data());
  for (int64_t i = 0; i < scaledPast.ref().elements(); ++i)
    data[i] *= factor;
  scaled["scale"] = ops::Attr::ofFloat(0.3f / (factor * factor));
  std::vector<OwnedTensor> expected, got;
  ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, &mask, &pastKey, &pastValue, &positions},
                  expected, plain, 3)
                  .isOk());
  Status status = run("tfm.attention", {&q, &k, &v, &mask, &scaledPast, &pastValue, &positions},
                      got, scaled, 3);
  ASSERT_TRUE(status.isOk()) << status.message();
  std::vector<float> e = values<float>(expected[0]), g = values<float>(got[0]);
  for (size_t i = 0; i < e.size(); ++i)
    EXPECT_NEAR(g[i], e[i], 1e-5) << "output " << i;
  std::vector<float> ek = values<float>(expected[1]), gk = values<float>(got[1]);
  for (size_t i = 0; i < ek.size(); ++i)
    EXPECT_NEAR(gk[i], factor * ek[i], 1e-5) << "present key " << i;
  EXPECT_EQ(values<float>(expected[2]), values<float>(got[2]));
}

// Negative frequencies turn each pair the other way (nanochat's rotate_half with flipped
// signs). With N negating the second half of each head, R(-t) = N R(t) N, and N keeps dot
// products: the queries and keys N q, N k rotated forward give the same output, and their
// present keys are N of the negative table's.
TEST(RotaryTableTest, NegativeFrequenciesTurnTheOtherWay) {
  const int64_t B = 2, S = 5, H = 2, D = 8;
  std::mt19937 rng(6);
  OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, D}, rng),
              v = randomF32({B, S, D}, rng);
  OwnedTensor mask = i64({B, S}, {1, 1, 1, 1, 1, 0, 1, 1, 1, 1});
  OwnedTensor positions = i64({B, S}, {0, 1, 2, 3, 4, 1, 0, 1, 2, 3});
  ops::AttrMap forward = rotaryAttention(H, D), backward = forward;
  std::vector<float> frequencies;
  ASSERT_TRUE(ops::rotaryInverseFrequencies(forward, frequencies).isOk());
  for (float &f : frequencies)
    f = -f;
  backward["rotary_inv_freq"] = ops::Attr::ofFloats(frequencies);
  auto negateSecondHalves = [&](OwnedTensor t) {
    auto *data = reinterpret_cast<float *>(t.storage.data());
    for (int64_t i = 0; i < t.ref().elements(); ++i)
      if (i % D >= D / 2)
        data[i] = -data[i];
    return t;
  };
  OwnedTensor nq = negateSecondHalves(q), nk = negateSecondHalves(k);
  std::vector<OwnedTensor> expected, got;
  ASSERT_TRUE(run("tfm.attention", {&nq, &nk, &v, &mask, nullptr, nullptr, &positions},
                  expected, forward, 3)
                  .isOk());
  Status status =
      run("tfm.attention", {&q, &k, &v, &mask, nullptr, nullptr, &positions}, got, backward, 3);
  ASSERT_TRUE(status.isOk()) << status.message();
  std::vector<float> e = values<float>(expected[0]), g = values<float>(got[0]);
  for (size_t i = 0; i < e.size(); ++i)
    EXPECT_NEAR(g[i], e[i], 1e-5) << "output " << i;
  std::vector<float> ek = values<float>(negateSecondHalves(expected[1])),
                     forwardKeys = values<float>(expected[1]), gk = values<float>(got[1]);
  double differs = 0;
  for (size_t i = 0; i < ek.size(); ++i) {
    EXPECT_NEAR(gk[i], ek[i], 1e-5) << "present key " << i;
    differs = std::max(differs, double(std::abs(gk[i] - forwardKeys[i])));
  }
  // The direction matters: the forward rotation's keys are other numbers.
  EXPECT_GT(differs, 1e-2);
}

TEST(RotaryTableTest, ATableOfTheWrongSizeOrAnInfinityIsAnError) {
  const int64_t B = 1, S = 2, D = 8;
  std::mt19937 rng(4);
  OwnedTensor q = randomF32({B, S, D}, rng), k = randomF32({B, S, D}, rng),
              v = randomF32({B, S, D}, rng), positions = i64({B, S}, {0, 1});
  ops::AttrMap attrs = rotaryAttention(1, D);
  std::vector<OwnedTensor> out;
  attrs["rotary_inv_freq"] = ops::Attr::ofFloats({1.0f, 0.1f, 0.01f});
  Status status = run("tfm.attention", {&q, &k, &v, nullptr, nullptr, nullptr, &positions}, out,
                      attrs);
  EXPECT_NE(status.message().find("rotary_inv_freq has 3 frequencies, rotary_dim 8 needs 4"),
            std::string::npos)
      << status.message();
  attrs["rotary_inv_freq"] =
      ops::Attr::ofFloats({1.0f, 0.1f, std::numeric_limits<float>::infinity(), 0.001f});
  status = run("tfm.attention", {&q, &k, &v, nullptr, nullptr, nullptr, &positions}, out, attrs);
  EXPECT_NE(status.message().find("frequencies must be finite"), std::string::npos)
      << status.message();
  attrs.erase("rotary_inv_freq");
  attrs["rotary_attention_factor"] = ops::Attr::ofFloat(-1.0f);
  status = run("tfm.attention", {&q, &k, &v, nullptr, nullptr, nullptr, &positions}, out, attrs);
  EXPECT_NE(status.message().find("rotary_attention_factor must be finite and positive"),
            std::string::npos)
      << status.message();
}

// A pair whose frequency is zero does not turn (Gemma-4's proportional RoPE: the full
// head's pairs, the last ones at zero): the same as the limit of a vanishing frequency.
TEST(RotaryTableTest, AZeroFrequencyLeavesItsPairUnrotated) {
  const int64_t B = 1, S = 3, D = 8;
  std::mt19937 rng(6);
  OwnedTensor q = randomF32({B, S, D}, rng), k = randomF32({B, S, D}, rng),
              v = randomF32({B, S, D}, rng), positions = i64({B, S}, {0, 5, 9});
  ops::AttrMap attrs = rotaryAttention(1, D);
  std::vector<OwnedTensor> zero, vanishing, turning;
  attrs["rotary_inv_freq"] = ops::Attr::ofFloats({1.0f, 0.1f, 0.0f, 0.0f});
  ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, nullptr, nullptr, nullptr, &positions}, zero,
                  attrs).isOk());
  attrs["rotary_inv_freq"] = ops::Attr::ofFloats({1.0f, 0.1f, 1e-30f, 1e-30f});
  ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, nullptr, nullptr, nullptr, &positions},
                  vanishing, attrs).isOk());
  attrs["rotary_inv_freq"] = ops::Attr::ofFloats({1.0f, 0.1f, 0.3f, 0.3f});
  ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, nullptr, nullptr, nullptr, &positions}, turning,
                  attrs).isOk());
  std::vector<float> a = values<float>(zero[0]), b = values<float>(vanishing[0]),
                     c = values<float>(turning[0]);
  double same = 0, differs = 0;
  for (int64_t i = 0; i < B * S * D; ++i) {
    same = std::max(same, double(std::abs(a[i] - b[i])));
    differs = std::max(differs, double(std::abs(a[i] - c[i])));
  }
  EXPECT_LE(same, 1e-6);
  EXPECT_GT(differs, 1e-3);  // the pairs' frequencies matter here
}

} // namespace
} // namespace dsrt::test
