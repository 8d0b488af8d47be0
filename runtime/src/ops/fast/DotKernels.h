// Internal to the fast linear kernels: one body for the scalar and the AVX2 builds of the
// dot-product kernel (DotScalar.cpp, DotAvx2.cpp). A translation unit includes it after
// defining the vector type's operations in a `Vec` struct:
//   static constexpr int kWidth;            lanes
//   using V;                                the register type
//   static V zero(); static V broadcast(float);
//   static V load(const float *); static V load(const uint16_t *f16 or bf16, Tag);
//   static V load(const int8_t *);
//   static V fma(V a, V b, V acc); static V mul(V, V); static float sum(V);
#ifndef DSRT_OPS_FAST_DOTKERNELS_H
#define DSRT_OPS_FAST_DOTKERNELS_H

#include "ops/fast/LinearKernels.h"

#include <cstring>

namespace dsrt::ops::fast::detail {

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

// The element type as stored, and how Vec and scalarLoad read it.
template <DType D> struct Stored;
template <> struct Stored<DType::F32> {
  using T = float;
  template <class Vec> static typename Vec::V load(const T *p) { return Vec::load(p); }
  static float one(const T *p) { return scalarLoad(p); }
};
template <> struct Stored<DType::F16> {
  using T = uint16_t;
  template <class Vec> static typename Vec::V load(const T *p) { return Vec::load(p, F16Tag{}); }
  static float one(const T *p) { return scalarLoad(p, F16Tag{}); }
};
template <> struct Stored<DType::BF16> {
  using T = uint16_t;
  template <class Vec> static typename Vec::V load(const T *p) { return Vec::load(p, BF16Tag{}); }
  static float one(const T *p) { return scalarLoad(p, BF16Tag{}); }
};
template <> struct Stored<DType::I8> {
  using T = int8_t;
  template <class Vec> static typename Vec::V load(const T *p) { return Vec::load(p); }
  static float one(const T *p) { return scalarLoad(p); }
};

// R rows of x against O consecutive weight rows starting at `first`. Each weight vector is
// loaded (and, for int8, scaled by its group's scale) once and used for all R rows.
template <class Vec, DType D, int R, int O>
void dotBlock(const float *x, int64_t ldx, const LinearWeights &w, int64_t first, float *y,
              int64_t ldy) {
  using Elem = Stored<D>;
  using T = typename Elem::T;
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth;
  const int64_t in = w.in;
  const int64_t groups = D == DType::I8 ? w.groups : 1;
  const int64_t groupSize = in / groups;
  const T *rows[O];
  for (int o = 0; o < O; ++o)
    rows[o] = static_cast<const T *>(w.data) + (first + o) * in;
  float total[R][O] = {};
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * groupSize, end = begin + groupSize;
    V acc[R][O];
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o)
        acc[r][o] = Vec::zero();
    V scale[O];
    float scalarScale[O];
    for (int o = 0; o < O; ++o) {
      scalarScale[o] = D == DType::I8 ? w.scales[(first + o) * groups + g] : 1.0f;
      scale[o] = Vec::broadcast(scalarScale[o]);
    }
    int64_t k = begin;
    for (; k + W <= end; k += W) {
      V xv[R];
      for (int r = 0; r < R; ++r)
        xv[r] = Vec::load(x + r * ldx + k);
      for (int o = 0; o < O; ++o) {
        V wv = Elem::template load<Vec>(rows[o] + k);
        if constexpr (D == DType::I8)
          wv = Vec::mul(wv, scale[o]);
        for (int r = 0; r < R; ++r)
          acc[r][o] = Vec::fma(xv[r], wv, acc[r][o]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o) {
        float tail = 0;
        for (int64_t t = k; t < end; ++t)
          tail += x[r * ldx + t] * Elem::one(rows[o] + t);
        total[r][o] += Vec::sum(acc[r][o]) + tail * scalarScale[o];
      }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o)
      y[r * ldy + first + o] = total[r][o];
}

// Output features [begin, end) for every row: blocks of O features, each block read from
// memory once and reused from cache for the next rows.
template <class Vec, DType D>
void dotRowsTyped(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                  int64_t end, float *y, int64_t ldy) {
  constexpr int O = 4;
  const int64_t in = w.in;
  int64_t o = begin;
  auto block = [&](auto outputs, int64_t first) {
    constexpr int B = decltype(outputs)::value;
    int64_t r = 0;
    for (; r + 3 <= rows; r += 3)
      dotBlock<Vec, D, 3, B>(x + r * in, in, w, first, y + r * ldy, ldy);
    if (rows - r == 2)
      dotBlock<Vec, D, 2, B>(x + r * in, in, w, first, y + r * ldy, ldy);
    else if (rows - r == 1)
      dotBlock<Vec, D, 1, B>(x + r * in, in, w, first, y + r * ldy, ldy);
  };
  for (; o + O <= end; o += O)
    block(std::integral_constant<int, O>{}, o);
  for (; o < end; ++o)
    block(std::integral_constant<int, 1>{}, o);
}

template <class Vec>
void dotRowsWith(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                 int64_t end, float *y, int64_t ldy) {
  switch (w.dtype) {
  case DType::F16: return dotRowsTyped<Vec, DType::F16>(x, rows, w, begin, end, y, ldy);
  case DType::BF16: return dotRowsTyped<Vec, DType::BF16>(x, rows, w, begin, end, y, ldy);
  case DType::I8: return dotRowsTyped<Vec, DType::I8>(x, rows, w, begin, end, y, ldy);
  default: return dotRowsTyped<Vec, DType::F32>(x, rows, w, begin, end, y, ldy);
  }
}

} // namespace dsrt::ops::fast::detail

#endif
