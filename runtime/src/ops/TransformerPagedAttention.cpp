// tfm.attention over the serving engine's paged KV cache (docs/serving.md): each row of the
// step is one new token of some sequence, whose keys and values live in the blocks its
// KvPagedRow lists. Every row's new key and value is written first, then every row attends
// to its own sequence's positions [0, position]: the tokens of one prompt chunk, spread over
// rows, see each other as a prefill would. What it reads of the step is the session-mode
// attention's (TransformerAttentionConfig.h) less the padding mask, whose role the rows'
// positions take: no sequence in the engine has padding.
//
// An int8 cache (the engine's kv_cache_dtype) stores each 32 values of a row with one f32
// scale (max |x| / 127). Its rows are widened back to f32 (q * scale) wherever they are
// read, so that prompt chunks and decode tokens see the same values: they then compute as
// over an f32 cache holding those values, with half an f16 cache's bytes to read.
#include "ops/FloatAccess.h"
#include "ops/Kernel.h"
#include "ops/ThreadPool.h"
#include "ops/TransformerAttentionConfig.h"
#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

namespace dsrt::ops::attention {
namespace {

// Rows of one sequence that attend row by row rather than as a tile (row-invariant steps).
constexpr int64_t kRowByRowChunk = 8;

// Where position t of a row's sequence is in a layer of blocks [blocks, kvHeads, blockSize,
// headDim]: element offset of its head `kh` row. An int8 layer's row scales are at
// offset / headDim * groups.
struct PagedLayout {
  int64_t blockSize = 0, kvHeads = 0, headDim = 0;
  size_t element = 0;
  int64_t groups = 0;  // scales per row of an int8 layer, else 0
  size_t offset(const KvPagedRow &row, int64_t kh, int64_t t) const {
    const int64_t block = row.blocks[t / blockSize];
    return static_cast<size_t>(((block * kvHeads + kh) * blockSize + t % blockSize) * headDim);
  }
  const float *scalesAt(const float *scales, size_t offset) const {
    return scales + offset / static_cast<size_t>(headDim) * static_cast<size_t>(groups);
  }
};

// One row of D values into int8, a scale per group of D / groups values (round to nearest:
// |error| <= scale / 2).
void quantizeCacheRow(const float *x, int64_t D, int64_t groups, int8_t *q, float *scales) {
  const int64_t size = D / groups;
  for (int64_t g = 0; g < groups; ++g) {
    const float *from = x + g * size;
    float largest = 0;
    for (int64_t i = 0; i < size; ++i)
      largest = std::max(largest, std::fabs(from[i]));
    const float inverse = fast::int8CodeFactor(largest);
    // Round to nearest even by adding and removing 1.5 * 2^23 (exact for |v| <= 127), which
    // vectorizes where std::nearbyint is a call per value (4% of an int8-cache engine run).
    constexpr float kRound = 12582912.0f;
    for (int64_t i = 0; i < size; ++i) {
      const float rounded = (from[i] * inverse + kRound) - kRound;
      q[g * size + i] = static_cast<int8_t>(static_cast<int32_t>(rounded));
    }
    scales[g] = largest / 127.0f;
  }
}

// `count` int8 rows as f32, q * its group's scale: the fast kernels' widening, or the same
// products one at a time for the reference kernels.
void dequantizeCacheRows(bool fastKernels, const int8_t *q, const float *scales, int64_t count,
                         int64_t D, int64_t groups, float *to) {
  if (fastKernels) {
    fast::LinearWeights rows;
    rows.dtype = DType::I8;
    rows.data = q;
    rows.out = count;
    rows.in = D;
    rows.scales = scales;
    rows.scaleType = DType::F32;
    rows.groups = groups;
    fast::widenRows(rows, 0, count, to);
    return;
  }
  const int64_t size = D / groups;
  for (int64_t i = 0; i < count * D; ++i)
    to[i] = static_cast<float>(q[i]) * scales[i / size];
}

// The rows that are not a tiled prompt chunk (decode tokens): each attends its sequence's
// cached positions in two passes over its blocks, keys then values, a block's run at a time.
// One task per row and slice of its KV heads reads each block's keys (then values) for all
// the slice's heads as one contiguous run (24 KB for GPT-2's f16 cache): a task per query
// head read 2 KB runs scattered over the pool, which this Xeon VM serves at about 12 GB/s
// against 14-19 GB/s for 24 KB runs, and read a GQA group's KV head once per query head
// (GPT-2 int8's engine: attention 4-8% faster). Slices only where the rows are too few to
// keep every thread busy (one request alone). Longest rows first, pulled from a shared
// counter: a step's sequences differ in length by 100x, and parallelFor's fixed chunks
// would leave a thread idle behind a long one.
void attendDecodeRows(const KernelContext &ctx, const AttentionConfig &c,
                      const PagedLayout &layout, const std::vector<int64_t> &single,
                      const float *queries, const std::vector<float> &slopes, float *y) {
  if (single.empty())
    return;
  const KvCache &cache = *ctx.cache;
  const KvCacheLayer &layer = cache.layers[c.cacheLayer];
  const int64_t H = c.heads, KH = c.kvHeads, D = c.headDim,
                group = c.globalHeads / c.globalKvHeads;
  const bool int8 = layout.groups > 0;
  // The fast kernels read an int8 cache's codes and scales as they are, computing what they
  // compute over the rows widened to f32 (fast::keyScoresInt8); widened, a head's block at a
  // time into a buffer, the int8 cache (half an f16 cache's bytes) had been 10% slower than
  // the f16 one, the decode attention being bound by the bytes it reads.
  // Head widths of whole vectors only (every model's: 64, 80, 96, 128): a row's scalar tail
  // is left to the compiler, which fused its multiply and add in one kernel and not in the
  // other (FastLinearTest's Int8KvReadsEqualTheWidenedRowsBitForBit found it at width 40).
  const bool fusedInt8 = int8 && ctx.fastKernels && D % 16 == 0;
  // What the reference kernels read: an int8 cache's rows widened to f32, a head's block at
  // a time.
  const DType stored = int8 ? DType::F32 : c.cacheDType;
  const size_t readElement = int8 ? sizeof(float) : layout.element;
  const auto *keyBase = static_cast<const char *>(layer.key),
             *valueBase = static_cast<const char *>(layer.value);

  const int threads = parallelThreads();
  const int64_t rowCount = static_cast<int64_t>(single.size());
  const int64_t wantedSlices =
      std::min<int64_t>(KH, std::max<int64_t>(1, (2 * threads + rowCount - 1) / rowCount));
  const int64_t sliceHeads = (KH + wantedSlices - 1) / wantedSlices;
  struct Task {
    int64_t row, firstKvHead, endKvHead;
  };
  std::vector<Task> tasks;
  for (int64_t b : single)
    for (int64_t k = 0; k < KH; k += sliceHeads)
      tasks.push_back({b, k, std::min(KH, k + sliceHeads)});
  std::stable_sort(tasks.begin(), tasks.end(), [&](const Task &a, const Task &b) {
    return cache.pagedRows[a.row].position > cache.pagedRows[b.row].position;
  });

  struct Scratch {
    std::vector<float> scores, keyRow, sums, wide;
    std::vector<int64_t> heads;
    // A block's value slices, weights and outputs of every head (fast::weightedSumHeads).
    std::vector<const void *> headValues;
    std::vector<const float *> headWeights;
    std::vector<float *> headOutputs;
  };
  auto attend = [&](const Task &task, Scratch &x) {
    const int64_t b = task.row;
    const KvPagedRow &row = cache.pagedRows[b];
    const int64_t position = row.position, limit = position + 1;
    // Keys within `window` of the query (before it: the session's attention is causal).
    const int64_t first = c.window > 0 ? std::max<int64_t>(0, position - c.window + 1) : 0;
    auto kvHeadOf = [&](int64_t h) { return (c.headOffset + h) / group - c.kvHeadOffset; };
    x.heads.clear();
    for (int64_t h = 0; h < H; ++h)
      if (kvHeadOf(h) >= task.firstKvHead && kvHeadOf(h) < task.endKvHead)
        x.heads.push_back(h);
    auto runAt = [&](int64_t t) {
      return std::min(limit - t, layout.blockSize - t % layout.blockSize);
    };
    // KV head kh's `run` rows from position t, as the kernels read them: an int8 cache's
    // widened into a buffer the size of one head's block (4 KB for GPT-2), which stays in L1
    // for the products that read it, once for the query heads of a GQA group (consecutive
    // in x.heads): `widened` is the KV head the buffer holds at t, or -1.
    auto headRows = [&](const char *base, const float *scales, int64_t kh, int64_t t,
                        int64_t run, int64_t &widened) -> const char * {
      const size_t at = layout.offset(row, kh, t);
      if (!int8 || fusedInt8)
        return base + at * layout.element;
      if (widened == kh)
        return reinterpret_cast<const char *>(x.wide.data());
      widened = kh;
      x.wide.resize(static_cast<size_t>(run * D));
      dequantizeCacheRows(ctx.fastKernels, reinterpret_cast<const int8_t *>(base) + at,
                          layout.scalesAt(scales, at), run, D, layout.groups, x.wide.data());
      return reinterpret_cast<const char *>(x.wide.data());
    };
    // A KV head's slice of a later block requested into L2 while its slice of this block is
    // read, head by head: the blocks lie anywhere in the pool, where the hardware's
    // prefetchers do not foresee them. A GPT-2 int8 engine's decode attention 1.59-1.60 s
    // without the requests, 1.32-1.39 s with them into L1 (one or two blocks ahead alike;
    // docs/cpu-backend.md), 6-8% less again into L2 (requestLineL2 says why); requests for
    // only each slice's first lines, or every other line, were slower than all of them.
    const size_t headBytes = static_cast<size_t>(layout.blockSize * D) * layout.element;
    auto prefetchHead = [&](const char *base, int64_t kh, int64_t t) {
      if (t >= limit)
        return;
      const char *slice = base + layout.offset(row, kh, t) * layout.element;
      for (size_t line = 0; line < headBytes; line += 64)
        fast::requestLineL2(slice + line);
    };
    const int64_t n = static_cast<int64_t>(x.heads.size());
    // Each block's run of positions [t, t + run) in order, and each head j of the task with
    // its KV head's rows of the run (a GQA group's query heads are consecutive: its KV head's
    // next slice is requested once).
    auto overBlocks = [&](const char *base, const float *scales, auto &&perHead) {
      for (int64_t t = first; t < limit;) {
        const int64_t run = runAt(t);
        int64_t widened = -1, requested = -1;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t kh = kvHeadOf(x.heads[j]);
          if (kh != requested) {
            // Two blocks ahead (the first block's next one as well): on the Zen 5 the
            // GPT-2 int8 engine's decode-heavy stream served 3.5% more tokens a second
            // (medians of 5 alternating runs) than with the next block only.
            const int64_t block = t / layout.blockSize;
            if (t == first)
              prefetchHead(base, kh, (block + 1) * layout.blockSize);
            prefetchHead(base, kh, (block + 2) * layout.blockSize);
            requested = kh;
          }
          perHead(j, headRows(base, scales, kh, t, run, widened), t, run,
                  int8 ? layout.scalesAt(scales, layout.offset(row, kh, t)) : nullptr);
        }
        t += run;
      }
    };
    x.scores.assign(static_cast<size_t>(n * limit), 0.0f);
    overBlocks(keyBase, layer.keyScales,
               [&](int64_t j, const char *keys, int64_t t, int64_t run, const float *scales) {
                 const float *query = &queries[(b * H + x.heads[j]) * D];
                 float *score = &x.scores[j * limit + t];
                 if (fusedInt8) {
                   fast::keyScoresInt8(query, reinterpret_cast<const int8_t *>(keys), scales,
                                       layout.groups, run, D, score);
                   return;
                 }
                 if (ctx.fastKernels) {
                   fast::keyScores(query, keys, stored, run, D, score);
                   return;
                 }
                 for (int64_t i = 0; i < run; ++i) {
                   convertFloats(stored, keys + static_cast<size_t>(i * D) * readElement,
                                 DType::F32, x.keyRow.data(), D);
                   float dot = 0;
                   for (int64_t d = 0; d < D; ++d)
                     dot += query[d] * x.keyRow[d];
                   score[i] = dot;
                 }
               });
    // Each head's maximum, exponentials and sum (the prompt tiles' columnMaxima and
    // softmaxColumns compute the same, element for element). The maximum in 8 lanes: it is
    // exact in any order (a sign of zero it may pick differently is lost in e^(s - max)),
    // and one chain of std::max waited on each. The sums in key order, the heads' chains
    // interleaved, for the same reason.
    x.sums.resize(static_cast<size_t>(n));
    const bool plain = c.softcap <= 0 && !c.alibi;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t h = x.heads[j];
      float *headScores = &x.scores[j * limit];
      float lanes[8];
      std::fill(lanes, lanes + 8, initialMaximum(c, h));
      int64_t t = first;
      for (; plain && t + 8 <= limit; t += 8)
        for (int k = 0; k < 8; ++k) {
          headScores[t + k] *= c.scale;  // finishScore's, without soft-cap or ALiBi
          lanes[k] = std::max(lanes[k], headScores[t + k]);
        }
      for (; t < limit; ++t) {
        // No padding: a key's ALiBi position is its position.
        headScores[t] = finishScore(c, headScores[t], c.alibi ? slopes[h] : 0.0f,
                                    static_cast<float>(t));
        lanes[0] = std::max(lanes[0], headScores[t]);
      }
      const float maximum = *std::max_element(lanes, lanes + 8);
      x.sums[j] = c.sinks.empty() ? 0.0f : std::exp(c.sinks[h] - maximum);
      if (ctx.fastKernels) {
        for (int64_t i = first; i < limit; ++i)
          headScores[i] -= maximum;
        fast::exponentiate(&headScores[first], limit - first);
      } else {
        for (int64_t i = first; i < limit; ++i) {
          headScores[i] = std::exp(headScores[i] - maximum);
          x.sums[j] += headScores[i];
        }
      }
      float *result = y + (b * H + h) * D;
      std::fill(result, result + D, 0.0f);
    }
    for (int64_t t = first; t < limit && ctx.fastKernels; ++t)
      for (int64_t j = 0; j < n; ++j)
        x.sums[j] += x.scores[j * limit + t];
    x.headValues.resize(static_cast<size_t>(n));
    x.headWeights.resize(static_cast<size_t>(n));
    x.headOutputs.resize(static_cast<size_t>(n));
    overBlocks(valueBase, layer.valueScales,
               [&](int64_t j, const char *values, int64_t t, int64_t run, const float *scales) {
                 float *weights = &x.scores[j * limit + t];
                 float *result = y + (b * H + x.heads[j]) * D;
                 if (ctx.fastKernels) {
                   // One chain per element over all the row's keys, block after block: what
                   // a contiguous cache and the prompt tiles compute, whatever the block size.
                   const float sum = x.sums[j];
                   for (int64_t i = 0; i < run; ++i)
                     weights[i] /= sum;
                   if (fusedInt8) {
                     fast::weightedSumInt8(weights, reinterpret_cast<const int8_t *>(values),
                                           scales, layout.groups, run, D, result, true);
                     return;
                   }
                   if (int8) {  // widened into x.wide, which the next KV head's rows replace
                     fast::weightedSum(weights, values, stored, run, D, result, true);
                     return;
                   }
                   // Every head's slice of the block in one call, two heads' chains at a
                   // time: one head's four chains of 64 values had waited on the FMA's
                   // latency, a fifth of a long-context GPT-2 stream at 16-position blocks.
                   x.headValues[j] = values;
                   x.headWeights[j] = weights;
                   x.headOutputs[j] = result;
                   if (j + 1 == n)
                     fast::weightedSumHeads(x.headWeights.data(), x.headValues.data(), stored,
                                            n, run, D, x.headOutputs.data());
                   return;
                 }
                 for (int64_t i = 0; i < run; ++i) {
                   convertFloats(stored, values + static_cast<size_t>(i * D) * readElement,
                                 DType::F32, x.keyRow.data(), D);
                   const float weight = weights[i] / x.sums[j];
                   for (int64_t d = 0; d < D; ++d)
                     result[d] += weight * x.keyRow[d];
                 }
               });
  };

