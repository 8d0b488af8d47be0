#include "compiler/Pipeline.h"

#include "compiler/fuse/Passes.h"
#include "compiler/parallel/Passes.h"
#include "compiler/recognize/Passes.h"
#include "compiler/recognize/RecognitionReport.h"
#include "compiler/recognize/RecognizeAttention.h"

#include "mlir/Pass/PassManager.h"

using namespace mlir;

namespace dsc {

LogicalResult recognizeTransformers(ModuleOp module, const onnx_frontend::WeightStore *weights,
                                    const PipelineOptions &options,
                                    RecognitionDeclines *declines) {
  PassManager pm(module.getContext());
  pm.enableVerifier(true);
  if (options.recognize) {
    // First: the recognisers reason about f32 graphs (a half export is widened inside its
    // interface).
    pm.addPass(createWidenHalfPrecision());
  }
  pm.addPass(createFoldConstants());
  if (options.recognize) {
    // The layers first (embeddings, norms, linears, activations), then attention, proven on
    // a probe that may read the model's weights: its Q/K/V path then stops at the recognised
    // projections and at norms over each head (Qwen3's q/k norm), and it finds learned
    // position tables as tfm.embedding. Then the prefill and decode programs of a decoder
    // whose every attention was recognised.
    pm.addPass(createRecognizeLayersWithReport(declines, options.missingNormEpsilon));
    pm.addPass(createRecognizeAttentionWithWeights(weights, options.attentionRemarks,
                                                   options.lowering.maxSeqLen));
    DeriveCacheProgramsOptions derive;
    derive.report = options.attentionRemarks;
    pm.addPass(createDeriveCachePrograms(derive));
    // On the derived programs, whose cache is the session's: the export's repeated K/V
    // heads (Falcon's new architecture) cached once per group.
    pm.addPass(createNarrowRepeatedKv());
    if (options.stepProgram)
      pm.addPass(createDeriveStepProgram());
  }
  return pm.run(module);
}

LogicalResult shardAndQuantize(ModuleOp module, const PipelineOptions &options) {
  PassManager pm(module.getContext());
  pm.enableVerifier(true);
  // Before sharding and quantizing, which then see a projection per part; with fusion only,
  // which joins the parts again.
  if (options.fuse) {
    UnpackQkvOptions unpack;
    unpack.remarks = options.fuseRemarks;
    pm.addPass(createUnpackQkv(unpack));
  }
  // After the prefill/decode derivation, so that every program is sharded the same way.
  if (options.tensorParallel > 1) {
    TpShardOptions shard;
    shard.ranks = options.tensorParallel;
    pm.addPass(createTpShard(shard));
  }
  // After sharding: the plan writer quantizes each rank's part, so no group straddles two
  // ranks.
  if (options.int8)
    pm.addPass(createQuantizeWeights(*options.int8));
  if (options.kvCacheDtype != "f32") {
    KvCacheDtypeOptions cache;
    cache.dtype = options.kvCacheDtype;
    pm.addPass(createKvCacheDtype(cache));
  }
  return pm.run(module);
}

LogicalResult lowerToPlan(ModuleOp module, const PipelineOptions &options) {
  PassManager lower(module.getContext());
  lower.enableVerifier(true);
  // After tp-shard: no fusion across its collectives.
  if (options.fuse)
    addFusePasses(lower, options.fuseRemarks);
  // After fusion, which makes the gated linears whose results it narrows.
  if (options.activationDtype != "f32") {
    ActivationDtypeOptions activations;
    activations.dtype = options.activationDtype;
    lower.addPass(createActivationDtype(activations));
  }
  lower.addPass(createLowerOnnxToPlan(options.lowering));
  lower.addPass(createPlanMemory());
  return lower.run(module);
}

} // namespace dsc
