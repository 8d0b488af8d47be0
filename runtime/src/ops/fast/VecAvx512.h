// Internal to the fast kernels: AVX-512F's vector operations for DotKernels.h, shared by the
// translation units built for AVX-512 (DotAvx512.cpp, DotVnni.cpp). Include it only inside a
// target region for AVX-512F (TargetRegion.h).
#ifndef DSRT_OPS_FAST_VECAVX512_H
#define DSRT_OPS_FAST_VECAVX512_H

#include "ops/fast/DotKernels.h"

#include <immintrin.h>

namespace dsrt::ops::fast {
namespace {

struct Avx512 {
  static constexpr int kWidth = 16;
  static constexpr int kBlockRows = 4;
  using V = __m512;
  static V zero() { return _mm512_setzero_ps(); }
  static V broadcast(float v) { return _mm512_set1_ps(v); }
  static V load(const float *p) { return _mm512_loadu_ps(p); }
  static V load(const uint16_t *p, detail::F16Tag) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
  }
  static V load(const uint16_t *p, detail::BF16Tag) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static V load(const int8_t *p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))));
  }
  // Each byte twice, widened to a lane each, then the even lanes keep the low nibble and the
  // odd ones shift the high one down.
  static V loadInt4(const uint8_t *p) {
    __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
    __m512i lanes = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(packed, packed));
    lanes = _mm512_srlv_epi32(
        lanes, _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4));
    lanes = _mm512_sub_epi32(_mm512_and_si512(lanes, _mm512_set1_epi32(0xF)),
                             _mm512_set1_epi32(8));
    return _mm512_cvtepi32_ps(lanes);
  }
  static V lowNibbles(const uint8_t *p) {
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(bytes, _mm_set1_epi8(0xF))));
  }
  static V highNibbles(const uint8_t *p) {
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0xF))));
  }
  static V fma(V a, V b, V acc) { return _mm512_fmadd_ps(a, b, acc); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static void store(float *p, V v) { _mm512_storeu_ps(p, v); }
  // Lanes i and i + 8, then i and i + 4, i and i + 2, and the last two: GCC's
  // _mm512_reduce_add_ps, written out so that sums16 below is bound to the same pairs.
  static float sum(V v) {
    const __m256 eight =
        _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)),
                      _mm512_castps512_ps256(v));
    const __m128 four = _mm_add_ps(_mm256_extractf128_ps(eight, 1), _mm256_castps256_ps128(eight));
    const __m128 two = _mm_add_ps(four, _mm_shuffle_ps(four, four, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(two) + _mm_cvtss_f32(_mm_shuffle_ps(two, two, 1));
  }
  // Lane k: sum(v[k]), the same additions of the same pairs, sixteen vectors at a time by
  // shuffling them together between the levels (keyScores: one decode query's scores against
  // sixteen keys).
  static constexpr bool kSums16 = true;
  static V sums16(const V *v) {
    return combine16(v, Add{});
  }
  // Lane k: the largest lane of v[k] (the tile quantizer's sixteen rows' blocks).
  static V maxima16(const V *v) {
    return combine16(v, Max{});
  }
  // Functors rather than lambdas: GCC compiles a captureless lambda's conversion to a
  // function pointer outside the file's target region (TargetRegion.h).
  struct Add {
    V operator()(V a, V b) const { return _mm512_add_ps(a, b); }
  };
  struct Max {
    V operator()(V a, V b) const { return _mm512_max_ps(a, b); }
  };
  template <class Combine> static V combine16(const V *v, Combine combine) {
    V halves[8], quarters[4], eighths[2];
    for (int m = 0; m < 8; ++m)  // [v2m's eight pairs combined, v2m+1's]
      halves[m] = combine(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0x44),
                          _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0xEE));
    for (int n = 0; n < 4; ++n)  // 128-bit lane j: v[4n + j]'s four
      quarters[n] = combine(_mm512_shuffle_f32x4(halves[2 * n], halves[2 * n + 1], 0x88),
                            _mm512_shuffle_f32x4(halves[2 * n], halves[2 * n + 1], 0xDD));
    for (int n = 0; n < 2; ++n)  // lane j: v[8n + j]'s two, then v[8n + 4 + j]'s
      eighths[n] = combine(
          _mm512_shuffle_ps(quarters[2 * n], quarters[2 * n + 1], _MM_SHUFFLE(1, 0, 1, 0)),
          _mm512_shuffle_ps(quarters[2 * n], quarters[2 * n + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // Element 4j + e: v[j + 4e]'s; then each to lane j + 4e.
    const V combined =
        combine(_mm512_shuffle_ps(eighths[0], eighths[1], _MM_SHUFFLE(2, 0, 2, 0)),
                _mm512_shuffle_ps(eighths[0], eighths[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), combined);
  }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V floor(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  // 2^n for lanes holding whole numbers n in [-127, 128].
  static V powerOfTwo(V n) {
    __m512i bits = _mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(bits, 23));
  }
};

} // namespace
} // namespace dsrt::ops::fast

#endif
