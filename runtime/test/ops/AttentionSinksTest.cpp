// tfm.attention with sinks (GPT-OSS: input 10, one logit per head that joins each row's
// softmax as a key without a value): the reference kernel against a float64 computation in
// this file, and the fast kernels (the one-query decode loop, the tiled prompt kernel, the
// paged kernel of the serving engine) against the reference or float64. The sinks are large
// enough beside the scores that leaving them out moves every output far past the bounds.
#include "OpTestUtil.h"

#include "ops/TransformerAttentionConfig.h"
#include "ops/fast/AttentionAmx.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

namespace dsrt::test {
namespace {

using ops::Attr;
using ops::AttrMap;

AttrMap sinkAttrs(int64_t H, int64_t KH, int64_t D, int64_t window = 0) {
  AttrMap attrs = {{"num_heads", Attr::ofInt(H)},
                   {"num_kv_heads", Attr::ofInt(KH)},
                   {"head_dim", Attr::ofInt(D)},
                   {"scale", Attr::ofFloat(1.0f / std::sqrt(float(D)))},
                   {"causal", Attr::ofInt(1)}};
  if (window > 0)
    attrs["window"] = Attr::ofInt(window);
  return attrs;
}

// Logits around the scores' range (queries and keys are standard normal, so scale * q.k is
// too): from far below every score to far above.
std::vector<float> sinkLogits(int64_t H) {
  std::vector<float> sinks(H);
  for (int64_t h = 0; h < H; ++h)
    sinks[h] = -3.0f + 7.0f * float(h) / float(std::max<int64_t>(1, H - 1));
  return sinks;
}

// One row of attention in float64: keys `keys(t)` and values `values(t)` (D each) at the
// attended positions, the sink in the maximum and the denominator; zero with no key.
template <class Keys, class Values>
std::vector<double> attendRow(const float *query, const std::vector<int64_t> &attended,
                              Keys keys, Values values, int64_t D, double scale, double sink) {
  std::vector<double> out(D, 0.0);
  if (attended.empty())
    return out;
  std::vector<double> scores;
  double maximum = sink;
  for (int64_t t : attended) {
    const float *key = keys(t);
    double dot = 0;
    for (int64_t d = 0; d < D; ++d)
      dot += double(query[d]) * double(key[d]);
    scores.push_back(dot * scale);
    maximum = std::max(maximum, scores.back());
  }
  double sum = std::exp(sink - maximum);
  for (double &score : scores) {
    score = std::exp(score - maximum);
    sum += score;
  }
  for (size_t i = 0; i < attended.size(); ++i) {
    const float *value = values(attended[i]);
    for (int64_t d = 0; d < D; ++d)
      out[d] += scores[i] / sum * double(value[d]);
  }
  return out;
}

struct PastCase {
  int64_t B, S, P, H, KH, D, window, padding;  // padding: leading masked keys of the last row
};

// The export's form: past inputs, a padding mask (the last sequence left-padded so far that
// its first queries attend nothing: their rows are zero, as the export's are), GQA.
struct PastInputs {
  OwnedTensor q, k, v, pastK, pastV, mask, sinks;
};

PastInputs pastInputs(const PastCase &e, std::mt19937 &rng) {
  const int64_t T = e.P + e.S;
  std::vector<int64_t> maskValues(e.B * T, 1);
  for (int64_t t = 0; t < e.padding; ++t)
    maskValues[(e.B - 1) * T + t] = 0;
  return {randomF32({e.B, e.S, e.H * e.D}, rng), randomF32({e.B, e.S, e.KH * e.D}, rng),
          randomF32({e.B, e.S, e.KH * e.D}, rng), randomF32({e.B, e.KH, e.P, e.D}, rng),
          randomF32({e.B, e.KH, e.P, e.D}, rng), i64({e.B, T}, maskValues),
          f32({e.H}, sinkLogits(e.H))};
}

std::vector<double> pastExpected(const PastCase &e, const PastInputs &in) {
  const int64_t T = e.P + e.S, group = e.H / e.KH;
  const float *q = reinterpret_cast<const float *>(in.q.storage.data());
  const float *k = reinterpret_cast<const float *>(in.k.storage.data());
  const float *v = reinterpret_cast<const float *>(in.v.storage.data());
  const float *pk = reinterpret_cast<const float *>(in.pastK.storage.data());
  const float *pv = reinterpret_cast<const float *>(in.pastV.storage.data());
  const std::vector<int64_t> mask = values<int64_t>(in.mask);
  const std::vector<float> sinks = values<float>(in.sinks);
  std::vector<double> out;
  for (int64_t b = 0; b < e.B; ++b)
    for (int64_t s = 0; s < e.S; ++s)
      for (int64_t h = 0; h < e.H; ++h) {
        const int64_t kh = h / group, position = e.P + s;
        auto row = [&](const float *past, const float *fresh) {
          return [=](int64_t t) {
            return t < e.P ? past + ((b * e.KH + kh) * e.P + t) * e.D
                           : fresh + ((b * e.S + t - e.P) * e.KH + kh) * e.D;
          };
        };
        std::vector<int64_t> attended;
        for (int64_t t = 0; t <= position; ++t)
          if (mask[b * T + t] != 0 && (e.window == 0 || position - t < e.window))
            attended.push_back(t);
        std::vector<double> y = attendRow(q + ((b * e.S + s) * e.H + h) * e.D, attended,
                                          row(pk, k), row(pv, v), e.D,
                                          1.0 / std::sqrt(double(e.D)), sinks[h]);
        out.insert(out.end(), y.begin(), y.end());
      }
  return out;
}

// Every element within `bound` of float64, and the sinks mattering: without them the
// reference would be further than `margin` bounds away somewhere.
void expectSinksMatter(const std::vector<float> &got, const std::vector<double> &want,
                       const std::vector<float> &withoutSinks, double bound,
                       const std::string &name, double margin = 100) {
  ASSERT_EQ(got.size(), want.size()) << name;
  ASSERT_EQ(withoutSinks.size(), want.size()) << name;
  double moved = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], bound) << name << " element " << i;
    moved = std::max(moved, std::fabs(double(withoutSinks[i]) - want[i]));
  }
  EXPECT_GT(moved, margin * bound) << name << ": the sinks change nothing here";
}

