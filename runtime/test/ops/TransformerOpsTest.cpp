// The tfm.* kernels: attention's session KV cache must give what its I/O form gives on the
// same tokens (prefill then decode steps against one pass over everything), with rotary,
// ALiBi, GQA and padding; and the small ops against their formulas.
#include "OpTestUtil.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <ostream>
#include <random>
#include <utility>

namespace dsrt::test {
namespace {

// Columns [begin, end) of the sequence axis (1) of a [b, s, f] tensor.
OwnedTensor tokens(const OwnedTensor &t, int64_t begin, int64_t end) {
  int64_t b = t.shape[0], s = t.shape[1], f = t.shape[2];
  OwnedTensor out(t.dtype, {b, end - begin, f});
  auto *src = reinterpret_cast<const float *>(t.storage.data());
  auto *dst = reinterpret_cast<float *>(out.storage.data());
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = begin; j < end; ++j)
      for (int64_t k = 0; k < f; ++k)
        dst[(i * (end - begin) + j - begin) * f + k] = src[(i * s + j) * f + k];
  return out;
}

OwnedTensor columns(const std::vector<std::vector<int64_t>> &rows, int64_t begin, int64_t end) {
  std::vector<int64_t> flat;
  for (const auto &row : rows)
    flat.insert(flat.end(), row.begin() + begin, row.begin() + end);
  return i64({static_cast<int64_t>(rows.size()), end - begin}, flat);
}

struct CacheCase {
  const char *name;
  ops::AttrMap attrs;
};

class AttentionCacheTest : public ::testing::TestWithParam<int> {};

TEST_P(AttentionCacheTest, SessionCacheStepsEqualOnePass) {
  const int64_t B = 2, S = 7, H = 4, KH = 2, D = 8, prefill = 4;
  ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(H)},
                        {"num_kv_heads", ops::Attr::ofInt(KH)},
                        {"head_dim", ops::Attr::ofInt(D)},
                        {"scale", ops::Attr::ofFloat(1.0f / std::sqrt(float(D)))},
                        {"causal", ops::Attr::ofInt(1)}};
  switch (GetParam()) {
  case 0: break;
  case 1:
    attrs["rotary_dim"] = ops::Attr::ofInt(D);
    attrs["rotary_base"] = ops::Attr::ofFloat(10000.0f);
    break;
  case 2:
    attrs["rotary_dim"] = ops::Attr::ofInt(4);  // partial, GPT-J's pairs
    attrs["rotary_interleaved"] = ops::Attr::ofInt(1);
    break;
  case 3:
    attrs["alibi"] = ops::Attr::ofInt(1);
    break;
  case 4:
    attrs["window"] = ops::Attr::ofInt(3);
    break;
  }
  std::mt19937 rng(GetParam());
  OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, KH * D}, rng),
              v = randomF32({B, S, KH * D}, rng);
  // Row 1 is left-padded by two tokens; positions count its real tokens only.
  std::vector<std::vector<int64_t>> mask = {{1, 1, 1, 1, 1, 1, 1}, {0, 0, 1, 1, 1, 1, 1}};
  std::vector<std::vector<int64_t>> positions = {{0, 1, 2, 3, 4, 5, 6}, {1, 1, 0, 1, 2, 3, 4}};

  OwnedTensor fullMask = columns(mask, 0, S), fullPositions = columns(positions, 0, S);
  std::vector<OwnedTensor> onePass;
  ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, &fullMask, nullptr, nullptr, &fullPositions},
                  onePass, attrs)
                  .isOk());

  std::vector<float> keys(B * KH * 16 * D), vals(B * KH * 16 * D);
  ops::KvCache cache;
  cache.layers.push_back({DType::F32, B, KH, 16, D, keys.data(), vals.data()});
  ops::AttrMap cached = attrs;
  cached["cache_layer"] = ops::Attr::ofInt(0);
  std::vector<float> expected = values<float>(onePass[0]);
  for (int64_t begin = 0; begin < S;) {
    int64_t end = begin == 0 ? prefill : begin + 1;
    OwnedTensor qs = tokens(q, begin, end), ks = tokens(k, begin, end), vs = tokens(v, begin, end);
    OwnedTensor m = columns(mask, 0, end), p = columns(positions, begin, end);
    std::vector<OwnedTensor> step;
    Status status = run("tfm.attention", {&qs, &ks, &vs, &m, nullptr, nullptr, &p}, step, cached,
                        1, &cache);
    ASSERT_TRUE(status.isOk()) << status.message();
    std::vector<float> got = values<float>(step[0]);
    // A padding query attends to nothing; what it yields depends on how many keys exist
    // (transformers averages all of them), and nothing reads it.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = begin; s < end; ++s)
        for (int64_t f = 0; f < H * D && mask[b][s]; ++f)
          EXPECT_NEAR(got[(b * (end - begin) + s - begin) * H * D + f],
                      expected[(b * S + s) * H * D + f], 1e-5)
              << "row " << b << " token " << s << " feature " << f;
    begin = end;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, AttentionCacheTest, ::testing::Range(0, 5));

