// Internal to the fast kernels: dotRows' f32 kernels for more than 4 rows of x (DotKernels.h's
// dotRowsTyped), where the products, not the weights' bytes, bound the time: blocks of 4
// weight rows by kBlockRows rows of x (dotBlocks), and on AVX-512 up to 16 rows as the lanes
// of a vector (dotRowLanes); and the exact engine's kernel for any rows of float weights,
// each row summed as the one-row kernel sums it alone (dotRowsAsAloneTyped). Written once
// over DotKernels.h's `Vec` operations and compiled once per instruction set with them;
// DotKernels.h includes it after those. Include it only through DotKernels.h.
#ifndef DSRT_OPS_FAST_ROWBLOCKKERNELS_H
#define DSRT_OPS_FAST_ROWBLOCKKERNELS_H

#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace dsrt::ops::fast::detail {
// Internal linkage, as DotKernels.h: each instruction set's translation unit keeps its copy.
namespace {

// Whether Vec reduces sixteen vectors at once (kSums16, and `sums16`: each lane the sum()
// of one).
template <class Vec, class = void> struct HasSums16 : std::false_type {};
template <class Vec>
struct HasSums16<Vec, std::void_t<decltype(Vec::kSums16)>> : std::true_type {};

// R rows of x against O consecutive f32 weight rows starting at `first`, for more than 4
// rows, where the products, not the weights' bytes, bound the time: each weight vector is
// loaded once and used for all R rows, and a block of O weight rows is reused from cache for
// the next R rows (narrow weights are widened to f32 first: dotRowsTyped).
// The lines of [ahead, aheadEnd) are requested into L2 along the way, a share at each step
// (dotRowsTyped: the weight rows of a later block).
template <class Vec, int R, int O>
void dotBlock(const float *x, int64_t ldx, const LinearWeights &w, int64_t first, float *y,
              int64_t ldy, const char *ahead = nullptr, const char *aheadEnd = nullptr) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth;
  const int64_t in = w.in;
  const float *rows[O];
  for (int o = 0; o < O; ++o)
    rows[o] = static_cast<const float *>(w.data) + (first + o) * in;
  V acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o)
      acc[r][o] = Vec::zero();
  const int64_t steps = in / W;
  const int64_t linesPerStep = steps > 0 ? ((aheadEnd - ahead) / 64 + steps) / steps : 0;
  int64_t k = 0;
  for (; k + W <= in; k += W) {
    for (int64_t l = 0; l < linesPerStep && ahead < aheadEnd; ++l, ahead += 64)
      __builtin_prefetch(ahead, 0, 1);
    V xv[R];
    for (int r = 0; r < R; ++r)
      xv[r] = Vec::load(x + r * ldx + k);
    for (int o = 0; o < O; ++o) {
      V wv = Vec::load(rows[o] + k);
      for (int r = 0; r < R; ++r)
        acc[r][o] = Vec::fma(xv[r], wv, acc[r][o]);
    }
  }
  float sums[R][O];
  if constexpr (HasSums16<Vec>::value && R * O <= 16) {
    // The R x O sums reduced together, the same pairs added as by sum(): a sum() each cost
    // as much as the block's products over a 768-wide row (16 rows of f32 from cache at a
    // third of the FMA peak).
    V all[16];
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o)
        all[r * O + o] = acc[r][o];
    for (int v = R * O; v < 16; ++v)
      all[v] = Vec::zero();
    float reduced[16];
    Vec::store(reduced, Vec::sums16(all));
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o)
        sums[r][o] = reduced[r * O + o];
  } else {
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o)
        sums[r][o] = Vec::sum(acc[r][o]);
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) {
      float sum = sums[r][o];
      for (int64_t t = k; t < in; ++t)
        sum += x[r * ldx + t] * rows[o][t];
      y[r * ldy + first + o] = sum;
    }
}

