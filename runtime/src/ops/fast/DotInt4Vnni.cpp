// int4 weights (docs/int4.md) times int8-quantized activations with AVX-512 VNNI: the default
// kernel for int4 decode and short prompts (up to 64 rows of x) where the CPU has AVX-512
// VNNI and the groups are whole multiples of 32 inputs. Rows of x go four at a time past each
// weight row, which stays in L1 between them. This file alone is compiled with -mavx512vnni -mavx512bw, and
// runs only where the CPU has them.
//
// Why: unpacking 4-bit codes to f32 costs more instructions than the multiply itself, so the
// f32-activation kernel reads int4 no faster than int8 (measured 0.44 ms against 0.31 ms for a
// 4864 x 896 matrix on one AVX-512 core). Here the codes stay integers: each 32-input block of
// x is quantized to int8 (max |x| / 127, as llama.cpp's q8 activations and ONNX Runtime's
// MatMulNBits with accuracy_level 4 do), x is split into its even and odd inputs so that a
// byte's low and high nibbles meet consecutive values, and one vpdpbusd multiplies and sums 64
// code-activation pairs. 64 bytes of codes are four blocks; their int32 sums are scaled per
// block (the weight group's scale times the block's) into an f32 total. The codes' offset of 8
// is taken off once per block, as 8 * the block's sum of int8 x.
//
// It differs from the f32-activation kernel by at most half a quantization step of x per input:
// |dy| <= sum_k |w_k| * step_block(k) / 2 (FastLinearTest checks this bound). With
// DSRT_INT4_ACTIVATIONS=f32 the exact f32-activation kernel runs instead (the accuracy option).
#include "ops/fast/DotKernels.h"

#include <immintrin.h>

#include <vector>

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;  // inputs per activation scale, and per 16 bytes of codes

void quantizeRow(const float *x, int64_t in, QuantizedInt4Row &row) {
  const int64_t blocks = in / kBlock;
  row.even.resize(static_cast<size_t>(in / 2));
  row.odd.resize(static_cast<size_t>(in / 2));
  row.scales.assign(static_cast<size_t>((blocks + 3) / 4 * 4), 0.0f);
  row.offsets.assign(row.scales.size(), 0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    const float *block = x + b * kBlock;
    __m512 lo = _mm512_loadu_ps(block), hi = _mm512_loadu_ps(block + 16);
    float maximum = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    const float scale = maximum / 127.0f, inverse = maximum > 0 ? 127.0f / maximum : 0.0f;
    int sum = 0;
    for (int64_t j = 0; j < kBlock / 2; ++j) {
      const auto even = static_cast<int8_t>(std::nearbyint(block[2 * j] * inverse));
      const auto odd = static_cast<int8_t>(std::nearbyint(block[2 * j + 1] * inverse));
      row.even[static_cast<size_t>(b * kBlock / 2 + j)] = even;
      row.odd[static_cast<size_t>(b * kBlock / 2 + j)] = odd;
      sum += even + odd;
    }
    row.scales[static_cast<size_t>(b)] = scale;
    row.offsets[static_cast<size_t>(b)] = 8.0f * scale * static_cast<float>(sum);
  }
}

