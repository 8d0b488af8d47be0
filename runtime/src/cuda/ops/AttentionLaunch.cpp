// What tfm.attention's launchers share (AttentionLaunch.h): the step's heads, the checks of
// the plan's kernel constants, and the split-KV decode kernel's launch, which a decode step
// over the dense cache (AttentionOps.cpp) and every step over the paged one
// (AttentionPagedOps.cpp) make alike but for the cache's addressing.
#include "cuda/ops/AttentionLaunch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace dsrt::cuda::attention {

Status readHeads(StepContext &context, Heads &h) {
  const ops::AttrMap &attrs = context.attrs();
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "num_heads", 0, h.heads));
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "num_kv_heads", h.heads, h.kvHeads));
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "head_dim", 0, h.headDim));
  h.globalHeads = h.heads;
  h.globalKvHeads = h.kvHeads;
  if (h.globalHeads <= 0 || h.globalKvHeads <= 0 || h.headDim <= 0 ||
      h.globalHeads % h.globalKvHeads != 0)
    return context.error("needs num_heads a positive multiple of num_kv_heads and "
                         "head_dim > 0");
  ops::RankHeads rankHeads;
  if (Status status = ops::readRankHeads(attrs, context.rank(), h.globalHeads,
                                         h.globalKvHeads, rankHeads);
      !status)
    return context.error(status.message());
  h.heads = rankHeads.heads;
  h.headOffset = rankHeads.headOffset;
  h.kvHeads = rankHeads.kvHeads;
  h.kvHeadOffset = rankHeads.kvHeadOffset;
  if (h.heads > kMaxGridYZ)
    return context.error(h.heads, " heads exceed the grid's limit of ", kMaxGridYZ);
  return Status::ok();
}

Status checkConstant(StepContext &context, size_t slot, const char *name, int64_t expected) {
  int64_t compiled = context.kernelConstant(slot, name, -1);
  if (compiled != expected)
    return context.error("kernel ", slot, " was generated with ", name, " ", compiled,
                         ", the step needs ", expected);
  return Status::ok();
}

Status positiveConstant(StepContext &context, size_t slot, const char *name, int64_t limit,
                        int64_t &out, int64_t absent) {
  out = context.kernelConstant(slot, name, absent);
  if (out <= 0 || out > limit)
    return context.error("kernel ", slot, "'s ", name, " constant is ", out,
                         ", not in [1, ", limit, "]");
  return Status::ok();
}

// The kernels' dsc_rotary_frequencies parameter: the attention factor, then ROTARY_DIM / 2
// inverse frequencies (one when off).
Status rotaryFrequencies(StepContext &context, std::vector<float> &frequencies) {
  float attentionFactor = 1.0f;
  if (Status status = ops::rotaryInverseFrequencies(context.attrs(), frequencies); !status)
    return context.error(status.message());
  if (Status status = ops::rotaryAttentionFactor(context.attrs(), attentionFactor); !status)
    return context.error(status.message());
  frequencies.resize(std::max<size_t>(frequencies.size(), 1), 0.0f);
  frequencies.insert(frequencies.begin(), attentionFactor);
  return Status::ok();
}

Status readQkNorms(StepContext &context, const DeviceTensor *queryNorm,
                   const DeviceTensor *keyNorm, const Heads &h, int64_t &qkNormKind,
                   float &qkNormEpsilon) {
  const ops::AttrMap &attrs = context.attrs();
  const int64_t D = h.headDim, H = h.heads, KH = h.kvHeads;
  // Per head (QK_NORM 1: scales [D]) or over all of a token's query or key heads (2:
  // [H * D] and [KH * D], OLMo-2's).
  auto sized = [&](const DeviceTensor *scale, int64_t features) {
    return scale && scale->dtype == DType::F32 && scale->shape == Shape{features};
  };
  if (sized(queryNorm, D) && sized(keyNorm, D))
    qkNormKind = 1;
  else if (sized(queryNorm, H * D) && sized(keyNorm, KH * D))
    qkNormKind = 2;
  else
    return context.error("the q/k norms need f32 scales [", D, "] each, or [", H * D,
                         "] and [", KH * D, "] (inputs 8 and 9)");
  // The scales after the rotation (HunYuan-Dense's): QK_NORM 3, per head only.
  int64_t afterRotary = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "qk_norm_after_rotary", 0, afterRotary));
  if (afterRotary != 0) {
    if (qkNormKind != 1)
      return context.error("q/k norms after the rotary need scales of [", D, "]");
    qkNormKind = 3;
  }
  if (!attrs.count("qk_norm_epsilon"))
    return context.error("the q/k norms need qk_norm_epsilon");
  DSRT_RETURN_IF_ERROR(ops::getFloat(attrs, "qk_norm_epsilon", 0.0f, qkNormEpsilon));
  if (!(qkNormEpsilon >= 0) || !std::isfinite(qkNormEpsilon))
    return context.error("qk_norm_epsilon must be finite and >= 0, not ", qkNormEpsilon);
  return Status::ok();
}

Status readSinks(StepContext &context, const DeviceTensor *sinks, const Heads &h,
                 DevicePtr &rankSinks) {
  rankSinks = 0;
  if (!sinks)
    return Status::ok();
  if (sinks->dtype != DType::F32 || sinks->shape.size() != 1 ||
      (sinks->shape[0] != h.heads && sinks->shape[0] != h.globalHeads))
    return context.error("the sinks must be f32 [", h.heads, "] or [", h.globalHeads,
                         "], not ", dtypeName(sinks->dtype), " ", shapeString(sinks->shape));
  const int64_t first = sinks->shape[0] == h.heads ? 0 : h.headOffset;
  rankSinks = sinks->data + static_cast<DevicePtr>(first) * sizeof(float);
  return Status::ok();
}

