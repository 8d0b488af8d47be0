// The tiled prompt attention (TransformerTiledAttention.cpp) against the reference kernel of
// tfm.attention (the fast kernels off), over the contiguous inputs (past/present pairs and
// the session's cache, f32, f16 and bf16) and the serving engine's paged cache (blocks of 1,
// 16 and 13 tokens): windows, soft-capping, ALiBi, additive masks and biases, left padding
// (queries that may attend no key), GQA, MQA and MHA, rotary, a chunk after cached tokens,
// and lengths that are not multiples of the 64-key and 64-row tiles. Every case checks that
// the tiled kernel ran (its tile counter moved) and that the reference did not run it.
//
// Tolerance, derived (u = 2^-24):
//  * Scores: both are fp32 sums of the same D products in different orders (the tile's FMA
//    chains and tree, the reference's loop), so each is within D·u·Σ|q·k| of the exact one and they
//    differ by at most 2·D·u·scale·D·max|q|·max|k| (times 2: rotary can grow an element by
//    √2). The AMX tiles scale the queries first, the reference the sum: one rounding each, 2u of
//    the same. Soft-capping (tanh, slope <= 1) does not grow it; each later addition (ALiBi,
//    a mask, a bias) rounds a different sum: another 2u·max|score| each. All of it: δ.
//  * Softmax weights: scores that move by at most δ move the normalised weights by at most
//    2δ in total, so an output by at most 2δ·max|v|.
//  * The online softmax (the AMX tiles'; the f32 tiles take two passes, a subset of these
//    roundings): a key's weight is exp(s - m_k) (the running maximum of its tile),
//    times one exp(m_old - m_new) per later tile whose maximum rose, each 2 ulp (4u) plus
//    one rounding of the product; the arguments' roundings add u·(M - s) twice over (they
//    telescope to M - s), and Σ_t w_t (M - s_t) <= ln T for softmax weights. Numerator and
//    normaliser both: 2u·(5·(tiles + 1) + 3·ln T + 2) relative, times max|v|. The reference's
//    own exponentials (2 ulp each): 2^-20·max|v|.
//  * The probability-value sums, in other orders: 2·T·u·max|v|.
// With half caches, |k| and |v| are those of the stored values (within 2^-8 of the f32 ones:
// the bound takes 2·max).
// On AMX-BF16 tiles (a bf16 cache where the CPU has AMX, or any cache under
// DSRT_PREFILL_GEMM=bf16) the queries, keys, values and each tile's weights are rounded to
// bf16 (unit roundoff 2^-9): each score moves by at most 2^-8·scale·Σ|q·k| more (q and k
// rounded), so an output by 2·2^-8·products·max|v|; the rounded weights and values add
// 2^-9 + 2^-9 of max|v|, and the weights' shorter exponential (6e-5 relative, in the
// numerator and the normaliser) 2^-13 of max|v|.
#include "ops/fast/AttentionAmx.h"
#include "OpTestUtil.h"

#include "ops/TransformerAttentionConfig.h"
#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

namespace dsrt::test {
namespace {

using ops::Attr;
using ops::AttrMap;

double maxAbs(const std::vector<float> &xs) {
  double m = 0;
  for (float x : xs)
    if (std::isfinite(x))
      m = std::max(m, double(std::fabs(x)));
  return m;
}

struct Magnitudes {
  double q = 0, k = 0, v = 0;  // max |.| of the queries and of every attended key and value
  double added = 0;            // max |ALiBi term| + max |mask| + max |bias|
  int additions = 0;
};

double tolerance(const Magnitudes &m, int64_t D, int64_t T, float scale,
                 bool bf16Products = false) {
  const double u = std::ldexp(1.0, -24);
  const double products = scale * D * m.q * m.k * 2;
  const double bf16 = bf16Products ? 2 * std::ldexp(1.0, -8) * products + std::ldexp(1.0, -8) +
                                         std::ldexp(1.0, -13)
                                   : 0;
  const double delta = (2.0 * D + 2) * u * products + 2.0 * m.additions * u * (products + m.added);
  const double tiles = double((T + 63) / 64);
  const double online = 2 * u * (5 * (tiles + 1) + 3 * std::log(double(T)) + 2);
  return m.v * (2 * delta + std::ldexp(1.0, -20) + online + 2.0 * T * u + bf16) + 1e-30;
}

// A float tensor's values as f32, whatever its float dtype.
std::vector<float> floatsOf(const OwnedTensor &t) {
  const size_t count = t.storage.size() / dtypeSize(t.dtype);
  std::vector<float> out(count);
  EXPECT_TRUE(convertFloats(t.dtype, t.storage.data(), DType::F32, out.data(),
                            static_cast<int64_t>(count)));
  return out;
}

void expectNear(const std::vector<float> &got, const std::vector<float> &want, double bound,
                const std::string &name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  double largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], bound) << name << " element " << i;
    largest = std::max(largest, double(std::fabs(want[i])));
  }
  EXPECT_GT(largest, 0.0) << name << ": an all-zero output proves nothing";
}