// Without the causal mask, `window` w keeps the keys less than w away on either side
// (ModernBERT's local layers): the same as the padding and that band as an additive mask.
TEST(AttentionWindowTest, EncoderWindowIsABandOnBothSides) {
  const int64_t B = 2, S = 9, H = 2, D = 8, W = 3;
  ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(H)},
                        {"num_kv_heads", ops::Attr::ofInt(H)},
                        {"head_dim", ops::Attr::ofInt(D)},
                        {"scale", ops::Attr::ofFloat(0.35f)}};
  std::mt19937 rng(9);
  OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, H * D}, rng),
              v = randomF32({B, S, H * D}, rng);
  // Row 1 is right-padded by two tokens (an encoder's padding).
  std::vector<int64_t> keep = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  OwnedTensor padding = i64({B, S}, keep);
  std::vector<float> band(B * S * S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = 0; j < S; ++j)
        band[(b * S + i) * S + j] = keep[b * S + j] && std::abs(i - j) < W
                                        ? 0.0f
                                        : std::numeric_limits<float>::lowest();
  OwnedTensor additive = f32({B, 1, S, S}, band);
  ops::AttrMap windowed = attrs;
  windowed["window"] = ops::Attr::ofInt(W);
  OwnedTensor got = run1("tfm.attention", {&q, &k, &v, &padding}, windowed);
  OwnedTensor expected = run1("tfm.attention", {&q, &k, &v, &additive}, attrs);
  OwnedTensor unwindowed = run1("tfm.attention", {&q, &k, &v, &padding}, attrs);
  std::vector<float> g = values<float>(got), e = values<float>(expected),
                     u = values<float>(unwindowed);
  double windowMatters = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t f = 0; f < H * D && keep[b * S + s]; ++f) {
        const size_t at = (b * S + s) * H * D + f;
        EXPECT_NEAR(g[at], e[at], 1e-5) << "row " << b << " token " << s << " feature " << f;
        windowMatters = std::max(windowMatters, double(std::abs(g[at] - u[at])));
      }
  EXPECT_GT(windowMatters, 1e-2);
}

