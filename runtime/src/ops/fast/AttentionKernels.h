// Internal to the fast kernels: the attention's kernels (DotKernels.h's IsaKernels:
// weightedSum, keyScores, scoreTile, multiplyTile and their int8 KV cache forms), written
// once over DotKernels.h's `Vec` operations and its row readers (StoredRows, ScaledInt8Rows,
// fmaLike), and compiled once per instruction set with them. DotKernels.h includes it after
// those; include it only through DotKernels.h.
//
// A position's attention must be the same bits whether a prompt tile or a decode row
// computed it (TransformerTiledAttention.cpp says why): keyScoresBy and scoreTileWith are one
// score arithmetic, and weightedSumBy and multiplyTileWith one value chain.
#ifndef DSRT_OPS_FAST_ATTENTIONKERNELS_H
#define DSRT_OPS_FAST_ATTENTIONKERNELS_H

#include "ops/fast/FastKernels.h"

#include <cstdint>
#include <type_traits>

namespace dsrt::ops::fast::detail {
// Internal linkage, as DotKernels.h: each instruction set's translation unit keeps its copy.
namespace {

// Columns in blocks of U vectors, each block's sums kept in registers over every row (a
// read-modify-write of `out` per row would chain each row's adds through memory).
// With `accumulate`, each sum continues from out's value: a decode row's values over the
// blocks of a paged cache are one chain, as over a contiguous one (and as the prompt tiles'
// multiplyTile chains them), whatever the block size.
template <class Vec, class Rows>
void weightedSumBy(const float *weights, const Rows &rows, int64_t count, int64_t width,
                   float *out, bool accumulate) {
  constexpr int W = Vec::kWidth, U = 4;
  int64_t d = 0;
  for (; d + U * W <= width; d += U * W) {
    typename Vec::V acc[U];
    for (int u = 0; u < U; ++u)
      acc[u] = accumulate ? Vec::load(out + d + u * W) : Vec::zero();
    for (int64_t t = 0; t < count; ++t) {
      typename Vec::V weight = Vec::broadcast(weights[t]);
      for (int u = 0; u < U; ++u)
        acc[u] = Vec::fma(weight, rows.template load<Vec>(t, d + u * W), acc[u]);
    }
    for (int u = 0; u < U; ++u)
      Vec::store(out + d + u * W, acc[u]);
  }
  for (; d + W <= width; d += W) {
    typename Vec::V acc = accumulate ? Vec::load(out + d) : Vec::zero();
    for (int64_t t = 0; t < count; ++t)
      acc = Vec::fma(Vec::broadcast(weights[t]), rows.template load<Vec>(t, d), acc);
    Vec::store(out + d, acc);
  }
  for (; d < width; ++d) {
    float sum = accumulate ? out[d] : 0.0f;
    for (int64_t t = 0; t < count; ++t)
      sum = fmaLike<Vec>(weights[t], rows.one(t, d), sum);
    out[d] = sum;
  }
}

// Calls f with std::integral_constant<DType, D> for rows stored as `type` (f16, bf16, else
// f32): the one switch of every kernel over stored rows (StoredRows).
template <class F> void withStoredType(DType type, F &&f) {
  switch (type) {
  case DType::F16: return f(std::integral_constant<DType, DType::F16>{});
  case DType::BF16: return f(std::integral_constant<DType, DType::BF16>{});
  default: return f(std::integral_constant<DType, DType::F32>{});
  }
}

template <DType D> StoredRows<D> storedRows(const void *rows, int64_t width) {
  return {static_cast<const typename Stored<D>::T *>(rows), width};
}

template <class Vec>
void weightedSumWith(const float *weights, const void *rows, DType rowType, int64_t count,
                     int64_t width, float *out, bool accumulate) {
  withStoredType(rowType, [&](auto type) {
    weightedSumBy<Vec>(weights, storedRows<type()>(rows, width), count, width, out, accumulate);
  });
}

// weightedSumBy (accumulating) of two heads at once, their chains interleaved: one head's
// U chains wait on the FMA's latency at every row (four of 64 values, one FMA a cycle where
// two can issue); two heads' eight fill the pipes. Each element's chain is weightedSumBy's,
// in the same order, so the sums are its bits. `width` a multiple of U vectors.
template <class Vec, int U, class Rows>
void weightedSumPairBy(const float *const weights[2], const Rows rows[2], int64_t count,
                       int64_t width, float *const out[2]) {
  constexpr int W = Vec::kWidth;
  for (int64_t d = 0; d < width; d += U * W) {
    typename Vec::V acc[2][U];
    for (int h = 0; h < 2; ++h)
      for (int u = 0; u < U; ++u)
        acc[h][u] = Vec::load(out[h] + d + u * W);
    for (int64_t t = 0; t < count; ++t)
      for (int h = 0; h < 2; ++h) {
        typename Vec::V weight = Vec::broadcast(weights[h][t]);
        for (int u = 0; u < U; ++u)
          acc[h][u] = Vec::fma(weight, rows[h].template load<Vec>(t, d + u * W), acc[h][u]);
      }
    for (int h = 0; h < 2; ++h)
      for (int u = 0; u < U; ++u)
        Vec::store(out[h] + d + u * W, acc[h][u]);
  }
}

// weightedSum (accumulating) of `heads` heads over one run of positions each: a paged
// block's value slices, two heads' chains at a time where the width is whole blocks of 4
// vectors (64 floats on AVX-512: every head of 64 or 128), else head by head.
template <class Vec>
void weightedSumHeadsWith(const float *const *weights, const void *const *rows, DType rowType,
                          int64_t heads, int64_t count, int64_t width, float *const *out) {
  constexpr int U = 4;
  const int64_t paired = width % (U * Vec::kWidth) == 0 ? heads / 2 * 2 : 0;
  withStoredType(rowType, [&](auto type) {
    for (int64_t h = 0; h < paired; h += 2) {
      const StoredRows<type()> pair[2] = {storedRows<type()>(rows[h], width),
                                          storedRows<type()>(rows[h + 1], width)};
      weightedSumPairBy<Vec, U>(weights + h, pair, count, width, out + h);
    }
    for (int64_t h = paired; h < heads; ++h)
      weightedSumBy<Vec>(weights[h], storedRows<type()>(rows[h], width), count, width, out[h],
                         true);
  });
}

// A query against a key row, the one arithmetic of the attention's scores on the fast kernels
// (keyScores for decode rows, scoreTile for prompt tiles, which must agree bit for bit: a
// token's attention must not depend on whether it was computed in a prompt chunk, as a
// decode row, or after a prefix hit): one chain of FMAs per lane over the row's whole
// vectors, the lanes added by Vec::sum's halving tree, the scalar tail chained on (fmaLike),
// then 0 + the sum (a -0 sum becomes +0).
template <class Vec, class Load>
typename Vec::V keyChainBy(const float *query, const Load &load, int64_t whole) {
  typename Vec::V acc = Vec::zero();
  for (int64_t d = 0; d < whole; d += Vec::kWidth)
    acc = Vec::fma(Vec::load(query + d), load(d), acc);
  return acc;
}

template <class Vec, class Rows>
void keyScoresBy(const float *query, const Rows &keys, int64_t count, int64_t width,
                 float *scores) {
  const int64_t whole = width / Vec::kWidth * Vec::kWidth;
  auto finish = [&](int64_t t, float sum) {
    for (int64_t d = whole; d < width; ++d)
      sum = fmaLike<Vec>(query[d], keys.one(t, d), sum);
    float total = 0;
    total += sum;
    scores[t] = total;
  };
  int64_t t = 0;
  if constexpr (HasSums16<Vec>::value) {
    for (; t + 16 <= count; t += 16) {
      typename Vec::V partial[16];
      for (int j = 0; j < 16; ++j)
        partial[j] = keyChainBy<Vec>(
            query, [&keys, key = t + j](int64_t d) { return keys.template load<Vec>(key, d); },
            whole);
      Vec::store(scores + t, Vec::sums16(partial));
      for (int j = 0; j < 16; ++j)
        finish(t + j, scores[t + j]);
    }
  }
  for (; t < count; ++t)
    finish(t, Vec::sum(keyChainBy<Vec>(
                  query, [&keys, t](int64_t d) { return keys.template load<Vec>(t, d); },
                  whole)));
}

// scores[j * ld + r] for keys j < count (f32 rows of `width`) and the ld (a multiple of
// Vec's width) queries of queriesT [width, ld]: keyScoresBy's arithmetic with the queries in
// the lanes, so that its tree across lanes becomes vertical adds. Lane class m's chain (the
// elements m, m + W, ...) is one vector of rows per key; Vec::sum's halving tree adds class
// m + W/2 onto class m first, so classes m and m + W/2 are chained together and added at
// once, then the halves left are added as the tree's later levels add them. K keys by R
// vectors of rows share each load: 2 K R sums in registers, 2 (K + R) loads for 2 K R FMAs
// (a key's element is broadcast once for R vectors of rows, a vector of queries loaded once
// for K keys).
template <class Vec, int K, int R>
void scoreBlock(const float *keys, int64_t width, int64_t whole, const float *queriesT,
                int64_t ld, float *scores) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth, Half = W / 2;
  V half[Half][K][R];  // the tree's first level: classes m and m + W/2 added
  for (int m = 0; m < Half; ++m) {
    V acc[2][K][R];
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < K; ++k)
        for (int r = 0; r < R; ++r)
          acc[i][k][r] = Vec::zero();
    for (int64_t c = 0; c < whole; c += W)
      for (int i = 0; i < 2; ++i) {
        const int64_t d = c + m + i * Half;
        V query[R];
        for (int r = 0; r < R; ++r)
          query[r] = Vec::load(queriesT + d * ld + r * W);
        for (int k = 0; k < K; ++k) {
          const V key = Vec::broadcast(keys[k * width + d]);
          for (int r = 0; r < R; ++r)
            acc[i][k][r] = Vec::fma(query[r], key, acc[i][k][r]);
        }
      }
    for (int k = 0; k < K; ++k)
      for (int r = 0; r < R; ++r)
        half[m][k][r] = Vec::add(acc[0][k][r], acc[1][k][r]);
  }
  for (int k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r) {
      V level[Half];
      for (int m = 0; m < Half; ++m)
        level[m] = half[m][k][r];
      for (int h = Half / 2; h >= 1; h /= 2)
        for (int m = 0; m < h; ++m)
          level[m] = Vec::add(level[m], level[m + h]);
      V sum = level[0];
      for (int64_t d = whole; d < width; ++d)
        sum = Vec::fma(Vec::load(queriesT + d * ld + r * W), Vec::broadcast(keys[k * width + d]),
                       sum);
      Vec::store(scores + k * ld + r * W, Vec::add(Vec::zero(), sum));
    }
}

