// int8 and int4 weights times int8-quantized activations with AVX-512 VNNI, for products of
// many rows (prompt chunks, the engine's steps) where the CPU has no AMX (AMD's Zen 4 and 5,
// Intel before Sapphire Rapids). Compiled for AVX-512 VNNI (a target region: TargetRegion.h),
// and run only where the CPU has it (Linear.cpp chooses it).
//
// The dot kernels (DotVnni.cpp) serve one row of x at a time: each vpdpbusd sums 64 pairs,
// half a chunk per activation block, so its int32 lanes must be scaled after every
// instruction. Here one vpdpbusd sums a quad (4 inputs) of one block for 16 lanes, so 8 of
// them sum a whole block exactly before one conversion and one FMA scale it. Two layouts:
// * Products of more than 16 rows: lanes of 16 outputs. Each panel of 16 weight rows is
//   repacked per call as AMX's B operand would hold it (per block, 8 quads of the 16
//   outputs' 4 inputs, one vector each, flipped to w + 128), and a quad of a row of x,
//   broadcast from x's tiles (quantizeInt8Tiles), multiplies it. 8 rows of x by 2 panels at
//   a time: each weight vector serves 8 rows and each broadcast 2 panels, 0.6 loads a
//   vpdpbusd, and a row's sums land in y's row as they are.
// * Up to 16 rows (the engine's decode steps): lanes of 16 rows, x's tile as it is, each
//   weight quad broadcast from the plan's row and flipped in its register (int4 rows are
//   unpacked and flipped into a panel first), 8 outputs' chains interleaved: one load a
//   vpdpbusd, which holds it near half the two VNNI ports' rate on a Xeon (docs/design.md,
//   section 9), but nothing to repack, which costs more where the weights stream from
//   memory.
//
// The surplus, 128 * sum(xq) of each block of each row, which the quantizer already has, is
// where the block's int32 sums start (negated). Each block's int32 sum is exact, and both
// layouts give each (row, output) the same f32 operations in the same order (as the AMX
// kernel's), so they agree bit for bit, and a row's result differs from the dot kernels' by
// f32 rounding only, whatever its batch.
#include "ops/fast/TargetRegion.h"

DSRT_TARGET_REGION_BEGIN("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")
#include "ops/fast/Int8Panels.h"

