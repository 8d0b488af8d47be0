// int8 weights times int8-quantized activations with AVX-512 VNNI, for int8 linears of up
// to 64 rows (decode and prompt chunks) where DSRT_INT8_ACTIVATIONS=int8 (or
// DSRT_CPU_ISA=avx512-vnni) asks for it: llama.cpp's q8_0 and ONNX Runtime's dynamic
// quantization multiply int8 activations the same way. Compiled for AVX-512 VNNI
// and BW (a target region: TargetRegion.h), and run only where the CPU has them.
//
// Each row of x is quantized to int8 in blocks of 32, each block with its own scale
// (symmetric: max |x| / 127), once per product (every thread's range of output features
// reads it). One vpdpbusd multiplies and sums 64 weight-activation pairs in int32: a third of
// the instructions per weight of the int8 x fp32 kernels. vpdpbusd takes its first operand
// unsigned, so the weights are flipped to q + 128; the surplus, 128 * sum(xq) per block, is
// where each block's int32 sums start, negated, so it costs nothing per weight row. Each
// weight row's flipped chunk serves 2 rows of x, each chunk of x 4 weight rows. The result
// differs from the fp32-activation kernels by at most half a quantization step of x per
// input: |dy| <= sum_k |w_k| * scale_block(k) / 2 (FastLinearTest checks this bound, and
// QuantizedActivationsTest the arithmetic exactly). The rows are quantized one by one, so a
// row's result does not depend on the other rows of its batch.
//
// Why not the default: --dtype int8 is weight-only, and on the random-weight fixtures the
// activations' rounding costs top-1 agreement (OPT: 44/48 against 47/48). Where decode is
// bound by instructions rather than memory (issue 43's Xeon: 12.6 GB/s of int8 weights
// against llama.cpp's 23 with VNNI), and for prompts, it is the faster kernel (docs/int8.md).
#include "ops/fast/TargetRegion.h"

DSRT_TARGET_REGION_BEGIN("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")
#include "ops/fast/Int8Panels.h"
#include "ops/fast/VecAvx512.h"

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;  // inputs per activation scale
constexpr int64_t kChunk = 64;  // inputs per vpdpbusd

void quantizeRow(const float *x, int64_t in, QuantizedInt8Row &row) {
  row.values.resize(static_cast<size_t>(in));
  // Whole chunks: int4 weights' products on AMX read rows of an odd number of blocks too.
  row.laneScales.assign(static_cast<size_t>((in + kChunk - 1) / kChunk * 16), 0.0f);
  row.surplusLanes.assign(row.laneScales.size(), 0);
  for (int64_t b = 0; b < in / kBlock; ++b) {
    __m512 lo = _mm512_loadu_ps(x + b * kBlock), hi = _mm512_loadu_ps(x + b * kBlock + 16);
    float maximum = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    float scale = maximum / 127.0f;
    __m512 inverse = _mm512_set1_ps(int8CodeFactor(maximum));
    __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inverse));
    __m512i qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inverse));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(row.values.data() + b * kBlock),
                     _mm512_cvtsepi32_epi8(qlo));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(row.values.data() + b * kBlock + 16),
                     _mm512_cvtsepi32_epi8(qhi));
    // Lanes 0-7 of a chunk's int32 sums cover its first block, lanes 8-15 its second.
    const size_t lane = static_cast<size_t>((b / 2) * 16 + (b % 2) * 8);
    for (size_t l = 0; l < 8; ++l)
      row.laneScales[lane + l] = scale;
    row.surplusLanes[lane] = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi));
  }
}

// O weight rows from `first`, and their f32 sums with R rows of x.
template <int O, int R> struct BlockSums {
  const int8_t *rows[O];
  __m512 total[O][R];
  BlockSums(const LinearWeights &w, int64_t first) {
    for (int o = 0; o < O; ++o) {
      rows[o] = static_cast<const int8_t *>(w.data) + (first + o) * w.in;
      for (int r = 0; r < R; ++r)
        total[o][r] = _mm512_setzero_ps();
    }
  }
  void write(float *y, int64_t ldy, int64_t first) const {
    for (int o = 0; o < O; ++o)
      for (int r = 0; r < R; ++r)
        y[r * ldy + first + o] = _mm512_reduce_add_ps(total[o][r]);
  }
};