// Each tensor-parallel rank computes its query heads from its Q and K/V head columns, with
// the per-rank head lists: 4 query heads and 2 KV heads over 3 ranks (heads 2, 1, 1; ranks
// 1 and 2 both read KV head 1), with ALiBi (slopes of the global heads) and with rotary.
// Its output must be the all-heads computation's columns of those heads.
TEST(AttentionTest, RanksComputeTheirHeadsOfTheWhole) {
  const int64_t B = 2, S = 5, H = 4, KH = 2, D = 8;
  const std::vector<int64_t> heads = {2, 1, 1}, headOffsets = {0, 2, 3}, kvHeads = {1, 1, 1},
                             kvOffsets = {0, 1, 1};
  for (bool alibi : {true, false}) {
    ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(H)},
                          {"num_kv_heads", ops::Attr::ofInt(KH)},
                          {"head_dim", ops::Attr::ofInt(D)},
                          {"scale", ops::Attr::ofFloat(0.25f)},
                          {"causal", ops::Attr::ofInt(1)}};
    if (alibi) {
      attrs["alibi"] = ops::Attr::ofInt(1);
    } else {
      attrs["rotary_dim"] = ops::Attr::ofInt(D);
      attrs["rotary_base"] = ops::Attr::ofFloat(10000.0f);
    }
    std::mt19937 rng(alibi ? 7 : 8);
    OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, KH * D}, rng),
                v = randomF32({B, S, KH * D}, rng);
    OwnedTensor mask = i64({B, S}, {1, 1, 1, 1, 1, 0, 1, 1, 1, 1});
    OwnedTensor positions = i64({B, S}, {0, 1, 2, 3, 4, 1, 0, 1, 2, 3});
    std::vector<OwnedTensor> whole;
    ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, &mask, nullptr, nullptr, &positions}, whole,
                    attrs)
                    .isOk());
    ops::AttrMap sharded = attrs;
    sharded["rank_heads"] = ops::Attr::ofInts(heads);
    sharded["rank_head_offsets"] = ops::Attr::ofInts(headOffsets);
    sharded["rank_kv_heads"] = ops::Attr::ofInts(kvHeads);
    sharded["rank_kv_head_offsets"] = ops::Attr::ofInts(kvOffsets);
    for (int rank = 0; rank < 3; ++rank) {
      RankOnly group(rank, 3);
      int64_t q0 = headOffsets[rank] * D, q1 = q0 + heads[rank] * D;
      int64_t k0 = kvOffsets[rank] * D, k1 = k0 + kvHeads[rank] * D;
      OwnedTensor qr = features(q, q0, q1), kr = features(k, k0, k1), vr = features(v, k0, k1);
      std::vector<OwnedTensor> mine;
      Status status = run("tfm.attention", {&qr, &kr, &vr, &mask, nullptr, nullptr, &positions},
                          mine, sharded, 1, nullptr, &group);
      ASSERT_TRUE(status.isOk()) << status.message();
      std::vector<float> got = values<float>(mine[0]);
      std::vector<float> expected = values<float>(features(whole[0], q0, q1));
      ASSERT_EQ(got.size(), expected.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], expected[i], 1e-5) << "rank " << rank << " element " << i;
    }
  }
}

TEST(AttentionTest, PresentOutputsHoldPastAndNew) {
  ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(1)}, {"head_dim", ops::Attr::ofInt(2)},
                        {"causal", ops::Attr::ofInt(1)}};
  OwnedTensor q = f32({1, 1, 2}, {1, 0}), k = f32({1, 1, 2}, {5, 6}), v = f32({1, 1, 2}, {7, 8});
  OwnedTensor pk = f32({1, 1, 1, 2}, {1, 2}), pv = f32({1, 1, 1, 2}, {3, 4});
  std::vector<OwnedTensor> out;
  ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, nullptr, &pk, &pv}, out, attrs, 3).isOk());
  EXPECT_EQ(values<float>(out[1]), (std::vector<float>{1, 2, 5, 6}));
  EXPECT_EQ(values<float>(out[2]), (std::vector<float>{3, 4, 7, 8}));
  // Scores 1 and 5 (scale 1): softmax weights e^1, e^5 over values (3,4) and (7,8).
  double w = std::exp(1.0) / (std::exp(1.0) + std::exp(5.0));
  EXPECT_NEAR(values<float>(out[0])[0], w * 3 + (1 - w) * 7, 1e-5);
}

