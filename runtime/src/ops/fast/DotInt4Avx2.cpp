// int4 weights times int8 activations with AVX2, for CPUs without AVX-512 VNNI (issue 43:
// "with AVX2 where not"): the same quantization of x and the same layout as
// DotInt4Vnni.cpp (Int4Activations), two 32-input blocks per step of 256 bits. Compiled for
// AVX2, FMA and F16C (a target region: TargetRegion.h), and run only where the CPU has them.
//
// Without vpdpbusd, a step multiplies codes (unsigned) by int8 x with vpmaddubsw, which
// adds neighbouring products into int16 (at most 2 * 15 * 127: no saturation), adds the
// low and high nibbles' halves (at most 7620), and vpmaddwd by ones sums pairs into int32:
// lanes 0-3 hold the first block, 4-7 the second. As with VNNI, the sums start from each
// block's -8 * sum(xq), are converted once per block and scaled by the weight group's scale
// times the block's. Against unpacking codes to f32 (DotKernels.h's int4 path), it takes
// about half the instructions per weight. Its bound and its exact arithmetic are the VNNI
// kernel's, checked by the same tests under DSRT_CPU_ISA=avx2.
#include "ops/fast/TargetRegion.h"

DSRT_TARGET_REGION_BEGIN("avx2,fma,f16c")
#include "ops/fast/DotKernels.h"

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;
constexpr int64_t kStepBlocks = 4;  // Int4Activations' steps: 16 lanes, two of ours

int64_t stepsOf(int64_t in) { return (in / kBlock + kStepBlocks - 1) / kStepBlocks; }

void quantizeRow(const float *x, int64_t in, QuantizedInt4Row &row) {
  const int64_t blocks = in / kBlock, steps = stepsOf(in);
  row.even.resize(static_cast<size_t>(in / 2));
  row.odd.resize(static_cast<size_t>(in / 2));
  row.scaleLanes.assign(static_cast<size_t>(steps * 16), 0.0f);
  row.offsetLanes.assign(static_cast<size_t>(steps * 16), 0);
  const __m256 signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t b = 0; b < blocks; ++b) {
    const float *block = x + b * kBlock;
    __m256 maximum = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i)
      maximum = _mm256_max_ps(maximum, _mm256_and_ps(_mm256_loadu_ps(block + 8 * i), signless));
    __m128 folded = _mm_max_ps(_mm256_castps256_ps128(maximum), _mm256_extractf128_ps(maximum, 1));
    folded = _mm_max_ps(folded, _mm_movehl_ps(folded, folded));
    folded = _mm_max_ss(folded, _mm_movehdup_ps(folded));
    const float largest = _mm_cvtss_f32(folded);
    const float scale = largest / 127.0f, inverse = int8CodeFactor(largest);
    int sum = 0;
    for (int64_t j = 0; j < kBlock / 2; ++j) {
      // Rounded to nearest even, as the VNNI kernel's vcvtps2dq.
      const auto even = static_cast<int8_t>(std::nearbyint(block[2 * j] * inverse));
      const auto odd = static_cast<int8_t>(std::nearbyint(block[2 * j + 1] * inverse));
      row.even[static_cast<size_t>(b * kBlock / 2 + j)] = even;
      row.odd[static_cast<size_t>(b * kBlock / 2 + j)] = odd;
      sum += even + odd;
    }
    const size_t lane = static_cast<size_t>((b / kStepBlocks) * 16 + (b % kStepBlocks) * 4);
    for (size_t l = 0; l < 4; ++l)
      row.scaleLanes[lane + l] = scale;
    row.offsetLanes[lane] = -8 * sum;
  }
}

// 4 weight scales from `at` (the rest zero) as 8 f32 lanes' source.
struct F32Scales {
  static __m256 load(const void *scales, int64_t at, int count) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(count),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(static_cast<const float *>(scales) + at, mask);
  }
};
template <bool Bf16> struct HalfScales {
  static __m256 load(const void *scales, int64_t at, int count) {
    alignas(16) uint16_t bits[8] = {};
    for (int i = 0; i < count; ++i)
      bits[i] = static_cast<const uint16_t *>(scales)[at + i];
    const __m128i packed = _mm_load_si128(reinterpret_cast<const __m128i *>(bits));
    if (Bf16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(packed), 16));
    return _mm256_cvtph_ps(packed);
  }
};

