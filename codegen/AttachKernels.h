// The kernel-generation step of `dsc compile` (docs/cuda-backend.md): runs every plan
// step's rule (codegen/kernels/KernelRules.h), specialises and compiles the distinct
// kernels with NVRTC, and records them in Plan.kernels and each step's `kernels`.
// Plain C++17 over the plan's object API, no MLIR.
#ifndef DSC_CODEGEN_ATTACHKERNELS_H
#define DSC_CODEGEN_ATTACHKERNELS_H

#include "codegen/kernels/KernelRules.h"
#include "core/Status.h"
#include "plan_generated.h"

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

struct AttachKernelsOptions {
  std::vector<std::string> archs;  // cubins to build; empty: attach nothing (CPU-only)
  // False: rules and specialisation only, no NVRTC (dsc --emit=cuda); the kernels get no
  // PTX and no binaries.
  bool compile = true;
  // Each weight's stored dtype by weight_index, for a plan whose sections are not laid out
  // yet (dsc: PlanWriter::weightDTypes); empty: the sections', else --dtype's rule.
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

// Fills plan.kernels and every step's kernels. Replaces what was there. When NVRTC cannot
// be loaded (and options.compile), the plan is left CPU-only with a warning in `report`.
// Errors: an unknown template kind, or a kernel NVRTC rejects (with its log).
dsrt::Status attachKernels(dsp::PlanT &plan, const AttachKernelsOptions &options,
                           AttachKernelsReport &report);

} // namespace dsc::codegen

#endif
