// Internal to the fast kernels: AVX-512F's vector operations for DotKernels.h, shared by the
// translation units built for AVX-512 (DotAvx512.cpp, DotVnni.cpp). Include it only from a
// file compiled with -mavx512f.
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
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
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
