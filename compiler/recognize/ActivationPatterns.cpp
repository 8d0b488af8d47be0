// dsc-recognize-layers: activations and gated activations.
#include "compiler/recognize/LayerMatching.h"

#include "compiler/recognize/RecognitionReport.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
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
// Activations: the elementwise subgraph around an Erf, Tanh or Sigmoid, checked
// numerically against each activation (which covers every order the exporters emit).
//===----------------------------------------------------------------------===//


double referenceActivation(tfm::ActivationKind kind, double x) {
  switch (kind) {
  case tfm::ActivationKind::gelu_erf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  case tfm::ActivationKind::gelu_tanh:
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  case tfm::ActivationKind::gelu_quick: return x / (1 + std::exp(-1.702 * x));
  case tfm::ActivationKind::silu: return x / (1 + std::exp(-x));
  case tfm::ActivationKind::relu: return x > 0 ? x : 0;
  case tfm::ActivationKind::relu2: return x > 0 ? x * x : 0;
  }
  return 0;
}

struct ActivationRegion {
  Value input, output;
  llvm::SetVector<Operation *> ops;
};

// Evaluates the region at `points` (values of the input); nullopt when an op is not
// interpretable.
std::optional<std::vector<double>> evaluateRegion(const ActivationRegion &region,
                                                  const std::vector<double> &points) {
  llvm::DenseMap<Value, std::vector<double>> values;
  values[region.input] = points;
  auto operand = [&](Value v) -> std::optional<std::vector<double>> {
    if (auto it = values.find(v); it != values.end())
      return it->second;
    if (std::optional<double> c = scalarConstant(v))
      return std::vector<double>(points.size(), *c);
    return std::nullopt;
  };
  SmallVector<Operation *> ordered(region.ops.begin(), region.ops.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  for (Operation *op : ordered) {
    std::vector<std::vector<double>> in;
    for (Value v : op->getOperands()) {
      auto value = operand(v);
      if (!value)
        return std::nullopt;
      in.push_back(std::move(*value));
    }
    std::vector<double> out(points.size());
    for (size_t i = 0; i < points.size(); ++i) {
      double a = in[0][i], b = in.size() > 1 ? in[1][i] : 0;
      if (isa<onnx::AddOp>(op)) out[i] = a + b;
      else if (isa<onnx::SubOp>(op)) out[i] = a - b;
      else if (isa<onnx::MulOp>(op)) out[i] = a * b;
      else if (isa<onnx::DivOp>(op)) out[i] = a / b;
      else if (isa<onnx::PowOp>(op)) out[i] = std::pow(a, b);
      else if (isa<onnx::NegOp>(op)) out[i] = -a;
      else if (isa<onnx::SqrtOp>(op)) out[i] = std::sqrt(a);
      else if (isa<onnx::ErfOp>(op)) out[i] = std::erf(a);
      else if (isa<onnx::TanhOp>(op)) out[i] = std::tanh(a);
      else if (isa<onnx::SigmoidOp>(op)) out[i] = 1 / (1 + std::exp(-a));
      else if (isa<onnx::CastOp>(op)) out[i] = a;
      else return std::nullopt;
    }
    values[op->getResult(0)] = std::move(out);
  }
  return operand(region.output);
}

template <typename AnchorOp> struct ActivationPattern : RecognitionPattern<AnchorOp> {
  using RecognitionPattern<AnchorOp>::RecognitionPattern;
  using RecognitionPattern<AnchorOp>::decline;
  using RecognitionPattern<AnchorOp>::recognised;

  LogicalResult matchAndRewrite(AnchorOp anchor, PatternRewriter &rewriter) const override {
    ActivationRegion region;
    region.ops.insert(anchor);
    // The logits' cap (Gemma-2's final_logit_softcapping) is part of the LM head.
    if (auto divide = anchor->getOperand(0).template getDefiningOp<onnx::DivOp>())
      if (isa<onnx::TanhOp>(anchor.getOperation()) &&
          divide.getA().template getDefiningOp<tfm::LmHeadOp>())
        return decline(rewriter, anchor, kLogitCap);
    // Backwards: elementwise ops on one tensor and scalar constants, down to the input.
    RankedTensorType type = rankedFloat(anchor->getResult(0));
    if (!type)
      return decline(rewriter, anchor, "the activation's type is not known");
    SmallVector<Value> worklist = {anchor->getOperand(0)};
    llvm::SmallSetVector<Value, 2> leaves;
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      if (scalarConstant(v))
        continue;
      Operation *def = v.getDefiningOp();
      bool inner = def && isElementwise(def) && def->getBlock() == anchor->getBlock() &&
                   v.getType() == type &&
                   llvm::all_of(def->getOperands(), [&](Value o) {
                     return scalarConstant(o) || o.getType() == type;
                   });
      if (!inner) {
        leaves.insert(v);
        continue;
      }
      if (region.ops.insert(def))
        llvm::append_range(worklist, def->getOperands());
    }
    if (leaves.size() != 1)
      return decline(rewriter, anchor, "the elementwise subgraph has more than one input");
    region.input = leaves.front();
    // Forwards: every elementwise user of the input or the region whose operands are all
    // in it (0.5 * x, the final x * ...).
    bool grown = true;
    auto inRegion = [&](Value v) {
      return v == region.input || scalarConstant(v) ||
             (v.getDefiningOp() && region.ops.contains(v.getDefiningOp()));
    };
    while (grown) {
      grown = false;
      SmallVector<Value> frontier = {region.input};
      for (Operation *op : region.ops)
        frontier.push_back(op->getResult(0));
      for (Value v : frontier)
        for (Operation *user : v.getUsers())
          if (!region.ops.contains(user) && isElementwise(user) &&
              user->getBlock() == anchor->getBlock() && user->getResult(0).getType() == type &&
              llvm::all_of(user->getOperands(), inRegion))
            grown |= region.ops.insert(user);
    }
    SmallVector<Value> outputs;
    for (Operation *op : region.ops)
      if (!usedOnlyBy(op->getResult(0), llvm::SmallPtrSet<Operation *, 16>(region.ops.begin(),
                                                                          region.ops.end())))
        outputs.push_back(op->getResult(0));
    if (outputs.size() != 1)
      return decline(rewriter, anchor, "an intermediate value of the activation is used elsewhere");
    region.output = outputs.front();

    std::vector<double> points;
    for (double x = -10; x <= 10; x += 0.125)
      points.push_back(x);
    std::optional<std::vector<double>> values = evaluateRegion(region, points);
    if (!values)
      return decline(rewriter, anchor, "the subgraph cannot be evaluated");
    std::optional<tfm::ActivationKind> kind;
    // An export of a half model (dsc-widen-half-precision's dsc.half_export) wrote the
    // activation's constants (0.044715, sqrt(2/pi), 1/sqrt(2), 1.702) rounded to its type:
    // within that rounding, the activation its anchor computes (the forms' own differences
    // are smaller than bf16's rounding, so the anchor decides: Erf, Tanh, or Sigmoid's two).
    StringAttr half =
        anchor->template getParentOfType<ModuleOp>()->template getAttrOfType<StringAttr>(
            "dsc.half_export");
    const double tolerance = !half                     ? 0.0
                             : half.getValue() == "bf16" ? std::ldexp(1.0, -6)
                                                         : std::ldexp(1.0, -9);
    SmallVector<tfm::ActivationKind> candidates = {
        tfm::ActivationKind::gelu_erf, tfm::ActivationKind::gelu_tanh,
        tfm::ActivationKind::gelu_quick, tfm::ActivationKind::silu};
    if (half)
      candidates = isa<onnx::ErfOp>(anchor.getOperation())    ? SmallVector<tfm::ActivationKind>{tfm::ActivationKind::gelu_erf}
                   : isa<onnx::TanhOp>(anchor.getOperation()) ? SmallVector<tfm::ActivationKind>{tfm::ActivationKind::gelu_tanh}
                                                              : SmallVector<tfm::ActivationKind>{
                                                                    tfm::ActivationKind::gelu_quick,
                                                                    tfm::ActivationKind::silu};
    for (tfm::ActivationKind candidate : candidates) {
      bool same = true;
      for (size_t i = 0; i < points.size() && same; ++i) {
        double expected = referenceActivation(candidate, points[i]);
        same = std::fabs((*values)[i] - expected) <=
               1e-6 + 1e-5 * std::fabs(expected) + tolerance * (1 + std::fabs(expected));
      }
      if (same) {
        kind = candidate;
        break;
      }
    }
    if (!kind)
      return decline(rewriter, anchor, "the subgraph computes no known activation");
    Operation *last = region.output.getDefiningOp();
    rewriter.setInsertionPoint(last);
    auto activation = tfm::ActivationOp::create(rewriter, anchor->getLoc(), type, *kind,
                                                region.input);
    recognised(anchor);
    rewriter.replaceAllUsesWith(region.output, activation.getOutput());
    return success();
  }
};

