// Internal to the fast linear kernels: one body for the scalar and the AVX2 builds of the
// dot-product kernel (DotScalar.cpp, DotAvx2.cpp). A translation unit includes it after
// defining the vector type's operations in a `Vec` struct:
//   static constexpr int kWidth;            lanes
//   static constexpr int kBlockRows;        rows of x per block of 4 weight rows (registers)
//   using V;                                the register type
//   static V zero(); static V broadcast(float);
//   static V load(const float *); static V load(const uint16_t *f16 or bf16, Tag);
//   static V load(const int8_t *);
//   static V loadInt4(const uint8_t *);      kWidth 4-bit codes from kWidth / 2 bytes, low
//                                            nibble first, each minus 8 (docs/int4.md)
//   static V lowNibbles(const uint8_t *);    the low and the high nibbles of kWidth bytes,
//   static V highNibbles(const uint8_t *);   as floats 0..15
//   static V fma(V a, V b, V acc); static V mul(V, V); static V add(V, V); static float sum(V);
//   static V div(V, V);
//   static void store(float *, V);
//   static V min(V a, V b); static V max(V a, V b);  b where a is NaN
//   static V floor(V); static V powerOfTwo(V n);     2^n for whole n in [-127, 128]
#ifndef DSRT_OPS_FAST_DOTKERNELS_H
#define DSRT_OPS_FAST_DOTKERNELS_H

#include "ops/fast/FastKernels.h"
#include "ops/fast/VecMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace dsrt::ops::fast::detail {

// One instruction set's kernels (Scalar in IsaKernels.cpp, DotAvx2.cpp, DotAvx512.cpp).
struct IsaKernels {
  const char *name;
  void (*dotRows)(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                  int64_t end, float *y, int64_t ldy);
  // dotRows for f32, f16 and bf16 weights, each row's outputs the bits it gets alone (one
  // row: dotRows' own) at any row count: the engine's exact steps (batch_invariant 2).
  void (*dotRowsAsAlone)(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                         int64_t end, float *y, int64_t ldy);
  void (*widenRows)(const LinearWeights &w, int64_t first, int64_t count, float *out);
  // y[i] = act(y[i]) for i < n (act: Activation, FastKernels.h).
  void (*activate)(Activation kind, float *y, int64_t n);
  // y[i] = e^y[i] for i < n.
  void (*exponentiate)(float *y, int64_t n);
  // y[i] = (y[i] + x[i]) + z[i] for i < n, z optional (FastKernels.h's addTo).
  void (*addTo)(float *y, const float *x, const float *z, int64_t n);
  // out[d] = Σ_t weights[t] rows[t * width + d] for d < width, t < count; rows of f32,
  // f16 or bf16; with `accumulate`, the sums continue from out's values.
  void (*weightedSum)(const float *weights, const void *rows, DType rowType, int64_t count,
                      int64_t width, float *out, bool accumulate);
  // FastKernels.h's keyScores.
  void (*keyScores)(const float *query, const void *keys, DType keyType, int64_t count,
                    int64_t width, float *scores);
  // FastKernels.h's weightedSumHeads.
  void (*weightedSumHeads)(const float *const *weights, const void *const *rows, DType rowType,
                           int64_t heads, int64_t count, int64_t width, float *const *out);
  // FastKernels.h's keyScoresInt8 and weightedSumInt8.
  void (*keyScoresInt8)(const float *query, const int8_t *codes, const float *scales,
                        int64_t groups, int64_t count, int64_t width, float *scores);
  void (*weightedSumInt8)(const float *weights, const int8_t *codes, const float *scales,
                          int64_t groups, int64_t count, int64_t width, float *out,
                          bool accumulate);
  // One row of a layer norm (or RMS norm: no mean, no bias), FastKernels.h's normalizeRow.
  void (*normalizeRow)(const float *x, int64_t n, const float *scale, const float *bias,
                       bool rms, float epsilon, float *y);
  // The attention's scores and softmax over a tile of rows (FastKernels.h's scoreTile,
  // columnMaxima, softmaxColumns).
  void (*scoreTile)(const float *keys, int64_t count, int64_t width, const float *queriesT,
                    int64_t ld, float *scores);
  void (*columnMaxima)(const float *scores, int64_t keys, int64_t ld, float *maximum);
  void (*softmaxColumns)(float *scores, int64_t keys, int64_t ld, const float *maximum,
                         float *sum);
  // c[r, n] (+)= Σ_k a[r, k] b[k, n] over f32 tiles (FastKernels.h's multiplyTile).
  void (*multiplyTile)(const float *a, int64_t aRow, int64_t aDepth, const float *b, int64_t ldb,
                       int64_t rows, int64_t depth, int64_t cols, float *c, int64_t ldc,
                       bool accumulate);
  // Rows of x (from 5) up to which dotRows takes f32 weights' rows of x as the lanes of a
  // vector, 16 weight rows at a time (dotRowLanes); 0 where it does not. dotRowLanes is
  // that kernel on x already transposed (transposeRowLanes), for a caller that splits the
  // outputs between threads; null where rowLanes is 0.
  int64_t rowLanes;
  void (*dotRowLanes)(const float *xT, const float *x, int64_t rows, const LinearWeights &w,
                      int64_t begin, int64_t end, float *y, int64_t ldy);
};

