// tfm.attention's tiled kernel for prompts (docs/cpu-backend.md): for one sequence, one KV
// head and a tile of queries, the rows of the tile are its queries times the query heads that
// share the KV head (GQA's group), and the keys come in tiles of kKeyTile:
//   scores [keys, rows] = K [keys, D] . Qᵀ [D, rows]   (fast::scoreTile: Qᵀ transposed once
//                                                       per work item; K read in place)
//   the scale, soft-cap, ALiBi, added terms, masks (-inf), where the step has them
//   each row's maximum over all its keys, p = exp(scores - max), the sums, p / sum
//   out [rows, D] = pᵀ [rows, keys] . V [keys, D]      (fast::multiplyTile, V read in place)
// in the decode rows' arithmetic element for element (runItem says why and how), so that a
// request's tokens do not depend on how the serving engine cut its prompt into steps. The
// value products keep their sums in registers (4 rows by 4 vectors with AVX-512) with one
// broadcast per element of the strided operand; the scores put the queries in the lanes, so
// that the decode rows' sums across lanes become vertical adds. A key tile no row of the
// query tile may see (past its causal limit, outside its window) is never read. This file is
// built for the baseline ISA: only the optional score terms run here, elementwise.
// What each row may attend is the reference kernel's (TransformerAttention.cpp), which stays
// the oracle (TiledAttentionTest.cpp). Half plans' bf16 caches outside the serving engine
// take AMX-BF16 tiles with an online softmax instead (runItemAmx).
#include "ops/ThreadPool.h"
#include "ops/TransformerAttentionConfig.h"
#include "ops/fast/AmxTileConfig.h"
#include "ops/fast/AttentionAmx.h"
#include "ops/fast/FastKernels.h"