// The activation ops that need no subgraph: Relu, and Gelu (opset 20 or com.microsoft).
// A Relu squared by its only user, Pow(r, 2) (dynamo) or Mul(r, r) (TorchScript), is
// relu2 (Nemotron's MLP).
struct ReluPattern : RecognitionPattern<onnx::ReluOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::ReluOp relu, PatternRewriter &rewriter) const override {
    RankedTensorType type = rankedFloat(relu.getX());
    if (!type)
      return decline(rewriter, relu, "the input is not a float tensor of known rank");
    Value r = relu.getY();
    Operation *square = nullptr;
    if (!r.use_empty() && llvm::all_equal(r.getUsers())) {
      Operation *user = *r.getUsers().begin();
      if (auto pow = dyn_cast<onnx::PowOp>(user);
          pow && pow.getX() == r && near(scalarConstant(pow.getY()), 2.0))
        square = pow;
      else if (auto mul = dyn_cast<onnx::MulOp>(user); mul && mul.getA() == r && mul.getB() == r)
        square = mul;
    }
    recognised(relu);
    if (square && square->getResult(0).getType() == r.getType()) {
      rewriter.replaceOpWithNewOp<tfm::ActivationOp>(square, type, tfm::ActivationKind::relu2,
                                                     relu.getX());
      rewriter.eraseOp(relu);
      return success();
    }
    rewriter.replaceOpWithNewOp<tfm::ActivationOp>(relu, type, tfm::ActivationKind::relu,
                                                   relu.getX());
    return success();
  }
};