// A query whose every key is masked (left padding, nothing cached): `unattended = all`
// averages every value (transformers' finfo.min masks), `zero` gives zeros (sdpa's NaN
// guard); the other rows are the same either way. One head, head_dim 2, by hand: row 1's
// first query has no key, its second attends keys 1..1.
TEST(AttentionTest, UnattendedRowsAverageOrGiveZeros) {
  OwnedTensor q = f32({2, 2, 2}, {1, 0, 0, 1, 1, 1, 0, 1});
  OwnedTensor k = f32({2, 2, 2}, {1, 0, 0, 1, 2, 0, 0, 2});
  OwnedTensor v = f32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  OwnedTensor mask = i64({2, 2}, {1, 1, 0, 1});
  std::vector<float> rows[2];
  for (int zero = 0; zero < 2; ++zero) {
    ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(1)},
                          {"head_dim", ops::Attr::ofInt(2)},
                          {"causal", ops::Attr::ofInt(1)},
                          {"unattended", ops::Attr::ofString(zero ? "zero" : "all")}};
    std::vector<OwnedTensor> out;
    ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, &mask}, out, attrs, 1).isOk());
    rows[zero] = values<float>(out[0]);
  }
  // Row 1, query 0: the average of row 1's values, (5 + 7) / 2 and (6 + 8) / 2, or zeros.
  EXPECT_FLOAT_EQ(rows[0][4], 6.0f);
  EXPECT_FLOAT_EQ(rows[0][5], 7.0f);
  EXPECT_EQ(rows[1][4], 0.0f);
  EXPECT_EQ(rows[1][5], 0.0f);
  // Row 1, query 1 attends key 1 alone: its value, whatever the rule.
  EXPECT_FLOAT_EQ(rows[1][6], 7.0f);
  EXPECT_FLOAT_EQ(rows[1][7], 8.0f);
  for (int i : {0, 1, 2, 3, 6, 7})
    EXPECT_EQ(rows[0][i], rows[1][i]) << i;
  ops::AttrMap bad = {{"num_heads", ops::Attr::ofInt(1)},
                      {"head_dim", ops::Attr::ofInt(2)},
                      {"unattended", ops::Attr::ofString("nan")}};
  std::vector<OwnedTensor> out;
  Status status = run("tfm.attention", {&q, &k, &v, &mask}, out, bad, 1);
  EXPECT_NE(status.message().find("'all', 'causal' or 'zero'"), std::string::npos);
}

// Gemma-2's logit soft-capping (`softcap`): scores = cap · tanh(scale · q·k / cap), then the
// ALiBi bias and the mask, softmax. The reference below is written out here in double
// precision from that formula (not from the kernel): GQA 4/2 heads, causal, a left-padded
// row, and three variants for where the cap sits: a padding mask alone, with ALiBi (the
// bias is added after the cap), and an additive float mask instead of the padding mask
// (added after the cap). Each
// runs in I/O mode (past inputs, presents) and, with the padding mask, through the
// session's cache (prefill of the past, then the new tokens). Inputs are scaled so that
// scores reach several times the cap; then the capped and uncapped outputs differ by
// orders of magnitude more than the tolerance, and the test checks that they do, so a
// kernel that ignored `softcap` fails it.
// Tolerance per element: 1e-5 + 1e-5·|expected| (f32 dot products of 8 terms, tanh and
// exp in f32 against double; the largest error seen is 3e-7).
struct SoftcapVariant {
  const char *name;
  bool alibi, additive;
};
void PrintTo(const SoftcapVariant &variant, std::ostream *os) { *os << variant.name; }

class AttentionSoftcapTest : public ::testing::TestWithParam<SoftcapVariant> {};

