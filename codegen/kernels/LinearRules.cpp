// Rules of tfm.linear (with the fuse passes' epilogue: activation, residual, or a gated
// activation of a joined gate-up weight) and
// tfm.lm_head. Their launcher is runtime/src/cuda/ops/LinearOps.cpp; the slot order here
// is its. Float weights (f32, f16, bf16):
//   0 gemv                 rows <= 8: act(x·Wᵀ + b) + residual in one launch (an LM head's
//                          logit scale and cap after it)
//   1 linear_epilogue      after cuBLASLt: bias, activation and residual over [rows, out]
//   2 convert_activations  the input to the weight dtype, where they differ (f32
//                          activations to f16/bf16 weights; a half input, the plan's
//                          activation dtype, to another: XT)
// int8 and int4 weights with scales (tfm.linear, and tfm.lm_head, whose scales take
// tfm.linear's position 3; docs/cuda-backend.md, "int8 linears" and "int4 linears"; an int4
// weight is u8 [out, in / 2], two codes a byte, and K is the in-feature count):
//   0 gemv                 as above, dequantizing inside (WT 8 or 9, SDT, GS)
//   1 linear_epilogue      as above
//   2 dequantize_int8 / dequantize_int4
//                          rows > 8: w^ = q * scale into scratch, in the scales' dtype
//   3 convert_activations  f32 activations to the scales' dtype (f16/bf16 scales only)
// A linear with a norm prologue (tfm.linear `norm`, dsc-fuse-norm-prologue) has one more,
// last: rms_norm or layer_norm, the norm step's kernel, which normalises the input into
// scratch where gemv does not do it in the rows it stages (more rows, or rows too long for
// its shared memory). Its gemv has NORM (1 rms, 2 layer), NORM_SCALE_DT and NORM_BIAS_DT
// (0: none). Where the GEMM runs in f16 or bf16, a second norm kernel follows, the same
// with OUT_DT (that dtype): on the GEMM path it writes the normalised rows as the GEMM's
// operand, so no convert_activations launch (and no f32 copy of the rows) is needed; the
// first stays for rows too long for gemv to stage, which gemv reads in f32.
// int8 and int4 weights with f16/bf16 scales have one more, after all of these:
//   gemm_dequant           9 to DSRT_CUDA_TILE_GEMM_ROWS rows (default 512): the tile GEMM
//                          that dequantizes in shared memory (WT, SDT, GS, TILE_M, TILE_N),
//                          instead of slot 2 + cuBLASLt; the epilogue after it as after
//                          cuBLASLt.
#include "codegen/kernels/KernelRules.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dsc::codegen {
namespace {

using dsrt::DType;

// Input positions of the fused tfm.linear (docs/transformer-ops.md).
constexpr size_t kInput = 0, kWeight = 1, kBias = 2, kScales = 3, kResidual = 4,
                 kNormScale = 5, kNormBias = 6;

bool isStoredFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

// Activations are f32 on the device (docs/cuda-backend.md); other dtypes stay on the
// fallback.
bool requireF32(const dsp::TensorT *tensor, const char *what, std::string &reason) {
  if (!tensor) {
    reason = std::string("has no ") + what;
    return false;
  }
  auto dtype = static_cast<DType>(tensor->dtype);
  if (dtype != DType::F32) {
    reason = std::string(what) + " is " + dsrt::dtypeName(dtype) +
             ", the linear kernels take f32 activations";
    return false;
  }
  return true;
}

// gemv's grid on an H100 SXM: 4 blocks of 8 warps for each of its 132 multiprocessors
// (LinearOps.cpp's cap). Split-K is chosen for it: a device with fewer multiprocessors gets
// at most a wave more than it needs.
constexpr int64_t kReferenceGemvBlocks = 4 * 132;

// The warps gemv gives each of `features` output features (SPLIT_K): 1, or for a layer whose
// features would leave most of the reference grid idle (a down projection: few outputs, long
// rows) 2, 4 or 8, while each warp's part of a row keeps at least 32 16-byte loads (one per
// lane). A compile-time constant, so that each part has a known length.
int64_t gemvSplits(int64_t features, int64_t k, DType weightType) {
  const int64_t perLoad = weightType == DType::U8 ? 32  // int4: two codes a byte
                          : weightType == DType::I8
                              ? 16
                              : 16 / static_cast<int64_t>(dsrt::dtypeSize(weightType));
  const int64_t loads = k / std::max<int64_t>(perLoad, 1);
  constexpr int64_t kWarpsPerBlock = 8;
  int64_t splits = 1;
  while (splits < kWarpsPerBlock && features > 0 &&
         (features * splits + kWarpsPerBlock - 1) / kWarpsPerBlock < kReferenceGemvBlocks &&
         loads / (2 * splits) >= 32)
    splits *= 2;
  return splits;
}

bool linearRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const bool isLinear = in.step().op == "tfm.linear";
  const dsp::TensorT *weight = in.input(kWeight);
  if (!weight) {
    reason = "has no weight";
    return false;
  }
  // f32 activations, or the plan's half activation dtype (dsc-activation-dtype) as the input
  // or as a gated linear's result: XT and OUT_DT below.
  if (!in.input(kInput) || !in.output(0)) {
    reason = "has no input or output";
    return false;
  }
  const DType inputType = static_cast<DType>(in.input(kInput)->dtype);
  const DType outputType = static_cast<DType>(in.output(0)->dtype);
  auto isHalf = [](DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; };
  if (!isHalf(inputType) && !requireF32(in.input(kInput), "the input", reason))
    return false;
  if (!isHalf(outputType) && !requireF32(in.output(0), "the output", reason))
    return false;
  if (isHalf(outputType) && (!isLinear || in.intAttr("gated", 0) == 0)) {
    reason = std::string("a ") + dsrt::dtypeName(outputType) +
             " result is a gated linear's only (its epilogue rounds into it)";
    return false;
  }
  if (isHalf(inputType) && isLinear && !in.stringAttr("norm", "").empty()) {
    reason = std::string("a norm prologue normalises f32 rows, not ") +
             dsrt::dtypeName(inputType);
    return false;
  }
  if (weight->shape.size() != 2) {
    reason = "the weight is not [out, in]";
    return false;
  }
  const DType weightType = in.deviceDType(*weight);
  const dsp::TensorT *scales = in.input(kScales);
  // int4 (docs/int4.md): u8 [out, in / 2] beside its scales, two codes a byte. int8 and int4
  // share the quantized kernels' constants and slots.
  const bool int4 = weightType == DType::U8 && scales;
  const bool quantized = weightType == DType::I8 || int4;
  const char *kind = int4 ? "int4" : "int8";
  if (quantized != (scales != nullptr)) {
    reason = weightType == DType::I8
                 ? "the int8 weight has no scales"
                 : std::string("has scales beside a ") + dsrt::dtypeName(weightType) +
                       " weight (scales belong to int8 and int4 weights)";
    return false;
  }
  if (!quantized && !isStoredFloat(weightType)) {
    reason = std::string("the weight is stored as ") + dsrt::dtypeName(weightType);
    return false;
  }
  const int64_t storedK = in.staticDim(*weight, 1);
  const int64_t k = int4 && storedK > 0 ? 2 * storedK : storedK;
  if (k <= 0 || in.staticDim(*in.input(kInput), -1) != k) {
    reason = int4 ? "the int4 weight's bytes are not [out, in / 2] of the input's in-features"
                  : "the in-feature count is dynamic (or disagrees between input and weight)";
    return false;
  }
  // int8 and int4: the scales' stored dtype (that of the GEMM path's dequantized weight) and the
  // group size, which is the same on every tensor-parallel rank; one group per row is GS 0,
  // since an uneven rank's rows are shorter than rank 0's.
  DType scaleType = DType::F32;
  int64_t groupSize = 0;
  if (quantized) {
    scaleType = in.deviceDType(*scales);
    if (!isStoredFloat(scaleType)) {
      reason = std::string("the ") + kind + " scales are stored as " +
               dsrt::dtypeName(scaleType) + ", not a float dtype";
      return false;
    }
    const int64_t groups = scales->shape.size() == 2 ? in.staticDim(*scales, 1) : -1;
    if (groups <= 0 || k % groups != 0 || in.staticDim(*scales, 0) != in.staticDim(*weight, 0)) {
      reason = std::string("the ") + kind +
               " scales are not a static [out, groups] with groups dividing " + std::to_string(k);
      return false;
    }
    groupSize = groups == 1 ? 0 : k / groups;
    if (int4 && groupSize % 2 != 0) {
      reason = "the int4 groups of " + std::to_string(groupSize) + " are odd (two codes share a "
               "byte)";
      return false;
    }
  }
  // gemv indexes rows of x with int: rows (<= 8) * K must fit.
  if (k > (int64_t(1) << 27)) {
    reason = "the in-feature count " + std::to_string(k) + " is too large for gemv";
    return false;
  }

