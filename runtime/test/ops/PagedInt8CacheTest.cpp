// The serving engine's int8 KV cache (TransformerPagedAttention.cpp): rows of int8 codes with
// an f32 scale per 32 values (one per row where the head's width is not a multiple of 32).
//  * Its plumbing, exactly: a cache whose codes and power-of-two scales are drawn, and new
//    keys and values that int8 holds without loss (integers times a power of two, each
//    group reaching 127), must give the very outputs of an f32 cache holding the same
//    values, on the fast kernels (decode rows and tiled prompt chunks, which must run) and on
//    the reference kernels: the int8 rows are widened to exactly those f32 values.
//  * Its quantization: each new row written is within half a step of its value (|x - q·s| <=
//    s/2, s = max|x| / 127 of the row's group, plus one f32 rounding of q·s), and each
//    group's largest value is coded ±127.
#include "OpTestUtil.h"

#include "ops/TransformerAttentionConfig.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

namespace dsrt::test {
namespace {

using ops::Attr;
using ops::AttrMap;

struct Int8Layer {
  std::vector<int8_t> codes;  // keys then values, [blocks, KH, blockSize, D] each
  std::vector<float> scales;  // keys then values, [blocks, KH, blockSize, groups] each
};

// The paged cache of one layer over `int8`'s codes and scales: `blocks` of [KH, blockSize, D].
ops::KvCacheLayer int8Layer(Int8Layer &int8, int64_t blocks, int64_t KH, int64_t blockSize,
                            int64_t D) {
  const int64_t rows = blocks * KH * blockSize, groups = ops::kvInt8Groups(D);
  ops::KvCacheLayer layer{DType::I8, blocks, KH, blockSize, D};
  layer.key = int8.codes.data();
  layer.value = int8.codes.data() + rows * D;
  layer.keyScales = int8.scales.data();
  layer.valueScales = int8.scales.data() + rows * groups;
  return layer;
}

ops::KvCache pagedCache(ops::KvCacheLayer layer, int64_t blockSize,
                        const std::vector<ops::KvPagedRow> &rows) {
  ops::KvCache cache;
  cache.layers.push_back(layer);
  cache.blockSize = blockSize;
  cache.pagedRows = rows;
  return cache;
}

// Values int8 holds exactly: per group of `size`, integers in [-127, 127] times 2^e (e in
// [-6, 0]), one of them ±127.
OwnedTensor exactRows(int64_t rows, int64_t width, int64_t size, std::mt19937 &rng) {
  OwnedTensor t(DType::F32, {rows, 1, width});
  auto *data = reinterpret_cast<float *>(t.storage.data());
  std::uniform_int_distribution<int> code(-127, 127), exponent(-6, 0);
  for (int64_t g = 0; g < rows * width / size; ++g) {
    const float step = std::ldexp(1.0f, exponent(rng));
    for (int64_t i = 0; i < size; ++i)
      data[g * size + i] = static_cast<float>(code(rng)) * step;
    data[g * size + static_cast<int64_t>(rng() % size)] = (rng() % 2 ? 127.0f : -127.0f) * step;
  }
  return t;
}

TEST(FastPagedAttention, Int8CacheReadsAsAnF32CacheOfItsValues) {
  // Two prompt chunks and 38 decode rows: so many rows that each decode task takes every KV
  // head (up to 20 threads), as in the engine's steps, where a task's heads share scratch.
  std::vector<PagedSequence> sequences = {{50, 37}, {20, 1}, {0, 29}, {33, 1}};
  for (int64_t i = 0; i < 36; ++i)
    sequences.push_back({1 + (i * 17) % 60, 1});
  int64_t B = 0, longest = 0;
  for (const PagedSequence &s : sequences) {
    B += s.fresh;
    longest = std::max(longest, s.cached + s.fresh);
  }
  const int64_t H = 8, KH = 2;
  for (int64_t D : {64, 40})
    for (int64_t blockSize : {1, 16, 13})
      for (int variant = 0; variant < 2; ++variant) {
        const std::string name = "D " + std::to_string(D) + " block " +
                                 std::to_string(blockSize) + " variant " +
                                 std::to_string(variant);
        const int64_t groups = ops::kvInt8Groups(D), size = D / groups;
        ASSERT_EQ(groups, D == 64 ? 2 : 1);
        const float scale = variant == 1 ? 1.0f : 1.0f / std::sqrt(float(D));
        AttrMap attrs = {{"num_heads", Attr::ofInt(H)},        {"num_kv_heads", Attr::ofInt(KH)},
                         {"head_dim", Attr::ofInt(D)},         {"scale", Attr::ofFloat(scale)},
                         {"causal", Attr::ofInt(1)},           {"cache_layer", Attr::ofInt(0)},
                         {"cache_dtype", Attr::ofType(DType::F16)}};
        if (variant == 1) {
          attrs["window"] = Attr::ofInt(19);
          attrs["softcap"] = Attr::ofFloat(2.0f);
        }
        std::mt19937 rng(static_cast<unsigned>(D * 100 + blockSize * 10 + variant));
        const PagedStep step = pagedStep(sequences, blockSize, rng);
        OwnedTensor q = randomF32({B, 1, H * D}, rng);
        OwnedTensor k = exactRows(B, KH * D, size, rng), v = exactRows(B, KH * D, size, rng);
        OwnedTensor mask = i64({B, longest}, std::vector<int64_t>(B * longest, 1)),
                    positions = i64({B, 1}, step.positions);
        std::vector<const OwnedTensor *> in{&q, &k, &v, &mask, nullptr, nullptr, &positions};

        // The cached rows: drawn codes and power-of-two scales, and their f32 values.
        const int64_t rows = step.blocks * KH * blockSize;
        Int8Layer int8;
        int8.codes.resize(static_cast<size_t>(2 * rows * D));
        int8.scales.resize(static_cast<size_t>(2 * rows * groups));
        std::uniform_int_distribution<int> code(-127, 127), exponent(-9, -5);
        for (int8_t &c : int8.codes)
          c = static_cast<int8_t>(code(rng));
        for (float &s : int8.scales)
          s = std::ldexp(1.0f, exponent(rng));
        std::vector<float> wide(int8.codes.size());
        for (size_t i = 0; i < wide.size(); ++i)
          wide[i] = static_cast<float>(int8.codes[i]) * int8.scales[i / static_cast<size_t>(size)];

        for (bool fast : {true, false}) {
          const std::string which = name + (fast ? " fast" : " reference");
          Int8Layer runInt8 = int8;
          std::vector<float> runWide = wide;
          ops::KvCache int8Cache =
              pagedCache(int8Layer(runInt8, step.blocks, KH, blockSize, D), blockSize, step.rows);
          ops::KvCacheLayer f32Layer{DType::F32, step.blocks, KH, blockSize, D,
                                     runWide.data(), runWide.data() + rows * D};
          ops::KvCache f32Cache = pagedCache(f32Layer, blockSize, step.rows);
          std::vector<OwnedTensor> fromInt8, fromF32;
          const int64_t tilesBefore = ops::attention::tiledAttentionTiles();
          // The f32 cache under an f32 plan's attention: the int8 one holds an f16 plan's.
          AttrMap f32Attrs = attrs;
          f32Attrs["cache_dtype"] = Attr::ofType(DType::F32);
          Status status = run("tfm.attention", in, fromInt8, attrs, 1, &int8Cache, nullptr, fast,
                              /*rowInvariant=*/true);
          ASSERT_TRUE(status.isOk()) << which << ": " << status.message();
          if (fast)
            EXPECT_GT(ops::attention::tiledAttentionTiles(), tilesBefore)
                << which << ": the prompt chunks did not run the tiled kernel";
          status = run("tfm.attention", in, fromF32, f32Attrs, 1, &f32Cache, nullptr, fast,
                       /*rowInvariant=*/true);
          ASSERT_TRUE(status.isOk()) << which << ": " << status.message();
          EXPECT_EQ(values<float>(fromInt8[0]), values<float>(fromF32[0])) << which;
          // The new rows were written without loss: widened, they are the f32 cache's.
          for (size_t i = 0; i < runWide.size(); ++i)
            ASSERT_EQ(static_cast<float>(runInt8.codes[i]) *
                          runInt8.scales[i / static_cast<size_t>(size)],
                      runWide[i])
                << which << ": cached value " << i;
        }
      }
}

TEST(FastPagedAttention, Int8CacheRowsAreWithinHalfAStep) {
  const int64_t H = 4, KH = 2, D = 64, blockSize = 16, groups = ops::kvInt8Groups(D),
                size = D / groups;
  const std::vector<PagedSequence> sequences = {{10, 23}, {40, 1}};
  int64_t B = 0, longest = 0;
  for (const PagedSequence &s : sequences) {
    B += s.fresh;
    longest = std::max(longest, s.cached + s.fresh);
  }
  std::mt19937 rng(7);
  const PagedStep step = pagedStep(sequences, blockSize, rng);
  OwnedTensor q = randomF32({B, 1, H * D}, rng), k = randomF32({B, 1, KH * D}, rng),
              v = randomF32({B, 1, KH * D}, rng);
  // A row of zeros (scale 0) and a group of one large value among small ones.
  auto *keys = reinterpret_cast<float *>(k.storage.data());
  std::fill(keys, keys + D, 0.0f);
  keys[D + 3] = 1000.0f;
  OwnedTensor mask = i64({B, longest}, std::vector<int64_t>(B * longest, 1)),
              positions = i64({B, 1}, step.positions);
  const int64_t rows = step.blocks * KH * blockSize;
  Int8Layer int8;
  int8.codes.assign(static_cast<size_t>(2 * rows * D), 0);
  int8.scales.assign(static_cast<size_t>(2 * rows * groups), 0.0f);
  ops::KvCache cache =
      pagedCache(int8Layer(int8, step.blocks, KH, blockSize, D), blockSize, step.rows);
  AttrMap attrs = {{"num_heads", Attr::ofInt(H)},   {"num_kv_heads", Attr::ofInt(KH)},
                   {"head_dim", Attr::ofInt(D)},    {"scale", Attr::ofFloat(0.125f)},
                   {"causal", Attr::ofInt(1)},      {"cache_layer", Attr::ofInt(0)},
                   {"cache_dtype", Attr::ofType(DType::F16)}};
  std::vector<OwnedTensor> out;
  Status status = run("tfm.attention", {&q, &k, &v, &mask, nullptr, nullptr, &positions}, out,
                      attrs, 1, &cache, nullptr, true, true);
  ASSERT_TRUE(status.isOk()) << status.message();
  for (float y : values<float>(out[0]))
    ASSERT_TRUE(std::isfinite(y));
  for (int which = 0; which < 2; ++which) {
    const float *given = reinterpret_cast<const float *>((which ? v : k).storage.data());
    for (int64_t r = 0; r < B; ++r)
      for (int64_t kh = 0; kh < KH; ++kh) {
        const ops::KvPagedRow &row = step.rows[static_cast<size_t>(r)];
        const int64_t t = row.position;
        const int64_t slot = (row.blocks[t / blockSize] * KH + kh) * blockSize + t % blockSize;
        for (int64_t g = 0; g < groups; ++g) {
          const float *x = given + (r * KH + kh) * D + g * size;
          const int8_t *codes = int8.codes.data() + which * rows * D + slot * D + g * size;
          const float s = int8.scales[static_cast<size_t>(which * rows * groups + slot * groups + g)];
          float largest = 0;
          int widest = 0;
          for (int64_t i = 0; i < size; ++i) {
            largest = std::max(largest, std::fabs(x[i]));
            widest = std::max(widest, std::abs(int(codes[i])));
          }
          EXPECT_FLOAT_EQ(s, largest / 127.0f);
          EXPECT_EQ(widest, largest > 0 ? 127 : 0);
          for (int64_t i = 0; i < size; ++i) {
            const double widened = double(float(codes[i]) * s);
            // Half a step, and the f32 roundings of x / s and of q * s.
            EXPECT_LE(std::fabs(widened - double(x[i])),
                      0.5 * double(s) + 2 * std::ldexp(double(largest), -23))
                << (which ? "value" : "key") << " row " << r << " head " << kh << " at " << i;
          }
        }
      }
  }
}

} // namespace
} // namespace dsrt::test