// Everything below is compiled once per instruction set, inside each translation unit's
// target region (TargetRegion.h): internal linkage keeps the linker from picking one TU's
// (say, AVX-512) copy of an inline function for another TU.
namespace {

struct F16Tag {};
struct BF16Tag {};

inline float scalarLoad(const float *p) { return *p; }
inline float scalarLoad(const uint16_t *p, F16Tag) { return halfToFloat(*p); }
inline float scalarLoad(const uint16_t *p, BF16Tag) {
  uint32_t bits = static_cast<uint32_t>(*p) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
inline float scalarLoad(const int8_t *p) { return static_cast<float>(*p); }
// Element k of packed 4-bit codes (two to a byte, the even element low), as code - 8.
inline float scalarLoadInt4(const uint8_t *row, int64_t k) {
  return static_cast<float>(((row[k / 2] >> (4 * (k & 1))) & 0xF) - 8);
}

// The element type as stored, and how Vec and scalarLoad read it: `load` and `one` at an
// element pointer (weightedSum's rows), `rowOf`, `loadAt` and `oneAt` by row and element
// index (the weight matrices, which int4 packs two to a byte). `kGrouped`: the values are
// integer codes whose group's sum is multiplied by its scale.
template <DType D> struct Stored;
template <class Derived, class Element> struct ElementStore {
  using T = Element;
  static constexpr bool kGrouped = false;
  static const T *rowOf(const void *data, int64_t row, int64_t in) {
    return static_cast<const T *>(data) + row * in;
  }
  static int64_t rowBytes(int64_t in) { return in * static_cast<int64_t>(sizeof(T)); }
  template <class Vec> static typename Vec::V loadAt(const T *row, int64_t k) {
    return Derived::template load<Vec>(row + k);
  }
  static float oneAt(const T *row, int64_t k) { return Derived::one(row + k); }
};
template <> struct Stored<DType::F32> : ElementStore<Stored<DType::F32>, float> {
  template <class Vec> static typename Vec::V load(const T *p) { return Vec::load(p); }
  static float one(const T *p) { return scalarLoad(p); }
};
template <> struct Stored<DType::F16> : ElementStore<Stored<DType::F16>, uint16_t> {
  template <class Vec> static typename Vec::V load(const T *p) { return Vec::load(p, F16Tag{}); }
  static float one(const T *p) { return scalarLoad(p, F16Tag{}); }
};
template <> struct Stored<DType::BF16> : ElementStore<Stored<DType::BF16>, uint16_t> {
  template <class Vec> static typename Vec::V load(const T *p) { return Vec::load(p, BF16Tag{}); }
  static float one(const T *p) { return scalarLoad(p, BF16Tag{}); }
};
template <> struct Stored<DType::I8> : ElementStore<Stored<DType::I8>, int8_t> {
  static constexpr bool kGrouped = true;
  template <class Vec> static typename Vec::V load(const T *p) { return Vec::load(p); }
  static float one(const T *p) { return scalarLoad(p); }
};
// int4 weights (LinearWeights::dtype U8): codes packed two to a byte. A vector load starts
// at an even element: groups and vectors have even sizes.
template <> struct Stored<DType::U8> {
  using T = uint8_t;
  static constexpr bool kGrouped = true;
  static const T *rowOf(const void *data, int64_t row, int64_t in) {
    return static_cast<const T *>(data) + row * (in / 2);
  }
  static int64_t rowBytes(int64_t in) { return in / 2; }
  template <class Vec> static typename Vec::V loadAt(const T *row, int64_t k) {
    return Vec::loadInt4(row + k / 2);
  }
  static float oneAt(const T *row, int64_t k) { return scalarLoadInt4(row, k); }
};

// a * b + c for one float through Vec's fma: fused where the ISA's is, the portable kernel's
// multiply and add where it is not, so that a scalar tail rounds as the vector lanes do
// (the compiler's own contraction of a scalar a * b + c differed between two kernels).
template <class Vec> float fmaLike(float a, float b, float c) {
  float lanes[Vec::kWidth];
  Vec::store(lanes, Vec::fma(Vec::broadcast(a), Vec::broadcast(b), Vec::broadcast(c)));
  return lanes[0];
}

// The independent vector sums of a one-row dot product (streamPartialBy, dotPairsAsAlone).
constexpr int kStreamPartials = 4;

// One row of x against inputs [begin, end) of a stored row, as a decode step reads it: four
// independent vector sums (the single-vector steps after them into the first), added in
// order; `tail` is where the scalar rest starts. dotStream's one-row products and keyScores
// share it, so the two agree bit for bit. dotPairsAsAlone (RowBlockKernels.h) repeats this
// order for blocks of rows and outputs (the exact engine's): the two must keep one order,
// which FastLinearKernels.FloatRowsEqualTheirRowAloneBitForBit checks.
// `load(k)` gives the row's vector at element k (as stored, or an int8 KV row's q * scale).
template <class Vec, class Load>
typename Vec::V streamPartialBy(const float *x, const Load &load, int64_t begin, int64_t end,
                                int64_t &tail) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth, U = kStreamPartials;
  V acc[U];
  for (int u = 0; u < U; ++u)
    acc[u] = Vec::zero();
  int64_t k = begin;
  for (; k + U * W <= end; k += U * W)
    for (int u = 0; u < U; ++u)
      acc[u] = Vec::fma(Vec::load(x + k + u * W), load(k + u * W), acc[u]);
  for (; k + W <= end; k += W)
    acc[0] = Vec::fma(Vec::load(x + k), load(k), acc[0]);
  for (int u = 1; u < U; ++u)
    acc[0] = Vec::add(acc[0], acc[u]);
  tail = k;
  return acc[0];
}

template <class Vec, DType D>
typename Vec::V streamPartial(const float *x, const typename Stored<D>::T *row, int64_t begin,
                              int64_t end, int64_t &tail) {
  return streamPartialBy<Vec>(
      x, [row](int64_t k) { return Stored<D>::template loadAt<Vec>(row, k); }, begin, end, tail);
}

// Rows of `width` values, the way the attention kernels read a KV run: row t's vector at
// element d (`load`) and its value (`one`). As stored (f32, f16, bf16) ...
template <DType D> struct StoredRows {
  const typename Stored<D>::T *rows;
  int64_t width;
  template <class Vec> typename Vec::V load(int64_t t, int64_t d) const {
    return Stored<D>::template load<Vec>(rows + t * width + d);
  }
  float one(int64_t t, int64_t d) const { return Stored<D>::one(rows + t * width + d); }
};
// ... or an int8 KV cache's codes, each `groupSize` values of a row with one f32 scale,
// read as q * scale: the very products dequantizeCacheRows (widenRows) stores, so that a
// kernel over these rows computes what it computes over the widened ones, bit for bit,
// without writing and reloading them.
struct ScaledInt8Rows {
  const int8_t *codes;
  const float *scales;
  int64_t width, groups;
  template <class Vec> typename Vec::V load(int64_t t, int64_t d) const {
    return Vec::mul(Vec::load(codes + t * width + d),
                    Vec::broadcast(scales[t * groups + d / (width / groups)]));
  }
  float one(int64_t t, int64_t d) const {
    return static_cast<float>(codes[t * width + d]) * scales[t * groups + d / (width / groups)];
  }
};

// Up to 4 rows of x against inputs [begin, end) of a stored row, the row read as one
// sequential stream: per row one vector of partial sums (U independent sums per row, added
// in order), and `tail`, where the scalar rest starts.
template <class Vec, DType D, int R>
void streamRows(const float *x, int64_t ldx, const typename Stored<D>::T *row, int64_t begin,
                int64_t end, typename Vec::V (&part)[R], int64_t &tail) {
  using Elem = Stored<D>;
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth, U = 2;
  if constexpr (R == 1) {
    part[0] = streamPartial<Vec, D>(x, row, begin, end, tail);
  } else {
    V acc[R][U];
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < U; ++u)
        acc[r][u] = Vec::zero();
    int64_t k = begin;
    for (; k + U * W <= end; k += U * W)
      for (int u = 0; u < U; ++u) {
        V wv = Elem::template loadAt<Vec>(row, k + u * W);
        for (int r = 0; r < R; ++r)
          acc[r][u] = Vec::fma(Vec::load(x + r * ldx + k + u * W), wv, acc[r][u]);
      }
    for (; k + W <= end; k += W) {
      V wv = Elem::template loadAt<Vec>(row, k);
      for (int r = 0; r < R; ++r)
        acc[r][0] = Vec::fma(Vec::load(x + r * ldx + k), wv, acc[r][0]);
    }
    for (int r = 0; r < R; ++r) {
      part[r] = acc[r][0];
      for (int u = 1; u < U; ++u)
        part[r] = Vec::add(part[r], acc[r][u]);
    }
    tail = k;
  }
}

