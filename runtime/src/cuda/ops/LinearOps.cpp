// Launchers of tfm.linear (with the fuse pass's epilogue) and tfm.lm_head: the kernels of
// codegen/kernels/LinearRules.cpp, whose slot order is
//   float weights: 0 gemv, 1 linear_epilogue, 2 convert_activations (f16/bf16 weights only);
//   int8 weights:  0 gemv, 1 linear_epilogue, 2 dequantize_int8,
//                  3 convert_activations (f16/bf16 scales only); the scales are input 3 of
//                  both ops (an int8 tfm.lm_head has no input 2);
//   int4 weights:  the same with 2 dequantize_int4: u8 [out, in / 2], two codes a byte
//                  (docs/int4.md), so the in-feature count k is the input's, twice the
//                  weight's columns.
// Up to kGemvMaxRows rows (decode) one gemv launch computes act(x·Wᵀ + b) + residual, or
// for a gated linear act(gate) * up from the two halves of its weight (int8: dequantizing
// as it reads); more rows go to cuBLASLt (StepContext::gemm) and then
// the epilogue kernel (none where cuBLASLt's own epilogue takes the bias and a ReLU or
// tanh-GELU: StepContext::gemmTakesEpilogue), an int8 weight first dequantized into scratch in the scales' dtype,
// in parts of at most StepContext::scratchPartBytes() (docs/cuda-backend.md, "int8
// linears": prefill is compute bound). A norm prologue (tfm.linear `norm`; its kernel
// follows these, and for an f16/bf16 GEMM the same writing that dtype after it) normalises
// the input rows inside gemv where gemv stages them (decode), and otherwise with the norm
// kernel into scratch first (rows too long to stage), or on the GEMM path with the second
// kernel, which writes the GEMM's operand itself (no convert_activations; plans from
// before it convert). A narrow layer's gemv gives each output feature SPLIT_K warps. The math
// is the CPU kernel's (runtime/src/ops/Transformer.cpp): the TP `parallel` attribute and
// lm_head's vocab_offset/vocab_size change nothing, the weight already holds this rank's
// rows. Only shapes and attributes are read on the host, so every launch may be captured.
// What the kernels were generated for is checked against the step in LinearChecks.cpp.
// int8 and int4 weights with f16/bf16 scales have a last slot, gemm_dequant: from 9 rows up
// to tileGemmRows() it replaces the dequantization and cuBLASLt (docs/cuda-backend.md,
// "int8 linears", "Prefill"), writing the f32 product the epilogue then takes as cuBLASLt's.
#include "cuda/GpuOps.h"
#include "cuda/ops/LinearChecks.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace dsrt::cuda {
namespace {

using namespace linear;

// gemv.cuh's GEMV_MAX_ROWS: the rows one launch keeps in registers.
constexpr int64_t kGemvMaxRows = 8;
constexpr unsigned kGemvBlock = 256;  // 8 warps, one output feature each at a time
// Shared memory a block may take without opting in to more.
constexpr int64_t kGemvMaxStagedBytes = 48 * 1024;
constexpr unsigned kElementwiseBlock = 256;
// The 32 floats of shared memory gemv's norm prologue reduces in, after the staged rows.
constexpr int64_t kGemvNormReductionBytes = 32 * sizeof(float);
// gemv.cuh's GEMV_SPLIT_SUMS_BYTES: split-K's partial sums, after both. Always left free in
// the staging budget, so that whether gemv stages does not depend on the device.
constexpr int64_t kGemvSplitSumsBytes = 8 * kGemvMaxRows * 2 * sizeof(float);

// The most rows the tile GEMM takes (gemm_dequant.cuh); more go to dequantize + cuBLASLt.
// The dequantize path writes and re-reads 2·n·k bytes more than the tile GEMM reads, about
// 443/m of a peak-rate GEMM's time on an H100 (90% at 512 rows, 20% at 2048), while the tile
// GEMM (register-prefetched 64 x 64 tiles, no cp.async pipeline) runs well below cuBLASLt's
// peak: at 512 rows the two costs meet by that estimate. The GPU sweep measures the
// crossover (bench/gpu/sweep.sh's tilegemm step) through DSRT_CUDA_TILE_GEMM_ROWS (0: never).
constexpr int64_t kTileGemmRows = 512;
// The tile GEMM's block (4 warps, each 32 x 32 of the 64 x 64 tile) and its steps along k.
constexpr unsigned kTileGemmBlock = 128;
constexpr int64_t kTileGemmStep = 32;
// Split-K where a prompt's tiles fill less than a wave: at most 16 parts, each at least 8
// steps (256 in-features) long, so that each part still streams its codes.
constexpr int64_t kTileGemmMaxSplits = 16, kTileGemmMinSplitSteps = 8;

// Read at every launch, not once: graphs capture the launch shapes of the run that captured
// them, and a test or the sweep may change it between sessions of one process.
int64_t tileGemmRows() {
  const char *value = std::getenv("DSRT_CUDA_TILE_GEMM_ROWS");
  if (!value || !*value)
    return kTileGemmRows;
  char *end = nullptr;
  const long long rows = std::strtoll(value, &end, 10);
  return end && *end == '\0' && rows >= 0 ? rows : kTileGemmRows;
}

bool overlaps(const DeviceTensor &a, const DeviceTensor &b) {
  if (a.bytes() == 0 || b.bytes() == 0)
    return false;
  return a.data < b.data + b.bytes() && b.data < a.data + a.bytes();
}

// A grid for `work` items of `perBlock` each, at most `cap` blocks (kernels loop over the
// rest), at least one.
unsigned gridFor(int64_t work, int64_t perBlock, int64_t cap) {
  int64_t blocks = (work + perBlock - 1) / perBlock;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, std::max<int64_t>(cap, 1)));
}

