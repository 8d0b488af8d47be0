// tfm.attention's CPU kernel (docs/transformer-ops.md): grouped-query heads, causal,
// padding, window and ALiBi masks, rotary embeddings, Gemma-2's logit soft-capping, Qwen3's
// and Gemma-3's per-head q/k norms, and its two KV-cache modes (the export's past/present pairs, or the session's cache written in
// place).
#include "ops/FloatAccess.h"
#include "ops/Kernel.h"
#include "ops/ThreadPool.h"
#include "ops/TransformerCommon.h"
#include "ops/TypeDispatch.h"
#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>

namespace dsrt::ops {
namespace {

// ---- tfm.attention -------------------------------------------------------------------

enum AttentionInput {
  kQuery, kKey, kValue, kMask, kPastKey, kPastValue, kPositions, kBias,
  kQueryNormScale, kKeyNormScale
};

struct AttentionConfig {
  // This rank's query and KV heads (all of them without tensor parallelism).
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  // The model's heads, and the global index of this rank's first query and KV head: they
  // map a local query head to its KV head (GQA groups) and to its ALiBi slope.
  int64_t globalHeads = 0, globalKvHeads = 0, headOffset = 0, kvHeadOffset = 0;
  float scale = 1;
  // Gemma-2's attn_logit_softcapping: scores become softcap * tanh(scores / softcap) before
  // the bias and the mask; 0 = off.
  float softcap = 0;
  bool causal = false, alibi = false;
  int64_t window = 0, rotaryDim = 0, cacheLayer = -1;
  // The session's cache holds keys and values rounded to this (f32, f16 or bf16).
  DType cacheDType = DType::F32;
  std::vector<float> inverseFrequency;  // rotaryDim / 2
  float attentionFactor = 1;            // scales the cosines and sines (yarn, longrope)
  bool interleaved = false;
  bool unattendedCausal = false;
  bool unattendedZero = false;  // sdpa's guard: a row with no key gives zeros
  // Shapes of this call. `keys` new keys and values: as many as the queries, or a
  // cross-attention's other sequence.
  int64_t batch = 0, fresh = 0, keys = 0, past = 0, total = 0;
  // The heads the key and value inputs hold, and the first of this rank's among them: all
  // of the model's where they come from a graph input under tensor parallelism.
  int64_t keyHeads = 0, keyHeadOffset = 0;
  bool sessionCache = false;
  int64_t pastHeads = 0, pastHeadOffset = 0;
  // Query, key and value are one tensor, each row the queries, keys and values of a token
  // (a joined projection's output).
  bool packed = false;
  // Qwen3's and Gemma-3's q/k norms: each head of the queries and new keys RMS-normalised
  // (scales inputs 8 and 9) before the rotary embedding.
  bool qkNorm = false;
  float qkNormEpsilon = 0;
  // HunYuan-Dense's: the scales multiply each head after it is rotated (qk_norm_after_rotary).
  bool qkNormAfterRotary = false;
};

// Under tensor parallelism, rank_heads/rank_head_offsets and rank_kv_heads/
// rank_kv_head_offsets list each rank's heads; num_heads and num_kv_heads are the model's.
Status readRankHeads(const KernelContext &ctx, AttentionConfig &c) {
  int rank = ctx.collectives ? ctx.collectives->rank() : 0;
  struct Entry {
    const char *name;
    int64_t *out;
  };
  for (Entry entry : {Entry{"rank_heads", &c.heads}, Entry{"rank_head_offsets", &c.headOffset},
                      Entry{"rank_kv_heads", &c.kvHeads},
                      Entry{"rank_kv_head_offsets", &c.kvHeadOffset}}) {
    std::vector<int64_t> values;
    bool present = false;
    DSRT_RETURN_IF_ERROR(getInts(ctx.attrs, entry.name, values, present));
    if (!present)
      continue;
    if (rank < 0 || static_cast<size_t>(rank) >= values.size())
      return ctx.error(entry.name, " has ", values.size(), " entries, none for rank ", rank);
    *entry.out = values[rank];
  }
  return Status::ok();
}

// The query's batch and tokens, the keys' count and the heads the key and value inputs hold:
// one packed tensor (each token's row its queries, keys and values), or three, whose keys
// may be another sequence's (a cross-attention) and hold every KV head (read from a graph
// input under tensor parallelism).
Status readQueryKeyValueShapes(const KernelContext &ctx, AttentionConfig &c) {
  const TensorRef &q = *ctx.input(kQuery), &k = *ctx.input(kKey), &v = *ctx.input(kValue);
  if (c.packed) {
    const int64_t width = (c.heads + 2 * c.kvHeads) * c.headDim;
    if (q.shape.size() != 3 || q.shape[2] != width || k.shape != q.shape || v.shape != q.shape)
      return ctx.error("packed query/key/value must be one [batch, sequence, ", width,
                       "] tensor, not ", shapeString(q.shape), ", ", shapeString(k.shape),
                       " and ", shapeString(v.shape));
    if (ctx.input(kPastKey) || ctx.input(kBias))
      return ctx.error("packed query/key/value take no past and no bias");
    c.batch = q.shape[0];
    c.fresh = c.keys = q.shape[1];
    c.keyHeads = c.kvHeads;
    return Status::ok();
  }
  if (q.shape.size() != 3 || q.shape[2] != c.heads * c.headDim)
    return ctx.error("query must be [batch, sequence, ", c.heads * c.headDim, "], not ",
                     shapeString(q.shape));
  c.batch = q.shape[0];
  c.fresh = q.shape[1];
  c.keys = k.shape.size() == 3 ? k.shape[1] : c.fresh;
  bool allKvHeads = k.shape.size() == 3 && c.globalKvHeads != c.kvHeads &&
                    k.shape[2] == c.globalKvHeads * c.headDim;
  c.keyHeads = allKvHeads ? c.globalKvHeads : c.kvHeads;
  c.keyHeadOffset = allKvHeads ? c.kvHeadOffset : 0;
  Shape kvShape{c.batch, c.keys, c.keyHeads * c.headDim};
  if (k.shape != kvShape || v.shape != kvShape)
    return ctx.error("key and value must be ", shapeString(kvShape), ", not ",
                     shapeString(k.shape), " and ", shapeString(v.shape));
  // A cross-attention may keep the encoder's keys in a cache layer of the session (an
  // encoder-decoder's prefill writes them, its decode steps add none), not in past inputs.
  if (c.keys != c.fresh &&
      (c.causal || c.window > 0 || c.rotaryDim > 0 || ctx.input(kPastKey)))
    return ctx.error(c.keys, " keys for ", c.fresh, " queries (a cross-attention) cannot be ",
                     "causal, windowed, rotated or have past inputs");
  return Status::ok();
}

// The q/k norms' scales (inputs 8 and 9, both or neither) and their epsilon.
Status readQueryKeyNorms(const KernelContext &ctx, AttentionConfig &c) {
  const TensorRef *queryScale = ctx.input(kQueryNormScale), *keyScale = ctx.input(kKeyNormScale);
  c.qkNorm = queryScale || keyScale;
  const bool hasEpsilon = ctx.attrs.count("qk_norm_epsilon") != 0;
  if (!c.qkNorm && !hasEpsilon)
    return Status::ok();
  if (!queryScale || !keyScale || !hasEpsilon)
    return ctx.error("q/k norms need both scales (inputs 8 and 9) and qk_norm_epsilon");
  // Per head ([D]) or over all of the query's or key's heads ([heads * D]: OLMo-2).
  for (auto [scale, heads] : {std::pair(queryScale, c.heads), std::pair(keyScale, c.keyHeads)})
    if (!isFloat(scale->dtype) ||
        (scale->shape != Shape{c.headDim} && scale->shape != Shape{heads * c.headDim}))
      return ctx.error("a q/k norm scale must be float [", c.headDim, "] or [",
                       heads * c.headDim, "], not ", dtypeName(scale->dtype), " ",
                       shapeString(scale->shape));
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "qk_norm_epsilon", 0.0f, c.qkNormEpsilon));
  if (!(c.qkNormEpsilon >= 0) || !std::isfinite(c.qkNormEpsilon))
    return ctx.error("qk_norm_epsilon must be finite and >= 0, not ", c.qkNormEpsilon);
  int64_t afterRotary = 0;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "qk_norm_after_rotary", 0, afterRotary));
  c.qkNormAfterRotary = afterRotary != 0;
  if (c.qkNormAfterRotary &&
      (queryScale->shape != Shape{c.headDim} || keyScale->shape != Shape{c.headDim}))
    return ctx.error("qk_norm_after_rotary needs q/k norm scales of [", c.headDim, "]");
  return Status::ok();
}

