// The recognition passes: onnx dialect subgraphs to tfm ops.
#ifndef DSC_COMPILER_RECOGNIZE_PASSES_H
#define DSC_COMPILER_RECOGNIZE_PASSES_H

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dsc {

#define GEN_PASS_DECL
#include "compiler/recognize/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/recognize/Passes.h.inc"

} // namespace dsc

#endif