// Rows of x (more than 4) against f32 weight rows [begin, end): blocks of O = 4 weight rows
// by kBlockRows rows of x.
template <class Vec>
void dotBlocks(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
               int64_t end, float *y, int64_t ldy) {
  constexpr int O = 4;
  const int64_t in = w.in;
  int64_t o = begin;
  const char *weightBytes = static_cast<const char *>(w.data);
  const char *stop = weightBytes + end * in * static_cast<int64_t>(sizeof(float));
  // A block's passes over its weight rows, one per kernel call on rows of x.
  int64_t passes = 0;
  {
    int64_t r = 0;
    if constexpr (Vec::kBlockRows == 4)
      for (; r + 4 <= rows; r += 4)
        ++passes;
    for (; r + 3 <= rows; r += 3)
      ++passes;
    passes += rows > r;
  }
  auto block = [&](auto outputs, int64_t first) {
    constexpr int B = decltype(outputs)::value;
    // The weight rows two blocks on (contiguous after this block's) requested into L2 while
    // this block's later passes compute from L1, a share in each (in the first, which waits
    // on its own rows, only where it is the only one): read only as the first pass reached
    // them, 16 rows of GPT-2's LM head (50257 x 768) ran at 19 GB/s of weights from memory,
    // against 41 for a product held in L3.
    const int64_t blockBytes = O * in * static_cast<int64_t>(sizeof(float));
    const char *ahead = weightBytes + (first + 2 * O) * in * static_cast<int64_t>(sizeof(float));
    const char *aheadEnd = std::min(stop, ahead + blockBytes);
    const int64_t sharing = passes > 1 ? passes - 1 : 1;
    const int64_t share = (blockBytes / 64 + sharing - 1) / sharing * 64;
    int64_t pass = 0;
    auto call = [&](auto rowsOfX, int64_t r) {
      constexpr int R = decltype(rowsOfX)::value;
      const char *from = nullptr, *to = nullptr;
      if (ahead < aheadEnd && (passes == 1 || pass > 0)) {
        from = std::min(aheadEnd, ahead + (passes == 1 ? 0 : pass - 1) * share);
        to = std::min(aheadEnd, from + share);
      }
      ++pass;
      dotBlock<Vec, R, B>(x + r * in, in, w, first, y + r * ldy, ldy, from, to);
    };
    int64_t r = 0;
    if constexpr (Vec::kBlockRows == 4)
      for (; r + 4 <= rows; r += 4)
        call(std::integral_constant<int, 4>{}, r);
    for (; r + 3 <= rows; r += 3)
      call(std::integral_constant<int, 3>{}, r);
    if (rows - r == 2)
      call(std::integral_constant<int, 2>{}, r);
    else if (rows - r == 1)
      call(std::integral_constant<int, 1>{}, r);
  };
  for (; o + O <= end; o += O)
    block(std::integral_constant<int, O>{}, o);
  for (; o < end; ++o)
    block(std::integral_constant<int, 1>{}, o);
}

// Rows of x up to which AVX-512 takes them as the lanes of a vector (dotRowLanes).
constexpr int64_t kRowLanes = 16;

// x's rows ([rows, in], up to 16) as the lanes of `xT` ([in, 16]), the lanes past `rows` 0.
inline void transposeRowLanes(const float *x, int64_t rows, int64_t in, float *xT) {
  for (int64_t k = 0; k < in; ++k) {
    float *lanes = xT + k * 16;
    for (int64_t r = 0; r < rows; ++r)
      lanes[r] = x[r * in + k];
    for (int64_t r = rows; r < 16; ++r)
      lanes[r] = 0.0f;
  }
}