#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace dsrt::ops::attention {
namespace {

// Keys per tile, and rows (queries times grouped heads) per query tile: a 64 x 64 tile of
// scores is 16 KB and the accumulator 64 x D floats, which stay in L1/L2 with the tiles of
// keys and values. Rows are padded to a multiple of 16 (AVX-512's lanes) in the transposed
// query tile, so the score tile's columns have no scalar tail.
constexpr int64_t kKeyTile = 64;
constexpr int64_t kTileRows = 64;
constexpr int64_t kLanes = 16;

std::atomic<int64_t> tilesRun{0};
std::atomic<int64_t> amxTilesRun{0};

bool tilingEnabled() {
  static const bool enabled = [] {
    const char *value = std::getenv("DSRT_TILED_ATTENTION");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

// One work item: a sequence, a KV head, and the query tile [first, first + count).
struct Item {
  int64_t sequence, kvHead, first, count, cost;
};

// The key range [begin, end) that query position `position` may attend.
struct KeyRange {
  int64_t begin, end;
};
KeyRange keyRange(const AttentionConfig &c, int64_t position, int64_t keys) {
  // Within `window` of the query on either side (before it only, when causal).
  int64_t begin = c.window > 0 ? std::max<int64_t>(0, position - c.window + 1) : 0;
  int64_t end = c.causal ? std::min(keys, position + 1) : keys;
  if (!c.causal && c.window > 0)
    end = std::min(keys, position + c.window);
  return {begin, std::max(begin, end)};
}

// Per-thread tiles, reused across the items a thread runs.
struct Scratch {
  std::vector<float> queriesT, scores, acc, maximum, sum, keyTile, valueTile, slope;
  std::vector<int64_t> begin, end;
  std::vector<const float *> addedRows;
  // The AMX items' (runItemAmx): bf16 queries and probabilities, each row's seen keys.
  std::vector<uint16_t> queries, probabilities;
  std::vector<uint64_t> allowed;
};

// `count` cached rows of D values from `from`, as stored (f16, bf16), widened to f32 by the
// ISA's kernel.
void widenCacheRows(DType stored, const void *from, int64_t count, int64_t D, float *to) {
  fast::LinearWeights rows;
  rows.dtype = stored;
  rows.data = from;
  rows.out = count;
  rows.in = D;
  fast::widenRows(rows, 0, count, to);
}

// Each row's running maximum and sum before its first key tile (runItemAmx's online
// softmax): a sink's (maximum the sink, sum 1) where the step has sinks, so that it stays in
// the online softmax like a key whose value is zero; the padding rows past `rows` stay empty.
void initialState(const AttentionConfig &c, const std::vector<int64_t> &heads, int64_t rows,
                  int64_t ld, Scratch &x) {
  const int64_t G = static_cast<int64_t>(heads.size());
  x.maximum.assign(static_cast<size_t>(ld), -std::numeric_limits<float>::infinity());
  x.sum.assign(static_cast<size_t>(ld), 0.0f);
  for (int64_t r = 0; r < rows && !c.sinks.empty(); ++r) {
    x.maximum[r] = initialMaximum(c, heads[r % G]);
    x.sum[r] = initialSum(c);
  }
}

// Each row's output: its accumulator over its sum, or marked unattended where it saw no key.
void finishRows(const TiledSequence &seq, const Item &item, const std::vector<int64_t> &heads,
                int64_t H, int64_t D, const Scratch &x) {
  const int64_t G = static_cast<int64_t>(heads.size()), rows = item.count * G;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = item.first + r / G, h = heads[r % G];
    if (x.sum[r] == 0.0f) {
      seq.unattended[s * H + h] = 1;
      continue;
    }
    const float inverse = 1.0f / x.sum[r];
    float *out = seq.y + (s * H + h) * D;
    for (int64_t d = 0; d < D; ++d)
      out[d] = x.acc[r * D + d] * inverse;
  }
}

// KV head kh's keys (or values) of [t0, t0 + n) as f32 rows [n, D]: in place where they are
// f32 and contiguous, else gathered (and widened) into `tile`.
const float *tileRows(const TiledSequence &seq, DType stored, int64_t kh, int64_t t0, int64_t n,
                      int64_t D, bool values, std::vector<float> &tile) {
  const void *from = nullptr;
  int64_t run = seq.rows(kh, t0, values, from);
  if (stored == DType::F32 && run >= n)
    return static_cast<const float *>(from);
  tile.resize(static_cast<size_t>(kKeyTile * D));
  for (int64_t j = 0; j < n; j += run) {
    if (j > 0)
      run = seq.rows(kh, t0 + j, values, from);
    run = std::min(run, n - j);
    if (stored == DType::F32)
      std::memcpy(tile.data() + j * D, from, static_cast<size_t>(run * D) * sizeof(float));
    else
      widenCacheRows(stored, from, run, D, tile.data() + j * D);
  }
  return tile.data();
}

// The item in the decode rows' arithmetic (TransformerPagedAttention.cpp's attendDecodeRows,
// TransformerAttention.cpp's one-query loop), element for element, so that a token's
// attention is the same bits whether its sequence's steps computed it in a prompt chunk of
// any length or as a decode row (after a prefix hit, a preemption, a chunk boundary), over
// any block size: every score (fast::scoreTile, keyScores' arithmetic with the queries in
// the lanes; then the scale, soft-cap, ALiBi, added terms), each row's maximum over all its
// keys, the exponentials, their sum in key order and the division (fast::columnMaxima,
// softmaxColumns), then the weights times the values as one FMA chain per element over the
// keys in order (multiplyTile, accumulating tile after tile). The scores of all the item's
// keys are kept ([keys, 64] floats: 1 MB at 4096 keys), a two-pass softmax where an online
// one would rescale the sums per tile, which a decode row does not.
void runItem(const AttentionConfig &c, DType stored, const TiledSequence &seq, const Item &item,
             const std::vector<int64_t> &heads, const std::vector<float> &slopes,
             const std::vector<AddedScores> &added, Scratch &x) {
  const int64_t D = c.headDim, H = c.heads, G = static_cast<int64_t>(heads.size());
  const int64_t rows = item.count * G, ld = (rows + kLanes - 1) / kLanes * kLanes;
  const float negativeInfinity = -std::numeric_limits<float>::infinity();
  // Row r is query item.first + r / G of head heads[r % G].
  x.queriesT.assign(static_cast<size_t>(D * ld), 0.0f);
  x.begin.resize(rows);
  x.end.resize(rows);
  x.slope.assign(static_cast<size_t>(rows), 0.0f);
  x.addedRows.resize(static_cast<size_t>(rows * added.size()));
  int64_t first = seq.keys, last = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = item.first + r / G, h = heads[r % G];
    const float *query = seq.q + (s * H + h) * D;
    for (int64_t d = 0; d < D; ++d)
      x.queriesT[d * ld + r] = query[d];
    KeyRange range = keyRange(c, seq.firstPosition + s, seq.keys);
    x.begin[r] = range.begin;
    x.end[r] = range.end;
    first = std::min(first, range.begin);
    last = std::max(last, range.end);
    if (c.alibi)
      x.slope[r] = slopes[h];
    for (size_t i = 0; i < added.size(); ++i)
      x.addedRows[r * added.size() + i] = added[i].row(seq.batch, h, s);
  }
  const int64_t span = std::max<int64_t>(0, last - first);
  x.scores.resize(static_cast<size_t>(span * ld));
  float *scores = x.scores.data();
  // Every score, then what a decode row adds to it (score = dot * scale; soft-cap; ALiBi;
  // added terms: the same expressions in the same order), and -inf where the row may not see
  // the key (its causal limit, its window, padding), which weighs 0.
  const int64_t lastBegin = rows > 0 ? *std::max_element(x.begin.begin(), x.begin.end()) : 0;
  const int64_t firstEnd = rows > 0 ? *std::min_element(x.end.begin(), x.end.end()) : 0;
  for (int64_t t0 = first; t0 < last; t0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, last - t0);
    const float *keyRows = tileRows(seq, stored, item.kvHead, t0, n, D, false, x.keyTile);
    tilesRun.fetch_add(1, std::memory_order_relaxed);
    fast::scoreTile(keyRows, n, D, x.queriesT.data(), ld, scores + (t0 - first) * ld);
  }
  const bool plain = c.softcap <= 0 && !c.alibi && added.empty();
  for (int64_t j = 0; j < span; ++j) {
    const int64_t t = first + j;
    float *row = scores + j * ld;
    if (plain) {
      for (int64_t r = 0; r < ld; ++r)
        row[r] = row[r] * c.scale;
    } else {
      const float position = seq.alibiPosition ? seq.alibiPosition[t] : static_cast<float>(t);
      for (int64_t r = 0; r < rows; ++r) {
        float score = finishScore(c, row[r], x.slope[r], position);
        for (size_t i = 0; i < added.size(); ++i)
          score += x.addedRows[r * added.size() + i][t];
        row[r] = score;
      }
    }
    const bool keyOk = !seq.keyAllowed || seq.keyAllowed[t] != 0;
    if (keyOk && t >= lastBegin && t < firstEnd)
      continue;
    for (int64_t r = 0; r < rows; ++r)
      if (!keyOk || t < x.begin[r] || t >= x.end[r])
        row[r] = negativeInfinity;
  }
  // Each row's maximum (from a sink's, or -inf), its sum (from the sink's e^(sink - maximum),
  // or 0), the weights; a row with no key to see is left to the caller.
  x.maximum.assign(static_cast<size_t>(ld), negativeInfinity);
  x.sum.assign(static_cast<size_t>(ld), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    x.maximum[r] = initialMaximum(c, heads[r % G]);
  fast::columnMaxima(scores, span, ld, x.maximum.data());
  for (int64_t r = 0; r < rows && !c.sinks.empty(); ++r)
    x.sum[r] = std::exp(c.sinks[heads[r % G]] - x.maximum[r]);
  fast::softmaxColumns(scores, span, ld, x.maximum.data(), x.sum.data());
  // out[r, d] = Σ_j p[j, r] v[j, d], one chain over the keys: the scores read transposed.
  x.acc.assign(static_cast<size_t>(rows * D), 0.0f);
  for (int64_t t0 = first; t0 < last; t0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, last - t0);
    const float *valueRows = tileRows(seq, stored, item.kvHead, t0, n, D, true, x.valueTile);
    fast::multiplyTile(scores + (t0 - first) * ld, 1, ld, valueRows, D, rows, n, D,
                       x.acc.data(), D, t0 != first);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = item.first + r / G, h = heads[r % G];
    bool any = false;
    for (int64_t t = x.begin[r]; t < x.end[r] && !any; ++t)
      any = !seq.keyAllowed || seq.keyAllowed[t] != 0;
    if (!any) {
      seq.unattended[s * H + h] = 1;
      continue;
    }
    std::memcpy(seq.y + (s * H + h) * D, x.acc.data() + r * D, static_cast<size_t>(D) * sizeof(float));
  }
}