// An additive mask's or bias's shape against the scores [batch, heads, fresh, total]: batch
// and heads may broadcast, and the heads may be every head of the model (this rank reads
// its own).
bool broadcastsToScores(const Shape &m, const AttentionConfig &c) {
  return m.size() == 4 && (m[0] == 1 || m[0] == c.batch) &&
         (m[1] == 1 || m[1] == c.heads || m[1] == c.globalHeads) && m[2] == c.fresh &&
         m[3] == c.total;
}

// A float term added to the scores (an additive mask, or the bias): the row of query s of
// head h of sequence b, broadcast as its shape says.
struct AddedScores {
  const float *data = nullptr;
  Shape shape;
  int64_t headOffset = 0, localHeads = 0;
  const float *row(int64_t b, int64_t h, int64_t s) const {
    const int64_t heads = shape[1], S = shape[2], T = shape[3];
    // All of the model's heads where the rank has fewer: this rank's start at headOffset.
    const int64_t head = heads == 1 ? 0 : heads == localHeads ? h : headOffset + h;
    return data + (((shape[0] == 1 ? 0 : b) * heads + head) * S + s) * T;
  }
};

Status readAttentionConfig(const KernelContext &ctx, AttentionConfig &c) {
  int64_t flag;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "num_heads", 0, c.heads));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "num_kv_heads", c.heads, c.kvHeads));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "head_dim", 0, c.headDim));
  c.globalHeads = c.heads;
  c.globalKvHeads = c.kvHeads;
  DSRT_RETURN_IF_ERROR(readRankHeads(ctx, c));
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "scale", 1.0f, c.scale));
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "softcap", 0.0f, c.softcap));
  if (!(c.softcap >= 0) || !std::isfinite(c.softcap))
    return ctx.error("softcap must be finite and >= 0 (0 = off), not ", c.softcap);
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "causal", 0, flag));
  c.causal = flag != 0;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "alibi", 0, flag));
  c.alibi = flag != 0;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "window", 0, c.window));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "rotary_dim", 0, c.rotaryDim));
  if (Status status = rotaryInverseFrequencies(ctx.attrs, c.inverseFrequency); !status)
    return ctx.error(status.message());
  if (Status status = rotaryAttentionFactor(ctx.attrs, c.attentionFactor); !status)
    return ctx.error(status.message());
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "rotary_interleaved", 0, flag));
  c.interleaved = flag != 0;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "cache_layer", -1, c.cacheLayer));
  if (Status status = kvCacheDType(ctx.attrs, c.cacheDType); !status)
    return ctx.error(status.message());
  std::string unattended;
  DSRT_RETURN_IF_ERROR(stringAttr(ctx, "unattended", "all", unattended));
  if (unattended != "all" && unattended != "causal" && unattended != "zero")
    return ctx.error("unattended must be 'all', 'causal' or 'zero', not '", unattended, "'");
  c.unattendedCausal = unattended == "causal";
  c.unattendedZero = unattended == "zero";
  if (c.globalHeads <= 0 || c.globalKvHeads <= 0 || c.headDim <= 0 ||
      c.globalHeads % c.globalKvHeads != 0)
    return ctx.error("needs num_heads a positive multiple of num_kv_heads and head_dim > 0 "
                     "(got ", c.globalHeads, ", ", c.globalKvHeads, ", ", c.headDim, ")");
  {
    // Every local query head's KV head must be one of this rank's.
    int64_t group = c.globalHeads / c.globalKvHeads;
    bool fits = c.heads > 0 && c.kvHeads > 0 && c.headOffset >= 0 && c.kvHeadOffset >= 0 &&
                c.headOffset + c.heads <= c.globalHeads &&
                c.kvHeadOffset + c.kvHeads <= c.globalKvHeads &&
                c.headOffset / group >= c.kvHeadOffset &&
                (c.headOffset + c.heads - 1) / group < c.kvHeadOffset + c.kvHeads;
    if (!fits)
      return ctx.error("query heads [", c.headOffset, ", +", c.heads, ") and KV heads [",
                       c.kvHeadOffset, ", +", c.kvHeads, ") of ", c.globalHeads, " and ",
                       c.globalKvHeads, " do not form whole groups");
  }
  if (c.window < 0 || c.rotaryDim < 0 || c.rotaryDim > c.headDim || c.rotaryDim % 2 != 0)
    return ctx.error("window must be >= 0 and rotary_dim even and at most head_dim");

  DSRT_RETURN_IF_ERROR(intAttr(ctx, "packed_qkv", 0, flag));
  c.packed = flag != 0;
  DSRT_RETURN_IF_ERROR(readQueryKeyValueShapes(ctx, c));
  DSRT_RETURN_IF_ERROR(readQueryKeyNorms(ctx, c));  // after the key's head count
  const TensorRef *pastKey = ctx.input(kPastKey), *pastValue = ctx.input(kPastValue);
  if (!pastKey != !pastValue)
    return ctx.error("past key and past value must be given together");
  if (pastKey) {
    // A tensor-parallel rank reads its KV heads out of a past that holds all of them.
    bool sharded = pastKey->shape.size() == 4 && pastKey->shape[1] == c.globalKvHeads &&
                   c.globalKvHeads != c.kvHeads;
    if (pastKey->shape.size() != 4 || pastKey->shape[0] != c.batch ||
        (pastKey->shape[1] != c.kvHeads && !sharded) || pastKey->shape[3] != c.headDim ||
        pastValue->shape != pastKey->shape)
      return ctx.error("past key/value must be [", c.batch, ", ", c.kvHeads, ", past, ",
                       c.headDim, "], not ", shapeString(pastKey->shape), " and ",
                       shapeString(pastValue->shape));
    c.past = pastKey->shape[2];
    c.pastHeads = pastKey->shape[1];
    c.pastHeadOffset = sharded ? c.kvHeadOffset : 0;
  }
  c.sessionCache = !pastKey && c.cacheLayer >= 0 && ctx.numOutputs == 1;
  const TensorRef *mask = ctx.input(kMask);
  if (c.sessionCache) {
    // The padding mask is the only thing that says how many tokens the cache holds: the
    // keys before the new ones (a cross-attention's are the encoder's: all of them after
    // prefill, which writes them, and none before).
    if (!mask || mask->shape.size() != 2 || isFloat(mask->dtype))
      return ctx.error("with the session's KV cache (cache_layer ", c.cacheLayer,
                       ") needs a padding mask [batch, past + sequence]");
    c.past = mask->shape[1] - c.keys;
    if (c.past < 0)
      return ctx.error("padding mask width ", mask->shape[1], " is shorter than the ",
                       c.keys, " new keys");
  }
  c.total = c.past + c.keys;
  if (const TensorRef *bias = ctx.input(kBias)) {
    if (!isFloat(bias->dtype) || !broadcastsToScores(bias->shape, c))
      return ctx.error("the bias must be float and broadcast to [", c.batch, ", ", c.heads,
                       ", ", c.fresh, ", ", c.total, "], not ", dtypeName(bias->dtype), " ",
                       shapeString(bias->shape));
  }
  if (mask) {
    if (isFloat(mask->dtype)) {
      if (!broadcastsToScores(mask->shape, c))
        return ctx.error("an additive mask must broadcast to [", c.batch, ", ", c.heads, ", ",
                         c.fresh, ", ", c.total, "], not ", shapeString(mask->shape));
    } else if (mask->shape != Shape{c.batch, c.total}) {
      return ctx.error("the padding mask must be [", c.batch, ", ", c.total, "], not ",
                       shapeString(mask->shape));
    }
  }
  if (c.rotaryDim > 0 || c.alibi) {
    const TensorRef *positions = ctx.input(kPositions);
    if (c.rotaryDim > 0 && !positions)
      return ctx.error("rotary embeddings need the positions input");
    if (c.alibi && (!mask || isFloat(mask->dtype)))
      return ctx.error("ALiBi needs the padding mask (key positions count attended tokens)");
    if (positions && positions->shape != Shape{c.batch, c.fresh})
      return ctx.error("positions must be [", c.batch, ", ", c.fresh, "], not ",
                       shapeString(positions->shape));
  }
  if (!c.sessionCache && ctx.numOutputs != 1 && ctx.numOutputs != 3)
    return ctx.error("has 1 output, or 3 with the present key and value, not ",
                     ctx.numOutputs);
  return Status::ok();
}