void runBothOf(const std::vector<const OwnedTensor *> &in, const AttrMap &attrs,
               std::vector<OwnedTensor> outputs[2], ops::KvCache *caches[2],
               const std::string &name, bool expectTiled, bool &amx) {
  const int64_t before = ops::attention::tiledAttentionTiles();
  const int64_t amxBefore = ops::attention::tiledAttentionAmxTiles();
  Status status = run("tfm.attention", in, outputs[0], attrs, 1, caches[0], nullptr, false);
  ASSERT_TRUE(status.isOk()) << name << ": " << status.message();
  ASSERT_EQ(ops::attention::tiledAttentionTiles(), before) << name << ": the reference tiled";
  status = run("tfm.attention", in, outputs[1], attrs, 1, caches[1], nullptr, true);
  ASSERT_TRUE(status.isOk()) << name << ": " << status.message();
  amx = ops::attention::tiledAttentionAmxTiles() > amxBefore;
  if (expectTiled)
    ASSERT_GT(ops::attention::tiledAttentionTiles(), before) << name << ": no tile ran";
  else
    ASSERT_EQ(ops::attention::tiledAttentionTiles(), before) << name << ": a tile ran";
}

// Runs tfm.attention on the fast kernels (expecting the tiled kernel to run) and on the
// reference kernels (expecting it not to). Returns whether the tiles ran on AMX.
bool runBoth(const std::vector<const OwnedTensor *> &in, const AttrMap &attrs,
             std::vector<OwnedTensor> outputs[2], ops::KvCache *caches[2],
             const std::string &name, bool expectTiled = true) {
  bool amx = false;
  runBothOf(in, attrs, outputs, caches, name, expectTiled, amx);
  return amx;
}

AttrMap attentionAttrs(int64_t H, int64_t KH, int64_t D, float scale, bool causal) {
  return {{"num_heads", Attr::ofInt(H)},
          {"num_kv_heads", Attr::ofInt(KH)},
          {"head_dim", Attr::ofInt(D)},
          {"scale", Attr::ofFloat(scale)},
          {"causal", Attr::ofInt(causal ? 1 : 0)}};
}

// ALiBi's largest term over `T` keys.
double alibiMagnitude(int64_t H, int64_t T) {
  std::vector<float> slopes = ops::attention::alibiSlopes(H);
  return double(*std::max_element(slopes.begin(), slopes.end())) * double(T);
}

