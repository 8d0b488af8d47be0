// tfm.attention over the serving engine's paged KV cache on the GPU (docs/serving.md,
// docs/cuda-backend.md "The engine on the GPU"): the kernels of slots 3 and 4 of a serving
// plan's `step` program (codegen/kernels/AttentionRules.cpp). The dense launcher
// (AttentionOps.cpp) reads and checks the step and hands it here when the session's cache
// is the engine's block pool. Two launches, as the CPU kernel's two phases
// (runtime/src/ops/TransformerPagedAttention.cpp): attention_rotary (PAGED) writes every
// row's new key and value into its block's slot, then attention_decode (PAGED) attends for
// each row over its sequence's positions [0, position] through its block table, so that the
// rows of one prompt chunk see each other. Nothing here reads device data on the host: the
// rows' positions and tables are device memory (DevicePagedRows), and the decode grid is
// sized for a whole table, so a captured step replays with other rows.
#include "cuda/ops/AttentionLaunch.h"

#include <algorithm>
#include <cstdint>

namespace dsrt::cuda::attention {

enum PagedSlot : size_t { kPagedWriteSlot = 3, kPagedDecodeSlot = 4 };

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

int64_t decodeBlockRows(const Heads &h, int64_t groupHeads) {
  if (groupHeads <= 1)
    return h.heads;
  const int64_t group = h.globalHeads / h.globalKvHeads;
  const int64_t runs = (group + groupHeads - 1) / groupHeads;
  const int64_t firstKvHead = h.headOffset / group;
  const int64_t lastKvHead = (h.headOffset + h.heads - 1) / group;
  return (lastKvHead - firstKvHead + 1) * runs;
}

namespace {

// Slot 3 is slot 0's attention_rotary and slot 4 slot 2's attention_decode, each with PAGED
// (and the decode kernel without a mask): the plan's kernels must say so.
Status checkPagedConstants(StepContext &context, const PagedStep &s) {
  const int64_t D = s.h.headDim;
  for (size_t slot : {size_t(kPagedWriteSlot), size_t(kPagedDecodeSlot)}) {
    DSRT_RETURN_IF_ERROR(checkConstant(context, slot, "PAGED", 1));
    DSRT_RETURN_IF_ERROR(checkConstant(context, slot, "HEAD_DIM", D));
    DSRT_RETURN_IF_ERROR(checkConstant(context, slot, "ROTARY_DIM", s.rotaryDim));
    DSRT_RETURN_IF_ERROR(checkConstant(context, slot, "ROTARY_INTERLEAVED",
                                       s.rotary && s.interleaved ? 1 : 0));
    DSRT_RETURN_IF_ERROR(checkConstant(context, slot, "POS_DTYPE", s.positionType));
    DSRT_RETURN_IF_ERROR(checkConstant(context, slot, "QK_NORM", s.qkNormKind));
    DSRT_RETURN_IF_ERROR(checkConstant(context, slot, "KV_DTYPE", s.kvDtype));
  }
  DSRT_RETURN_IF_ERROR(
      checkConstant(context, kPagedWriteSlot, "PACKED_QKV", s.packed ? 1 : -1));
  const size_t d = kPagedDecodeSlot;
  DSRT_RETURN_IF_ERROR(checkConstant(context, d, "CAUSAL", s.causal ? 1 : 0));
  DSRT_RETURN_IF_ERROR(checkConstant(context, d, "WINDOW", s.window));
  DSRT_RETURN_IF_ERROR(checkConstant(context, d, "ALIBI", s.alibi ? 1 : 0));
  DSRT_RETURN_IF_ERROR(checkConstant(context, d, "MASK_DTYPE", 0));
  DSRT_RETURN_IF_ERROR(checkConstant(context, d, "SOFTCAP_BITS", s.softcapBits));
  DSRT_RETURN_IF_ERROR(checkConstant(context, d, "OUT_DT", s.outDtype));
  DSRT_RETURN_IF_ERROR(checkConstant(context, d, "FUSED_ROTARY", 1));
  DSRT_RETURN_IF_ERROR(checkConstant(context, d, "FUSED_COMBINE", 1));
  DSRT_RETURN_IF_ERROR(checkConstant(context, d, "UNATTENDED_CAUSAL", s.unattendedCausal));
  DSRT_RETURN_IF_ERROR(checkConstant(context, d, "UNATTENDED_ZERO", s.unattendedZero));
  return Status::ok();
}

} // namespace

Status runPagedAttention(StepContext &context, PagedStep &s) {
  const DevicePagedRows &rows = *context.pagedRows();
  const int64_t D = s.h.headDim, H = s.h.heads, KH = s.h.kvHeads, B = s.batch;
  if (context.kernelCount() < 5) {
    // No paged kernels (a plan compiled without --serving, or from before them): asking for
    // the first marks the step as missing its kernel, so that the session runs it through
    // the host fallback (the CPU paged attention over the downloaded pool), or refuses it
    // in strict mode.
    Dim3 one;
    return context.launch(kPagedWriteSlot, one, one, 0, nullptr);
  }
  if (context.kernelCount() != 5)
    return context.error("the paged KV cache runs slots 3 and 4 of a five-kernel step (a "
                         "serving plan's step program), not ", context.kernelCount(), " kernels");
  DSRT_RETURN_IF_ERROR(checkPagedConstants(context, s));
  if (B != rows.rows)
    return context.error("the step has ", B, " rows but the engine described ", rows.rows);
  const DeviceKvLayer *layer = context.kvLayer(s.cacheLayer);
  if (!layer)
    return context.error("needs the session's KV cache layer ", s.cacheLayer);
  if (layer->dtype != s.cacheType || layer->kvHeads != KH || layer->headDim != D ||
      layer->capacity != rows.blockSize || layer->batch != rows.blocks)
    return context.error("KV cache layer ", s.cacheLayer, " (", dtypeName(layer->dtype), " [",
                         layer->batch, " blocks, ", layer->kvHeads, " heads, ",
                         layer->capacity, ", ", layer->headDim,
                         "]) does not match the attention (", dtypeName(s.cacheType), " [",
                         rows.blocks, " blocks, ", KH, " heads, ", rows.blockSize, ", ", D, "])");
  // Positions a table can name: the decode grid covers them all, whatever this step's rows.
  const int64_t keys = rows.tableWidth * rows.blockSize;
  if (keys <= 0 || keys > INT32_MAX || B > kMaxGridYZ)
    return context.error(B, " rows of ", keys, " positions exceed the kernels' limits");
  if (B == 0)
    return Status::ok();

  long long blockStride = KH * rows.blockSize * D, headStride = rows.blockSize * D;
  DevicePtr keyData = layer->key, valueData = layer->value, pagedRows = rows.data;
  int tableWidth = static_cast<int>(rows.tableWidth), blockSize = static_cast<int>(rows.blockSize);
  int keysArg = static_cast<int>(keys);
  int heads = static_cast<int>(H), kvHeads = static_cast<int>(KH);
  int headOffset = static_cast<int>(s.h.headOffset), kvHeadOffset = static_cast<int>(s.h.kvHeadOffset);
  int group = static_cast<int>(s.h.globalHeads / s.h.globalKvHeads);
  int globalHeads = static_cast<int>(s.h.globalHeads);

  {
    // Keys and values only (the kernel with PAGED writes no query: the decode kernel
    // rotates them); `heads` sizes a packed row.
    DevicePtr none = 0;
    int zero = 0, one = 1, pastHeads = kvHeads;
    void *args[] = {&s.query,   &s.key,      &s.value,    &s.positions, &s.out,
                    &keyData,   &valueData,  &none,       &none,        &none,
                    &zero,      &one,        &one,        &blockStride, &headStride,
                    &keysArg,   &heads,      &kvHeads,    &pastHeads,   &zero,
                    s.frequencies.data(), &s.queryNorm, &s.keyNorm, &s.qkNormEpsilon,
                    &pagedRows, &tableWidth, &blockSize};
    // Without QK_NORM the kernel has no norm parameters: the table follows the frequencies.
    void *plain[] = {args[0],  args[1],  args[2],  args[3],  args[4],  args[5],  args[6],
                     args[7],  args[8],  args[9],  args[10], args[11], args[12], args[13],
                     args[14], args[15], args[16], args[17], args[18], args[19], args[20],
                     &pagedRows, &tableWidth, &blockSize};
    Dim3 grid, block;
    grid.x = static_cast<unsigned>(B);
    grid.y = static_cast<unsigned>(std::min<int64_t>(KH, kMaxGridYZ));
    block.x = kRotaryBlock;
    DSRT_RETURN_IF_ERROR(
        context.launch(kPagedWriteSlot, grid, block, 0, s.qkNormKind > 0 ? args : plain));
  }

  int64_t warps = 0, splitKeys = 0, groupHeads = 0;
  DSRT_RETURN_IF_ERROR(positiveConstant(context, kPagedDecodeSlot, "WARPS", 32, warps));
  DSRT_RETURN_IF_ERROR(
      positiveConstant(context, kPagedDecodeSlot, "SPLIT_KEYS", 1 << 20, splitKeys));
  DSRT_RETURN_IF_ERROR(positiveConstant(context, kPagedDecodeSlot, "GROUP_HEADS", 1024,
                                        groupHeads, /*absent=*/1));
  const int64_t blockRows = decodeBlockRows(s.h, groupHeads);
  if (blockRows > kMaxGridYZ)
    return context.error(blockRows, " block rows of heads exceed the grid's limit of ",
                         kMaxGridYZ);
  const int64_t maxSplits = (keys + splitKeys - 1) / splitKeys;
  const int64_t slots = B * H * maxSplits;
  DevicePtr partialOut = 0, arrivals = 0;
  DSRT_RETURN_IF_ERROR(
      context.scratch(static_cast<size_t>(slots * (D + 2)) * sizeof(float), partialOut));
  DevicePtr partialMax = partialOut + static_cast<DevicePtr>(slots * D) * sizeof(float);
  DevicePtr partialSum = partialMax + static_cast<DevicePtr>(slots) * sizeof(float);
  DSRT_RETURN_IF_ERROR(context.arrivalCounters(static_cast<size_t>(B * blockRows), arrivals));
  int maxSplitsArg = static_cast<int>(maxSplits);
  DevicePtr none = 0;
  long long queryStride = s.packed ? (H + 2 * KH) * D : H * D;
  long long kvStride = s.packed ? (H + 2 * KH) * D : KH * D;
  void *args[] = {&s.out,        &keyData,     &valueData,   &blockStride, &headStride,
                  &keysArg,      &none,        &none,        &partialOut,  &partialMax,
                  &partialSum,   &maxSplitsArg, &heads,      &headOffset,  &kvHeadOffset,
                  &group,        &globalHeads, &s.scale,     &s.query,     &s.key,
                  &s.value,      &queryStride, &kvStride,    &s.positions,
                  s.frequencies.data(), &s.out, &arrivals,   &s.queryNorm, &s.keyNorm,
                  &s.qkNormEpsilon, &pagedRows, &tableWidth, &blockSize};
  void *plain[] = {args[0],  args[1],  args[2],  args[3],  args[4],  args[5],  args[6],
                   args[7],  args[8],  args[9],  args[10], args[11], args[12], args[13],
                   args[14], args[15], args[16], args[17], args[18], args[19], args[20],
                   args[21], args[22], args[23], args[24], args[25], args[26],
                   &pagedRows, &tableWidth, &blockSize};
  Dim3 grid, block;
  grid.x = static_cast<unsigned>(maxSplits);
  grid.y = static_cast<unsigned>(blockRows);
  grid.z = static_cast<unsigned>(B);
  block.x = static_cast<unsigned>(warps * 32);
  return context.launch(kPagedDecodeSlot, grid, block, 0, s.qkNormKind > 0 ? args : plain);
}

} // namespace dsrt::cuda::attention