Status inferAttention(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  for (int i : {kQuery, kKey, kValue})
    DSRT_RETURN_IF_ERROR(checkDType(ctx, i, "query/key/value", kFloatTypes));
  if (ctx.input(kPositions))
    DSRT_RETURN_IF_ERROR(checkDType(ctx, kPositions, "positions", kIndexTypes));
  AttentionConfig c;
  DSRT_RETURN_IF_ERROR(readAttentionConfig(ctx, c));
  DType dtype = ctx.input(kQuery)->dtype, outputDType = dtype;
  // The plan's half activation dtype where o_proj reads the result (dsc-activation-dtype).
  if (Status status = floatOutputDType(ctx.attrs, dtype, outputDType); !status)
    return ctx.error(status.message());
  outputs.push_back({outputDType, {c.batch, c.fresh, c.heads * c.headDim}});
  if (ctx.numOutputs == 3) {
    outputs.push_back({dtype, {c.batch, c.kvHeads, c.total, c.headDim}});
    outputs.push_back({dtype, {c.batch, c.kvHeads, c.total, c.headDim}});
  }
  return Status::ok();
}

// transformers' get_slopes (BLOOM's build_alibi_tensor): a geometric sequence per power of
// two of heads, interleaved with the next power's for the rest.
std::vector<float> alibiSlopes(int64_t heads) {
  int64_t closest = 1;
  while (closest * 2 <= heads)
    closest *= 2;
  std::vector<float> slopes;
  float base = std::pow(2.0f, -std::pow(2.0f, -(std::log2(float(closest)) - 3)));
  for (int64_t i = 1; i <= closest; ++i)
    slopes.push_back(std::pow(base, float(i)));
  if (closest != heads) {
    float extra = std::pow(2.0f, -std::pow(2.0f, -(std::log2(float(2 * closest)) - 3)));
    for (int64_t i = 0; i < heads - closest; ++i)
      slopes.push_back(std::pow(extra, float(1 + 2 * i)));
  }
  return slopes;
}

