// The tfm.* kernels: attention's session KV cache must give what its I/O form gives on the
// same tokens (prefill then decode steps against one pass over everything), with rotary,
// ALiBi, GQA and padding; and the small ops against their formulas.
#include "OpTestUtil.h"

#include <cmath>
#include <random>

namespace dsrt::test {
namespace {

OwnedTensor randomF32(Shape shape, std::mt19937 &rng) {
  OwnedTensor t(DType::F32, shape);
  std::normal_distribution<float> normal;
  auto *data = reinterpret_cast<float *>(t.storage.data());
  for (int64_t i = 0; i < t.ref().elements(); ++i)
    data[i] = normal(rng);
  return t;
}

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

// A rank of a tensor-parallel group, for kernels that only read which rank they are.
class RankOnly : public ops::Collectives {
public:
  RankOnly(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allReduceSum(float *, int64_t) override { return Status::error("not a real group"); }
  Status allGather(const void *, const std::vector<int64_t> &, void *) override {
    return Status::error("not a real group");
  }

private:
  int rank_, size_;
};

// Features [begin, end) of the last axis of a [b, s, f] tensor.
OwnedTensor features(const OwnedTensor &t, int64_t begin, int64_t end) {
  int64_t rows = t.shape[0] * t.shape[1], f = t.shape[2];
  OwnedTensor out(t.dtype, {t.shape[0], t.shape[1], end - begin});
  auto *src = reinterpret_cast<const float *>(t.storage.data());
  auto *dst = reinterpret_cast<float *>(out.storage.data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = begin; j < end; ++j)
      dst[i * (end - begin) + j - begin] = src[i * f + j];
  return out;
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

TEST(TransformerOpsTest, EmbeddingRejectsIdsOutsideTheVocabulary) {
  OwnedTensor table = f32({3, 2}, {0, 1, 2, 3, 4, 5}), ids = i64({2}, {2, 0});
  EXPECT_EQ(values<float>(run1("tfm.embedding", {&ids, &table})),
            (std::vector<float>{4, 5, 0, 1}));
  OwnedTensor bad = i64({1}, {3});
  EXPECT_NE(errorOf("tfm.embedding", {&bad, &table}).find("outside the vocabulary"),
            std::string::npos);
}

} // namespace
} // namespace dsrt::test
