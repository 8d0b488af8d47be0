// The second half of the whole-path harness (fuzz-onnx-generate, issue 46): a plan that a
// mutated model compiled to is opened and run as a user would, through the C API, on the
// CPU: a session (an in-process group for a TP plan), `generate` on a padded batch, and
// each program's first run with default inputs. Every call either works or fails with a
// message; ASan and UBSan watch the rest.
#ifndef DSC_FUZZ_RUNCOMPILEDPLAN_H
#define DSC_FUZZ_RUNCOMPILEDPLAN_H

#include <cstddef>

namespace dsc::fuzz {

// `choice` (the input's hash) picks the prompts, the sampling and the device.
void runCompiledPlan(const char *path, size_t choice);

} // namespace dsc::fuzz

#endif