// Rotates the first rotaryDim features of each head of `x` ([tokens, heads * d]) in place,
// at `positions[token]`. The angles are computed in fp32 as transformers does.
void applyRotary(float *x, int64_t tokens, int64_t heads, const AttentionConfig &c,
                 const std::vector<int64_t> &positions) {
  int64_t half = c.rotaryDim / 2;
  const std::vector<float> &inverseFrequency = c.inverseFrequency;
  for (int64_t t = 0; t < tokens; ++t) {
    float position = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      float angle = position * inverseFrequency[i];
      float cosine = std::cos(angle) * c.attentionFactor,
            sine = std::sin(angle) * c.attentionFactor;
      for (int64_t h = 0; h < heads; ++h) {
        float *head = x + (t * heads + h) * c.headDim;
        int64_t a = c.interleaved ? 2 * i : i, b = c.interleaved ? 2 * i + 1 : i + half;
        float first = head[a], second = head[b];
        head[a] = first * cosine - second * sine;
        head[b] = second * cosine + first * sine;
      }
    }
  }
}

Status computeAttention(const KernelContext &ctx, const Outputs &outputs) {
  AttentionConfig c;
  DSRT_RETURN_IF_ERROR(readAttentionConfig(ctx, c));
  const int64_t B = c.batch, S = c.fresh, SK = c.keys, P = c.past, T = c.total, H = c.heads,
                KH = c.kvHeads, D = c.headDim, group = c.globalHeads / c.globalKvHeads;
  std::vector<float> q, kNew, vNew;
  if (c.packed) {
    // Each token's row: its queries, keys and values.
    FloatView rows(*ctx.input(kQuery));
    const int64_t width = (H + 2 * KH) * D;
    q.resize(B * S * H * D);
    kNew.resize(B * S * KH * D);
    vNew.resize(B * S * KH * D);
    for (int64_t token = 0; token < B * S; ++token) {
      const float *row = rows.data() + token * width;
      std::copy(row, row + H * D, &q[token * H * D]);
      std::copy(row + H * D, row + (H + KH) * D, &kNew[token * KH * D]);
      std::copy(row + (H + KH) * D, row + width, &vNew[token * KH * D]);
    }
  } else {
    FloatView query(*ctx.input(kQuery)), k(*ctx.input(kKey)), v(*ctx.input(kValue));
    q.assign(query.data(), query.data() + B * S * H * D);
    kNew.assign(k.data(), k.data() + B * SK * c.keyHeads * D);
    vNew.assign(v.data(), v.data() + B * SK * c.keyHeads * D);
  }
  std::vector<int64_t> positions;
  if (ctx.input(kPositions))
    DSRT_RETURN_IF_ERROR(readIndexValues(ctx, kPositions, "positions", positions));
  if (c.qkNorm) {
    // Each head's features as one row, as the unfused tfm.rms_norm of [.., heads, D] does;
    // or each token's heads as one, as OLMo-2's norm over [.., heads * D].
    // After the rotary, the scales come last (below): the norm's own scale is ones.
    std::vector<float> ones(c.qkNormAfterRotary ? D : 0, 1.0f);
    const TensorRef unitScale{DType::F32, Shape{D}, ones.data()};
    auto normalizeHeads = [&](std::vector<float> &x, int which) {
      const TensorRef &scale = c.qkNormAfterRotary ? unitScale : *ctx.input(which);
      const int64_t width = scale.shape[0];
      std::vector<float> normalized(x.size());
      normalizeRows(x.data(), static_cast<int64_t>(x.size()) / width, width, FloatView(scale),
                    nullptr, true, c.qkNormEpsilon, ctx.fastKernels, normalized.data());
      x.swap(normalized);
    };
    normalizeHeads(q, kQueryNormScale);
    normalizeHeads(kNew, kKeyNormScale);
  }
  if (c.rotaryDim > 0) {
    applyRotary(q.data(), B * S, H, c, positions);
    applyRotary(kNew.data(), B * S, c.keyHeads, c, positions);
  }
  if (c.qkNormAfterRotary) {
    auto scaleHeads = [&](std::vector<float> &x, int which) {
      FloatView scale(*ctx.input(which));
      for (size_t i = 0; i < x.size(); ++i)
        x[i] *= scale[static_cast<int64_t>(i % D)];
    };
    scaleHeads(q, kQueryNormScale);
    scaleHeads(kNew, kKeyNormScale);
  }

  // Keys and values of every attended position, [B, KH, T, D]: in the session's cache, or
  // assembled from the past inputs and the new tokens.
  std::vector<float> kAllStorage, vAllStorage;
  const float *kAll = nullptr, *vAll = nullptr;
  // What the fast kernels read the keys and values from, in their stored dtype: kAll/vAll,
  // or a half cache itself (not widened: the dot products and the weighted sum widen).
  DType storedType = DType::F32;
  const void *storedKeys = nullptr, *storedValues = nullptr;
  int64_t batchStride = KH * T * D, headStride = T * D;
  auto placeNew = [&](float *keys, float *values, int64_t bStride, int64_t hStride) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < SK; ++s)
        for (int64_t h = 0; h < KH; ++h) {
          const int64_t from = ((b * SK + s) * c.keyHeads + c.keyHeadOffset + h) * D;
          const float *ks = &kNew[from];
          const float *vs = &vNew[from];
          std::copy(ks, ks + D, keys + b * bStride + h * hStride + (P + s) * D);
          std::copy(vs, vs + D, values + b * bStride + h * hStride + (P + s) * D);
        }
  };
  if (c.sessionCache) {
    if (!ctx.cache || c.cacheLayer >= static_cast<int64_t>(ctx.cache->layers.size()))
      return ctx.error("needs the session's KV cache layer ", c.cacheLayer,
                       ", which this caller does not provide");
    const KvCacheLayer &layer = ctx.cache->layers[c.cacheLayer];
    if (layer.dtype != c.cacheDType || layer.kvHeads != KH || layer.headDim != D)
      return ctx.error("KV cache layer ", c.cacheLayer, " (", dtypeName(layer.dtype), " [",
                       layer.kvHeads, " heads, ", layer.headDim,
                       "]) does not match the attention (", dtypeName(c.cacheDType), " [", KH,
                       " heads, ", D, "])");
    if (B > layer.batch || T > layer.capacity)
      return ctx.error("batch ", B, " with ", T, " tokens does not fit the KV cache (batch ",
                       layer.batch, ", ", layer.capacity, " tokens)");
    const int64_t cacheBatchStride = KH * layer.capacity * D, cacheHeadStride = layer.capacity * D;
    if (c.cacheDType == DType::F32) {
      auto *keys = static_cast<float *>(layer.key), *values = static_cast<float *>(layer.value);
      batchStride = cacheBatchStride;
      headStride = cacheHeadStride;
      placeNew(keys, values, batchStride, headStride);
      kAll = keys;
      vAll = values;
    } else {
      // A half cache: the new keys and values are rounded into it, and every attended one
      // is read back widened, so that attention sees them as stored (as the GPU kernels do).
      const size_t element = dtypeSize(c.cacheDType);
      auto row = [&](void *base, int64_t b, int64_t h, int64_t t) {
        return static_cast<char *>(base) +
               static_cast<size_t>(b * cacheBatchStride + h * cacheHeadStride + t * D) * element;
      };
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < SK; ++s)
          for (int64_t h = 0; h < KH; ++h) {
            const int64_t from = ((b * SK + s) * c.keyHeads + c.keyHeadOffset + h) * D;
            convertFloats(DType::F32, &kNew[from], c.cacheDType, row(layer.key, b, h, P + s), D);
            convertFloats(DType::F32, &vNew[from], c.cacheDType, row(layer.value, b, h, P + s),
                          D);
          }
      if (ctx.fastKernels) {
        storedType = c.cacheDType;
        storedKeys = layer.key;
        storedValues = layer.value;
        batchStride = cacheBatchStride;
        headStride = cacheHeadStride;
      } else {
        kAllStorage.resize(B * KH * T * D);
        vAllStorage.resize(B * KH * T * D);
        for (int64_t bh = 0; bh < B * KH; ++bh)
          for (int which = 0; which < 2; ++which)
            convertFloats(c.cacheDType, row(which == 0 ? layer.key : layer.value, bh / KH, bh % KH, 0),
                          DType::F32, (which == 0 ? kAllStorage : vAllStorage).data() + bh * T * D,
                          T * D);
        kAll = kAllStorage.data();
        vAll = vAllStorage.data();
      }
    }
  } else {
    kAllStorage.resize(B * KH * T * D);
    vAllStorage.resize(B * KH * T * D);
    if (P > 0) {
      FloatView pk(*ctx.input(kPastKey)), pv(*ctx.input(kPastValue));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < KH; ++h) {
          int64_t from = (b * c.pastHeads + c.pastHeadOffset + h) * P * D;
          int64_t to = (b * KH + h) * T * D;
          std::copy(pk.data() + from, pk.data() + from + P * D, kAllStorage.data() + to);
          std::copy(pv.data() + from, pv.data() + from + P * D, vAllStorage.data() + to);
        }
    }
    placeNew(kAllStorage.data(), vAllStorage.data(), batchStride, headStride);
    kAll = kAllStorage.data();
    vAll = vAllStorage.data();
  }

  // Which keys each row may attend, and the additive terms (an additive mask, the bias).
  const TensorRef *mask = ctx.input(kMask);
  std::vector<int64_t> padding;
  std::optional<FloatView> additive, biasValues;
  std::vector<AddedScores> added;
  auto add = [&](const TensorRef &term, std::optional<FloatView> &view) {
    view.emplace(term);
    added.push_back({view->data(), term.shape, c.headOffset, H});
  };
  if (mask && !isFloat(mask->dtype)) {
    if (mask->dtype == DType::Bool) {
      padding.resize(B * T);
      for (int64_t i = 0; i < B * T; ++i)
        padding[i] = static_cast<const uint8_t *>(mask->data)[i] != 0;
    } else {
      DSRT_RETURN_IF_ERROR(readIndexValues(ctx, kMask, "mask", padding));
    }
  } else if (mask) {
    add(*mask, additive);
  }
  if (const TensorRef *bias = ctx.input(kBias))
    add(*bias, biasValues);
  std::vector<float> slopes;
  if (c.alibi) {
    std::vector<float> all = alibiSlopes(c.globalHeads);
    slopes.assign(all.begin() + c.headOffset, all.begin() + c.headOffset + H);
  }
  // ALiBi's key position counts the attended tokens before it (cumsum of the mask - 1).
  std::vector<float> keyPosition;
  if (c.alibi) {
    keyPosition.resize(B * T);
    for (int64_t b = 0; b < B; ++b) {
      int64_t count = 0;
      for (int64_t t = 0; t < T; ++t) {
        bool on = padding[b * T + t] != 0;
        count += on;
        keyPosition[b * T + t] = on ? float(count - 1) : 0.0f;
      }
    }
  }

  FloatOutput out(*outputs[0]);
  float *y = out.data();
  parallelFor(B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(T), dots(ctx.fastKernels ? T : 0);
    std::vector<char> allowed(T), visible(T);
    std::vector<const float *> addedRows(added.size());
    for (int64_t bh = begin; bh < end; ++bh) {
      int64_t b = bh / H, h = bh % H, kh = (c.headOffset + h) / group - c.kvHeadOffset;
      // f32 rows (kAll/vAll), or, on the fast path over a half cache, its rows as stored.
      const float *keys = kAll ? kAll + b * batchStride + kh * headStride : nullptr;
      const float *values = vAll ? vAll + b * batchStride + kh * headStride : nullptr;
      const size_t storedOffset =
          static_cast<size_t>(b * batchStride + kh * headStride) * dtypeSize(storedType);
      const void *keyRowsStored =
          keys ? static_cast<const void *>(keys)
               : static_cast<const char *>(storedKeys) + storedOffset;
      const void *valueRowsStored =
          values ? static_cast<const void *>(values)
                 : static_cast<const char *>(storedValues) + storedOffset;
      auto valueAt = [&](int64_t t, int64_t d) {
        if (values)
          return values[t * D + d];
        float value = 0;
        convertFloats(storedType, static_cast<const char *>(valueRowsStored) +
                                      static_cast<size_t>(t * D + d) * dtypeSize(storedType),
                      DType::F32, &value, 1);
        return value;
      };
      for (int64_t s = 0; s < S; ++s) {
        const float *query = &q[((b * S + s) * H + h) * D];
        for (size_t i = 0; i < added.size(); ++i)
          addedRows[i] = added[i].row(b, h, s);
        int64_t position = P + s;
        float maximum = -std::numeric_limits<float>::infinity();
        bool any = false;
        // Keys past `limit` are never attended.
        const int64_t limit = c.causal ? std::min(T, position + 1) : T;
        if (ctx.fastKernels) {
          // Every query-key product in one pass over the keys, as a matrix-vector product.
          fast::LinearWeights keyRows;
          keyRows.dtype = storedType;
          keyRows.data = keyRowsStored;
          keyRows.out = limit;
          keyRows.in = D;
          fast::dotRows(query, 1, keyRows, 0, limit, dots.data(), limit);
        }
        for (int64_t t = 0; t < T; ++t) {
          bool causalOk = !c.causal || t <= position;
          // Within `window` of the query on either side (before it only, when causal).
          bool windowOk = c.window == 0 || std::abs(position - t) < c.window;
          bool paddingOk = padding.empty() || padding[b * T + t] != 0;
          visible[t] = causalOk;
          allowed[t] = causalOk && windowOk && paddingOk;
          if (!allowed[t])
            continue;  // its score is never read
          float dot = 0;
          if (ctx.fastKernels) {
            dot = dots[t];
          } else {
            for (int64_t d = 0; d < D; ++d)
              dot += query[d] * keys[t * D + d];
          }
          float score = dot * c.scale;
          if (c.softcap > 0)
            score = c.softcap * std::tanh(score / c.softcap);
          if (c.alibi)
            score += slopes[h] * keyPosition[b * T + t];
          for (const float *row : addedRows)
            score += row[t];
          scores[t] = score;
          if (allowed[t]) {
            any = true;
            maximum = std::max(maximum, score);
          }
        }
        float *row = y + ((b * S + s) * H + h) * D;
        std::fill(row, row + D, 0.0f);
        if (!any && c.unattendedZero)
          continue;  // the row stays zero, as sdpa's NaN guard leaves it
        if (!any) {
          // No key to attend (a padding query): transformers' finfo.min masks leave every
          // masked score equal, so the row averages the values; GPT-Neo's doubled mask
          // leaves only the causally visible ones equal.
          int64_t count = 0;
          for (int64_t t = 0; t < T; ++t)
            if (!c.unattendedCausal || visible[t]) {
              ++count;
              for (int64_t d = 0; d < D; ++d)
                row[d] += valueAt(t, d);
            }
          for (int64_t d = 0; d < D && count > 0; ++d)
            row[d] /= float(count);
          continue;
        }
        float sum = 0;
        if (ctx.fastKernels) {
          // The exponentials vectorised (within 2 ulp of libm's).
          for (int64_t t = 0; t < T; ++t)
            scores[t] = allowed[t] ? scores[t] - maximum : 0.0f;
          fast::exponentiate(scores.data(), T);
          for (int64_t t = 0; t < T; ++t) {
            scores[t] = allowed[t] ? scores[t] : 0.0f;
            sum += scores[t];
          }
        } else {
          for (int64_t t = 0; t < T; ++t) {
            scores[t] = allowed[t] ? std::exp(scores[t] - maximum) : 0.0f;
            sum += scores[t];
          }
        }
        if (ctx.fastKernels) {
          for (int64_t t = 0; t < limit; ++t)
            scores[t] /= sum;
          fast::weightedSum(scores.data(), valueRowsStored, storedType, limit, D, row);
          continue;
        }
        for (int64_t t = 0; t < T; ++t) {
          if (scores[t] == 0.0f)
            continue;
          float weight = scores[t] / sum;
          for (int64_t d = 0; d < D; ++d)
            row[d] += weight * values[t * D + d];
        }
      }
    }
  });
  out.finish();
  if (outputs.size() == 3) {
    for (int which = 0; which < 2; ++which) {
      const float *all = which == 0 ? kAll : vAll;
      std::vector<float> present(B * KH * T * D);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < KH; ++h)
          std::copy(all + b * batchStride + h * headStride,
                    all + b * batchStride + h * headStride + T * D,
                    present.data() + (b * KH + h) * T * D);
      storeFloats(present, *outputs[1 + which]);
    }
  }
  return Status::ok();
}

} // namespace

void addAttentionKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"tfm.attention", 3, 10, 3, 1, 3, inferAttention, computeAttention});
}

} // namespace dsrt::ops
