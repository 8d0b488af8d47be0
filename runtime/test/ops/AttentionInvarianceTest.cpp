// A token's attention on the fast kernels must not depend on how the steps cut its sequence:
// the serving engine computes a position in a prompt chunk of any length, as a decode row,
// after a prefix hit (the prompt's rest a chunk of one), or again after a preemption, and a
// request's tokens must equal its tokens alone (issue 41), and the static path's. So every
// position's output must be the same bits whether the sequence came as one prompt, as decode
// rows one at a time, or cut anywhere between; over the paged cache with blocks of 1, 16 and
// 13 tokens, and over a session's contiguous cache; f32, f16 and int8 caches; plain GQA, a
// window with soft-capping, ALiBi, and a head width with a scalar tail (72). Each cut runs
// the prompt tiles where a chunk has more than one token (their counter must move).
#include "OpTestUtil.h"

#include "ops/TransformerAttentionConfig.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

namespace dsrt::test {
namespace {

using ops::Attr;
using ops::AttrMap;

struct Variant {
  std::string name;
  int64_t D = 64, window = 0;
  float softcap = 0;
  bool alibi = false;
};

// The sequence: each position's query, key and value rows.
struct Sequence {
  int64_t length, H, KH, D;
  std::vector<float> q, k, v;  // [length, H * D], [length, KH * D] twice
};

Sequence randomSequence(int64_t length, int64_t H, int64_t KH, int64_t D, std::mt19937 &rng) {
  std::normal_distribution<float> normal;
  Sequence s{length, H, KH, D, {}, {}, {}};
  for (auto *rows : {&s.q, &s.k, &s.v}) {
    rows->resize(static_cast<size_t>(length * (rows == &s.q ? H : KH) * D));
    for (float &x : *rows)
      x = 2.0f * normal(rng);
  }
  return s;
}

OwnedTensor rowsOf(const std::vector<float> &all, int64_t width, int64_t first, int64_t count,
                   bool paged) {
  OwnedTensor t(DType::F32, paged ? Shape{count, 1, width} : Shape{1, count, width});
  std::memcpy(t.storage.data(), all.data() + first * width,
              static_cast<size_t>(count * width) * sizeof(float));
  return t;
}

// A layer's storage: codes or values, then an int8 cache's scales.
struct LayerStorage {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
};

ops::KvCacheLayer makeLayer(DType cacheType, int64_t batch, int64_t KH, int64_t capacity,
                            int64_t D, LayerStorage &storage) {
  const int64_t rows = batch * KH * capacity;
  storage.bytes.assign(static_cast<size_t>(2 * rows * D) * dtypeSize(cacheType), 0);
  ops::KvCacheLayer layer{cacheType, batch, KH, capacity, D};
  layer.key = storage.bytes.data();
  layer.value = storage.bytes.data() + storage.bytes.size() / 2;
  if (cacheType == DType::I8) {
    const int64_t groups = ops::kvInt8Groups(D);
    storage.scales.assign(static_cast<size_t>(2 * rows * groups), 0.0f);
    layer.keyScales = storage.scales.data();
    layer.valueScales = storage.scales.data() + rows * groups;
  }
  return layer;
}

AttrMap attrsOf(const Variant &variant, const Sequence &s, DType cacheType) {
  AttrMap attrs = {{"num_heads", Attr::ofInt(s.H)},
                   {"num_kv_heads", Attr::ofInt(s.KH)},
                   {"head_dim", Attr::ofInt(s.D)},
                   {"scale", Attr::ofFloat(1.0f / std::sqrt(float(s.D)))},
                   {"causal", Attr::ofInt(1)},
                   {"cache_layer", Attr::ofInt(0)},
                   // An int8 layer holds an f16 plan's cache (the engine's kv_cache_dtype).
                   {"cache_dtype", Attr::ofType(cacheType == DType::I8 ? DType::F16 : cacheType)}};
  if (variant.window)
    attrs["window"] = Attr::ofInt(variant.window);
  if (variant.softcap > 0)
    attrs["softcap"] = Attr::ofFloat(variant.softcap);
  if (variant.alibi)
    attrs["alibi"] = Attr::ofInt(1);
  return attrs;
}

// Every position's output [length, H * D] when the steps are `chunks` (lengths in order):
// over a paged cache of blocks of `blockSize` in shuffled order (the engine's), or, with
// blockSize 0, over a session's contiguous cache (the static path).
std::vector<float> attendInSteps(const Sequence &s, const Variant &variant, DType cacheType,
                                 int64_t blockSize, const std::vector<int64_t> &chunks,
                                 int64_t &tiles) {
  const bool paged = blockSize > 0;
  const int64_t blocks = paged ? (s.length + blockSize - 1) / blockSize : 1;
  LayerStorage storage;
  ops::KvCache cache;
  cache.layers.push_back(
      makeLayer(cacheType, blocks, s.KH, paged ? blockSize : s.length, s.D, storage));
  cache.blockSize = paged ? blockSize : 0;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::mt19937 shuffle(static_cast<unsigned>(blockSize));
  std::shuffle(table.begin(), table.end(), shuffle);
  const AttrMap attrs = attrsOf(variant, s, cacheType);
  std::vector<float> out(static_cast<size_t>(s.length * s.H * s.D));
  const int64_t before = ops::attention::tiledAttentionTiles();
  int64_t position = 0;
  for (int64_t chunk : chunks) {
    OwnedTensor q = rowsOf(s.q, s.H * s.D, position, chunk, paged),
                k = rowsOf(s.k, s.KH * s.D, position, chunk, paged),
                v = rowsOf(s.v, s.KH * s.D, position, chunk, paged);
    std::vector<int64_t> positions(static_cast<size_t>(chunk));
    std::iota(positions.begin(), positions.end(), position);
    OwnedTensor positionTensor = paged ? i64({chunk, 1}, positions) : i64({1, chunk}, positions);
    const int64_t keys = paged ? s.length : position + chunk;
    OwnedTensor mask = paged ? i64({chunk, keys}, std::vector<int64_t>(chunk * keys, 1))
                             : i64({1, keys}, std::vector<int64_t>(keys, 1));
    cache.pagedRows.clear();
    for (int64_t j = 0; paged && j < chunk; ++j)
      cache.pagedRows.push_back({table.data(), blocks, position + j});
    std::vector<OwnedTensor> outputs;
    Status status = run("tfm.attention", {&q, &k, &v, &mask, nullptr, nullptr, &positionTensor},
                        outputs, attrs, 1, &cache, nullptr, /*fastKernels=*/true,
                        /*rowInvariant=*/true);
    EXPECT_TRUE(status.isOk()) << status.message();
    if (!status.isOk())
      return {};
    std::vector<float> got = values<float>(outputs[0]);
    std::copy(got.begin(), got.end(), out.begin() + position * s.H * s.D);
    position += chunk;
  }
  tiles = ops::attention::tiledAttentionTiles() - before;
  return out;
}

TEST(FastAttentionInvariance, APositionsAttentionIsTheSameBitsHoweverTheStepsCutItsSequence) {
  const int64_t length = 90, H = 8, KH = 2;
  const std::vector<std::vector<int64_t>> cuts = {
      {90}, {1, 89}, {37, 1, 52}, {64, 26}, {89, 1}, {5, 1, 1, 17, 66},
      std::vector<int64_t>(90, 1)};
  const std::vector<Variant> variants = {{"gqa"},
                                         {"window 19, soft-cap 2", 64, 19, 2.0f},
                                         {"alibi", 64, 0, 0.0f, true},
                                         {"head width 72", 72}};
  int compared = 0;
  for (const Variant &variant : variants)
    for (DType cacheType : {DType::F32, DType::F16, DType::I8}) {
      std::mt19937 rng(static_cast<unsigned>(variant.D + variant.window + int(cacheType)));
      const Sequence s = randomSequence(length, H, KH, variant.D, rng);
      std::vector<float> first;
      std::string firstName;
      // The static path has no int8 cache (the engine's option).
      for (int64_t blockSize : {0, 16, 1, 13}) {
        if (blockSize == 0 && cacheType == DType::I8)
          continue;
        for (const std::vector<int64_t> &cut : cuts) {
          std::string name = variant.name + ", " + dtypeName(cacheType) + " cache, " +
                             (blockSize ? "blocks of " + std::to_string(blockSize)
                                        : std::string("contiguous")) +
                             ", steps";
          for (int64_t chunk : cut)
            name += " " + std::to_string(chunk);
          if (cut.size() == 90)
            name = name.substr(0, name.find(", steps")) + ", one token a step";
          int64_t tiles = 0;
          std::vector<float> got = attendInSteps(s, variant, cacheType, blockSize, cut, tiles);
          ASSERT_FALSE(HasFailure()) << name;
          const bool chunked = std::any_of(cut.begin(), cut.end(), [](int64_t c) { return c > 1; });
          EXPECT_EQ(tiles > 0, chunked) << name << ": the prompt tiles ran " << tiles;
          if (first.empty()) {
            first = got;
            firstName = name;
            continue;
          }
          for (size_t i = 0; i < got.size(); ++i) {
            uint32_t gotBits, wantBits;
            std::memcpy(&gotBits, &got[i], sizeof gotBits);
            std::memcpy(&wantBits, &first[i], sizeof wantBits);
            ASSERT_EQ(gotBits, wantBits)
                << name << " against " << firstName << ": position "
                << i / static_cast<size_t>(H * variant.D) << ", element "
                << i % static_cast<size_t>(H * variant.D) << ": " << got[i] << " against "
                << first[i];
          }
          ++compared;
        }
      }
    }
  EXPECT_GT(compared, 0);
}

} // namespace
} // namespace dsrt::test