// Where the tiles ran on AMX-BF16 (bf16 queries, keys, values and weights, and in
// AmxTilesEqualTheReference both outputs rounded to bf16): a bound measured, not derived
// (the largest difference there is under half of it; the worst case TiledAttentionTest.cpp
// derives is far looser), and still a tenth of what the sinks move.
constexpr double kBf16Bound = 0.03;

const std::vector<PastCase> kPastCases = {
    // 3 queries after 4 cached tokens; the second sequence's first 6 keys padded, so its
    // first query (at position 4) has no key.
    {2, 3, 4, 4, 2, 16, 0, 6},
    {1, 9, 0, 4, 1, 8, 3, 0},  // a window of 3, MQA
    {2, 1, 7, 6, 3, 32, 0, 2},  // decode
};

TEST(AttentionSinks, ReferenceEqualsFloat64) {
  for (const PastCase &e : kPastCases) {
    const std::string name = "B " + std::to_string(e.B) + " S " + std::to_string(e.S) + " P " +
                             std::to_string(e.P) + " window " + std::to_string(e.window);
    std::mt19937 rng(unsigned(e.S * 31 + e.P));
    PastInputs in = pastInputs(e, rng);
    const OwnedTensor *pastK = e.P > 0 ? &in.pastK : nullptr, *pastV = e.P > 0 ? &in.pastV : nullptr;
    std::vector<OwnedTensor> with, without;
    Status status = run("tfm.attention",
                        {&in.q, &in.k, &in.v, &in.mask, pastK, pastV, nullptr, nullptr, nullptr,
                         nullptr, &in.sinks},
                        with, sinkAttrs(e.H, e.KH, e.D, e.window));
    ASSERT_TRUE(status.isOk()) << name << ": " << status.message();
    ASSERT_TRUE(run("tfm.attention", {&in.q, &in.k, &in.v, &in.mask, pastK, pastV}, without,
                    sinkAttrs(e.H, e.KH, e.D, e.window))
                    .isOk());
    // f32 sums of at most 16 products and exponentials against float64: well within 1e-5.
    expectSinksMatter(values<float>(with[0]), pastExpected(e, in), values<float>(without[0]),
                      1e-5, name);
  }
}

