// int8 and int4 weights times int8-quantized activations with AVX-512 VNNI, for products of
// many rows (prompt chunks, the engine's steps) where the CPU has no AMX (AMD's Zen 4 and 5,
// Intel before Sapphire Rapids). This file alone is built with AVX-512 VNNI's flags, and
// runs only where the CPU has it (Linear.cpp chooses it).
//
// The dot kernels (DotVnni.cpp) serve one row of x at a time: each vpdpbusd sums 64 pairs,
// half a chunk per activation block, so its int32 lanes must be scaled after every
// instruction (a conversion and an FMA per vpdpbusd, besides the surplus's load), and a
// 16-row step of GPT-2 124M's linears ran at a third of the rate of one
// row. Here x is read as the AMX kernel's B operand (quantizeInt8Tiles: per 16 rows and block
// of 32 inputs, 8 quads of the 16 rows' 4 inputs, one vector each), so a vector's lanes are
// 16 rows of x, and one weight quad, broadcast, multiplies them all: 8 vpdpbusd sum a whole
// block for 16 rows of one output, exactly, before one conversion and one FMA scale it. 16
// outputs' f32 sums stay in registers, transposed into y's rows at the end (as the AMX
// kernel's).
//
// vpdpbusd takes its first operand unsigned: each panel's 16 weight rows are copied flipped
// to w + 128 (int4 ones as they are unpacked), and the surplus, 128 * sum(xq) of each block
// of each row of x, which the quantizer already has, is where the block's int32 sums start
// (negated). Each block's int32 sum is exact, as the AMX kernel's and the dot kernels' are,
// so a row's result differs between the three by f32 rounding only, whatever its batch.
#include "ops/fast/Int8Panels.h"
#include "ops/fast/QuantizedActivations.h"

#include <algorithm>
#include <cstring>
#include <immintrin.h>
#include <vector>

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;  // inputs per activation scale

// The panel's 16 weight rows (`in` apart in `rows`, int8) flipped to w + 128 into `out`.
void flipRows(const int8_t *rows, int64_t in, int8_t *out) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t o = 0; o < 16; ++o) {
    int64_t k = 0;
    for (; k + 64 <= in; k += 64)
      _mm512_storeu_si512(out + o * in + k,
                         _mm512_xor_si512(_mm512_loadu_si512(rows + o * in + k), flip));
    const __mmask64 tail = (__mmask64(1) << (in - k)) - 1;  // in - k < 64: a row's last half
    if (k < in)
      _mm512_mask_storeu_epi8(out + o * in + k, tail,
                              _mm512_xor_si512(_mm512_maskz_loadu_epi8(tail, rows + o * in + k),
                                               flip));
  }
}

// The 16 outputs of a panel (flipped weight rows `flipped`, `in` apart) for the 16 rows of x
// in `rowTile`, written to y. `panelScales` are the outputs' weight scales as f32, [16,
// groups].
template <bool PerChannel>
void sumTile(const Int8AmxOperands &x, const LinearWeights &w, const uint8_t *flipped,
             const float *panelScales, int64_t first, int64_t rowTile, float *y, int64_t ldy) {
  const int64_t in = w.in, blocks = in / kBlock, groups = w.groups,
                groupBlocks = in / groups / kBlock;
  const int8_t *xTiles = x.tiles + rowTile * blocks * 512;
  const float *xScales = x.scales + rowTile * 16;
  const int32_t *xSurpluses = x.surpluses + rowTile * 16;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int o = 0; o < 16; ++o)
    acc[o] = _mm512_setzero_ps();
  int64_t group = 0, groupLeft = groupBlocks;
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i quads[8];
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q)
      quads[q] = _mm512_load_si512(xTiles + b * 512 + q * 64);
    const __m512i surpluses = _mm512_loadu_si512(xSurpluses + b * x.paddedRows);
    const __m512 rowScales = _mm512_loadu_ps(xScales + b * x.paddedRows);
    // Unrolled so that acc stays in registers (its indices constants), as GemmInt8Amx.cpp's.
#pragma GCC unroll 16
    for (int o = 0; o < 16; ++o) {
      const uint8_t *row = flipped + o * in + b * kBlock;
      __m512i sums = surpluses;
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        int32_t quad;  // 4 flipped weights, broadcast to the 16 rows
        std::memcpy(&quad, row + 4 * q, sizeof quad);
        sums = _mm512_dpbusd_epi32(sums, _mm512_set1_epi32(quad), quads[q]);
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
                  float *y, int64_t ldy, int8_t *weightScratch) {
  const int64_t rowTiles = x.paddedRows / 16, in = w.in;
  thread_local std::vector<float> panelScaleRows;
  for (int64_t first = begin; first < end; first += 16) {
    if (w.dtype == DType::U8)
      unpackInt4Rows(static_cast<const uint8_t *>(w.data) + first * (in / 2), 16, in,
                     weightScratch);
    flipRows(w.dtype == DType::U8 ? weightScratch : static_cast<const int8_t *>(w.data) + first * in,
             in, weightScratch);
    const float *panelScales = scalesOf(w, first, panelScaleRows);
    const auto *flipped = reinterpret_cast<const uint8_t *>(weightScratch);
    for (int64_t rt = 0; rt < rowTiles; ++rt)
      (w.groups == 1 ? sumTile<true> : sumTile<false>)(x, w, flipped, panelScales, first, rt, y,
                                                       ldy);
  }
}

} // namespace dsrt::ops::fast
