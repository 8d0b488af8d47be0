// Rules of the transformer ops whose kernels are simple enough to share one file:
// tfm.embedding, tfm.layer_norm, tfm.rms_norm (with their fused residual forms),
// tfm.activation, tfm.gated_act, tfm.residual_add. Their launchers are in
// runtime/src/cuda/ops/TransformerOps.cpp; the slot order here is theirs.
#include "codegen/kernels/KernelRules.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dsc::codegen {
namespace {

using dsrt::DType;

bool isStoredFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

// Activations are f32 on the device (docs/cuda-backend.md); a plan computing in another
// dtype keeps these steps on the fallback.
bool requireF32(const RuleInput &in, const dsp::TensorT *tensor, const char *what,
                std::string &reason) {
  if (!tensor) {
    reason = std::string("has no ") + what;
    return false;
  }
  if (static_cast<DType>(tensor->dtype) != DType::F32) {
    reason = std::string(what) + " is " + dsrt::dtypeName(static_cast<DType>(tensor->dtype)) +
             ", the kernels take f32 activations";
    return false;
  }
  (void)in;
  return true;
}

// Threads per row of a norm: enough that each thread keeps at most eight values in
// registers, a multiple of 32, at most 1024.
int64_t normBlock(int64_t hidden) {
  int64_t block = (hidden / 8 + 31) / 32 * 32;
  return std::clamp<int64_t>(block, 32, 1024);
}

// Rows kept in registers by one block; beyond it the per-thread arrays would spill.
constexpr int64_t kMaxNormHidden = 65536;

bool embeddingRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *ids = in.input(0), *table = in.input(1);
  if (!ids || !table) {
    reason = "needs ids and a table";
    return false;
  }
  DType idType = static_cast<DType>(ids->dtype);
  if (idType != DType::I64 && idType != DType::I32) {
    reason = std::string("ids are ") + dsrt::dtypeName(idType) + ", not i64 or i32";
    return false;
  }
  DType tableType = in.deviceDType(*table);
  if (!isStoredFloat(tableType)) {
    reason = std::string("the table is stored as ") + dsrt::dtypeName(tableType);
    return false;
  }
  if (!requireF32(in, in.output(0), "the output", reason))
    return false;
  if (table->shape.size() != 2) {
    reason = "the table is not [rows, hidden]";
    return false;
  }
  int64_t hidden = in.staticDim(*table, 1);
  if (hidden <= 0) {
    reason = "the hidden size is dynamic";
    return false;
  }
  const float scale = in.floatAttr("scale", 1.0f);
  if (!std::isfinite(scale)) {
    reason = "the scale is not finite";
    return false;
  }
  int64_t block = std::clamp<int64_t>((hidden + 31) / 32 * 32, 32, 256);
  kernels.push_back({"embedding",
                     {{"HIDDEN", hidden},
                      {"TABLE_DT", static_cast<int64_t>(tableType)},
                      {"ID_DT", static_cast<int64_t>(idType)},
                      {"BLOCK", block}}});
  // Rows multiplied as they are gathered: last, and only where the step scales them.
  if (scale != 1.0f) {
    uint32_t bits = 0;
    std::memcpy(&bits, &scale, sizeof bits);
    kernels.back().constants.push_back({"SCALE_BITS", static_cast<int64_t>(bits)});
  }
  return true;
}

} // namespace

bool normKernel(const RuleInput &in, bool rms, int64_t hidden, const dsp::TensorT *scale,
                const dsp::TensorT *bias, bool residual, KernelSpec &spec, std::string &reason) {
  if (hidden > kMaxNormHidden) {
    reason = "the hidden size " + std::to_string(hidden) + " is above " +
             std::to_string(kMaxNormHidden);
    return false;
  }
  DType scaleType = in.deviceDType(*scale);
  if (!isStoredFloat(scaleType)) {
    reason = std::string("the scale is stored as ") + dsrt::dtypeName(scaleType);
    return false;
  }
  spec = KernelSpec{rms ? "rms_norm" : "layer_norm",
                    {{"HIDDEN", hidden}, {"SCALE_DT", static_cast<int64_t>(scaleType)}}};
  if (!rms) {
    DType biasType = bias ? in.deviceDType(*bias) : DType::Undefined;
    if (bias && !isStoredFloat(biasType)) {
      reason = std::string("the bias is stored as ") + dsrt::dtypeName(biasType);
      return false;
    }
    spec.constants.push_back({"BIAS_DT", bias ? static_cast<int64_t>(biasType) : 0});
  }
  spec.constants.push_back({"RESIDUAL", residual ? 1 : 0});
  spec.constants.push_back({"BLOCK", normBlock(hidden)});
  return true;
}