// Both kernels over copies of one cache `stored` (its f32 values `contents`, the layer's
// shape and dtype in `layer`; paged where blockSize > 0): they must write the new keys and
// values alike and agree within the bound (ALiBi's term up to `alibi`).
void compareOverCache(const std::vector<const OwnedTensor *> &in, const AttrMap &attrs,
                      ops::KvCacheLayer layer, int64_t blockSize,
                      const std::vector<ops::KvPagedRow> &rows, const std::vector<uint8_t> &stored,
                      const OwnedTensor &q, const OwnedTensor &k, const OwnedTensor &contents,
                      double alibi, int64_t T, float scale, const std::string &name) {
  std::vector<uint8_t> caches[2] = {stored, stored};
  ops::KvCache kv[2];
  ops::KvCache *cachePointers[2] = {&kv[0], &kv[1]};
  for (int i = 0; i < 2; ++i) {
    layer.key = caches[i].data();
    layer.value = caches[i].data() + stored.size() / 2;
    kv[i].layers.push_back(layer);
    kv[i].blockSize = blockSize;
    kv[i].pagedRows = rows;
  }
  std::vector<OwnedTensor> outputs[2];
  const bool amx = runBoth(in, attrs, outputs, cachePointers, name);
  if (::testing::Test::HasFatalFailure())
    return;
  // A half plan's attention (a half output_dtype) over a bf16 cache takes the AMX tiles
  // wherever they can run (no soft-capping or ALiBi, whole 32-deep tiles of the head
  // dimension), in a session and in the engine's steps alike; an f32 plan's over a half
  // cache, and any attention over an f16 cache, do not (unless DSRT_PREFILL_GEMM=bf16).
  const bool halfOutput = attrs.count("output_dtype") > 0;
  const bool amxExpected = halfOutput && layer.dtype == DType::BF16 &&
                           ops::fast::amx::available() && layer.headDim % 32 == 0 &&
                           !attrs.count("softcap") && !attrs.count("alibi") &&
                           std::getenv("DSRT_AMX_ATTENTION") == nullptr;
  if (amxExpected)
    EXPECT_TRUE(amx) << name << ": a half plan over a half cache on a CPU with AMX, but no "
                                "AMX tile ran";
  // The serving engine's batch invariance keeps f32 products (a lone decode token's), so
  // the f32 bound holds.
  std::vector<OwnedTensor> invariant;
  {
    std::vector<uint8_t> copy = stored;
    ops::KvCache cache;
    layer.key = copy.data();
    layer.value = copy.data() + stored.size() / 2;
    cache.layers.push_back(layer);
    cache.blockSize = blockSize;
    cache.pagedRows = rows;
    const int64_t amxBefore = ops::attention::tiledAttentionAmxTiles();
    Status status = run("tfm.attention", in, invariant, attrs, 1, &cache, nullptr, true,
                        /*rowInvariant=*/true);
    ASSERT_TRUE(status.isOk()) << name << ": " << status.message();
    EXPECT_EQ(ops::attention::tiledAttentionAmxTiles(), amxBefore)
        << name << ": a row-invariant step ran AMX tiles";
  }
  const bool bf16Asked = ops::fast::bf16PromptGemm(DType::F32, 1 << 20);
  if ((!halfOutput || layer.dtype != DType::BF16) && !bf16Asked)
    EXPECT_FALSE(amx) << name << ": an f32 plan's attention, or one over an f16 cache, ran on "
                                 "AMX tiles";
  EXPECT_EQ(caches[0], caches[1]) << name << ": the new keys and values written alike";
  Magnitudes m;
  m.q = maxAbs(values<float>(q));
  const double scaleUp = layer.dtype == DType::F32 ? 1 : 2;
  m.k = scaleUp * std::max(maxAbs(values<float>(k)), maxAbs(values<float>(contents)));
  m.v = m.k;
  if (alibi > 0) {
    m.added = alibi;
    m.additions = 1;
  }
  // A half output: both rounded to it, each within 2^-9 (bf16) of max|v|.
  const double outputRounding = halfOutput ? std::ldexp(1.0, -8) * m.v : 0;
  expectNear(floatsOf(outputs[1][0]), floatsOf(outputs[0][0]),
             tolerance(m, layer.headDim, T, scale, amx) + outputRounding, name);
  expectNear(floatsOf(invariant[0]), floatsOf(outputs[0][0]),
             tolerance(m, layer.headDim, T, scale, false) + outputRounding,
             name + " (row-invariant)");
}

// The export's inputs: past key/value pairs (a chunk after cached tokens where past > 0).
struct ExportCase {
  std::string name;
  int64_t B, S, P, H, KH, D;
  bool causal = true;
  int64_t window = 0;
  float softcap = 0;
  bool alibi = false, rotary = false;
  int64_t padding = 0;   // left padding of the last sequence
  bool additive = false; // a float mask [B, 1, S, T] instead of the padding mask
  bool bias = false;     // a bias [1, H, S, T]
};