// Up to 16 rows of x, transposed into `xT` ([in, 16], a lane per row), against a panel of
// 16 consecutive f32 weight rows, into `tile` ([16 outputs, 16 lanes]): each weight
// broadcast straight from its row into one FMA with the 16 rows' inputs, so nothing is
// reduced across lanes and each weight is read once, the panel's 16 rows side by side. The
// lines of [ahead, aheadEnd) are requested into L2 along the way, one at each input.
template <class Vec>
void rowLanesPanel(const float *xT, int64_t in, const float *weights, float *tile,
                   const char *ahead, const char *aheadEnd) {
  using V = typename Vec::V;
  V acc[16];
#pragma GCC unroll 16
  for (int o = 0; o < 16; ++o)
    acc[o] = Vec::zero();
  // The 16 rows' addresses from two pointers (rows 0 and 8) and strides of 1, 3, 5 and 7
  // rows, each row then one addressing mode: with a pointer per row, GCC kept most of them in
  // vector registers and moved one back before each FMA (in=768: 16 rows 1.2x faster).
  // Rows 8-15 run 16 inputs ahead (their sums start at input 16 and wrap around to 0-15):
  // where a row is a multiple of 4 KB (3072 or 4096 inputs), the 16 rows' lines at one input
  // fall in one L1 set, more than its 12 ways, and every weight load missed (16 rows of
  // 768 x 3072 at 146 GFLOP/s a core against 217 for 3008 inputs); staggered, 8 share a set.
  const int64_t rowBytes = in * static_cast<int64_t>(sizeof(float));
  const int64_t s1 = rowBytes, s3 = 3 * rowBytes, s5 = 5 * rowBytes, s7 = 7 * rowBytes;
  const int64_t stagger = in > 16 ? 16 : 0;
  auto at = [](const char *base, int64_t offset) {
    return *reinterpret_cast<const float *>(base + offset);
  };
  auto run = [&](int64_t kLow, int64_t kHigh, int64_t count) {
    const char *low = reinterpret_cast<const char *>(weights + kLow);
    const char *high = reinterpret_cast<const char *>(weights + 8 * in + kHigh);
    const float *xLow = xT + kLow * 16, *xHigh = xT + kHigh * 16;
    for (int64_t i = 0; i < count; ++i, low += sizeof(float), high += sizeof(float),
                 xLow += 16, xHigh += 16) {
      if (ahead < aheadEnd) {
        __builtin_prefetch(ahead, 0, 1);
        ahead += 64;
      }
      __builtin_prefetch(xLow + 256, 0, 3);
      const V inputsLow = Vec::load(xLow), inputsHigh = Vec::load(xHigh);
      const float w[16] = {at(low, 0),       at(low, s1),  at(low, 2 * s1),  at(low, s3),
                           at(low, 4 * s1),  at(low, s5),  at(low, 2 * s3),  at(low, s7),
                           at(high, 0),      at(high, s1), at(high, 2 * s1), at(high, s3),
                           at(high, 4 * s1), at(high, s5), at(high, 2 * s3), at(high, s7)};
#pragma GCC unroll 8
      for (int o = 0; o < 8; ++o)
        acc[o] = Vec::fma(Vec::broadcast(w[o]), inputsLow, acc[o]);
#pragma GCC unroll 8
      for (int o = 8; o < 16; ++o)
        acc[o] = Vec::fma(Vec::broadcast(w[o]), inputsHigh, acc[o]);
    }
  };
  run(0, stagger, in - stagger);
  run(in - stagger, 0, stagger);
#pragma GCC unroll 16
  for (int o = 0; o < 16; ++o)
    Vec::store(tile + o * 16, acc[o]);
}

// Up to 16 rows of x (AVX-512) against f32 weight rows [begin, end), the rows as lanes
// (rowLanesPanel), panel after panel, each requesting the next into L2; the last outputs
// (fewer than 16) by dotBlocks. Where the weights stream from memory, as in the serving
// engine's decode steps, dotBlocks' first pass over each block of 4 weight rows waited on
// memory while its other passes computed from L1: 16 rows of GPT-2's LM head (50257 x 768)
// took 6.2 ms on 2 Zen 5 cores against 4.0 here.
// Each (row, output) is one chain of FMAs over the inputs in an order fixed by the output's
// place in its panel (rowLanesPanel), whatever the rows beside it. `xT` is x transposed by
// transposeRowLanes, once per product for every thread's range (linear() does it).
template <class Vec>
void dotRowLanesTransposed(const float *xT, const float *x, int64_t rows, const LinearWeights &w,
                           int64_t begin, int64_t end, float *y, int64_t ldy) {
  const int64_t in = w.in;
  thread_local std::vector<float> tile;
  tile.resize(256);
  const float *weights = static_cast<const float *>(w.data);
  const char *stop = reinterpret_cast<const char *>(weights + end * in);
  int64_t o = begin;
  for (; o + 16 <= end; o += 16) {
    const char *ahead = reinterpret_cast<const char *>(weights + (o + 16) * in);
    rowLanesPanel<Vec>(xT, in, weights + o * in, tile.data(), ahead,
                       std::min(stop, ahead + 16 * in * static_cast<int64_t>(sizeof(float))));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < 16; ++j)
        y[r * ldy + o + j] = tile[static_cast<size_t>(j * 16 + r)];
  }
  if (o < end)
    dotBlocks<Vec>(x, rows, w, o, end, y, ldy);
}

template <class Vec>
void dotRowLanes(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                 int64_t end, float *y, int64_t ldy) {
  thread_local std::vector<float> xT;
  xT.resize(static_cast<size_t>(w.in * 16));
  transposeRowLanes(x, rows, w.in, xT.data());
  dotRowLanesTransposed<Vec>(xT.data(), x, rows, w, begin, end, y, ldy);
}

