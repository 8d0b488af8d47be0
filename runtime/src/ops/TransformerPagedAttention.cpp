// tfm.attention over the serving engine's paged KV cache (docs/serving.md): each row of the
// step is one new token of some sequence, whose keys and values live in the blocks its
// KvPagedRow lists. Every row's new key and value is written first, then every row attends
// to its own sequence's positions [0, position]: the tokens of one prompt chunk, spread over
// rows, see each other as a prefill would. What it reads of the step is the session-mode
// attention's (TransformerAttentionConfig.h) less the padding mask, whose role the rows'
// positions take: no sequence in the engine has padding.
#include "ops/FloatAccess.h"
#include "ops/Kernel.h"
#include "ops/ThreadPool.h"
#include "ops/TransformerAttentionConfig.h"
#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace dsrt::ops::attention {
namespace {

// Where position t of a row's sequence is in a layer of blocks [blocks, kvHeads, blockSize,
// headDim]: element offset of its head `kh` row.
struct PagedLayout {
  int64_t blockSize = 0, kvHeads = 0, headDim = 0;
  size_t element = 0;
  size_t offset(const KvPagedRow &row, int64_t kh, int64_t t) const {
    const int64_t block = row.blocks[t / blockSize];
    return static_cast<size_t>(((block * kvHeads + kh) * blockSize + t % blockSize) * headDim);
  }
};

} // namespace