// The fast kernels' decode loop (one query) and tiled kernel (prompts) with sinks against
// the reference, the prompts long enough for several key tiles and GQA groups of 4.
TEST(FastAttentionSinks, DecodeAndTiledEqualTheReference) {
  const std::vector<PastCase> cases = {{2, 1, 80, 8, 2, 64, 0, 3},
                                       {2, 100, 30, 8, 2, 64, 0, 5},
                                       {1, 77, 0, 8, 2, 64, 17, 0}};
  for (const PastCase &e : cases) {
    const std::string name = "S " + std::to_string(e.S) + " P " + std::to_string(e.P);
    std::mt19937 rng(unsigned(e.S + e.P));
    PastInputs in = pastInputs(e, rng);
    std::vector<const OwnedTensor *> inputs{&in.q, &in.k, &in.v, &in.mask, &in.pastK,
                                            &in.pastV, nullptr, nullptr, nullptr, nullptr,
                                            &in.sinks};
    std::vector<OwnedTensor> reference, fast, without;
    AttrMap attrs = sinkAttrs(e.H, e.KH, e.D, e.window);
    ASSERT_TRUE(run("tfm.attention", inputs, reference, attrs).isOk()) << name;
    const int64_t tiles = ops::attention::tiledAttentionTiles(),
                  amxTiles = ops::attention::tiledAttentionAmxTiles();
    Status status = run("tfm.attention", inputs, fast, attrs, 1, nullptr, nullptr, true);
    ASSERT_TRUE(status.isOk()) << name << ": " << status.message();
    EXPECT_EQ(ops::attention::tiledAttentionTiles() > tiles, e.S > 1)
        << name << ": the tiled kernel runs for prompts only";
    inputs.resize(6);
    ASSERT_TRUE(run("tfm.attention", inputs, without, attrs).isOk()) << name;
    std::vector<double> want;
    for (float x : values<float>(reference[0]))
      want.push_back(x);
    // The online softmax's and the vectorised exponentials' roundings over at most 130 keys
    // (TiledAttentionTest.cpp derives them): far below 1e-5 of values of magnitude ~4; on
    // AMX-BF16 tiles (DSRT_PREFILL_GEMM=bf16) the bf16 bound of AmxTilesEqualTheReference.
    const bool amx = ops::attention::tiledAttentionAmxTiles() > amxTiles;
    expectSinksMatter(values<float>(fast[0]), want, values<float>(without[0]),
                      amx ? kBf16Bound : 1e-5, name, amx ? 10 : 100);
  }
}

// A bf16 plan's prompt over its bf16 session cache: the tiled kernel on AMX-BF16 tiles where
// the CPU has them (the sinks in the tiles' running maximum and sum), against the reference.
TEST(FastAttentionSinks, AmxTilesEqualTheReference) {
  const int64_t B = 2, S = 70, P = 30, T = P + S, H = 8, KH = 2, D = 64, capacity = 128;
  std::mt19937 rng(41);
  OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, KH * D}, rng),
              v = randomF32({B, S, KH * D}, rng), sinks = f32({H}, sinkLogits(H));
  const OwnedTensor past = randomF32({2, B, KH, capacity, D}, rng);
  const size_t count = past.storage.size() / sizeof(float);
  std::vector<uint8_t> stored(count * 2);
  ASSERT_TRUE(convertFloats(DType::F32, past.storage.data(), DType::BF16, stored.data(),
                            static_cast<int64_t>(count)));
  std::vector<int64_t> maskValues(B * T, 1);
  maskValues[T] = maskValues[T + 1] = 0;
  OwnedTensor mask = i64({B, T}, maskValues);
  AttrMap attrs = sinkAttrs(H, KH, D);
  attrs["cache_layer"] = Attr::ofInt(0);
  attrs["cache_dtype"] = Attr::ofType(DType::BF16);
  attrs["output_dtype"] = Attr::ofType(DType::BF16);
  std::vector<float> results[3];
  for (int which = 0; which < 3; ++which) {
    const bool fastKernels = which == 1, withSinks = which != 2;
    std::vector<uint8_t> cache = stored;
    ops::KvCache kv;
    kv.layers.push_back({DType::BF16, B, KH, capacity, D, cache.data(),
                         cache.data() + cache.size() / 2});
    std::vector<OwnedTensor> out;
    const int64_t amxBefore = ops::attention::tiledAttentionAmxTiles();
    Status status = run("tfm.attention",
                        {&q, &k, &v, &mask, nullptr, nullptr, nullptr, nullptr, nullptr,
                         nullptr, withSinks ? &sinks : nullptr},
                        out, attrs, 1, &kv, nullptr, fastKernels);
    ASSERT_TRUE(status.isOk()) << status.message();
    if (fastKernels && ops::fast::amx::available())
      EXPECT_GT(ops::attention::tiledAttentionAmxTiles(), amxBefore) << "no AMX tile ran";
    results[which].resize(B * S * H * D);
    ASSERT_TRUE(convertFloats(DType::BF16, out[0].storage.data(), DType::F32,
                              results[which].data(), B * S * H * D));
  }
  std::vector<double> want(results[0].begin(), results[0].end());
  expectSinksMatter(results[1], want, results[2], kBf16Bound, "amx", 10);
}