TEST_P(AttentionSoftcapTest, MatchesADoubleReferenceInBothCacheModes) {
  const SoftcapVariant variant = GetParam();
  const int64_t B = 2, P = 3, S = 4, T = P + S, H = 4, KH = 2, D = 8, group = H / KH;
  const float scale = 1.0f / std::sqrt(float(D)), cap = 2.5f;
  std::mt19937 rng(variant.alibi * 2 + variant.additive + 11);
  // Every token's query, key and value, [B, T, heads * D]; queries of the past tokens are
  // used by the session's prefill step only.
  OwnedTensor q = randomF32({B, T, H * D}, rng), k = randomF32({B, T, KH * D}, rng),
              v = randomF32({B, T, KH * D}, rng);
  auto scaleBy = [](OwnedTensor &t, float factor) {
    auto *data = reinterpret_cast<float *>(t.storage.data());
    for (int64_t i = 0; i < t.ref().elements(); ++i)
      data[i] *= factor;
  };
  scaleBy(q, 2.0f);
  scaleBy(k, 2.0f);  // |scale · q·k| up to ~15, against a cap of 2.5
  const std::vector<std::vector<int64_t>> mask = {{1, 1, 1, 1, 1, 1, 1}, {0, 0, 1, 1, 1, 1, 1}};
  std::vector<float> additive(B * H * S * T);
  for (size_t i = 0; i < additive.size(); ++i)
    additive[i] = variant.additive ? -0.75f * float(i % 5) : 0.0f;  // finite, uneven

  auto at = [](const OwnedTensor &t, int64_t b, int64_t token, int64_t feature) {
    const int64_t tokens = t.shape[1], features = t.shape[2];
    return double(reinterpret_cast<const float *>(t.storage.data())[(b * tokens + token) *
                                                                     features + feature]);
  };
  // BLOOM's slopes for 4 heads: 2^-2, 2^-4, 2^-6, 2^-8.
  const double slopes[] = {0.25, 0.0625, 0.015625, 0.00390625};
  // The output of query token `token` (>= 0), [H * D]; empty for a padding query.
  auto reference = [&](bool capped, int64_t b, int64_t token, int64_t firstQuery) {
    // With the additive mask as input 3, the kernel knows of no padding.
    auto on = [&](int64_t t) { return variant.additive || mask[b][t] != 0; };
    std::vector<double> row(H * D, 0.0);
    if (!on(token))
      return std::vector<double>();
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / group;
      std::vector<double> score(T, -INFINITY);
      double maximum = -INFINITY;
      int64_t attended = 0;
      for (int64_t t = 0; t <= token; ++t) {
        if (!on(t))
          continue;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += at(q, b, token, h * D + d) * at(k, b, t, kh * D + d);
        double x = double(scale) * dot;
        if (capped)
          x = double(cap) * std::tanh(x / double(cap));
        if (variant.alibi)
          x += slopes[h] * double(attended);  // key position: attended keys before it
        if (variant.additive)
          x += additive[((b * H + h) * S + (token - firstQuery)) * T + t];
        ++attended;
        score[t] = x;
        maximum = std::max(maximum, x);
      }
      double sum = 0;
      for (int64_t t = 0; t < T; ++t)
        sum += score[t] == -INFINITY ? 0.0 : std::exp(score[t] - maximum);
      for (int64_t t = 0; t < T; ++t) {
        if (score[t] == -INFINITY)
          continue;
        double weight = std::exp(score[t] - maximum) / sum;
        for (int64_t d = 0; d < D; ++d)
          row[h * D + d] += weight * at(v, b, t, kh * D + d);
      }
    }
    return row;
  };

  ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(H)},
                        {"num_kv_heads", ops::Attr::ofInt(KH)},
                        {"head_dim", ops::Attr::ofInt(D)},
                        {"scale", ops::Attr::ofFloat(scale)},
                        {"causal", ops::Attr::ofInt(1)},
                        {"softcap", ops::Attr::ofFloat(cap)}};
  if (variant.alibi)
    attrs["alibi"] = ops::Attr::ofInt(1);
  ops::AttrMap uncapped = attrs;
  uncapped.erase("softcap");

  // Compares `got` ([B, end - begin, H * D], query tokens [begin, end)) with the reference;
  // returns the largest difference from the capped reference.
  double worst = 0, uncappedGap = 0;
  auto compare = [&](const OwnedTensor &got, int64_t begin, int64_t end, bool capped,
                     const char *what) {
    std::vector<float> out = values<float>(got);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t token = begin; token < end; ++token) {
        std::vector<double> expected = reference(true, b, token, begin);
        for (size_t f = 0; f < expected.size(); ++f) {
          double value = out[(b * (end - begin) + token - begin) * H * D + f];
          double error = std::fabs(value - expected[f]);
          if (!capped) {
            uncappedGap = std::max(uncappedGap, error);
            continue;
          }
          worst = std::max(worst, error);
          EXPECT_LE(error, 1e-5 + 1e-5 * std::fabs(expected[f]))
              << what << " row " << b << " token " << token << " feature " << f << ": "
              << value << " vs " << expected[f];
        }
      }
  };
  // The uncapped kernel against the uncapped reference: the reference itself is right.
  auto compareUncappedReference = [&](const OwnedTensor &got, int64_t begin, int64_t end) {
    std::vector<float> out = values<float>(got);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t token = begin; token < end; ++token) {
        std::vector<double> expected = reference(false, b, token, begin);
        for (size_t f = 0; f < expected.size(); ++f)
          EXPECT_NEAR(out[(b * (end - begin) + token - begin) * H * D + f], expected[f],
                      1e-5 + 1e-5 * std::fabs(expected[f]))
              << "uncapped row " << b << " token " << token << " feature " << f;
      }
  };

  // I/O mode: the first P tokens' keys and values as past inputs [B, KH, P, D].
  OwnedTensor pastKey(DType::F32, {B, KH, P, D}), pastValue(DType::F32, {B, KH, P, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < KH; ++h)
      for (int64_t t = 0; t < P; ++t)
        for (int64_t d = 0; d < D; ++d) {
          int64_t index = ((b * KH + h) * P + t) * D + d;
          reinterpret_cast<float *>(pastKey.storage.data())[index] = float(at(k, b, t, h * D + d));
          reinterpret_cast<float *>(pastValue.storage.data())[index] =
              float(at(v, b, t, h * D + d));
        }
  OwnedTensor qNew = tokens(q, P, T), kNew = tokens(k, P, T), vNew = tokens(v, P, T);
  OwnedTensor padding = columns(mask, 0, T);
  OwnedTensor additiveMask = f32({B, H, S, T}, additive);
  const OwnedTensor *maskInput = variant.additive ? &additiveMask : &padding;
  for (bool capped : {true, false}) {
    std::vector<OwnedTensor> io;
    Status status = run("tfm.attention", {&qNew, &kNew, &vNew, maskInput, &pastKey, &pastValue},
                        io, capped ? attrs : uncapped, 3);
    ASSERT_TRUE(status.isOk()) << status.message();
    compare(io[0], P, T, capped, "I/O");
    if (!capped)
      compareUncappedReference(io[0], P, T);
  }

  // The session's cache: prefill of tokens [0, P), then [P, T).
  if (!variant.additive) {
    ops::AttrMap cached = attrs;
    cached["cache_layer"] = ops::Attr::ofInt(0);
    std::vector<float> keys(B * KH * 16 * D), vals(B * KH * 16 * D);
    ops::KvCache cache;
    cache.layers.push_back({DType::F32, B, KH, 16, D, keys.data(), vals.data()});
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, P}, {P, T}}) {
      OwnedTensor qs = tokens(q, begin, end), ks = tokens(k, begin, end),
                  vs = tokens(v, begin, end), m = columns(mask, 0, end);
      std::vector<OwnedTensor> step;
      Status status =
          run("tfm.attention", {&qs, &ks, &vs, &m}, step, cached, 1, &cache);
      ASSERT_TRUE(status.isOk()) << status.message();
      compare(step[0], begin, end, true, "session");
    }
  }
  std::printf("softcap %s: max error %.3g, uncapped output differs by up to %.3g\n",
              variant.name, worst, uncappedGap);
  // Ignoring the cap must fail the comparison by far.
  EXPECT_GT(uncappedGap, 1e-2) << "softcap changes too little here to be tested";
}

