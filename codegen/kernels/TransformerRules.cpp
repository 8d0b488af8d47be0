// Rules of the transformer ops whose kernels are simple enough to share one file:
// tfm.embedding, tfm.layer_norm, tfm.rms_norm (with their fused residual forms),
// tfm.activation, tfm.gated_act, tfm.residual_add. Their launchers are in
// runtime/src/cuda/ops/TransformerOps.cpp; the slot order here is theirs. And tfm.moe, whose
// launcher is runtime/src/cuda/ops/MoeOps.cpp (its slots are listed at moeRule).
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

// tfm.moe (docs/cuda-backend.md, "Mixture of experts"; launcher runtime/src/cuda/ops/
// MoeOps.cpp). Slots:
//   0 moe_route     EXPERTS, TOP_K, SIGMOID, NORMALIZE, BLOCK
//   1 moe_experts   the routed experts' gate-up and activation (GATE_UP 1)
//   2 moe_experts   their down projection (GATE_UP 0)
//   3 moe_combine   the weighted sum in expert order (+ the shared expert)
//   4 moe_experts   the shared expert's gate-up (SHARED 1), with a shared expert only
//   5 moe_experts   the shared expert's down
// moe_experts' constants: GATE_UP, HIDDEN, WT, SDT, ACT, CLAMPED (then ALPHA_BITS and
// LIMIT_BITS only where set), BIAS_DT, SHARED, BLOCK, ROWS. The inter size and the int8/int4
// group size are the launcher's parameters (they differ between tensor-parallel ranks), so
// are the rank's experts (expert parallelism).
constexpr int64_t kMoeBlock = 256, kMoeRows = 4;
// moe_route keeps a warp's scores of every expert in shared memory and its top k in
// registers.
constexpr int64_t kMoeMaxExperts = 1024, kMoeMaxTopK = 16;

bool moeWeights(const RuleInput &in, size_t weightIndex, size_t scaleIndex, const char *what,
                DType &weightType, DType &scaleType, std::string &reason) {
  const dsp::TensorT *weights = in.input(weightIndex);
  const dsp::TensorT *scales = scaleIndex ? in.input(scaleIndex) : nullptr;
  if (!weights || weights->shape.size() != 2) {
    reason = std::string(what) + " is not a 2-D weight";
    return false;
  }
  weightType = in.deviceDType(*weights);
  scaleType = DType::Undefined;
  const bool quantized = weightType == DType::I8 || weightType == DType::U8;
  if (!quantized && !isStoredFloat(weightType)) {
    reason = std::string(what) + " is stored as " + dsrt::dtypeName(weightType);
    return false;
  }
  if (quantized != (scales != nullptr)) {
    reason = std::string(what) + (quantized ? " is quantized without scales"
                                            : " has scales but float weights");
    return false;
  }
  if (scales) {
    scaleType = in.deviceDType(*scales);
    if (!isStoredFloat(scaleType)) {
      reason = std::string(what) + "'s scales are stored as " + dsrt::dtypeName(scaleType);
      return false;
    }
  }
  return true;
}

KernelSpec moeExpertsKernel(bool gateUp, int64_t hidden, DType weightType, DType scaleType,
                            int act, bool clamped, float alpha, float limit, DType biasType,
                            bool shared) {
  KernelSpec spec{"moe_experts",
                  {{"GATE_UP", gateUp ? 1 : 0},
                   {"HIDDEN", hidden},
                   {"WT", static_cast<int64_t>(weightType)},
                   {"SDT", static_cast<int64_t>(scaleType)},
                   {"ACT", gateUp ? act : -1},
                   {"CLAMPED", clamped ? 1 : 0}}};
  if (clamped) {
    uint32_t alphaBits = 0, limitBits = 0;
    std::memcpy(&alphaBits, &alpha, sizeof alphaBits);
    std::memcpy(&limitBits, &limit, sizeof limitBits);
    spec.constants.push_back({"ALPHA_BITS", static_cast<int64_t>(alphaBits)});
    spec.constants.push_back({"LIMIT_BITS", static_cast<int64_t>(limitBits)});
  }
  spec.constants.push_back({"BIAS_DT", static_cast<int64_t>(biasType)});
  spec.constants.push_back({"SHARED", shared ? 1 : 0});
  spec.constants.push_back({"BLOCK", kMoeBlock});
  spec.constants.push_back({"ROWS", kMoeRows});
  return spec;
}