// Keys in blocks of 4 (then 1) for one strip of R vectors of rows.
template <class Vec, int R>
void scoreStrip(const float *keys, int64_t count, int64_t width, const float *queriesT,
                int64_t ld, float *scores) {
  const int64_t whole = width / Vec::kWidth * Vec::kWidth;
  int64_t j = 0;
  for (; j + 4 <= count; j += 4)
    scoreBlock<Vec, 4, R>(keys + j * width, width, whole, queriesT, ld, scores + j * ld);
  for (; j < count; ++j)
    scoreBlock<Vec, 1, R>(keys + j * width, width, whole, queriesT, ld, scores + j * ld);
}

template <class Vec>
void scoreTileWith(const float *keys, int64_t count, int64_t width, const float *queriesT,
                   int64_t ld, float *scores) {
  constexpr int W = Vec::kWidth;
  int64_t r = 0;
  for (; r + 2 * W <= ld; r += 2 * W)
    scoreStrip<Vec, 2>(keys, count, width, queriesT + r, ld, scores + r);
  for (; r < ld; r += W)
    scoreStrip<Vec, 1>(keys, count, width, queriesT + r, ld, scores + r);
}

template <class Vec>
void keyScoresInt8With(const float *query, const int8_t *codes, const float *scales,
                       int64_t groups, int64_t count, int64_t width, float *scores) {
  keyScoresBy<Vec>(query, ScaledInt8Rows{codes, scales, width, groups}, count, width, scores);
}