TEST(FastTiledAttention, EqualsTheReferenceOverPastInputs) {
  const std::vector<ExportCase> cases = {
      {"gqa_causal", 1, 77, 0, 8, 2, 64},
      {"mha_window_padding", 2, 100, 0, 4, 4, 64, true, 17, 0, false, false, 3},
      {"mqa_softcap", 1, 70, 0, 8, 1, 64, true, 0, 2.0f},
      {"alibi_gqa_padding", 2, 66, 0, 6, 3, 64, true, 0, 0, true, false, 5},
      {"chunk_after_past_d40", 2, 53, 70, 8, 2, 40},
      {"chunk_after_past_window_softcap", 1, 45, 81, 4, 2, 64, true, 23, 1.5f},
      {"additive_mask_and_bias", 2, 41, 5, 4, 2, 64, true, 0, 0, false, false, 0, true, true},
      {"non_causal_window", 1, 70, 0, 4, 2, 64, false, 9},
      {"non_causal", 2, 19, 0, 2, 2, 48, false},
      {"rotary", 1, 65, 0, 4, 2, 64, true, 0, 0, false, true},
  };
  for (const ExportCase &e : cases) {
    const int64_t T = e.P + e.S;
    const float scale = e.softcap > 0 ? 1.0f : 1.0f / std::sqrt(float(e.D));
    AttrMap attrs = attentionAttrs(e.H, e.KH, e.D, scale, e.causal);
    if (e.window)
      attrs["window"] = Attr::ofInt(e.window);
    if (e.softcap > 0)
      attrs["softcap"] = Attr::ofFloat(e.softcap);
    if (e.alibi)
      attrs["alibi"] = Attr::ofInt(1);
    if (e.rotary) {
      attrs["rotary_dim"] = Attr::ofInt(e.D);
      attrs["rotary_base"] = Attr::ofFloat(10000.0f);
    }
    std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>()(e.name)));
    OwnedTensor q = randomF32({e.B, e.S, e.H * e.D}, rng),
                k = randomF32({e.B, e.S, e.KH * e.D}, rng),
                v = randomF32({e.B, e.S, e.KH * e.D}, rng),
                pastK = randomF32({e.B, e.KH, e.P, e.D}, rng),
                pastV = randomF32({e.B, e.KH, e.P, e.D}, rng);
    std::vector<int64_t> maskValues(e.B * T, 1), positionValues(e.B * e.S);
    for (int64_t t = 0; t < e.padding; ++t)
      maskValues[(e.B - 1) * T + t] = 0;
    for (int64_t b = 0; b < e.B; ++b)
      for (int64_t s = 0; s < e.S; ++s)
        positionValues[b * e.S + s] = std::max<int64_t>(0, e.P + s - (b == e.B - 1 ? e.padding : 0));
    OwnedTensor mask = i64({e.B, T}, maskValues), positions = i64({e.B, e.S}, positionValues);
    // An additive mask of [-2, 0] with some keys at -inf (never a query's own), and a bias.
    std::uniform_real_distribution<float> uniform(-2.0f, 0.0f);
    OwnedTensor additive(DType::F32, {e.B, 1, e.S, T}), bias(DType::F32, {1, e.H, e.S, T});
    auto *additiveData = reinterpret_cast<float *>(additive.storage.data());
    for (int64_t i = 0; i < e.B * e.S * T; ++i) {
      const int64_t s = (i / T) % e.S, t = i % T;
      additiveData[i] = t != e.P + s && t % 7 == 3 ? -std::numeric_limits<float>::infinity()
                                                   : uniform(rng);
    }
    auto *biasData = reinterpret_cast<float *>(bias.storage.data());
    for (int64_t i = 0; i < e.H * e.S * T; ++i)
      biasData[i] = uniform(rng);
    std::vector<const OwnedTensor *> in{&q, &k, &v, e.additive ? &additive : &mask,
                                        e.P > 0 ? &pastK : nullptr, e.P > 0 ? &pastV : nullptr,
                                        &positions, e.bias ? &bias : nullptr};
    std::vector<OwnedTensor> outputs[2];
    ops::KvCache *none[2] = {nullptr, nullptr};
    const bool amx = runBoth(in, attrs, outputs, none, e.name);
    if (HasFatalFailure())
      return;
    Magnitudes m;
    m.q = maxAbs(values<float>(q));
    m.k = std::max(maxAbs(values<float>(k)), maxAbs(values<float>(pastK)));
    m.v = std::max(maxAbs(values<float>(v)), maxAbs(values<float>(pastV)));
    if (e.alibi) {
      m.added += alibiMagnitude(e.H, T);
      ++m.additions;
    }
    if (e.additive) {
      m.added += 2;
      ++m.additions;
    }
    if (e.bias) {
      m.added += 2;
      ++m.additions;
    }
    expectNear(values<float>(outputs[1][0]), values<float>(outputs[0][0]),
               tolerance(m, e.D, T, scale, amx), e.name);
  }
}