namespace dsrt::ops::fast {
namespace {

constexpr int64_t kBlock = 32;  // inputs per activation scale
constexpr int64_t kScalesAhead = 4;  // panels whose scales are requested ahead (requestScalesOf)

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

// Panel `first`'s 16 weight rows flipped into `scratch` (16 x in, in order), int4 ones
// unpacked there first.
const uint8_t *flipPanel(const LinearWeights &w, int64_t first, int8_t *scratch) {
  const int64_t in = w.in;
  if (w.dtype == DType::U8)
    unpackInt4Rows(static_cast<const uint8_t *>(w.data) + first * (in / 2), 16, in, scratch);
  flipRows(w.dtype == DType::U8 ? scratch : static_cast<const int8_t *>(w.data) + first * in,
           in, scratch);
  return reinterpret_cast<const uint8_t *>(scratch);
}

// The panel's 16 rows flipped (flipRows: one sequential stream from memory, which the
// prefetchers follow; repacking straight from the plan's rows, 16 strided streams of 32
// bytes, made the engine's steps of 16 rows 10% slower) repacked: block b's quad q, [16
// outputs x 4 inputs], at packed + b * 512 + q * 64.
void packPanel(const uint8_t *flipped, int64_t in, uint8_t *packed) {
  for (int64_t b = 0; b < in / kBlock; ++b) {
    __m512i pairedRows[8], quads[8];
    for (int l = 0; l < 8; ++l) {
      const __m256i low =
          _mm256_load_si256(reinterpret_cast<const __m256i *>(flipped + l * in + b * kBlock));
      const __m256i high = _mm256_load_si256(
          reinterpret_cast<const __m256i *>(flipped + (l + 8) * in + b * kBlock));
      pairedRows[l] = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
    }
    transposeQuads(pairedRows, quads);
    for (int q = 0; q < 8; ++q)
      _mm512_store_si512(packed + b * 512 + q * 64, quads[q]);
  }
}

// Requests for a later panel's weight lines spread over the blocks of a kernel's loop(s):
// `lines` of them over `steps` blocks, counted without a division per block (two 64-bit
// divisions a block had cost about as many cycles as the block's products).
struct LineRequests {
  const char *rows = nullptr;
  int64_t lines = 0, steps = 1, next = 0, owed = 0;
  void atBlock() {
    for (owed += lines; owed >= steps; owed -= steps)
      _mm_prefetch(rows + 64 * next++, _MM_HINT_T1);
  }
};

// The 16 outputs of a panel (flipped weight rows `flipped`, `in` apart) for the 16 rows of x
// in `rowTile`, written to y. `panelScales` are the outputs' weight scales as f32, [16,
// groups].
// With `nextRows`, the next panel's 16 weight rows (contiguous, rowBytes each) are requested
// into L2 along the way, a block's share of their lines at each block (as GemmInt8Amx.cpp's).
// With FlipHere, `flipped` is the plan's own int8 rows, each quad flipped in its register
// after the broadcast (gemmRowLanes).
template <bool PerChannel, bool FlipHere = false>
void sumTile(const Int8AmxOperands &x, const LinearWeights &w, const uint8_t *flipped,
             const float *panelScales, int64_t first, int64_t rowTile, float *y, int64_t ldy,
             const char *nextRows, int64_t rowBytes) {
  const int64_t in = w.in, blocks = in / kBlock, groups = w.groups,
                groupBlocks = in / groups / kBlock;
  const int8_t *xTiles = x.tiles + rowTile * blocks * 512;
  const float *xScales = x.scales + rowTile * 16;
  const int32_t *xSurpluses = x.surpluses + rowTile * 16;
  // Two passes over the blocks, 8 outputs each, their 8 chains of vpdpbusd interleaved
  // quad by quad: one output's chain at a time (8 dependent instructions, then the next
  // output's) kept about one vpdpbusd a cycle in flight where two can issue (768 x 3072 at 16
  // rows, one core, from L3: 0.18 -> 0.135 ms in a standalone copy of the loop). Each
  // (row, output) still gets its blocks' sums in block order, as before.
  __m512 acc[16];
  // The next panel's lines spread over both passes' blocks.
  LineRequests requests;
  requests.rows = nextRows;
  requests.lines = 16 * rowBytes / 64;
  requests.steps = 2 * blocks;
#pragma GCC unroll 2
  for (int half = 0; half < 2; ++half) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
      acc[8 * half + i] = _mm512_setzero_ps();
    int64_t group = 0, groupLeft = groupBlocks;
    for (int64_t b = 0; b < blocks; ++b) {
      if (nextRows)
        requests.atBlock();
      const __m512i surpluses = _mm512_loadu_si512(xSurpluses + b * x.paddedRows);
      const __m512 rowScales = _mm512_loadu_ps(xScales + b * x.paddedRows);
      __m512i sums[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        sums[i] = surpluses;
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        const __m512i quads = _mm512_load_si512(xTiles + b * 512 + q * 64);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          int32_t quad;  // 4 flipped weights, broadcast to the 16 rows
          std::memcpy(&quad, flipped + (8 * half + i) * in + b * kBlock + 4 * q, sizeof quad);
          __m512i weights = _mm512_set1_epi32(quad);
          if constexpr (FlipHere)
            weights = _mm512_xor_si512(weights, _mm512_set1_epi8(static_cast<char>(0x80)));
          sums[i] = _mm512_dpbusd_epi32(sums[i], weights, quads);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const int o = 8 * half + i;
        const __m512 scale =
            PerChannel ? rowScales
                       : _mm512_mul_ps(rowScales, _mm512_set1_ps(panelScales[o * groups + group]));
        acc[o] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[i]), scale, acc[o]);
      }
      if (--groupLeft == 0) {
        ++group;
        groupLeft = groupBlocks;
      }
    }
  }
  storeTile<PerChannel>(acc, panelScales, rowTile * 16, x.rows, y + first, ldy);
}

