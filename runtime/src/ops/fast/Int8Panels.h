// Internal to the integer GEMMs of many rows (GemmInt8Amx.cpp, GemmInt8Vnni.cpp), the
// quantizer of their x and the kernels in their order (DotVnni.cpp, DotInt4TilesOrder.cpp):
// what they do to a panel of 16 weight rows, to 16 rows of int8 values and to 16 x 16 f32
// results. Include it only inside a target region for AVX-512F and AVX2 (TargetRegion.h).
// Internal linkage, as VecAvx512.h: each file's copy is compiled for that file's set, and the
// linker must not pick one file's for another.
#ifndef DSRT_OPS_FAST_INT8PANELS_H
#define DSRT_OPS_FAST_INT8PANELS_H

#include "ops/fast/FastKernels.h"

#include "core/Tensor.h"

#include <algorithm>
#include <cstdint>
#include <immintrin.h>
#include <vector>

namespace dsrt::ops::fast {
namespace {

// r[i][l] becomes r[l][i]: the sum tile is [output, row of x] and y is [row of x, output].
// Pairs of floats, then of doubles, then a 4 x 4 transpose of 128-bit lanes (64 shuffles,
// where storing the 256 values one by one cost about a third of a 768-input tile's time).
inline void transpose16(__m512 *r) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // r[4i + c], 128-bit lane j: column 4j + c of rows 4i to 4i + 3.
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512d lowPairs = _mm512_castps_pd(t[4 * i]), lowNext = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d highPairs = _mm512_castps_pd(t[4 * i + 1]),
                  highNext = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(lowPairs, lowNext));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lowPairs, lowNext));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(highPairs, highNext));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(highPairs, highNext));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 front01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44);
    const __m512 back01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
    const __m512 front23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
    const __m512 back23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
    t[c] = _mm512_shuffle_f32x4(front01, front23, 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(front01, front23, 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(back01, back23, 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(back01, back23, 0xDD);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    r[i] = t[i];
}

// A finished tile's f32 sums, acc[o] holding output o's 16 rows of x, into y's rows
// [firstRow, firstRow + 16) within x's `rows` (y at the panel's first output): transposed in
// registers, and with one group a row scaled by the 16 outputs' scales, in a row.
template <bool PerChannel>
inline void storeTile(__m512 *acc, const float *panelScales, int64_t firstRow, int64_t rows,
                      float *y, int64_t ldy) {
  transpose16(acc);
  const __m512 channelScales = PerChannel ? _mm512_loadu_ps(panelScales) : _mm512_setzero_ps();
  const int64_t count = std::min<int64_t>(16, rows - firstRow);
#pragma GCC unroll 16
  for (int l = 0; l < 16; ++l)
    if (l < count)
      _mm512_storeu_ps(y + (firstRow + l) * ldy,
                       PerChannel ? _mm512_mul_ps(acc[l], channelScales) : acc[l]);
}

// rows[l]: row l's 32 bytes in its low half, row l + 8's in its high half (l < 8). quads[q]:
// dword q (inputs 4q to 4q + 3) of the 16 rows, row r in lane r, as AMX's B operand holds a
// block.
inline void transposeQuads(const __m512i *rows, __m512i *quads) {
  __m512i pairs[8], fours[8];
  for (int g = 0; g < 2; ++g)  // rows 0-3 (and 8-11), then 4-7 (and 12-15)
    for (int p = 0; p < 2; ++p) {
      const __m512i a = rows[4 * g + 2 * p], b = rows[4 * g + 2 * p + 1];
      pairs[4 * g + 2 * p] = _mm512_unpacklo_epi32(a, b);
      pairs[4 * g + 2 * p + 1] = _mm512_unpackhi_epi32(a, b);
    }
  // fours[4g + i], 128-bit lane k: dword i (k even) or 4 + i (k odd) of four rows.
  for (int g = 0; g < 2; ++g) {
    const __m512i *t = pairs + 4 * g;
    fours[4 * g + 0] = _mm512_unpacklo_epi64(t[0], t[2]);
    fours[4 * g + 1] = _mm512_unpackhi_epi64(t[0], t[2]);
    fours[4 * g + 2] = _mm512_unpacklo_epi64(t[1], t[3]);
    fours[4 * g + 3] = _mm512_unpackhi_epi64(t[1], t[3]);
  }
  const __m512i low = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i high =
      _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int i = 0; i < 4; ++i) {
    quads[i] = _mm512_permutex2var_epi32(fours[i], low, fours[4 + i]);
    quads[4 + i] = _mm512_permutex2var_epi32(fours[i], high, fours[4 + i]);
  }
}

// int4 rows (two codes a byte, the even input low, minus 8: docs/int4.md) as int8 rows.
// 32 bytes of codes a step (the bytes' two halves interleave within each 128-bit lane, so
// the lanes are put back in order after), then 16 for a row's last odd half of 32.
inline void unpackInt4Rows(const uint8_t *codes, int64_t rows, int64_t in, int8_t *out) {
  const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  const __m256i low32 = _mm256_set1_epi8(0x0F), eight32 = _mm256_set1_epi8(8);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t j = 0;
    for (; j + 32 <= in / 2; j += 32) {
      const __m256i bytes =
          _mm256_loadu_si256(reinterpret_cast<const __m256i *>(codes + r * (in / 2) + j));
      const __m256i even = _mm256_and_si256(bytes, low32);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low32);
      const __m256i first = _mm256_sub_epi8(_mm256_unpacklo_epi8(even, odd), eight32);
      const __m256i second = _mm256_sub_epi8(_mm256_unpackhi_epi8(even, odd), eight32);
      int8_t *to = out + r * in + 2 * j;
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(to),
                          _mm256_permute2x128_si256(first, second, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(to + 32),
                          _mm256_permute2x128_si256(first, second, 0x31));
    }
    for (; j < in / 2; j += 16) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(codes + r * (in / 2) + j));
      const __m128i even = _mm_and_si128(bytes, low);
      const __m128i odd = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
      int8_t *to = out + r * in + 2 * j;
      _mm_storeu_si128(reinterpret_cast<__m128i *>(to),
                       _mm_sub_epi8(_mm_unpacklo_epi8(even, odd), eight));
      _mm_storeu_si128(reinterpret_cast<__m128i *>(to + 16),
                       _mm_sub_epi8(_mm_unpackhi_epi8(even, odd), eight));
    }
  }
}

