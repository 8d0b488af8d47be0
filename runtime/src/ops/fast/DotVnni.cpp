// int8 weights times int8 activations with AVX-512 VNNI, for dotRows (decode and short
// prompts: up to 64 rows of x), where DSRT_CPU_ISA=avx512-vnni asks for it. This file alone is compiled with
// -mavx512vnni -mavx512bw, and runs only where the CPU has them.
//
// Each row of x is quantized to int8 in blocks of 32 inputs, each block with its own scale
// (symmetric: max |x| / 127, as llama.cpp's q8_0 activations). Then one vpdpbusd multiplies
// and sums 64 weight-activation pairs in int32: a third of the instructions per weight of
// the int8 x fp32 kernels. vpdpbusd takes its first operand unsigned, so the weights are
// flipped to q + 128. The surplus, 128 · Σ xq per block, is subtracted once per weight group:
// it does not depend on the output feature. The result differs from the fp32-activation
// kernels by at most half a quantization step of x per input:
// |Δy| <= Σ_k |w_k| · scale_block(k) / 2 (FastLinearTest checks this bound).
//
// It is not the default: on the 2-core development machine the int8 x fp32 stream kernel
// reads int8 weights as fast (both at the memory's speed), and it keeps x exact. Where
// decode is bound by instructions rather than bytes (more cores per memory channel), this
// kernel is the faster one.
#include "ops/fast/VecAvx512.h"

#include <vector>

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;  // inputs per activation scale
constexpr int64_t kChunk = 64;  // inputs per vpdpbusd

// One row of x as int8, with per-lane scales (lanes 0-7 of a chunk's int32 sums cover its
// first block, lanes 8-15 its second) and per weight group the surplus of the flipped
// weights, 128 · Σ_blocks scale · Σ xq.
struct QuantizedRow {
  std::vector<int8_t> values;
  std::vector<float> laneScales;
  std::vector<float> surplus;
};

void quantizeRow(const float *x, int64_t in, int64_t groupSize, QuantizedRow &row) {
  row.values.resize(static_cast<size_t>(in));
  row.laneScales.resize(static_cast<size_t>(in / kChunk * 16));
  row.surplus.assign(static_cast<size_t>(in / groupSize), 0.0f);
  for (int64_t b = 0; b < in / kBlock; ++b) {
    __m512 lo = _mm512_loadu_ps(x + b * kBlock), hi = _mm512_loadu_ps(x + b * kBlock + 16);
    float maximum = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    float scale = maximum / 127.0f;
    __m512 inverse = _mm512_set1_ps(maximum > 0 ? 127.0f / maximum : 0.0f);
    __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inverse));
    __m512i qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inverse));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(row.values.data() + b * kBlock),
                     _mm512_cvtsepi32_epi8(qlo));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(row.values.data() + b * kBlock + 16),
                     _mm512_cvtsepi32_epi8(qhi));
    int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi));
    row.surplus[static_cast<size_t>(b * kBlock / groupSize)] += 128.0f * scale * sum;
    float *lanes = row.laneScales.data() + (b / 2) * 16 + (b % 2) * 8;
    for (int lane = 0; lane < 8; ++lane)
      lanes[lane] = scale;
  }
}

// O weight rows from `first` against one quantized row.
template <int O>
void vnniBlock(const QuantizedRow &x, const LinearWeights &w, int64_t first, float *y) {
  const int64_t in = w.in, groups = w.groups, chunksPerGroup = in / groups / kChunk;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int8_t *rows[O];
  for (int o = 0; o < O; ++o)
    rows[o] = static_cast<const int8_t *>(w.data) + (first + o) * in;
  float total[O] = {};
  for (int64_t g = 0; g < groups; ++g) {
    __m512 acc[O];
    for (int o = 0; o < O; ++o)
      acc[o] = _mm512_setzero_ps();
    for (int64_t c = g * chunksPerGroup; c < (g + 1) * chunksPerGroup; ++c) {
      __m512i xv = _mm512_loadu_si512(x.values.data() + c * kChunk);
      __m512 scales = _mm512_loadu_ps(x.laneScales.data() + c * 16);
      for (int o = 0; o < O; ++o) {
        __m512i flipped = _mm512_xor_si512(_mm512_loadu_si512(rows[o] + c * kChunk), flip);
        __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), flipped, xv);
        acc[o] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scales, acc[o]);
      }
    }
    for (int o = 0; o < O; ++o)
      total[o] += w.scale((first + o) * groups + g) *
                  (_mm512_reduce_add_ps(acc[o]) - x.surplus[static_cast<size_t>(g)]);
  }
  for (int o = 0; o < O; ++o)
    y[first + o] = total[o];
}

void dotRowsVnni(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                 int64_t end, float *y, int64_t ldy) {
  const int64_t groupSize = w.groups > 0 ? w.in / w.groups : 0;
  if (w.dtype != DType::I8 || groupSize == 0 || groupSize % kChunk != 0)
    return detail::dotRowsWith<Avx512>(x, rows, w, begin, end, y, ldy);
  thread_local std::vector<QuantizedRow> quantized;
  if (quantized.size() < static_cast<size_t>(rows))
    quantized.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    quantizeRow(x + r * w.in, w.in, groupSize, quantized[static_cast<size_t>(r)]);
  int64_t o = begin;
  for (; o + 8 <= end; o += 8)
    for (int64_t r = 0; r < rows; ++r)
      vnniBlock<8>(quantized[static_cast<size_t>(r)], w, o, y + r * ldy);
  for (; o < end; ++o)
    for (int64_t r = 0; r < rows; ++r)
      vnniBlock<1>(quantized[static_cast<size_t>(r)], w, o, y + r * ldy);
}

} // namespace

detail::IsaKernels avx512VnniKernels() {
  detail::IsaKernels kernels = detail::kernelsOf<Avx512>("avx512-vnni");
  kernels.dotRows = &dotRowsVnni;
  return kernels;
}

} // namespace dsrt::ops::fast
