// The checks of tfm.linear's CUDA launcher (LinearChecks.h).
#include "cuda/ops/LinearChecks.h"

#include <cstring>
#include <string>

namespace dsrt::cuda::linear {
namespace {

// The constant a kernel has for a half activation (XT, OUT_DT): the dtype, or -1 (absent)
// for f32.
int64_t halfConstant(DType dtype) {
  return dtype == DType::F32 ? -1 : static_cast<int64_t>(dtype);
}

} // namespace

Status readNormPrologue(StepContext &context, int64_t k, NormPrologue &norm) {
  std::string kind;
  DSRT_RETURN_IF_ERROR(ops::getString(context.attrs(), "norm", "", kind));
  norm.scale = optionalInput(context, kNormScale);
  norm.bias = optionalInput(context, kNormBias);
  if (kind.empty()) {
    if (norm.scale || norm.bias)
      return context.error("has a norm scale or bias (inputs 5 and 6) but no norm prologue");
    return Status::ok();
  }
  if (kind != "rms" && kind != "layer")
    return context.error("the norm prologue must be rms or layer, not '", kind, "'");
  norm.code = kind == "rms" ? 1 : 2;
  if (!norm.scale || (norm.bias && norm.code != 2))
    return context.error("a norm prologue takes a scale, and a layer norm's a bias");
  for (const DeviceTensor *param : {norm.scale, norm.bias})
    if (param && (!isStoredFloat(param->dtype) || param->elements() != k))
      return context.error("the norm prologue's scale and bias must be float [", k, "]");
  norm.epsilon = -1;
  DSRT_RETURN_IF_ERROR(ops::getFloat(context.attrs(), "norm_epsilon", -1.0f, norm.epsilon));
  if (!(norm.epsilon >= 0))
    return context.error("the norm prologue needs a non-negative norm_epsilon");
  return Status::ok();
}

Status checkNormKernels(StepContext &context, int64_t k, NormPrologue &norm, size_t slots,
                        DType operand, size_t trailing) {
  const size_t count = context.kernelCount() - trailing;
  if (norm.code == 0) {
    if (context.kernelConstant(kGemvSlot, "NORM", 0) != 0)
      return context.error("the gemv kernel normalises and the step has no norm prologue");
    return Status::ok();
  }
  const bool operandKernel = operand != DType::F32 && count == slots + 2;
  if (count != slots + 1 && !operandKernel)
    return context.error("the plan has ", context.kernelCount(), " kernels for this step, not ",
                         slots + 1 + trailing, " (the norm prologue's is the last",
                         trailing ? " before the tile GEMM)" : ")",
                         operand != DType::F32 ? " or " + std::to_string(slots + 2 + trailing)
                                               : "");
  norm.slot = slots;
  if (operandKernel) {
    norm.operandSlot = static_cast<int64_t>(slots + 1);
    for (const char *name : {"HIDDEN", "SCALE_DT", "BIAS_DT", "RESIDUAL", "BLOCK"})
      if (context.kernelConstant(slots + 1, name, -1) != context.kernelConstant(slots, name, -1))
        return context.error("the norm prologue's two kernels differ in ", name);
    if (context.kernelConstant(slots + 1, "OUT_DT", -1) != static_cast<int64_t>(operand))
      return context.error("the norm prologue's second kernel does not write the GEMM's ",
                           dtypeName(operand));
  }
  if (context.kernelConstant(slots, "OUT_DT", -1) != -1)
    return context.error("the norm prologue's first kernel must write f32");
  const int64_t scaleType = static_cast<int64_t>(norm.scale->dtype);
  const int64_t biasType = norm.bias ? static_cast<int64_t>(norm.bias->dtype) : 0;
  if (context.kernelConstant(kGemvSlot, "NORM", 0) != norm.code ||
      context.kernelConstant(kGemvSlot, "NORM_SCALE_DT", -1) != scaleType ||
      context.kernelConstant(kGemvSlot, "NORM_BIAS_DT", -1) != biasType)
    return context.error("the gemv kernel was generated for another norm prologue");
  const int64_t block = context.kernelConstant(norm.slot, "BLOCK", -1);
  if (context.kernelConstant(norm.slot, "HIDDEN", -1) != k ||
      context.kernelConstant(norm.slot, "SCALE_DT", -1) != scaleType ||
      context.kernelConstant(norm.slot, "RESIDUAL", -1) != 0 ||
      (norm.code == 2 && context.kernelConstant(norm.slot, "BIAS_DT", -1) != biasType) ||
      block < 32 || block > 1024 || block % 32 != 0)
    return context.error("the norm kernel was generated for another norm than the step's");
  return Status::ok();
}

DType gemmType(DType weightType, const Int8Weight *int8) {
  return int8 ? int8->scaleType : weightType;
}

Status checkSpecialisation(StepContext &context, DType weightType, const Int8Weight *int8,
                           const DeviceTensor *bias, const DeviceTensor *residual,
                           DType inputType, DType outputType, Fused &fused) {
  const bool converts = gemmType(weightType, int8) != inputType;
  const size_t needed = 2 + (int8 ? 1 : 0) + (converts ? 1 : 0);
  if (context.kernelCount() < needed)
    return context.error("the plan has ", context.kernelCount(), " kernels for this step, not ",
                         needed);
  // gemv is specialised for the plan's K but takes the run's: a rank of an uneven
  // tensor-parallel split has fewer in-features than rank 0, whose shapes the plan has.
  if (context.kernelConstant(kGemvSlot, "K", -1) <= 0)
    return context.error("the gemv kernel has no K constant");
  if (context.kernelConstant(kGemvSlot, "WT", -1) != static_cast<int64_t>(weightType))
    return context.error("the kernel was generated for another weight dtype than ",
                         dtypeName(weightType));
  if (int8) {
    // GS is the group size on every rank (0: one group per row of whatever length), so
    // the run's [n, groups] must have groups * GS == k.
    for (size_t slot : {kGemvSlot, kDequantizeSlot}) {
      if (context.kernelConstant(slot, "SDT", -1) != static_cast<int64_t>(int8->scaleType))
        return context.error("the quantized kernels were generated for other scales than ",
                             dtypeName(int8->scaleType));
      const int64_t gs = context.kernelConstant(slot, "GS", -1);
      if (gs != int8->groupSize && !(gs == 0 && int8->groups == 1))
        return context.error("the quantized kernels were generated for group size ", gs,
                             " (0: one per row), the weight has ", int8->groups,
                             " groups of ", int8->groupSize);
    }
  }
  fused.activation = context.kernelConstant(kGemvSlot, "ACT", -1);
  fused.bias = context.kernelConstant(kGemvSlot, "HAS_BIAS", 0) != 0;
  fused.residual = context.kernelConstant(kGemvSlot, "HAS_RESIDUAL", 0) != 0;
  fused.gated = context.kernelConstant(kGemvSlot, "GATED", 0) != 0;
  if ((context.kernelConstant(kEpilogueSlot, "GATED", 0) != 0) != fused.gated)
    return context.error("the epilogue kernel does not match the gemv kernel's gating");
  if (fused.gated && (fused.activation == -1 || residual))
    return context.error("a gated linear needs an activation and takes no residual");
  if (fused.bias != (bias != nullptr) || fused.residual != (residual != nullptr))
    return context.error("the kernel's bias/residual epilogue does not match the step's inputs");
  if (bias && context.kernelConstant(kGemvSlot, "BIAS_DT", -1) != static_cast<int64_t>(bias->dtype))
    return context.error("the kernel was generated for another bias dtype than ",
                         dtypeName(bias->dtype));
  if (context.kernelConstant(kEpilogueSlot, "ACT", -2) != fused.activation ||
      (context.kernelConstant(kEpilogueSlot, "HAS_BIAS", 0) != 0) != fused.bias ||
      (context.kernelConstant(kEpilogueSlot, "HAS_RESIDUAL", 0) != 0) != fused.residual)
    return context.error("the epilogue kernel does not match the gemv kernel");
  // The logit epilogue is compiled in (LOGIT_SCALE_BITS, LOGIT_CAP_BITS: the f32 bits, each
  // absent where the step has none), so the kernels must be the step's.
  float logitScale = 1.0f, logitCap = 0.0f;
  DSRT_RETURN_IF_ERROR(ops::getFloat(context.attrs(), "logit_scale", 1.0f, logitScale));
  DSRT_RETURN_IF_ERROR(ops::getFloat(context.attrs(), "logit_cap", 0.0f, logitCap));
  auto bits = [](float value, float none) -> int64_t {
    uint32_t word = 0;
    std::memcpy(&word, &value, sizeof word);
    return value == none ? -1 : static_cast<int64_t>(word);
  };
  for (size_t slot : {kGemvSlot, kEpilogueSlot})
    if (context.kernelConstant(slot, "LOGIT_SCALE_BITS", -1) != bits(logitScale, 1.0f) ||
        context.kernelConstant(slot, "LOGIT_CAP_BITS", -1) != bits(logitCap, 0.0f))
      return context.error("the kernels were generated for another logit scale or cap than ",
                           logitScale, " and ", logitCap);
  fused.logits = logitScale != 1.0f || logitCap != 0.0f;
  const size_t convertSlot = int8 ? kInt8ConvertSlot : kFloatConvertSlot;
  if (converts && context.kernelConstant(convertSlot, "WT", -1) !=
                      static_cast<int64_t>(gemmType(weightType, int8)))
    return context.error("the conversion kernel was generated for another weight dtype");
  // The plan's half activations are compiled in: the input's dtype (XT) where gemv and the
  // conversion read it, the result's (OUT_DT) where gemv and the epilogue write it.
  if (context.kernelConstant(kGemvSlot, "XT", -1) != halfConstant(inputType) ||
      (converts && context.kernelConstant(convertSlot, "XT", -1) != halfConstant(inputType)))
    return context.error("the kernels were generated for another input dtype than ",
                         dtypeName(inputType));
  for (size_t slot : {kGemvSlot, kEpilogueSlot})
    if (context.kernelConstant(slot, "OUT_DT", -1) != halfConstant(outputType))
      return context.error("the kernels were generated for another output dtype than ",
                           dtypeName(outputType));
  return Status::ok();
}

Status checkInt8(StepContext &context, const DeviceTensor &w, const DeviceTensor &scales,
                 int64_t k, Int8Weight &int8) {
  int8.int4 = w.dtype == DType::U8;
  const char *kind = int8.int4 ? "int4" : "int8";
  if (!isStoredFloat(scales.dtype))
    return context.error("the ", kind, " scales must be f32, f16 or bf16, not ",
                         dtypeName(scales.dtype));
  const int64_t n = w.shape[0];
  if (scales.shape.size() != 2 || scales.shape[0] != n || scales.shape[1] <= 0 ||
      k % scales.shape[1] != 0)
    return context.error("the ", kind, " scales must be [", n, ", groups] with groups dividing ",
                         k, ", not ", shapeString(scales.shape));
  int8.scaleType = scales.dtype;
  int8.groups = scales.shape[1];
  int8.groupSize = k / int8.groups;
  if (int8.int4 && int8.groupSize % 2 != 0)
    return context.error("the int4 weight's groups of ", int8.groupSize,
                         " in-features are odd (two codes share a byte)");
  return Status::ok();
}

Status checkTileGemm(StepContext &context, size_t slot, DType weightType,
                     const Int8Weight &int8) {
  if (context.kernelConstant(slot, "WT", -1) != static_cast<int64_t>(weightType))
    return context.error("the tile GEMM was generated for another weight dtype than ",
                         dtypeName(weightType));
  if ((int8.scaleType != DType::F16 && int8.scaleType != DType::BF16) ||
      context.kernelConstant(slot, "SDT", -1) != static_cast<int64_t>(int8.scaleType))
    return context.error("the tile GEMM was generated for other scales than ",
                         dtypeName(int8.scaleType), " (it multiplies in f16 or bf16)");
  const int64_t gs = context.kernelConstant(slot, "GS", -1);
  if (gs != int8.groupSize && !(gs == 0 && int8.groups == 1))
    return context.error("the tile GEMM was generated for group size ", gs,
                         " (0: one per row), the weight has ", int8.groups, " groups of ",
                         int8.groupSize);
  if (context.kernelConstant(slot, "TILE_M", -1) != 64 ||
      context.kernelConstant(slot, "TILE_N", -1) != 64)
    return context.error("the tile GEMM's tile is not 64 x 64");
  return Status::ok();
}

} // namespace dsrt::cuda::linear
