// The passes from the onnx dialect to a serialisable plan (generic path).
#ifndef DSC_COMPILER_LOWERING_PASSES_H
#define DSC_COMPILER_LOWERING_PASSES_H

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/plan/IR/PlanDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dsc {

#define GEN_PASS_DECL
#include "compiler/lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/lowering/Passes.h.inc"

namespace onnx_frontend {
class WeightStore;
}
// dsc-select-kernels as dsc runs it: `weights` gives a widened half export's stored dtypes
// (dsc-opt has none and reads the IR's).
std::unique_ptr<mlir::Pass>
createSelectKernelsWithWeights(const onnx_frontend::WeightStore *weights,
                               SelectKernelsOptions options);

} // namespace dsc

#endif
