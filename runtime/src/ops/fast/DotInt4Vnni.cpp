// int4 weights (docs/int4.md) times int8-quantized activations with AVX-512 VNNI: the default
// kernel for int4 decode and short prompts (up to 64 rows of x) where the CPU has AVX-512
// VNNI and the groups are whole multiples of 32 inputs. Compiled for AVX-512
// VNNI and BW (a target region: TargetRegion.h), and run only where the CPU has them.
//
// Why: unpacking 4-bit codes to f32 costs more instructions than the multiply itself, so the
// f32-activation kernel reads int4 no faster than int8 (measured 0.44 ms against 0.31 ms for a
// 4864 x 896 matrix on one AVX-512 core). Here the codes stay integers: each 32-input block of
// x is quantized to int8 (max |x| / 127, as llama.cpp's q8 activations and ONNX Runtime's
// MatMulNBits with accuracy_level 4 do), x is split into its even and odd inputs so that a
// byte's low and high nibbles meet consecutive values, and one vpdpbusd multiplies and sums 64
// code-activation pairs. 64 bytes of codes are four blocks (a step); their int32 sums are
// scaled per block (the weight group's scale times the block's) into an f32 total. The codes'
// offset of 8 is taken off in the integers: each block's sums start from -8 * its sum of int8
// x, so it costs nothing per weight row.
//
// Per step, the work that depends on the weight row alone (loading and splitting its codes,
// loading and spreading its scales) is shared by every row of x in flight, and the loads of x
// by every weight row in flight: decode takes 4 weight rows per pass (x's loads shared 4
// ways), prompts 2 weight rows by 4 rows of x (each unpacked code used 4 times). Before, one
// weight row met each x row alone, and its scales cost as many instructions as its products.
// The weight scales are read as stored (f32, f16 or bf16), with no copy per call.
//
// It differs from the f32-activation kernel by at most half a quantization step of x per input:
// |dy| <= sum_k |w_k| * step_block(k) / 2 (FastLinearTest checks this bound). With
// DSRT_INT4_ACTIVATIONS=f32 the exact f32-activation kernel runs instead (the accuracy option).
#include "ops/fast/TargetRegion.h"

DSRT_TARGET_REGION_BEGIN("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")
#include "ops/fast/DotKernels.h"

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;      // inputs per activation scale, and per 16 bytes of codes
constexpr int64_t kStepBlocks = 4;  // blocks per step: 64 bytes of codes

int64_t stepsOf(int64_t in) { return (in / kBlock + kStepBlocks - 1) / kStepBlocks; }

void quantizeRow(const float *x, int64_t in, QuantizedInt4Row &row) {
  const int64_t blocks = in / kBlock, steps = stepsOf(in);
  row.even.resize(static_cast<size_t>(in / 2));
  row.odd.resize(static_cast<size_t>(in / 2));
  row.scaleLanes.assign(static_cast<size_t>(steps * 16), 0.0f);
  row.offsetLanes.assign(static_cast<size_t>(steps * 16), 0);
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
  for (int64_t b = 0; b < blocks; ++b) {
    const float *block = x + b * kBlock;
    const __m512 lo = _mm512_loadu_ps(block), hi = _mm512_loadu_ps(block + 16);
    const float maximum =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    const float scale = maximum / 127.0f;
    const __m512 inverse = _mm512_set1_ps(int8CodeFactor(maximum));
    // Rounded to nearest even, as std::nearbyint in the default rounding mode.
    const __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inverse));
    const __m512i qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inverse));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(row.even.data() + b * kBlock / 2),
                     _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(qlo, evens, qhi)));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(row.odd.data() + b * kBlock / 2),
                     _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(qlo, odds, qhi)));
    const size_t lane = static_cast<size_t>((b / kStepBlocks) * 16 + (b % kStepBlocks) * 4);
    for (size_t l = 0; l < 4; ++l)
      row.scaleLanes[lane + l] = scale;
    row.offsetLanes[lane] = -8 * _mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi));
  }
}

// 16 lanes of weight scales: the groups [first, first + count) of a row, loaded as stored
// (count <= 4, the rest zero) and widened to f32.
struct F32Scales {
  static __m512 load(const void *scales, int64_t at, __mmask16 count) {
    return _mm512_maskz_loadu_ps(count, static_cast<const float *>(scales) + at);
  }
};
struct F16Scales {
  static __m512 load(const void *scales, int64_t at, __mmask16 count) {
    const __m512i bits =
        _mm512_maskz_loadu_epi16(count, static_cast<const uint16_t *>(scales) + at);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(bits));
  }
};
struct BF16Scales {
  static __m512 load(const void *scales, int64_t at, __mmask16 count) {
    const __m512i bits =
        _mm512_maskz_loadu_epi16(count, static_cast<const uint16_t *>(scales) + at);
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(bits)), 16));
  }
};