template <class Vec>
void weightedSumInt8With(const float *weights, const int8_t *codes, const float *scales,
                         int64_t groups, int64_t count, int64_t width, float *out,
                         bool accumulate) {
  weightedSumBy<Vec>(weights, ScaledInt8Rows{codes, scales, width, groups}, count, width, out,
                     accumulate);
}

template <class Vec>
void keyScoresWith(const float *query, const void *keys, DType keyType, int64_t count,
                   int64_t width, float *scores) {
  withStoredType(keyType, [&](auto type) {
    keyScoresBy<Vec>(query, storedRows<type()>(keys, width), count, width, scores);
  });
}

// One block of multiplyTile: R rows of c by U vectors of columns, the sums in registers over
// the whole depth; each vector of b is loaded once for the R rows, each element of a is
// broadcast once for the U vectors (no horizontal sums, unlike dotRows). Element (r, k) of a
// is a[r * aRow + k * aDepth]: a row-major or a transposed tile.
template <class Vec, int R, int U>
void multiplyBlock(const float *a, int64_t aRow, int64_t aDepth, const float *b, int64_t ldb,
                   int64_t depth, float *c, int64_t ldc, bool accumulate) {
  constexpr int W = Vec::kWidth;
  typename Vec::V acc[R][U];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u)
      acc[r][u] = accumulate ? Vec::load(c + r * ldc + u * W) : Vec::zero();
  for (int64_t k = 0; k < depth; ++k) {
    typename Vec::V column[U];
    for (int u = 0; u < U; ++u)
      column[u] = Vec::load(b + k * ldb + u * W);
    for (int r = 0; r < R; ++r) {
      const typename Vec::V element = Vec::broadcast(a[r * aRow + k * aDepth]);
      for (int u = 0; u < U; ++u)
        acc[r][u] = Vec::fma(element, column[u], acc[r][u]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u)
      Vec::store(c + r * ldc + u * W, acc[r][u]);
}

// Rows in blocks of 4 (then 3, 2, 1) for one strip of U vectors of columns.
template <class Vec, int U>
void multiplyStrip(const float *a, int64_t aRow, int64_t aDepth, const float *b, int64_t ldb,
                   int64_t rows, int64_t depth, float *c, int64_t ldc, bool accumulate) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    multiplyBlock<Vec, 4, U>(a + r * aRow, aRow, aDepth, b, ldb, depth, c + r * ldc, ldc,
                             accumulate);
  const float *ar = a + r * aRow;
  float *cr = c + r * ldc;
  switch (rows - r) {
  case 3: return multiplyBlock<Vec, 3, U>(ar, aRow, aDepth, b, ldb, depth, cr, ldc, accumulate);
  case 2: return multiplyBlock<Vec, 2, U>(ar, aRow, aDepth, b, ldb, depth, cr, ldc, accumulate);
  case 1: return multiplyBlock<Vec, 1, U>(ar, aRow, aDepth, b, ldb, depth, cr, ldc, accumulate);
  default: return;
  }
}