// A sequence's keys and values of one KV head in AMX's pair layout, tile by tile (key tile
// t holds keys [64 t, 64 t + 64)): packed once per call, then read by every query tile of
// the head, which would otherwise each pack again every key tile below its causal limit.
struct PackedKeyValues {
  std::vector<uint32_t> keys, values;  // [tiles, D / 2, 64], [tiles, 32, D]
};

// Per-thread buffers of the packing: the tile's row pointers, and rows rounded to bf16 where
// the cache is f32 or f16.
struct PackScratch {
  std::vector<const uint16_t *> keyRows, valueRows;
  std::vector<uint16_t> converted;
  std::vector<float> wide;
};

// Packs key tile `tile` of KV head kh of `seq` into `packed`.
void packTile(const TiledSequence &seq, int64_t kh, int64_t tile, DType stored, int64_t D,
              PackedKeyValues &packed, PackScratch &x) {
  using fast::amx::kAmxKeys;
  const int64_t t0 = tile * kAmxKeys, n = std::min(kAmxKeys, seq.keys - t0);
  x.keyRows.resize(kAmxKeys);
  x.valueRows.resize(kAmxKeys);
  if (stored != DType::BF16) {
    x.converted.resize(static_cast<size_t>(2 * kAmxKeys * D));
    x.wide.resize(static_cast<size_t>(D));
  }
  const size_t element = dtypeSize(stored);
  for (int64_t j = 0; j < n;) {
    const void *keys = nullptr, *values = nullptr;
    const int64_t run = std::min(seq.rows(kh, t0 + j, false, keys), n - j);
    seq.rows(kh, t0 + j, true, values);
    for (int64_t i = 0; i < run; ++i, ++j) {
      const void *key = static_cast<const char *>(keys) + i * D * element;
      const void *value = static_cast<const char *>(values) + i * D * element;
      if (stored == DType::BF16) {
        x.keyRows[j] = static_cast<const uint16_t *>(key);
        x.valueRows[j] = static_cast<const uint16_t *>(value);
        continue;
      }
      // An f32 or f16 cache, where the prompt GEMMs were asked for in bf16: each row
      // widened (f16) and rounded.
      for (int which = 0; which < 2; ++which) {
        uint16_t *to = x.converted.data() + (which * kAmxKeys + j) * D;
        const void *from = which == 0 ? key : value;
        const float *wide = static_cast<const float *>(from);
        if (stored != DType::F32) {
          widenCacheRows(stored, from, 1, D, x.wide.data());
          wide = x.wide.data();
        }
        fast::amx::roundScaled(wide, D, 1.0f, to);
        (which == 0 ? x.keyRows : x.valueRows)[j] = to;
      }
    }
  }
  fast::amx::packKeys(x.keyRows.data(), n, D, packed.keys.data() + tile * (D / 2) * kAmxKeys);
  fast::amx::packValues(x.valueRows.data(), n, D,
                        packed.values.data() + tile * (kAmxKeys / 2) * D);
}