Status launchDecode(StepContext &context, size_t slot, TokenStep &s, DecodeCache &cache,
                    bool fusedCombine, size_t combineSlot) {
  const int64_t D = s.h.headDim, H = s.h.heads, KH = s.h.kvHeads, B = s.batch;
  int64_t warps = 0, splitKeys = 0, groupHeads = 0;
  DSRT_RETURN_IF_ERROR(positiveConstant(context, slot, "WARPS", 32, warps));
  DSRT_RETURN_IF_ERROR(positiveConstant(context, slot, "SPLIT_KEYS", 1 << 20, splitKeys));
  if (!fusedCombine)
    DSRT_RETURN_IF_ERROR(checkConstant(context, combineSlot, "SPLIT_KEYS", splitKeys));
  // A block row per query head, or (GROUP_HEADS) per run of up to that many query heads of
  // one KV head: ceil(group / GROUP_HEADS) runs for each KV head the rank's query heads read.
  DSRT_RETURN_IF_ERROR(
      positiveConstant(context, slot, "GROUP_HEADS", 1024, groupHeads, /*absent=*/1));
  const int64_t group = s.h.globalHeads / s.h.globalKvHeads;
  int64_t blockRows = H;
  if (groupHeads > 1) {
    const int64_t runs = (group + groupHeads - 1) / groupHeads;
    blockRows = ((s.h.headOffset + H - 1) / group - s.h.headOffset / group + 1) * runs;
  }
  if (blockRows > kMaxGridYZ)
    return context.error(blockRows, " block rows of heads exceed the grid's limit of ",
                         kMaxGridYZ);
  // Sized for every row the cache has, not this run's length: a captured graph replays it.
  const int64_t maxSplits = (cache.rows + splitKeys - 1) / splitKeys;
  const int64_t slots = B * H * maxSplits;
  DevicePtr partialOut = 0, arrivals = 0;
  DSRT_RETURN_IF_ERROR(
      context.scratch(static_cast<size_t>(slots * (D + 2)) * sizeof(float), partialOut));
  DevicePtr partialMax = partialOut + static_cast<DevicePtr>(slots * D) * sizeof(float);
  DevicePtr partialSum = partialMax + static_cast<DevicePtr>(slots) * sizeof(float);
  // One arrival count per (block row, sequence), zero between launches: the kernel's
  // merging block resets its own.
  if (fusedCombine)
    DSRT_RETURN_IF_ERROR(context.arrivalCounters(static_cast<size_t>(B * blockRows), arrivals));

  int maxSplitsArg = static_cast<int>(maxSplits), rows = static_cast<int>(cache.rows);
  int heads = static_cast<int>(H), headOffset = static_cast<int>(s.h.headOffset);
  int kvHeadOffset = static_cast<int>(s.h.kvHeadOffset), groupArg = static_cast<int>(group);
  int globalHeads = static_cast<int>(s.h.globalHeads);
  // The query, key and value inputs' floats per token (a joined row when packed).
  long long queryStride = s.packed ? (H + 2 * KH) * D : H * D;
  long long kvStride = s.packed ? (H + 2 * KH) * D : KH * D;
  DevicePtr pagedRows = cache.paged ? cache.paged->data : 0;
  int tableWidth = cache.paged ? static_cast<int>(cache.paged->tableWidth) : 0;
  int blockSize = cache.paged ? static_cast<int>(cache.paged->blockSize) : 0;
  // The kernel's parameters in order; the optional groups (QK_NORM's, PAGED's) only where it
  // has them, since each follows the last.
  std::vector<void *> args = {
      &s.out,         &cache.keys,   &cache.values,  &cache.batchStride, &cache.headStride,
      &rows,          &s.mask,       &cache.lengths, &partialOut,        &partialMax,
      &partialSum,    &maxSplitsArg, &heads,         &headOffset,        &kvHeadOffset,
      &groupArg,      &globalHeads,  &s.scale,       &s.query,           &s.key,
      &s.value,       &queryStride,  &kvStride,      &s.positions,       s.frequencies.data(),
      &s.out,         &arrivals};
  if (s.qkNormKind > 0)
    args.insert(args.end(), {&s.queryNorm, &s.keyNorm, &s.qkNormEpsilon});
  if (cache.paged)
    args.insert(args.end(), {&pagedRows, &tableWidth, &blockSize});
  if (s.sinks)
    args.push_back(&s.sinks);
  Dim3 grid, block;
  grid.x = static_cast<unsigned>(maxSplits);
  grid.y = static_cast<unsigned>(blockRows);
  grid.z = static_cast<unsigned>(B);
  block.x = static_cast<unsigned>(warps * 32);
  DSRT_RETURN_IF_ERROR(context.launch(slot, grid, block, 0, args.data()));
  if (fusedCombine)
    return Status::ok();
  void *combine[] = {&s.out,         &partialOut,        &partialMax,        &partialSum,
                     &maxSplitsArg,  &cache.values,      &cache.batchStride, &cache.headStride,
                     &rows,          &cache.lengths,     &heads,             &headOffset,
                     &kvHeadOffset,  &groupArg};
  Dim3 combineGrid, combineBlock;
  combineGrid.x = static_cast<unsigned>(H);
  combineGrid.y = static_cast<unsigned>(B);
  combineBlock.x = static_cast<unsigned>(std::clamp<int64_t>((D + 31) / 32 * 32, 32, 256));
  return context.launch(combineSlot, combineGrid, combineBlock, 0, combine);
}

} // namespace dsrt::cuda::attention
