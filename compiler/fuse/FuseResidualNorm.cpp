// Residual add + norm: the norm reads lhs and rhs, normalises their sum and writes the sum
// too, so the residual stream is one kernel instead of an add and a norm that re-reads it
// (docs/design.md §3.6).
#include "compiler/fuse/Passes.h"
#include "compiler/fuse/FusionRewrite.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/PatternMatch.h"

#include <string>
#include <type_traits>

namespace dsc {
#define GEN_PASS_DEF_FUSERESIDUALNORM
#include "compiler/fuse/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// The norm's operands besides its input: they must dominate the fused norm.
SmallVector<Value> normParameters(tfm::LayerNormOp norm) {
  SmallVector<Value> values = {norm.getScale()};
  if (Value bias = norm.getBias())
    values.push_back(bias);
  return values;
}
SmallVector<Value> normParameters(tfm::RmsNormOp norm) { return {norm.getScale()}; }

bool definedBefore(Value value, Operation *op) {
  Operation *def = value.getDefiningOp();
  if (!def)
    return value.getParentBlock() == op->getBlock() ||
           value.getParentRegion()->isProperAncestor(op->getParentRegion());
  return def->getBlock() == op->getBlock() ? def->isBeforeInBlock(op)
                                           : def->getParentRegion()->isProperAncestor(
                                                 op->getParentRegion());
}

// Where the fused norm goes: at the norm when every other user of the add comes after it,
// else at the add when the norm's parameters are defined before the add. On failure
// `reason` says why, or stays empty when `norm` is not a candidate at all.
template <typename NormOp>
LogicalResult matchNorm(NormOp norm, tfm::ResidualAddOp &add, Operation *&insertAt,
                        std::string &reason) {
  if (norm.getResidual())
    return failure();
  if constexpr (std::is_same_v<NormOp, tfm::RmsNormOp>) {
    if (norm.getPostResidual())
      return failure();  // it adds the residual after normalising: one add is enough
  }
  add = norm.getInput().template getDefiningOp<tfm::ResidualAddOp>();
  if (!add)
    return failure();
  Block *block = norm->getBlock();
  if (add->getBlock() != block) {
    reason = "the residual add and the norm are in different blocks";
    return failure();
  }
  bool usersAfterNorm = true;
  for (Operation *user : add->getUsers()) {
    if (user == norm)
      continue;
    Operation *ancestor = block->findAncestorOpInBlock(*user);
    if (!ancestor) {
      reason = "the sum has a user outside the norm's block";
      return failure();
    }
    if (ancestor->isBeforeInBlock(norm))
      usersAfterNorm = false;
  }
  if (usersAfterNorm) {
    insertAt = norm;
    return success();
  }
  if (llvm::all_of(normParameters(norm), [&](Value v) { return definedBefore(v, add); })) {
    insertAt = add;
    return success();
  }
  reason = "a user of the sum precedes the norm, whose parameters are defined after the add";
  return failure();
}

tfm::LayerNormOp createFused(PatternRewriter &rewriter, tfm::LayerNormOp norm, Value input,
                             Value residual) {
  Type type = norm.getOutput().getType();
  return tfm::LayerNormOp::create(rewriter, norm.getLoc(), type, type, input, norm.getScale(),
                                  norm.getBias(), residual, norm.getEpsilonAttr());
}

tfm::RmsNormOp createFused(PatternRewriter &rewriter, tfm::RmsNormOp norm, Value input,
                           Value residual) {
  Type type = norm.getOutput().getType();
  return tfm::RmsNormOp::create(rewriter, norm.getLoc(), type, type, input, norm.getScale(),
                                residual, Value(), norm.getEpsilonAttr());
}

template <typename NormOp> struct ResidualIntoNorm : OpRewritePattern<NormOp> {
  using OpRewritePattern<NormOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(NormOp norm, PatternRewriter &rewriter) const override {
    tfm::ResidualAddOp add;
    Operation *insertAt = nullptr;
    std::string reason;
    if (failed(matchNorm(norm, add, insertAt, reason)))
      return rewriter.notifyMatchFailure(
          norm, reason.empty() ? "the input is not a tfm.residual_add" : reason);
    rewriter.setInsertionPoint(insertAt);
    auto fused = createFused(rewriter, norm, add.getLhs(), add.getRhs());
    rewriter.replaceOp(norm, fused.getOutput());
    rewriter.replaceOp(add, fused.getSum());
    return success();
  }
};

struct FuseResidualNormPass : impl::FuseResidualNormBase<FuseResidualNormPass> {
  using FuseResidualNormBase::FuseResidualNormBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    RewritePatternSet patterns(&getContext());
    patterns.add<ResidualIntoNorm<tfm::LayerNormOp>, ResidualIntoNorm<tfm::RmsNormOp>>(
        &getContext());
    if (failed(applyFusionPatterns(module, std::move(patterns), "residual adds into norms")))
      return signalPassFailure();
    if (!remarks)
      return;
    module.walk([](Operation *op) {
      std::string reason;
      tfm::ResidualAddOp add;
      Operation *insertAt = nullptr;
      if (auto norm = dyn_cast<tfm::LayerNormOp>(op))
        (void)matchNorm(norm, add, insertAt, reason);
      else if (auto norm = dyn_cast<tfm::RmsNormOp>(op))
        (void)matchNorm(norm, add, insertAt, reason);
      if (!reason.empty())
        op->emitRemark() << "residual add not fused into the norm: " << reason;
    });
  }
};

} // namespace
} // namespace dsc