// dotStream for int8 codes: each group's vector of products is scaled into a running
// vector total (two, alternating, where registers allow, so that consecutive groups do not
// wait on each other), as dotStreamInt4 does, and reduced to a float once per row. Reducing
// each group's sums (3 vector adds and 6 more to a float per group of 32) held one row of
// int8 decode on AVX2 (Zen 2) to 11 GB/s of weights, compute-bound.
template <class Vec, DType D, int R>
void dotStreamGrouped(const float *x, int64_t ldx, const LinearWeights &w, int64_t o, float *y,
                      int64_t ldy) {
  using Elem = Stored<D>;
  using V = typename Vec::V;
  constexpr int T = R <= 2 ? 2 : 1;
  const int64_t in = w.in, groups = w.groups, groupSize = in / groups;
  const typename Elem::T *row = Elem::rowOf(w.data, o, in);
  V total[R][T];
  float scalar[R] = {};
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < T; ++u)
      total[r][u] = Vec::zero();
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * groupSize, end = begin + groupSize;
    V part[R];
    int64_t k = begin;
    streamRows<Vec, D, R>(x, ldx, row, begin, end, part, k);
    const float scale = w.scale(o * groups + g);
    const V scaleV = Vec::broadcast(scale);
    for (int r = 0; r < R; ++r) {
      total[r][g % T] = Vec::fma(part[r], scaleV, total[r][g % T]);
      float rest = 0.0f;
      for (int64_t t = k; t < end; ++t)
        rest += x[r * ldx + t] * Elem::oneAt(row, t);
      scalar[r] += rest * scale;
    }
  }
  for (int r = 0; r < R; ++r) {
    V sum = total[r][0];
    for (int u = 1; u < T; ++u)
      sum = Vec::add(sum, total[r][u]);
    y[r * ldy + o] = Vec::sum(sum) + scalar[r];
  }
}