INSTANTIATE_TEST_SUITE_P(Variants, AttentionSoftcapTest,
                         ::testing::Values(SoftcapVariant{"padding", false, false},
                                           SoftcapVariant{"alibi", true, false},
                                           SoftcapVariant{"additive", false, true}),
                         [](const auto &info) { return std::string(info.param.name); });

TEST(AttentionTest, NegativeOrNonFiniteSoftcapIsAnError) {
  OwnedTensor q = f32({1, 1, 2}, {1, 0});
  for (float bad : {-1.0f, std::numeric_limits<float>::infinity()}) {
    ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(1)},
                          {"head_dim", ops::Attr::ofInt(2)},
                          {"softcap", ops::Attr::ofFloat(bad)}};
    EXPECT_NE(errorOf("tfm.attention", {&q, &q, &q}, attrs).find("softcap"), std::string::npos)
        << bad;
  }
}

TEST(AttentionTest, SessionModeWithoutCacheOrMaskIsAnError) {
  ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(1)}, {"head_dim", ops::Attr::ofInt(2)},
                        {"cache_layer", ops::Attr::ofInt(0)}};
  OwnedTensor q = f32({1, 1, 2}, {1, 0}), mask = i64({1, 1}, {1});
  EXPECT_NE(errorOf("tfm.attention", {&q, &q, &q}, attrs).find("padding mask"),
            std::string::npos);
  EXPECT_NE(errorOf("tfm.attention", {&q, &q, &q, &mask}, attrs).find("KV cache"),
            std::string::npos);
}

