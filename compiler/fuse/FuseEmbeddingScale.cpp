// An embedding's rows multiplied (or divided) by a constant (Gemma's sqrt(hidden_size),
// Granite's embedding_multiplier) gathered already scaled: the embedding's `scale`, so that a
// decode step has no elementwise launch between the gather and the first layer. The table
// keeps its values: it is often the tied LM head too.
#include "compiler/fuse/FusionRewrite.h"
#include "compiler/fuse/Passes.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"

#include <cmath>
#include <optional>
#include <type_traits>

namespace dsc {
#define GEN_PASS_DEF_FUSEEMBEDDINGSCALE
#include "compiler/fuse/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// Mul(rows, c), Mul(c, rows) or Div(rows, c), where rows is an embedding's result or, under
// tensor parallelism, the all-reduce of a vocabulary-parallel one's (a sum of the ranks'
// rows, which the factor scales alike), each read by the next alone.
template <typename ArithOp>
struct EmbeddingScalePattern : OpRewritePattern<ArithOp> {
  EmbeddingScalePattern(MLIRContext *context, bool remarks)
      : OpRewritePattern<ArithOp>(context), remarks(remarks) {}

  LogicalResult matchAndRewrite(ArithOp op, PatternRewriter &rewriter) const override {
    constexpr bool divides = std::is_same_v<ArithOp, onnx::DivOp>;
    for (int side : {0, 1}) {
      if (divides && side == 1)
        break;
      Value rows = op->getOperand(side);
      std::optional<double> factor = finiteNonzeroSplat(op->getOperand(1 - side));
      if (!factor || rows.getType() != op->getResult(0).getType() || !rows.hasOneUse())
        continue;
      Operation *reduce = nullptr;
      if (auto allReduce = rows.getDefiningOp<tfm::AllReduceOp>()) {
        reduce = allReduce;
        rows = allReduce.getInput();
        if (!rows.hasOneUse())
          continue;
      }
      auto embedding = rows.getDefiningOp<tfm::EmbeddingOp>();
      if (!embedding)
        continue;
      double scale = embedding.getScale() ? embedding.getScale()->convertToDouble() : 1.0;
      scale = divides ? scale / *factor : scale * *factor;
      rewriter.modifyOpInPlace(embedding, [&] {
        embedding.setScaleAttr(rewriter.getF32FloatAttr(static_cast<float>(scale)));
      });
      rewriter.replaceOp(op, reduce ? reduce->getResult(0) : Value(embedding.getOutput()));
      return success();
    }
    if (remarks)
      if (op->getOperand(0).template getDefiningOp<tfm::EmbeddingOp>())
        op->emitRemark() << "embedding scale not fused: the factor is not one finite nonzero "
                            "constant, or the rows have other readers";
    return failure();
  }

  bool remarks;
};

struct FuseEmbeddingScalePass : impl::FuseEmbeddingScaleBase<FuseEmbeddingScalePass> {
  using FuseEmbeddingScaleBase::FuseEmbeddingScaleBase;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<EmbeddingScalePattern<onnx::MulOp>, EmbeddingScalePattern<onnx::DivOp>>(
        &getContext(), remarks);
    if (failed(applyFusionPatterns(getOperation(), std::move(patterns), "embedding scales")))
      signalPassFailure();
  }
};

} // namespace
} // namespace dsc
