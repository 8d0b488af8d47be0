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
#include <vector>

namespace dsrt::cuda::attention {

enum PagedSlot : size_t { kPagedWriteSlot = 3, kPagedDecodeSlot = 4 };

namespace {

// Slot 3 is slot 0's attention_rotary and slot 4 slot 2's attention_decode, each with PAGED
// (and the decode kernel without a mask): the plan's kernels must say so.
Status checkPagedConstants(StepContext &context, const TokenStep &s) {
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

Status runPagedAttention(StepContext &context, TokenStep &s) {
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

  // Strides: a block's elements, a head's in a block.
  DecodeCache cache{layer->key, layer->value, 0, KH * rows.blockSize * D, rows.blockSize * D,
                    keys, &rows};
  {
    // Keys and values only (the kernel with PAGED writes no query: the decode kernel
    // rotates them); `heads` sizes a packed row.
    DevicePtr none = 0, pagedRows = rows.data;
    int zero = 0, one = 1, keysArg = static_cast<int>(keys);
    int heads = static_cast<int>(H), kvHeads = static_cast<int>(KH);
    int tableWidth = static_cast<int>(rows.tableWidth);
    int blockSize = static_cast<int>(rows.blockSize);
    std::vector<void *> args = {
        &s.query,    &s.key,         &s.value,           &s.positions,       &s.out,
        &cache.keys, &cache.values,  &none,              &none,              &none,
        &zero,       &one,           &one,               &cache.batchStride, &cache.headStride,
        &keysArg,    &heads,         &kvHeads,           &kvHeads,           &zero,
        s.frequencies.data()};
    // QK_NORM's parameters only where the kernel has them: PAGED's follow the last.
    if (s.qkNormKind > 0)
      args.insert(args.end(), {&s.queryNorm, &s.keyNorm, &s.qkNormEpsilon});
    args.insert(args.end(), {&pagedRows, &tableWidth, &blockSize});
    Dim3 grid, block;
    grid.x = static_cast<unsigned>(B);
    grid.y = static_cast<unsigned>(std::min<int64_t>(KH, kMaxGridYZ));
    block.x = kRotaryBlock;
    DSRT_RETURN_IF_ERROR(context.launch(kPagedWriteSlot, grid, block, 0, args.data()));
  }
  return launchDecode(context, kPagedDecodeSlot, s, cache, /*fusedCombine=*/true,
                      kPagedDecodeSlot);
}

} // namespace dsrt::cuda::attention
