// The passes from the onnx dialect to a serialisable plan (generic path).
#ifndef DSC_COMPILER_LOWERING_PASSES_H
#define DSC_COMPILER_LOWERING_PASSES_H

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/plan/IR/PlanDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dsc {

#define GEN_PASS_DECL
#include "compiler/lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/lowering/Passes.h.inc"

} // namespace dsc

#endif
