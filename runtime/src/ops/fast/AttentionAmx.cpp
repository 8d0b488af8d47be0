// The tiled attention's products on AMX-BF16 (docs/cpu-backend.md, "Attention, prompts"):
// compiled for AMX and AVX-512 BF16 (a target region: TargetRegion.h), and runs only where
// amx::available() said so. A tile product here (16 x 16 sums over 32 bf16 pairs in one
// instruction) replaces 16 x 16 x 32 f32 FMAs, so a key tile's two products cost about as
// much as its softmax.
//
// The layouts follow AMX: A is row-major bf16 [16, 32] (the queries, the probabilities), B is
// [16 pairs, 16 columns] of bf16 pairs (the keys transposed into pairs, the values' rows
// interleaved in pairs), C is f32 [16, 16] (the scores, the accumulator).
#include "ops/fast/TargetRegion.h"
#include "ops/fast/AttentionAmx.h"

DSRT_TARGET_REGION_BEGIN("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16,avx2,fma,f16c")
#include "ops/fast/VecAvx512.h"

namespace dsrt::ops::fast::amx {
namespace {

// Tiles 0-3: sums; 4-5: A; 6-7: B. Every tile is 16 rows of 64 bytes.
const AmxTileConfig &tileConfig() {
  static const AmxTileConfig config = [] {
    AmxTileConfig c;
    for (int t = 0; t < 8; ++t)
      c.tile(t, 16, 64);
    return c;
  }();
  return config;
}

// e^x for the softmax's weights, which are rounded to bf16 (2^-9) right after: 2^(x log2 e)
// as 2^n times a degree-4 Taylor polynomial of 2^f, |f| <= 1/2, within 6e-5 relative
// (Taylor's remainder (ln 2 / 2)^5 / 5! = 4.2e-5, and x log2 e's rounding; measured 5.9e-5
// over [-87, 0]), in about half the instructions of expVector's degree-6 Cephes form. x is clamped at -87 (e^-87 ~ 1.6e-38);
// masked keys get an exact 0 from the caller.
inline __m512 expForWeights(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_fmadd_ps(f, _mm512_set1_ps(9.6181291e-3f), _mm512_set1_ps(5.5504109e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// One step of a 2 x 2 block: B's two column tiles from `b` (their second 64 bytes on), A's
// row tile `a` and, with twoRows, the row tile `a + 16 rows`, into sums 0-1 and 2-3.
inline void multiplyStep(const void *a, int64_t aStride, const void *b, int64_t bStride,
                         bool twoRows) {
  _tile_loadd(6, b, bStride);
  _tile_loadd(7, static_cast<const char *>(b) + 64, bStride);
  _tile_loadd(4, a, aStride);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  if (twoRows) {
    _tile_loadd(5, static_cast<const char *>(a) + 16 * aStride, aStride);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

// The block's sums to (or from, with load) f32 rows at c: two column tiles of 16, and the
// next 16 rows with twoRows.
inline void storeSums(float *c, int64_t stride, bool twoRows) {
  _tile_stored(0, c, stride);
  _tile_stored(1, c + 16, stride);
  if (twoRows) {
    _tile_stored(2, reinterpret_cast<char *>(c) + 16 * stride, stride);
    _tile_stored(3, reinterpret_cast<char *>(c + 16) + 16 * stride, stride);
  }
}
inline void loadSums(const float *c, int64_t stride, bool twoRows) {
  _tile_loadd(0, c, stride);
  _tile_loadd(1, c + 16, stride);
  if (twoRows) {
    _tile_loadd(2, reinterpret_cast<const char *>(c) + 16 * stride, stride);
    _tile_loadd(3, reinterpret_cast<const char *>(c + 16) + 16 * stride, stride);
  }
}

} // namespace

void configure() { _tile_loadconfig(&tileConfig()); }

void release() { _tile_release(); }

void packKeys(const uint16_t *const *keyRows, int64_t count, int64_t D, uint32_t *pairs) {
  const int64_t halves = D / 2;
  for (int64_t j = 0; j < kAmxKeys; ++j) {
    if (j >= count) {
      for (int64_t d2 = 0; d2 < halves; ++d2)
        pairs[d2 * kAmxKeys + j] = 0;
      continue;
    }
    const auto *row = reinterpret_cast<const uint32_t *>(keyRows[j]);
    for (int64_t d2 = 0; d2 < halves; ++d2)
      pairs[d2 * kAmxKeys + j] = row[d2];
  }
}

void packValues(const uint16_t *const *valueRows, int64_t count, int64_t D, uint32_t *pairs) {
  for (int64_t j2 = 0; j2 < kAmxKeys / 2; ++j2) {
    const int64_t even = 2 * j2, odd = even + 1;
    uint32_t *out = pairs + j2 * D;
    for (int64_t d = 0; d < D; d += 16) {
      const __m512i low = even < count
                              ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                    reinterpret_cast<const __m256i *>(valueRows[even] + d)))
                              : _mm512_setzero_si512();
      const __m512i high = odd < count
                               ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                     reinterpret_cast<const __m256i *>(valueRows[odd] + d)))
                               : _mm512_setzero_si512();
      _mm512_storeu_si512(out + d, _mm512_or_si512(low, _mm512_slli_epi32(high, 16)));
    }
  }
}

void scoreTile(const uint16_t *queries, int64_t ld, int64_t D, const uint32_t *keyPairs,
               float *scores) {
  const int64_t queryStride = D * 2, pairStride = kAmxKeys * 4, scoreStride = kAmxKeys * 4;
  // Two row tiles by two key tiles at a time: 4 sums, 2 A and 2 B tiles.
  for (int64_t r = 0; r < ld; r += 32) {
    const bool twoRows = r + 16 < ld;
    for (int64_t j = 0; j < kAmxKeys; j += 32) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t d = 0; d < D; d += 32)
        multiplyStep(queries + r * D + d, queryStride, keyPairs + (d / 2) * kAmxKeys + j,
                     pairStride, twoRows);
      storeSums(scores + r * kAmxKeys + j, scoreStride, twoRows);
    }
  }
}

