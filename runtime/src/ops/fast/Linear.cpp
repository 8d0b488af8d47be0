// The fast linear layer: dotRows' kernels (portable, AVX2 or AVX-512, chosen at run time:
// IsaKernels.cpp) for decode and short prompts, and for many rows oneDNN's sgemm (opened at
// run time, so libdsrt needs no oneDNN to build or load: OneDnn.cpp) on fp32 tiles of the
// weights. The thread pool splits the output features; each sgemm call is single-threaded
// inside it.
#include "ops/fast/DotKernels.h"
#include "ops/fast/IsaChoice.h"
#include "ops/fast/OneDnn.h"
#include "ops/fast/QuantizedActivations.h"
#include "ops/ThreadPool.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace dsrt::ops::fast {

bool int4VnniAvailable();  // below
bool int4Avx2Available();  // below

namespace {

using detail::isa;

// f32 to bf16, rounded to nearest even (NaN kept a NaN): convertFloats' vector loop.
void roundToBf16(const float *from, int64_t count, uint16_t *to) {
  convertFloats(DType::F32, from, DType::BF16, to, count);
}

// Prompts' GEMMs in bf16 (docs/cpu-backend.md, "bf16 GEMMs"): x rounded to bf16 once per
// call, the weights as stored where they are bf16, else each tile rounded. By default for
// half (bf16, f16) and quantized weights where the CPU multiplies bf16 natively (AVX-512
// BF16 or AMX), since their products then cost half of f32's or less; DSRT_PREFILL_GEMM=bf16
// asks for it on f32 weights too (x and the weights each rounded to 8 significant bits,
// within 2^-8 relative each, so each product within 2^-7; sums in f32), =f32 never.
enum class PrefillGemm { F32, Bf16ForHalfAndQuantized, Bf16 };
PrefillGemm prefillGemm() {
  static const PrefillGemm chosen = [] {
    const char *mode = std::getenv("DSRT_PREFILL_GEMM");
    const std::string asked = mode ? mode : "";
    if (asked == "f32" || !oneDnn().gemmBf16)
      return PrefillGemm::F32;
    if (asked == "bf16")
      return PrefillGemm::Bf16;
    __builtin_cpu_init();
    const bool native = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
    return native ? PrefillGemm::Bf16ForHalfAndQuantized : PrefillGemm::F32;
  }();
  return chosen;
}

// f16 weights take it too where the CPU multiplies bf16 natively, as issue 47 asks of a half
// plan's prompts: each tile rounded from f16 (11 significant bits) to bf16 (8), within 2^-9
// relative per weight, like x's rounding; sgemm needed the same tiles widened to f32 and ran
// at a quarter of the bf16 GEMM's speed on a Xeon with AMX.
// int8 weights take it too where the CPU multiplies bf16 natively: their tiles are widened
// and rounded to bf16 rather than widened for sgemm (2x sgemm's speed at 512 rows on a Xeon
// with AMX), and rounding x and the scaled codes to bf16 (2^-8 each) weighs far less than
// the codes' own step (max |w| / 254 per output channel, docs/int8.md).
// int4 weights whose kernels round x anyway (int8 activations up to 64 rows, the default;
// DSRT_INT4_ACTIVATIONS=f32 keeps x exact everywhere) take the bf16 GEMM for longer prompts
// too: their tiles are unpacked to bf16 instead of f32, and x's bf16 rounding (2^-8) is
// finer than its int8 one (half of max|x| / 127 per block).
bool int4RoundsActivations() { return int4VnniAvailable() || int4Avx2Available(); }

bool prefillInBf16(DType weights) {
  switch (prefillGemm()) {
  case PrefillGemm::Bf16:
    return weights == DType::F32 || weights == DType::F16 || weights == DType::BF16 ||
           weights == DType::I8 || (weights == DType::U8 && int4RoundsActivations());
  case PrefillGemm::Bf16ForHalfAndQuantized:
    return weights == DType::BF16 || weights == DType::F16 || weights == DType::I8 ||
           (weights == DType::U8 && int4RoundsActivations());
  default: return false;
  }
}

// Rows of x up to which dotRows' blocks beat oneDNN's sgemm, measured on the development
// machine (AVX-512, GPT-2 and Llama shapes): at 32 rows they match it on fp32 weights and
// are 1.3x to 3x faster on narrow ones, which sgemm needs widened; at 64 rows sgemm is 15 %
// faster on fp32 and the blocks still faster on narrow weights; at 128 and more sgemm wins.
// int4 weights go to sgemm above 4 rows where their codes are unpacked to f32 (unpacking a
// tile once beats unpacking every weight for each block of rows), and above 64 where int8
// activations multiply them (DotInt4Vnni.cpp), like int8 weights.
int64_t ownKernelRows(DType weights) {
  if (weights == DType::U8)
    return int4VnniAvailable() || int4Avx2Available() ? 64 : 4;
  return weights == DType::F32 ? 32 : 64;
}
// Output features per widened tile: the tile stays in L2 while sgemm reads it.
constexpr int64_t kTileRows = 64;
// From kLongPromptRows rows of x, converted weights go to the GEMM kGemmRows output features
// at a time: each call packs x again, which at 64 features a call cost more than the
// products (a 2048-row prompt).
constexpr int64_t kLongPromptRows = 256;
constexpr int64_t kGemmRows = 512;
// dotRowsAsAlone's rows of x per pass over a range's weights (32 rows of 3072 inputs: 384 KB,
// in L2), and its ranges' multiple of output features.
constexpr int64_t kAsAloneRows = 32, kAsAlonePanel = 48;
// Multiply-adds below which a range of output features is not worth a thread.
constexpr int64_t kGrainWork = 1 << 15;

} // namespace