// Up to 4 rows of x against weight row `o`, the row read as one sequential stream (what the
// hardware prefetchers follow best: measured 10 % to 60 % more bandwidth than reading 8 rows
// side by side); int8 codes scale their groups as they go (dotStreamGrouped).
template <class Vec, DType D, int R>
void dotStream(const float *x, int64_t ldx, const LinearWeights &w, int64_t o, float *y,
               int64_t ldy) {
  using Elem = Stored<D>;
  if constexpr (Elem::kGrouped) {
    dotStreamGrouped<Vec, D, R>(x, ldx, w, o, y, ldy);
  } else {
    const int64_t in = w.in;
    const typename Elem::T *row = Elem::rowOf(w.data, o, in);
    typename Vec::V part[R];
    int64_t k = 0;
    streamRows<Vec, D, R>(x, ldx, row, 0, in, part, k);
    for (int r = 0; r < R; ++r) {
      // One horizontal sum per row: over a short row (768 fp32) one per partial sum would
      // cost as much as the loads.
      float sum = Vec::sum(part[r]);
      for (int64_t t = k; t < in; ++t)
        sum += x[r * ldx + t] * Elem::oneAt(row, t);
      y[r * ldy + o] = sum;
    }
  }
}

// How far ahead of the row being read dotRowsTyped asks for weights.
constexpr int64_t kPrefetchBytes = 12 * 1024;

