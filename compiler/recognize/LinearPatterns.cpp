// dsc-recognize-layers: embeddings, linear layers and the LM head.
#include "compiler/recognize/LayerMatching.h"

#include "compiler/recognize/RecognitionReport.h"

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
// Embedding: Gather(table [rows, hidden], ids) on axis 0.
//===----------------------------------------------------------------------===//

struct EmbeddingPattern : RecognitionPattern<onnx::GatherOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::GatherOp gather, PatternRewriter &rewriter) const override {
    auto table = defining<onnx::WeightOp>(gather.getData());
    // A table stored the other way round, [hidden, rows], and transposed in the graph: the
    // LM head's weight read as a tied embedding (ONNX Runtime GenAI's builder).
    bool transposed = false;
    if (auto transpose = defining<onnx::TransposeOp>(gather.getData())) {
      auto perm = transpose.getPerm();
      table = defining<onnx::WeightOp>(transpose.getData());
      transposed = table && cast<RankedTensorType>(table.getType()).getRank() == 2 &&
                   (!perm || (perm->size() == 2 && cast<IntegerAttr>((*perm)[0]).getInt() == 1));
      if (!transposed)
        return failure();
    }
    if (!table)
      return failure(); // shape arithmetic, not a lookup
    auto tableType = cast<RankedTensorType>(table.getType());
    if (transposed)
      tableType = RankedTensorType::get({tableType.getDimSize(1), tableType.getDimSize(0)},
                                        tableType.getElementType());
    if (tableType.getRank() != 2 || !isa<FloatType>(tableType.getElementType()))
      return decline(rewriter, gather, "the table is not a 2-D float weight");
    if (gather.getAxis() != 0)
      return decline(rewriter, gather, "the lookup is not along the table's rows (axis 0)");
    auto ids = dyn_cast<RankedTensorType>(gather.getIndices().getType());
    // tfm.embedding takes [batch, seq] ids (and T5's [queries, keys] relative-position
    // buckets); a lookup of one row of positions (Marian's and Pegasus's sinusoidal table,
    // indexed by arange(past, past + seq)) stays a Gather.
    if (!ids || ids.getRank() != 2)
      return decline(rewriter, gather, "the ids are not 2-D [batch, seq]");
    SmallVector<int64_t> shape(ids.getShape());
    shape.push_back(tableType.getDimSize(1));
    auto type = RankedTensorType::get(shape, tableType.getElementType());
    Value weight = tfmWeight(rewriter, table, transposed);
    auto embedding = tfm::EmbeddingOp::create(rewriter, gather.getLoc(), type, gather.getIndices(),
                                              weight, rewriter.getI64IntegerAttr(0),
                                              IntegerAttr(), FloatAttr());
    recognised(gather);
    rewriter.replaceOp(gather, embedding.getOutput());
    return success();
  }
};


//===----------------------------------------------------------------------===//
// Linear layers and the LM head.
//===----------------------------------------------------------------------===//

// A weight as [out, in]: an onnx.Weight [in, out] (transposed when the plan is written), or
// a Transpose of a weight already [out, in] (a tied embedding table).
struct LinearWeight {
  onnx::WeightOp weight;
  bool transpose = false;
  int64_t in = 0, out = 0;
};
std::optional<LinearWeight> linearWeight(Value value) {
  LinearWeight result;
  if (auto weight = defining<onnx::WeightOp>(value)) {
    result.weight = weight;
    result.transpose = true;
  } else if (auto transpose = defining<onnx::TransposeOp>(value)) {
    result.weight = defining<onnx::WeightOp>(transpose.getData());
    auto perm = transpose.getPerm();
    if (!result.weight ||
        (perm && (perm->size() != 2 || cast<IntegerAttr>((*perm)[0]).getInt() != 1)))
      return std::nullopt;
  } else {
    return std::nullopt;
  }
  auto type = cast<RankedTensorType>(result.weight.getType());
  if (type.getRank() != 2 || !isa<FloatType>(type.getElementType()))
    return std::nullopt;
  result.in = type.getDimSize(result.transpose ? 0 : 1);
  result.out = type.getDimSize(result.transpose ? 1 : 0);
  return result;
}

RankedTensorType withLastDim(RankedTensorType type, int64_t last) {
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = last;
  return RankedTensorType::get(shape, type.getElementType());
}