// O weight rows from `first` against R quantized rows of x from `x`, written at
// y[r * ldy + first + o].
template <int O, int R, class Scales>
void int4Block(const Int4Activations &a, const QuantizedInt4Row *x, const LinearWeights &w,
               int64_t first, float *y, int64_t ldy) {
  const int64_t in = w.in, blocks = in / kBlock, steps = stepsOf(in), groups = w.groups;
  const __m512i nibble = _mm512_set1_epi8(0xF);
  const uint8_t *codes[O];
  int64_t scaleRow[O];
  __m512 total[O][R];
  for (int o = 0; o < O; ++o) {
    codes[o] = static_cast<const uint8_t *>(w.data) + (first + o) * (in / 2);
    scaleRow[o] = (first + o) * groups;
    for (int r = 0; r < R; ++r)
      total[o][r] = _mm512_setzero_ps();
  }
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t count = std::min<int64_t>(kStepBlocks, blocks - s * kStepBlocks);
    const __mmask64 bytes = count == kStepBlocks ? ~__mmask64(0) : (__mmask64(1) << (16 * count)) - 1;
    const int64_t at = s * 64;  // byte of the step in a row of codes, in x's even and odd
    const __m512i laneGroup = _mm512_loadu_si512(a.stepLaneGroup.data() + s * 16);
    const int64_t firstGroup = a.stepFirstGroup[static_cast<size_t>(s)];
    const auto groupMask = static_cast<__mmask16>((1u << a.stepGroupCount[static_cast<size_t>(s)]) - 1);
    __m512i even[R], odd[R];
    for (int r = 0; r < R; ++r) {
      even[r] = _mm512_maskz_loadu_epi8(bytes, x[r].even.data() + at);
      odd[r] = _mm512_maskz_loadu_epi8(bytes, x[r].odd.data() + at);
    }
    for (int o = 0; o < O; ++o) {
      const __m512i packed = _mm512_maskz_loadu_epi8(bytes, codes[o] + at);
      const __m512i low = _mm512_and_si512(packed, nibble);
      const __m512i high = _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble);
      const __m512 weightScale = _mm512_permutexvar_ps(
          laneGroup, Scales::load(w.scales, scaleRow[o] + firstGroup, groupMask));
      for (int r = 0; r < R; ++r) {
        __m512i sums = _mm512_dpbusd_epi32(
            _mm512_loadu_si512(x[r].offsetLanes.data() + s * 16), low, even[r]);
        sums = _mm512_dpbusd_epi32(sums, high, odd[r]);
        total[o][r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sums), weightScale),
                                      _mm512_loadu_ps(x[r].scaleLanes.data() + s * 16),
                                      total[o][r]);
      }
    }
  }
  for (int o = 0; o < O; ++o)
    for (int r = 0; r < R; ++r)
      y[r * ldy + first + o] = _mm512_reduce_add_ps(total[o][r]);
}

// Rows of x [r, r + R) in chunks of at most 4, against O weight rows from `first`.
template <int O, class Scales>
void int4Rows(const Int4Activations &a, const LinearWeights &w, int64_t first, float *y,
              int64_t ldy) {
  const QuantizedInt4Row *rows = a.quantized.data();
  for (int64_t r = 0; r < a.rows; r += 4) {
    float *out = y + r * ldy;
    switch (std::min<int64_t>(4, a.rows - r)) {
    case 4: int4Block<O, 4, Scales>(a, rows + r, w, first, out, ldy); break;
    case 3: int4Block<O, 3, Scales>(a, rows + r, w, first, out, ldy); break;
    case 2: int4Block<O, 2, Scales>(a, rows + r, w, first, out, ldy); break;
    default: int4Block<O, 1, Scales>(a, rows + r, w, first, out, ldy); break;
    }
  }
}

template <class Scales>
void dotRowsWithScales(const Int4Activations &a, const LinearWeights &w, int64_t begin,
                       int64_t end, float *y, int64_t ldy) {
  const char *base = static_cast<const char *>(w.data);
  const int64_t rowBytes = w.in / 2;
  // Decode shares x's loads among 4 weight rows; prompts share each row's unpacked codes
  // among 4 rows of x, and take weight rows in pairs to stay within the 32 registers.
  const int64_t perPass = a.rows == 1 ? 4 : 2;
  int64_t o = begin;
  for (; o + perPass <= end; o += perPass) {
    // As dotRowsTyped: the rows a fixed distance ahead requested, within the range; into L2,
    // where requests into L1 held the fill buffers that the pass's own loads wait on (one row
    // of 4864 x 896 from memory, dsrt-linear-bench --dtype int4 --copies 32, Zen 4: 0.10-0.14
    // -> 0.08-0.10 ms; int8's and f32's kernels measured no better so).
    const char *ahead = base + o * rowBytes + detail::kPrefetchBytes;
    const char *stop = base + end * rowBytes;
    for (const char *line = ahead; line < ahead + perPass * rowBytes && line < stop; line += 64)
      requestLineL2(line);
    if (perPass == 4)
      int4Rows<4, Scales>(a, w, o, y, ldy);
    else
      int4Rows<2, Scales>(a, w, o, y, ldy);
  }
  for (; o < end; ++o)
    int4Rows<1, Scales>(a, w, o, y, ldy);
}

} // namespace

void quantizeInt4RowAvx512(const float *x, int64_t in, QuantizedInt4Row &row) {
  quantizeRow(x, in, row);
}

void dotRowsInt4Vnni(const Int4Activations &activations, const LinearWeights &w, int64_t begin,
                     int64_t end, float *y, int64_t ldy) {
  switch (w.scaleType) {
  case DType::F16: return dotRowsWithScales<F16Scales>(activations, w, begin, end, y, ldy);
  case DType::BF16: return dotRowsWithScales<BF16Scales>(activations, w, begin, end, y, ldy);
  default: return dotRowsWithScales<F32Scales>(activations, w, begin, end, y, ldy);
  }
}

} // namespace dsrt::ops::fast

DSRT_TARGET_REGION_END