// The session's contiguous cache, f32 and half: a chunk of 53 tokens after 70 cached ones,
// the second sequence with 2 tokens of left padding; with a window and ALiBi in f32.
// bf16 caches also with a window, and with head dimension 128 and 6 query heads per KV head
// (query tiles of 60 rows: AMX's row tiles end on a partial pair).
TEST(FastTiledAttention, EqualsTheReferenceOverTheSessionCache) {
  const int64_t B = 2, P = 70, S = 53, T = P + S, KH = 2, capacity = 130;
  struct Variant {
    DType cache;
    int64_t window;
    bool alibi;
    int64_t H = 8, D = 64;
    bool halfPlan = false;  // output_dtype the cache's: a half plan's attention
  };
  for (const Variant &variant :
       {Variant{DType::F32, 0, false}, Variant{DType::F32, 31, true},
        Variant{DType::F16, 0, false}, Variant{DType::BF16, 0, false},
        Variant{DType::BF16, 31, false, 8, 64, true},
        Variant{DType::BF16, 0, false, 12, 128, true},
        Variant{DType::F16, 0, false, 8, 64, true}}) {
    const int64_t H = variant.H, D = variant.D;
    const std::string name = std::string(dtypeName(variant.cache)) +
                             (variant.window ? " window" : "") + (variant.alibi ? " alibi" : "") +
                             " H " + std::to_string(H) + " D " + std::to_string(D) +
                             (variant.halfPlan ? " half plan" : "");
    const float scale = 1.0f / std::sqrt(float(D));
    AttrMap attrs = attentionAttrs(H, KH, D, scale, true);
    attrs["cache_layer"] = Attr::ofInt(0);
    attrs["cache_dtype"] = Attr::ofType(variant.cache);
    if (variant.window)
      attrs["window"] = Attr::ofInt(variant.window);
    if (variant.alibi)
      attrs["alibi"] = Attr::ofInt(1);
    if (variant.halfPlan)
      attrs["output_dtype"] = Attr::ofType(variant.cache);
    std::mt19937 rng(static_cast<unsigned>(variant.window + int(variant.cache) * 3 + D +
                                           variant.halfPlan));
    OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, KH * D}, rng),
                v = randomF32({B, S, KH * D}, rng);
    OwnedTensor past = randomF32({2, B, KH, capacity, D}, rng);
    const size_t count = past.storage.size() / sizeof(float), element = dtypeSize(variant.cache);
    std::vector<uint8_t> stored(count * element);
    ASSERT_TRUE(convertFloats(DType::F32, past.storage.data(), variant.cache, stored.data(),
                              static_cast<int64_t>(count)));
    std::vector<int64_t> maskValues(B * T, 1), positionValues(B * S);
    maskValues[T] = maskValues[T + 1] = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        positionValues[b * S + s] = P + s - 2 * b;
    OwnedTensor mask = i64({B, T}, maskValues), positions = i64({B, S}, positionValues);
    std::vector<const OwnedTensor *> in{&q, &k, &v, &mask, nullptr, nullptr, &positions};
    compareOverCache(in, attrs, {variant.cache, B, KH, capacity, D}, 0, {}, stored, q, k, past,
                     variant.alibi ? alibiMagnitude(H, T) : 0, T, scale, name);
  }
}

