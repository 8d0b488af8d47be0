// int4 weights against int8-quantized x in the AMX and VNNI tiles' f32 order, for the serving
// engine's rows that the tiles do not take (a step of few rows, a panel's last outputs), so
// that a row's int4 result is the same bit for bit at every row count (docs/serving.md,
// "Batch invariance"): each block's exact int32 sum, scaled into the output's f32 sum block
// after block. Compiled for AVX-512 VNNI and BW (a target region: TargetRegion.h), and run
// only where the CPU has them. DotVnni.cpp's panelRows is the same order for int8 weights.
#include "ops/fast/TargetRegion.h"

DSRT_TARGET_REGION_BEGIN("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")
#include "ops/fast/Int8Panels.h"
#include "ops/fast/QuantizedActivations.h"

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;  // inputs per activation scale and per int32 block sum

// Lane o of out[k]: the sum of block k of output o, from fourLaneSums (Int8Panels.h) of
// outputs 0-3, 4-7, 8-11 and 12-15 (a 4 x 4 transpose of 128-bit lanes). As DotVnni.cpp's
// blockSums16, a block to a 128-bit lane instead of to 8 lanes.
inline void stepBlockSums16(const __m512i *fours, __m512i *out) {
  const __m512i low01 = _mm512_shuffle_i32x4(fours[0], fours[1], 0x44);
  const __m512i high01 = _mm512_shuffle_i32x4(fours[0], fours[1], 0xEE);
  const __m512i low23 = _mm512_shuffle_i32x4(fours[2], fours[3], 0x44);
  const __m512i high23 = _mm512_shuffle_i32x4(fours[2], fours[3], 0xEE);
  out[0] = _mm512_shuffle_i32x4(low01, low23, 0x88);
  out[1] = _mm512_shuffle_i32x4(low01, low23, 0xDD);
  out[2] = _mm512_shuffle_i32x4(high01, high23, 0x88);
  out[3] = _mm512_shuffle_i32x4(high01, high23, 0xDD);
}

// A quantized row of x split for int4 codes as DotInt4Vnni.cpp splits it: its even and odd
// inputs (a code byte's low and high nibble meet consecutive values), and each block's
// -8 * sum(xq), the codes' offset.
struct SplitInt8Row {
  std::vector<int8_t> even, odd;
  std::vector<int32_t> offsets;
};
void splitRow(const QuantizedInt8Row &x, int64_t in, SplitInt8Row &out) {
  out.even.resize(static_cast<size_t>(in / 2));
  out.odd.resize(static_cast<size_t>(in / 2));
  out.offsets.resize(static_cast<size_t>(in / kBlock));
  for (int64_t i = 0; i < in / 2; ++i) {
    out.even[static_cast<size_t>(i)] = x.values[static_cast<size_t>(2 * i)];
    out.odd[static_cast<size_t>(i)] = x.values[static_cast<size_t>(2 * i + 1)];
  }
  for (int64_t b = 0; b < in / kBlock; ++b) {
    int32_t sum = 0;
    for (int64_t i = 0; i < kBlock; ++i)
      sum += x.values[static_cast<size_t>(b * kBlock + i)];
    out.offsets[static_cast<size_t>(b)] = -8 * sum;
  }
}