// Weight row `o` against R quantized rows: four blocks (64 bytes) per step, the last step
// masked to the blocks that are left.
template <int R>
void int4Row(const QuantizedInt4Row *x, const int32_t *blockGroups, const LinearWeights &w,
             int64_t o, float *y, int64_t ldy) {
  const int64_t in = w.in, blocks = in / kBlock, groupSize = in / w.groups;
  const int64_t blocksPerGroup = groupSize / kBlock;
  const uint8_t *row = static_cast<const uint8_t *>(w.data) + o * (in / 2);
  const float *weightScales = w.scales + o * w.groups;
  const __m512i nibble = _mm512_set1_epi8(0xF);
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m512 total[R];
  __m128 offset[R];
  for (int r = 0; r < R; ++r) {
    total[r] = _mm512_setzero_ps();
    offset[r] = _mm_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; b += 4) {
    const int64_t count = std::min<int64_t>(4, blocks - b);
    const __mmask64 bytes = count == 4 ? ~__mmask64(0) : (__mmask64(1) << (16 * count)) - 1;
    const __m512i codes = _mm512_maskz_loadu_epi8(bytes, row + b * kBlock / 2);
    const __m512i low = _mm512_and_si512(codes, nibble);
    const __m512i high = _mm512_and_si512(_mm512_srli_epi16(codes, 4), nibble);
    // The weight groups' scales of these blocks, 0 for absent ones: one masked load for
    // groups of one block, else a gather of each block's group.
    const __mmask16 lanes = static_cast<__mmask16>((1u << count) - 1);
    const __m128 weightScale =
        blocksPerGroup == 1
            ? _mm512_castps512_ps128(_mm512_maskz_loadu_ps(lanes, weightScales + b))
            : _mm_mask_i32gather_ps(
                  _mm_setzero_ps(), weightScales,
                  _mm_loadu_si128(reinterpret_cast<const __m128i *>(blockGroups + b)),
                  _mm_castsi128_ps(_mm_cmplt_epi32(_mm_setr_epi32(0, 1, 2, 3),
                                                   _mm_set1_epi32(int(count)))),
                  4);
    for (int r = 0; r < R; ++r) {
      const __m512i even = _mm512_maskz_loadu_epi8(bytes, x[r].even.data() + b * kBlock / 2);
      const __m512i odd = _mm512_maskz_loadu_epi8(bytes, x[r].odd.data() + b * kBlock / 2);
      __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), low, even);
      sums = _mm512_dpbusd_epi32(sums, high, odd);
      const __m128 blockScale = _mm_mul_ps(weightScale, _mm_loadu_ps(x[r].scales.data() + b));
      const __m512 scale = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(blockScale));
      total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, total[r]);
      offset[r] = _mm_fmadd_ps(weightScale, _mm_loadu_ps(x[r].offsets.data() + b), offset[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m128 folded = _mm_add_ps(offset[r], _mm_movehl_ps(offset[r], offset[r]));
    folded = _mm_add_ss(folded, _mm_movehdup_ps(folded));
    y[r * ldy + o] = _mm512_reduce_add_ps(total[r]) - _mm_cvtss_f32(folded);
  }
}

} // namespace

void quantizeInt4Activations(const float *x, int64_t rows, const LinearWeights &w,
                             Int4Activations &out) {
  out.rows = rows;
  if (out.quantized.size() < static_cast<size_t>(rows))
    out.quantized.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    quantizeRow(x + r * w.in, w.in, out.quantized[static_cast<size_t>(r)]);
  // Each block's weight group, padded to whole steps of 4 blocks (the gather's indices).
  const int64_t blocks = w.in / kBlock, blocksPerGroup = w.in / w.groups / kBlock;
  out.blockGroups.assign(static_cast<size_t>((blocks + 3) / 4 * 4), 0);
  for (int64_t b = 0; b < blocks; ++b)
    out.blockGroups[static_cast<size_t>(b)] = static_cast<int32_t>(b / blocksPerGroup);
}

void dotRowsInt4Vnni(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                     int64_t end, float *y, int64_t ldy) {
  thread_local Int4Activations quantized;
  quantizeInt4Activations(x, rows, w, quantized);
  dotRowsInt4Vnni(quantized, w, begin, end, y, ldy);
}

void dotRowsInt4Vnni(const Int4Activations &activations, const LinearWeights &w, int64_t begin,
                     int64_t end, float *y, int64_t ldy) {
  const int64_t rows = activations.rows;
  const QuantizedInt4Row *quantizedRows = activations.quantized.data();
  const int32_t *blockGroups = activations.blockGroups.data();
  const char *base = static_cast<const char *>(w.data);
  const int64_t rowBytes = w.in / 2;
  for (int64_t o = begin; o < end; ++o) {
    // As dotRowsTyped: the next rows of the range requested a fixed distance ahead.
    const char *ahead = base + o * rowBytes + detail::kPrefetchBytes;
    const char *stop = base + end * rowBytes;
    for (const char *line = ahead; line < ahead + rowBytes && line < stop; line += 64)
      __builtin_prefetch(line);
    for (int64_t r = 0; r < rows; r += 4) {
      const QuantizedInt4Row *block = quantizedRows + r;
      float *out = y + r * ldy;
      switch (std::min<int64_t>(4, rows - r)) {
      case 4: int4Row<4>(block, blockGroups, w, o, out, ldy); break;
      case 3: int4Row<3>(block, blockGroups, w, o, out, ldy); break;
      case 2: int4Row<2>(block, blockGroups, w, o, out, ldy); break;
      default: int4Row<1>(block, blockGroups, w, o, out, ldy); break;
      }
    }
  }
}

} // namespace dsrt::ops::fast