// The item on AMX-BF16 tiles (fast/AttentionAmx.h): the same work as runItem, with the
// queries (scaled), the keys, the values and each tile's weights rounded to bf16 and every
// sum in f32. The scores are laid out [rows, keys] for the tile products, so the masks are
// bit sets per row; the optional score terms (soft-capping, ALiBi, added scores) stay on
// runItem. Key tiles are aligned to 64 (the packed ones); keys before a row's range are
// masked like any other.
void runItemAmx(const AttentionConfig &c, const TiledSequence &seq, const Item &item,
                const std::vector<int64_t> &heads, const PackedKeyValues &packed, Scratch &x) {
  using fast::amx::kAmxKeys;
  const int64_t D = c.headDim, H = c.heads, G = static_cast<int64_t>(heads.size());
  const int64_t rows = item.count * G, ld = (rows + kLanes - 1) / kLanes * kLanes;
  x.queries.assign(static_cast<size_t>(ld * D), 0);
  x.begin.resize(static_cast<size_t>(rows));
  x.end.resize(static_cast<size_t>(rows));
  int64_t first = seq.keys, last = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = item.first + r / G, h = heads[r % G];
    fast::amx::roundScaled(seq.q + (s * H + h) * D, D, c.scale, x.queries.data() + r * D);
    KeyRange range = keyRange(c, seq.firstPosition + s, seq.keys);
    x.begin[r] = range.begin;
    x.end[r] = range.end;
    first = std::min(first, range.begin);
    last = std::max(last, range.end);
  }
  x.acc.assign(static_cast<size_t>(ld * D), 0.0f);
  initialState(c, heads, rows, ld, x);
  x.scores.resize(static_cast<size_t>(ld * kAmxKeys));
  x.probabilities.assign(static_cast<size_t>(ld * kAmxKeys), 0);
  x.allowed.resize(static_cast<size_t>(rows));
  fast::amx::configure();
  for (int64_t t0 = first / kAmxKeys * kAmxKeys; t0 < last; t0 += kAmxKeys) {
    const int64_t tile = t0 / kAmxKeys, n = std::min(kAmxKeys, seq.keys - t0);
    fast::amx::scoreTile(x.queries.data(), ld, D,
                         packed.keys.data() + tile * (D / 2) * kAmxKeys, x.scores.data());
    // The keys each row sees: its range (causal limit, window) within the tile, less padding.
    uint64_t present = n == 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
    for (int64_t j = 0; seq.keyAllowed && j < n; ++j)
      if (seq.keyAllowed[t0 + j] == 0)
        present &= ~(uint64_t(1) << j);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t lo = std::max<int64_t>(0, x.begin[r] - t0),
                    hi = std::min<int64_t>(n, x.end[r] - t0);
      uint64_t range = 0;
      if (hi > lo)
        range = (hi - lo == 64 ? ~uint64_t(0) : (uint64_t(1) << (hi - lo)) - 1) << lo;
      x.allowed[r] = range & present;
    }
    fast::amx::softmaxTile(x.scores.data(), rows, x.allowed.data(), x.maximum.data(),
                           x.sum.data(), x.acc.data(), D, x.probabilities.data());
    fast::amx::accumulateTile(x.probabilities.data(), ld,
                              packed.values.data() + tile * (kAmxKeys / 2) * D, D,
                              x.acc.data());
    tilesRun.fetch_add(1, std::memory_order_relaxed);
    amxTilesRun.fetch_add(1, std::memory_order_relaxed);
  }
  fast::amx::release();
  finishRows(seq, item, heads, H, D, x);
}