// Up to 4 rows of x, prepared for int4 weights: a byte's two codes are an even and an odd
// input, so x is split into its even and odd inputs (the low and the high nibbles of
// consecutive bytes then meet consecutive values), and each group's sum of x is kept: the
// codes' offset of 8 is taken off once per group, as 8 * sum(x), not once per weight.
struct Int4Rows {
  std::vector<float> even, odd, groupSums;  // [rows, in / 2] twice, [rows, groups]
};

inline void prepareInt4Rows(const float *x, int64_t rows, const LinearWeights &w,
                            Int4Rows &prepared) {
  const int64_t in = w.in, half = in / 2, groupSize = in / w.groups;
  prepared.even.resize(static_cast<size_t>(rows * half));
  prepared.odd.resize(static_cast<size_t>(rows * half));
  prepared.groupSums.assign(static_cast<size_t>(rows * w.groups), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < half; ++j) {
      const float a = x[r * in + 2 * j], b = x[r * in + 2 * j + 1];
      prepared.even[r * half + j] = a;
      prepared.odd[r * half + j] = b;
      prepared.groupSums[r * w.groups + 2 * j / groupSize] += a + b;
    }
}

// Weight row `o` of int4 codes against up to 4 prepared rows: per 2 * kWidth inputs one load
// of kWidth bytes, whose low and high nibbles multiply the even and the odd inputs. A group's
// vector of sums is scaled into a running vector total (groups of 32 are one or two vectors:
// a horizontal sum per group would cost more than its products), alternating between two
// totals so that consecutive groups do not wait on each other; the codes' offset, 8 * sum(x)
// per group, is taken off in one scalar at the end.
template <class Vec, int R>
void dotStreamInt4(const Int4Rows &prepared, const float *x, int64_t ldx, const LinearWeights &w,
                   int64_t o, float *y, int64_t ldy) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth;
  const int64_t in = w.in, half = in / 2, groups = w.groups, groupSize = in / groups;
  const uint8_t *row = static_cast<const uint8_t *>(w.data) + o * half;
  V total[R][2];
  float scalar[R] = {};
  for (int r = 0; r < R; ++r)
    total[r][0] = total[r][1] = Vec::zero();
  for (int64_t g = 0; g < groups; ++g) {
    // Byte positions of the group: [begin, end).
    const int64_t begin = g * groupSize / 2, end = begin + groupSize / 2;
    V acc[R][2];
    for (int r = 0; r < R; ++r)
      acc[r][0] = acc[r][1] = Vec::zero();
    int64_t b = begin;
    for (; b + W <= end; b += W) {
      const V low = Vec::lowNibbles(row + b), high = Vec::highNibbles(row + b);
      for (int r = 0; r < R; ++r) {
        acc[r][0] = Vec::fma(Vec::load(prepared.even.data() + r * half + b), low, acc[r][0]);
        acc[r][1] = Vec::fma(Vec::load(prepared.odd.data() + r * half + b), high, acc[r][1]);
      }
    }
    const float scale = w.scale(o * groups + g);
    const V scaleV = Vec::broadcast(scale);
    for (int r = 0; r < R; ++r) {
      total[r][g & 1] = Vec::fma(Vec::add(acc[r][0], acc[r][1]), scaleV, total[r][g & 1]);
      float rest = -8.0f * prepared.groupSums[static_cast<size_t>(r * groups + g)];
      for (int64_t t = 2 * b; t < 2 * end; ++t)
        rest += x[r * ldx + t] * (scalarLoadInt4(row, t) + 8.0f);
      scalar[r] += rest * scale;
    }
  }
  for (int r = 0; r < R; ++r)
    y[r * ldy + o] = Vec::sum(Vec::add(total[r][0], total[r][1])) + scalar[r];
}

