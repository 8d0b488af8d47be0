// tfm.attention over the serving engine's paged KV cache on the GPU (docs/serving.md,
// docs/cuda-backend.md "The engine on the GPU"): the kernels of slots 3 and 4 (and 5) of a
// serving plan's `step` program (codegen/kernels/AttentionRules.cpp). The dense launcher
// (AttentionOps.cpp) reads and checks the step and hands it here when the session's cache
// is the engine's block pool. Two launches, as the CPU kernel's two phases
// (runtime/src/ops/TransformerPagedAttention.cpp): attention_rotary (PAGED) writes every
// row's new key and value into its block's slot, then attention_decode (PAGED) attends for
// each row over its sequence's positions [0, position] through its block table, so that the
// rows of one prompt chunk see each other. Nothing here reads device data on the host: the
// rows' positions and tables are device memory (DevicePagedRows), and the decode grid is
// sized for a whole table, so a captured step replays with other rows.
// A plan whose step also has slot 5, attention_prefill (PAGED), attends for each prompt
// chunk (consecutive rows of one sequence, DevicePagedRows' chunks) as a prefill does, a
// tile of rows sharing each key and value tile, and the decode kernel for the other rows;
// its slot 3 (PAGED 2) then also writes the rotated queries the prefill kernel reads. A
// step being captured, or one without chunks, attends every row with the decode kernel.
#include "cuda/ops/AttentionLaunch.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace dsrt::cuda {

void findPagedChunks(const int32_t *rows, int64_t count, int64_t tableWidth,
                     std::vector<int32_t> &chunks) {
  const int64_t stride = tableWidth + 1;
  for (int64_t first = 0, next; first < count; first = next) {
    const int32_t *start = rows + first * stride;
    next = first + 1;
    while (next < count && rows[next * stride] == start[0] + (next - first) &&
           std::equal(start + 1, start + stride, rows + next * stride + 1))
      ++next;
    if (next - first >= 2)
      chunks.insert(chunks.end(), {static_cast<int32_t>(first),
                                   static_cast<int32_t>(next - first)});
  }
}

namespace attention {

enum PagedSlot : size_t { kPagedWriteSlot = 3, kPagedDecodeSlot = 4, kPagedPrefillSlot = 5 };

namespace {

// Slot 3 is slot 0's attention_rotary and slot 4 slot 2's attention_decode, each with PAGED
// (and the decode kernel without a mask), and slot 5, where the plan has it, the paged
// prefill (slot 3 then PAGED 2): the plan's kernels must say so.
Status checkPagedConstants(StepContext &context, const TokenStep &s, bool prefill) {
  const int64_t D = s.h.headDim;
  for (size_t slot : {size_t(kPagedWriteSlot), size_t(kPagedDecodeSlot)}) {
    DSRT_RETURN_IF_ERROR(
        checkConstant(context, slot, "PAGED", prefill && slot == kPagedWriteSlot ? 2 : 1));
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
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPagedDecodeSlot, "FUSED_ROTARY", 1));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPagedDecodeSlot, "FUSED_COMBINE", 1));
  // Slot 5 is slot 1's prefill kernel (CUDA cores or tensor cores) without a mask, and
  // none of the decode kernel's own constants.
  const size_t p = kPagedPrefillSlot;
  if (prefill) {
    for (const char *name : {"ROTARY_DIM", "QK_NORM", "FUSED_ROTARY", "FUSED_COMBINE",
                             "GROUP_HEADS", "SPLIT_KEYS", "BIAS"})
      DSRT_RETURN_IF_ERROR(checkConstant(context, p, name, -1));
    DSRT_RETURN_IF_ERROR(checkConstant(context, p, "PAGED", 1));
    DSRT_RETURN_IF_ERROR(checkConstant(context, p, "HEAD_DIM", D));
    DSRT_RETURN_IF_ERROR(checkConstant(context, p, "KV_DTYPE", s.kvDtype));
  }
  // What the decode and prefill kernels attend alike.
  const std::pair<const char *, int64_t> attending[] = {
      {"CAUSAL", s.causal ? 1 : 0},  {"WINDOW", s.window},
      {"ALIBI", s.alibi ? 1 : 0},    {"MASK_DTYPE", 0},
      {"SOFTCAP_BITS", s.softcapBits}, {"OUT_DT", s.outDtype},
      {"UNATTENDED_CAUSAL", s.unattendedCausal}, {"UNATTENDED_ZERO", s.unattendedZero},
      {"SINKS", s.sinks ? 1 : -1}};
  for (size_t slot : {size_t(kPagedDecodeSlot), p}) {
    if (slot == p && !prefill)
      continue;
    for (const auto &[name, value] : attending)
      DSRT_RETURN_IF_ERROR(checkConstant(context, slot, name, value));
  }
  return Status::ok();
}

