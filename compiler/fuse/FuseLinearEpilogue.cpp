// A linear layer's activation and residual add, moved into its epilogue: the GEMM applies
// them to each output element before storing it, instead of two more passes over the
// result (docs/design.md §3.6).
#include "compiler/fuse/Passes.h"
#include "compiler/fuse/FusionRewrite.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/PatternMatch.h"

#include <string>
#include <tuple>

namespace dsc {
#define GEN_PASS_DEF_FUSELINEAREPILOGUE
#include "compiler/fuse/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// What keeps any epilogue out of `linear`, or "" when nothing does. `what` names the
// fused op for the reason.
std::string epilogueBlocker(tfm::LinearOp linear, StringRef what) {
  if (linear.getParallel() == tfm::Parallelism::row)
    return ("the linear is row-parallel: its result is a partial sum until the "
            "tfm.all_reduce, and the " +
            what + " must come after it (nothing is fused across a collective)")
        .str();
  if (linear.getResidual())
    return ("the linear already adds a residual, which the " + what + " would have to precede")
        .str();
  if (!linear.getOutput().hasOneUse())
    return ("the linear's result has another user, which needs it without the " + what).str();
  return "";
}

// The onnx.Reshape that `value` is, when it reshapes a tfm.linear's result and is that
// result's only reader: GPT-2's flattened Conv1D (Reshape -> linear on [b * s, in] ->
// Reshape back to [b, s, out]) where recognition could not drop the reshapes.
Operation *reshapedLinear(Value value) {
  Operation *reshape = value.getDefiningOp();
  if (!reshape || !isa<onnx::ReshapeOp>(reshape) || !reshape->getResult(0).hasOneUse())
    return nullptr;
  return reshape->getOperand(0).getDefiningOp<tfm::LinearOp>() ? reshape : nullptr;
}

// tfm.activation(tfm.linear), or of a reshape of it (an elementwise function commutes
// with a reshape) -> the linear's `activation`. On failure `reason` says why, or stays
// empty when `activation` is not a candidate at all.
LogicalResult matchActivation(tfm::ActivationOp activation, tfm::LinearOp &linear,
                              std::string &reason) {
  Value input = activation.getInput();
  if (Operation *reshape = reshapedLinear(input))
    input = reshape->getOperand(0);
  linear = input.getDefiningOp<tfm::LinearOp>();
  if (!linear)
    return failure();
  if (linear.getActivation()) {
    reason = "the linear already applies an activation";
    return failure();
  }
  reason = epilogueBlocker(linear, "activation");
  return success(reason.empty());
}

// Why a linear whose [rows, n] result a Reshape gives the add's shape cannot take the
// residual flattened to [rows, n] (GPT-2's Conv1D: addmm on the flattened rows, then a view
// back); empty when it can.
std::string flattenedResidualBlocker(Operation *reshape, Value residual) {
  auto linear = reshape->getOperand(0).getDefiningOp<tfm::LinearOp>();
  std::string why = epilogueBlocker(linear, "residual");
  if (!why.empty())
    return why;
  auto flat = dyn_cast<RankedTensorType>(linear.getOutput().getType());
  auto shaped = dyn_cast<RankedTensorType>(reshape->getResult(0).getType());
  if (!flat || !shaped || flat.getRank() != 2 || flat.isDynamicDim(1) || shaped.getRank() < 1 ||
      shaped.getDimSize(shaped.getRank() - 1) != flat.getDimSize(1))
    return "the linear's result is reshaped before the add into other rows than [.., its "
           "features]";
  if (residual.getType() != reshape->getResult(0).getType())
    return "the residual's type differs from the reshaped result's";
  if (linear->getBlock() != reshape->getBlock() || reshape->getBlock() != residual.getParentBlock())
    return "the linear, its reshape and the residual are in different blocks";
  return "";
}

// tfm.residual_add(tfm.linear, r) or (r, tfm.linear) -> the linear's `residual` r. The
// first operand that is a fusable linear wins; `reason` gives each operand's reason. With
// `reshape` set, the linear's result is reshaped before the add (flattenedResidualBlocker).
LogicalResult matchResidual(tfm::ResidualAddOp add, tfm::LinearOp &linear, Value &residual,
                            Operation *&reshape, std::string &reason) {
  reshape = nullptr;
  for (auto [name, operand, other] : {std::tuple("lhs", add.getLhs(), add.getRhs()),
                                      std::tuple("rhs", add.getRhs(), add.getLhs())}) {
    std::string why;
    if (Operation *reshaped = reshapedLinear(operand)) {
      why = flattenedResidualBlocker(reshaped, other);
      if (why.empty()) {
        linear = reshaped->getOperand(0).getDefiningOp<tfm::LinearOp>();
        residual = other;
        reshape = reshaped;
        return success();
      }
    } else if (auto candidate = operand.getDefiningOp<tfm::LinearOp>()) {
      why = epilogueBlocker(candidate, "residual");
      if (why.empty() && candidate->getBlock() != add->getBlock())
        why = "the linear and the add are in different blocks";
      if (why.empty() && other.getType() != candidate.getOutput().getType())
        why = "the residual's type differs from the linear's result (the epilogue adds a "
              "residual of the result's shape, without broadcasting)";
      if (why.empty()) {
        linear = candidate;
        residual = other;
        return success();
      }
    } else if (auto reduce = operand.getDefiningOp<tfm::AllReduceOp>()) {
      if (reduce.getInput().getDefiningOp<tfm::LinearOp>())
        why = "the linear is row-parallel: the residual is added after its tfm.all_reduce "
              "(nothing is fused across a collective)";
    }
    if (!why.empty())
      reason += (reason.empty() ? "" : "; ") + std::string(name) + ": " + why;
  }
  return failure();
}

// onnx.Add(tfm.linear, r) is left to the generic path: only a broadcasting add is, since
// recognition makes every same-typed add of a block's output a tfm.residual_add. Says so.
std::string broadcastDecline(onnx::AddOp add) {
  for (Value operand : add->getOperands())
    if (auto linear = operand.getDefiningOp<tfm::LinearOp>())
      if (add.getType() != linear.getOutput().getType() ||
          llvm::any_of(add->getOperandTypes(),
                       [&](Type type) { return type != linear.getOutput().getType(); }))
        return "the add broadcasts (its operands' shapes differ from the linear's result); "
               "the epilogue adds a residual of the result's shape only";
  return "";
}

struct ActivationIntoLinear : OpRewritePattern<tfm::ActivationOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tfm::ActivationOp activation,
                                PatternRewriter &rewriter) const override {
    tfm::LinearOp linear;
    std::string reason;
    if (failed(matchActivation(activation, linear, reason)))
      return rewriter.notifyMatchFailure(
          activation, reason.empty() ? "the input is not a tfm.linear" : reason);
    rewriter.modifyOpInPlace(linear, [&] {
      linear.setActivationAttr(
          tfm::ActivationKindAttr::get(rewriter.getContext(), activation.getKind()));
    });
    rewriter.replaceOp(activation, activation.getInput());
    return success();
  }
};

