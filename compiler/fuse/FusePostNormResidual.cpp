// Sandwich norms (Gemma-2's and Gemma-3's post-attention and post-feedforward norms): the
// residual stream plus the RMS norm of a sublayer's output becomes one tfm.rms_norm with a
// `post_residual`, so the add is not a launch of its own (issue 14). The norm of the sum
// that follows (the next sublayer's pre-norm) then reads it, and moves into the next
// linear's prologue as any other.
#include "compiler/fuse/FusionRewrite.h"
#include "compiler/fuse/Passes.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"

#include <string>

namespace dsc {
#define GEN_PASS_DEF_FUSEPOSTNORMRESIDUAL
#include "compiler/fuse/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// The norm among an add's operands that can add the other one itself, with `residual` set
// to that other operand; otherwise null, with `reason` set when an operand is a norm that
// cannot.
tfm::RmsNormOp normToAddTo(Operation *add, Value &residual, std::string &reason) {
  Value lhs = add->getOperand(0), rhs = add->getOperand(1);
  Type type = add->getResult(0).getType();
  for (auto [operand, other] : {std::pair(lhs, rhs), std::pair(rhs, lhs)}) {
    auto norm = operand.getDefiningOp<tfm::RmsNormOp>();
    if (!norm)
      continue;
    if (norm.getResidual() || norm.getPostResidual()) {
      reason = "the norm adds a residual already";
      continue;
    }
    if (!llvm::all_of(norm.getOutput().getUsers(),
                      [&](Operation *user) { return user == add || isa<onnx::ShapeOp>(user); })) {
      reason = "the norm's result has other readers, which need it without the residual";
      continue;
    }
    if (norm.getOutput().getType() != type || other.getType() != type) {
      reason = "the add broadcasts";
      continue;
    }
    if (norm->getBlock() != add->getBlock()) {
      reason = "the norm and the add are in different blocks";
      continue;
    }
    residual = other;
    return norm;
  }
  return {};
}

// tfm.residual_add or an onnx.Add left generic (Gemma's sandwich adds are).
template <typename AddOp> struct AddIntoNorm : OpRewritePattern<AddOp> {
  using OpRewritePattern<AddOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rewriter) const override {
    Value residual;
    std::string reason;
    tfm::RmsNormOp norm = normToAddTo(add, residual, reason);
    if (!norm)
      return rewriter.notifyMatchFailure(
          add, reason.empty() ? "neither operand is a tfm.rms_norm" : reason);
    // At the add: the residual is defined before it, and the norm's input and scale before
    // the norm, which precedes the add.
    rewriter.setInsertionPoint(add);
    Type type = norm.getOutput().getType();
    auto fused = tfm::RmsNormOp::create(rewriter, norm.getLoc(), type, Type(), norm.getInput(),
                                        norm.getScale(), Value(), residual,
                                        norm.getEpsilonAttr());
    // Shapes read of the norm's result are its input's.
    rewriter.replaceAllUsesWith(norm.getOutput(), norm.getInput());
    rewriter.replaceOp(add, fused.getOutput());
    rewriter.eraseOp(norm);
    return success();
  }
};

struct FusePostNormResidualPass : impl::FusePostNormResidualBase<FusePostNormResidualPass> {
  using FusePostNormResidualBase::FusePostNormResidualBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    RewritePatternSet patterns(&getContext());
    patterns.add<AddIntoNorm<tfm::ResidualAddOp>, AddIntoNorm<onnx::AddOp>>(&getContext());
    if (failed(applyFusionPatterns(module, std::move(patterns), "post-norm residuals")))
      return signalPassFailure();
    if (!remarks)
      return;
    module.walk([](Operation *op) {
      if (!isa<tfm::ResidualAddOp, onnx::AddOp>(op))
        return;
      Value residual;
      std::string reason;
      if (!normToAddTo(op, residual, reason) && !reason.empty())
        op->emitRemark() << "the residual is not added by the norm: " << reason;
    });
  }
};

} // namespace
} // namespace dsc