// Requests into L2 the scales of the panel of 16 rows from `first` (none past w.out). A
// GEMM that requests a panel's weight rows ahead and not its scales waited on them instead:
// a load that missed in the scales' conversion (scalesOf) was 1.9% of a GPT-2 int8 engine's
// samples on the Zen 5, most of them at the LM head's 3141 panels.
inline void requestScalesOf(const LinearWeights &w, int64_t first) {
  if (first >= w.out)
    return;
  const int64_t scaleBytes = w.scaleType == DType::F32 ? 4 : 2;
  const char *begin = static_cast<const char *>(w.scales) + first * w.groups * scaleBytes;
  const char *end = begin + std::min<int64_t>(16, w.out - first) * w.groups * scaleBytes;
  for (const char *line = begin; line < end; line += 64)
    requestLineL2(line);
  requestLineL2(end - 1);  // a range that straddles a line boundary
}

// Rows [first, first + 16) of w's scales as f32, [16, groups]: the plan's f32 scales where
// they lie, f16 and bf16 ones converted into `converted`.
inline const float *scalesOf(const LinearWeights &w, int64_t first, std::vector<float> &converted) {
  const int64_t count = 16 * w.groups, from = first * w.groups;
  if (w.scaleType == DType::F32)
    return static_cast<const float *>(w.scales) + from;
  converted.resize(static_cast<size_t>(count));
  convertFloats(w.scaleType,
                static_cast<const uint16_t *>(w.scales) + from, DType::F32, converted.data(),
                count);
  return converted.data();
}

// For the int32 vpdpbusd sums s[0..3] of outputs 4j..4j+3: 128-bit lane k of the result
// holds those 4 outputs' sums of their lanes 4k..4k+3 (the panels' first reduction,
// DotVnni.cpp and DotInt4TilesOrder.cpp) (pairs of vectors added lane against
// lane after unpacking, then pairs of those).
inline __m512i fourLaneSums(const __m512i *s) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]),
                                     _mm512_unpackhi_epi32(s[0], s[1]));
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]),
                                     _mm512_unpackhi_epi32(s[2], s[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// Panel `first`'s weight scales as f32, [groups, 16 outputs] (lanes past `count`: zero):
// once per panel, so that a group of 32 inputs costs one vector load.
inline void transposedPanelScales(const LinearWeights &w, int64_t first, int count,
                                  std::vector<float> &converted,
                                  std::vector<float> &transposed) {
  const int64_t groups = w.groups;
  transposed.assign(static_cast<size_t>(groups * 16), 0.0f);
  if (count == 16) {
    const float *scales = scalesOf(w, first, converted);  // 16 whole rows of scales
    for (int o = 0; o < 16; ++o)
      for (int64_t g = 0; g < groups; ++g)
        transposed[static_cast<size_t>(g * 16 + o)] = scales[o * groups + g];
    return;
  }
  for (int o = 0; o < count; ++o)
    for (int64_t g = 0; g < groups; ++g)
      transposed[static_cast<size_t>(g * 16 + o)] = w.scale((first + o) * groups + g);
}

} // namespace
} // namespace dsrt::ops::fast

#endif