// O weight rows from `first` against R quantized rows of x, written at y[r * ldy + first + o].
template <int O, int R>
void vnniBlock(const QuantizedInt8Row *x, const LinearWeights &w, int64_t first, float *y,
               int64_t ldy) {
  const int64_t groups = w.groups, chunksPerGroup = w.in / groups / kChunk;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  BlockSums<O, R> block(w, first);
  const auto &rows = block.rows;
  auto &total = block.total;
  for (int64_t g = 0; g < groups; ++g) {
    __m512 acc[O][R];
    for (int o = 0; o < O; ++o)
      for (int r = 0; r < R; ++r)
        acc[o][r] = _mm512_setzero_ps();
    // One group per row whose inputs end in half a chunk (2784, Llama-style MLP widths):
    // that half is read masked; its other lanes have zero scales and zero x.
    const int64_t last = groups == 1 ? (w.in + kChunk - 1) / kChunk : (g + 1) * chunksPerGroup;
    for (int64_t c = g * chunksPerGroup; c < last; ++c) {
      const __mmask64 bytes = (c + 1) * kChunk <= w.in ? ~__mmask64(0) : __mmask64(0xFFFFFFFF);
      __m512i xv[R];
      for (int r = 0; r < R; ++r)
        xv[r] = _mm512_maskz_loadu_epi8(bytes, x[r].values.data() + c * kChunk);
      for (int o = 0; o < O; ++o) {
        const __m512i flipped =
            _mm512_xor_si512(_mm512_maskz_loadu_epi8(bytes, rows[o] + c * kChunk), flip);
        for (int r = 0; r < R; ++r) {
          const __m512i sums = _mm512_dpbusd_epi32(
              _mm512_loadu_si512(x[r].surplusLanes.data() + c * 16), flipped, xv[r]);
          acc[o][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                                      _mm512_loadu_ps(x[r].laneScales.data() + c * 16),
                                      acc[o][r]);
        }
      }
    }
    for (int o = 0; o < O; ++o) {
      const __m512 scale = _mm512_set1_ps(w.scale((first + o) * groups + g));
      for (int r = 0; r < R; ++r)
        total[o][r] = _mm512_fmadd_ps(acc[o][r], scale, total[o][r]);
    }
  }
  block.write(y, ldy, first);
}

// Groups of 32 inputs (the int8 LM head of an int4 plan): each chunk of 64 spans two
// groups, lanes 0-7 of its sums the first and 8-15 the second (as the activations' blocks),
// so the weight's two scales join the activations' lane scales before the chunk's sums are
// added.
template <int O, int R>
void vnniBlockHalfChunkGroups(const QuantizedInt8Row *x, const LinearWeights &w, int64_t first,
                              float *y, int64_t ldy) {
  const int64_t groups = w.groups, chunks = w.in / kChunk;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  BlockSums<O, R> block(w, first);
  const auto &rows = block.rows;
  auto &total = block.total;
  for (int64_t c = 0; c < chunks; ++c) {
    __m512i xv[R];
    __m512 xScales[R];
    for (int r = 0; r < R; ++r) {
      xv[r] = _mm512_loadu_si512(x[r].values.data() + c * kChunk);
      xScales[r] = _mm512_loadu_ps(x[r].laneScales.data() + c * 16);
    }
    for (int o = 0; o < O; ++o) {
      const int64_t group = (first + o) * groups + 2 * c;
      const __m512 weightScales = _mm512_mask_blend_ps(
          0xFF00, _mm512_set1_ps(w.scale(group)), _mm512_set1_ps(w.scale(group + 1)));
      const __m512i flipped = _mm512_xor_si512(_mm512_loadu_si512(rows[o] + c * kChunk), flip);
      for (int r = 0; r < R; ++r) {
        const __m512i sums = _mm512_dpbusd_epi32(
            _mm512_loadu_si512(x[r].surplusLanes.data() + c * 16), flipped, xv[r]);
        total[o][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                                      _mm512_mul_ps(xScales[r], weightScales), total[o][r]);
      }
    }
  }
  block.write(y, ldy, first);
}

template <int O, int R>
void vnniBlockAnyGroups(const QuantizedInt8Row *x, const LinearWeights &w, int64_t first,
                        float *y, int64_t ldy) {
  // (One group of 32 inputs per row is vnniBlock's half chunk.)
  if (w.in / w.groups == kBlock && w.groups > 1)
    vnniBlockHalfChunkGroups<O, R>(x, w, first, y, ldy);
  else
    vnniBlock<O, R>(x, w, first, y, ldy);
}