// R rows of x against O float weight rows from `first`, each (row, output) summed exactly as
// dotStream<Vec, D, 1> sums that row alone, for the engine's exact steps: a row's output is
// then the same bits at any row count, as the integer kernels' are. That sum keeps U partial
// vectors, partial u taking the inputs' vectors u, u + U, u + 2U, ... (and partial 0 the
// vectors past the last whole U after them), added in order, reduced by Vec::sum, then the
// scalar rest (streamPartialBy). Here each partial is one pass over the inputs with an R x O
// block of accumulators, so that each weight vector serves R rows and each x vector O
// outputs (as many FMAs as loads with all U partials in registers at once: 2.5x slower than
// sgemm at 16 rows and more, measured).
// This call takes the whole vectors of inputs [kBegin, kEnd) (multiples of U vectors, below
// the last whole U): the partials start from `saved` unless kBegin is 0, and are saved there
// again unless `last`, where the vectors past the whole U's follow and the passes' results
// are added as that sum adds its partials. So a caller may split the inputs into blocks (in
// order: each partial's FMAs stay one chain over its vectors) and keep a block of weight
// rows in L1 for several blocks of rows.
template <class Vec, DType D, int R, int O>
void dotPairsAsAloneOver(const float *x, int64_t ldx, const LinearWeights &w, int64_t first,
                         int64_t kBegin, int64_t kEnd, bool last, float *saved, float *y,
                         int64_t ldy, const char *ahead = nullptr,
                         const char *aheadEnd = nullptr) {
  using Elem = Stored<D>;
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth, U = kStreamPartials;
  const int64_t in = w.in, whole = in / (U * W) * (U * W);
  const typename Elem::T *rows[O];
  for (int o = 0; o < O; ++o)
    rows[o] = Elem::rowOf(w.data, first + o, in);
  auto slot = [&](int u, int r, int o) { return saved + ((u * R + r) * O + o) * W; };
  // The lines of [ahead, aheadEnd) requested a share at each vector step, over all passes.
  const int64_t steps = (kEnd - kBegin) / W + (last ? (in - whole) / W : 0);
  const int64_t linesPerStep =
      ahead && steps > 0 ? ((aheadEnd - ahead) / 64 + steps) / steps : 0;
  V partial[U][R][O];
  for (int u = 0; u < U; ++u) {
    V acc[R][O];
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o)
        acc[r][o] = kBegin == 0 ? Vec::zero() : Vec::load(slot(u, r, o));
    auto multiplyAt = [&](int64_t k) {
      for (int64_t l = 0; l < linesPerStep && ahead < aheadEnd; ++l, ahead += 64)
        requestLine(ahead);
      V wv[O];
      for (int o = 0; o < O; ++o)
        wv[o] = Elem::template loadAt<Vec>(rows[o], k);
      for (int r = 0; r < R; ++r) {
        const V xv = Vec::load(x + r * ldx + k);
        for (int o = 0; o < O; ++o)
          acc[r][o] = Vec::fma(xv, wv[o], acc[r][o]);
      }
    };
    for (int64_t k = kBegin + u * W; k < kEnd; k += U * W)
      multiplyAt(k);
    if (last && u == 0)
      for (int64_t k = whole; k + W <= in; k += W)
        multiplyAt(k);
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o) {
        if (last)
          partial[u][r][o] = acc[r][o];
        else
          Vec::store(slot(u, r, o), acc[r][o]);
      }
  }
  if (!last)
    return;
  const int64_t tail = whole + (in - whole) / W * W;
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) {
      V part = partial[0][r][o];
      for (int u = 1; u < U; ++u)
        part = Vec::add(part, partial[u][r][o]);
      float sum = Vec::sum(part);
      for (int64_t t = tail; t < in; ++t)
        sum += x[r * ldx + t] * Elem::oneAt(rows[o], t);
      y[r * ldy + first + o] = sum;
    }
}

template <class Vec, DType D, int R, int O>
void dotPairsAsAlone(const float *x, int64_t ldx, const LinearWeights &w, int64_t first,
                     float *y, int64_t ldy, const char *ahead = nullptr,
                     const char *aheadEnd = nullptr) {
  constexpr int64_t kChunk = kStreamPartials * Vec::kWidth;
  dotPairsAsAloneOver<Vec, D, R, O>(x, ldx, w, first, 0, w.in / kChunk * kChunk, true, nullptr,
                                    y, ldy, ahead, aheadEnd);
}

// Every row of x against float weight rows [begin, end), each row's outputs the bits
// dotStream<Vec, D, 1> gives it alone (dotPairsAsAlone): blocks of R rows by O outputs (4 x 4
// accumulators on AVX-512, 4 x 2 on AVX2's 16 registers). The outputs outside, then blocks
// of inputs, then the rows: a block of weight rows' inputs stays in L1 while every block of
// rows passes it, each block of rows' partials saved between input blocks. Unblocked, 3072
// inputs (48 KB of weight rows) came from L2 for each 4 rows: 2x the time of 768 inputs per
// product.
// Calls f(std::integral_constant<int, n>) for n = count (1 to 4): a block of rows' size as a
// template argument.
template <class F> void withRowCount(int64_t count, F &&f) {
  switch (count) {
  case 4: return f(std::integral_constant<int, 4>{});
  case 3: return f(std::integral_constant<int, 3>{});
  case 2: return f(std::integral_constant<int, 2>{});
  default: return f(std::integral_constant<int, 1>{});
  }
}