  int64_t activation = -1, hasBias = 0, biasType = static_cast<int64_t>(DType::F32),
          hasResidual = 0;
  bool gated = false;
  if (isLinear) {
    activation = activationCode(in.stringAttr("activation", "none"));
    if (activation == -2) {
      reason = "unknown activation '" + in.stringAttr("activation", "") + "'";
      return false;
    }
    gated = in.intAttr("gated", 0) != 0;
    if (gated && (activation == -1 || in.input(kResidual) || in.staticDim(*weight, 0) % 2 != 0)) {
      reason = "a gated linear needs an activation, an even number of weight rows and no "
               "residual";
      return false;
    }
    if (const dsp::TensorT *bias = in.input(kBias)) {
      DType dtype = in.deviceDType(*bias);
      if (!isStoredFloat(dtype)) {
        reason = std::string("the bias is stored as ") + dsrt::dtypeName(dtype);
        return false;
      }
      hasBias = 1;
      biasType = static_cast<int64_t>(dtype);
    }
    if (const dsp::TensorT *residual = in.input(kResidual)) {
      if (!requireF32(residual, "the residual", reason))
        return false;
      hasResidual = 1;
    }
  }

  const int64_t wt = static_cast<int64_t>(weightType);
  KernelSpec gemv{"gemv", {{"K", k}, {"WT", wt}}};
  if (quantized) {
    gemv.constants.push_back({"SDT", static_cast<int64_t>(scaleType)});
    gemv.constants.push_back({"GS", groupSize});
  }
  gemv.constants.insert(gemv.constants.end(), {{"ACT", activation},
                                               {"HAS_BIAS", hasBias},
                                               {"BIAS_DT", biasType},
                                               {"HAS_RESIDUAL", hasResidual}});
  KernelSpec epilogue{"linear_epilogue",
                      {{"ACT", activation},
                       {"HAS_BIAS", hasBias},
                       {"BIAS_DT", biasType},
                       {"HAS_RESIDUAL", hasResidual}}};
  // Only gated linears' kernels have the constant: every other step keeps the kernels (and
  // the cached PTX) it had before the gated epilogue existed.
  if (gated) {
    gemv.constants.push_back({"GATED", 1});
    epilogue.constants.push_back({"GATED", 1});
  }
  // The norm prologue: gemv's constants (only where there is one, as GATED), and the norm
  // kernel for the paths that normalise apart, last.
  const std::string norm = isLinear ? in.stringAttr("norm", "") : "";
  KernelSpec normSpec;
  if (!norm.empty()) {
    const dsp::TensorT *normScale = in.input(kNormScale), *normBias = in.input(kNormBias);
    if ((norm != "rms" && norm != "layer") || !normScale || (normBias && norm != "layer")) {
      reason = "the norm prologue '" + norm + "' is not an rms norm with a scale or a layer "
               "norm with a scale and an optional bias";
      return false;
    }
    if (!normKernel(in, norm == "rms", k, normScale, normBias, false, normSpec, reason))
      return false;
    gemv.constants.push_back({"NORM", norm == "rms" ? 1 : 2});
    gemv.constants.push_back({"NORM_SCALE_DT", static_cast<int64_t>(in.deviceDType(*normScale))});
    gemv.constants.push_back(
        {"NORM_BIAS_DT", normBias ? static_cast<int64_t>(in.deviceDType(*normBias)) : 0});
  }
  // An LM head's logit epilogue, compiled in where it has one (as the embedding's scale).
  if (!isLinear) {
    const float scale = in.floatAttr("logit_scale", 1.0f), cap = in.floatAttr("logit_cap", 0.0f);
    if (!std::isfinite(scale) || !(cap >= 0.0f) || !std::isfinite(cap)) {
      reason = "the logit scale or cap is not finite (or the cap is negative)";
      return false;
    }
    auto add = [&](const char *name, float value) {
      uint32_t bits = 0;
      std::memcpy(&bits, &value, sizeof bits);
      gemv.constants.push_back({name, static_cast<int64_t>(bits)});
      epilogue.constants.push_back({name, static_cast<int64_t>(bits)});
    };
    if (scale != 1.0f)
      add("LOGIT_SCALE_BITS", scale);
    if (cap != 0.0f)
      add("LOGIT_CAP_BITS", cap);
  }
  // Split-K (several warps per output feature for narrow layers): last, as every plan's
  // gemv since it exists has it.
  gemv.constants.push_back(
      {"SPLIT_K", gemvSplits(gated ? in.staticDim(*weight, 0) / 2 : in.staticDim(*weight, 0),
                             k, weightType)});
  // The plan's half activations (input, gated result): last, and only where the step has
  // them, so that every other step keeps its kernels.
  if (isHalf(inputType))
    gemv.constants.push_back({"XT", static_cast<int64_t>(inputType)});
  if (isHalf(outputType)) {
    gemv.constants.push_back({"OUT_DT", static_cast<int64_t>(outputType)});
    epilogue.constants.push_back({"OUT_DT", static_cast<int64_t>(outputType)});
  }
  kernels.push_back(std::move(gemv));
  kernels.push_back(std::move(epilogue));
  // The GEMM multiplies in the dtype of its weight operand: the stored one, or for int8 and
  // int4 the scales' (the dequantized weight's).
  const DType gemmType = quantized ? scaleType : weightType;
  if (quantized)
    kernels.push_back({int4 ? "dequantize_int4" : "dequantize_int8",
                       {{"SDT", static_cast<int64_t>(scaleType)}, {"GS", groupSize}}});
  // The input in the GEMM's dtype: none where it already is (an f32 input to f32 weights,
  // or the half activation dtype to weights of that dtype).
  if (gemmType != inputType) {
    kernels.push_back({"convert_activations", {{"WT", static_cast<int64_t>(gemmType)}}});
    if (isHalf(inputType))
      kernels.back().constants.push_back({"XT", static_cast<int64_t>(inputType)});
  }
  if (!norm.empty()) {
    kernels.push_back(normSpec);
    if (gemmType != DType::F32) {
      normSpec.constants.push_back({"OUT_DT", static_cast<int64_t>(gemmType)});
      kernels.push_back(std::move(normSpec));
    }
  }
  // int8 and int4 with f16/bf16 scales: the tile GEMM that dequantizes in shared memory, last
  // (it came after every other slot; f32 scales keep dequantize + an f32 cuBLASLt GEMM).
  if (quantized && gemmType != DType::F32)
    kernels.push_back({"gemm_dequant",
                       {{"WT", wt},
                        {"SDT", static_cast<int64_t>(scaleType)},
                        {"GS", groupSize},
                        {"TILE_M", 64},
                        {"TILE_N", 64}}});
  return true;
}

} // namespace

void addLinearKernelRules(std::vector<KernelRuleEntry> &rules) {
  rules.push_back({"tfm.linear", linearRule});
  rules.push_back({"tfm.lm_head", linearRule});
}

} // namespace dsc::codegen