// Weight rows [first, first + count) as fp32 at `out` ([count, in]; int8 and int4
// dequantized with their scales), for the GEMM of many rows.
template <class Vec, DType D>
void widenRowsTyped(const LinearWeights &w, int64_t first, int64_t count, float *out) {
  using Elem = Stored<D>;
  using T = typename Elem::T;
  constexpr int W = Vec::kWidth;
  const int64_t in = w.in;
  const int64_t groups = Elem::kGrouped ? w.groups : 1;
  const int64_t groupSize = in / groups;
  for (int64_t o = 0; o < count; ++o) {
    const T *row = Elem::rowOf(w.data, first + o, in);
    float *dst = out + o * in;
    for (int64_t g = 0; g < groups; ++g) {
      const float scale = Elem::kGrouped ? w.scale((first + o) * groups + g) : 1.0f;
      const typename Vec::V scaleV = Vec::broadcast(scale);
      int64_t k = g * groupSize, end = k + groupSize;
      for (; k + W <= end; k += W) {
        typename Vec::V v = Elem::template loadAt<Vec>(row, k);
        Vec::store(dst + k, Elem::kGrouped ? Vec::mul(v, scaleV) : v);
      }
      for (; k < end; ++k)
        dst[k] = Elem::kGrouped ? Elem::oneAt(row, k) * scale : Elem::oneAt(row, k);
    }
  }
}

} // namespace
} // namespace dsrt::ops::fast::detail

// The f32 kernels of more than 4 rows (dotBlocks, dotRowLanes).
#include "ops/fast/RowBlockKernels.h"