// The paged cache: one step of the engine with a prompt chunk of 37 tokens after 50 cached
// ones, a decode row of another sequence, and a whole prompt of 29 tokens, over blocks of 1,
// 16 and 13 tokens scattered through the pool; f32, f16 and bf16 caches; plain GQA, a window
// with soft-capping, and ALiBi.
TEST(FastTiledAttention, EqualsTheReferenceOverThePagedCache) {
  const int64_t H = 8, KH = 2, D = 64;
  const std::vector<PagedSequence> sequences = {{50, 37}, {20, 1}, {0, 29}};
  int64_t B = 0, longest = 0;
  for (const PagedSequence &s : sequences) {
    B += s.fresh;
    longest = std::max(longest, s.cached + s.fresh);
  }
  for (int64_t blockSize : {1, 16, 13})
    for (DType cacheType : {DType::F32, DType::F16, DType::BF16})
      for (int variant = 0; variant < 3; ++variant) {
        const std::string name = "block " + std::to_string(blockSize) + " " +
                                 dtypeName(cacheType) + " variant " + std::to_string(variant);
        const float scale = variant == 1 ? 1.0f : 1.0f / std::sqrt(float(D));
        AttrMap attrs = attentionAttrs(H, KH, D, scale, true);
        attrs["cache_layer"] = Attr::ofInt(0);
        attrs["cache_dtype"] = Attr::ofType(cacheType);
        if (variant == 1) {
          attrs["window"] = Attr::ofInt(19);
          attrs["softcap"] = Attr::ofFloat(2.0f);
        } else if (variant == 2) {
          attrs["alibi"] = Attr::ofInt(1);
        }
        // A bf16 cache as a bf16 plan's: its attention's output in bf16 (AMX tiles, where
        // the CPU has them and the variant allows).
        if (cacheType == DType::BF16)
          attrs["output_dtype"] = Attr::ofType(DType::BF16);
        std::mt19937 rng(static_cast<unsigned>(blockSize * 10 + variant + int(cacheType)));
        const PagedStep step = pagedStep(sequences, blockSize, rng);
        const int64_t blocks = step.blocks;
        const std::vector<ops::KvPagedRow> &rows = step.rows;
        const std::vector<int64_t> &positionValues = step.positions;
        OwnedTensor q = randomF32({B, 1, H * D}, rng), k = randomF32({B, 1, KH * D}, rng),
                    v = randomF32({B, 1, KH * D}, rng);
        OwnedTensor mask = i64({B, longest}, std::vector<int64_t>(B * longest, 1)),
                    positions = i64({B, 1}, positionValues);
        OwnedTensor contents = randomF32({2, blocks, KH, blockSize, D}, rng);
        const size_t count = contents.storage.size() / sizeof(float);
        std::vector<uint8_t> stored(count * dtypeSize(cacheType));
        ASSERT_TRUE(convertFloats(DType::F32, contents.storage.data(), cacheType, stored.data(),
                                  static_cast<int64_t>(count)));
        std::vector<const OwnedTensor *> in{&q, &k, &v, &mask, nullptr, nullptr, &positions};
        compareOverCache(in, attrs, {cacheType, blocks, KH, blockSize, D}, blockSize, rows,
                         stored, q, k, contents, variant == 2 ? alibiMagnitude(H, longest) : 0,
                         longest, scale, name);
      }
}

