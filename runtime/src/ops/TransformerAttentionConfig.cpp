// tfm.attention's configuration on the CPU: the attributes and the inputs' shapes read and
// checked (TransformerAttentionConfig.h).
#include "ops/TransformerAttentionConfig.h"

#include "ops/TransformerCommon.h"

#include <algorithm>
#include <cmath>

namespace dsrt::ops::attention {
namespace {

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

// The sinks (input 10): float [heads], or every head of the model under tensor parallelism
// (this rank's start at headOffset).
Status readSinks(const KernelContext &ctx, AttentionConfig &c) {
  const TensorRef *sinks = ctx.input(kSinks);
  if (!sinks)
    return Status::ok();
  if (!isFloat(sinks->dtype) || sinks->shape.size() != 1 ||
      (sinks->shape[0] != c.heads && sinks->shape[0] != c.globalHeads))
    return ctx.error("the sinks must be float [", c.heads, "] or [", c.globalHeads, "], not ",
                     dtypeName(sinks->dtype), " ", shapeString(sinks->shape));
  FloatView all(*sinks);
  const int64_t first = sinks->shape[0] == c.heads ? 0 : c.headOffset;
  c.sinks.assign(all.data() + first, all.data() + first + c.heads);
  return Status::ok();
}

// An additive mask's or bias's shape against the scores [batch, heads, fresh, total]: batch
// and heads may broadcast, and the heads may be every head of the model (this rank reads
// its own).

} // namespace

Status readAttentionConfig(const KernelContext &ctx, AttentionConfig &c) {
  int64_t flag;
  c.rowInvariant = ctx.rowInvariant;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "num_heads", 0, c.heads));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "num_kv_heads", c.heads, c.kvHeads));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "head_dim", 0, c.headDim));
  c.globalHeads = c.heads;
  c.globalKvHeads = c.kvHeads;
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
  // Under tensor parallelism the rank's heads (rank_heads ...); every local query head's
  // KV head must be one of this rank's.
  RankHeads rankHeads;
  if (Status status = readRankHeads(ctx.attrs, ctx.collectives ? ctx.collectives->rank() : 0,
                                    c.globalHeads, c.globalKvHeads, rankHeads);
      !status)
    return ctx.error(status.message());
  c.heads = rankHeads.heads;
  c.headOffset = rankHeads.headOffset;
  c.kvHeads = rankHeads.kvHeads;
  c.kvHeadOffset = rankHeads.kvHeadOffset;
  if (c.window < 0 || c.rotaryDim < 0 || c.rotaryDim > c.headDim || c.rotaryDim % 2 != 0)
    return ctx.error("window must be >= 0 and rotary_dim even and at most head_dim");

  DSRT_RETURN_IF_ERROR(intAttr(ctx, "packed_qkv", 0, flag));
  c.packed = flag != 0;
  DSRT_RETURN_IF_ERROR(readQueryKeyValueShapes(ctx, c));
  DSRT_RETURN_IF_ERROR(readQueryKeyNorms(ctx, c));  // after the key's head count
  DSRT_RETURN_IF_ERROR(readSinks(ctx, c));
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

} // namespace dsrt::ops::attention