// The decode kernel over rows [first, first + count) of the step: the same launch with the
// step's per-row pointers moved to its first row.
Status launchDecodeRows(StepContext &context, const TokenStep &s, const DecodeCache &cache,
                        int64_t first, int64_t count) {
  const int64_t D = s.h.headDim, H = s.h.heads, KH = s.h.kvHeads;
  TokenStep rows = s;
  DecodeCache part = cache;
  DevicePagedRows paged = *cache.paged;
  const auto advance = [first](DevicePtr &pointer, int64_t bytesPerRow) {
    if (pointer)
      pointer += static_cast<DevicePtr>(first * bytesPerRow);
  };
  const int64_t queryFloats = s.packed ? (H + 2 * KH) * D : H * D;
  const int64_t kvFloats = s.packed ? (H + 2 * KH) * D : KH * D;
  advance(rows.query, queryFloats * 4);
  advance(rows.key, kvFloats * 4);
  advance(rows.value, kvFloats * 4);
  advance(rows.positions, s.positionType == static_cast<int64_t>(DType::I32) ? 4 : 8);
  advance(rows.out, H * D * (s.outDtype > 0 ? 2 : 4));
  advance(paged.data, (paged.tableWidth + 1) * 4);
  rows.batch = count;
  paged.rows = count;
  part.paged = &paged;
  return launchDecode(context, kPagedDecodeSlot, rows, part, /*fusedCombine=*/true,
                      kPagedDecodeSlot);
}

// Slot 5's blocks per query tile (the tensor cores' wide heads: FEATURE_PARTS), which then
// read their queries from scratch, as a half result's do.
Status pagedPrefillParts(StepContext &context, const TokenStep &s, int64_t &featureParts) {
  DSRT_RETURN_IF_ERROR(
      positiveConstant(context, kPagedPrefillSlot, "FEATURE_PARTS", 16, featureParts, 1));
  if (s.h.headDim % featureParts != 0)
    return context.error("kernel ", size_t(kPagedPrefillSlot), "'s FEATURE_PARTS ",
                         featureParts, " does not divide head_dim ", s.h.headDim);
  return Status::ok();
}