TEST(TransformerOpsTest, NormsLinearActivations) {
  OwnedTensor x = f32({1, 4}, {1, 2, 3, 4}), ones = f32({4}, {1, 1, 1, 1}),
              zeros = f32({4}, {0, 0, 0, 0});
  std::vector<float> rms = values<float>(
      run1("tfm.rms_norm", {&x, &ones}, {{"epsilon", ops::Attr::ofFloat(0)}}));
  EXPECT_NEAR(rms[3], 4 / std::sqrt(7.5f), 1e-6);
  std::vector<float> ln = values<float>(
      run1("tfm.layer_norm", {&x, &ones, &zeros}, {{"epsilon", ops::Attr::ofFloat(0)}}));
  EXPECT_NEAR(ln[0], -1.5f / std::sqrt(1.25f), 1e-6);
  // weight [out=2, in=4]: torch layout, y = x W^T + b.
  OwnedTensor w = f32({2, 4}, {1, 0, 0, 0, 0, 1, 1, 0}), b = f32({2}, {10, 20});
  EXPECT_EQ(values<float>(run1("tfm.linear", {&x, &w, &b})), (std::vector<float>{11, 25}));
  OwnedTensor a = f32({2}, {-1, 2});
  std::vector<float> silu = values<float>(
      run1("tfm.activation", {&a}, {{"kind", ops::Attr::ofString("silu")}}));
  EXPECT_NEAR(silu[1], 2 / (1 + std::exp(-2.0f)), 1e-6);
  std::vector<float> gelu = values<float>(
      run1("tfm.activation", {&a}, {{"kind", ops::Attr::ofString("gelu_erf")}}));
  EXPECT_NEAR(gelu[0], -0.15865525f, 1e-6);
  EXPECT_NE(errorOf("tfm.activation", {&a}, {{"kind", ops::Attr::ofString("swish2")}})
                .find("unknown activation"),
            std::string::npos);
}

