#include "compiler/Registration.h"

#include "compiler/Pipeline.h"

#include "compiler/fuse/Passes.h"
#include "compiler/lowering/Passes.h"
#include "compiler/parallel/Passes.h"
#include "compiler/quantize/Passes.h"
#include "compiler/recognize/Passes.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/plan/IR/PlanDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace dsc {

void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<onnx::OnnxDialect, tfm::TfmDialect, plan::PlanDialect,
                  mlir::func::FuncDialect>();
}

void registerAllPasses() {
  // Upstream clean-ups that dsc's pipelines use (canonicalize, cse, symbol-dce, ...).
  mlir::registerTransformsPasses();
  registerDscPasses();
  registerDscRecognizePasses();
  registerDscParallelPasses();
  registerDscQuantizePasses();
  registerDscFusePasses();
  registerFusePipeline();
  registerCompilePipeline();
}

} // namespace dsc