// R rows of x against the `count` (up to 16) int4 weight rows from `first`, a lane per
// output, in the tiles' f32 order (as DotVnni.cpp's panelRows for int8), with the codes left
// packed: a step of 64 code bytes (128 inputs, four blocks) per weight row, its low nibbles
// against x's even inputs and its high ones against the odd (two vpdpbusd), then each
// block's int32 sum (exact in any order) reduced across lanes for 16 outputs at once, plus
// the block's offset, and scaled into the f32 sums block after block. Until 2026-12-06 int4
// rows went through panelRows, every code byte widened to two (a cross-lane widening per 64
// inputs) and reduced twice as often: one row of decode took 1.9x the time of the static
// int4 kernel (DotInt4Vnni.cpp), in cache or from memory; this takes 1.4x less in cache.
// The lines of [ahead, aheadEnd) are requested into L2, a share a step.
// `scales`: transposedPanelScales' (Int8Panels.h).
template <int R>
void panelRowsInt4Split(const SplitInt8Row *split, const QuantizedInt8Row *x,
                        const LinearWeights &w, int64_t first, const float *scales, int count,
                        float *y, int64_t ldy, const char *ahead, const char *aheadEnd) {
  const int64_t in = w.in, blocks = in / kBlock, groups = w.groups,
                groupBlocks = blocks / groups, steps = (blocks + 3) / 4, rowBytes = in / 2;
  const uint8_t *rows[16];
  for (int o = 0; o < 16; ++o)
    rows[o] = static_cast<const uint8_t *>(w.data) + (first + std::min(o, count - 1)) * rowBytes;
  const __m512i nibble = _mm512_set1_epi8(0xF);
  __m512 weightScales = _mm512_loadu_ps(scales);
  __m512 acc[R];
  for (int r = 0; r < R; ++r)
    acc[r] = _mm512_setzero_ps();
  const int64_t linesPerStep = ahead ? ((aheadEnd - ahead) / 64 + steps - 1) / steps : 0;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t l = 0; l < linesPerStep && ahead < aheadEnd; ++l, ahead += 64)
      requestLineL2(ahead);
    const int64_t present = std::min<int64_t>(4, blocks - s * 4);
    const __mmask64 bytes = present == 4 ? ~__mmask64(0) : (__mmask64(1) << (16 * present)) - 1;
    __m512i even[R], odd[R];
    for (int r = 0; r < R; ++r) {
      even[r] = _mm512_maskz_loadu_epi8(bytes, split[r].even.data() + s * 64);
      odd[r] = _mm512_maskz_loadu_epi8(bytes, split[r].odd.data() + s * 64);
    }
    // Four outputs at a time, reduced at once (16 outputs' sums for 2 rows had held every
    // register).
    __m512i fours[R][4];
    for (int j = 0; j < 4; ++j) {
      __m512i sums[R][4];
      for (int o = 0; o < 4; ++o) {
        const __m512i packed = _mm512_maskz_loadu_epi8(bytes, rows[4 * j + o] + s * 64);
        const __m512i low = _mm512_and_si512(packed, nibble);
        const __m512i high = _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble);
        for (int r = 0; r < R; ++r)
          sums[r][o] = _mm512_dpbusd_epi32(
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), low, even[r]), high, odd[r]);
      }
      for (int r = 0; r < R; ++r)
        fours[r][j] = fourLaneSums(sums[r]);
    }
    __m512i blockSums[R][4];
    for (int r = 0; r < R; ++r)
      stepBlockSums16(fours[r], blockSums[r]);
    for (int64_t k = 0; k < present; ++k) {
      const int64_t b = s * 4 + k;
      if (groups > 1 && b > 0 && b % groupBlocks == 0)
        weightScales = _mm512_loadu_ps(scales + b / groupBlocks * 16);
      for (int r = 0; r < R; ++r) {
        const __m512i sum = _mm512_add_epi32(
            blockSums[r][k], _mm512_set1_epi32(split[r].offsets[static_cast<size_t>(b)]));
        // (quantizeRow's lanes in DotVnni.cpp: 8 a block, 16 a chunk of 64 inputs.)
    const __m512 rowScale =
            _mm512_set1_ps(x[r].laneScales[static_cast<size_t>((b / 2) * 16 + (b % 2) * 8)]);
        const __m512 scale = groups == 1 ? rowScale : _mm512_mul_ps(rowScale, weightScales);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[r]);
      }
    }
  }
  const __mmask16 present = static_cast<__mmask16>((1u << count) - 1);
  for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(y + r * ldy, present,
                          groups == 1 ? _mm512_mul_ps(acc[r], weightScales) : acc[r]);
}

} // namespace

// Every row of x against int4 outputs [begin, end) of w in panels of 16 (panelRowsInt4Split).
void dotRowsInt4InTilesOrder(const Int8Activations &a, const LinearWeights &w, int64_t begin,
                             int64_t end, float *y, int64_t ldy) {
  const int64_t rowBytes = w.in / 2;
  const char *base = static_cast<const char *>(w.data);
  const char *stop = base + end * rowBytes;
  thread_local std::vector<float> converted, transposed;
  thread_local std::vector<SplitInt8Row> split;
  if (split.size() < static_cast<size_t>(a.rows))
    split.resize(static_cast<size_t>(a.rows));
  for (int64_t r = 0; r < a.rows; ++r)
    splitRow(a.quantized[static_cast<size_t>(r)], w.in, split[static_cast<size_t>(r)]);
  for (int64_t first = begin; first < end; first += 16) {
    const int count = static_cast<int>(std::min<int64_t>(16, end - first));
    // The panel two on, requested into L2 a share at each step (panelRowsInt4Split): its 16
    // rows are read side by side, 64 bytes each a step, which the hardware prefetchers did
    // not keep ahead of. From memory (dsrt-linear-bench --dtype int4 --in 896 --out 4864
    // --rows 1 --row-invariant 1 --copies 32, Zen 4) the panel took 0.14-0.16 ms with the
    // whole next panel requested into L1 at its start (the int8 panels' way), 0.09-0.11 ms so,
    // as the static kernel's 0.09-0.10; one panel on, or into L1, measured no better.
    const char *ahead = std::min(stop, base + (first + 32) * rowBytes);
    const char *aheadEnd = std::min(stop, ahead + 16 * rowBytes);
    transposedPanelScales(w, first, count, converted, transposed);
    int64_t r = 0;
    for (; r + 2 <= a.rows; r += 2)
      panelRowsInt4Split<2>(split.data() + r, a.quantized.data() + r, w, first,
                            transposed.data(), count, y + r * ldy + first, ldy,
                            r == 0 ? ahead : nullptr, aheadEnd);
    if (r < a.rows)
      panelRowsInt4Split<1>(split.data() + r, a.quantized.data() + r, w, first,
                            transposed.data(), count, y + r * ldy + first, ldy,
                            r == 0 ? ahead : nullptr, aheadEnd);
  }
}

} // namespace dsrt::ops::fast

DSRT_TARGET_REGION_END
