// dsc-recognize-layers: layer and RMS norms, as one op or decomposed.
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
// Norms.
//===----------------------------------------------------------------------===//

// onnx.LayerNormalization (opset 17) over the last axis.
struct LayerNormOpPattern : RecognitionPattern<onnx::LayerNormalizationOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::LayerNormalizationOp norm,
                                PatternRewriter &rewriter) const override {
    RankedTensorType type = rankedFloat(norm.getX());
    if (!type || type.getRank() < 1)
      return decline(rewriter, norm, "the input has no known rank of at least 1");
    int64_t axis = static_cast<int64_t>(norm.getAxis());
    if (axis < 0)
      axis += type.getRank();
    if (axis != type.getRank() - 1)
      return decline(rewriter, norm, "it normalises more than the last axis");
    if (!norm.getMean().use_empty() || !norm.getInvStdDev().use_empty())
      return decline(rewriter, norm, "its mean or inverse deviation is used");
    int64_t hidden = type.getDimSize(axis);
    onnx::WeightOp scale = vectorWeight(norm.getScale(), hidden);
    // A constant scale (OLMo's parameter-free norm, exported by TorchScript with a constant
    // of ones) is read as the plan's constant.
    Value constantScale;
    if (!scale)
      if (auto constant = defining<onnx::ConstantOp>(norm.getScale()))
        if (auto constantType = dyn_cast<RankedTensorType>(constant.getType());
            constantType && constantType.getRank() == 1 &&
            constantType.getDimSize(0) == hidden &&
            constantType.getElementType() == type.getElementType())
          constantScale = constant.getResult();
    if (!scale && !constantScale)
      return decline(rewriter, norm, "the scale is not a weight or constant of the hidden size");
    onnx::WeightOp bias;
    // A bias of zeros (nn.LayerNorm(bias=False) exported with a constant B) is none.
    bool zeroBias = false;
    if (auto constant = defining<onnx::ConstantOp>(norm.getB()))
      if (auto dense = dyn_cast<DenseFPElementsAttr>(constant.getValue()))
        zeroBias = llvm::all_of(dense.getValues<APFloat>(),
                                [](const APFloat &v) { return v.isZero(); });
    if (!isa<NoneType>(norm.getB().getType()) && !zeroBias &&
        !(bias = vectorWeight(norm.getB(), hidden)))
      return decline(rewriter, norm, "the bias is not a weight of the hidden size");
    auto layerNorm = tfm::LayerNormOp::create(
        rewriter, norm.getLoc(), type, norm.getX(),
        scale ? tfmWeight(rewriter, scale, false) : constantScale,
        bias ? tfmWeight(rewriter, bias, false) : Value(),
        rewriter.getF32FloatAttr(norm.getEpsilon().convertToFloat()));
    recognised(norm);
    rewriter.replaceAllUsesWith(norm.getY(), layerNorm.getOutput());
    rewriter.eraseOp(norm);
    return success();
  }
};

// The decomposed norms, anchored on the variance ReduceMean(Pow(d, 2)) (or Mul(d, d)):
//   LayerNorm: d = Sub(x, ReduceMean(x)); Div(d, Sqrt(Add(var, eps))) (or d times its
//              Reciprocal, or Div(1, .)) -> Mul scale [-> Add bias]
//   RMSNorm:   d = x; Mul(x, Div(1, Sqrt(Add(var, eps)))) (or Reciprocal, or Div(x, Sqrt))
//              -> Mul weight
// with float Casts (fp16 exports) allowed around d and before the scale. Sqrt(var) without
// the Add is a norm too: torch's dynamo exporter drops an Add of a constant of 1e-8 or less
// (Helium's rms_norm_eps), and a zero row (a padding token's zero embedding) then divides 0
// by 0. Its epsilon is `missingEpsilon`: 0, the graph's own meaning, unless the driver gives
// the model's configured one.
struct DecomposedNormPattern : RecognitionPattern<onnx::ReduceMeanOp> {
  DecomposedNormPattern(MLIRContext *context, layers::DeclineLog &log, double missingEpsilon,
                        int &withoutEpsilon)
      : RecognitionPattern(context, log), missingEpsilon(missingEpsilon),
        withoutEpsilon(withoutEpsilon) {}
  double missingEpsilon;
  int &withoutEpsilon;