struct GeluPattern : RecognitionPattern<onnx::GeluOp> {
  using RecognitionPattern::RecognitionPattern;
  LogicalResult matchAndRewrite(onnx::GeluOp gelu, PatternRewriter &rewriter) const override {
    RankedTensorType type = rankedFloat(gelu.getX());
    if (!type)
      return decline(rewriter, gelu, "the input has no known rank");
    tfm::ActivationKind kind = gelu.getApproximate() == "tanh" ? tfm::ActivationKind::gelu_tanh
                                                               : tfm::ActivationKind::gelu_erf;
    recognised(gelu);
    rewriter.replaceOpWithNewOp<tfm::ActivationOp>(gelu, type, kind, gelu.getX());
    return success();
  }
};

// One part of a fused projection's output (Phi-3's gate_up_proj, chunked into gate and
// up): a result of an onnx.Split or an onnx.Slice of a tfm.linear along the last axis,
// with static bounds, used once.
struct FusedPart {
  tfm::LinearOp linear;
  Operation *op = nullptr;
  int64_t offset = 0, size = 0;
};

std::optional<int64_t> singleConstant(Value value) {
  std::optional<SmallVector<int64_t>> values = value ? staticIntegers(value) : std::nullopt;
  if (!values || values->size() != 1)
    return std::nullopt;
  return values->front();
}

// One user once the ops that an earlier rewrite left dead are gone (the greedy driver
// erases them later).
bool hasOneLiveUse(Value value) {
  int64_t live = 0;
  for (Operation *user : value.getUsers())
    live += !isOpTriviallyDead(user);
  return live == 1;
}

std::optional<FusedPart> fusedPart(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  Operation *op = value.getDefiningOp();
  if (!op || !hasOneLiveUse(value) || !type || type.getRank() < 1 ||
      type.isDynamicDim(type.getRank() - 1))
    return std::nullopt;
  const int64_t rank = type.getRank();
  auto lastAxis = [&](int64_t axis) { return axis == rank - 1 || axis == -1; };
  FusedPart part;
  part.op = op;
  part.size = type.getShape().back();
  if (auto split = dyn_cast<onnx::SplitOp>(op)) {
    if (!lastAxis(split.getAxis()))
      return std::nullopt;
    for (Value before : split.getOutputs()) {
      if (before == value)
        break;
      auto beforeType = dyn_cast<RankedTensorType>(before.getType());
      if (!beforeType || beforeType.isDynamicDim(rank - 1))
        return std::nullopt;
      part.offset += beforeType.getShape().back();
    }
    part.linear = split.getInput().getDefiningOp<tfm::LinearOp>();
  } else if (auto slice = dyn_cast<onnx::SliceOp>(op)) {
    std::optional<int64_t> start = singleConstant(slice.getStarts());
    auto given = [](Value operand) { return operand && !isa<NoneType>(operand.getType()); };
    std::optional<int64_t> axis = given(slice.getAxes()) ? singleConstant(slice.getAxes()) : 0;
    std::optional<int64_t> step = given(slice.getSteps()) ? singleConstant(slice.getSteps()) : 1;
    if (!start || *start < 0 || !axis || !lastAxis(*axis) || step != 1)
      return std::nullopt;
    part.offset = *start;
    part.linear = slice.getData().getDefiningOp<tfm::LinearOp>();
  }
  if (!part.linear || part.linear.getScales())
    return std::nullopt;
  auto features = cast<RankedTensorType>(part.linear.getWeight().getType()).getDimSize(0);
  if (part.offset + part.size > features)
    return std::nullopt;
  return part;
}

