// int8 and int4 weights times int8-quantized activations on AMX-INT8, for products of many rows
// (prompt chunks, the engine's steps): one tile product sums 16 x 16 x 32 int8 pairs, where
// vpdpbusd sums 16 x 4. Compiled for AMX and AVX-512 (a target region: TargetRegion.h), and run
// only where int8AmxAvailable() said so (Linear.cpp chooses it).
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
#include "ops/fast/TargetRegion.h"

DSRT_TARGET_REGION_BEGIN("amx-tile,amx-int8,avx512f,avx512bw,avx2,fma,f16c")
#include "ops/fast/Int8Panels.h"

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;  // inputs per activation scale and per tile product

// Tiles 0-3: int32 sums [16 outputs, 16 rows of x] (blocks round robin); 4-5: A, 16 weight
// rows of 32 int8; 6-7: B, a row tile's block of x, 8 quads x 16 rows.
const AmxTileConfig &tileConfig() {
  static const AmxTileConfig config = AmxTileConfig()
                                          .tile(0, 16, 64)
                                          .tile(1, 16, 64)
                                          .tile(2, 16, 64)
                                          .tile(3, 16, 64)
                                          .tile(4, 16, kBlock)
                                          .tile(5, 16, kBlock)
                                          .tile(6, kBlock / 4, 64)
                                          .tile(7, kBlock / 4, 64);
  return config;
}

// One block's int32 sums, stored from its tile, into the f32 sums of the tile's 16 outputs
// (acc[i]: output i, a lane per row of x). With one group per row (int8 per channel) the
// weight scales wait for the end. The loops over the 16 accumulators are unrolled by
// pragma: GCC keeps an array in registers only once its indices are constants, and spilled,
// each scaled block cost a load and a store per accumulator besides its two arithmetic
// instructions.
// With groups, output i's scale of the block's group is groupScales[i * groups].
template <bool PerChannel>
inline void scaleBlock(const int32_t (*sums)[16], __m512 xScales, const float *groupScales,
                       int64_t groups, __m512 *acc) {
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    acc[i] = _mm512_fmadd_ps(
        _mm512_cvtepi32_ps(_mm512_load_si512(sums[i])),
        PerChannel ? xScales : _mm512_mul_ps(xScales, _mm512_set1_ps(groupScales[i * groups])),
        acc[i]);
}

// Block b's product into sum tile SUM, from weight tile A and x tile B. A macro: GCC's tile
// intrinsics paste the tile's number into the instruction's text, so it must be a literal.
#define DSRT_ISSUE_BLOCK(SUM, A, B, b)                                                         \
  do {                                                                                         \
    _tile_loadd(A, weights + (b) * kBlock, in);                                                \
    _tile_loadd(B, xTiles + (b) * 512, 64);                                                    \
    _tile_zero(SUM);                                                                           \
    _tile_dpbssd(SUM, A, B);                                                                   \
  } while (false)