  LogicalResult matchAndRewrite(onnx::ReduceMeanOp variance,
                                PatternRewriter &rewriter) const override {
    Operation *square = variance.getData().getDefiningOp();
    Value deviation;
    if (auto pow = dyn_cast_or_null<onnx::PowOp>(square)) {
      if (!near(scalarConstant(pow.getY()), 2.0))
        return failure();
      deviation = pow.getX();
    } else if (auto mul = dyn_cast_or_null<onnx::MulOp>(square)) {
      if (mul.getA() != mul.getB())
        return failure();
      deviation = mul.getA();
    } else {
      return failure(); // a mean, not a variance
    }
    llvm::SmallPtrSet<Operation *, 16> group;
    group.insert(square);
    group.insert(variance);
    if (!isLastAxisMean(variance))
      return decline(rewriter, variance, "the variance is not over the last axis alone");

    // eps and the square root, or its reciprocal as Pow(v, -0.5) (Gemma-4's, which avoids
    // rsqrt for JAX's sake).
    auto rootOf = [](Operation *op) -> Operation * {
      if (isa_and_nonnull<onnx::SqrtOp>(op))
        return op;
      if (auto pow = dyn_cast_or_null<onnx::PowOp>(op); pow && near(scalarConstant(pow.getY()), -0.5))
        return op;
      return nullptr;
    };
    Operation *next = singleUser(variance.getReduced());
    Operation *root = rootOf(next);
    double eps = missingEpsilon;
    if (!root) {
      std::optional<double> added =
          next && isa<onnx::AddOp>(next)
              ? scalarConstant(otherOperand(next, variance.getReduced()))
              : std::nullopt;
      if (!added)
        return decline(rewriter, variance, "the variance is not followed by Add(eps) or Sqrt");
      root = rootOf(singleUser(next->getResult(0)));
      if (!root)
        return decline(rewriter, variance, "Add(eps) is not followed by Sqrt or Pow(-0.5)");
      group.insert(next);
      eps = *added;
    }
    group.insert(root);
    const bool inverseRoot = isa<onnx::PowOp>(root);
    Value sqrt = root->getResult(0);

    // LayerNorm when the deviation is x - mean(x).
    Value centred = throughCast(deviation);
    LogicalResult rewritten = failure();
    auto sub = defining<onnx::SubOp>(centred);
    auto mean = sub ? defining<onnx::ReduceMeanOp>(sub.getB()) : onnx::ReduceMeanOp();
    if (mean && mean.getData() == sub.getA())
      rewritten = rewriteLayerNorm(rewriter, variance, group, sub, mean, deviation, sqrt,
                                   inverseRoot, eps);
    else
      rewritten = rewriteRmsNorm(rewriter, variance, group, deviation, sqrt, inverseRoot, eps);
    if (succeeded(rewritten) && next == root)
      ++withoutEpsilon;
    return rewritten;
  }