// Lane o of low: output o's sum of its lanes 0-7, of high: of its lanes 8-15 (a chunk's two
// blocks for 16 outputs), from fourLaneSums of outputs 0-3, 4-7, 8-11 and 12-15.
inline void blockSums16(const __m512i *fours, __m512i &low, __m512i &high) {
  // [first block: outputs 4j.., second block: 4j.., first: 4j+4.., second: 4j+4..]
  const __m512i p = _mm512_add_epi32(_mm512_shuffle_i32x4(fours[0], fours[1], 0x88),
                                     _mm512_shuffle_i32x4(fours[0], fours[1], 0xDD));
  const __m512i q = _mm512_add_epi32(_mm512_shuffle_i32x4(fours[2], fours[3], 0x88),
                                     _mm512_shuffle_i32x4(fours[2], fours[3], 0xDD));
  low = _mm512_shuffle_i32x4(p, q, 0x88);
  high = _mm512_shuffle_i32x4(p, q, 0xDD);
}

// A chunk's 64 int8 weights of one row as vpdpbusd's unsigned operand, flipped to w + 128.
inline __m512i flippedChunk(const uint8_t *row, int64_t c, bool whole) {
  const __mmask64 bytes = whole ? ~__mmask64(0) : __mmask64(0xFFFFFFFF);
  return _mm512_xor_si512(_mm512_maskz_loadu_epi8(bytes, row + c * kChunk),
                          _mm512_set1_epi8(static_cast<char>(0x80)));
}

// R rows of x against the `count` (up to 16) int8 weight rows from `first`, a lane per
// output: each block's int32 sum exact (the chunk's lanes added in fourLaneSums and
// blockSums16), then scaled into the output's f32 sum block after block, and a
// per-channel weight scale at the end: the f32 operations of the AMX and VNNI tiles
// (GemmInt8Amx.cpp's scaleBlock and storeTile) in their order, so that a row's result does
// not depend on which kernel its step's row count chose. `scales`: transposedPanelScales'.
// The lines of [ahead, aheadEnd) are requested into L2, a share a chunk.
template <int R>
void panelRows(const QuantizedInt8Row *x, const LinearWeights &w, int64_t first,
               const float *scales, int count, float *y, int64_t ldy, const char *ahead,
               const char *aheadEnd) {
  const int64_t in = w.in, blocks = in / kBlock, groups = w.groups,
                groupBlocks = blocks / groups, chunks = (in + kChunk - 1) / kChunk;
  const int64_t rowBytes = in;
  const uint8_t *rows[16];
  for (int o = 0; o < 16; ++o)
    rows[o] = static_cast<const uint8_t *>(w.data) + (first + std::min(o, count - 1)) * rowBytes;
  __m512 weightScales = _mm512_loadu_ps(scales);
  __m512 acc[R];
  for (int r = 0; r < R; ++r)
    acc[r] = _mm512_setzero_ps();
  const int64_t linesPerChunk = ahead ? ((aheadEnd - ahead) / 64 + chunks - 1) / chunks : 0;
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t l = 0; l < linesPerChunk && ahead < aheadEnd; ++l, ahead += 64)
      requestLineL2(ahead);
    // A row whose inputs end in half a chunk (2784, Llama-style MLP widths): that half read
    // masked, a block that is not there.
    const bool whole = (c + 1) * kChunk <= in;
    const __mmask64 bytes = whole ? ~__mmask64(0) : __mmask64(0xFFFFFFFF);
    __m512i xv[R], surplus[R];
    for (int r = 0; r < R; ++r) {
      xv[r] = _mm512_maskz_loadu_epi8(bytes, x[r].values.data() + c * kChunk);
      surplus[r] = _mm512_loadu_si512(x[r].surplusLanes.data() + c * 16);
    }
    // Four outputs at a time, reduced at once (16 outputs' sums for 2 rows had held every
    // register).
    __m512i fours[R][4];
    for (int j = 0; j < 4; ++j) {
      __m512i sums[R][4];
      for (int o = 0; o < 4; ++o) {
        const __m512i flipped = flippedChunk(rows[4 * j + o], c, whole);
        for (int r = 0; r < R; ++r)
          sums[r][o] = _mm512_dpbusd_epi32(surplus[r], flipped, xv[r]);
      }
      for (int r = 0; r < R; ++r)
        fours[r][j] = fourLaneSums(sums[r]);
    }
    __m512i blockSums[R][2];
    for (int r = 0; r < R; ++r)
      blockSums16(fours[r], blockSums[r][0], blockSums[r][1]);
    for (int half = 0; half < (whole ? 2 : 1); ++half) {
      const int64_t b = 2 * c + half;
      if (groups > 1 && b > 0 && b % groupBlocks == 0)
        weightScales = _mm512_loadu_ps(scales + b / groupBlocks * 16);
      for (int r = 0; r < R; ++r) {
        const __m512 rowScale =
            _mm512_set1_ps(x[r].laneScales[static_cast<size_t>(c * 16 + half * 8)]);
        const __m512 scale = groups == 1 ? rowScale : _mm512_mul_ps(rowScale, weightScales);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(blockSums[r][half]), scale, acc[r]);
      }
    }
  }
  const __mmask16 present = static_cast<__mmask16>((1u << count) - 1);
  for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(y + r * ldy, present,
                          groups == 1 ? _mm512_mul_ps(acc[r], weightScales) : acc[r]);
}

