// The checks of tfm.linear's and tfm.lm_head's CUDA launcher (LinearOps.cpp): what a step's
// kernels were generated for (LinearRules.cpp's constants and slots) against the tensors it
// runs with, its norm prologue, and an int8 or int4 weight's scales. Split from the launcher
// along that seam; nothing here launches.
#pragma once

#include "cuda/GpuOps.h"

namespace dsrt::cuda::linear {

// Input positions of the fused tfm.linear (docs/transformer-ops.md).
constexpr size_t kInput = 0, kWeight = 1, kBias = 2, kScales = 3, kResidual = 4,
                 kNormScale = 5, kNormBias = 6;
constexpr size_t kGemvSlot = 0, kEpilogueSlot = 1;
// The conversion is the last slot: 2 after float weights, 3 after int8's dequantization.
constexpr size_t kFloatConvertSlot = 2, kDequantizeSlot = 2, kInt8ConvertSlot = 3;

inline bool isStoredFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

inline const DeviceTensor *optionalInput(StepContext &context, size_t index) {
  return index < context.inputCount() ? context.input(index) : nullptr;
}

// An int8 or int4 weight's scales as the kernels read them: [n, groups] of `dtype`, each
// group `groupSize` consecutive in-features (0: one group per row). An int4 weight is u8
// [n, k / 2], two codes a byte (docs/int4.md).
struct Int8Weight {
  DType scaleType = DType::Undefined;
  int64_t groups = 0, groupSize = 0;
  bool int4 = false;
};

// What the step's kernels were generated for; checked against what it runs with, since
// the code's shape depends on every one of them.
struct Fused {
  int64_t activation = -1;
  bool bias = false, residual = false;
  // A joined [gate; up] weight whose result is act(gate) * up, half as wide.
  bool gated = false;
  // The LM head's logit epilogue (tfm.lm_head logit_scale / logit_cap).
  bool logits = false;
};

// A norm prologue: gemv's NORM code (1 rms, 2 layer) and its weights, and the norm kernel's
// slot (the last).
struct NormPrologue {
  int64_t code = 0;
  const DeviceTensor *scale = nullptr, *bias = nullptr;
  float epsilon = 0;
  size_t slot = 0;
  // The same norm writing the f16/bf16 GEMM's operand (OUT_DT), after it; absent (-1) in
  // plans from before it and for f32 GEMMs.
  int64_t operandSlot = -1;
};

// The step's norm prologue (tfm.linear `norm`, its inputs 5 and 6, `norm_epsilon`).
Status readNormPrologue(StepContext &context, int64_t k, NormPrologue &norm);
// The norm kernel (rms_norm.cuh / layer_norm.cuh, after the linear's `slots`), and where the
// GEMM multiplies in f16/bf16 (`operand`) maybe the same writing that dtype after it, and
// gemv's NORM constants must be those of the step's norm. `trailing` kernels follow them
// (the tile GEMM: 1 where the plan has it).
Status checkNormKernels(StepContext &context, int64_t k, NormPrologue &norm, size_t slots,
                        DType operand, size_t trailing = 0);
// The dtype cuBLASLt multiplies in: the stored weight's, or an int8 / int4 weight's scales'.
DType gemmType(DType weightType, const Int8Weight *int8);
// The kernels' constants and slots against the step's weight, bias, residual and dtypes;
// `fused` receives the epilogue they were generated for.
Status checkSpecialisation(StepContext &context, DType weightType, const Int8Weight *int8,
                           const DeviceTensor *bias, const DeviceTensor *residual,
                           DType inputType, DType outputType, Fused &fused);
// An int8 weight [n, k] (int4: u8 [n, k / 2]) needs scales [n, groups] of a float dtype with
// groups dividing k (int4: into even groups, two codes a byte).
Status checkInt8(StepContext &context, const DeviceTensor &w, const DeviceTensor &scales,
                 int64_t k, Int8Weight &int8);
// The tile GEMM (gemm_dequant.cuh, kernel `slot`) against the weight and its scales: WT, SDT
// (f16 or bf16) and GS as the other quantized kernels have them, and its 64 x 64 tile.
Status checkTileGemm(StepContext &context, size_t slot, DType weightType,
                     const Int8Weight &int8);

} // namespace dsrt::cuda::linear