  // Mul(y, scale) [+ Add(bias)] after the normalised value (possibly through a Cast), or,
  // with no scale weight, the normalised value itself (`mul` null).
  struct Affine {
    Operation *mul = nullptr, *add = nullptr;
    onnx::WeightOp scale, bias;
    Value output;
  };
  Affine matchAffine(Value normalised, int64_t hidden, bool withBias,
                     llvm::SmallPtrSetImpl<Operation *> &group) const {
    Affine affine;
    Value y = normalised;
    Operation *cast = singleUser(y);
    if (cast && isa<onnx::CastOp>(cast))
      y = cast->getResult(0);
    else
      cast = nullptr;
    // Without a learned scale the normalised value is the output (read with a scale of
    // ones: onesScale), where its width is known.
    if (!ShapedType::isDynamic(hidden))
      affine.output = normalised;
    Operation *mul = singleUser(y);
    if (!mul || !isa<onnx::MulOp>(mul))
      return affine;
    affine.scale = vectorWeight(otherOperand(mul, y), hidden);
    if (!affine.scale)
      return affine;
    if (cast)
      group.insert(cast);
    group.insert(mul);
    affine.mul = mul;
    affine.output = mul->getResult(0);
    if (!withBias)
      return affine;
    if (Operation *add = singleUser(affine.output); add && isa<onnx::AddOp>(add))
      if (onnx::WeightOp bias = vectorWeight(otherOperand(add, affine.output), hidden)) {
        affine.add = add;
        affine.bias = bias;
        affine.output = add->getResult(0);
      }
    return affine;
  }

  // A norm without a learned scale (nanochat's F.rms_norm(x, (d,)), a LayerNorm without
  // elementwise_affine): its normalised value is the output, scaled by a constant of ones
  // (the plan's constant, as for a LayerNormalization with a constant scale).
  static Value onesScale(PatternRewriter &rewriter, Location loc, int64_t hidden,
                         Type element) {
    auto type = RankedTensorType::get({hidden}, element);
    return onnx::ConstantOp::create(
        rewriter, loc, type, DenseElementsAttr::get(type, rewriter.getFloatAttr(element, 1.0)));
  }

  // The norm's input: x, or what a float Cast converted into x when the norm's output has
  // that type again (the fp16 round trip).
  static Value normInput(Value x, Value output) {
    Value inner = throughCast(x);
    if (inner != x && getElementTypeOrSelf(inner.getType()) == getElementTypeOrSelf(output.getType()))
      return inner;
    return x;
  }

  LogicalResult rewriteLayerNorm(PatternRewriter &rewriter, onnx::ReduceMeanOp variance,
                                 llvm::SmallPtrSetImpl<Operation *> &group, onnx::SubOp sub,
                                 onnx::ReduceMeanOp mean, Value deviation,
                                 Value sqrt, bool inverseRoot, double eps) const {
    if (!isLastAxisMean(mean))
      return decline(rewriter, variance, "the mean is not over the last axis alone");
    // Div(d, Sqrt), or d times its reciprocal (Cohere's (x - mean) * rsqrt(var + eps)):
    // Mul(d, Reciprocal(Sqrt)) or Mul(d, Div(1, Sqrt)), or Mul(d, Pow(v, -0.5)).
    Value numerator, normalised;
    Operation *user = singleUser(sqrt);
    auto div = inverseRoot ? onnx::DivOp() : dyn_cast_or_null<onnx::DivOp>(user);
    if (inverseRoot) {
      if (user && isa<onnx::MulOp>(user) &&
          throughCast(otherOperand(user, sqrt)) == sub.getResult()) {
        numerator = otherOperand(user, sqrt);
        normalised = user->getResult(0);
        group.insert(user);
      }
    } else if (div && throughCast(div.getA()) == sub.getResult()) {
      numerator = div.getA();
      normalised = div.getC();
      group.insert(div);
    } else {
      Value inverse;
      if (auto reciprocal = dyn_cast_or_null<onnx::ReciprocalOp>(user))
        inverse = reciprocal.getY();
      else if (div && near(scalarConstant(div.getA()), 1.0))
        inverse = div.getC();
      Operation *mul = inverse ? singleUser(inverse) : nullptr;
      if (mul && isa<onnx::MulOp>(mul) &&
          throughCast(otherOperand(mul, inverse)) == sub.getResult()) {
        numerator = otherOperand(mul, inverse);
        normalised = mul->getResult(0);
        group.insert(user);
        group.insert(mul);
      }
    }
    if (!normalised)
      return decline(rewriter, variance, "the deviation is not divided by the square root");
    group.insert(sub);
    group.insert(mean);
    if (deviation != sub.getResult())
      group.insert(deviation.getDefiningOp());
    if (numerator != sub.getResult() && numerator != deviation)
      group.insert(numerator.getDefiningOp());
    Value x = sub.getA();
    RankedTensorType inputType = rankedFloat(x);
    if (!inputType || inputType.getRank() < 1)
      return decline(rewriter, variance, "the input has no known rank of at least 1");
    int64_t hidden = inputType.getDimSize(inputType.getRank() - 1);
    Affine affine = matchAffine(normalised, hidden, /*withBias=*/true, group);
    if (!affine.output)
      return decline(rewriter, variance,
                     "the normalised value is not scaled by a weight, and its width is not known");
    if (affine.add)
      group.insert(affine.add);
    for (Operation *op : group)
      if (op != affine.output.getDefiningOp())
        for (Value result : op->getResults())
          if (!usedOnlyBy(result, group))
            return decline(rewriter, variance,
                           "an intermediate value is used outside the layer norm");
    Value input = normInput(x, affine.output);
    RankedTensorType type = rankedFloat(input);
    if (getElementTypeOrSelf(affine.output.getType()) != type.getElementType())
      return decline(rewriter, variance, "the output type differs from the input type");
    Operation *anchor = affine.output.getDefiningOp();
    rewriter.setInsertionPoint(anchor);
    Value scale = affine.scale ? tfmWeight(rewriter, affine.scale, false)
                               : onesScale(rewriter, anchor->getLoc(), hidden,
                                           type.getElementType());
    auto norm = tfm::LayerNormOp::create(
        rewriter, anchor->getLoc(), type, input, scale,
        affine.bias ? tfmWeight(rewriter, affine.bias, false) : Value(),
        rewriter.getF32FloatAttr(static_cast<float>(eps)));
    recognised(variance);
    rewriter.replaceAllUsesWith(affine.output, norm.getOutput());
    return success();
  }