struct ResidualIntoLinear : OpRewritePattern<tfm::ResidualAddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tfm::ResidualAddOp add,
                                PatternRewriter &rewriter) const override {
    tfm::LinearOp linear;
    Value residual;
    Operation *reshape = nullptr;
    std::string reason;
    if (failed(matchResidual(add, linear, residual, reshape, reason)))
      return rewriter.notifyMatchFailure(
          add, reason.empty() ? "neither operand is a tfm.linear" : reason);
    // The residual may be computed after the linear: the linear moves down to the add, which
    // its operands dominate, as they dominate the linear and the add is its only user.
    rewriter.moveOpBefore(linear, add);
    if (!reshape) {
      rewriter.modifyOpInPlace(linear, [&] { linear.getResidualMutable().assign(residual); });
      rewriter.replaceOp(add, linear.getOutput());
      return success();
    }
    // A flattened linear: the residual is flattened to the linear's [rows, n] (a view), and
    // the reshape after the linear, now of the sum, replaces the add.
    auto flat = cast<RankedTensorType>(linear.getOutput().getType());
    rewriter.setInsertionPoint(linear);
    auto shapeType = RankedTensorType::get({2}, rewriter.getI64Type());
    Value shape = onnx::ConstantOp::create(
        rewriter, add.getLoc(), shapeType,
        DenseElementsAttr::get(shapeType, ArrayRef<int64_t>{-1, flat.getDimSize(1)}));
    Value flatResidual =
        onnx::ReshapeOp::create(rewriter, add.getLoc(), flat, residual, shape).getResult();
    rewriter.moveOpAfter(reshape, linear);
    rewriter.modifyOpInPlace(linear, [&] { linear.getResidualMutable().assign(flatResidual); });
    rewriter.replaceOp(add, reshape->getResult(0));
    return success();
  }
};

struct FuseLinearEpiloguePass : impl::FuseLinearEpilogueBase<FuseLinearEpiloguePass> {
  using FuseLinearEpilogueBase::FuseLinearEpilogueBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    RewritePatternSet patterns(&getContext());
    patterns.add<ActivationIntoLinear, ResidualIntoLinear>(&getContext());
    if (failed(applyFusionPatterns(module, std::move(patterns), "linear epilogues")))
      return signalPassFailure();
    if (!remarks)
      return;
    // Each candidate left unfused, once, with the reason its pattern declined.
    module.walk([](Operation *op) {
      std::string reason;
      tfm::LinearOp linear;
      Value residual;
      Operation *reshape = nullptr;
      if (auto activation = dyn_cast<tfm::ActivationOp>(op))
        (void)matchActivation(activation, linear, reason);
      else if (auto add = dyn_cast<tfm::ResidualAddOp>(op))
        (void)matchResidual(add, linear, residual, reshape, reason);
      else if (auto add = dyn_cast<onnx::AddOp>(op))
        reason = broadcastDecline(add);
      if (!reason.empty())
        op->emitRemark() << "not fused into the linear's epilogue: " << reason;
    });
  }
};

} // namespace
} // namespace dsc
