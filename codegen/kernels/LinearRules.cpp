// Rules of tfm.linear (with the fuse pass's epilogue: activation, residual) and
// tfm.lm_head. Their launcher is runtime/src/cuda/ops/LinearOps.cpp; the slot order here
// is its:
//   0 gemv                 rows <= 8: act(x·Wᵀ + b) + residual in one launch
//   1 linear_epilogue      after cuBLASLt: bias, activation and residual over [rows, out]
//   2 convert_activations  f32 activations to the weight dtype (f16/bf16 weights only)
#include "codegen/kernels/KernelRules.h"

namespace dsc::codegen {
namespace {

using dsrt::DType;

// Input positions of the fused tfm.linear (docs/transformer-ops.md).
constexpr size_t kInput = 0, kWeight = 1, kBias = 2, kScales = 3, kResidual = 4;

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

bool linearRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const bool isLinear = in.step().op == "tfm.linear";
  const dsp::TensorT *weight = in.input(kWeight);
  if (!weight) {
    reason = "has no weight";
    return false;
  }
  if (!requireF32(in.input(kInput), "the input", reason) ||
      !requireF32(in.output(0), "the output", reason))
    return false;
  if (weight->shape.size() != 2) {
    reason = "the weight is not [out, in]";
    return false;
  }
  const DType weightType = in.deviceDType(*weight);
  if (weightType == DType::I8 || (isLinear && in.input(kScales))) {
    reason = "int8 weights with scales have no GPU kernel yet";
    return false;
  }
  if (!isStoredFloat(weightType)) {
    reason = std::string("the weight is stored as ") + dsrt::dtypeName(weightType);
    return false;
  }
  const int64_t k = in.staticDim(*weight, 1);
  if (k <= 0 || in.staticDim(*in.input(kInput), -1) != k) {
    reason = "the in-feature count is dynamic (or disagrees between input and weight)";
    return false;
  }
  // gemv indexes rows of x with int: rows (<= 8) * K must fit.
  if (k > (int64_t(1) << 27)) {
    reason = "the in-feature count " + std::to_string(k) + " is too large for gemv";
    return false;
  }

  int64_t activation = -1, hasBias = 0, biasType = static_cast<int64_t>(DType::F32),
          hasResidual = 0;
  if (isLinear) {
    activation = activationCode(in.stringAttr("activation", "none"));
    if (activation == -2) {
      reason = "unknown activation '" + in.stringAttr("activation", "") + "'";
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
  kernels.push_back({"gemv",
                     {{"K", k},
                      {"WT", wt},
                      {"ACT", activation},
                      {"HAS_BIAS", hasBias},
                      {"BIAS_DT", biasType},
                      {"HAS_RESIDUAL", hasResidual}}});
  kernels.push_back({"linear_epilogue",
                     {{"ACT", activation},
                      {"HAS_BIAS", hasBias},
                      {"BIAS_DT", biasType},
                      {"HAS_RESIDUAL", hasResidual}}});
  if (weightType != DType::F32)
    kernels.push_back({"convert_activations", {{"WT", wt}}});
  return true;
}

} // namespace

void addLinearKernelRules(std::vector<KernelRuleEntry> &rules) {
  rules.push_back({"tfm.linear", linearRule});
  rules.push_back({"tfm.lm_head", linearRule});
}

} // namespace dsc::codegen