  LogicalResult rewriteRmsNorm(PatternRewriter &rewriter, onnx::ReduceMeanOp variance,
                               llvm::SmallPtrSetImpl<Operation *> &group, Value deviation,
                               Value sqrt, bool inverseRoot, double eps) const {
    Value x = deviation;
    Operation *user = singleUser(sqrt);
    Value normalised;
    if (inverseRoot) {
      // x * Pow(v, -0.5).
      if (user && isa<onnx::MulOp>(user) && otherOperand(user, sqrt) == x) {
        group.insert(user);
        normalised = user->getResult(0);
      }
    } else if (auto div = dyn_cast_or_null<onnx::DivOp>(user)) {
      group.insert(div);
      if (div.getA() == x) {
        normalised = div.getC(); // x / sqrt(...)
      } else if (near(scalarConstant(div.getA()), 1.0)) {
        Operation *mul = singleUser(div.getC());
        if (mul && isa<onnx::MulOp>(mul) && otherOperand(mul, div.getC()) == x) {
          group.insert(mul);
          normalised = mul->getResult(0);
        }
      }
    } else if (auto reciprocal = dyn_cast_or_null<onnx::ReciprocalOp>(user)) {
      group.insert(reciprocal);
      Operation *mul = singleUser(reciprocal.getY());
      if (mul && isa<onnx::MulOp>(mul) && otherOperand(mul, reciprocal.getY()) == x) {
        group.insert(mul);
        normalised = mul->getResult(0);
      }
    }
    if (!normalised)
      return decline(rewriter, variance,
                     "the input is not multiplied by the reciprocal square root");
    RankedTensorType inputType = rankedFloat(x);
    if (!inputType || inputType.getRank() < 1)
      return decline(rewriter, variance, "the input has no known rank of at least 1");
    int64_t hidden = inputType.getDimSize(inputType.getRank() - 1);
    Affine affine = matchAffine(normalised, hidden, /*withBias=*/false, group);
    if (!affine.output)
      return decline(rewriter, variance,
                     "the normalised value is not scaled by a weight, and its width is not known");
    for (Operation *op : group)
      if (op != affine.output.getDefiningOp())
        for (Value result : op->getResults())
          if (!usedOnlyBy(result, group))
            return decline(rewriter, variance, "an intermediate value is used outside the RMS norm");
    Value input = normInput(x, affine.output);
    RankedTensorType type = rankedFloat(input);
    if (getElementTypeOrSelf(affine.output.getType()) != type.getElementType())
      return decline(rewriter, variance, "the output type differs from the input type");
    Operation *anchor = affine.output.getDefiningOp();
    rewriter.setInsertionPoint(anchor);
    Value scale = affine.scale ? tfmWeight(rewriter, affine.scale, false)
                               : onesScale(rewriter, anchor->getLoc(), hidden,
                                           type.getElementType());
    auto norm = tfm::RmsNormOp::create(rewriter, anchor->getLoc(), type, input, scale,
                                       rewriter.getF32FloatAttr(static_cast<float>(eps)));
    recognised(variance);
    rewriter.replaceAllUsesWith(affine.output, norm.getOutput());
    return success();
  }
};


