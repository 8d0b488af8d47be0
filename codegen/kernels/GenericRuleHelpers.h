// What the generic path's rule files (GenericRules.cpp, GenericIndexingRules.cpp) share:
// the dtypes a step's tensors are held in on the device, and the checks every rule makes
// before it names a template.
#ifndef DSC_CODEGEN_KERNELS_GENERICRULEHELPERS_H
#define DSC_CODEGEN_KERNELS_GENERICRULEHELPERS_H

#include "codegen/kernels/KernelRules.h"

#include <string>
#include <vector>

namespace dsc::codegen::generic {

using dsrt::DType;

// The templates' rank limit: the launchers pass six dims and strides per operand.
constexpr int64_t kMaxRank = 6;

DType dtypeOf(const dsp::TensorT &tensor);
// The dtype a generic step's input has on the device: its own. Weights stored narrower than
// the plan computes in reach only tfm ops as stored; the CUDA session gives every other op a
// copy converted to the tensor's dtype, as the CPU backend does (docs/cuda-backend.md).
DType heldType(const dsp::TensorT &tensor);
std::string nameOf(DType dtype);
int64_t code(DType dtype);  // the plan dtype's number, as the templates' DT constants
bool isIndexType(DType dtype);  // i64 or i32
int64_t elementSizeOf(const dsp::TensorT &tensor);

// The step's tensor, or null with a reason why it is missing.
const dsp::TensorT *required(const dsp::TensorT *tensor, const char *what,
                             std::string &reason);
// The rank of a tensor whose rank the plan knows (a dynamic tensor may have none) and the
// kernels take, or false with a reason.
bool knownRank(const dsp::TensorT &tensor, const char *what, int64_t &rank,
               std::string &reason);
// Whether the CUDA session knows input `index`'s values on the host when the step runs
// (docs/cuda-backend.md): constants, Shape and Size results, and the results of steps whose
// inputs are all known on the host. Program inputs and weights are on the device.
bool hostKnownInput(const RuleInput &in, size_t index);
// The copy templates move elements unchanged: the input must hold the output's dtype.
bool sameDeviceType(const dsp::TensorT &input, const dsp::TensorT &output,
                    std::string &reason);

// The indexed reads (Gather, GatherND, GatherElements) and the routing ops (TopK, OneHot,
// and the declines of NonZero and ScatterElements), in GenericIndexingRules.cpp.
void addGenericIndexingRules(std::vector<KernelRuleEntry> &rules);

} // namespace dsc::codegen::generic

#endif