namespace dsrt::ops::fast::detail {
namespace {

// Output features [begin, end) for every row. Up to 4 rows (decode of up to 4 sequences)
// stream each weight row once; more rows (decode of more sequences, a short prefill) take
// blocks of 4 weight rows by kBlockRows rows of x (4 with AVX-512's 32 registers: 16 sums;
// 3 with AVX2's 16).
template <class Vec, DType D>
void dotRowsTyped(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                  int64_t end, float *y, int64_t ldy) {
  const int64_t in = w.in;
  if (rows <= 4) {
    // int4: x split once per call into even and odd inputs (Int4Rows).
    thread_local Int4Rows prepared;
    if constexpr (D == DType::U8)
      prepareInt4Rows(x, rows, w, prepared);
    const char *base = static_cast<const char *>(w.data);
    const int64_t rowBytes = Stored<D>::rowBytes(in);
    const char *stop = base + end * rowBytes;
    for (int64_t o = begin; o < end; ++o) {
      // The next rows of this range, requested a fixed distance ahead: each call's range is
      // short (a few hundred KB), so the stream prefetchers, which ramp up within a page,
      // leave its start waiting on memory (measured 5-10 % on int8 decode, where 48 calls a
      // step read 0.6 to 2.4 MB each).
      const char *ahead = base + o * rowBytes + kPrefetchBytes;
      for (const char *line = ahead; line < ahead + rowBytes && line < stop; line += 64)
        requestLine(line);
      if constexpr (D == DType::U8) {
        switch (rows) {
        case 4: dotStreamInt4<Vec, 4>(prepared, x, in, w, o, y, ldy); break;
        case 3: dotStreamInt4<Vec, 3>(prepared, x, in, w, o, y, ldy); break;
        case 2: dotStreamInt4<Vec, 2>(prepared, x, in, w, o, y, ldy); break;
        case 1: dotStreamInt4<Vec, 1>(prepared, x, in, w, o, y, ldy); break;
        default: break;
        }
        continue;
      }
      switch (rows) {
      case 4: dotStream<Vec, D, 4>(x, in, w, o, y, ldy); break;
      case 3: dotStream<Vec, D, 3>(x, in, w, o, y, ldy); break;
      case 2: dotStream<Vec, D, 2>(x, in, w, o, y, ldy); break;
      case 1: dotStream<Vec, D, 1>(x, in, w, o, y, ldy); break;
      default: break;
      }
    }
    return;
  }
  constexpr int O = 4;
  if constexpr (D != DType::F32) {
    // Narrow weights are widened to f32 (int8 and int4 with their scales, as widenRows gives
    // sgemm) once per block of O weight rows, for all the rows of x, rather than converted
    // again for each block of kBlockRows rows and, for int8 and int4, each group's sums
    // reduced across lanes (3 vector adds and 6 more to a float, per group of 32 per row and
    // output): at 16 rows on AVX2 (Zen 2) int8 groups of 32 ran at 33 GFLOP/s where f32
    // weights ran at 100-130.
    thread_local std::vector<float> panel;
    panel.resize(static_cast<size_t>(O * in));
    LinearWeights widened;
    widened.data = panel.data();
    widened.in = in;
    widened.out = O;
    for (int64_t o = begin; o < end; o += O) {
      const int64_t count = std::min<int64_t>(O, end - o);
      widenRowsTyped<Vec, D>(w, o, count, panel.data());
      dotBlocks<Vec>(x, rows, widened, 0, count, y + o, ldy);
    }
    return;
  }
  if constexpr (Vec::kWidth == 16)
    if (rows <= kRowLanes)
      return dotRowLanes<Vec>(x, rows, w, begin, end, y, ldy);
  dotBlocks<Vec>(x, rows, w, begin, end, y, ldy);
}

template <class Vec>
void dotRowsWith(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                 int64_t end, float *y, int64_t ldy) {
  switch (w.dtype) {
  case DType::F16: return dotRowsTyped<Vec, DType::F16>(x, rows, w, begin, end, y, ldy);
  case DType::BF16: return dotRowsTyped<Vec, DType::BF16>(x, rows, w, begin, end, y, ldy);
  case DType::I8: return dotRowsTyped<Vec, DType::I8>(x, rows, w, begin, end, y, ldy);
  case DType::U8: return dotRowsTyped<Vec, DType::U8>(x, rows, w, begin, end, y, ldy);
  default: return dotRowsTyped<Vec, DType::F32>(x, rows, w, begin, end, y, ldy);
  }
}

template <class Vec>
void dotRowsAsAloneWith(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                        int64_t end, float *y, int64_t ldy) {
  switch (w.dtype) {
  case DType::F16: return dotRowsAsAloneTyped<Vec, DType::F16>(x, rows, w, begin, end, y, ldy);
  case DType::BF16: return dotRowsAsAloneTyped<Vec, DType::BF16>(x, rows, w, begin, end, y, ldy);
  default: return dotRowsAsAloneTyped<Vec, DType::F32>(x, rows, w, begin, end, y, ldy);
  }
}

template <class Vec>
void widenRowsWith(const LinearWeights &w, int64_t first, int64_t count, float *out) {
  switch (w.dtype) {
  case DType::F16: return widenRowsTyped<Vec, DType::F16>(w, first, count, out);
  case DType::BF16: return widenRowsTyped<Vec, DType::BF16>(w, first, count, out);
  case DType::I8: return widenRowsTyped<Vec, DType::I8>(w, first, count, out);
  case DType::U8: return widenRowsTyped<Vec, DType::U8>(w, first, count, out);
  default: return widenRowsTyped<Vec, DType::F32>(w, first, count, out);
  }
}

template <class Vec> float sumWith(const float *x, int64_t n) {
  constexpr int W = Vec::kWidth;
  typename Vec::V acc[2] = {Vec::zero(), Vec::zero()};
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    acc[0] = Vec::add(acc[0], Vec::load(x + i));
    acc[1] = Vec::add(acc[1], Vec::load(x + i + W));
  }
  for (; i + W <= n; i += W)
    acc[0] = Vec::add(acc[0], Vec::load(x + i));
  float sum = Vec::sum(Vec::add(acc[0], acc[1]));
  for (; i < n; ++i)
    sum += x[i];
  return sum;
}

template <class Vec, bool Second>
void addToTyped(float *y, const float *x, const float *z, int64_t n) {
  constexpr int W = Vec::kWidth;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    typename Vec::V sum = Vec::add(Vec::load(y + i), Vec::load(x + i));
    Vec::store(y + i, Second ? Vec::add(sum, Vec::load(z + i)) : sum);
  }
  for (; i < n; ++i)
    y[i] = Second ? (y[i] + x[i]) + z[i] : y[i] + x[i];
}

