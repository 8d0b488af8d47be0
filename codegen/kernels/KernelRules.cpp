// KernelSpec names, what rules see of the plan (RuleInput), the rule table and the
// templates embedded at build time (codegen/CMakeLists.txt generates their table).
#include "codegen/kernels/KernelRules.h"

#include "codegen/AttachKernels.h"

#include <algorithm>
#include <cstring>

namespace dsc::codegen {

namespace detail {
struct EmbeddedTemplate {
  const char *kind;  // the file name without ".cuh"
  const char *source;
};
// Generated from codegen/kernels/*.cuh (EmbeddedTemplates.cpp in the build folder).
extern const EmbeddedTemplate kEmbeddedTemplates[];
extern const size_t kEmbeddedTemplateCount;
} // namespace detail

std::string KernelSpec::name() const {
  std::string result = kind;
  for (const auto &[constant, value] : constants) {
    result += "_" + constant;
    // A '-' would make the name a poor symbol and file name; "m" reads as minus.
    result += value < 0 ? "m" + std::to_string(-value) : std::to_string(value);
  }
  return result;
}

const dsp::TensorT *RuleInput::input(size_t index) const {
  if (index >= step_.inputs.size())
    return nullptr;
  int32_t tensor = step_.inputs[index];
  if (tensor < 0 || static_cast<size_t>(tensor) >= plan_.tensors.size())
    return nullptr;
  return plan_.tensors[tensor].get();
}

const dsp::TensorT *RuleInput::output(size_t index) const {
  if (index >= step_.outputs.size())
    return nullptr;
  int32_t tensor = step_.outputs[index];
  if (tensor < 0 || static_cast<size_t>(tensor) >= plan_.tensors.size())
    return nullptr;
  return plan_.tensors[tensor].get();
}

dsrt::DType RuleInput::deviceDType(const dsp::TensorT &tensor) const {
  auto own = static_cast<dsrt::DType>(tensor.dtype);
  if (tensor.kind != dsp::TensorKind::weight)
    return own;
  // The CUDA session hands stored weights to the recognised (tfm.*) ops only; any other
  // op's weights are converted to the tensor's dtype on upload, as the CPU backend does
  // (runtime/src/cuda/CudaSession.cpp, readsStoredWeights).
  if (step_.op.rfind("tfm.", 0) != 0)
    return own;
  // A written plan's sections say how each weight is stored.
  if (!plan_.sections.empty() && plan_.sections.front() && tensor.weight_index >= 0 &&
      static_cast<size_t>(tensor.weight_index) < plan_.sections.front()->weights.size())
    return static_cast<dsrt::DType>(
        plan_.sections.front()->weights[tensor.weight_index]->dtype);
  // Before the writer lays out the sections (dsc attaches kernels first), the writer's
  // weights say it.
  if (weightDTypes_ && tensor.weight_index >= 0 &&
      static_cast<size_t>(tensor.weight_index) < weightDTypes_->size())
    return (*weightDTypes_)[static_cast<size_t>(tensor.weight_index)];
  // Without them, the export's rule: f32 weights are stored in --dtype's type (compiler/lowering/ExportPlan),
  // or with --dtype int8 in the compute dtype (docs/int8.md: scales, biases, norms, ...).
  if (own == dsrt::DType::F32 && plan_.options) {
    const std::string &stored =
        plan_.options->dtype == "int8" ? plan_.options->compute_dtype : plan_.options->dtype;
    if (stored == "fp16")
      return dsrt::DType::F16;
    if (stored == "bf16")
      return dsrt::DType::BF16;
  }
  return own;
}

int64_t RuleInput::staticDim(const dsp::TensorT &tensor, int64_t axis) const {
  int64_t rank = static_cast<int64_t>(tensor.shape.size());
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank || !tensor.shape[axis])
    return -1;
  int64_t size = tensor.shape[axis]->size;
  return size >= 0 ? size : -1;
}

const dsp::AttrT *RuleInput::attr(const char *name) const {
  for (const auto &attribute : step_.attrs)
    if (attribute && attribute->name == name)
      return attribute.get();
  return nullptr;
}

int64_t RuleInput::intAttr(const char *name, int64_t fallback) const {
  const dsp::AttrT *attribute = attr(name);
  return attribute && attribute->kind == dsp::AttrKind::int_ ? attribute->i : fallback;
}

float RuleInput::floatAttr(const char *name, float fallback) const {
  const dsp::AttrT *attribute = attr(name);
  if (!attribute)
    return fallback;
  if (attribute->kind == dsp::AttrKind::float_)
    return attribute->f;
  if (attribute->kind == dsp::AttrKind::int_)
    return static_cast<float>(attribute->i);
  return fallback;
}

std::string RuleInput::stringAttr(const char *name, const std::string &fallback) const {
  const dsp::AttrT *attribute = attr(name);
  return attribute && attribute->kind == dsp::AttrKind::string_ ? attribute->s : fallback;
}

int activationCode(const std::string &kind) {
  if (kind.empty() || kind == "none")
    return -1;
  static const char *const kinds[] = {"gelu_erf", "gelu_tanh", "gelu_quick", "silu", "relu",
                                      "relu2"};
  for (int code = 0; code < 6; ++code)
    if (kind == kinds[code])
      return code;
  return -2;
}

const std::vector<KernelRuleEntry> &kernelRuleTable() {
  static const std::vector<KernelRuleEntry> table = [] {
    std::vector<KernelRuleEntry> rules;
    addTransformerKernelRules(rules);
    addGenericKernelRules(rules);
    addLinearKernelRules(rules);
    addAttentionKernelRules(rules);
    // A new kernel family adds its one add*KernelRules line here.
    return rules;
  }();
  return table;
}

KernelRule findKernelRule(const std::string &op) {
  for (const KernelRuleEntry &entry : kernelRuleTable())
    if (op == entry.op)
      return entry.rule;
  return nullptr;
}

const char *kernelTemplateSource(const std::string &kind) {
  for (size_t i = 0; i < detail::kEmbeddedTemplateCount; ++i)
    if (kind == detail::kEmbeddedTemplates[i].kind)
      return detail::kEmbeddedTemplates[i].source;
  return nullptr;
}

std::vector<std::string> kernelTemplateKinds() {
  std::vector<std::string> kinds;
  for (size_t i = 0; i < detail::kEmbeddedTemplateCount; ++i) {
    std::string kind = detail::kEmbeddedTemplates[i].kind;
    // dsc_common.cuh and any other dsc_* file are headers, not templates.
    if (kind.rfind("dsc_", 0) != 0)
      kinds.push_back(kind);
  }
  std::sort(kinds.begin(), kinds.end());
  return kinds;
}

} // namespace dsc::codegen
