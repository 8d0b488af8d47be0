// dsc-recognize-layers: residual adds.
#include "compiler/recognize/LayerMatching.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <functional>
#include <map>
#include <optional>

using namespace mlir;

namespace dsc::layers {

//===----------------------------------------------------------------------===//
// Residual adds: a block's output added to its input, both [.., hidden].
//===----------------------------------------------------------------------===//

bool isBlockOutput(Value value) {
  Operation *def = value.getDefiningOp();
  return def && isa<tfm::LinearOp, tfm::EmbeddingOp, tfm::ResidualAddOp, tfm::AttentionOp>(def);
}

// `value` is computed from `source` by elementwise ops (a few levels deep).
bool dependsElementwise(Value value, Value source, int depth = 8) {
  if (value == source)
    return true;
  Operation *def = value.getDefiningOp();
  if (!def || depth == 0 || !isElementwise(def))
    return false;
  return llvm::any_of(def->getOperands(),
                      [&](Value operand) { return dependsElementwise(operand, source, depth - 1); });
}

struct ResidualAddPattern : OpRewritePattern<onnx::AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(onnx::AddOp add, PatternRewriter &rewriter) const override {
    RankedTensorType type = rankedFloat(add.getA());
    if (!type || type.getRank() < 2 || add.getB().getType() != type)
      return rewriter.notifyMatchFailure(add, "the operands are not tensors of one type");
    if (!isBlockOutput(add.getA()) && !isBlockOutput(add.getB()))
      return rewriter.notifyMatchFailure(add, "neither operand is a block's output");
    // x + 0.044715 x^3 inside a GELU is no residual connection.
    if (dependsElementwise(add.getA(), add.getB()) || dependsElementwise(add.getB(), add.getA()))
      return rewriter.notifyMatchFailure(add, "one operand is an elementwise function of the other");
    rewriter.replaceOpWithNewOp<tfm::ResidualAddOp>(add, type, add.getA(), add.getB());
    return success();
  }
};


void populateResidualPatterns(RewritePatternSet &patterns) {
  patterns.add<ResidualAddPattern>(patterns.getContext());
}

} // namespace dsc::layers