namespace {

// tfm.layer_norm (input, scale, bias?, residual?) and tfm.rms_norm (input, scale,
// residual?, post_residual?): with a residual, output 1 is input + residual; with a
// post_residual, the output is post_residual + the norm.
bool normRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason,
              bool rms) {
  const dsp::TensorT *input = in.input(0), *scale = in.input(1);
  if (!requireF32(in, input, "the input", reason))
    return false;
  if (!requireF32(in, in.output(0), "the output", reason))
    return false;
  if (!scale) {
    reason = "has no scale";
    return false;
  }
  int64_t hidden = in.staticDim(*input, -1);
  if (hidden <= 0) {
    reason = "the hidden size is dynamic";
    return false;
  }
  size_t residualIndex = rms ? 2 : 3;
  const dsp::TensorT *residual = in.input(residualIndex);
  if (residual && !requireF32(in, residual, "the residual", reason))
    return false;
  if (residual && in.output(1) && !requireF32(in, in.output(1), "the residual sum", reason))
    return false;
  // A sandwich norm's post_residual (rms_norm's input 3), added to the result.
  const dsp::TensorT *post = rms ? in.input(3) : nullptr;
  if (post && !requireF32(in, post, "the post_residual", reason))
    return false;
  if (post && residual) {
    reason = "takes a residual or a post_residual, not both";
    return false;
  }
  KernelSpec spec;
  if (!normKernel(in, rms, hidden, scale, rms ? nullptr : in.input(2), residual != nullptr, spec,
                  reason))
    return false;
  // Last, and only where the step has one, so that every other norm keeps its kernel.
  if (post)
    spec.constants.push_back({"POST_RESIDUAL", 1});
  kernels.push_back(std::move(spec));
  return true;
}

bool layerNormRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  return normRule(in, kernels, reason, /*rms=*/false);
}

bool rmsNormRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  return normRule(in, kernels, reason, /*rms=*/true);
}

bool elementwiseInputs(const RuleInput &in, size_t count, std::string &reason) {
  for (size_t i = 0; i < count; ++i)
    if (!requireF32(in, in.input(i), i == 0 ? "the first input" : "the second input", reason))
      return false;
  return requireF32(in, in.output(0), "the output", reason);
}

// `inputs`: 1 for tfm.activation and tfm.gated_act_packed (gate and up in one tensor), 2 for
// tfm.gated_act.
bool activationRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason,
                    bool gated, size_t inputs) {
  if (!elementwiseInputs(in, inputs, reason))
    return false;
  std::string kind = in.stringAttr("kind", "");
  int code = activationCode(kind);
  if (code < 0) {
    reason = "unknown activation kind '" + kind + "'";
    return false;
  }
  kernels.push_back({"activation", {{"ACT", code}, {"GATED", gated ? 1 : 0}}});
  return true;
}

bool plainActivationRule(const RuleInput &in, std::vector<KernelSpec> &kernels,
                         std::string &reason) {
  return activationRule(in, kernels, reason, /*gated=*/false, 1);
}

bool gatedActivationRule(const RuleInput &in, std::vector<KernelSpec> &kernels,
                         std::string &reason) {
  return activationRule(in, kernels, reason, /*gated=*/true, 2);
}

bool packedGatedActivationRule(const RuleInput &in, std::vector<KernelSpec> &kernels,
                               std::string &reason) {
  return activationRule(in, kernels, reason, /*gated=*/true, 1);
}

bool residualAddRule(const RuleInput &in, std::vector<KernelSpec> &kernels,
                     std::string &reason) {
  if (!elementwiseInputs(in, 2, reason))
    return false;
  kernels.push_back({"residual_add", {}});
  return true;
}

// A mixture of experts has no fused kernel yet (docs/design.md §9): the host fallback routes
// the tokens and runs the chosen experts only, as the CPU backend does.
bool moeRule(const RuleInput &, std::vector<KernelSpec> &, std::string &reason) {
  reason = "no fused mixture-of-experts kernel yet: the host runs the chosen experts";
  return false;
}

} // namespace

void addTransformerKernelRules(std::vector<KernelRuleEntry> &rules) {
  rules.push_back({"tfm.moe", moeRule});
  rules.push_back({"tfm.embedding", embeddingRule});
  rules.push_back({"tfm.layer_norm", layerNormRule});
  rules.push_back({"tfm.rms_norm", rmsNormRule});
  rules.push_back({"tfm.activation", plainActivationRule});
  rules.push_back({"tfm.gated_act", gatedActivationRule});
  rules.push_back({"tfm.gated_act_packed", packedGatedActivationRule});
  rules.push_back({"tfm.residual_add", residualAddRule});
}

} // namespace dsc::codegen