template <int O, int R, class Scales>
void int4Block(const Int4Activations &a, const QuantizedInt4Row *x, const LinearWeights &w,
               int64_t first, float *y, int64_t ldy) {
  const int64_t in = w.in, blocks = in / kBlock, groups = w.groups;
  const __m256i nibble = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);
  const uint8_t *codes[O];
  __m256 total[O][R];
  for (int o = 0; o < O; ++o) {
    codes[o] = static_cast<const uint8_t *>(w.data) + (first + o) * (in / 2);
    for (int r = 0; r < R; ++r)
      total[o][r] = _mm256_setzero_ps();
  }
  for (int64_t half = 0; 2 * half < blocks; ++half) {
    const int64_t s = half / 2, lanes = s * 16 + (half % 2) * 8;
    const bool whole = 2 * half + 1 < blocks;  // else one block: the second lanes stay zero
    const int64_t at = half * 32;  // byte of the step in a row of codes, in x's even and odd
    const __m256i laneGroup =
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a.stepLaneGroup.data() + lanes));
    const int64_t firstGroup = a.stepFirstGroup[static_cast<size_t>(s)];
    const int groupCount = a.stepGroupCount[static_cast<size_t>(s)];
    __m256i even[R], odd[R];
    for (int r = 0; r < R; ++r) {
      if (whole) {
        even[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[r].even.data() + at));
        odd[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[r].odd.data() + at));
      } else {
        even[r] = _mm256_castsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(x[r].even.data() + at)));
        odd[r] = _mm256_castsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(x[r].odd.data() + at)));
        even[r] = _mm256_inserti128_si256(even[r], _mm_setzero_si128(), 1);
        odd[r] = _mm256_inserti128_si256(odd[r], _mm_setzero_si128(), 1);
      }
    }
    for (int o = 0; o < O; ++o) {
      const __m256i packed =
          whole ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(codes[o] + at))
                : _mm256_inserti128_si256(
                      _mm256_castsi128_si256(
                          _mm_loadu_si128(reinterpret_cast<const __m128i *>(codes[o] + at))),
                      _mm_setzero_si128(), 1);
      const __m256i low = _mm256_and_si256(packed, nibble);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
      const __m256 weightScale = _mm256_permutevar8x32_ps(
          Scales::load(w.scales, (first + o) * groups + firstGroup, groupCount), laneGroup);
      for (int r = 0; r < R; ++r) {
        const __m256i pairs =
            _mm256_add_epi16(_mm256_maddubs_epi16(low, even[r]), _mm256_maddubs_epi16(high, odd[r]));
        const __m256i sums = _mm256_add_epi32(
            _mm256_madd_epi16(pairs, ones),
            _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[r].offsetLanes.data() + lanes)));
        total[o][r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), weightScale),
                                      _mm256_loadu_ps(x[r].scaleLanes.data() + lanes),
                                      total[o][r]);
      }
    }
  }
  for (int o = 0; o < O; ++o)
    for (int r = 0; r < R; ++r) {
      __m128 sum = _mm_add_ps(_mm256_castps256_ps128(total[o][r]),
                              _mm256_extractf128_ps(total[o][r], 1));
      sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
      sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
      y[r * ldy + first + o] = _mm_cvtss_f32(sum);
    }
}

// 16 registers: 2 weight rows by up to 2 rows of x (4 totals, codes, x, scales in flight).
template <int O, class Scales>
void int4Rows(const Int4Activations &a, const LinearWeights &w, int64_t first, float *y,
              int64_t ldy) {
  const QuantizedInt4Row *rows = a.quantized.data();
  int64_t r = 0;
  for (; r + 2 <= a.rows; r += 2)
    int4Block<O, 2, Scales>(a, rows + r, w, first, y + r * ldy, ldy);
  if (r < a.rows)
    int4Block<O, 1, Scales>(a, rows + r, w, first, y + r * ldy, ldy);
}

template <class Scales>
void dotRowsWithScales(const Int4Activations &a, const LinearWeights &w, int64_t begin,
                       int64_t end, float *y, int64_t ldy) {
  const char *base = static_cast<const char *>(w.data);
  const int64_t rowBytes = w.in / 2;
  int64_t o = begin;
  for (; o + 2 <= end; o += 2) {
    const char *ahead = base + o * rowBytes + detail::kPrefetchBytes;
    const char *stop = base + end * rowBytes;
    for (const char *line = ahead; line < ahead + 2 * rowBytes && line < stop; line += 64)
      requestLine(line);
    int4Rows<2, Scales>(a, w, o, y, ldy);
  }
  for (; o < end; ++o)
    int4Rows<1, Scales>(a, w, o, y, ldy);
}

} // namespace

void quantizeInt4RowAvx2(const float *x, int64_t in, QuantizedInt4Row &row) {
  quantizeRow(x, in, row);
}

void dotRowsInt4Avx2(const Int4Activations &activations, const LinearWeights &w, int64_t begin,
                     int64_t end, float *y, int64_t ldy) {
  switch (w.scaleType) {
  case DType::F16: return dotRowsWithScales<HalfScales<false>>(activations, w, begin, end, y, ldy);
  case DType::BF16: return dotRowsWithScales<HalfScales<true>>(activations, w, begin, end, y, ldy);
  default: return dotRowsWithScales<F32Scales>(activations, w, begin, end, y, ldy);
  }
}

} // namespace dsrt::ops::fast

DSRT_TARGET_REGION_END