bool moeRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *x = in.input(0), *logits = in.input(1);
  if (!requireF32(in, x, "the input", reason) ||
      !requireF32(in, logits, "the router logits", reason) ||
      !requireF32(in, in.output(0), "the output", reason))
    return false;
  const int64_t hidden = in.staticDim(*x, -1), experts = in.staticDim(*logits, -1);
  if (hidden <= 0 || experts <= 0) {
    reason = "the hidden size or the expert count is dynamic";
    return false;
  }
  if (experts > kMoeMaxExperts) {
    reason = std::to_string(experts) + " experts, above the routing kernel's " +
             std::to_string(kMoeMaxExperts);
    return false;
  }
  const int64_t topK = in.intAttr("top_k", 0);
  if (topK < 1 || topK > std::min(experts, kMoeMaxTopK)) {
    reason = "top_k " + std::to_string(topK) + " is not in [1, " +
             std::to_string(std::min(experts, kMoeMaxTopK)) + "]";
    return false;
  }
  const std::string scoring = in.stringAttr("scoring", "softmax");
  if (scoring != "softmax" && scoring != "sigmoid") {
    reason = "unknown scoring '" + scoring + "'";
    return false;
  }
  const std::string kind = in.stringAttr("activation", "");
  const int act = activationCode(kind);
  if (act < -1) {
    reason = "unknown activation kind '" + kind + "'";
    return false;
  }
  const float alpha = in.floatAttr("swiglu_alpha", NAN), limit = in.floatAttr("swiglu_limit", NAN);
  const bool clamped = !std::isnan(limit);
  if (clamped && (!std::isfinite(alpha) || !std::isfinite(limit) || !(limit > 0))) {
    reason = "the clamped SwiGLU needs a finite alpha and a positive limit";
    return false;
  }
  DType gateUpType, gateUpScales, downType, downScales;
  if (!moeWeights(in, 2, 9, "gate_up", gateUpType, gateUpScales, reason) ||
      !moeWeights(in, 3, 10, "down", downType, downScales, reason))
    return false;
  const dsp::TensorT *gateUpBias = in.input(4), *downBias = in.input(5);
  DType gateUpBiasType = gateUpBias ? in.deviceDType(*gateUpBias) : DType::Undefined;
  DType downBiasType = downBias ? in.deviceDType(*downBias) : DType::Undefined;
  if ((gateUpBias && !isStoredFloat(gateUpBiasType)) || (downBias && !isStoredFloat(downBiasType))) {
    reason = "the experts' biases are not stored as f32, f16 or bf16";
    return false;
  }
  const dsp::TensorT *sharedGate = in.input(8);
  DType sharedGateUpType = DType::Undefined, sharedDownType = DType::Undefined, unused;
  if (in.input(6) || in.input(7) || sharedGate) {
    if (!sharedGate || !moeWeights(in, 6, 0, "the shared gate_up", sharedGateUpType, unused,
                                   reason) ||
        !moeWeights(in, 7, 0, "the shared down", sharedDownType, unused, reason))
      return false;
    if (!isStoredFloat(sharedGateUpType) || !isStoredFloat(sharedDownType) ||
        !isStoredFloat(in.deviceDType(*sharedGate))) {
      reason = "the shared expert's weights are not stored as f32, f16 or bf16";
      return false;
    }
  }
  kernels.push_back({"moe_route",
                     {{"EXPERTS", experts},
                      {"TOP_K", topK},
                      {"SIGMOID", scoring == "sigmoid" ? 1 : 0},
                      {"NORMALIZE", in.intAttr("normalize", 0) != 0 ? 1 : 0},
                      {"BLOCK", kMoeBlock}}});
  kernels.push_back(moeExpertsKernel(true, hidden, gateUpType, gateUpScales, act, clamped, alpha,
                                     limit, gateUpBiasType, false));
  kernels.push_back(moeExpertsKernel(false, hidden, downType, downScales, act, false, 0, 0,
                                     downBiasType, false));
  KernelSpec combine{"moe_combine",
                     {{"HIDDEN", hidden},
                      {"TOP_K", topK},
                      {"SHARED", sharedGate ? 1 : 0},
                      {"BLOCK", kMoeBlock}}};
  if (sharedGate)
    combine.constants.push_back(
        {"SHARED_GATE_DT", static_cast<int64_t>(in.deviceDType(*sharedGate))});
  kernels.push_back(std::move(combine));
  if (sharedGate) {
    // Qwen2-MoE's shared expert is plain (the clamp is the routed experts', as on the CPU).
    kernels.push_back(moeExpertsKernel(true, hidden, sharedGateUpType, DType::Undefined, act,
                                       false, 0, 0, DType::Undefined, true));
    kernels.push_back(moeExpertsKernel(false, hidden, sharedDownType, DType::Undefined, act,
                                       false, 0, 0, DType::Undefined, true));
  }
  return true;
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