// The plan's half activation dtype (dsc-activation-dtype): a linear reads an f16 input
// widened and writes the f32 its output_dtype says; a gated linear rounds its result into
// bf16 once, on both the reference and the fast kernels. Values chosen so that the
// rounding shows: 1 + 2^-12 is no f16 (f16's step at 1 is 2^-10; the f32 value would give
// 4.000244), and the gated product is no bf16.
TEST(TransformerOpsTest, LinearsReadAndWriteTheHalfActivationDtype) {
  OwnedTensor x = f16({1, 2}, {1.0f + 0x1p-12f, 3}), w = f32({1, 2}, {1, 1});
  for (bool fast : {false, true}) {
    std::vector<OwnedTensor> outputs;
    ASSERT_TRUE(run("tfm.linear", {&x, &w}, outputs,
                    {{"output_dtype", ops::Attr::ofType(DType::F32)}}, 1, nullptr, nullptr, fast)
                    .isOk());
    ASSERT_EQ(outputs[0].dtype, DType::F32);
    // 1 + 2^-12 is stored as 1 in f16: the input is read as stored.
    EXPECT_EQ(values<float>(outputs[0]), (std::vector<float>{4.0f})) << fast;

    OwnedTensor h = f32({1, 2}, {1.0f, 0.5f}), gateUp = f32({2, 2}, {1, 0, 0.3f, 0.7f});
    ASSERT_TRUE(run("tfm.linear", {&h, &gateUp}, outputs,
                    {{"activation", ops::Attr::ofString("relu")},
                     {"gated", ops::Attr::ofInt(1)},
                     {"output_dtype", ops::Attr::ofType(DType::BF16)}},
                    1, nullptr, nullptr, fast)
                    .isOk());
    ASSERT_EQ(outputs[0].dtype, DType::BF16);
    // relu(1) * (0.3 + 0.35) = 0.65 as f32, then rounded once to bf16.
    const float exact = 1.0f * (0.3f * 1.0f + 0.7f * 0.5f);
    const float widened = bfloat16ToFloat(floatToBfloat16(exact));
    const std::vector<uint16_t> bits = values<uint16_t>(outputs[0]);
    ASSERT_EQ(bits.size(), 1u);
    EXPECT_EQ(bfloat16ToFloat(bits[0]), widened) << fast;
    EXPECT_NE(widened, exact);
  }
  EXPECT_NE(errorOf("tfm.linear", {&x, &w}, {{"output_dtype", ops::Attr::ofType(DType::I32)}})
                .find("output_dtype must be a float type"),
            std::string::npos);
}

TEST(TransformerOpsTest, EmbeddingRejectsIdsOutsideTheVocabulary) {
  OwnedTensor table = f32({3, 2}, {0, 1, 2, 3, 4, 5}), ids = i64({2}, {2, 0});
  EXPECT_EQ(values<float>(run1("tfm.embedding", {&ids, &table})),
            (std::vector<float>{4, 5, 0, 1}));
  OwnedTensor bad = i64({1}, {3});
  EXPECT_NE(errorOf("tfm.embedding", {&bad, &table}).find("outside the vocabulary"),
            std::string::npos);
}

// dsc-fuse-embedding-scale's `scale`: the gathered rows times it, as the unfused Mul of the
// f32 rows computes them; a non-finite scale is refused.
TEST(TransformerOpsTest, EmbeddingScalesItsRows) {
  OwnedTensor table = f32({3, 2}, {0.5f, -1, 2, 3, 4, 5.25f}), ids = i64({2}, {2, 0});
  EXPECT_EQ(values<float>(run1("tfm.embedding", {&ids, &table}, {{"scale", ops::Attr::ofFloat(4)}})),
            (std::vector<float>{16, 21, 2, -4}));
  EXPECT_NE(errorOf("tfm.embedding", {&ids, &table},
                    {{"scale", ops::Attr::ofFloat(std::numeric_limits<float>::infinity())}})
                .find("scale must be finite"),
            std::string::npos);
}

} // namespace
} // namespace dsrt::test