// One tile of 16 rows or fewer: lanes of 16 rows, each panel flipped in order and each
// weight quad broadcast (the kernel before the one below). Where the weights stream from
// memory, as in the engine's decode steps, it is the faster: 16 rows of 262144 x 768 in
// 16.4-16.5 ms against 19.0-19.8 for the repacking kernel (dsrt-linear-bench, 2 threads),
// and 8% less of a GPT-2 decode-only stream's linear time; from 24 rows the two are even
// from memory and the repacking kernel 15-27% faster from cache.
void gemmRowLanes(const Int8AmxOperands &x, const LinearWeights &w, int64_t begin, int64_t end,
                  float *y, int64_t ldy, int8_t *weightScratch) {
  const int64_t rowTiles = x.paddedRows / 16;
  thread_local std::vector<float> panelScaleRows;
  const int64_t rowBytes = w.dtype == DType::U8 ? w.in / 2 : w.in;
  // One tile of rows reads each weight once: int8 rows are read where the plan keeps them and
  // flipped in registers (a flipped copy first, written and read again, was a tenth of a
  // GPT-2 int8 decode stream's time at 16 clients); int4 ones are unpacked first.
  const bool flipHere = w.dtype == DType::I8 && rowTiles == 1;
  for (int64_t first = begin; first < end; first += 16) {
    const uint8_t *flipped =
        flipHere ? static_cast<const uint8_t *>(w.data) + first * w.in
                 : flipPanel(w, first, weightScratch);
    const float *panelScales = scalesOf(w, first, panelScaleRows);
    requestScalesOf(w, first + 16 * kScalesAhead);
    // The next panel's rows requested while this one's first row tile is computed: flipping
    // had waited on them (a fifth of a serving profile without AMX).
    const char *nextRows =
        first + 32 <= end ? static_cast<const char *>(w.data) + (first + 16) * rowBytes : nullptr;
    const auto tile = w.groups == 1 ? (flipHere ? sumTile<true, true> : sumTile<true, false>)
                                    : (flipHere ? sumTile<false, true> : sumTile<false, false>);
    for (int64_t rt = 0; rt < rowTiles; ++rt)
      tile(x, w, flipped, panelScales, first, rt, y, ldy, rt == 0 ? nextRows : nullptr, rowBytes);
  }
}

// R rows of x from `row` times P repacked panels (16 * in bytes apart in `packed`, from
// output `first`), into y. `groupScales[p]`: panel p's weight scales, [groups, 16 outputs].
template <int R, int P, bool PerChannel>
void sumRows(const Int8AmxOperands &x, const LinearWeights &w, const uint8_t *packed,
             const float *const *groupScales, int64_t first, int64_t row, float *y,
             int64_t ldy, LineRequests *requests = nullptr) {
  const int64_t in = w.in, blocks = in / kBlock, groupBlocks = blocks / w.groups;
  // Row r's quad q of block b: x.tiles + (tile * blocks + b) * 512 + q * 64 + lane * 4.
  const int8_t *xQuads[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    xQuads[r] = x.tiles + (row + r) / 16 * blocks * 512 + (row + r) % 16 * 4;
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p)
      acc[r][p] = _mm512_setzero_ps();
  int64_t group = 0, groupLeft = groupBlocks;
  for (int64_t b = 0; b < blocks; ++b) {
    if (requests)
      requests->atBlock();
    __m512i sums[R][P];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i surplus = _mm512_set1_epi32(x.surpluses[b * x.paddedRows + row + r]);
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p)
        sums[r][p] = surplus;
    }
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      __m512i weights[P];
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p)
        weights[p] = _mm512_load_si512(packed + p * 16 * in + b * 512 + q * 64);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        int32_t quad;  // 4 of row r's quantized inputs, broadcast to the 16 outputs
        std::memcpy(&quad, xQuads[r] + b * 512 + q * 64, sizeof quad);
        const __m512i inputs = _mm512_set1_epi32(quad);
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p)
          sums[r][p] = _mm512_dpbusd_epi32(sums[r][p], weights[p], inputs);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 rowScale = _mm512_set1_ps(x.scales[b * x.paddedRows + row + r]);
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        const __m512 scale =
            PerChannel ? rowScale
                       : _mm512_mul_ps(rowScale, _mm512_loadu_ps(groupScales[p] + group * 16));
        acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r][p]), scale, acc[r][p]);
      }
    }
    if (--groupLeft == 0) {
      ++group;
      groupLeft = groupBlocks;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) {
      float *to = y + (row + r) * ldy + first + p * 16;
      _mm512_storeu_ps(to, PerChannel ? _mm512_mul_ps(acc[r][p], _mm512_loadu_ps(groupScales[p]))
                                      : acc[r][p]);
    }
}