// Tensor parallelism: each rank reads its own heads' sinks out of the model's [H] (as it
// reads its heads of a bias), and its output is those heads of the whole.
TEST(AttentionSinks, RanksReadTheirHeadsSinks) {
  const PastCase e{2, 3, 4, 4, 2, 16, 0, 0};
  std::mt19937 rng(5);
  PastInputs in = pastInputs(e, rng);
  AttrMap attrs = sinkAttrs(e.H, e.KH, e.D);
  std::vector<OwnedTensor> whole;
  ASSERT_TRUE(run("tfm.attention",
                  {&in.q, &in.k, &in.v, &in.mask, &in.pastK, &in.pastV, nullptr, nullptr,
                   nullptr, nullptr, &in.sinks},
                  whole, attrs)
                  .isOk());
  attrs["rank_heads"] = Attr::ofInts({2, 2});
  attrs["rank_head_offsets"] = Attr::ofInts({0, 2});
  attrs["rank_kv_heads"] = Attr::ofInts({1, 1});
  attrs["rank_kv_head_offsets"] = Attr::ofInts({0, 1});
  for (int rank = 0; rank < 2; ++rank) {
    RankOnly group(rank, 2);
    const int64_t q0 = rank * 2 * e.D, k0 = rank * e.D;
    OwnedTensor q = features(in.q, q0, q0 + 2 * e.D), k = features(in.k, k0, k0 + e.D),
                v = features(in.v, k0, k0 + e.D);
    // Its KV head of the past: [B, 1, P, D].
    OwnedTensor pastK(DType::F32, {e.B, 1, e.P, e.D}), pastV(DType::F32, {e.B, 1, e.P, e.D});
    for (int which = 0; which < 2; ++which) {
      const float *from = reinterpret_cast<const float *>(
          (which == 0 ? in.pastK : in.pastV).storage.data());
      float *to = reinterpret_cast<float *>((which == 0 ? pastK : pastV).storage.data());
      for (int64_t b = 0; b < e.B; ++b)
        std::copy(from + (b * e.KH + rank) * e.P * e.D, from + (b * e.KH + rank + 1) * e.P * e.D,
                  to + b * e.P * e.D);
    }
    std::vector<OwnedTensor> mine;
    Status status = run("tfm.attention",
                        {&q, &k, &v, &in.mask, &pastK, &pastV, nullptr, nullptr, nullptr,
                         nullptr, &in.sinks},
                        mine, attrs, 1, nullptr, &group);
    ASSERT_TRUE(status.isOk()) << status.message();
    std::vector<float> got = values<float>(mine[0]),
                       want = values<float>(features(whole[0], q0, q0 + 2 * e.D));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_FLOAT_EQ(got[i], want[i]) << "rank " << rank << " element " << i;
  }
}

TEST(AttentionSinks, RejectsSinksOfAnotherShape) {
  std::mt19937 rng(1);
  OwnedTensor q = randomF32({1, 2, 32}, rng), sinks = f32({3}, {0, 0, 0});
  std::string error = errorOf("tfm.attention",
                              {&q, &q, &q, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                               nullptr, &sinks},
                              sinkAttrs(4, 4, 8));
  EXPECT_NE(error.find("the sinks must be float [4]"), std::string::npos) << error;
}