// MatMul(x, W) (+ Add(bias)): tfm.linear, or tfm.lm_head when the result is the output.
struct MatMulPattern : RecognitionPattern<onnx::MatMulOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::MatMulOp matmul, PatternRewriter &rewriter) const override {
    std::optional<LinearWeight> weight = linearWeight(matmul.getB());
    auto rightType = dyn_cast<RankedTensorType>(matmul.getB().getType());
    if (!weight && rightType && rightType.getRank() >= 3)
      return decline(rewriter, matmul, kProductOfActivations);
    if (!weight)
      return decline(rewriter, matmul, "the right operand is not a 2-D weight");
    RankedTensorType inputType = rankedFloat(matmul.getA());
    if (!inputType || inputType.getRank() < 2)
      return decline(rewriter, matmul, "the input has no known rank of at least 2");
    int64_t in = inputType.getDimSize(inputType.getRank() - 1);
    if (!ShapedType::isDynamic(in) && in != weight->in)
      return decline(rewriter, matmul, "the input features do not match the weight");
    auto type = withLastDim(inputType, weight->out);
    Value result = matmul.getY();
    Value weightValue = tfmWeight(rewriter, weight->weight, weight->transpose);

    bool isHead = returnsValue(result);
    Operation *biasAdd = singleUser(result);
    onnx::WeightOp bias;
    if (biasAdd && isa<onnx::AddOp>(biasAdd))
      bias = vectorWeight(otherOperand(biasAdd, result), weight->out);
    if (bias && returnsValue(biasAdd->getResult(0)))
      isHead = true;
    rewriter.setInsertionPoint(matmul);
    if (isHead) {
      // The bias (GPT-J's untied head) stays an onnx.Add after the head.
      auto head = tfm::LmHeadOp::create(rewriter, matmul.getLoc(), type, matmul.getA(),
                                        weightValue, /*scales=*/Value(),
                                        rewriter.getI64IntegerAttr(0), IntegerAttr(), FloatAttr(),
                                        FloatAttr(), /*int8_activations=*/UnitAttr());
      recognised(matmul);
      rewriter.replaceAllUsesWith(result, head.getLogits());
      rewriter.eraseOp(matmul);
      return success();
    }
    auto linear = tfm::LinearOp::create(rewriter, matmul.getLoc(), type, matmul.getA(),
                                        weightValue,
                                        bias ? tfmWeight(rewriter, bias, false) : Value(),
                                        Value(), tfm::Parallelism::replicated);
    recognised(matmul);
    if (bias) {
      rewriter.replaceAllUsesWith(biasAdd->getResult(0), linear.getOutput());
      rewriter.eraseOp(biasAdd);
    } else {
      rewriter.replaceAllUsesWith(result, linear.getOutput());
    }
    rewriter.eraseOp(matmul);
    return success();
  }
};

namespace {

// At every probe that saw both, `restored` has the leading dimensions of `x`.
bool restoresLeading(Value x, Value restored, const ProbeShapes &shapes) {
  auto a = shapes.find(x), b = shapes.find(restored);
  if (a == shapes.end() || b == shapes.end() || a->second.size() != b->second.size() ||
      a->second.size() < 2)
    return false;
  for (auto [sx, sr] : llvm::zip(a->second, b->second)) {
    if (sx.size() != sr.size())
      return false;
    for (size_t d = 0; d + 1 < sx.size(); ++d)
      if (sx[d] != sr[d])
        return false;
  }
  return true;
}

// A Gemm's input reshape and its only user, a reshape; nulls when it has not both.
std::pair<onnx::ReshapeOp, onnx::ReshapeOp> reshapesAround(onnx::GemmOp gemm) {
  auto flatten = defining<onnx::ReshapeOp>(gemm.getA());
  auto restore = dyn_cast_or_null<onnx::ReshapeOp>(singleUser(gemm.getY()));
  if (!flatten || !restore)
    return {};
  return {flatten, restore};
}

} // namespace

// Gemm(A, B, C) with alpha = beta = 1: tfm.linear; GPT-2's Conv1D
// Reshape(x, [-1, in]) -> Gemm -> Reshape(back to x's leading dimensions) becomes one
// tfm.linear on x when every probe showed the reshapes restore x's shape (liftableGemms,
// before any rewrite).
struct GemmPattern : RecognitionPattern<onnx::GemmOp> {
  GemmPattern(MLIRContext *context, DeclineLog &log, const LiftableGemms &liftable)
      : RecognitionPattern(context, log), liftable(liftable) {}

