// A joined gate-up projection's gated activation, moved into the linear's epilogue: the
// kernel that computes the two halves of a row multiplies them, so the [.., 2n] product is
// never stored and read back, and a decode layer launches one kernel fewer (issue 14,
// docs/design.md §3.6).
#include "compiler/fuse/Passes.h"
#include "compiler/fuse/FusionRewrite.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/PatternMatch.h"

#include <string>

namespace dsc {
#define GEN_PASS_DEF_FUSEGATEDEPILOGUE
#include "compiler/fuse/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// The linear whose product `gated` reads, when its epilogue can take the gating; otherwise
// null, with `reason` set when the input is a linear that cannot.
tfm::LinearOp gatedLinear(tfm::GatedActPackedOp gated, std::string &reason) {
  auto linear = gated.getInput().getDefiningOp<tfm::LinearOp>();
  if (!linear)
    return {};
  if (linear.getParallel() == tfm::Parallelism::row)
    reason = "the linear is row-parallel: its result is a partial sum until the "
             "tfm.all_reduce (nothing is fused across a collective)";
  else if (linear.getActivation())
    reason = "the linear already applies an activation";
  else if (linear.getResidual())
    reason = "the linear already adds a residual, which would have to come after the gating";
  else if (!linear.getOutput().hasOneUse())
    reason = "the linear's result has another user, which needs the joined product";
  return reason.empty() ? linear : tfm::LinearOp();
}

struct GatedActIntoLinear : OpRewritePattern<tfm::GatedActPackedOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tfm::GatedActPackedOp gated,
                                PatternRewriter &rewriter) const override {
    std::string reason;
    tfm::LinearOp linear = gatedLinear(gated, reason);
    if (!linear)
      return rewriter.notifyMatchFailure(
          gated, reason.empty() ? "the input is not a tfm.linear" : reason);
    rewriter.modifyOpInPlace(linear, [&] {
      linear.setActivationAttr(
          tfm::ActivationKindAttr::get(rewriter.getContext(), gated.getKind()));
      linear.setGated(true);
      linear.getOutput().setType(gated.getOutput().getType());
    });
    rewriter.replaceOp(gated, linear.getOutput());
    return success();
  }
};

struct FuseGatedEpiloguePass : impl::FuseGatedEpilogueBase<FuseGatedEpiloguePass> {
  using FuseGatedEpilogueBase::FuseGatedEpilogueBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    RewritePatternSet patterns(&getContext());
    patterns.add<GatedActIntoLinear>(&getContext());
    if (failed(applyFusionPatterns(module, std::move(patterns), "gated epilogues")))
      return signalPassFailure();
    if (!remarks)
      return;
    module.walk([](tfm::GatedActPackedOp gated) {
      std::string reason;
      (void)gatedLinear(gated, reason);
      if (!reason.empty())
        gated->emitRemark() << "not fused into the linear's epilogue: " << reason;
    });
  }
};

} // namespace
} // namespace dsc