template <class Vec, DType D>
void dotRowsAsAloneTyped(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                         int64_t end, float *y, int64_t ldy) {
  constexpr int R = 4, O = Vec::kWidth == 16 ? 4 : 2, U = kStreamPartials, W = Vec::kWidth;
  constexpr int64_t kL1WeightBytes = 16 * 1024;
  const int64_t in = w.in, whole = in / (U * W) * (U * W);
  // Blocks of R rows, the last one the rest (1 to R - 1 rows): each weight vector serves all
  // of a block's rows. The rest one row at a time had read the weights once per row: 2 rows
  // took 1.6x the time of 4.
  const int64_t rowBlocks = (rows + R - 1) / R;
  // Equal blocks of whole U-vector runs, as few as keep a block of weight rows (as f32) in
  // 16 KB: none for 768 inputs, 3 for 3072 (saving and reloading the partials between blocks
  // cost more than L2 did at 768).
  const int64_t blocks = std::max<int64_t>(1, (O * whole * 4 + kL1WeightBytes - 1) / kL1WeightBytes);
  const int64_t runs = whole / (U * W);
  const int64_t kAsAloneInputs = std::max<int64_t>(1, (runs + blocks - 1) / blocks) * (U * W);
  thread_local std::vector<float> saved;
  saved.resize(static_cast<size_t>(std::max<int64_t>(1, rowBlocks) * U * R * O * W));
  // The weight rows kAheadBlocks blocks on are requested while this block is multiplied (by
  // its first block of rows): the passes read a block's rows side by side, U times, which
  // the hardware prefetchers do not follow from memory. With the weights in memory (more of
  // them than the last-level cache, as a model's: dsrt-linear-bench --copies 16) that took
  // 768 x 3072 at 2-8 rows from 0.52-0.62 to 0.40-0.51 ms on the Zen 4; 1 block or 4 ahead
  // measured the same as 2.
  const char *base = static_cast<const char *>(w.data);
  const int64_t rowBytes = Stored<D>::rowBytes(in);
  const char *stop = base + end * rowBytes;
  constexpr int64_t kAheadBlocks = 2;
  int64_t o = begin;
  for (; o + O <= end; o += O) {
    const char *ahead = std::min(stop, base + (o + kAheadBlocks * O) * rowBytes);
    const char *aheadEnd = std::min(stop, ahead + O * rowBytes);
    if (blocks == 1) {  // no partials to save: the kernel's constant case, 3-8% faster
      for (int64_t r = 0; r < rows; r += R)
        withRowCount(std::min<int64_t>(R, rows - r), [&](auto count) {
          dotPairsAsAlone<Vec, D, decltype(count)::value, O>(
              x + r * in, in, w, o, y + r * ldy, ldy, r == 0 ? ahead : nullptr, aheadEnd);
        });
      continue;
    }
    const int64_t blockLines = (aheadEnd - ahead + 63) / 64;
    int64_t kBegin = 0;
    do {
      const int64_t kEnd = std::min(whole, kBegin + kAsAloneInputs);
      const bool last = kEnd >= whole;
      // This input block's share of the next weight block's lines.
      const char *from = ahead + (kBegin * blockLines / whole) * 64;
      const char *to = std::min(aheadEnd, ahead + (kEnd * blockLines / whole) * 64);
      for (int64_t b = 0; b < rowBlocks; ++b)
        withRowCount(std::min<int64_t>(R, rows - b * R), [&](auto count) {
          dotPairsAsAloneOver<Vec, D, decltype(count)::value, O>(
              x + b * R * in, in, w, o, kBegin, kEnd, last, saved.data() + b * U * R * O * W,
              y + b * R * ldy, ldy, b == 0 ? from : nullptr, to);
        });
      kBegin = kEnd;
    } while (kBegin < whole);
  }
  for (; o < end; ++o)
    for (int64_t r = 0; r < rows; r += R)
      withRowCount(std::min<int64_t>(R, rows - r), [&](auto count) {
        dotPairsAsAlone<Vec, D, decltype(count)::value, 1>(x + r * in, in, w, o, y + r * ldy,
                                                           ldy);
      });
}

} // namespace
} // namespace dsrt::ops::fast::detail

#endif
