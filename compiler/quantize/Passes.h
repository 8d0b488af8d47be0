// int8 weight-only quantization of the recognised linear layers (docs/design.md §3.5).
#ifndef DSC_COMPILER_QUANTIZE_PASSES_H
#define DSC_COMPILER_QUANTIZE_PASSES_H

#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dsc {

#define GEN_PASS_DECL
#include "compiler/quantize/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/quantize/Passes.h.inc"

} // namespace dsc

#endif