// A norm without a scale, then a Mul by a weight over its last axis, is that norm with the
// weight as its scale. The decomposed pattern takes the Mul into the norm only when it is
// the normalised value's one reader; Gemma-4's attention_k_eq_v layers normalise the key
// projection once for both roles (the exporter merged k_norm's and v_norm's identical
// normalisations), so the key's Mul by k_norm's weight is left after a norm of ones that
// the value reads too. The value keeps that norm; the key gets a scaled one of its own.
struct ScaledUnitNormPattern : RecognitionPattern<onnx::MulOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::MulOp mul, PatternRewriter &rewriter) const override {
    for (int side : {0, 1}) {
      Value normalised = mul->getOperand(side);
      Operation *norm = normalised.getDefiningOp();
      auto rms = dyn_cast_or_null<tfm::RmsNormOp>(norm);
      auto layer = dyn_cast_or_null<tfm::LayerNormOp>(norm);
      if (!(rms && !rms.getResidual() && !rms.getPostResidual()) &&
          !(layer && !layer.getBias() && !layer.getResidual()))
        continue;
      Value scale = rms ? rms.getScale() : layer.getScale();
      if (!isUnitConstant(scale))
        continue;
      auto type = dyn_cast<RankedTensorType>(normalised.getType());
      if (!type || type.getRank() < 1 || type != mul.getC().getType())
        continue;
      onnx::WeightOp weight =
          vectorWeight(mul->getOperand(1 - side), type.getDimSize(type.getRank() - 1));
      if (!weight)
        continue;
      rewriter.setInsertionPoint(mul);
      Value learned = tfmWeight(rewriter, weight, false);
      Value scaled =
          rms ? tfm::RmsNormOp::create(rewriter, mul.getLoc(), type, rms.getInput(), learned,
                                       rms.getEpsilonAttr())
                    .getOutput()
              : tfm::LayerNormOp::create(rewriter, mul.getLoc(), type, layer.getInput(),
                                         learned, Value(), layer.getEpsilonAttr())
                    .getOutput();
      rewriter.replaceOp(mul, scaled);
      return success();
    }
    return failure();
  }

  static bool isUnitConstant(Value scale) {
    auto constant = defining<onnx::ConstantOp>(scale);
    auto dense = constant ? dyn_cast<DenseFPElementsAttr>(constant.getValue())
                          : DenseFPElementsAttr();
    return dense && llvm::all_of(dense.getValues<APFloat>(),
                                 [](const APFloat &v) { return v.isExactlyValue(1.0); });
  }
};


void populateNormPatterns(RewritePatternSet &patterns, DeclineLog &log, double missingEpsilon,
                          int &withoutEpsilon) {
  patterns.add<LayerNormOpPattern>(patterns.getContext(), log);
  patterns.add<DecomposedNormPattern>(patterns.getContext(), log, missingEpsilon,
                                      withoutEpsilon);
  patterns.add<ScaledUnitNormPattern>(patterns.getContext(), log);
}

} // namespace dsc::layers
