// Fusion of the recognised tfm ops before lowering (docs/design.md §3.6).
#ifndef DSC_COMPILER_FUSE_PASSES_H
#define DSC_COMPILER_FUSE_PASSES_H

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace dsc {

#define GEN_PASS_DECL
#include "compiler/fuse/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/fuse/Passes.h.inc"

// The fusion passes in their order: per-head q/k norms into their attentions first (the
// projections they normalise can then join), the residual adds of sandwich norms into those
// norms, linear epilogues (they claim the residual adds
// of a linear's result, and a projection with an activation keeps it rather than join
// others), then the projections of one input joined, then the attentions reading their
// joined Q, K and V packed, then residual add + norm for the adds that remain, then the
// norms that remain into the linears that read them.
void addFusePasses(mlir::OpPassManager &pm, bool remarks = false);

// Registers the `dsc-fuse` pipeline (addFusePasses) for dsc-opt.
void registerFusePipeline();

} // namespace dsc

#endif