// Whether this call's items take runItemAmx: the CPU has AMX-BF16; a half plan (the
// attention's output is bf16 or f16) attends over a bf16 cache, or DSRT_PREFILL_GEMM=bf16
// asked for bf16 prompts (any cache, its rows rounded to bf16 as they are packed); the head
// dimension is whole tiles deep; and no score term needs runItem. An f32 plan with a half
// cache (--kv-cache-dtype) keeps f32 products: it asked for a smaller cache, not for bf16
// arithmetic. An f16 cache keeps them too: rounding its rows to bf16 made an int4 fixture's
// engine tokens differ from its tokens alone (a preempted sequence's decoded tokens are
// recomputed as a prompt chunk). DSRT_AMX_ATTENTION=0 turns it off.
bool amxEnabled() {
  static const bool enabled = [] {
    const char *value = std::getenv("DSRT_AMX_ATTENTION");
    return !(value && std::string(value) == "0") && fast::amx::available();
  }();
  return enabled;
}

bool amxApplies(const AttentionConfig &c, DType stored, const std::vector<AddedScores> &added,
                DType outputType) {
  const bool enabled = amxEnabled();
  constexpr int64_t kPromptRows = 1 << 20;  // any prompt long enough for the GEMMs
  const bool halfPlan = outputType == DType::BF16 || outputType == DType::F16;
  const bool askedForBf16 =
      (stored == DType::BF16 || stored == DType::F16 || stored == DType::F32) &&
      fast::bf16PromptGemm(DType::F32, kPromptRows);
  const bool bf16Prompts = (halfPlan && stored == DType::BF16) || askedForBf16;
  return enabled && bf16Prompts && !c.rowInvariant && c.headDim % 32 == 0 && c.softcap <= 0 && !c.alibi &&
         added.empty();
}

} // namespace

bool tiledAttentionApplies(const KernelContext &ctx, int64_t queries) {
  return ctx.fastKernels && queries > 1 && tilingEnabled();
}

int64_t tiledAttentionTiles() { return tilesRun.load(); }

int64_t tiledAttentionAmxTiles() { return amxTilesRun.load(); }

const char *tiledAttentionDescription() {
  if (!tilingEnabled())
    return "one query at a time";
  return amxEnabled() ? "tiled; amx-bf16 tiles for bf16 caches" : "tiled";
}

