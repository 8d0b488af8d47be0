// dsc-recognize-layers: see Passes.td.
//
// The importer leaves most intermediate types unranked, and the patterns need ranks and
// hidden sizes. So the pass first evaluates the graph's shapes with the runtime's kernels
// (compiler/lowering/ShapeBounds) at a few splits of batch, cached and new tokens and
// refines every type that all of them agree on: a dimension that is the same at every
// probe is static, one that changes is dynamic. Then the patterns run greedily; each
// declines with the reason it gives to notifyMatchFailure, and the reasons of ops that stay
// generic go to the report.
#include "compiler/recognize/Passes.h"
#include "compiler/recognize/LayerMatching.h"
#include "compiler/recognize/RecognitionReport.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace dsc {
#define GEN_PASS_DEF_RECOGNIZELAYERS
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// Onnx ops a pattern anchors on; when they stay, the report says why.
bool isAnchor(Operation *op) {
  return isa<onnx::GatherOp, onnx::LayerNormalizationOp, onnx::ReduceMeanOp, onnx::MatMulOp,
             onnx::GemmOp, onnx::ErfOp, onnx::TanhOp, onnx::SigmoidOp, onnx::ReluOp,
             onnx::GeluOp>(op);
}

struct RecognizeLayersPass : impl::RecognizeLayersBase<RecognizeLayersPass> {
  using RecognizeLayersBase::RecognizeLayersBase;
  RecognizeLayersPass() = default;
  RecognizeLayersPass(RecognitionDeclines *sink, double missingEpsilon) : sink(sink) {
    missingNormEpsilon = missingEpsilon;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    normsWithoutEpsilon = 0;
    layers::DeclineLog log;
    for (auto func : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
      layers::ProbeCoverage coverage;
      layers::ProbeShapes shapes = layers::probeShapes(func, coverage);
      layers::refineTypes(func, shapes, coverage);
      // Every decision that reads the probes' shapes is taken here, before the patterns
      // create values the shapes do not know (layers::liftableGemms).
      const layers::LiftableGemms liftable = layers::liftableGemms(func, shapes);
      MLIRContext *context = &getContext();
      RewritePatternSet patterns(context);
      layers::populateLinearPatterns(patterns, log, liftable);
      layers::populateNormPatterns(patterns, log, missingNormEpsilon, normsWithoutEpsilon);
      layers::populateActivationPatterns(patterns, log);
      layers::populateResidualPatterns(patterns);
      GreedyRewriteConfig config;
      // Only the patterns rewrite: no folding, no constant hoisting, no region clean-up, so
      // what stays generic is exactly what the importer made.
      config.setUseTopDownTraversal(true)
          .enableFolding(false)
          .enableConstantCSE(false)
          .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
      if (failed(applyPatternsGreedily(func, std::move(patterns), config))) {
        func.emitError("layer recognition did not converge");
        return signalPassFailure();
      }
      layers::syncFunctionType(func);
    }
    // What stayed generic, in program order.
    module.walk([&](Operation *op) {
      auto it = log.find(op);
      if (it == log.end() || !isAnchor(op))
        return;
      if (reportDeclines)
        op->emitRemark() << "left generic: " << it->second;
      if (sink)
        sink->generic.push_back({op->getName().stripDialect().str(), it->second, op});
    });
    if (sink)
      sink->normsWithoutEpsilon = normsWithoutEpsilon;
  }

  RecognitionDeclines *sink = nullptr;
  int normsWithoutEpsilon = 0;
};


} // namespace

std::unique_ptr<Pass> createRecognizeLayersWithReport(RecognitionDeclines *declines,
                                                      double missingNormEpsilon) {
  return std::make_unique<RecognizeLayersPass>(declines, missingNormEpsilon);
}

} // namespace dsc