void softmaxTile(float *scores, int64_t rows, const uint64_t *allowed, float *maximum,
                 float *sum, float *acc, int64_t D, uint16_t *probabilities) {
  using detail::expVector;
  const __m512 negativeInfinity = _mm512_set1_ps(-__builtin_inff());
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t *out = probabilities + r * kAmxKeys;
    const uint64_t seen = allowed[r];
    if (seen == 0) {
      _mm512_storeu_si512(out, _mm512_setzero_si512());
      _mm512_storeu_si512(out + 32, _mm512_setzero_si512());
      continue;
    }
    float *row = scores + r * kAmxKeys;
    __m512 s[4];
    __m512 top = _mm512_set1_ps(maximum[r]);
    for (int v = 0; v < 4; ++v) {
      const auto mask = static_cast<__mmask16>(seen >> (16 * v));
      s[v] = _mm512_mask_loadu_ps(negativeInfinity, mask, row + 16 * v);
      top = _mm512_max_ps(top, s[v]);
    }
    const float newMaximum = _mm512_reduce_max_ps(top);
    const __m512 negatedTop = _mm512_set1_ps(-newMaximum);
    __m512 total = _mm512_setzero_ps();
    for (int v = 0; v < 4; ++v) {
      const auto mask = static_cast<__mmask16>(seen >> (16 * v));
      s[v] = _mm512_maskz_mov_ps(mask, expForWeights(_mm512_add_ps(s[v], negatedTop)));
      total = _mm512_add_ps(total, s[v]);
    }
    _mm512_storeu_si512(out, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(s[1], s[0])));
    _mm512_storeu_si512(out + 32, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(s[3], s[2])));
    // e^(old - new): 0 while the row had no score (its sum and sums are 0 too).
    const float factor = maximum[r] == newMaximum            ? 1.0f
                         : maximum[r] == -__builtin_inff() ? 0.0f
                                                           : _mm512_cvtss_f32(expVector<Avx512>(
                                                                 _mm512_set1_ps(maximum[r] - newMaximum)));
    maximum[r] = newMaximum;
    sum[r] = sum[r] * factor + _mm512_reduce_add_ps(total);
    if (factor != 1.0f) {
      const __m512 scale = _mm512_set1_ps(factor);
      float *accRow = acc + r * D;
      for (int64_t d = 0; d < D; d += 16)
        _mm512_storeu_ps(accRow + d, _mm512_mul_ps(_mm512_loadu_ps(accRow + d), scale));
    }
  }
}

void accumulateTile(const uint16_t *probabilities, int64_t ld, const uint32_t *valuePairs,
                    int64_t D, float *acc) {
  const int64_t accStride = D * 4, pairStride = D * 4, probabilityStride = kAmxKeys * 2;
  for (int64_t r = 0; r < ld; r += 32) {
    const bool twoRows = r + 16 < ld;
    for (int64_t d = 0; d < D; d += 32) {
      float *c = acc + r * D + d;
      loadSums(c, accStride, twoRows);
      for (int64_t j = 0; j < kAmxKeys; j += 32)
        multiplyStep(probabilities + r * kAmxKeys + j, probabilityStride,
                     valuePairs + (j / 2) * D + d, pairStride, twoRows);
      storeSums(c, accStride, twoRows);
    }
  }
}

void roundScaled(const float *from, int64_t count, float scale, uint16_t *to) {
  const __m512 factor = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < count; i += 16) {
    // The last vector masked: the same rounding for every element, no scalar tail.
    const auto mask = static_cast<__mmask16>(count - i >= 16 ? 0xFFFF : (1u << (count - i)) - 1);
    const __m512 scaled = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, from + i), factor);
    const __m512i bits = _mm512_castsi256_si512(
        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(scaled)));
    _mm512_mask_storeu_epi16(to + i, static_cast<__mmask32>(mask), bits);
  }
}

} // namespace dsrt::ops::fast::amx

DSRT_TARGET_REGION_END
