// Verifiers of the tfm ops (tfm.attention's: TfmAttentionVerify.cpp). They check what the types say statically (ranks, hidden sizes,
// head counts, element types, attribute ranges); dynamic dimensions are left alone.
#include "dialects/tfm/IR/TfmDialect.h"

#include "dialects/common/WeightConcatVerification.h"
#include "dialects/tfm/IR/VerifyHelpers.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

#include <cmath>
#include <optional>

using namespace mlir;

namespace dsc::tfm {

//===----------------------------------------------------------------------===//
// tfm.weight
//===----------------------------------------------------------------------===//

void WeightOp::build(OpBuilder &builder, OperationState &state, StringRef name,
                     RankedTensorType source, ArrayRef<Attribute> transforms) {
  FailureOr<RankedTensorType> type = inferWeightType(source, transforms, nullptr);
  build(builder, state, succeeded(type) ? *type : source, builder.getStringAttr(name),
        TypeAttr::get(source),
        transforms.empty() ? ArrayAttr() : builder.getArrayAttr(transforms));
}

FailureOr<Value> WeightOp::withTransforms(OpBuilder &builder, ArrayRef<Attribute> extra) {
  SmallVector<Attribute> transforms;
  if (auto list = getTransforms())
    llvm::append_range(transforms, list->getValue());
  llvm::append_range(transforms, extra);
  auto source = cast<RankedTensorType>(getSourceType());
  if (failed(inferWeightType(source, transforms, nullptr)))
    return failure();
  ArrayAttr list = builder.getArrayAttr(transforms);
  for (Operation *next = (*this)->getNextNode(); next; next = next->getNextNode()) {
    auto existing = dyn_cast<WeightOp>(next);
    if (!existing)
      break;
    if (existing.getName() == getName() && existing.getSourceType() == getSourceType() &&
        existing.getTransformsAttr() == list)
      return existing.getOutput();
  }
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointAfter(*this);
  return WeightOp::create(builder, getLoc(), getName(), source, transforms).getOutput();
}

LogicalResult WeightOp::verify() {
  if (getName().empty())
    return emitOpError("needs the name of an initializer");
  auto source = cast<RankedTensorType>(getSourceType());
  ArrayRef<Attribute> transforms;
  if (auto attr = getTransformsAttr())
    transforms = attr.getValue();
  FailureOr<RankedTensorType> inferred =
      inferWeightType(source, transforms, [&] { return emitOpError(); });
  if (failed(inferred))
    return failure();
  if (*inferred != getOutput().getType())
    return emitOpError() << "transforms make " << *inferred << " of the source, but the result is "
                         << getOutput().getType();
  return success();
}

LogicalResult GatedActPackedOp::verify() {
  auto in = getInput().getType(), out = getOutput().getType();
  if (in.getRank() < 1 || in.getRank() != out.getRank())
    return emitOpError() << "input " << in << " and result " << out
                         << " must have one rank, 1 or more";
  if (in.getElementType() != out.getElementType())
    return emitOpError("result must have the element type of the input");
  int64_t last = in.getRank() - 1;
  for (int64_t d = 0; d < last; ++d)
    if (!compatible(in.getDimSize(d), out.getDimSize(d)))
      return emitOpError() << "result dimension " << d << " is " << out.getDimSize(d)
                           << ", the input's " << in.getDimSize(d);
  int64_t joined = in.getDimSize(last), half = out.getDimSize(last);
  if (!isDyn(joined) && (joined % 2 != 0 || (!isDyn(half) && half * 2 != joined)))
    return emitOpError() << "the input's last dimension " << joined
                         << " must be twice the result's " << half;
  return success();
}

LogicalResult ConcatWeightsOp::verify() {
  return verifyWeightConcat(
      *this, getParts(), getOutput(),
      [](Value part) { return static_cast<bool>(part.getDefiningOp<WeightOp>()); },
      "tfm.weight", getRankParts() ? *getRankParts() : ArrayRef<int64_t>());
}

//===----------------------------------------------------------------------===//
// Embedding, norms, linear
//===----------------------------------------------------------------------===//

// A vocabulary shard [offset, offset + rows) of a vocabulary of `size` tokens.
static LogicalResult verifyVocabShard(Operation *op, int64_t offset,
                                      std::optional<uint64_t> size, int64_t rows) {
  if (!size) {
    if (offset != 0)
      return op->emitOpError("vocab_offset needs vocab_size (the full vocabulary)");
    return success();
  }
  if (!isDyn(rows) && offset + rows > static_cast<int64_t>(*size))
    return op->emitOpError() << "the shard [" << offset << ", " << offset + rows
                             << ") exceeds the vocabulary of " << *size << " tokens";
  return success();
}

LogicalResult EmbeddingOp::verify() {
  auto ids = getIds().getType(), table = getTable().getType(), out = getOutput().getType();
  if (ids.getRank() != 2)
    return emitOpError() << "ids must be 2-D [batch, seq], not rank " << ids.getRank();
  if (table.getRank() != 2)
    return emitOpError() << "table must be 2-D [vocab, hidden], not rank " << table.getRank();
  if (out.getRank() != 3)
    return emitOpError() << "result must be 3-D [batch, seq, hidden], not rank "
                         << out.getRank();
  if (out.getElementType() != table.getElementType())
    return emitOpError("result must have the element type of the table");
  for (int64_t i = 0; i < 2; ++i)
    if (failed(expectDim(*this, out, i, ids.getDimSize(i), "result dimension " +
                                                             std::to_string(i))))
      return failure();
  if (failed(expectDim(*this, out, 2, table.getDimSize(1), "result hidden size")))
    return failure();
  return verifyVocabShard(*this, getVocabOffset(), getVocabSize(), table.getDimSize(0));
}

// Checks a 1-D parameter [n] of the normalised (last) dimension of `input`.
static LogicalResult verifyNormParam(Operation *op, RankedTensorType input, Value param,
                                     StringRef what) {
  auto type = ranked(param);
  if (!type)
    return success();
  if (type.getElementType() != input.getElementType())
    return op->emitOpError() << what << " must have the element type of the input";
  if (type.getRank() != 1)
    return op->emitOpError() << what << " must be 1-D, not rank " << type.getRank();
  int64_t hidden = input.getDimSize(input.getRank() - 1);
  if (!compatible(type.getDimSize(0), hidden))
    return op->emitOpError() << what << " has " << type.getDimSize(0)
                             << " elements but the normalised dimension is " << hidden;
  return success();
}

static LogicalResult verifyNorm(Operation *op, RankedTensorType input, Value scale, Value bias,
                                APFloat epsilon) {
  if (input.getRank() < 1)
    return op->emitOpError("input must have rank 1 or more");
  if (epsilon.isNegative() || !epsilon.isFinite())
    return op->emitOpError("epsilon must be finite and not negative");
  if (failed(verifyNormParam(op, input, scale, "scale")))
    return failure();
  return verifyNormParam(op, input, bias, "bias");
}

// The fused residual form: `residual` is added to the input before normalising, and the
// sum is the second result; neither comes without the other.
static LogicalResult verifyNormResidual(Operation *op, Value input, Value residual, Value sum) {
  if (!residual && !sum)
    return success();
  if (!residual || !sum)
    return op->emitOpError("a residual operand and the sum result come together");
  if (residual.getType() != input.getType())
    return op->emitOpError() << "residual " << residual.getType()
                             << " must have the input's type " << input.getType();
  if (sum.getType() != input.getType())
    return op->emitOpError() << "sum " << sum.getType() << " must have the input's type "
                             << input.getType();
  return success();
}

// Numbered results, as before the fused form gave the norms a second one.
void LayerNormOp::getAsmResultNames(OpAsmSetValueNameFn) {}
void RmsNormOp::getAsmResultNames(OpAsmSetValueNameFn) {}

LogicalResult LayerNormOp::verify() {
  if (failed(verifyNormResidual(*this, getInput(), getResidual(), getSum())))
    return failure();
  return verifyNorm(*this, getInput().getType(), getScale(), getBias(), getEpsilon());
}

LogicalResult RmsNormOp::verify() {
  if (failed(verifyNormResidual(*this, getInput(), getResidual(), getSum())))
    return failure();
  if (Value post = getPostResidual()) {
    if (getResidual())
      return emitOpError("takes a residual or a post_residual, not both");
    if (post.getType() != getInput().getType())
      return emitOpError() << "post_residual " << post.getType()
                           << " must have the input's type " << getInput().getType();
  }
  return verifyNorm(*this, getInput().getType(), getScale(), Value(), getEpsilon());
}

// An int8 weight (i8) or an int4 one (ui4 codes, docs/int4.md).
static bool isQuantizedWeight(Type element) {
  return element.isInteger(8) || element.isUnsignedInteger(4);
}

// The scales of an int8 or int4 weight [out, in] (tfm.linear, tfm.lm_head): [out, groups]
// in the activations' element type, groups dividing in; a quantized weight needs them, a
// float one takes none.
static LogicalResult verifyInt8Scales(Operation *op, bool quantized, Value scalesValue,
                                      Type element, int64_t outFeatures, int64_t in) {
  auto scales = ranked(scalesValue);
  if (!scales)
    return quantized ? op->emitOpError("an int8 or int4 weight needs scales") : success();
  if (!quantized)
    return op->emitOpError("scales go with an int8 or int4 weight only");
  if (scales.getElementType() != element)
    return op->emitOpError("scales must have the element type of the input");
  if (scales.getRank() != 2)
    return op->emitOpError("scales must be 2-D [out, groups]");
  if (failed(expectDim(op, scales, 0, outFeatures, "scales dimension 0")))
    return failure();
  int64_t groups = scales.getDimSize(1);
  if (!isDyn(groups) && !isDyn(in) && (groups <= 0 || in % groups != 0))
    return op->emitOpError() << groups << " scale groups do not divide the " << in
                             << " input features";
  return success();
}

LogicalResult LinearOp::verify() {
  auto x = getInput().getType(), w = getWeight().getType(), out = getOutput().getType();
  if (x.getRank() < 1)
    return emitOpError("input must have rank 1 or more");
  if (w.getRank() != 2)
    return emitOpError() << "weight must be 2-D [out, in], not rank " << w.getRank();
  if (out.getRank() != x.getRank())
    return emitOpError() << "result has rank " << out.getRank() << ", expected " << x.getRank();
  // The type the layer computes in: the input's, unless one side is the plan's half
  // activation dtype beside f32 (dsc-activation-dtype), which is read widened or written
  // rounded.
  Type compute = x.getElementType();
  if (isActivationStorage(compute, out.getElementType()))
    compute = out.getElementType();
  else if (out.getElementType() != compute &&
           !isActivationStorage(out.getElementType(), compute))
    return emitOpError("result must have the element type of the input, or one of them be "
                       "f16/bf16 beside f32 (the plan's activation dtype)");
  int64_t in = w.getDimSize(1), outFeatures = w.getDimSize(0), rank = x.getRank();
  if (!compatible(x.getDimSize(rank - 1), in))
    return emitOpError() << "input has " << x.getDimSize(rank - 1)
                         << " features but the weight [out, in] takes " << in;
  for (int64_t i = 0; i + 1 < rank; ++i)
    if (!compatible(x.getDimSize(i), out.getDimSize(i)))
      return emitOpError() << "result dimension " << i << " is " << out.getDimSize(i)
                           << ", expected " << x.getDimSize(i);
  if (getGated()) {
    if (!getActivation())
      return emitOpError("a gated linear needs the activation of its gate");
    if (getResidual())
      return emitOpError("a gated linear adds no residual");
    if (getParallel() == Parallelism::row)
      return emitOpError("a row-parallel linear cannot be gated: its result is a partial sum "
                         "until the all-reduce");
    if (!ShapedType::isDynamic(outFeatures) && outFeatures % 2 != 0)
      return emitOpError() << "a gated linear's weight has " << outFeatures
                           << " rows, not a [gate; up] pair of equal halves";
  }
  if (failed(expectDim(*this, out, rank - 1,
                       getGated() && !ShapedType::isDynamic(outFeatures) ? outFeatures / 2
                                                                          : outFeatures,
                       "result feature count")))
    return failure();

  bool quantized = isQuantizedWeight(w.getElementType());
  if (!quantized && w.getElementType() != compute)
    return emitOpError() << "weight element type " << w.getElementType()
                         << " differs from the input's " << compute;
  if (failed(verifyInt8Scales(*this, quantized, getScales(), compute, outFeatures,
                              in)))
    return failure();
  if (getInt8Activations() && !w.getElementType().isInteger(8))
    return emitOpError("int8_activations needs an int8 weight");
  if (auto bias = ranked(getBias())) {
    if (getParallel() == Parallelism::row)
      return emitOpError("a row-parallel linear takes no bias: it is added once, after the "
                         "all-reduce");
    if (bias.getElementType() != compute)
      return emitOpError("bias must have the element type of the input");
    if (bias.getRank() != 1)
      return emitOpError("bias must be 1-D [out]");
    if (failed(expectDim(*this, bias, 0, outFeatures, "bias size")))
      return failure();
  }
  if (Value residual = getResidual()) {
    if (getParallel() == Parallelism::row)
      return emitOpError("a row-parallel linear takes no residual: its result is a partial "
                         "sum until the all-reduce");
    if (residual.getType() != out)
      return emitOpError() << "residual " << residual.getType() << " must have the result's type "
                           << out;
  }
  if (getActivation() && getParallel() == Parallelism::row)
    return emitOpError("a row-parallel linear takes no activation: its result is a partial "
                       "sum until the all-reduce");
  // The norm prologue normalises the input's rows as the norm op would.
  std::optional<NormKind> norm = getNorm();
  if (!norm) {
    if (getNormScale() || getNormBias() || getNormEpsilonAttr())
      return emitOpError("norm_scale, norm_bias and norm_epsilon belong to a norm prologue "
                         "(`norm`)");
    return success();
  }
  if (!getNormScale() || !getNormEpsilonAttr())
    return emitOpError("a norm prologue needs its scale and epsilon");
  if (getNormBias() && *norm != NormKind::layer)
    return emitOpError("only a layer norm prologue takes a bias");
  return verifyNorm(*this, x.clone(compute), getNormScale(), getNormBias(),
                    getNormEpsilonAttr().getValue());
}

//===----------------------------------------------------------------------===//
// Collectives, LM head
//===----------------------------------------------------------------------===//

LogicalResult AllGatherOp::verify() {
  auto in = getInput().getType(), out = getOutput().getType();
  int64_t rank = in.getRank(), axis = getAxis(), ranks = getRanks();
  if (out.getRank() != rank)
    return emitOpError() << "result has rank " << out.getRank() << ", expected " << rank;
  if (axis < 0 || axis >= rank)
    return emitOpError() << "axis " << axis << " is out of range for rank " << rank;
  for (int64_t i = 0; i < rank; ++i)
    if (i != axis && !compatible(in.getDimSize(i), out.getDimSize(i)))
      return emitOpError() << "result dimension " << i << " is " << out.getDimSize(i)
                           << ", expected " << in.getDimSize(i);
  int64_t local = in.getDimSize(axis), gathered = out.getDimSize(axis);
  if (auto sizes = getSizes()) {
    if (static_cast<int64_t>(sizes->size()) != ranks)
      return emitOpError() << "sizes has " << sizes->size() << " entries for " << ranks
                           << " ranks";
    int64_t sum = 0;
    for (int64_t size : *sizes) {
      if (size <= 0)
        return emitOpError("sizes must be positive");
      sum += size;
    }
    if (!isDyn(local) && !llvm::is_contained(*sizes, local))
      return emitOpError() << "the operand's extent " << local << " along axis " << axis
                           << " is none of the ranks' sizes";
    if (!compatible(gathered, sum))
      return emitOpError() << "result extent " << gathered << " along axis " << axis
                           << " must be the sum of sizes, " << sum;
    return success();
  }
  if (!isDyn(local) && !compatible(gathered, local * ranks))
    return emitOpError() << "result extent " << gathered << " along axis " << axis
                         << " must be ranks * " << local << " = " << local * ranks;
  return success();
}

LogicalResult LmHeadOp::verify() {
  auto h = getHidden().getType(), w = getWeight().getType(), out = getLogits().getType();
  if (h.getRank() < 1)
    return emitOpError("hidden must have rank 1 or more");
  if (w.getRank() != 2)
    return emitOpError() << "weight must be 2-D [vocab, hidden], not rank " << w.getRank();
  bool quantized = isQuantizedWeight(w.getElementType());
  if ((!quantized && w.getElementType() != h.getElementType()) ||
      out.getElementType() != h.getElementType())
    return emitOpError("hidden, weight and logits must have the same element type");
  if (failed(verifyInt8Scales(*this, quantized, getScales(), h.getElementType(),
                              w.getDimSize(0), w.getDimSize(1))))
    return failure();
  int64_t rank = h.getRank();
  if (out.getRank() != rank)
    return emitOpError() << "logits have rank " << out.getRank() << ", expected " << rank;
  if (!compatible(h.getDimSize(rank - 1), w.getDimSize(1)))
    return emitOpError() << "hidden size " << h.getDimSize(rank - 1)
                         << " differs from the weight's " << w.getDimSize(1);
  for (int64_t i = 0; i + 1 < rank; ++i)
    if (!compatible(h.getDimSize(i), out.getDimSize(i)))
      return emitOpError() << "logits dimension " << i << " is " << out.getDimSize(i)
                           << ", expected " << h.getDimSize(i);
  if (failed(expectDim(*this, out, rank - 1, w.getDimSize(0), "logits vocabulary size")))
    return failure();
  if (auto scale = getLogitScale(); scale && !std::isfinite(scale->convertToFloat()))
    return emitOpError() << "logit_scale must be finite, not " << scale->convertToFloat();
  if (getInt8Activations() && !w.getElementType().isInteger(8))
    return emitOpError("int8_activations needs an int8 weight");
  if (auto cap = getLogitCap();
      cap && !(cap->convertToFloat() > 0 && std::isfinite(cap->convertToFloat())))
    return emitOpError() << "logit_cap must be finite and positive, not "
                         << cap->convertToFloat();
  return verifyVocabShard(*this, getVocabOffset(), getVocabSize(), w.getDimSize(0));
}

LogicalResult MoeOp::verify() {
  auto x = getInput().getType(), logits = getRouterLogits().getType();
  auto gateUp = getGateUp().getType(), down = getDown().getType(), out = getOutput().getType();
  int64_t rank = x.getRank();
  if (rank < 1 || logits.getRank() != rank || out != x)
    return emitOpError("input, router logits and result must have one rank, and the result "
                       "the input's type");
  for (int64_t i = 0; i + 1 < rank; ++i)
    if (!compatible(x.getDimSize(i), logits.getDimSize(i)))
      return emitOpError() << "router logits dimension " << i << " is "
                           << logits.getDimSize(i) << ", the input's " << x.getDimSize(i);
  int64_t experts = logits.getDimSize(rank - 1), hidden = x.getDimSize(rank - 1);
  if (ShapedType::isDynamic(experts) || ShapedType::isDynamic(hidden))
    return emitOpError("the experts and the hidden size must be static");
  if (getTopK() > static_cast<uint64_t>(experts))  // a static size is not negative
    return emitOpError() << "top_k " << getTopK() << " exceeds the " << experts << " experts";
  if (gateUp.getRank() != 2 || down.getRank() != 2 || gateUp.getElementType() != down.getElementType())
    return emitOpError("gate_up and down must be 2-D weights of one element type");
  const bool quantized = isQuantizedWeight(gateUp.getElementType());
  // Under expert parallelism the weights are rank 0's experts.
  int64_t held = experts;
  if (bool(getRankExperts()) != bool(getRankExpertOffsets()))
    return emitOpError("rank_experts and rank_expert_offsets come together");
  if (auto counts = getRankExperts()) {
    auto offsets = *getRankExpertOffsets();
    if (counts->empty() || counts->size() != offsets.size())
      return emitOpError("rank_experts and rank_expert_offsets need one entry per rank");
    for (size_t r = 0; r < counts->size(); ++r)
      if ((*counts)[r] < 1 || offsets[r] < 0 || offsets[r] + (*counts)[r] > experts)
        return emitOpError() << "rank " << r << "'s experts [" << offsets[r] << ", +"
                             << (*counts)[r] << ") are not among the " << experts;
    held = (*counts)[0];
  }
  int64_t inter = down.getDimSize(1);
  if (gateUp.getDimSize(0) != held * 2 * inter || gateUp.getDimSize(1) != hidden)
    return emitOpError() << "gate_up must be [" << held << " * 2 * " << inter << ", "
                         << hidden << "], not [" << gateUp.getDimSize(0) << ", "
                         << gateUp.getDimSize(1) << "]";
  if (down.getDimSize(0) != held * hidden)
    return emitOpError() << "down must be [" << held << " * " << hidden << ", " << inter
                         << "], not [" << down.getDimSize(0) << ", " << inter << "]";
  if (failed(verifyInt8Scales(*this, quantized, getGateUpScales(), x.getElementType(),
                              gateUp.getDimSize(0), gateUp.getDimSize(1))) ||
      failed(verifyInt8Scales(*this, quantized, getDownScales(), x.getElementType(),
                              down.getDimSize(0), down.getDimSize(1))))
    return failure();
  if (bool(getGateUpBias()) != bool(getDownBias()))
    return emitOpError("the experts have both biases or neither");
  if (bool(getSharedGateUp()) != bool(getSharedDown()) ||
      bool(getSharedGateUp()) != bool(getSharedGate()))
    return emitOpError("a shared expert needs its gate_up, down and gate weights");
  if (Value sharedGateUp = getSharedGateUp()) {
    auto gu = cast<RankedTensorType>(sharedGateUp.getType());
    auto dn = cast<RankedTensorType>(getSharedDown().getType());
    auto gate = cast<RankedTensorType>(getSharedGate().getType());
    if (gu.getRank() != 2 || dn.getRank() != 2 || gate.getRank() != 2 ||
        gu.getDimSize(1) != hidden || dn.getDimSize(0) != hidden ||
        gu.getDimSize(0) != 2 * dn.getDimSize(1) || gate.getShape() != ArrayRef<int64_t>{1, hidden})
      return emitOpError() << "the shared expert must be [2 * n, " << hidden << "], [" << hidden
                           << ", n] and a [1, " << hidden << "] gate";
  }
  if (bool(getSwigluAlpha()) != bool(getSwigluLimit()))
    return emitOpError("swiglu_alpha and swiglu_limit come together");
  if (FloatAttr limit = getSwigluLimitAttr()) {
    const float alpha = getSwigluAlphaAttr().getValue().convertToFloat();
    const float bound = limit.getValue().convertToFloat();
    if (getActivation() != ActivationKind::silu)
      return emitOpError("the clamped SwiGLU's activation must be silu");
    if (!std::isfinite(alpha) || !std::isfinite(bound) || !(bound > 0))
      return emitOpError() << "the clamped SwiGLU needs a finite alpha and a positive, finite "
                              "limit, not "
                           << alpha << " and " << bound;
  }
  if (auto rank = getDownBiasRank()) {
    if (!getDownBias())
      return emitOpError("down_bias_rank without a down bias");
    if (*rank < 0)
      return emitOpError() << "down_bias_rank " << *rank << " is not a rank";
  }
  if (Value bias = getGateUpBias()) {
    auto gateUpBias = cast<RankedTensorType>(bias.getType());
    auto downBias = cast<RankedTensorType>(getDownBias().getType());
    if (gateUpBias.getShape() != ArrayRef<int64_t>{held * 2 * inter} ||
        downBias.getShape() != ArrayRef<int64_t>{held * hidden})
      return emitOpError() << "the biases must be [" << held * 2 * inter << "] and ["
                           << held * hidden << "]";
  }
  return success();
}

} // namespace dsc::tfm

#define GET_OP_CLASSES
#include "dialects/tfm/IR/TfmOps.cpp.inc"