// Every row of x against int8 outputs [begin, end) of w in panels of 16, panelRows' order.
void dotRowsInt8InTilesOrder(const Int8Activations &a, const LinearWeights &w, int64_t begin,
                             int64_t end, float *y, int64_t ldy) {
  const int64_t rowBytes = w.in;
  const char *base = static_cast<const char *>(w.data);
  thread_local std::vector<float> converted, transposed;
  for (int64_t first = begin; first < end; first += 16) {
    const int count = static_cast<int>(std::min<int64_t>(16, end - first));
    // The panel two on, requested into L2 a share at each chunk, as the int4 panels do
    // (DotInt4TilesOrder.cpp): the whole next panel requested into L1 at each panel's start
    // left it waiting on memory.
    const char *stop = base + end * rowBytes;
    const char *ahead = std::min(stop, base + (first + 32) * rowBytes);
    const char *aheadEnd = std::min(stop, ahead + 16 * rowBytes);
    transposedPanelScales(w, first, count, converted, transposed);
    int64_t r = 0;
    for (; r + 2 <= a.rows; r += 2)
      panelRows<2>(a.quantized.data() + r, w, first, transposed.data(), count,
                   y + r * ldy + first, ldy, r == 0 ? ahead : nullptr, aheadEnd);
    if (r < a.rows)
      panelRows<1>(a.quantized.data() + r, w, first, transposed.data(), count,
                   y + r * ldy + first, ldy, r == 0 ? ahead : nullptr, aheadEnd);
  }
}

template <int O>
void vnniRows(const Int8Activations &a, const LinearWeights &w, int64_t first, float *y,
              int64_t ldy) {
  int64_t r = 0;
  for (; r + 2 <= a.rows; r += 2)
    vnniBlockAnyGroups<O, 2>(a.quantized.data() + r, w, first, y + r * ldy, ldy);
  if (r < a.rows)
    vnniBlockAnyGroups<O, 1>(a.quantized.data() + r, w, first, y + r * ldy, ldy);
}

} // namespace

bool int8TilesOrderTakes(const LinearWeights &w) {
  return (w.dtype == DType::I8 || w.dtype == DType::U8) && w.groups > 0 &&
         w.in % kBlock == 0 && (w.in / kBlock) % w.groups == 0;
}

void quantizeInt8Activations(const float *x, int64_t rows, const LinearWeights &w,
                             Int8Activations &out) {
  prepareInt8Activations(rows, out);
  quantizeInt8ActivationRows(x, 0, rows, w, out);
}

void prepareInt8Activations(int64_t rows, Int8Activations &out) {
  out.rows = rows;
  if (out.quantized.size() < static_cast<size_t>(rows))
    out.quantized.resize(static_cast<size_t>(rows));
}

void quantizeInt8ActivationRows(const float *x, int64_t begin, int64_t end,
                                const LinearWeights &w, Int8Activations &out) {
  for (int64_t r = begin; r < end; ++r)
    quantizeRow(x + r * w.in, w.in, out.quantized[static_cast<size_t>(r)]);
}