// The rows [offset, +size) of a fused projection, as a projection of their own.
Value projectionPart(PatternRewriter &rewriter, const FusedPart &part) {
  tfm::LinearOp linear = part.linear;
  auto select = [&](Value weight) -> Value {
    auto op = weight.getDefiningOp<tfm::WeightOp>();
    FailureOr<Value> rows =
        op ? op.withTransforms(rewriter, {tfm::SliceAttr::get(rewriter.getContext(), 0,
                                                              part.offset, part.size)})
           : FailureOr<Value>(failure());
    return succeeded(rows) ? *rows : Value();
  };
  Value weight = select(linear.getWeight());
  Value bias = linear.getBias() ? select(linear.getBias()) : Value();
  if (!weight || (linear.getBias() && !bias))
    return Value();
  auto type = cast<RankedTensorType>(linear.getOutput().getType());
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = part.size;
  return tfm::LinearOp::create(rewriter, linear.getLoc(),
                               RankedTensorType::get(shape, type.getElementType()),
                               linear.getInput(), weight, bias, Value(),
                               linear.getParallelAttr())
      .getOutput();
}

// act(gate) * up, the gated MLP (SwiGLU and friends). Where gate and up are two parts of
// one fused projection (Phi-3's gate_up_proj), each becomes a projection of its own rows,
// so the MLP is the same tfm.gated_act whatever the checkpoint fused.
struct GatedActPattern : OpRewritePattern<onnx::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(onnx::MulOp mul, PatternRewriter &rewriter) const override {
    for (auto [actValue, upOperand] :
         {std::pair{mul.getA(), mul.getB()}, std::pair{mul.getB(), mul.getA()}}) {
      auto activation = defining<tfm::ActivationOp>(actValue);
      Value up = upOperand;
      if (!activation || !actValue.hasOneUse() || up.getType() != actValue.getType() ||
          mul.getC().getType() != actValue.getType())
        continue;
      Value gate = activation.getInput();
      if (!defining<tfm::LinearOp>(up)) {
        std::optional<FusedPart> gatePart = fusedPart(gate), upPart = fusedPart(up);
        if (!gatePart || !upPart || gatePart->linear != upPart->linear ||
            gatePart->op->getNumResults() > 2 || upPart->op->getNumResults() > 2)
          continue;
        // The fused projection's outputs go to these two parts only (and to the shape
        // reads that sized them).
        bool only = true;
        for (Operation *user : gatePart->linear.getOutput().getUsers())
          only &= user == gatePart->op || user == upPart->op || isa<onnx::ShapeOp>(user) ||
                  isOpTriviallyDead(user);
        for (Operation *op : {gatePart->op, upPart->op})
          for (Value result : op->getResults())
            only &= result == gate || result == up ||
                    llvm::all_of(result.getUsers(), isOpTriviallyDead);
        if (!only)
          continue;
        rewriter.setInsertionPoint(mul);
        gate = projectionPart(rewriter, *gatePart);
        up = projectionPart(rewriter, *upPart);
        if (!gate || !up)
          return rewriter.notifyMatchFailure(mul, "a fused projection's weight is not a tfm.weight");
      }
      rewriter.setInsertionPoint(mul);
      auto gated = tfm::GatedActOp::create(rewriter, mul.getLoc(), actValue.getType(),
                                           activation.getKind(), gate, up);
      rewriter.replaceOp(mul, gated.getOutput());
      rewriter.eraseOp(activation);
      return success();
    }
    return rewriter.notifyMatchFailure(mul, "not act(linear) * linear");
  }
};


void populateActivationPatterns(RewritePatternSet &patterns, DeclineLog &log) {
  patterns.add<ReluPattern, GeluPattern, ActivationPattern<onnx::ErfOp>,
               ActivationPattern<onnx::TanhOp>, ActivationPattern<onnx::SigmoidOp>>(
      patterns.getContext(), log);
  patterns.add<GatedActPattern>(patterns.getContext());
}

} // namespace dsc::layers
