// A norm whose only reader is a linear layer, moved into the linear's prologue: on the GPU
// the gemv kernel that stages the input rows normalises them itself, so a decode layer
// launches no norm kernel (issue 14, docs/design.md §3.6: 7 launches per Llama layer go to 5).
#include "compiler/fuse/FusionRewrite.h"
#include "compiler/fuse/Passes.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"

#include <string>

namespace dsc {
#define GEN_PASS_DEF_FUSENORMPROLOGUE
#include "compiler/fuse/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// The norm a linear's prologue can take: its input, scale, bias and epsilon.
struct NormSource {
  tfm::NormKind kind = tfm::NormKind::rms;
  Value input, scale, bias;
  FloatAttr epsilon;
};

// The readers of `value` that read more than its shape: an onnx.Shape of a norm's result
// is the Shape of its input, which it then reads instead.
int64_t valueReaders(Value value) {
  return llvm::count_if(value.getUsers(), [](Operation *user) { return !isa<onnx::ShapeOp>(user); });
}

// The onnx.Reshape between a norm and the linear reading it, when the linear is its only
// reader and it keeps the rows' length (the normalised dimension): GPT-2's flattened Conv1D
// input ([b, s, in] -> [b * s, in]). A norm of each row commutes with it.
onnx::ReshapeOp rowReshape(tfm::LinearOp linear) {
  auto reshape = linear.getInput().getDefiningOp<onnx::ReshapeOp>();
  if (!reshape || valueReaders(reshape->getResult(0)) != 1)
    return {};
  auto from = dyn_cast<RankedTensorType>(reshape->getOperand(0).getType());
  auto to = dyn_cast<RankedTensorType>(reshape->getResult(0).getType());
  if (!from || !to || from.getRank() < 1 || to.getRank() < 1)
    return {};
  int64_t rowFrom = from.getDimSize(from.getRank() - 1), rowTo = to.getDimSize(to.getRank() - 1);
  if (ShapedType::isDynamic(rowFrom) || rowFrom != rowTo)
    return {};
  return reshape;
}

// The value a linear's norm would normalise: its input, or what a row-keeping reshape of
// its input reads.
Value normalisedValue(tfm::LinearOp linear) {
  if (onnx::ReshapeOp reshape = rowReshape(linear))
    return reshape->getOperand(0);
  return linear.getInput();
}

// Whether every reader of `norm`'s result (shapes aside) is a linear layer's input that has
// no norm of its own, in the norm's block: a parallel block's projections (Cohere's joined
// QKV and gate-up). Each then normalises the rows itself; the norm is a small part of a
// linear's work.
bool onlyLinearsRead(Operation *norm) {
  Value result = norm->getResult(0);
  return llvm::all_of(result.getUsers(), [&](Operation *user) {
    if (isa<onnx::ShapeOp>(user))
      return true;
    auto linear = dyn_cast<tfm::LinearOp>(user);
    return linear && linear.getInput() == result && !linear.getNorm() &&
           linear->getBlock() == norm->getBlock();
  });
}

// What `linear` reads through a norm it can take into its prologue; otherwise nothing, with
// `reason` set when its input is a norm that cannot move.
std::optional<NormSource> normOf(tfm::LinearOp linear, std::string &reason) {
  Operation *producer = normalisedValue(linear).getDefiningOp();
  NormSource source;
  Value residual, sum;
  if (auto norm = dyn_cast_or_null<tfm::RmsNormOp>(producer)) {
    source = {tfm::NormKind::rms, norm.getInput(), norm.getScale(), Value(),
              norm.getEpsilonAttr()};
    residual = norm.getResidual();
    sum = norm.getSum();
    if (norm.getPostResidual()) {
      reason = "the norm adds a residual to its result (a sandwich norm's)";
      return std::nullopt;
    }
  } else if (auto norm = dyn_cast_or_null<tfm::LayerNormOp>(producer)) {
    source = {tfm::NormKind::layer, norm.getInput(), norm.getScale(), norm.getBias(),
              norm.getEpsilonAttr()};
    residual = norm.getResidual();
    sum = norm.getSum();
  } else {
    return std::nullopt;
  }
  if (linear.getNorm())
    reason = "the linear already normalises its input";
  else if (residual || sum)
    reason = "the norm adds a residual and stores the sum (the block's residual stream), "
             "which the linear would have to write";
  else if (valueReaders(producer->getResult(0)) != 1 && !onlyLinearsRead(producer))
    reason = "the norm's result has a reader that is not a linear layer, which would "
             "normalise again";
  else if (producer->getBlock() != linear->getBlock())
    reason = "the norm and the linear are in different blocks";
  return reason.empty() ? std::optional<NormSource>(source) : std::nullopt;
}

struct NormIntoLinear : OpRewritePattern<tfm::LinearOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tfm::LinearOp linear,
                                PatternRewriter &rewriter) const override {
    std::string reason;
    std::optional<NormSource> source = normOf(linear, reason);
    if (!source)
      return rewriter.notifyMatchFailure(
          linear, reason.empty() ? "the input is not a tfm.rms_norm or tfm.layer_norm" : reason);
    Operation *norm = normalisedValue(linear).getDefiningOp();
    // The reshape between them, if any, reshapes the norm's input instead, and the shapes
    // read of the norm's result are its input's.
    if (onnx::ReshapeOp reshape = rowReshape(linear))
      rewriter.modifyOpInPlace(reshape, [&] { reshape->setOperand(0, source->input); });
    // The other linears that read the norm keep reading it until they take it too; the
    // shapes read of it are its input's.
    rewriter.replaceUsesWithIf(norm->getResult(0), source->input, [&](OpOperand &use) {
      return use.getOwner() == linear.getOperation() || isa<onnx::ShapeOp>(use.getOwner());
    });
    rewriter.modifyOpInPlace(linear, [&] {
      if (!rowReshape(linear))
        linear.getInputMutable().assign(source->input);
      linear.getNormScaleMutable().assign(source->scale);
      if (source->bias)
        linear.getNormBiasMutable().assign(source->bias);
      linear.setNormAttr(tfm::NormKindAttr::get(rewriter.getContext(), source->kind));
      linear.setNormEpsilonAttr(source->epsilon);
    });
    if (norm->use_empty())
      rewriter.eraseOp(norm);
    return success();
  }
};

struct FuseNormProloguePass : impl::FuseNormPrologueBase<FuseNormProloguePass> {
  using FuseNormPrologueBase::FuseNormPrologueBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    RewritePatternSet patterns(&getContext());
    patterns.add<NormIntoLinear>(&getContext());
    if (failed(applyFusionPatterns(module, std::move(patterns), "norm prologues")))
      return signalPassFailure();
    if (!remarks)
      return;
    module.walk([](tfm::LinearOp linear) {
      std::string reason;
      (void)normOf(linear, reason);
      if (!reason.empty())
        linear->emitRemark() << "the norm of its input is not fused into its prologue: "
                             << reason;
    });
  }
};

} // namespace
} // namespace dsc
