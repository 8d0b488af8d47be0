#include "compiler/Registration.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#ifdef DSC_TMP_TFM_PLAN
#include "dialects/plan/IR/PlanDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"
#endif

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace dsc {

void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<onnx::OnnxDialect, mlir::func::FuncDialect>();
#ifdef DSC_TMP_TFM_PLAN
  registry.insert<tfm::TfmDialect, plan::PlanDialect>();
#endif
}

void registerAllPasses() {
  // Upstream clean-ups that dsc's pipelines use (canonicalize, cse, symbol-dce, ...).
  mlir::registerTransformsPasses();
}

} // namespace dsc