namespace {
// Whether the kernels with int8 activations can run: the CPU has AVX-512 VNNI and
// DSRT_CPU_ISA does not cap the kernels below AVX-512.
bool vnniActivationsPossible() {
  const std::string chosen = isa().name;
  if (chosen != "avx512" && chosen != "avx512-vnni")
    return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
}

std::string environment(const char *name) {
  const char *value = std::getenv(name);
  return value ? value : "";
}

// int8 weights meet int8 activations where asked (DSRT_INT8_ACTIVATIONS=int8, or
// DSRT_CPU_ISA=avx512-vnni): --dtype int8 is weight-only by default, and the fixtures'
// accuracy bounds (test/quant) hold its x exact. docs/int8.md has the speed and the cost.
bool int8VnniAvailable() {
  static const bool available =
      vnniActivationsPossible() && (environment("DSRT_INT8_ACTIVATIONS") == "int8" ||
                                    std::string(isa().name) == "avx512-vnni");
  return available;
}
} // namespace

// int4 weights meet int8 activations by default, as ONNX Runtime's int4 models ask
// (accuracy_level 4), unless DSRT_INT4_ACTIVATIONS=f32.
bool int4VnniAvailable() {
  static const bool available =
      vnniActivationsPossible() && environment("DSRT_INT4_ACTIVATIONS") != "f32";
  return available;
}

namespace {
// The plan's int8_activations (dsc's default for int8 and int4 plans) where VNNI is, unless
// DSRT_INT8_ACTIVATIONS=f32 keeps x exact (or DSRT_INT4_ACTIVATIONS=f32, as for an int4
// plan's layers): whether int8 weights are to meet int8 x, whatever their shape.
bool int8ActivationsWanted(const LinearWeights &w) {
  static const bool refused = environment("DSRT_INT8_ACTIVATIONS") == "f32";
  return w.dtype == DType::I8 &&
         (int8VnniAvailable() || (w.int8Activations && int4VnniAvailable() && !refused));
}

// Whether the int8 kernels' chunks of 64 inputs (or per channel, blocks of 32) tile the
// groups.
bool int8GroupsAreWholeChunks(const LinearWeights &w) {
  if (w.groups <= 0 || w.in % w.groups != 0)
    return false;
  const int64_t groupSize = w.in / w.groups;
  return groupSize % 64 == 0 || (groupSize == 32 && w.in % 64 == 0) ||
         (w.groups == 1 && w.in % 32 == 0);
}
} // namespace

// x stays f32 there, and the kernels by row count sum it each in their own order.
bool shapeKeepsIntegerXFloat(const LinearWeights &w) {
  if (w.dtype == DType::I8)
    return int8ActivationsWanted(w) && !int8GroupsAreWholeChunks(w);
  if (w.dtype == DType::U8)
    return int4RoundsActivations() &&
           !(w.groups > 0 && w.in % w.groups == 0 && (w.in / w.groups) % 32 == 0);
  return false;
}