// One sum tile (16 outputs from `first`, the 16 rows of x of `rowTile`) with its f32 sums in
// registers: four sum tiles round robin (A in tiles 4/5, B in 6/7 alternately), each block's
// product issued two blocks before its sums are scaled. `panelScales` are the 16 outputs'
// weight scales as f32, [16, groups]. With `nextRows`, the next panel's 16 weight rows
// (contiguous: 16 x rowBytes) are requested into L2 along the way, a block's share of their
// lines at each block in ascending order. Requested as the tiles read them (a line of each
// of the 16 rows, rowBytes apart, every other block), the GPT-2 int8 engine's linears took
// 2-5% more and its LM head 4-6% more.
template <bool PerChannel>
void sumTile(const Int8AmxOperands &x, const LinearWeights &w, const int8_t *weights,
             const float *panelScales, int64_t first, int64_t rowTile, float *y, int64_t ldy,
             const char *nextRows, int64_t rowBytes) {
  const int64_t in = w.in, blocks = in / kBlock, groups = w.groups,
                groupBlocks = in / groups / kBlock;
  const int8_t *xTiles = x.tiles + rowTile * blocks * 512;
  const int64_t linesPerBlock = 16 * rowBytes / 64 / blocks;
  const float *xScales = x.scales + rowTile * 16;
  alignas(64) int32_t sums[4][16][16];
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    acc[i] = _mm512_setzero_ps();
  // The group of the block being scaled, counted along (no division a block).
  int64_t group = 0, groupLeft = groupBlocks;
  // Block b's sums from its tile into registers, scaled (a macro, as a lambda capturing acc
  // made GCC keep acc in memory).
#define DSRT_SCALE_BLOCK(b, blockSums)                                                         \
  do {                                                                                         \
    if (nextRows)                                                                              \
      for (int64_t line = (b) * linesPerBlock; line < ((b) + 1) * linesPerBlock; ++line)      \
        _mm_prefetch(nextRows + line * 64, _MM_HINT_T1);                                       \
    scaleBlock<PerChannel>(blockSums, _mm512_loadu_ps(xScales + (b) * x.paddedRows),           \
                           panelScales + group, groups, acc);                                  \
    if (--groupLeft == 0) {                                                                    \
      ++group;                                                                                 \
      groupLeft = groupBlocks;                                                                 \
    }                                                                                          \
  } while (false)
  // Four sum tiles round robin, two blocks ahead (a microbenchmark of the tile work and the
  // scaling: 13 ns a block, against 16 with two tiles, one block ahead).
  DSRT_ISSUE_BLOCK(0, 4, 6, 0);
  if (blocks > 1)
    DSRT_ISSUE_BLOCK(1, 5, 7, 1);
  for (int64_t b = 0; b < blocks; b += 4) {
    if (b + 2 < blocks)
      DSRT_ISSUE_BLOCK(2, 4, 6, b + 2);
    _tile_stored(0, sums[0], 64);
    DSRT_SCALE_BLOCK(b, sums[0]);
    if (b + 1 >= blocks)
      break;
    if (b + 3 < blocks)
      DSRT_ISSUE_BLOCK(3, 5, 7, b + 3);
    _tile_stored(1, sums[1], 64);
    DSRT_SCALE_BLOCK(b + 1, sums[1]);
    if (b + 2 >= blocks)
      break;
    if (b + 4 < blocks)
      DSRT_ISSUE_BLOCK(0, 4, 6, b + 4);
    _tile_stored(2, sums[2], 64);
    DSRT_SCALE_BLOCK(b + 2, sums[2]);
    if (b + 3 >= blocks)
      break;
    if (b + 5 < blocks)
      DSRT_ISSUE_BLOCK(1, 5, 7, b + 5);
    _tile_stored(3, sums[3], 64);
    DSRT_SCALE_BLOCK(b + 3, sums[3]);
  }
#undef DSRT_SCALE_BLOCK
#undef DSRT_ISSUE_BLOCK
  storeTile<PerChannel>(acc, panelScales, rowTile * 16, x.rows, y + first, ldy);
}

} // namespace

bool gemmInt8AmxTakes(const LinearWeights &w) {
  return (w.dtype == DType::I8 || w.dtype == DType::U8) && w.groups > 0 &&
         w.in % (w.groups * kBlock) == 0;
}

void gemmInt8Amx(const Int8AmxOperands &x, const LinearWeights &w, int64_t begin, int64_t end,
                 float *y, int64_t ldy, int8_t *int4Scratch) {
  const int64_t rowTiles = x.paddedRows / 16, in = w.in;
  thread_local std::vector<float> panelScaleRows;
  _tile_loadconfig(&tileConfig());
  for (int64_t first = begin; first < end; first += 32) {
    const bool two = end - first >= 32;
    const int8_t *weights = static_cast<const int8_t *>(w.data) + first * in;
    if (w.dtype == DType::U8) {
      unpackInt4Rows(static_cast<const uint8_t *>(w.data) + first * (in / 2), two ? 32 : 16, in,
                     int4Scratch);
      weights = int4Scratch;
    }
    // The next panel's weights are fetched into L2 while this one's first row tile is
    // computed: the hardware's prefetchers left the engine's steps waiting on the weights'
    // sixteen strided rows (half of the kernel's time in the tile loads of the weights).
    const int64_t rowBytes = w.dtype == DType::U8 ? in / 2 : in;
    const int64_t next = first + 32;
    for (int64_t o = 0; o < (two ? 2 : 1); ++o) {
      const char *nextRows = next + o * 16 + 16 <= end
                                 ? static_cast<const char *>(w.data) + (next + o * 16) * rowBytes
                                 : nullptr;
      // The panel's weight scales as f32, once for all its row tiles: read one at a time per
      // block (a scalar f16 conversion each), they cost grouped weights 40% of the product.
      const float *panelScales = scalesOf(w, first + o * 16, panelScaleRows);
      requestScalesOf(w, first + o * 16 + 64);  // 4 panels ahead, as GemmInt8Vnni.cpp's
      for (int64_t rt = 0; rt < rowTiles; ++rt)
        (w.groups == 1 ? sumTile<true> : sumTile<false>)(x, w, weights + o * 16 * in,
                                                         panelScales, first + o * 16, rt, y,
                                                         ldy, rt == 0 ? nextRows : nullptr,
                                                         rowBytes);
    }
  }
  _tile_release();
}

} // namespace dsrt::ops::fast

DSRT_TARGET_REGION_END
