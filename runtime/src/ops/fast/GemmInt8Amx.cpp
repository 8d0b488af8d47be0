// int8 and int4 weights times int8-quantized activations on AMX-INT8, for products of many rows
// (prompt chunks, the engine's steps): one tile product sums 16 x 16 x 32 int8 pairs, where
// vpdpbusd sums 16 x 4. This file alone is built with AMX's and AVX-512's flags, and runs only
// where int8AmxAvailable() said so (Linear.cpp chooses it).
//
// The operands are swapped against the usual GEMM so that the weights need no packing: A is
// 16 weight rows of 32 inputs, read where the plan stores them (row stride `in`; int4 rows
// are unpacked to int8 first, 32 at a time, and each reused by every row tile), B is 16
// rows of x in AMX's layout (packInt8ActivationsForAmx: 8 rows of 4-input quads per block),
// so a sum tile is [16 outputs, 16 rows of x]. One block of 32 inputs is one activation
// scale, so each block's int32 sums are exact and go to f32 once: y = Σ_b float(isum_b) *
// (xscale_b * wscale_g(b)). The dot kernels (DotVnni.cpp, DotInt4Vnni.cpp) sum the same
// exact block sums in another order, so a row's result differs between them by f32 rounding
// only, whatever its batch (FastLinearTest, Int8AmxTest).
#include "ops/fast/AmxTileConfig.h"
#include "ops/fast/QuantizedActivations.h"

#include <immintrin.h>

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;  // inputs per activation scale and per tile product

// Tiles 0-1: int32 sums [16 outputs, 16 rows of x] (even and odd blocks); 4-5: A, 16 weight
// rows of 32 int8; 6-7: B, a row tile's block of x, 8 quads x 16 rows.
const AmxTileConfig &tileConfig() {
  static const AmxTileConfig config = AmxTileConfig()
                                          .tile(0, 16, 64)
                                          .tile(1, 16, 64)
                                          .tile(4, 16, kBlock)
                                          .tile(5, 16, kBlock)
                                          .tile(6, kBlock / 4, 64)
                                          .tile(7, kBlock / 4, 64);
  return config;
}

// One sum tile (16 outputs from `first`, the 16 rows of x of `rowTile`) with its f32 sums in
// registers, two blocks a step on alternating tiles: block b + 1's product runs while block
// b's sums are scaled (tile 0 even blocks, tile 1 odd; A in 4/5, B in 6/7).
// With one group per row (int8 per channel) the weight scales wait for the end.
template <bool PerChannel>
inline void scaleBlock(const int32_t (*sums)[16], __m512 xScales, const float *weightScales,
                       __m512 *acc) {
  for (int i = 0; i < 16; ++i)
    acc[i] = _mm512_fmadd_ps(
        _mm512_cvtepi32_ps(_mm512_load_si512(sums[i])),
        PerChannel ? xScales : _mm512_mul_ps(xScales, _mm512_set1_ps(weightScales[i])), acc[i]);
}

template <bool PerChannel>
void sumTile(const Int8AmxOperands &x, const LinearWeights &w, const int8_t *weights,
             int64_t first, int64_t rowTile, float *y, int64_t ldy) {
  const int64_t in = w.in, blocks = in / kBlock, groupBlocks = in / w.groups / kBlock;
  const int8_t *xTiles = x.tiles + rowTile * blocks * 512;
  const float *xScales = x.scales + rowTile * 16;
  alignas(64) int32_t sums[2][16][16];
  alignas(64) float weightScales[16];
  __m512 acc[16];
  for (int i = 0; i < 16; ++i)
    acc[i] = _mm512_setzero_ps();
  auto loadScales = [&](int64_t b) {
    if (b % groupBlocks == 0)
      for (int i = 0; i < 16; ++i)
        weightScales[i] = w.scale((first + i) * w.groups + b / groupBlocks);
  };
  _tile_loadd(4, weights, in);
  _tile_loadd(6, xTiles, 64);
  _tile_zero(0);
  _tile_dpbssd(0, 4, 6);
  for (int64_t b = 0; b < blocks; b += 2) {
    const bool odd = b + 1 < blocks;
    if (odd) {
      _tile_loadd(5, weights + (b + 1) * kBlock, in);
      _tile_loadd(7, xTiles + (b + 1) * 512, 64);
      _tile_zero(1);
      _tile_dpbssd(1, 5, 7);
    }
    _tile_stored(0, sums[0], 64);
    loadScales(b);
    scaleBlock<PerChannel>(sums[0], _mm512_loadu_ps(xScales + b * x.paddedRows), weightScales, acc);
    if (!odd)
      break;
    if (b + 2 < blocks) {
      _tile_loadd(4, weights + (b + 2) * kBlock, in);
      _tile_loadd(6, xTiles + (b + 2) * 512, 64);
      _tile_zero(0);
      _tile_dpbssd(0, 4, 6);
    }
    _tile_stored(1, sums[1], 64);
    loadScales(b + 1);
    scaleBlock<PerChannel>(sums[1], _mm512_loadu_ps(xScales + (b + 1) * x.paddedRows), weightScales, acc);
  }
  // acc is [output, row of x]: y is [row of x, output].
  alignas(64) float out[16][16];
  for (int i = 0; i < 16; ++i)
    _mm512_store_ps(out[i], PerChannel ? _mm512_mul_ps(acc[i], _mm512_set1_ps(weightScales[i]))
                                       : acc[i]);
  const int64_t firstRow = rowTile * 16;
  for (int64_t l = 0; l < 16 && firstRow + l < x.rows; ++l)
    for (int i = 0; i < 16; ++i)
      y[(firstRow + l) * ldy + first + i] = out[i][l];
}

// int4 rows (two codes a byte, the even input low, minus 8: docs/int4.md) as int8 rows.
void unpackInt4Rows(const uint8_t *codes, int64_t rows, int64_t in, int8_t *out) {
  const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < in / 2; j += 16) {
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

} // namespace

bool gemmInt8AmxTakes(const LinearWeights &w) {
  return (w.dtype == DType::I8 || w.dtype == DType::U8) && w.groups > 0 &&
         w.in % (w.groups * kBlock) == 0;
}

void gemmInt8Amx(const Int8AmxOperands &x, const LinearWeights &w, int64_t begin, int64_t end,
                 float *y, int64_t ldy, int8_t *int4Scratch) {
  const int64_t rowTiles = x.paddedRows / 16, in = w.in;
  _tile_loadconfig(&tileConfig());
  for (int64_t first = begin; first < end; first += 32) {
    const bool two = end - first >= 32;
    const int8_t *weights = static_cast<const int8_t *>(w.data) + first * in;
    if (w.dtype == DType::U8) {
      unpackInt4Rows(static_cast<const uint8_t *>(w.data) + first * (in / 2), two ? 32 : 16, in,
                     int4Scratch);
      weights = int4Scratch;
    }
    for (int64_t o = 0; o < (two ? 2 : 1); ++o)
      for (int64_t rt = 0; rt < rowTiles; ++rt)
        (w.groups == 1 ? sumTile<true> : sumTile<false>)(x, w, weights + o * 16 * in,
                                                         first + o * 16, rt, y, ldy);
  }
  _tile_release();
}

} // namespace dsrt::ops::fast