void tiledAttention(const AttentionConfig &c, DType stored,
                    const std::vector<TiledSequence> &sequences, const std::vector<float> &slopes,
                    const std::vector<AddedScores> &added, DType outputType) {
  const int64_t H = c.heads, KH = c.kvHeads, group = c.globalHeads / c.globalKvHeads;
  // The local query heads of each local KV head.
  std::vector<std::vector<int64_t>> headsOf(static_cast<size_t>(KH));
  for (int64_t h = 0; h < H; ++h)
    headsOf[(c.headOffset + h) / group - c.kvHeadOffset].push_back(h);
  std::vector<Item> items;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const TiledSequence &seq = sequences[i];
    for (int64_t kh = 0; kh < KH; ++kh) {
      const int64_t G = static_cast<int64_t>(headsOf[kh].size());
      if (G == 0)
        continue;
      const int64_t tile = std::max<int64_t>(1, kTileRows / G);
      for (int64_t first = 0; first < seq.queries; first += tile) {
        const int64_t count = std::min(tile, seq.queries - first);
        KeyRange a = keyRange(c, seq.firstPosition + first, seq.keys),
                 b = keyRange(c, seq.firstPosition + first + count - 1, seq.keys);
        const int64_t cost = count * G * (std::max(a.end, b.end) - std::min(a.begin, b.begin));
        items.push_back({static_cast<int64_t>(i), kh, first, count, cost});
      }
    }
  }
  // The pool runs contiguous ranges of its count (a few per thread, taken as threads free
  // up): the items, costliest first (causal: the last query tiles), are dealt out to buckets
  // in a snake order so that any range of buckets costs about the same.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item &a, const Item &b) { return a.cost > b.cost; });
  const int64_t count = static_cast<int64_t>(items.size()),
                buckets = std::min<int64_t>(count, 256);
  std::vector<std::vector<const Item *>> dealt(static_cast<size_t>(buckets));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t round = i / buckets, place = i % buckets;
    dealt[round % 2 == 0 ? place : buckets - 1 - place].push_back(&items[i]);
  }
  const bool amx = amxApplies(c, stored, added, outputType);
  // On AMX, each sequence's keys and values of each KV head, packed first.
  std::vector<PackedKeyValues> packed;
  if (amx) {
    using fast::amx::kAmxKeys;
    const int64_t D = c.headDim;
    packed.resize(sequences.size() * static_cast<size_t>(KH));
    std::vector<std::array<int64_t, 3>> tiles;  // sequence, KV head, tile
    for (size_t i = 0; i < sequences.size(); ++i)
      for (int64_t kh = 0; kh < KH; ++kh) {
        if (headsOf[kh].empty())
          continue;
        const int64_t count = (sequences[i].keys + kAmxKeys - 1) / kAmxKeys;
        PackedKeyValues &mine = packed[i * KH + kh];
        mine.keys.resize(static_cast<size_t>(count * (D / 2) * kAmxKeys));
        mine.values.resize(static_cast<size_t>(count * (kAmxKeys / 2) * D));
        for (int64_t t = 0; t < count; ++t)
          tiles.push_back({static_cast<int64_t>(i), kh, t});
      }
    parallelFor(static_cast<int64_t>(tiles.size()), 4, [&](int64_t begin, int64_t end) {
      PackScratch scratch;
      for (int64_t t = begin; t < end; ++t) {
        const auto [i, kh, tile] = tiles[static_cast<size_t>(t)];
        packTile(sequences[static_cast<size_t>(i)], kh, tile, stored, D,
                 packed[static_cast<size_t>(i * KH + kh)], scratch);
      }
    });
  }
  parallelFor(buckets, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch;
    for (int64_t b = begin; b < end; ++b)
      for (const Item *item : dealt[b]) {
        if (amx)
          runItemAmx(c, sequences[item->sequence], *item, headsOf[item->kvHead],
                     packed[static_cast<size_t>(item->sequence * KH + item->kvHead)],
                     scratch);
        else
          runItem(c, stored, sequences[item->sequence], *item, headsOf[item->kvHead], slopes,
                  added, scratch);
      }
  });
}

} // namespace dsrt::ops::attention

namespace dsrt::ops::fast::amx {

bool available() {
  static const bool granted = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("avx512bw") && amxTileDataGranted();
  }();
  return granted;
}

} // namespace dsrt::ops::fast::amx