  LogicalResult matchAndRewrite(onnx::GemmOp gemm, PatternRewriter &rewriter) const override {
    if (gemm.getTransA() != 0)
      return decline(rewriter, gemm, "the input is transposed (transA)");
    if (gemm.getAlpha().convertToDouble() != 1.0 ||
        (!isa<NoneType>(gemm.getC().getType()) && gemm.getBeta().convertToDouble() != 1.0))
      return decline(rewriter, gemm, "alpha or beta is not 1");
    auto weight = defining<onnx::WeightOp>(gemm.getB());
    auto weightType = weight ? cast<RankedTensorType>(weight.getType()) : RankedTensorType();
    if (!weightType || weightType.getRank() != 2)
      return decline(rewriter, gemm, "the right operand is not a 2-D weight");
    bool transpose = gemm.getTransB() == 0;
    int64_t in = weightType.getDimSize(transpose ? 0 : 1);
    int64_t out = weightType.getDimSize(transpose ? 1 : 0);
    onnx::WeightOp bias;
    if (!isa<NoneType>(gemm.getC().getType()) && !(bias = vectorWeight(gemm.getC(), out)))
      return decline(rewriter, gemm, "the bias is not a 1-D weight of the output size");
    RankedTensorType inputType = rankedFloat(gemm.getA());
    if (!inputType || inputType.getRank() != 2)
      return decline(rewriter, gemm, "the input is not known to be 2-D");
    if (!ShapedType::isDynamic(inputType.getDimSize(1)) && inputType.getDimSize(1) != in)
      return decline(rewriter, gemm, "the input features do not match the weight");

    Value input = gemm.getA();
    Value replaced = gemm.getY();
    RankedTensorType type = withLastDim(inputType, out);
    // Conv1D: look through the reshapes around the Gemm, the ones the probes proved.
    auto [flatten, restore] = reshapesAround(gemm);
    auto proved = liftable.find(gemm);
    if (flatten && restore && proved != liftable.end() &&
        proved->second == std::make_pair(flatten.getOperation(), restore.getOperation())) {
      Value x = flatten.getData();
      RankedTensorType xType = rankedFloat(x);
      RankedTensorType restoredType = rankedFloat(restore.getReshaped());
      if (xType && restoredType && xType.getRank() == restoredType.getRank() &&
          restoredType.getRank() > 0 &&
          restoredType.getDimSize(restoredType.getRank() - 1) == out) {
        input = x;
        replaced = restore.getReshaped();
        type = withLastDim(xType, out);
      }
    }
    rewriter.setInsertionPoint(replaced.getDefiningOp());
    auto linear = tfm::LinearOp::create(rewriter, gemm.getLoc(), type, input,
                                        tfmWeight(rewriter, weight, transpose),
                                        bias ? tfmWeight(rewriter, bias, false) : Value(),
                                        Value(), tfm::Parallelism::replicated);
    recognised(gemm);
    rewriter.replaceAllUsesWith(replaced, linear.getOutput());
    if (replaced != gemm.getY())
      rewriter.eraseOp(replaced.getDefiningOp());
    rewriter.eraseOp(gemm);
    return success();
  }

  const LiftableGemms &liftable;
};


// A weight that only this tfm.weight reads: no other handle of the same name (a tied
// embedding table) and no onnx op still reading the initializer.
bool ownedWeight(tfm::WeightOp weight) {
  if (!weight->hasOneUse())
    return false;
  bool owned = true;
  weight->getParentOfType<func::FuncOp>().walk([&](Operation *op) {
    if (auto other = dyn_cast<tfm::WeightOp>(op))
      owned &= other == weight || other.getName() != weight.getName();
    else if (auto source = dyn_cast<onnx::WeightOp>(op))
      owned &= source.getName() != weight.getName() || source->use_empty();
  });
  return owned;
}