bool int8QuantizesActivations(const LinearWeights &w, int64_t rows, bool rowInvariant) {
  if (rows < 1 || (rows > 64 && !rowInvariant))
    return false;
  return int8ActivationsWanted(w) && int8GroupsAreWholeChunks(w);
}

// Without VNNI (the kernels capped to AVX2, or an AVX-512 CPU without it), the AVX2 kernel
// with int8 activations (DotInt4Avx2.cpp), under the same option.
bool int4Avx2Available() {
  static const bool available = [] {
    if (int4VnniAvailable() || environment("DSRT_INT4_ACTIVATIONS") == "f32")
      return false;
    const std::string chosen = isa().name;
    return chosen == "avx2" || chosen == "avx512";
  }();
  return available;
}

// Rows of x from which int8 activations go to AMX-INT8 tiles rather than vpdpbusd: one tile
// product takes 16 rows, and at fewer the VNNI kernel reads each weight as few times. Where
// they cross (dsrt-linear-bench, 2026-12-03, Xeon with AMX, row-invariant): int8 weights
// from 3 rows (GPT-2's LM head at 3 rows 1.15 ms on tiles against 1.79 with the dot kernel,
// 768x2304 0.053 against 0.075; at 2 rows the smaller layers are faster on the dot kernel),
// int4 ones from about 6 (their dot kernel unpacks once for all its rows).
// DSRT_INT8_AMX=0 keeps the VNNI kernel (to compare them).
namespace {
constexpr int64_t kInt8AmxRows = 3, kInt4AmxRows = 8;
bool int8AmxTakes(const LinearWeights &w, int64_t rows) {
  static const bool allowed = environment("DSRT_INT8_AMX") != "0" && int8AmxAvailable();
  return allowed && rows >= (w.dtype == DType::U8 ? kInt4AmxRows : kInt8AmxRows) &&
         gemmInt8AmxTakes(w) && w.out >= 16;
}
// Without AMX, the same packed x through VNNI a block of 16 rows at a time
// (GemmInt8Vnni.cpp): int8 weights from 5 rows (3072x768 at 5 rows 0.146 ms against 0.169
// with the dot kernel, at 4 0.149 against 0.117), int4 ones from 8.
// DSRT_INT8_VNNI_TILES=0 keeps the dot kernels.
constexpr int64_t kInt8VnniTileRows = 5, kInt4VnniTileRows = 8;
bool int8VnniTilesTake(const LinearWeights &w, int64_t rows) {
  static const bool allowed =
      environment("DSRT_INT8_VNNI_TILES") != "0" && vnniActivationsPossible();
  return allowed && rows >= (w.dtype == DType::U8 ? kInt4VnniTileRows : kInt8VnniTileRows) &&
         gemmInt8AmxTakes(w) && w.out >= 16;
}
} // namespace

bool int4QuantizesActivations(int64_t groupSize, int64_t rows, bool rowInvariant) {
  return int4RoundsActivations() && rows >= 1 && (rows <= 64 || rowInvariant) &&
         groupSize > 0 && groupSize % 32 == 0;
}

void quantizeInt4Activations(const float *x, int64_t rows, const LinearWeights &w,
                             Int4Activations &out) {
  out.rows = rows;
  if (out.quantized.size() < static_cast<size_t>(rows))
    out.quantized.resize(static_cast<size_t>(rows));
  const auto quantizeRow = int4VnniAvailable() ? quantizeInt4RowAvx512 : quantizeInt4RowAvx2;
  for (int64_t r = 0; r < rows; ++r)
    quantizeRow(x + r * w.in, w.in, out.quantized[static_cast<size_t>(r)]);
  // Where each step's weight scales are: a group of several blocks spans steps, and a step
  // may span (at most 4) groups.
  constexpr int64_t kBlock = 32, kStepBlocks = 4;
  const int64_t blocks = w.in / kBlock, steps = (blocks + kStepBlocks - 1) / kStepBlocks;
  const int64_t blocksPerGroup = w.in / w.groups / kBlock;
  out.stepFirstGroup.assign(static_cast<size_t>(steps), 0);
  out.stepGroupCount.assign(static_cast<size_t>(steps), 0);
  out.stepLaneGroup.assign(static_cast<size_t>(steps * 16), 0);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t firstBlock = s * kStepBlocks;
    const int64_t lastBlock = std::min(blocks, firstBlock + kStepBlocks) - 1;
    const int64_t firstGroup = firstBlock / blocksPerGroup;
    out.stepFirstGroup[static_cast<size_t>(s)] = static_cast<int32_t>(firstGroup);
    out.stepGroupCount[static_cast<size_t>(s)] =
        static_cast<int32_t>(lastBlock / blocksPerGroup - firstGroup + 1);
    for (int64_t b = firstBlock; b <= lastBlock; ++b)
      for (int64_t l = 0; l < 4; ++l)
        out.stepLaneGroup[static_cast<size_t>(s * 16 + (b - firstBlock) * 4 + l)] =
            static_cast<int32_t>(b / blocksPerGroup - firstGroup);
  }
}