// Every row of x times P repacked panels: 8 rows at a time, then 4, 2, 1. With `nextRows`,
// the `nextBytes` of the next panels' weight rows are requested into L2 along the way, spread
// over the blocks of the groups of 8 rows, so that flipping them finds them in cache.
template <int P, bool PerChannel>
void sumAllRows(const Int8AmxOperands &x, const LinearWeights &w, const uint8_t *packed,
                const float *const *groupScales, int64_t first, float *y, int64_t ldy,
                const char *nextRows, int64_t nextBytes) {
  LineRequests requests;
  requests.rows = nextRows;
  requests.lines = nextRows ? nextBytes / 64 : 0;
  requests.steps = std::max<int64_t>(1, x.rows / 8 * (w.in / kBlock));
  int64_t row = 0;
  for (; row + 8 <= x.rows; row += 8)
    sumRows<8, P, PerChannel>(x, w, packed, groupScales, first, row, y, ldy,
                              nextRows ? &requests : nullptr);
  if (row + 4 <= x.rows) {
    sumRows<4, P, PerChannel>(x, w, packed, groupScales, first, row, y, ldy);
    row += 4;
  }
  if (row + 2 <= x.rows) {
    sumRows<2, P, PerChannel>(x, w, packed, groupScales, first, row, y, ldy);
    row += 2;
  }
  if (row < x.rows)
    sumRows<1, P, PerChannel>(x, w, packed, groupScales, first, row, y, ldy);
}

} // namespace

void gemmInt8Vnni(const Int8AmxOperands &x, const LinearWeights &w, int64_t begin, int64_t end,
                  float *y, int64_t ldy, int8_t *weightScratch) {
  if (x.rows <= 16)
    return gemmRowLanes(x, w, begin, end, y, ldy, weightScratch);
  const int64_t in = w.in, groups = w.groups;
  auto *packed = reinterpret_cast<uint8_t *>(weightScratch);
  int8_t *flipped = weightScratch + 32 * in;  // a panel's rows, flipped, in order
  // Each panel's weight scales as f32, transposed to [groups, 16 outputs].
  thread_local std::vector<float> panelScaleRows, transposedScales;
  transposedScales.resize(static_cast<size_t>(2 * groups * 16));
  for (int64_t first = begin; first < end; first += 32) {
    const int panels = end - first >= 32 ? 2 : 1;
    const float *groupScales[2];
    for (int p = 0; p < panels; ++p) {
      const int64_t panelFirst = first + p * 16;
      packPanel(flipPanel(w, panelFirst, flipped), in, packed + p * 16 * in);
      const float *scales = scalesOf(w, panelFirst, panelScaleRows);
      requestScalesOf(w, panelFirst + 16 * kScalesAhead);
      float *transposed = transposedScales.data() + p * groups * 16;
      for (int64_t o = 0; o < 16; ++o)
        for (int64_t g = 0; g < groups; ++g)
          transposed[g * 16 + o] = scales[o * groups + g];
      groupScales[p] = transposed;
    }
    const bool perChannel = groups == 1;
    // The next panels' rows (int8 or int4, contiguous) requested while these are computed:
    // their flip had waited on memory. On the Zen 5, 135-token GPT-2 int8 prompts: flipPanel
    // 8.2% -> 3.7% of the samples, 44.7 -> 47.5 prompts/s (4 alternating runs); requested in
    // one burst per group of 8 rows instead of spread over the blocks, the bench stream had
    // been 4% slower (its steps of 17-40 rows made bursts of hundreds of lines).
    const int64_t rowBytes = w.dtype == DType::U8 ? in / 2 : in;
    const char *nextRows =
        first + 32 < end ? static_cast<const char *>(w.data) + (first + 32) * rowBytes : nullptr;
    const int64_t nextBytes = std::min<int64_t>(32, end - first - 32) * rowBytes;
    if (panels == 2)
      (perChannel ? sumAllRows<2, true> : sumAllRows<2, false>)(x, w, packed, groupScales, first,
                                                                 y, ldy, nextRows, nextBytes);
    else
      (perChannel ? sumAllRows<1, true> : sumAllRows<1, false>)(x, w, packed, groupScales, first,
                                                                 y, ldy, nextRows, nextBytes);
  }
}

} // namespace dsrt::ops::fast

DSRT_TARGET_REGION_END