// Tensor parallelism: each rank's tiled attention over its own query heads and KV head columns
// equals the reference over all of them. 4 query heads over 2 KV heads on 3 ranks (heads 2,
// 1, 1; ranks 1 and 2 both read KV head 1, each holding part of its group), with ALiBi (the
// global heads' slopes) and with rotary; the second sequence has 2 tokens of left padding.
TEST(FastTiledAttention, RanksComputeTheirHeadsOfTheWhole) {
  const int64_t B = 2, S = 70, H = 4, KH = 2, D = 64;
  const std::vector<int64_t> heads = {2, 1, 1}, headOffsets = {0, 2, 3}, kvHeads = {1, 1, 1},
                             kvOffsets = {0, 1, 1};
  for (bool alibi : {true, false}) {
    const float scale = 1.0f / std::sqrt(float(D));
    AttrMap attrs = attentionAttrs(H, KH, D, scale, true);
    if (alibi) {
      attrs["alibi"] = Attr::ofInt(1);
    } else {
      attrs["rotary_dim"] = Attr::ofInt(D);
      attrs["rotary_base"] = Attr::ofFloat(10000.0f);
    }
    std::mt19937 rng(alibi ? 17 : 18);
    OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, KH * D}, rng),
                v = randomF32({B, S, KH * D}, rng);
    std::vector<int64_t> maskValues(B * S, 1), positionValues(B * S);
    maskValues[S] = maskValues[S + 1] = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        positionValues[b * S + s] = std::max<int64_t>(0, s - 2 * b);
    OwnedTensor mask = i64({B, S}, maskValues), positions = i64({B, S}, positionValues);
    std::vector<OwnedTensor> whole;
    ASSERT_TRUE(run("tfm.attention", {&q, &k, &v, &mask, nullptr, nullptr, &positions}, whole,
                    attrs)
                    .isOk());
    AttrMap sharded = attrs;
    sharded["rank_heads"] = Attr::ofInts(heads);
    sharded["rank_head_offsets"] = Attr::ofInts(headOffsets);
    sharded["rank_kv_heads"] = Attr::ofInts(kvHeads);
    sharded["rank_kv_head_offsets"] = Attr::ofInts(kvOffsets);
    Magnitudes m;
    m.q = maxAbs(values<float>(q));
    m.k = maxAbs(values<float>(k));
    m.v = maxAbs(values<float>(v));
    if (alibi) {
      m.added = alibiMagnitude(H, S);
      m.additions = 1;
    }
    for (int rank = 0; rank < 3; ++rank) {
      RankOnly group(rank, 3);
      const int64_t q0 = headOffsets[rank] * D, q1 = q0 + heads[rank] * D;
      const int64_t k0 = kvOffsets[rank] * D, k1 = k0 + kvHeads[rank] * D;
      OwnedTensor qr = features(q, q0, q1), kr = features(k, k0, k1), vr = features(v, k0, k1);
      std::vector<OwnedTensor> mine;
      const int64_t before = ops::attention::tiledAttentionTiles(),
                    amxBefore = ops::attention::tiledAttentionAmxTiles();
      Status status = run("tfm.attention", {&qr, &kr, &vr, &mask, nullptr, nullptr, &positions},
                          mine, sharded, 1, nullptr, &group, true);
      ASSERT_TRUE(status.isOk()) << status.message();
      ASSERT_GT(ops::attention::tiledAttentionTiles(), before) << "rank " << rank;
      const bool amx = ops::attention::tiledAttentionAmxTiles() > amxBefore;
      expectNear(values<float>(mine[0]), values<float>(features(whole[0], q0, q1)),
                 tolerance(m, D, S, scale, amx),
                 std::string(alibi ? "alibi" : "rotary") + " rank " + std::to_string(rank));
    }
  }
}

// fast::exponentiate (the softmax's exponentials, vectorised for the ISA, a scalar tail) within
// 2 ulp of the exact e^x over the range it does not clamp, on a length that leaves a tail.
TEST(FastExponentials, WithinTwoUlp) {
  const int64_t n = 100003;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = -87.0f + 175.0f * float(i) / float(n - 1);
  y = x;
  ops::fast::exponentiate(y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double exact = std::exp(double(x[i]));
    const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
    ASSERT_LE(std::fabs(y[i] - exact), 2 * ulp) << "e^" << x[i];
  }
}

// Decode (one query per sequence) keeps the one-query kernel: the tiles never run for it.
TEST(FastTiledAttention, DecodeDoesNotTile) {
  const int64_t B = 2, P = 9, H = 4, KH = 2, D = 64;
  std::mt19937 rng(3);
  OwnedTensor q = randomF32({B, 1, H * D}, rng), k = randomF32({B, 1, KH * D}, rng),
              v = randomF32({B, 1, KH * D}, rng), pastK = randomF32({B, KH, P, D}, rng),
              pastV = randomF32({B, KH, P, D}, rng);
  OwnedTensor mask = i64({B, P + 1}, std::vector<int64_t>(B * (P + 1), 1));
  std::vector<const OwnedTensor *> in{&q, &k, &v, &mask, &pastK, &pastV};
  std::vector<OwnedTensor> outputs[2];
  ops::KvCache *none[2] = {nullptr, nullptr};
  runBoth(in, attentionAttrs(H, KH, D, 0.125f, true), outputs, none, "decode", false);
}

} // namespace
} // namespace dsrt::test
