// int8 and int4 weights times int8-quantized activations with AVX-512 VNNI, for products of
// many rows (prompt chunks, the engine's steps) where the CPU has no AMX (AMD's Zen 4 and 5,
// Intel before Sapphire Rapids). This file alone is built with AVX-512 VNNI's flags, and
// runs only where the CPU has it (Linear.cpp chooses it).
//
// The dot kernels (DotVnni.cpp) serve one row of x at a time: each vpdpbusd sums 64 pairs,
// half a chunk per activation block, so its int32 lanes must be scaled after every
// instruction (a conversion and an FMA per vpdpbusd, besides the surplus's load), and a
// 16-row step of GPT-2 124M's linears ran at a third of the rate of one
// row. Here x is read as the AMX kernel's B operand (packInt8AmxRows: per 16 rows and block
// of 32 inputs, 8 quads of the 16 rows' 4 inputs, one vector each), so a vector's lanes are
// 16 rows of x, and one weight quad, broadcast, multiplies them all: 8 vpdpbusd sum a whole
// block for 16 rows of one output, exactly, before one conversion and one FMA scale it. 16
// outputs' f32 sums stay in registers, transposed into y's rows at the end (as the AMX
// kernel's).
//
// vpdpbusd takes its first operand unsigned: x's codes are flipped to xq + 128 as they are
// loaded, and the surplus, 128 * sum(w) over each block of each output, is where the block's
// int32 sums start (negated), computed once per panel of 16 outputs for all its row tiles.
// Each block's int32 sum is exact, as the AMX kernel's and the dot kernels' are, so a row's
// result differs between the three by f32 rounding only, whatever its batch.
#include "ops/fast/Int8Panels.h"
#include "ops/fast/QuantizedActivations.h"

#include <algorithm>
#include <cstring>
#include <immintrin.h>
#include <vector>

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;  // inputs per activation scale

// -128 * sum of each block of 32 weights, [blocks, 16 outputs], of the panel's 16 rows.
void blockSurpluses(const int8_t *weights, int64_t in, int32_t *surplus) {
  const int64_t blocks = in / kBlock;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), zero = _mm256_setzero_si256();
  for (int64_t o = 0; o < 16; ++o)
    for (int64_t b = 0; b < blocks; ++b) {
      // sum(w + 128) by psadbw in four 64-bit lanes, less 32 * 128.
      const __m256i sums = _mm256_sad_epu8(
          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(
                               weights + o * in + b * kBlock)),
                           flip),
          zero);
      const __m128i halves =
          _mm_add_epi64(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
      const int64_t total = _mm_cvtsi128_si64(halves) + _mm_extract_epi64(halves, 1) - 32 * 128;
      surplus[b * 16 + o] = static_cast<int32_t>(-128 * total);
    }
}

// The 16 outputs of a panel (weight rows `weights`, `in` apart) for the 16 rows of x in
// `rowTile`, written to y. `panelScales` are the outputs' weight scales as f32, [16, groups].
template <bool PerChannel>
void sumTile(const Int8AmxOperands &x, const LinearWeights &w, const int8_t *weights,
             const int32_t *surplus, const float *panelScales, int64_t first, int64_t rowTile,
             float *y, int64_t ldy) {
  const int64_t in = w.in, blocks = in / kBlock, groups = w.groups,
                groupBlocks = in / groups / kBlock;
  const int8_t *xTiles = x.tiles + rowTile * blocks * 512;
  const float *xScales = x.scales + rowTile * 16;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[16];
#pragma GCC unroll 16
  for (int o = 0; o < 16; ++o)
    acc[o] = _mm512_setzero_ps();
  int64_t group = 0, groupLeft = groupBlocks;
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i quads[8];
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q)
      quads[q] = _mm512_xor_si512(_mm512_load_si512(xTiles + b * 512 + q * 64), flip);
    const __m512 rowScales = _mm512_loadu_ps(xScales + b * x.paddedRows);
    // Unrolled so that acc stays in registers (its indices constants), as GemmInt8Amx.cpp's.
#pragma GCC unroll 16
    for (int o = 0; o < 16; ++o) {
      const int8_t *row = weights + o * in + b * kBlock;
      __m512i sums = _mm512_set1_epi32(surplus[b * 16 + o]);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        int32_t quad;  // a weight row's 4 inputs, wherever the plan put the row
        std::memcpy(&quad, row + 4 * q, sizeof quad);
        sums = _mm512_dpbusd_epi32(sums, quads[q], _mm512_set1_epi32(quad));
      }
      const __m512 scale =
          PerChannel ? rowScales
                     : _mm512_mul_ps(rowScales, _mm512_set1_ps(panelScales[o * groups + group]));
      acc[o] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[o]);
    }
    if (--groupLeft == 0) {
      ++group;
      groupLeft = groupBlocks;
    }
  }
  storeTile<PerChannel>(acc, panelScales, rowTile * 16, x.rows, y + first, ldy);
}

} // namespace

void gemmInt8Vnni(const Int8AmxOperands &x, const LinearWeights &w, int64_t begin, int64_t end,
                  float *y, int64_t ldy, int8_t *int4Scratch) {
  const int64_t rowTiles = x.paddedRows / 16, in = w.in;
  thread_local std::vector<float> panelScaleRows;
  thread_local std::vector<int32_t> surplus;
  surplus.resize(static_cast<size_t>(in / kBlock * 16));
  for (int64_t first = begin; first < end; first += 16) {
    const int8_t *weights = static_cast<const int8_t *>(w.data) + first * in;
    if (w.dtype == DType::U8) {
      unpackInt4Rows(static_cast<const uint8_t *>(w.data) + first * (in / 2), 16, in,
                     int4Scratch);
      weights = int4Scratch;
    }
    blockSurpluses(weights, in, surplus.data());
    const float *panelScales = scalesOf(w, first, panelScaleRows);
    for (int64_t rt = 0; rt < rowTiles; ++rt)
      (w.groups == 1 ? sumTile<true> : sumTile<false>)(x, w, weights, surplus.data(),
                                                       panelScales, first, rt, y, ldy);
  }
}

} // namespace dsrt::ops::fast