Status computePagedAttention(const KernelContext &ctx, const AttentionConfig &c,
                             const Outputs &outputs) {
  const KvCache &cache = *ctx.cache;
  const int64_t B = c.batch, H = c.heads, KH = c.kvHeads, D = c.headDim,
                group = c.globalHeads / c.globalKvHeads;
  if (c.cacheLayer >= static_cast<int64_t>(cache.layers.size()))
    return ctx.error("needs KV cache layer ", c.cacheLayer, ", which the session lacks");
  const KvCacheLayer &layer = cache.layers[c.cacheLayer];
  if (layer.dtype != c.cacheDType || layer.kvHeads != KH || layer.headDim != D)
    return ctx.error("KV cache layer ", c.cacheLayer, " (", dtypeName(layer.dtype), " [",
                     layer.kvHeads, " heads, ", layer.headDim, "]) does not match the attention (",
                     dtypeName(c.cacheDType), " [", KH, " heads, ", D, "])");
  if (c.fresh != 1 || c.keys != 1)
    return ctx.error("the paged KV cache takes one new token per row, not ", c.fresh);
  if (static_cast<int64_t>(cache.pagedRows.size()) != B)
    return ctx.error("the step has ", B, " rows but the engine described ",
                     cache.pagedRows.size());
  if (ctx.input(kBias) || (ctx.input(kMask) && isFloat(ctx.input(kMask)->dtype)))
    return ctx.error("an attention with a bias or an additive mask cannot read the paged "
                     "KV cache");
  const PagedLayout layout{cache.blockSize, KH, D, dtypeSize(c.cacheDType)};
  for (int64_t b = 0; b < B; ++b) {
    const KvPagedRow &row = cache.pagedRows[b];
    if (row.position < 0 || row.position / cache.blockSize >= row.blockCount)
      return ctx.error("row ", b, " at position ", row.position, " has ", row.blockCount,
                       " blocks of ", cache.blockSize);
    for (int64_t i = 0; i <= row.position / cache.blockSize; ++i)
      if (row.blocks[i] < 0 || row.blocks[i] >= layer.batch)
        return ctx.error("row ", b, " names block ", row.blocks[i], " of ", layer.batch);
  }

  // Reused by the calls on this thread: a prompt chunk's rows are megabytes, which a fresh
  // vector would take from the OS (and fault in) at every layer. A reference, so that the
  // lambdas the pool runs read this thread's rows, not their own thread's.
  thread_local QueryKeyValue reused;
  QueryKeyValue &rows = reused;
  DSRT_RETURN_IF_ERROR(prepareQueryKeyValue(ctx, c, rows));
  // Rotary angles and cache slots must agree: a row's position input is its cache position.
  if (!rows.positions.empty())
    for (int64_t b = 0; b < B; ++b)
      if (rows.positions[b] != cache.pagedRows[b].position)
        return ctx.error("row ", b, " has position ", rows.positions[b],
                         " but the engine placed it at ", cache.pagedRows[b].position);
  // Every new key and value first, rounded to the cache's dtype as the dense cache does.
  auto *keyBase = static_cast<char *>(layer.key), *valueBase = static_cast<char *>(layer.value);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t kh = 0; kh < KH; ++kh) {
      const KvPagedRow &row = cache.pagedRows[b];
      const int64_t from = (b * c.keyHeads + c.keyHeadOffset + kh) * D;
      const size_t to = layout.offset(row, kh, row.position) * layout.element;
      convertFloats(DType::F32, &rows.keys[from], c.cacheDType, keyBase + to, D);
      convertFloats(DType::F32, &rows.values[from], c.cacheDType, valueBase + to, D);
    }

  std::vector<float> slopes;
  if (c.alibi) {
    std::vector<float> all = alibiSlopes(c.globalHeads);
    slopes.assign(all.begin() + c.headOffset, all.begin() + c.headOffset + H);
  }
  FloatOutput out(*outputs[0]);
  float *y = out.data();
  const DType stored = c.cacheDType;
  // A prompt chunk (consecutive rows of one sequence at consecutive positions) on the fast
  // kernels runs the tiled kernel (TransformerTiledAttention.cpp); the other rows (decode)
  // the loop below.
  std::vector<int64_t> single;
  std::vector<TiledSequence> chunks;
  for (int64_t b = 0, next; b < B; b = next) {
    const KvPagedRow &start = cache.pagedRows[b];
    next = b + 1;
    while (next < B && cache.pagedRows[next].blocks == start.blocks &&
           cache.pagedRows[next].position == start.position + (next - b))
      ++next;
    if (!tiledAttentionApplies(ctx, next - b)) {
      for (int64_t i = b; i < next; ++i)
        single.push_back(i);
      continue;
    }
    TiledSequence seq;
    seq.batch = b;
    seq.queries = next - b;
    seq.firstPosition = start.position;
    seq.keys = start.position + seq.queries;
    seq.q = &rows.q[b * H * D];
    seq.y = y + b * H * D;
    seq.rows = [&layout, &start, keyBase, valueBase](int64_t kh, int64_t t, const void *&keys,
                                                      const void *&values) {
      const size_t offset = layout.offset(start, kh, t) * layout.element;
      keys = keyBase + offset;
      values = valueBase + offset;
      return layout.blockSize - t % layout.blockSize;
    };
    chunks.push_back(std::move(seq));
  }
  // The engine's sequences have no padding: every query attends at least its own key.
  std::vector<uint8_t> unattended(static_cast<size_t>(B * H), 0);
  for (TiledSequence &seq : chunks)
    seq.unattended = &unattended[seq.batch * H];
  if (!chunks.empty())
    // The same choice as a session's prompt (AMX tiles for a bf16 plan's bf16 cache), so
    // that a request's tokens in the engine equal its tokens alone.
    tiledAttention(c, stored, chunks, slopes, {}, outputs[0]->dtype);
  parallelFor(static_cast<int64_t>(single.size()) * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, keyRow(D), partial(D);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = single[bh / H], h = bh % H,
                    kh = (c.headOffset + h) / group - c.kvHeadOffset;
      const KvPagedRow &row = cache.pagedRows[b];
      const int64_t position = row.position, limit = position + 1;
      // Keys within `window` of the query (before it: the session's attention is causal).
      const int64_t first = c.window > 0 ? std::max<int64_t>(0, position - c.window + 1) : 0;
      const float *query = &rows.q[(b * H + h) * D];
      scores.assign(static_cast<size_t>(limit), 0.0f);
      float maximum = initialMaximum(c, h);
      // The next block's rows requested while this one's are read: the blocks lie anywhere
      // in the pool, each a short run the hardware's prefetchers do not foresee (decode
      // attention waited on its key and value loads most of its time).
      auto prefetchBlock = [&](const char *base, int64_t t) {
        if (t >= limit)
          return;
        const int64_t run = std::min(limit - t, cache.blockSize - t % cache.blockSize);
        const char *rows = base + layout.offset(row, kh, t) * layout.element;
        const size_t bytes = static_cast<size_t>(run * D) * layout.element;
        for (size_t line = 0; line < bytes; line += 64)
          __builtin_prefetch(rows + line);
      };
      // One block's run of keys at a time: positions [t, t + run) are contiguous rows.
      for (int64_t t = first; t < limit;) {
        const int64_t run = std::min(limit - t, cache.blockSize - t % cache.blockSize);
        const char *keys = keyBase + layout.offset(row, kh, t) * layout.element;
        prefetchBlock(keyBase, t + run);
        if (ctx.fastKernels) {
          fast::keyScores(query, keys, stored, run, D, &scores[t]);
        } else {
          for (int64_t i = 0; i < run; ++i) {
            convertFloats(stored, keys + static_cast<size_t>(i * D) * layout.element,
                          DType::F32, keyRow.data(), D);
            float dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += query[d] * keyRow[d];
            scores[t + i] = dot;
          }
        }
        t += run;
      }
      for (int64_t t = first; t < limit; ++t) {
        float score = scores[t] * c.scale;
        if (c.softcap > 0)
          score = c.softcap * std::tanh(score / c.softcap);
        // No padding: a key's ALiBi position is its position.
        if (c.alibi)
          score += slopes[h] * static_cast<float>(t);
        scores[t] = score;
        maximum = std::max(maximum, score);
      }
      float sum = c.sinks.empty() ? 0.0f : std::exp(c.sinks[h] - maximum);
      if (ctx.fastKernels) {
        for (int64_t t = first; t < limit; ++t)
          scores[t] -= maximum;
        fast::exponentiate(&scores[first], limit - first);
        for (int64_t t = first; t < limit; ++t)
          sum += scores[t];
      } else {
        for (int64_t t = first; t < limit; ++t) {
          scores[t] = std::exp(scores[t] - maximum);
          sum += scores[t];
        }
      }
      float *result = y + (b * H + h) * D;
      std::fill(result, result + D, 0.0f);
      for (int64_t t = first; t < limit;) {
        const int64_t run = std::min(limit - t, cache.blockSize - t % cache.blockSize);
        const char *values = valueBase + layout.offset(row, kh, t) * layout.element;
        prefetchBlock(valueBase, t + run);
        if (ctx.fastKernels) {
          for (int64_t i = 0; i < run; ++i)
            scores[t + i] /= sum;
          fast::weightedSum(&scores[t], values, stored, run, D, partial.data());
          for (int64_t d = 0; d < D; ++d)
            result[d] += partial[d];
        } else {
          for (int64_t i = 0; i < run; ++i) {
            convertFloats(stored, values + static_cast<size_t>(i * D) * layout.element,
                          DType::F32, keyRow.data(), D);
            const float weight = scores[t + i] / sum;
            for (int64_t d = 0; d < D; ++d)
              result[d] += weight * keyRow[d];
          }
        }
        t += run;
      }
    }
  });
  out.finish();
  return Status::ok();
}

} // namespace dsrt::ops::attention
