// An LM head's logits scaled by a constant (Granite's 1 / logits_scaling, Cohere's
// logit_scale) or soft-capped (Gemma-2's and NanoChat's cap · tanh(logits / cap)) computed
// by the head itself: its `logit_scale` and `logit_cap`, so that a decode step has no
// elementwise launch after the LM head (docs/design.md §3.6, issue 14). Its weight keeps its
// values: it is often the tied embedding table.
#include "compiler/fuse/FusionRewrite.h"
#include "compiler/fuse/Passes.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinTypes.h"

#include <cmath>
#include <optional>
#include <type_traits>

namespace dsc {
#define GEN_PASS_DEF_FUSELOGITEPILOGUE
#include "compiler/fuse/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// The LM head whose logits `value` is, read by nothing else: the head's result, or under
// tensor parallelism the all-gather of a vocabulary-parallel head's (an elementwise step
// computes the same on each rank's part of the vocabulary).
tfm::LmHeadOp headOf(Value value) {
  if (!value.hasOneUse())
    return {};
  if (auto gather = value.getDefiningOp<tfm::AllGatherOp>()) {
    value = gather.getInput();
    if (!value.hasOneUse())
      return {};
  }
  return value.getDefiningOp<tfm::LmHeadOp>();
}

float scaleOf(tfm::LmHeadOp head) {
  return head.getLogitScale() ? head.getLogitScale()->convertToFloat() : 1.0f;
}

void setEpilogue(PatternRewriter &rewriter, tfm::LmHeadOp head, double scale,
                 std::optional<double> cap) {
  rewriter.modifyOpInPlace(head, [&] {
    if (static_cast<float>(scale) == 1.0f)
      head.removeLogitScaleAttr();
    else
      head.setLogitScaleAttr(rewriter.getF32FloatAttr(static_cast<float>(scale)));
    if (cap)
      head.setLogitCapAttr(rewriter.getF32FloatAttr(static_cast<float>(*cap)));
  });
}

// Mul(logits, c), Mul(c, logits) or Div(logits, c) of a head without a cap: its scale.
template <typename ArithOp>
struct LogitScalePattern : OpRewritePattern<ArithOp> {
  using OpRewritePattern<ArithOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(ArithOp op, PatternRewriter &rewriter) const override {
    constexpr bool divides = std::is_same_v<ArithOp, onnx::DivOp>;
    for (int side : {0, 1}) {
      if (divides && side == 1)
        break;
      Value logits = op->getOperand(side);
      tfm::LmHeadOp head = headOf(logits);
      std::optional<double> factor = finiteNonzeroSplat(op->getOperand(1 - side));
      if (!head || !factor || head.getLogitCap() ||
          logits.getType() != op->getResult(0).getType())
        continue;
      double scale = divides ? scaleOf(head) / *factor : scaleOf(head) * *factor;
      if (!std::isfinite(static_cast<float>(scale)) || static_cast<float>(scale) == 0.0f)
        continue;
      setEpilogue(rewriter, head, scale, std::nullopt);
      rewriter.replaceOp(op, logits);
      return success();
    }
    return failure();
  }
};

// Mul(Tanh(logits), c) or Mul(c, Tanh(logits)) of a head without a cap whose scale is s
// (the Div by c folded already): c · tanh(s · z) is the head with cap c and scale s · c.
struct LogitCapPattern : OpRewritePattern<onnx::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(onnx::MulOp op, PatternRewriter &rewriter) const override {
    for (int side : {0, 1}) {
      auto tanh = op->getOperand(side).getDefiningOp<onnx::TanhOp>();
      if (!tanh || !tanh->hasOneUse())
        continue;
      Value logits = tanh->getOperand(0);
      tfm::LmHeadOp head = headOf(logits);
      std::optional<double> cap = finiteNonzeroSplat(op->getOperand(1 - side));
      if (!head || !cap || *cap < 0 || head.getLogitCap() ||
          logits.getType() != op->getResult(0).getType())
        continue;
      setEpilogue(rewriter, head, scaleOf(head) * *cap, *cap);
      rewriter.replaceOp(op, logits);
      rewriter.eraseOp(tanh);
      return success();
    }
    return failure();
  }
};

// What is left after the patterns: a Mul or Div of an LM head's logits, or a Mul of their
// Tanh, that did not fold, said once each.
void remarkUnfused(ModuleOp module) {
  module.walk([](Operation *op) {
    if (!isa<onnx::MulOp, onnx::DivOp>(op))
      return;
    for (Value operand : op->getOperands()) {
      auto tanh = operand.getDefiningOp<onnx::TanhOp>();
      if (tanh && isa<onnx::MulOp>(op) && headOf(tanh->getOperand(0))) {
        op->emitRemark() << "logit cap not fused: the cap is not one finite positive "
                            "constant, or the LM head is capped already";
        return;
      }
      if (headOf(operand)) {
        op->emitRemark() << "logit scale not fused: the factor is not one finite nonzero "
                            "constant, or the LM head is capped already";
        return;
      }
    }
  });
}

struct FuseLogitEpiloguePass : impl::FuseLogitEpilogueBase<FuseLogitEpiloguePass> {
  using FuseLogitEpilogueBase::FuseLogitEpilogueBase;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<LogitScalePattern<onnx::MulOp>, LogitScalePattern<onnx::DivOp>,
                 LogitCapPattern>(&getContext());
    if (failed(applyFusionPatterns(getOperation(), std::move(patterns), "logit epilogues")))
      return signalPassFailure();
    if (remarks)
      remarkUnfused(getOperation());
  }
};

} // namespace
} // namespace dsc