template <class Vec> void addToWith(float *y, const float *x, const float *z, int64_t n) {
  z ? addToTyped<Vec, true>(y, x, z, n) : addToTyped<Vec, false>(y, x, z, n);
}

// Two passes in fp32 (the mean, then the squares about it), as torch's CPU kernels do.
template <class Vec>
void normalizeRowWith(const float *x, int64_t n, const float *scale, const float *bias,
                      bool rms, float epsilon, float *y) {
  constexpr int W = Vec::kWidth;
  const float mean = rms ? 0.0f : sumWith<Vec>(x, n) / static_cast<float>(n);
  // x + (-mean) is x - mean exactly: Vec has no subtraction.
  const typename Vec::V negatedMean = Vec::broadcast(-mean);
  typename Vec::V acc[2] = {Vec::zero(), Vec::zero()};
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    typename Vec::V a = Vec::add(Vec::load(x + i), negatedMean);
    typename Vec::V b = Vec::add(Vec::load(x + i + W), negatedMean);
    acc[0] = Vec::fma(a, a, acc[0]);
    acc[1] = Vec::fma(b, b, acc[1]);
  }
  float squares = Vec::sum(Vec::add(acc[0], acc[1]));
  for (; i < n; ++i)
    squares += (x[i] - mean) * (x[i] - mean);
  const float inverse = 1.0f / std::sqrt(squares / static_cast<float>(n) + epsilon);
  const typename Vec::V inverseV = Vec::broadcast(inverse);
  i = 0;
  for (; i + W <= n; i += W) {
    typename Vec::V centred = Vec::add(Vec::load(x + i), negatedMean);
    typename Vec::V value = Vec::mul(Vec::mul(centred, inverseV), Vec::load(scale + i));
    Vec::store(y + i, bias ? Vec::add(value, Vec::load(bias + i)) : value);
  }
  for (; i < n; ++i) {
    float value = (x[i] - mean) * inverse * scale[i];
    y[i] = bias ? value + bias[i] : value;
  }
}

} // namespace
} // namespace dsrt::ops::fast::detail

// The attention's kernels (value sums, scores, tiles) over the row readers above.
#include "ops/fast/AttentionKernels.h"

namespace dsrt::ops::fast::detail {
namespace {

template <class Vec> IsaKernels kernelsOf(const char *name) {
  return {name,
          &dotRowsWith<Vec>,
          &dotRowsAsAloneWith<Vec>,
          &widenRowsWith<Vec>,
          &activateVectorWith<Vec>,
          &exponentiateWith<Vec>,
          &addToWith<Vec>,
          &weightedSumWith<Vec>,
          &keyScoresWith<Vec>,
          &weightedSumHeadsWith<Vec>,
          &keyScoresInt8With<Vec>,
          &weightedSumInt8With<Vec>,
          &normalizeRowWith<Vec>,
          &scoreTileWith<Vec>,
          &columnMaximaWith<Vec>,
          &softmaxColumnsWith<Vec>,
          &multiplyTileWith<Vec>,
          Vec::kWidth == 16 ? kRowLanes : 0,
          Vec::kWidth == 16 ? &dotRowLanesTransposed<Vec> : nullptr};
}

} // namespace
} // namespace dsrt::ops::fast::detail

#endif