void quantizeInt8Tiles(const float *x, int64_t rows, int64_t in, int64_t beginTile,
                       int64_t endTile, Int8AmxPacked &out) {
  const int64_t blocks = in / kBlock, paddedRows = out.operands.paddedRows;
  int8_t *const tiles = packedTiles(out);
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512 limit = _mm512_set1_ps(127.0f), zero = _mm512_setzero_ps(),
               largestFloat = _mm512_set1_ps(FLT_MAX);
  for (int64_t tile = beginTile; tile < endTile; ++tile) {
    const int64_t first = tile * 16, present = std::min<int64_t>(16, rows - first);
    const float *tileRows = x + first * in;
    for (int64_t b = 0; b < blocks; ++b) {
      // Each row's block as quantizeRow takes it: its largest magnitude, the scale, and its
      // values times 127 / largest, rounded (rows past x's are zeros: scale and sums 0).
      __m512 peaks[16];
      for (int l = 0; l < 16; ++l) {
        if (l >= present) {
          peaks[l] = zero;
          continue;
        }
        const float *block = tileRows + l * in + b * kBlock;
        peaks[l] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(block)),
                                 _mm512_abs_ps(_mm512_loadu_ps(block + 16)));
      }
      const __m512 maxima = Avx512::maxima16(peaks);
      alignas(64) float inverses[16];
      // int8CodeFactor's, lane by lane.
      const __m512 factors =
          _mm512_maskz_div_ps(_mm512_cmp_ps_mask(maxima, zero, _CMP_GT_OQ), limit, maxima);
      _mm512_store_ps(inverses, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(factors, largestFloat,
                                                                      _CMP_LE_OQ),
                                                    factors));
      __m256i values[16];
      for (int l = 0; l < 16; ++l) {
        if (l >= present) {
          values[l] = _mm256_setzero_si256();
          continue;
        }
        const float *block = tileRows + l * in + b * kBlock;
        const __m512 inverse = _mm512_set1_ps(inverses[l]);
        const __m128i low = _mm512_cvtsepi32_epi8(
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(block), inverse)));
        const __m128i high = _mm512_cvtsepi32_epi8(
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(block + 16), inverse)));
        values[l] = _mm256_set_m128i(high, low);
      }
      __m512i pairedRows[8], quads[8];
      for (int l = 0; l < 8; ++l)
        pairedRows[l] = _mm512_inserti64x4(_mm512_castsi256_si512(values[l]), values[l + 8], 1);
      transposeQuads(pairedRows, quads);
      // Each row's sum of its 32 values, exact, for the surplus.
      __m512i sums = _mm512_setzero_si512();
      int8_t *packedBlock = tiles + (tile * blocks + b) * 512;
      for (int q = 0; q < 8; ++q) {
        _mm512_store_si512(packedBlock + q * 64, quads[q]);
        sums = _mm512_dpbusd_epi32(sums, ones, quads[q]);
      }
      _mm512_storeu_ps(out.scales.data() + b * paddedRows + first, _mm512_div_ps(maxima, limit));
      _mm512_storeu_si512(out.surpluses.data() + b * paddedRows + first,
                          _mm512_mullo_epi32(sums, _mm512_set1_epi32(-128)));
    }
  }
}

void dotRowsInt8Vnni(const Int8Activations &a, const LinearWeights &w, int64_t begin,
                     int64_t end, float *y, int64_t ldy, bool tilesOrder) {
  const char *base = static_cast<const char *>(w.data);
  if (tilesOrder && int8TilesOrderTakes(w))
    return dotRowsInt8InTilesOrder(a, w, begin, end, y, ldy);
  int64_t o = begin;
  for (; o + 4 <= end; o += 4) {
    // As dotRowsTyped: the rows a fixed distance ahead requested, within the range.
    const char *ahead = base + o * w.in + detail::kPrefetchBytes;
    const char *stop = base + end * w.in;
    for (const char *line = ahead; line < ahead + 4 * w.in && line < stop; line += 64)
      requestLine(line);
    vnniRows<4>(a, w, o, y, ldy);
  }
  for (; o < end; ++o)
    vnniRows<1>(a, w, o, y, ldy);
}

// DSRT_CPU_ISA=avx512-vnni: AVX-512's kernels, with int8 activations for int8 weights
// (int8QuantizesActivations in Linear.cpp).
detail::IsaKernels avx512VnniKernels() { return detail::kernelsOf<Avx512>("avx512-vnni"); }

} // namespace dsrt::ops::fast

DSRT_TARGET_REGION_END