// cuBLASLt's epilogue activation for the kernels' ACT (dsc_common.cuh's DSC_ACT_*: -1
// none, 1 gelu_tanh, 4 relu); false where it has none (erf GELU, SiLU ...).
bool gemmActivationOf(int64_t act, GemmActivation &out) {
  switch (act) {
  case -1: out = GemmActivation::None; return true;
  case 1: out = GemmActivation::GeluTanh; return true;
  case 4: out = GemmActivation::Relu; return true;
  default: return false;
  }
}

Status runLinear(StepContext &context) {
  const bool isLinear = context.op() == "tfm.linear";
  const DeviceTensor *x = context.input(kInput), *w = context.input(kWeight);
  if (!x || !w)
    return context.error("needs an input and a weight");
  const DeviceTensor *bias = isLinear ? optionalInput(context, kBias) : nullptr;
  const DeviceTensor *residual = isLinear ? optionalInput(context, kResidual) : nullptr;
  // An int8 head's scales take tfm.linear's position 3 (docs/transformer-ops.md).
  const DeviceTensor *scales = optionalInput(context, kScales);
  if (context.outputCount() < 1)
    return context.error("has no output");
  const DeviceTensor &y = context.output(0);

  // f32, or the plan's half activation dtype (dsc-activation-dtype): an input, or a gated
  // linear's result.
  if (!isStoredFloat(x->dtype) || !isStoredFloat(y.dtype))
    return context.error("the input and output must be f32, f16 or bf16, not ",
                         dtypeName(x->dtype), " and ", dtypeName(y.dtype));
  if (w->shape.size() != 2)
    return context.error("the weight must be [out, in], not ", shapeString(w->shape));
  if (w->dtype == DType::I8 && !scales)
    return context.error("the int8 weight has no scales");
  if (scales && w->dtype != DType::I8 && w->dtype != DType::U8)
    return context.error("has scales beside a ", dtypeName(w->dtype),
                         " weight (scales belong to int8 and int4 weights)");
  if (!scales && !isStoredFloat(w->dtype))
    return context.error("the weight must be f32, f16 or bf16 (or int8 or int4 with scales), "
                         "not ", dtypeName(w->dtype));
  // An int4 weight holds two codes a byte: its in-features are twice its columns.
  const bool int4 = w->dtype == DType::U8;
  const int64_t n = w->shape[0], k = int4 ? 2 * w->shape[1] : w->shape[1];
  // A gated linear (tfm.linear `gated`): n weight rows, n / 2 outputs.
  int64_t gatedAttr = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "gated", 0, gatedAttr));
  const bool gated = isLinear && gatedAttr != 0;
  if (gated && n % 2 != 0)
    return context.error("a gated linear's weight has ", n, " rows, not a [gate; up] pair");
  const int64_t width = gated ? n / 2 : n;
  Int8Weight int8;
  if (scales)
    DSRT_RETURN_IF_ERROR(checkInt8(context, *w, *scales, k, int8));
  const Int8Weight *quantized = scales ? &int8 : nullptr;
  if (x->shape.empty() || x->shape.back() != k)
    return context.error("the input's last dimension must be ", k,
                         int4 ? " (the int4 weight's bytes, two codes each)" : "");
  if (y.shape.empty() || y.shape.back() != width)
    return context.error("the output's last dimension must be ", width);
  const int64_t rows = width == 0 ? 0 : y.elements() / width;
  if (x->elements() != rows * k)
    return context.error("the input has ", x->elements(), " elements, not ", rows * k);
  if (bias && (!isStoredFloat(bias->dtype) || bias->elements() != n))
    return context.error("the bias must be float [", n, "]");
  if (residual && (residual->dtype != DType::F32 || residual->shape != y.shape))
    return context.error("the residual must be f32 of the output's shape");
  if (n > INT_MAX || k > (int64_t(1) << 27))
    return context.error("[", n, ", ", k, "] is more than the kernels index");

  Fused fused;
  DSRT_RETURN_IF_ERROR(checkSpecialisation(context, w->dtype, quantized, bias, residual,
                                           x->dtype, y.dtype, fused));
  NormPrologue norm;
  if (isLinear)
    DSRT_RETURN_IF_ERROR(readNormPrologue(context, k, norm));
  const bool converts = gemmType(w->dtype, quantized) != x->dtype;
  const size_t baseSlots = 2 + (quantized ? 1 : 0) + (converts ? 1 : 0);
  // The tile GEMM, the last slot where the plan has it (plans from before it have none).
  size_t tileSlot = 0;
  const bool hasTileGemm = quantized && context.kernelCount() > baseSlots &&
                           context.kernelConstant(context.kernelCount() - 1, "TILE_N", 0) != 0;
  if (hasTileGemm) {
    tileSlot = context.kernelCount() - 1;
    DSRT_RETURN_IF_ERROR(checkTileGemm(context, tileSlot, w->dtype, int8));
  }
  DSRT_RETURN_IF_ERROR(checkNormKernels(context, k, norm, baseSlots,
                                        gemmType(w->dtype, quantized), hasTileGemm ? 1 : 0));
  if (fused.gated != gated)
    return context.error(gated ? "the step is gated and its kernels are not"
                               : "the kernels are gated and the step is not");
  if (y.dtype != DType::F32 && !gated)
    return context.error("a ", dtypeName(y.dtype), " result is a gated linear's only");
  if (x->dtype != DType::F32 && norm.code != 0)
    return context.error("a norm prologue normalises f32 rows, not ", dtypeName(x->dtype));
  if (rows == 0 || n == 0)
    return Status::ok();
  // Every output element is written while other inputs are still being read: an output
  // sharing memory with them would be the memory plan's error. The residual alone may be
  // the output itself (each element is read, then written, by the same thread).
  if (overlaps(y, *x) || overlaps(y, *w) || (bias && overlaps(y, *bias)) ||
      (scales && overlaps(y, *scales)) || (norm.scale && overlaps(y, *norm.scale)) ||
      (norm.bias && overlaps(y, *norm.bias)))
    return context.error("the output overlaps an input");
  const bool residualInPlace = residual && residual->data == y.data;
  if (residual && !residualInPlace && overlaps(y, *residual))
    return context.error("the output partly overlaps the residual");

  DevicePtr xPtr = x->data, wPtr = w->data, scalesPtr = scales ? scales->data : 0,
            biasPtr = bias ? bias->data : 0, residualPtr = residual ? residual->data : 0,
            yPtr = y.data;
  const int64_t sms = std::max(1, context.multiprocessorCount());

  // gemv stages x in shared memory when it fits (with a norm prologue, and the prologue's
  // reduction after it), and normalises it there.
  const int64_t stagedBytes = rows * k * static_cast<int64_t>(sizeof(float)) +
                              (norm.code != 0 ? kGemvNormReductionBytes : 0);
  const bool gemvPath = rows <= kGemvMaxRows;
  const bool staged = gemvPath && stagedBytes + kGemvSplitSumsBytes <= kGemvMaxStagedBytes;
  // The GEMM's f16/bf16 operand, when the norm prologue's second kernel writes it.
  bool operandNormalized = false;
  if (norm.code != 0 && !staged) {
    // The norm kernel's rows into scratch, which the gemv or the GEMM then reads: in f32,
    // or on the GEMM path, where the plan has it, as the GEMM's operand.
    operandNormalized = !gemvPath && norm.operandSlot >= 0;
    const size_t slot = operandNormalized ? static_cast<size_t>(norm.operandSlot) : norm.slot;
    const DType written = operandNormalized ? gemmType(w->dtype, quantized) : DType::F32;
    DevicePtr normalized = 0;
    DSRT_RETURN_IF_ERROR(
        context.scratch(static_cast<size_t>(rows * k) * dtypeSize(written), normalized));
    DevicePtr normScalePtr = norm.scale->data, normBiasPtr = norm.bias ? norm.bias->data : 0,
              noResidual = 0, noSum = 0;
    long long rowCount = rows;
    float epsilon = norm.epsilon;
    Dim3 grid{static_cast<unsigned>(std::min<int64_t>(rows, INT_MAX))};
    Dim3 block{static_cast<unsigned>(context.kernelConstant(slot, "BLOCK", 32))};
    if (norm.code == 1) {
      void *args[] = {&xPtr, &normScalePtr, &noResidual, &normalized, &noSum, &rowCount,
                      &epsilon};
      DSRT_RETURN_IF_ERROR(context.launch(slot, grid, block, 0, args));
    } else {
      void *args[] = {&xPtr,       &normScalePtr, &normBiasPtr, &noResidual,
                      &normalized, &noSum,        &rowCount,    &epsilon};
      DSRT_RETURN_IF_ERROR(context.launch(slot, grid, block, 0, args));
    }
    xPtr = normalized;
  }

  if (gemvPath) {
    // Gated: each warp reads a gate row and its up row for one output feature.
    int rowCount = static_cast<int>(rows), outCount = static_cast<int>(width),
        inCount = static_cast<int>(k);
    int stagedArg = staged ? 1 : 0, normalize = norm.code != 0 && staged ? 1 : 0;
    DevicePtr normScalePtr = norm.scale ? norm.scale->data : 0,
              normBiasPtr = norm.bias ? norm.bias->data : 0;
    float epsilon = norm.epsilon;
    // Blocks stride over the features, so a few per multiprocessor keep the weight reads
    // in flight while each block stages x only once; a narrow layer's kernel splits each
    // feature's k over SPLIT_K warps, for which the grid has SPLIT_K times the warps.
    const int64_t warpsPerBlock = kGemvBlock / 32;
    const int64_t splits = context.kernelConstant(kGemvSlot, "SPLIT_K", 1);
    if (splits != 1 && splits != 2 && splits != 4 && splits != 8)
      return context.error("the gemv kernel's SPLIT_K is ", splits, ", not 1, 2, 4 or 8");
    const uint32_t sharedBytes = static_cast<uint32_t>((staged ? stagedBytes : 0) +
                                                       (splits > 1 ? kGemvSplitSumsBytes : 0));
    // One wave of as many blocks as the multiprocessors hold at once (their registers and
    // shared memory decide): a fixed 4 per multiprocessor was 1.33 waves where 3 fit (the
    // int8 gemv's 66 registers on sm_90), the last third of the blocks running alone.
    // Where the occupancy is not known, 4.
    const int resident = context.residentBlocksPerMultiprocessor(kGemvSlot, kGemvBlock, sharedBytes);
    const int64_t wave = sms * (resident > 0 ? resident : 4);
    Dim3 grid{gridFor(width * splits, warpsPerBlock, wave)}, block{kGemvBlock};
    // The norm prologue's parameters only for a kernel that has them (NORM).
    void *args[] = {&xPtr,      &wPtr,         &scalesPtr,   &biasPtr,  &residualPtr,
                    &yPtr,      &rowCount,     &outCount,    &inCount,  &stagedArg,
                    &normScalePtr, &normBiasPtr, &epsilon,   &normalize};
    return context.launch(kGemvSlot, grid, block, sharedBytes, args);
  }

  // cuBLASLt multiplies equal types: f16/bf16 weights take the activations converted.
  // An int8 weight is dequantized first, into the scales' dtype (f16/bf16: the tensor
  // cores; f32: an f32 GEMM), once per GEMM: long prefills are compute bound, so cuBLASLt's
  // GEMM is worth 3*n*k more bytes than an f16 weight's (docs/cuda-backend.md, "int8
  // linears", has the cost for shorter ones).
  // An input already in that dtype (the plan's half activations into weights of the same)
  // is the GEMM's operand as it is.
  const DType operandType = gemmType(w->dtype, quantized);
  GemmDesc gemm;
  gemm.m = rows;
  gemm.n = n;
  gemm.k = k;
  gemm.b = wPtr;
  gemm.bType = w->dtype;
  gemm.a = xPtr;
  gemm.aType = operandNormalized ? operandType : x->dtype;
  if (operandType != x->dtype && !operandNormalized) {
    long long count = rows * k;
    DevicePtr converted = 0;
    DSRT_RETURN_IF_ERROR(
        context.scratch(static_cast<size_t>(count) * dtypeSize(operandType), converted));
    Dim3 grid{gridFor(count, kElementwiseBlock, sms * 8)}, block{kElementwiseBlock};
    void *args[] = {&xPtr, &converted, &count};
    DSRT_RETURN_IF_ERROR(context.launch(quantized ? kInt8ConvertSlot : kFloatConvertSlot, grid,
                                        block, 0, args));
    gemm.a = converted;
    gemm.aType = operandType;
  }

  // linear_epilogue over the f32 product, where anything is left to do after the GEMM.
  auto epilogue = [&](DevicePtr product, DevicePtr epilogueResidual) -> Status {
    const bool needed = fused.bias || fused.activation != -1 || fused.logits ||
                        epilogueResidual != 0 || product != yPtr;
    if (!needed)
      return Status::ok();
    long long count = rows * width, features = width;
    Dim3 grid{gridFor(count, kElementwiseBlock, sms * 8)}, block{kElementwiseBlock};
    void *args[] = {&product, &biasPtr, &epilogueResidual, &yPtr, &count, &features};
    return context.launch(kEpilogueSlot, grid, block, 0, args);
  };

  // The tile GEMM: the codes read in place, no scratch for the weight. Its product goes to
  // the output, or to scratch where the epilogue gates it or still reads the output as the
  // residual after an activation; without an activation it adds the residual itself (as
  // cuBLASLt's C), the bias and the logit epilogue following in the epilogue kernel.
  if (hasTileGemm && rows <= tileGemmRows() && rows <= INT_MAX) {
    DevicePtr product = yPtr, addend = 0, epilogueResidual = residualPtr;
    if (gated) {
      DSRT_RETURN_IF_ERROR(
          context.scratch(static_cast<size_t>(rows * n) * sizeof(float), product));
    } else if (residualPtr && fused.activation == -1) {
      addend = residualPtr;
      epilogueResidual = 0;
    } else if (residualInPlace) {
      DSRT_RETURN_IF_ERROR(context.scratch(y.bytes(), product));
    }
    const int64_t tileM = context.kernelConstant(tileSlot, "TILE_M", 64),
                  tileN = context.kernelConstant(tileSlot, "TILE_N", 64);
    const int64_t tiles = (rows + tileM - 1) / tileM * ((n + tileN - 1) / tileN);
    // Blocks stride over the tiles (and their parts): one wave of what the multiprocessors
    // hold at once. A prompt whose tiles fill less than that splits k, doubling the parts
    // while they fit the wave, each part is long enough and their f32 partial products
    // [splits, rows, n] fit a part of scratch.
    const int resident = context.residentBlocksPerMultiprocessor(tileSlot, kTileGemmBlock, 0);
    const int64_t wave = sms * (resident > 0 ? resident : 4);
    const int64_t steps = (k + kTileGemmStep - 1) / kTileGemmStep;
    int splits = 1;
    while (splits * 2 <= kTileGemmMaxSplits && tiles * splits * 2 <= wave &&
           steps / (splits * 2) >= kTileGemmMinSplitSteps &&
           splits * 2 * rows * n * int64_t(sizeof(float)) <=
               static_cast<int64_t>(context.scratchPartBytes()))
      splits *= 2;
    DevicePtr partials = 0, counters = 0;
    if (splits > 1) {
      DSRT_RETURN_IF_ERROR(context.scratch(
          static_cast<size_t>(splits * rows * n) * sizeof(float), partials));
      DSRT_RETURN_IF_ERROR(context.arrivalCounters(static_cast<size_t>(tiles), counters));
    }
    Dim3 grid{gridFor(tiles * splits, 1, wave)}, block{kTileGemmBlock};
    DevicePtr operand = gemm.a;
    int rowCount = static_cast<int>(rows), outCount = static_cast<int>(n),
        inCount = static_cast<int>(k), ldc = static_cast<int>(n);
    void *args[] = {&operand,  &wPtr,     &scalesPtr, &product, &addend,   &rowCount,
                    &outCount, &inCount,  &ldc,       &partials, &counters, &splits};
    DSRT_RETURN_IF_ERROR(context.launch(tileSlot, grid, block, 0, args));
    return epilogue(product, epilogueResidual);
  }

  // An int8 weight's rows in parts of at most scratchPartBytes() dequantized into one
  // scratch block, each part's GEMM writing its columns of C (ldc = n): an LM head of 128k
  // rows would otherwise hold a 0.5 GB scratch block for the session's life. Parts of whole
  // 64-row blocks keep C's columns 256-byte aligned. Float weights are one part.
  int64_t partRows = n;
  DevicePtr dequantized = 0;
  if (quantized) {
    const int64_t rowBytes = k * static_cast<int64_t>(dtypeSize(operandType));
    partRows = std::max<int64_t>(
        1, static_cast<int64_t>(context.scratchPartBytes()) / std::max<int64_t>(rowBytes, 1));
    if (partRows < n && partRows >= 64)
      partRows -= partRows % 64;
    partRows = std::min(partRows, n);
    DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(partRows * rowBytes), dequantized));
  }
  struct GemmPart {
    GemmDesc gemm;
    int64_t firstRow;
  };
  auto partsOf = [&](const GemmDesc &whole) {
    std::vector<GemmPart> parts;
    for (int64_t first = 0; first < n; first += partRows) {
      GemmPart part{whole, first};
      if (quantized) {
        part.gemm.n = std::min(partRows, n - first);
        part.gemm.b = dequantized;
        part.gemm.bType = operandType;
        part.gemm.c += static_cast<DevicePtr>(first * 4);
        if (part.gemm.addend)
          part.gemm.addend += static_cast<DevicePtr>(first * 4);
        if (part.gemm.bias)
          part.gemm.bias += static_cast<DevicePtr>(first * dtypeSize(part.gemm.biasType));
        part.gemm.ldc = n;
      }
      parts.push_back(part);
    }
    return parts;
  };

  // cuBLASLt's own epilogue where it has the step's (a bias, ReLU or tanh-GELU; not a gated
  // pair, not the logit epilogue): no epilogue kernel, and the product written once. It
  // adds C (the residual) before the activation, so an activation and a residual together
  // stay in the kernel, as does what the heuristic has no algorithm for (a half bias beside
  // the f32 product, on some versions).
  GemmActivation ltActivation = GemmActivation::None;
  bool inCublas = false;
  std::vector<GemmPart> parts;
  if (!gated && !fused.logits && (fused.bias || fused.activation != -1) &&
      gemmActivationOf(fused.activation, ltActivation) &&
      (fused.activation == -1 || !residualPtr)) {
    GemmDesc withEpilogue = gemm;
    withEpilogue.c = yPtr;
    withEpilogue.bias = biasPtr;
    withEpilogue.biasType = bias ? bias->dtype : DType::F32;
    withEpilogue.activation = ltActivation;
    if (residualPtr) {
      withEpilogue.accumulate = true;
      withEpilogue.addend = residualInPlace ? 0 : residualPtr;
    }
    parts = partsOf(withEpilogue);
    inCublas = std::all_of(parts.begin(), parts.end(), [&](const GemmPart &part) {
      return context.gemmTakesEpilogue(part.gemm);
    });
  }

  // Without an activation the residual can be the GEMM's C (C = residual; C += x·Wᵀ) when
  // it already is the output; otherwise the product goes to the output, or to scratch when
  // the output is the residual the epilogue still has to read.
  DevicePtr product = yPtr;
  DevicePtr epilogueResidual = residualPtr;
  if (inCublas) {
    epilogueResidual = 0;
  } else if (gated) {
    // The joined [rows, n] product, which the epilogue gates into the [rows, n / 2] output.
    DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(rows * n) * sizeof(float), product));
  } else if (residualInPlace) {
    if (fused.activation == -1) {
      gemm.accumulate = true;
      epilogueResidual = 0;  // already in C
    } else {
      DSRT_RETURN_IF_ERROR(context.scratch(y.bytes(), product));
    }
  } else if (residualPtr && fused.activation == -1 && !fused.bias && !fused.logits) {
    // The residual is the GEMM's C and the output its D (o_proj, down_proj): no epilogue.
    gemm.accumulate = true;
    gemm.addend = residualPtr;
    epilogueResidual = 0;
  }
  if (!inCublas) {
    gemm.c = product;
    parts = partsOf(gemm);
  }
  const int64_t scaleRowBytes =
      quantized ? int8.groups * static_cast<int64_t>(dtypeSize(int8.scaleType)) : 0;
  for (const GemmPart &part : parts) {
    if (quantized) {
      long long partCount = part.gemm.n, inCount = k;
      DevicePtr partWeight = wPtr + static_cast<DevicePtr>(part.firstRow * (int4 ? k / 2 : k));
      DevicePtr partScales = scalesPtr + static_cast<DevicePtr>(part.firstRow * scaleRowBytes);
      // Blocks stride over the rows; a few per multiprocessor keep the reads in flight.
      Dim3 grid{gridFor(partCount, 1, sms * 8)}, block{kElementwiseBlock};
      void *args[] = {&partWeight, &partScales, &dequantized, &partCount, &inCount};
      DSRT_RETURN_IF_ERROR(context.launch(kDequantizeSlot, grid, block, 0, args));
    }
    DSRT_RETURN_IF_ERROR(context.gemm(part.gemm));
  }
  if (inCublas)
    return Status::ok();
  return epilogue(product, epilogueResidual);
}

} // namespace

void addLinearGpuOps(std::vector<GpuOpInfo> &ops) {
  ops.push_back({"tfm.linear", runLinear});
  ops.push_back({"tfm.lm_head", runLinear});
}

} // namespace dsrt::cuda
