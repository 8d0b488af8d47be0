// Kernel generation (docs/design.md §3.8): choosing each plan step's kernels by its op's
// rule (codegen/kernels/KernelRules.h; the compiler's dsc-select-kernels pass records the
// choices in the plan dialect), and emitting what was chosen: each distinct kernel
// specialised, compiled with NVRTC and recorded in Plan.kernels and each step's `kernels`.
// Plain C++17 over the plan's object API, no MLIR.
#ifndef DSC_CODEGEN_ATTACHKERNELS_H
#define DSC_CODEGEN_ATTACHKERNELS_H

#include "codegen/kernels/KernelRules.h"
#include "core/Status.h"
#include "plan_generated.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dsc::codegen {

// Every op's rule (addTransformerKernelRules and the other families'), and a lookup.
const std::vector<KernelRuleEntry> &kernelRuleTable();
KernelRule findKernelRule(const std::string &op);  // null when the op has none

// The virtual architecture every kernel's PTX is compiled for.
inline constexpr const char kKernelPtxArch[] = "compute_80";

// Parses --arch: a comma list of real architectures ("sm_80,sm_90"), or "none" (an empty
// list: a CPU-only plan).
dsrt::Status parseArchList(const std::string &list, std::vector<std::string> &archs);

// Template `spec.kind` specialised: one `#define NAME value` line per constant, in order,
// then the template. Fails for an unknown kind.
dsrt::Status specialiseKernel(const KernelSpec &spec, std::string &source);

// What one step's rule chose: the kernels it launches, in its launcher's slot order, or
// why it has none (it then runs on the CUDA backend's host fallback).
struct KernelChoice {
  bool declined = false;
  std::vector<KernelSpec> kernels;
  std::string reason;  // when declined
};

// Every step's choice (steps whose op has a rule), and the sampling kernel.
struct PlanKernelChoices {
  std::map<const dsp::StepT *, KernelChoice> steps;
  std::optional<KernelSpec> sampling;
};

// Runs each step's rule (dsc-select-kernels does this on the plan dialect, through the
// plan-shaped view the serializer builds). `weightDTypes`: each weight's stored dtype by
// weight_index, for a plan whose sections are not laid out yet (empty: the sections', else
// --dtype's rule; RuleInput::deviceDType). `plan.model` must be described already: a
// decoder with logits gets the sampling kernel.
PlanKernelChoices selectKernels(const dsp::PlanT &plan,
                                const std::vector<dsrt::DType> &weightDTypes);

struct AttachKernelsOptions {
  std::vector<std::string> archs;  // cubins to build; empty: attach nothing (CPU-only)
  // False: specialisation only, no NVRTC (dsc --emit=cuda); the kernels get no PTX and no
  // binaries.
  bool compile = true;
  // attachKernels only: what selectKernels takes.
  std::vector<dsrt::DType> weightDTypes;
};

struct AttachKernelsReport {
  int steps = 0;           // steps with a rule
  int stepsWithKernels = 0;
  int declined = 0;        // steps whose rule declined: they run on the fallback
  int kernels = 0;         // distinct kernels in the plan
  std::vector<std::string> declines;  // "op: reason", one per distinct pair
  // Something the user should hear about once (NVRTC missing: the plan is CPU-only).
  std::vector<std::string> warnings;
  // Each distinct kernel's specialised source, in Plan.kernels order.
  std::vector<std::string> sources;
};

// Fills plan.kernels and every step's kernels with what `choices` says, each distinct
// spec specialised and compiled once, in the order of the plan's programs and steps.
// Replaces what was there; decides nothing. With no archs the plan is CPU-only; when NVRTC
// cannot be loaded (and options.compile), too, with a warning in `report`. Errors: an
// unknown template kind, or a kernel NVRTC rejects (with its log).
dsrt::Status emitKernels(dsp::PlanT &plan, const PlanKernelChoices &choices,
                         const AttachKernelsOptions &options, AttachKernelsReport &report);

// selectKernels, then emitKernels: the two steps on a plan object (unit tests).
dsrt::Status attachKernels(dsp::PlanT &plan, const AttachKernelsOptions &options,
                           AttachKernelsReport &report);

} // namespace dsc::codegen

#endif
