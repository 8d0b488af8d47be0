// Tensor parallelism: sharding the recognised tfm ops across ranks (docs/design.md §3.4).
#ifndef DSC_COMPILER_PARALLEL_PASSES_H
#define DSC_COMPILER_PARALLEL_PASSES_H

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dsc {

#define GEN_PASS_DECL
#include "compiler/parallel/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/parallel/Passes.h.inc"

} // namespace dsc

#endif
