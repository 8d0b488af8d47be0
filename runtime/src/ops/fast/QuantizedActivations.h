// Internal to dsrt_ops: int8 and int4 weights times int8-quantized activations (DotVnni.cpp,
// DotInt4Vnni.cpp, DotInt4Avx2.cpp; Linear.cpp chooses them and quantizes x): the quantized
// rows of x and the kernels that read them. docs/int4.md, docs/int8.md.
#ifndef DSRT_OPS_FAST_QUANTIZEDACTIVATIONS_H
#define DSRT_OPS_FAST_QUANTIZEDACTIVATIONS_H

#include "ops/fast/FastKernels.h"

#include <cstdint>
#include <vector>

namespace dsrt::ops::fast {

// int8 weights times int8 activations (DotVnni.cpp). One row of x as int8 with, per chunk
// of 64 inputs (one vpdpbusd), each block's scale on its 8 lanes and -128 * sum(xq) of each
// block on its first lane (the flipped weights' surplus, where the int32 sums start).
struct QuantizedInt8Row {
  std::vector<int8_t> values;
  std::vector<float> laneScales;
  std::vector<int32_t> surplusLanes;
};
struct Int8Activations {
  int64_t rows = 0;
  std::vector<QuantizedInt8Row> quantized;
};
void quantizeInt8Activations(const float *x, int64_t rows, const LinearWeights &w,
                             Int8Activations &out);
// The same in parts, for threads to share: out sized for `rows`, then rows [begin, end) of x
// quantized (each row on its own).
void prepareInt8Activations(int64_t rows, Int8Activations &out);
void quantizeInt8ActivationRows(const float *x, int64_t begin, int64_t end,
                                const LinearWeights &w, Int8Activations &out);
// With `tilesOrder` (the serving engine's batch invariance; int8 weights), each output's f32
// sum takes the AMX and VNNI tiles' operations in their order, so that a row's result is
// the same bit for bit whichever kernel its step's row count chose; 20-25% slower at one
// and two rows where the weights come from cache (the blocks' int32 sums are reduced across
// lanes before they are scaled), which static sessions keep.
void dotRowsInt8Vnni(const Int8Activations &x, const LinearWeights &w, int64_t begin,
                     int64_t end, float *y, int64_t ldy, bool tilesOrder = false);
// Whether that order takes w (int8 or int4 weights, groups of whole blocks of 32).
bool int8TilesOrderTakes(const LinearWeights &w);
// int4 weights (U8) the same way, from x quantized as int8's (quantizeInt8Activations: the
// values the int4 kernels' quantizer and the tiles' give): each panel's rows unpacked to
// their codes, then summed in the tiles' order, the engine's int4 rows as batch invariant
// as its int8 ones.
void dotRowsInt4InTilesOrder(const Int8Activations &x, const LinearWeights &w, int64_t begin,
                             int64_t end, float *y, int64_t ldy);

// The same product for many rows on AMX-INT8 (GemmInt8Amx.cpp; Int8Amx.cpp packs x): x's
// quantized rows as AMX's B operand, [row tiles of 16, blocks of 32 inputs, 8 quads, 16 rows,
// 4 inputs], zero past the last row, and each block's activation scales and surpluses
// (-128 * sum(xq), for the VNNI kernel's flipped weights), [blocks, paddedRows].
struct Int8AmxOperands {
  const int8_t *tiles = nullptr;
  const float *scales = nullptr;
  const int32_t *surpluses = nullptr;
  int64_t rows = 0, paddedRows = 0;
};
struct Int8AmxPacked {
  std::vector<int8_t> tiles;
  std::vector<float> scales;
  std::vector<int32_t> surpluses;
  Int8AmxOperands operands;
};
// Whether the CPU has AMX-INT8 and Linux lets this process use the tile state.
bool int8AmxAvailable();
// The weights the AMX kernel reads: int8 or int4 whose groups are whole blocks of 32.
bool gemmInt8AmxTakes(const LinearWeights &w);
// x's rows, quantized one by one, packed: what quantizeInt8Tiles below must give (the tests
// pack x this way).
void packInt8ActivationsForAmx(const Int8Activations &x, int64_t in, Int8AmxPacked &out);
// The same in parts: out sized for x.rows (padded to 16), then padded rows [begin, end)
// packed, rows past x.rows as zeros.
void prepareInt8AmxPacking(const Int8Activations &x, int64_t in, Int8AmxPacked &out);
void prepareInt8AmxPacking(int64_t rows, int64_t in, Int8AmxPacked &out);
void packInt8AmxRows(const Int8Activations &x, int64_t in, int64_t begin, int64_t end,
                     Int8AmxPacked &out);
// Where out's tiles start (on a cache line).
int8_t *packedTiles(Int8AmxPacked &out);
// Row tiles [beginTile, endTile) of x (`rows` rows of `in` floats, in a multiple of 32)
// quantized straight into out (sized by prepareInt8AmxPacking): the values, scales and
// surpluses quantizeInt8ActivationRows and packInt8AmxRows give, bit for bit, sixteen rows
// at a time (DotVnni.cpp; the CPU must have AVX-512 VNNI).
void quantizeInt8Tiles(const float *x, int64_t rows, int64_t in, int64_t beginTile,
                       int64_t endTile, Int8AmxPacked &out);
// Output features [begin, end) (a multiple of 16 of them, within w.out) of all x's rows.
// int4 weights need int4Scratch: 32 * w.in bytes, the thread's own.
void gemmInt8Amx(const Int8AmxOperands &x, const LinearWeights &w, int64_t begin, int64_t end,
                 float *y, int64_t ldy, int8_t *int4Scratch = nullptr);
// The same product with AVX-512 VNNI, from the same packed x, for CPUs without AMX
// (GemmInt8Vnni.cpp); it needs weightScratch: 48 * w.in bytes on a cache line, the thread's
// own.
void gemmInt8Vnni(const Int8AmxOperands &x, const LinearWeights &w, int64_t begin, int64_t end,
                  float *y, int64_t ldy, int8_t *weightScratch);

// int4 weights times int8 activations (DotInt4Vnni.cpp), in steps of 4 blocks of 32 inputs
// (64 bytes of codes, one vpdpbusd's lanes: lanes 4k to 4k + 3 hold block k). One row of x
// as int8: even and odd inputs apart ([in / 2] each); per step, each block's scale on its 4
// lanes, and the codes' offset of 8, -8 * sum(xq) of each block, on the block's first lane
// (the int32 sums start from it); both padded with zeros to whole steps.
struct QuantizedInt4Row {
  std::vector<int8_t> even, odd;
  std::vector<float> scaleLanes;
  std::vector<int32_t> offsetLanes;
};
// x quantized once per product, then read by every range of output features: quantizing it
// again in each thread's range cost as much as the products of a 32-row prompt chunk. With
// it, per step, where the weight scales of its blocks are: the first group's index, how many
// groups from there to load (at most 4), and which of them each lane takes.
struct Int4Activations {
  int64_t rows = 0;
  std::vector<QuantizedInt4Row> quantized;
  std::vector<int32_t> stepFirstGroup, stepGroupCount, stepLaneGroup;  // [steps], [steps], [steps, 16]
};
// x quantized, and the step tables (Linear.cpp: the rows by the CPU's kernel below).
void quantizeInt4Activations(const float *x, int64_t rows, const LinearWeights &w,
                             Int4Activations &out);
// One row of x as both kernels read it, quantized with AVX-512 (DotInt4Vnni.cpp) or AVX2
// (DotInt4Avx2.cpp).
void quantizeInt4RowAvx512(const float *x, int64_t in, QuantizedInt4Row &row);
void quantizeInt4RowAvx2(const float *x, int64_t in, QuantizedInt4Row &row);
// The products: with AVX-512 VNNI (vpdpbusd, four blocks a step), or with AVX2 for CPUs
// without it (DotInt4Avx2.cpp: vpmaddubsw, two blocks a step).
void dotRowsInt4Vnni(const Int4Activations &x, const LinearWeights &w, int64_t begin,
                     int64_t end, float *y, int64_t ldy);
void dotRowsInt4Avx2(const Int4Activations &x, const LinearWeights &w, int64_t begin,
                     int64_t end, float *y, int64_t ldy);

} // namespace dsrt::ops::fast

#endif