// Slot 5 over the step's prompt chunks: grid (query tiles of the longest × FEATURE_PARTS,
// heads, chunks).
Status launchPagedPrefill(StepContext &context, TokenStep &s, DecodeCache &cache,
                          DevicePtr queryRows, int64_t featureParts) {
  const DevicePagedRows &rows = *cache.paged;
  const int64_t H = s.h.heads;
  int64_t warps = 0, queryTile = 0, longest = 0;
  DSRT_RETURN_IF_ERROR(positiveConstant(context, kPagedPrefillSlot, "WARPS", 32, warps));
  DSRT_RETURN_IF_ERROR(
      positiveConstant(context, kPagedPrefillSlot, "Q_TILE", 1024, queryTile));
  const int64_t sharedBytes = context.kernelConstant(kPagedPrefillSlot, "SHARED_BYTES", 0);
  if (sharedBytes < 0 || sharedBytes > (int64_t(1) << 20))
    return context.error("kernel ", size_t(kPagedPrefillSlot), "'s SHARED_BYTES constant is ",
                         sharedBytes);
  for (int64_t c = 0; c < rows.chunks; ++c) {
    const int64_t first = rows.hostChunks[2 * c], count = rows.hostChunks[2 * c + 1];
    if (first < 0 || count < 1 || first + count > rows.rows)
      return context.error("prompt chunk ", c, " [", first, ", +", count,
                           ") is outside the step's ", rows.rows, " rows");
    longest = std::max(longest, count);
  }
  if (rows.chunks > kMaxGridYZ)
    return context.error(rows.chunks, " prompt chunks exceed the grid's limit of ", kMaxGridYZ);
  DevicePtr none = 0, pagedRows = rows.data, chunks = rows.chunkData;
  int zero = 0, kvRows = static_cast<int>(cache.rows), heads = static_cast<int>(H);
  int headOffset = static_cast<int>(s.h.headOffset);
  int kvHeadOffset = static_cast<int>(s.h.kvHeadOffset);
  int group = static_cast<int>(s.h.globalHeads / s.h.globalKvHeads);
  int globalHeads = static_cast<int>(s.h.globalHeads);
  int tableWidth = static_cast<int>(rows.tableWidth), blockSize = static_cast<int>(rows.blockSize);
  std::vector<void *> args = {&s.out,        &cache.keys,  &cache.values, &cache.batchStride,
                              &cache.headStride, &kvRows,  &none,         &none,
                              &zero,         &zero,        &heads,        &headOffset,
                              &kvHeadOffset, &group,       &globalHeads,  &s.scale};
  if (s.outDtype > 0 || featureParts > 1)
    args.push_back(&queryRows);
  args.insert(args.end(), {&pagedRows, &tableWidth, &blockSize, &chunks});
  if (s.sinks)
    args.push_back(&s.sinks);
  Dim3 grid, block;
  grid.x = static_cast<unsigned>((longest + queryTile - 1) / queryTile * featureParts);
  grid.y = static_cast<unsigned>(H);
  grid.z = static_cast<unsigned>(rows.chunks);
  block.x = static_cast<unsigned>(warps * 32);
  return context.launch(kPagedPrefillSlot, grid, block, static_cast<uint32_t>(sharedBytes),
                        args.data());
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
  if (context.kernelCount() != 5 && context.kernelCount() != 6)
    return context.error("the paged KV cache runs slots 3 and 4 (and 5) of a five- or "
                         "six-kernel step (a serving plan's step program), not ",
                         context.kernelCount(), " kernels");
  const bool hasPrefill = context.kernelCount() == 6;
  DSRT_RETURN_IF_ERROR(checkPagedConstants(context, s, hasPrefill));
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
  // Prompt chunks to the prefill kernel: not in a capture, whose grid would keep this step's.
  const bool chunked = hasPrefill && rows.chunks > 0 && !context.capturing();
  // Where slot 3 writes the rotated queries (PAGED 2), which the prefill kernel reads: the
  // output itself when it is f32 (each row is read before it is written), else f32 scratch
  // (a half result, or blocks that share a row's output).
  // None without chunks (a decode-only or captured step): the kernel then writes none.
  DevicePtr queryRows = chunked ? s.out : 0;
  int64_t featureParts = 1;
  if (hasPrefill)
    DSRT_RETURN_IF_ERROR(pagedPrefillParts(context, s, featureParts));
  if (chunked && (s.outDtype > 0 || featureParts > 1))
    DSRT_RETURN_IF_ERROR(
        context.scratch(static_cast<size_t>(B * H * D) * sizeof(float), queryRows));
  {
    // Keys and values, and with PAGED 2 in a step with chunks the rotated queries for the
    // prefill kernel (else none: the decode kernel rotates its own); `heads` sizes a packed
    // row. The blocks stride over the heads along y.
    DevicePtr none = 0, pagedRows = rows.data;
    int zero = 0, one = 1, keysArg = static_cast<int>(keys);
    int heads = static_cast<int>(H), kvHeads = static_cast<int>(KH);
    int tableWidth = static_cast<int>(rows.tableWidth);
    int blockSize = static_cast<int>(rows.blockSize);
    std::vector<void *> args = {
        &s.query,    &s.key,         &s.value,           &s.positions,       &queryRows,
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
    grid.y = static_cast<unsigned>(std::min<int64_t>(chunked ? std::max(H, KH) : KH,
                                                     kMaxGridYZ));
    block.x = kRotaryBlock;
    DSRT_RETURN_IF_ERROR(context.launch(kPagedWriteSlot, grid, block, 0, args.data()));
  }
  if (!chunked)
    return launchDecode(context, kPagedDecodeSlot, s, cache, /*fusedCombine=*/true,
                        kPagedDecodeSlot);
  DSRT_RETURN_IF_ERROR(launchPagedPrefill(context, s, cache, queryRows, featureParts));
  // The rows between chunks (decode tokens), one launch per run.
  int64_t next = 0;
  for (int64_t c = 0; c <= rows.chunks; ++c) {
    const int64_t first = c < rows.chunks ? rows.hostChunks[2 * c] : B;
    if (first > next)
      DSRT_RETURN_IF_ERROR(launchDecodeRows(context, s, cache, next, first - next));
    if (c < rows.chunks)
      next = first + rows.hostChunks[2 * c + 1];
  }
  return Status::ok();
}

} // namespace attention
} // namespace dsrt::cuda