// The serving engine's paged cache: a prompt chunk of 37 tokens after 50 cached ones, a
// decode row of another sequence and a whole prompt of 29, over blocks of 16 tokens drawn
// from a shuffled pool. The fast kernels (the tiled kernel for the chunks, the decode loop for
// the lone row) and the reference kernels against float64 over the cache as they leave it.
TEST(FastAttentionSinks, PagedEqualsFloat64) {
  const int64_t H = 8, KH = 2, D = 64, blockSize = 16, group = H / KH;
  const std::vector<PagedSequence> sequences = {{50, 37}, {20, 1}, {0, 29}};
  int64_t B = 0, longest = 0;
  for (const PagedSequence &s : sequences) {
    B += s.fresh;
    longest = std::max(longest, s.cached + s.fresh);
  }
  std::mt19937 rng(23);
  const PagedStep step = pagedStep(sequences, blockSize, rng);
  const int64_t blocks = step.blocks;
  const std::vector<ops::KvPagedRow> &rows = step.rows;
  OwnedTensor q = randomF32({B, 1, H * D}, rng), k = randomF32({B, 1, KH * D}, rng),
              v = randomF32({B, 1, KH * D}, rng), sinks = f32({H}, sinkLogits(H));
  OwnedTensor mask = i64({B, longest}, std::vector<int64_t>(B * longest, 1)),
              positions = i64({B, 1}, step.positions);
  const OwnedTensor contents = randomF32({2, blocks, KH, blockSize, D}, rng);
  const std::vector<float> sinkValues = values<float>(sinks);
  for (bool fastKernels : {false, true}) {
    const std::string name = fastKernels ? "fast" : "reference";
    std::vector<float> cache = values<float>(contents), plain = cache;
    auto layerOf = [&](std::vector<float> &storage) {
      ops::KvCacheLayer layer{DType::F32, blocks, KH, blockSize, D};
      layer.key = storage.data();
      layer.value = storage.data() + storage.size() / 2;
      return layer;
    };
    ops::KvCache kv, kvPlain;
    for (auto [target, storage] : {std::pair(&kv, &cache), std::pair(&kvPlain, &plain)}) {
      target->layers.push_back(layerOf(*storage));
      target->blockSize = blockSize;
      target->pagedRows = rows;
    }
    AttrMap attrs = sinkAttrs(H, KH, D);
    attrs["cache_layer"] = Attr::ofInt(0);
    std::vector<OwnedTensor> with, without;
    const int64_t amxTiles = ops::attention::tiledAttentionAmxTiles();
    Status status = run("tfm.attention",
                        {&q, &k, &v, &mask, nullptr, nullptr, &positions, nullptr, nullptr,
                         nullptr, &sinks},
                        with, attrs, 1, &kv, nullptr, fastKernels);
    const bool amx = ops::attention::tiledAttentionAmxTiles() > amxTiles;
    ASSERT_TRUE(status.isOk()) << name << ": " << status.message();
    ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, &mask, nullptr, nullptr, &positions}, without,
                    attrs, 1, &kvPlain, nullptr, fastKernels)
                    .isOk());
    // Row r's keys: its sequence's blocks, the new ones written in by the call.
    const float *keys = cache.data(), *valuesBase = cache.data() + cache.size() / 2;
    std::vector<double> want;
    for (int64_t r = 0; r < B; ++r)
      for (int64_t h = 0; h < H; ++h) {
        const ops::KvPagedRow &row = rows[r];
        const int64_t kh = h / group;
        auto at = [&, kh](const float *base) {
          return [=, &row](int64_t t) {
            return base + ((int64_t(row.blocks[t / blockSize]) * KH + kh) * blockSize +
                           t % blockSize) * D;
          };
        };
        std::vector<int64_t> attended(row.position + 1);
        std::iota(attended.begin(), attended.end(), 0);
        const float *query = reinterpret_cast<const float *>(q.storage.data()) + (r * H + h) * D;
        std::vector<double> y = attendRow(query, attended, at(keys), at(valuesBase), D,
                                          1.0 / std::sqrt(double(D)), sinkValues[h]);
        want.insert(want.end(), y.begin(), y.end());
      }
    expectSinksMatter(values<float>(with[0]), want, values<float>(without[0]),
                      amx ? kBf16Bound : 1e-5, name, amx ? 10 : 100);
  }
}

} // namespace
} // namespace dsrt::test