// Under rowInvariant the bf16 GEMM still takes bf16 weights against an x the caller holds in
// bf16 (a bf16 plan's attention and gated-MLP outputs): it then rounds nothing, as the dot
// kernels on the same values do not.
bool bf16PromptGemm(DType weights, int64_t rows, bool rowInvariant, bool xInBf16) {
  return (!rowInvariant || (xInBf16 && weights == DType::BF16)) &&
         rows > ownKernelRows(weights) && oneDnn().sgemm && prefillInBf16(weights);
}

namespace {
void dotRowsInt4(const Int4Activations &x, const LinearWeights &w, int64_t begin, int64_t end,
                 float *y, int64_t ldy) {
  if (int4VnniAvailable())
    dotRowsInt4Vnni(x, w, begin, end, y, ldy);
  else
    dotRowsInt4Avx2(x, w, begin, end, y, ldy);
}
} // namespace

void dotRows(const float *x, int64_t rows, const LinearWeights &w, int64_t begin, int64_t end,
             float *y, int64_t ldy) {
  if (rows <= 0 || begin >= end)
    return;
  if (w.dtype == DType::U8 && w.groups > 0 && int4QuantizesActivations(w.in / w.groups, rows)) {
    thread_local Int4Activations quantized;
    quantizeInt4Activations(x, rows, w, quantized);
    return dotRowsInt4(quantized, w, begin, end, y, ldy);
  }
  if (int8QuantizesActivations(w, rows)) {
    thread_local Int8Activations quantized;
    quantizeInt8Activations(x, rows, w, quantized);
    return dotRowsInt8Vnni(quantized, w, begin, end, y, ldy);
  }
  isa().dotRows(x, rows, w, begin, end, y, ldy);
}