  std::atomic<size_t> nextTask{0};
  parallelFor(threads, 1, [&](int64_t, int64_t) {
    Scratch x;
    x.keyRow.resize(static_cast<size_t>(D));
    for (size_t i; (i = nextTask.fetch_add(1)) < tasks.size();)
      attend(tasks[i], x);
  });
}

} // namespace

Status computePagedAttention(const KernelContext &ctx, const AttentionConfig &c,
                             const Outputs &outputs) {
  const KvCache &cache = *ctx.cache;
  const int64_t B = c.batch, H = c.heads, KH = c.kvHeads, D = c.headDim;
  if (c.cacheLayer >= static_cast<int64_t>(cache.layers.size()))
    return ctx.error("needs KV cache layer ", c.cacheLayer, ", which the session lacks");
  const KvCacheLayer &layer = cache.layers[c.cacheLayer];
  // An int8 layer holds any plan's cache (the engine chose it).
  const bool int8 = layer.dtype == DType::I8;
  if ((layer.dtype != c.cacheDType && !int8) || layer.kvHeads != KH || layer.headDim != D)
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
  if (int8 && (!layer.keyScales || !layer.valueScales))
    return ctx.error("KV cache layer ", c.cacheLayer, " is int8 without its scales");
  const PagedLayout layout{cache.blockSize, KH, D, dtypeSize(layer.dtype),
                           int8 ? kvInt8Groups(D) : 0};
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
  // Every new key and value first, rounded to the cache's dtype as the dense cache does. On
  // the pool: a prompt chunk's rows are the first writes of fresh blocks, a page fault per
  // 4 KB, which one thread took while the others waited (with the copy of q, k and v, 7% of
  // the engine thread's time in a GPT-2 int8 serving profile).
  auto *keyBase = static_cast<char *>(layer.key), *valueBase = static_cast<char *>(layer.value);
  parallelFor(B, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, KH * D)),
              [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      for (int64_t kh = 0; kh < KH; ++kh) {
        const KvPagedRow &row = cache.pagedRows[b];
        const int64_t from = (b * c.keyHeads + c.keyHeadOffset + kh) * D;
        const size_t at = layout.offset(row, kh, row.position), to = at * layout.element;
        if (int8) {
          quantizeCacheRow(&rows.keys[from], D, layout.groups,
                           reinterpret_cast<int8_t *>(keyBase + to),
                           const_cast<float *>(layout.scalesAt(layer.keyScales, at)));
          quantizeCacheRow(&rows.values[from], D, layout.groups,
                           reinterpret_cast<int8_t *>(valueBase + to),
                           const_cast<float *>(layout.scalesAt(layer.valueScales, at)));
          continue;
        }
        convertFloats(DType::F32, &rows.keys[from], c.cacheDType, keyBase + to, D);
        convertFloats(DType::F32, &rows.values[from], c.cacheDType, valueBase + to, D);
      }
  });

  std::vector<float> slopes;
  if (c.alibi) {
    std::vector<float> all = alibiSlopes(c.globalHeads);
    slopes.assign(all.begin() + c.headOffset, all.begin() + c.headOffset + H);
  }
  FloatOutput out(*outputs[0]);
  float *y = out.data();
  // The prompt chunks' kernel reads an int8 cache's rows widened (the rows callback below).
  const DType stored = int8 ? DType::F32 : c.cacheDType;
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
    // A chunk of a few rows (a decode token and its drafts, a prompt's short tail) attends
    // row by row where that gives a tile's bits (row-invariant steps: no AMX tile;
    // FastAttentionInvariance): each row then reads its keys once more, which costs less than
    // a tile run for a handful of queries (GPT-2 int8, 16 clients, 4 drafts a decode token:
    // the attention 2.14 -> 1.59 s).
    const bool fewRows = ctx.rowInvariant && next - b <= kRowByRowChunk;
    if (fewRows || !tiledAttentionApplies(ctx, next - b)) {
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
    seq.rows = [&layout, &start, &layer, keyBase, valueBase](int64_t kh, int64_t t,
                                                              bool values, const void *&rows) {
      const int64_t run = layout.blockSize - t % layout.blockSize;
      const size_t at = layout.offset(start, kh, t);
      const char *base = values ? valueBase : keyBase;
      if (layout.groups == 0) {
        rows = base + at * layout.element;
        return run;
      }
      // Valid until this thread's next call for keys (values), which the tiled kernel makes
      // only once it has read these rows.
      thread_local std::vector<float> wideKeys, wideValues;
      std::vector<float> &wide = values ? wideValues : wideKeys;
      wide.resize(static_cast<size_t>(run * layout.headDim));
      dequantizeCacheRows(true, reinterpret_cast<const int8_t *>(base) + at,
                          layout.scalesAt(values ? layer.valueScales : layer.keyScales, at), run,
                          layout.headDim, layout.groups, wide.data());
      rows = wide.data();
      return run;
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
  attendDecodeRows(ctx, c, layout, single, rows.q.data(), slopes, y);
  out.finish();
  return Status::ok();
}

} // namespace dsrt::ops::attention
