// Which generated kernels a plan step launches (docs/design.md §3.8): the compiler side of the
// contract whose runtime side is runtime/src/cuda/GpuOps.h. Plain C++17 over the plan's
// FlatBuffers object API, so that it runs without MLIR (and in unit tests).
//
// A template is codegen/kernels/<kind>.cuh. It is specialised by prepending one
// `#define NAME value` line per constant of its KernelSpec, in the spec's order, and defines
// exactly one `extern "C" __global__` function named after the kind. Every template may
// include "dsc_common.cuh" (dtype conversions, vector loads, warp and block reductions).
// Whatever a launcher passes at run time (pointers, batch, sequence lengths) is a kernel
// parameter; whatever fixes the code's shape (hidden size, head dim, weight dtype,
// epilogue, block size) is a constant.
#ifndef DSC_CODEGEN_KERNELS_KERNELRULES_H
#define DSC_CODEGEN_KERNELS_KERNELRULES_H

#include "core/Tensor.h"
#include "plan_generated.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dsc::codegen {

// One specialisation of a template. Steps with equal specs share one Kernel of the plan.
struct KernelSpec {
  std::string kind;
  std::vector<std::pair<std::string, int64_t>> constants;

  // The plan-unique kernel name: the kind, then each constant ("layer_norm_HIDDEN768_WT2").
  std::string name() const;
};

// What a rule sees of the plan around one step.
class RuleInput {
public:
  RuleInput(const dsp::PlanT &plan, const dsp::StepT &step,
            const std::vector<dsrt::DType> *weightDTypes = nullptr)
      : plan_(plan), step_(step), weightDTypes_(weightDTypes) {}

  const dsp::PlanT &plan() const { return plan_; }
  const dsp::StepT &step() const { return step_; }
  size_t inputCount() const { return step_.inputs.size(); }
  size_t outputCount() const { return step_.outputs.size(); }
  // Null for an absent optional input (-1) or an index past the end.
  const dsp::TensorT *input(size_t index) const;
  const dsp::TensorT *output(size_t index) const;
  // The dtype the CUDA backend holds the tensor in: a weight's stored dtype (the section
  // entry's: fp16 weights of a plan that computes in f32 stay fp16 on the device) when the
  // step is a recognised tfm.* op, the tensor's own dtype otherwise (other ops get their
  // weights converted on upload).
  dsrt::DType deviceDType(const dsp::TensorT &tensor) const;
  // The static size of dimension `axis` (negative counts from the end), or -1 when it is
  // symbolic or out of range.
  int64_t staticDim(const dsp::TensorT &tensor, int64_t axis) const;
  // The step's attribute `name`, or null.
  const dsp::AttrT *attr(const char *name) const;
  int64_t intAttr(const char *name, int64_t fallback) const;
  float floatAttr(const char *name, float fallback) const;
  std::string stringAttr(const char *name, const std::string &fallback) const;

private:
  const dsp::PlanT &plan_;
  const dsp::StepT &step_;
  const std::vector<dsrt::DType> *weightDTypes_;  // AttachKernelsOptions::weightDTypes
};

// Appends the kernels `input.step()` launches, in the order its runtime launcher expects
// them (StepContext::launch's slot), and returns true; or returns false and says why in
// `reason` (the step then runs on the CUDA backend's fallback: host kernels with copies).
using KernelRule = bool (*)(const RuleInput &input, std::vector<KernelSpec> &kernels,
                            std::string &reason);

struct KernelRuleEntry {
  const char *op;  // the plan step's op ("tfm.layer_norm", "Add")
  KernelRule rule;
};

// Each family's file contributes its rules (and the templates they name).
void addTransformerKernelRules(std::vector<KernelRuleEntry> &rules);  // norms, embedding,
                                                                      // elementwise tfm ops
void addGenericKernelRules(std::vector<KernelRuleEntry> &rules);      // onnx-path ops
void addLinearKernelRules(std::vector<KernelRuleEntry> &rules);       // tfm.linear, lm_head
void addAttentionKernelRules(std::vector<KernelRuleEntry> &rules);    // tfm.attention

// The DSC_ACT_* code of dsc_common.cuh for an activation kind (tfm.activation's `kind`,
// tfm.linear's `activation`): 0 gelu_erf, 1 gelu_tanh, 2 gelu_quick, 3 silu, 4 relu, 5 relu2; -1 for
// "" or "none"; -2 for anything else (the rule declines).
int activationCode(const std::string &kind);

// The rms_norm / layer_norm kernel (TransformerRules.cpp) of a norm over `hidden` features
// with these weights (bias: layer norm only, may be null), with or without a residual: a
// norm step's, and a linear's with a norm prologue (LinearRules.cpp).
bool normKernel(const RuleInput &in, bool rms, int64_t hidden, const dsp::TensorT *scale,
                const dsp::TensorT *bias, bool residual, KernelSpec &spec, std::string &reason);

// The source of template `kind` (embedded in the binary at build time), or null.
const char *kernelTemplateSource(const std::string &kind);
// Every template kind there is, for tests.
std::vector<std::string> kernelTemplateKinds();

} // namespace dsc::codegen

#endif