void linear(const float *x, int64_t rows, const LinearWeights &w, float *y,
            const std::function<void(int64_t, int64_t)> &epilogue, const uint16_t *xBf16,
            bool rowInvariant, bool exactFloatRows) {
  const int64_t out = w.out, in = w.in;
  if (rows <= 0 || out <= 0)
    return;
  // Without x in f32 (the caller's bf16 only), where the bf16 GEMM does not take this call.
  thread_local std::vector<float> widenedX;
  const bool bf16Gemm = !exactFloatRows && bf16PromptGemm(w.dtype, rows, rowInvariant, true);
  if (!x && !(xBf16 && bf16Gemm)) {
    widenedX.resize(static_cast<size_t>(rows * in));
    convertFloats(DType::BF16, xBf16, DType::F32, widenedX.data(), rows * in);
    x = widenedX.data();
  }
  const OneDnn &dnn = oneDnn();
  const bool int4Quantized = w.dtype == DType::U8 && w.groups > 0 &&
                             int4QuantizesActivations(in / w.groups, rows, rowInvariant);
  const bool int8Vnni = int8QuantizesActivations(w, rows, rowInvariant);
  // A batch-invariant session (rowInvariant) sums such a layer as each row alone too, even
  // below exactFloatRows: in a plan whose other layers quantize x, these few are the only
  // ones that a row's step could change (a down_proj of 56 inputs, int4 groups of 28).
  const bool asAlone = exactFloatRows || (rowInvariant && shapeKeepsIntegerXFloat(w));
  if (asAlone && rows >= 2 && x && in > 0 && !int4Quantized && !int8Vnni) {
    // Weights that multiply x in f32: every row's outputs the bits that row gets alone (one
    // row's kernel, dotRows), where the kernels by row count (and sgemm's blocking) each sum
    // in an order of their own. Float weights through dotRowsAsAlone, x in chunks of
    // kAsAloneRows rows, which stay in L2 while each block of weight rows passes them all;
    // int8 and int4 ones (without int8 activations: no VNNI, or int4 groups that are not
    // whole blocks of 32) a row at a time through that kernel itself, over a range of
    // outputs whose weights stay in cache.
    const bool floatWeights =
        w.dtype == DType::F32 || w.dtype == DType::F16 || w.dtype == DType::BF16;
    const int64_t panels = (out + kAsAlonePanel - 1) / kAsAlonePanel;
    parallelFor(panels, (panels + parallelThreads() - 1) / parallelThreads(),
                [&](int64_t begin, int64_t end) {
      const int64_t first = begin * kAsAlonePanel, last = std::min(out, end * kAsAlonePanel);
      if (floatWeights)
        for (int64_t r = 0; r < rows; r += kAsAloneRows)
          isa().dotRowsAsAlone(x + r * in, std::min(kAsAloneRows, rows - r), w, first, last,
                               y + r * out, out);
      else
        for (int64_t r = 0; r < rows; ++r)
          dotRows(x + r * in, 1, w, first, last, y + r * out, out);
      epilogue(first, last);
    });
    return;
  }
  if (rows <= ownKernelRows(w.dtype) || !dnn.sgemm || in == 0 || int4Quantized || int8Vnni) {
    // Blocks of 4 features, so that each thread's range keeps whole kernel blocks.
    int64_t blocks = (out + 3) / 4;
    int64_t grain = std::max<int64_t>(1, kGrainWork / std::max<int64_t>(1, 4 * in * rows));
    // The caller's buffers: the pool's threads read them (their own thread_local would be
    // empty).
    thread_local Int4Activations callerInt4;
    thread_local Int8Activations callerInt8;
    Int4Activations &quantized = callerInt4;
    Int8Activations &quantized8 = callerInt8;
    // Many rows on AMX-INT8 tiles: int8 weights, and int4 ones whose activations the VNNI
    // kernel quantizes (the same values as int8's quantizer: DotInt4Vnni.cpp).
    // Where the CPU has no AMX, the same tiles of x through VNNI (GemmInt8Vnni.cpp).
    const bool integerTiles = int8Vnni || (int4Quantized && int4VnniAvailable());
    const bool amx = integerTiles && int8AmxTakes(w, rows);
    const bool tiles = amx || (integerTiles && int8VnniTilesTake(w, rows));
    // In the engine, int4 rows that the tiles do not take (few rows, a panel's last
    // outputs) are summed in the tiles' f32 order too, from x quantized as int8's
    // (dotRowsInt4InTilesOrder), so that a row's result does not depend on its step.
    const bool int4TilesOrder = int4Quantized && rowInvariant && int4VnniAvailable() &&
                                int8TilesOrderTakes(w);
    if (int4TilesOrder && (!tiles || out % 16 != 0))
      quantizeInt8Activations(x, rows, w, quantized8);
    else if (int4Quantized && (!tiles || out % 16 != 0))
      quantizeInt4Activations(x, rows, w, quantized);
    if (int8Vnni && !tiles)
      quantizeInt8Activations(x, rows, w, quantized8);
    if (tiles) {
      thread_local Int8AmxPacked callerPacked;
      Int8AmxPacked &packed = callerPacked;
      // Quantized straight into the tiles, sixteen rows at a time, by row tiles on the pool
      // (on the caller alone, the other threads waited for it: 4% of a serving profile). A
      // tile's lanes share cache lines, so each is one thread's. The dot kernel that takes
      // an int8 product's last outputs (fewer than 16) reads x's rows quantized one by one,
      // the same values.
      const bool rowsQuantized = int8Vnni && out % 16 != 0;
      if (rowsQuantized)
        prepareInt8Activations(rows, quantized8);
      prepareInt8AmxPacking(rows, in, packed);
      const int64_t rowTiles = packed.operands.paddedRows / 16;
      parallelFor(rowTiles, 1, [&](int64_t begin, int64_t end) {
                    quantizeInt8Tiles(x, rows, in, begin, end, packed);
                    if (rowsQuantized)
                      quantizeInt8ActivationRows(x, begin * 16, std::min(rows, end * 16), w,
                                                 quantized8);
                  });
      // Panels of 16 output features; the last few features (fewer than 16) by the VNNI
      // kernels, in the last range.
      // One range of panels per thread: each range's first panel waits on memory (its
      // weights are requested only from the panel before), and parallelFor's usual four
      // ranges a thread made that a third of a 768-output product's panels at 16 rows (the
      // GPT-2 int8 engine's linears 10% slower at 16 clients of decode rows).
      const int64_t panels = out / 16;
      const int64_t panelGrain = std::max<int64_t>(
          (panels + parallelThreads() - 1) / parallelThreads(),
          kGrainWork / std::max<int64_t>(1, 16 * in * rows));
      parallelFor(panels, panelGrain, [&](int64_t begin, int64_t end) {
        const int64_t first = begin * 16, last = end == panels ? out : end * 16;
        // Where a kernel keeps its panels' weight rows (int4 ones unpacked for AMX, every
        // panel flipped for VNNI): on a cache line, as x's tiles.
        thread_local std::vector<int8_t> panelRows;
        int8_t *scratch = nullptr;
        if (w.dtype == DType::U8 || !amx) {
          panelRows.resize(static_cast<size_t>((amx ? 32 : 48) * in + 64));
          scratch = panelRows.data() + (64 - reinterpret_cast<uintptr_t>(panelRows.data()) % 64) % 64;
        }
        if (amx)
          gemmInt8Amx(packed.operands, w, first, end * 16, y, out, scratch);
        else
          gemmInt8Vnni(packed.operands, w, first, end * 16, y, out, scratch);
        if (last > end * 16 && int8Vnni)
          dotRowsInt8Vnni(quantized8, w, end * 16, last, y, out, rowInvariant);
        else if (last > end * 16 && int4TilesOrder)
          dotRowsInt4InTilesOrder(quantized8, w, end * 16, last, y, out);
        else if (last > end * 16)
          dotRowsInt4(quantized, w, end * 16, last, y, out);
        epilogue(first, last);
      });
      return;
    }
    if (w.dtype == DType::F32 && rows > 4 && rows <= isa().rowLanes) {
      // x transposed once, then panels of 16 features (dotRowLanes), one range of them a
      // thread: each range's first panel waits on memory.
      thread_local std::vector<float> callerXT;
      callerXT.resize(static_cast<size_t>(in * 16));
      const float *xT = callerXT.data();
      detail::transposeRowLanes(x, rows, in, callerXT.data());
      const int64_t panels = (out + 15) / 16;
      parallelFor(panels, (panels + parallelThreads() - 1) / parallelThreads(),
                  [&](int64_t begin, int64_t end) {
                    const int64_t first = begin * 16, last = std::min(out, end * 16);
                    isa().dotRowLanes(xT, x, rows, w, first, last, y, out);
                    epilogue(first, last);
                  });
      return;
    }
    parallelFor(blocks, grain, [&](int64_t begin, int64_t end) {
      int64_t first = begin * 4, last = std::min(out, end * 4);
      if (int4TilesOrder)
        dotRowsInt4InTilesOrder(quantized8, w, first, last, y, out);
      else if (int4Quantized)
        dotRowsInt4(quantized, w, first, last, y, out);
      else if (int8Vnni)
        dotRowsInt8Vnni(quantized8, w, first, last, y, out, rowInvariant);
      else
        dotRows(x, rows, w, first, last, y, out);
      epilogue(first, last);
    });
    return;
  }
  // One range of output features per thread, so one GEMM call each where the weights are
  // read as stored: each call packs all of x again (oneDNN's GEMMs pack both operands), and
  // with the pool's usual few ranges per thread that packing cost a 2048-row prompt's linears
  // 2-3x their time. Weights converted per tile go to the GEMM in tiles of up to kGemmRows.
  const int64_t tiles = (out + kTileRows - 1) / kTileRows;
  const int64_t threads = std::max<int64_t>(1, parallelThreads());
  const int64_t grain = std::max<int64_t>(
      {int64_t(1), kGrainWork / std::max<int64_t>(1, kTileRows * in * rows),
       (tiles + threads - 1) / threads});
  const int64_t gemmRows = rows >= kLongPromptRows ? kGemmRows : kTileRows;
  if (!exactFloatRows && bf16PromptGemm(w.dtype, rows, rowInvariant, xBf16 != nullptr)) {
    // The caller's buffer, by pointer: inside the pool's threads the name would be theirs.
    thread_local std::vector<uint16_t> narrowX;
    const uint16_t *xb = xBf16;
    if (!xb) {
      narrowX.resize(static_cast<size_t>(rows * in));
      uint16_t *rounded = narrowX.data();
      parallelFor(rows, std::max<int64_t>(1, kGrainWork / std::max<int64_t>(1, in)),
                  [&](int64_t begin, int64_t end) {
                    roundToBf16(x + begin * in, (end - begin) * in, rounded + begin * in);
                  });
      xb = rounded;
    }
    parallelFor(tiles, grain, [&](int64_t begin, int64_t end) {
      int64_t first = begin * kTileRows, last = std::min(out, end * kTileRows);
      if (w.dtype == DType::BF16) {
        gemmBf16NT(dnn, rows, last - first, in, xb, in,
                   static_cast<const uint16_t *>(w.data) + first * in, in, y + first, out);
      } else {
        // Widened kTileRows rows at a time (an f32 tile that stays in L2), rounded into a
        // bf16 tile of up to gemmRows rows.
        thread_local std::vector<float> wide;
        thread_local std::vector<uint16_t> tile;
        wide.resize(static_cast<size_t>(kTileRows * in));
        tile.resize(static_cast<size_t>(gemmRows * in));
        for (int64_t t = first; t < last; t += gemmRows) {
          const int64_t count = std::min(gemmRows, last - t);
          for (int64_t part = 0; part < count; part += kTileRows) {
            const int64_t partRows = std::min(kTileRows, count - part);
            const float *rowsF32 = wide.data();
            if (w.dtype == DType::F32)
              rowsF32 = static_cast<const float *>(w.data) + (t + part) * in;
            else
              isa().widenRows(w, t + part, partRows, wide.data());
            roundToBf16(rowsF32, partRows * in, tile.data() + part * in);
          }
          gemmBf16NT(dnn, rows, count, in, xb, in, tile.data(), in, y + t, out);
        }
      }
      epilogue(first, last);
    });
    return;
  }
  parallelFor(tiles, grain, [&](int64_t begin, int64_t end) {
    int64_t first = begin * kTileRows, last = std::min(out, end * kTileRows);
    if (w.dtype == DType::F32) {
      sgemmNT(dnn, rows, last - first, in, x, in, static_cast<const float *>(w.data) + first * in,
              in, y + first, out);
    } else {
      thread_local std::vector<float> tile;
      tile.resize(static_cast<size_t>(gemmRows * in));
      for (int64_t t = first; t < last; t += gemmRows) {
        const int64_t count = std::min(gemmRows, last - t);
        isa().widenRows(w, t, count, tile.data());
        sgemmNT(dnn, rows, count, in, x, in, tile.data(), in, y + t, out);
      }
    }
    epilogue(first, last);
  });
}

const char *linearKernelsDescription() {
  static const std::string description =
      std::string(oneDnn().sgemm ? "onednn sgemm + " : "") +
      (prefillGemm() == PrefillGemm::Bf16 ? "bf16 prompt gemm + "
       : prefillGemm() == PrefillGemm::Bf16ForHalfAndQuantized
           ? "bf16 prompt gemm of half, int8 and int4 weights + "
           : "") +
      isa().name +
      (int8VnniAvailable() && int4VnniAvailable()
           ? " (int8 and int4 up to 64 rows: avx512-vnni, int8 activations)"
       : int4VnniAvailable() ? " (int4 up to 64 rows: avx512-vnni, int8 activations)"
       : int4Avx2Available() ? " (int4 up to 64 rows: avx2, int8 activations)"
       : int8VnniAvailable() ? " (int8 up to 64 rows: avx512-vnni, int8 activations)"
                             : "");
  return description.c_str();
}

} // namespace dsrt::ops::fast
