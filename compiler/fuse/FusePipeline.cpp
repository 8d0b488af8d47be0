#include "compiler/fuse/Passes.h"

#include "mlir/Pass/PassRegistry.h"

namespace dsc {

void addFusePasses(mlir::OpPassManager &pm, bool remarks) {
  FuseEmbeddingScaleOptions embeddingScale;
  embeddingScale.remarks = remarks;
  pm.addPass(createFuseEmbeddingScale(embeddingScale));
  FuseLogitEpilogueOptions logits;
  logits.remarks = remarks;
  pm.addPass(createFuseLogitEpilogue(logits));
  FuseQkNormOptions qkNorm;
  qkNorm.remarks = remarks;
  pm.addPass(createFuseQkNorm(qkNorm));
  FusePostNormResidualOptions postNorm;
  postNorm.remarks = remarks;
  pm.addPass(createFusePostNormResidual(postNorm));
  FuseLinearEpilogueOptions epilogue;
  epilogue.remarks = remarks;
  pm.addPass(createFuseLinearEpilogue(epilogue));
  FuseProjectionsOptions projections;
  projections.remarks = remarks;
  pm.addPass(createFuseProjections(projections));
  FuseGatedEpilogueOptions gated;
  gated.remarks = remarks;
  pm.addPass(createFuseGatedEpilogue(gated));
  FusePackedQkvOptions packed;
  packed.remarks = remarks;
  pm.addPass(createFusePackedQkv(packed));
  FuseResidualNormOptions norm;
  norm.remarks = remarks;
  pm.addPass(createFuseResidualNorm(norm));
  FuseNormPrologueOptions prologue;
  prologue.remarks = remarks;
  pm.addPass(createFuseNormPrologue(prologue));
}

void registerFusePipeline() {
  mlir::PassPipelineRegistration<>(
      "dsc-fuse", "The fusion passes in dsc's order (embedding scales, logit epilogues, q/k norms into attentions, sandwich norms' "
      "residuals, linear "
      "epilogues, joined projections, gated epilogues, packed Q/K/V, residual + norm, then "
      "norm prologues)",
      [](mlir::OpPassManager &pm) { addFusePasses(pm); });
}

} // namespace dsc