// c = a . b (or c += a . b) for f32 a [rows, depth] (strided), row-major b [depth, cols] and
// c [rows, cols]: attention's tiles (keys by queries, then probabilities by values). Columns
// in strips of 4 vectors where the ISA has 32 registers (4 x 4 sums), 2 where it has 16,
// then single vectors, then the scalar tail.
template <class Vec>
void multiplyTileWith(const float *a, int64_t aRow, int64_t aDepth, const float *b,
                      int64_t ldb, int64_t rows, int64_t depth, int64_t cols, float *c,
                      int64_t ldc, bool accumulate) {
  constexpr int W = Vec::kWidth, U = W >= 16 ? 4 : 2;
  int64_t n = 0;
  for (; n + U * W <= cols; n += U * W)
    multiplyStrip<Vec, U>(a, aRow, aDepth, b + n, ldb, rows, depth, c + n, ldc, accumulate);
  for (; n + W <= cols; n += W)
    multiplyStrip<Vec, 1>(a, aRow, aDepth, b + n, ldb, rows, depth, c + n, ldc, accumulate);
  for (; n < cols; ++n)
    for (int64_t r = 0; r < rows; ++r) {
      float sum = accumulate ? c[r * ldc + n] : 0.0f;
      for (int64_t k = 0; k < depth; ++k)
        sum = fmaLike<Vec>(a[r * aRow + k * aDepth], b[k * ldb + n], sum);
      c[r * ldc + n] = sum;
    }
}

} // namespace
} // namespace dsrt::ops::fast::detail

#endif