// A linear's (or the LM head's) output multiplied or divided by a constant, where the
// product is its only use and no one else reads its weight and bias: it computes the
// product itself with both scaled (#tfm.scale), so the product launches nothing and what
// follows it (Granite's residual add after o_proj * residual_multiplier) sees the linear.
template <typename OpTy> struct ScaledLinearPattern : RecognitionPattern<OpTy> {
  using RecognitionPattern<OpTy>::RecognitionPattern;

  // The weight and bias operands of a plain linear or LM head; none for anything else.
  static Operation *scalable(Value value, OpOperand *&weight, OpOperand *&bias) {
    Operation *op = value.getDefiningOp();
    // Recognition makes plain linears; the epilogues come with the fusions, later.
    if (auto linear = dyn_cast_or_null<tfm::LinearOp>(op)) {
      if (linear.getScales() || linear.getResidual() || linear.getNormScale() ||
          linear.getActivation() || linear.getGated())
        return nullptr;
      weight = &linear.getWeightMutable();
      bias = linear.getBias() ? &linear.getBiasMutable()[0] : nullptr;
      return op;
    }
    if (auto head = dyn_cast_or_null<tfm::LmHeadOp>(op)) {
      if (head.getScales())
        return nullptr;
      weight = &head.getWeightMutable();
      bias = nullptr;
      return op;
    }
    return nullptr;
  }

  LogicalResult matchAndRewrite(OpTy op, PatternRewriter &rewriter) const override {
    constexpr bool divide = std::is_same_v<OpTy, onnx::DivOp>;
    // No decline: a product has many meanings besides this one.
    OpOperand *weightOperand = nullptr, *biasOperand = nullptr;
    Operation *linear = scalable(op.getA(), weightOperand, biasOperand);
    Value constantOperand = op.getB();
    if (!linear && !divide) {
      linear = scalable(op.getB(), weightOperand, biasOperand);
      constantOperand = op.getA();
    }
    std::optional<double> constant = linear ? scalarConstant(constantOperand) : std::nullopt;
    if (!constant)
      return failure();
    double factor = divide ? 1.0 / *constant : *constant;
    Value output = linear->getResult(0);
    if (!std::isfinite(factor) || factor == 0 || !output.hasOneUse() ||
        op.getResult().getType() != output.getType())
      return failure();
    // Gemma-2's logit cap, cap * tanh(logits / cap), is the LM head's as it stands.
    Operation *next = op->hasOneUse() ? *op->getUsers().begin() : nullptr;
    if (isa<tfm::LmHeadOp>(linear) && next && isa<onnx::TanhOp>(next))
      return failure();
    auto weight = weightOperand->get().template getDefiningOp<tfm::WeightOp>();
    auto bias = biasOperand ? biasOperand->get().template getDefiningOp<tfm::WeightOp>()
                            : tfm::WeightOp();
    if (!weight || !ownedWeight(weight) || (biasOperand && (!bias || !ownedWeight(bias))))
      return failure();
    Attribute scale =
        tfm::ScaleAttr::get(rewriter.getContext(), rewriter.getF64FloatAttr(factor));
    FailureOr<Value> scaledWeight = weight.withTransforms(rewriter, {scale});
    FailureOr<Value> scaledBias = bias ? bias.withTransforms(rewriter, {scale}) : Value();
    if (failed(scaledWeight) || failed(scaledBias))
      return failure();
    rewriter.modifyOpInPlace(linear, [&] {
      weightOperand->set(*scaledWeight);
      if (bias)
        biasOperand->set(*scaledBias);
    });
    rewriter.replaceOp(op, output);
    if (weight->use_empty())
      rewriter.eraseOp(weight);
    if (bias && bias->use_empty())
      rewriter.eraseOp(bias);
    return success();
  }
};

LiftableGemms liftableGemms(func::FuncOp func, const ProbeShapes &shapes) {
  LiftableGemms liftable;
  func.walk([&](onnx::GemmOp gemm) {
    auto [flatten, restore] = reshapesAround(gemm);
    if (flatten && restore && restoresLeading(flatten.getData(), restore.getReshaped(), shapes))
      liftable[gemm] = {flatten.getOperation(), restore.getOperation()};
  });
  return liftable;
}

void populateLinearPatterns(RewritePatternSet &patterns, DeclineLog &log,
                            const LiftableGemms &liftable) {
  patterns.add<EmbeddingPattern, MatMulPattern, ScaledLinearPattern<onnx::MulOp>,
               ScaledLinearPattern<onnx::DivOp>>(patterns.getContext(), log);
  patterns.add<GemmPattern>(patterns.getContext(), log, liftable);
}

} // namespace dsc::layers
