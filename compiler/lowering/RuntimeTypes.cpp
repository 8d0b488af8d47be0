#include "compiler/lowering/RuntimeTypes.h"

#include "compiler/evaluate/Evaluator.h"

#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;

namespace dsc {

dsrt::DType runtimeDType(Type type) {
  return evaluate::toDType(getElementTypeOrSelf(type));
}

dsrt::OwnedTensor tensorFromAttr(DenseElementsAttr value) {
  auto type = cast<RankedTensorType>(value.getType());
  dsrt::OwnedTensor tensor(runtimeDType(type), dsrt::Shape(type.getShape().begin(),
                                                           type.getShape().end()));
  size_t width = dsrt::dtypeSize(tensor.dtype);
  uint8_t *out = tensor.storage.data();
  auto put = [&](const APInt &bits) {
    for (size_t i = 0; i < width; ++i)
      *out++ = static_cast<uint8_t>(bits.getBitWidth() == 1 ? (i == 0 ? bits.getZExtValue() : 0)
                                                            : bits.extractBitsAsZExtValue(8, 8 * i));
  };
  if (isa<FloatType>(value.getElementType()))
    for (APFloat v : value.getValues<APFloat>())
      put(v.bitcastToAPInt());
  else
    for (APInt v : value.getValues<APInt>())
      put(v);
  return tensor;
}

// The type a weight has in the plan: a ui4 [.., in] weight (docs/int4.md) is stored two
// codes to a byte, ui8 [.., in / 2]; every other type as it is.
Type storedWeightType(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || !ranked.getElementType().isUnsignedInteger(4) || ranked.getRank() == 0)
    return type;
  SmallVector<int64_t> shape(ranked.getShape());
  shape.back() /= 2;
  return RankedTensorType::get(
      shape, IntegerType::get(type.getContext(), 8, IntegerType::Unsigned));
}

std::string stepName(Operation *op) {
  if (op->getDialect() && op->getDialect()->getNamespace() == "tfm")
    return op->getName().getStringRef().str();
  return op->getName().stripDialect().str();
}

SmallVector<Value> stepInputs(Operation *op) {
  SmallVector<Value> inputs;
  if (auto linear = dyn_cast<tfm::LinearOp>(op)) {
    inputs.assign({linear.getInput(), linear.getWeight(), linear.getBias(), linear.getScales()});
    // The fused residual is input 4, a norm prologue's scale and bias 5 and 6; an unfused
    // layer keeps its four inputs.
    if (Value residual = linear.getResidual())
      inputs.push_back(residual);
    if (linear.getNorm()) {
      inputs.resize(5);
      inputs.append({linear.getNormScale(), linear.getNormBias()});
    }
    return inputs;
  }
  // An int8 head's scales take tfm.linear's position 3 (there is no bias at 2), so one
  // kernel reads both ops.
  if (auto head = dyn_cast<tfm::LmHeadOp>(op)) {
    inputs.assign({head.getHidden(), head.getWeight()});
    if (Value scales = head.getScales())
      inputs.append({Value(), scales});
    return inputs;
  }
  if (auto norm = dyn_cast<tfm::LayerNormOp>(op)) {
    inputs.assign({norm.getInput(), norm.getScale(), norm.getBias()});
    if (Value residual = norm.getResidual())
      inputs.push_back(residual);
    return inputs;
  }
  // A post_residual (a sandwich norm's) is input 3, after the residual's place.
  if (auto norm = dyn_cast<tfm::RmsNormOp>(op)) {
    inputs.assign({norm.getInput(), norm.getScale(), norm.getResidual()});
    if (Value post = norm.getPostResidual())
      inputs.push_back(post);
    else if (!norm.getResidual())
      inputs.pop_back();
    return inputs;
  }
  // Biases 4 and 5 (absent inputs where there are none), a shared expert 6 to 8, int8 scales
  // 9 and 10.
  if (auto moe = dyn_cast<tfm::MoeOp>(op)) {
    inputs.assign({moe.getInput(), moe.getRouterLogits(), moe.getGateUp(), moe.getDown(),
                   moe.getGateUpBias(), moe.getDownBias()});
    inputs.append({moe.getSharedGateUp(), moe.getSharedDown(), moe.getSharedGate()});
    // int8 experts' scales 9 and 10; the absent inputs at the end dropped.
    inputs.append({moe.getGateUpScales(), moe.getDownScales()});
    while (inputs.size() > 4 && !inputs.back())
      inputs.pop_back();
    return inputs;
  }
  if (auto attention = dyn_cast<tfm::AttentionOp>(op)) {
    inputs.assign({attention.getQuery(), attention.getKey(), attention.getValue(),
                   attention.getMask()});
    // Past key and value come both or neither.
    OperandRange past = attention.getPast();
    inputs.push_back(past.empty() ? Value() : past[0]);
    inputs.push_back(past.empty() ? Value() : past[1]);
    inputs.push_back(attention.getPositions());
    // Input 7 only where there is one, the q/k norms' scales 8 and 9 and the sinks 10
    // only where there are some, so that other plans keep their steps as they were.
    if (Value bias = attention.getBias())
      inputs.push_back(bias);
    if (attention.getQueryNormScale() || attention.getSinks()) {
      inputs.resize(8);
      inputs.append({attention.getQueryNormScale(), attention.getKeyNormScale()});
    }
    if (Value sinks = attention.getSinks())
      inputs.push_back(sinks);
    return inputs;
  }
  llvm::append_range(inputs, op->getOperands());
  return inputs;
}

namespace {

// The plan's activation dtype where a step's result has it and its input does not
// (dsc-activation-dtype); absent otherwise, so that other steps keep their attributes.
void appendOutputDtype(NamedAttrList &attrs, Value input, Value output) {
  Type element = getElementTypeOrSelf(output.getType());
  if (element != getElementTypeOrSelf(input.getType()))
    attrs.append("output_dtype", TypeAttr::get(element));
}

// The attributes of a tfm op as the contract names them.
FailureOr<DictionaryAttr> tfmStepAttributes(Operation *op) {
  Builder b(op->getContext());
  NamedAttrList attrs;
  auto vocab = [&](IntegerAttr offset, std::optional<uint64_t> size) {
    attrs.append("vocab_offset", b.getI64IntegerAttr(offset ? offset.getInt() : 0));
    attrs.append("vocab_size", b.getI64IntegerAttr(size ? static_cast<int64_t>(*size) : 0));
  };
  if (auto embedding = dyn_cast<tfm::EmbeddingOp>(op)) {
    vocab(embedding.getVocabOffsetAttr(), embedding.getVocabSize());
    if (FloatAttr scale = embedding.getScaleAttr())
      attrs.append("scale", b.getF32FloatAttr(scale.getValue().convertToFloat()));
  } else if (auto head = dyn_cast<tfm::LmHeadOp>(op)) {
    vocab(head.getVocabOffsetAttr(), head.getVocabSize());
    // Only where set, as the embedding's scale: other heads keep their attributes.
    if (FloatAttr scale = head.getLogitScaleAttr())
      attrs.append("logit_scale", b.getF32FloatAttr(scale.getValue().convertToFloat()));
    if (FloatAttr cap = head.getLogitCapAttr())
      attrs.append("logit_cap", b.getF32FloatAttr(cap.getValue().convertToFloat()));
    if (head.getInt8Activations())
      attrs.append("int8_activations", b.getI64IntegerAttr(1));
  } else if (auto norm = dyn_cast<tfm::LayerNormOp>(op)) {
    attrs.append("epsilon", b.getF32FloatAttr(norm.getEpsilon().convertToFloat()));
  } else if (auto norm = dyn_cast<tfm::RmsNormOp>(op)) {
    attrs.append("epsilon", b.getF32FloatAttr(norm.getEpsilon().convertToFloat()));
  } else if (auto linear = dyn_cast<tfm::LinearOp>(op)) {
    attrs.append("parallel", b.getStringAttr(tfm::stringifyParallelism(linear.getParallel())));
    if (std::optional<tfm::ActivationKind> activation = linear.getActivation())
      attrs.append("activation", b.getStringAttr(tfm::stringifyActivationKind(*activation)));
    // Only where set, so that other linears' steps keep the attributes they had.
    if (linear.getGated())
      attrs.append("gated", b.getI64IntegerAttr(1));
    if (linear.getInt8Activations())
      attrs.append("int8_activations", b.getI64IntegerAttr(1));
    if (std::optional<tfm::NormKind> norm = linear.getNorm()) {
      attrs.append("norm", b.getStringAttr(tfm::stringifyNormKind(*norm)));
      attrs.append("norm_epsilon",
                   b.getF32FloatAttr(linear.getNormEpsilonAttr().getValue().convertToFloat()));
    }
    appendOutputDtype(attrs, linear.getInput(), linear.getOutput());
  } else if (auto activation = dyn_cast<tfm::ActivationOp>(op)) {
    attrs.append("kind", b.getStringAttr(tfm::stringifyActivationKind(activation.getKind())));
  } else if (auto gated = dyn_cast<tfm::GatedActOp>(op)) {
    attrs.append("kind", b.getStringAttr(tfm::stringifyActivationKind(gated.getKind())));
  } else if (auto packed = dyn_cast<tfm::GatedActPackedOp>(op)) {
    attrs.append("kind", b.getStringAttr(tfm::stringifyActivationKind(packed.getKind())));
  } else if (auto attention = dyn_cast<tfm::AttentionOp>(op)) {
    // Under tensor parallelism the op's head counts are rank 0's; the step gets the model's
    // and each rank's heads (set by the tp-shard pass).
    auto global = [&](StringRef name, int64_t local) {
      auto value = attention->getAttrOfType<IntegerAttr>(name);
      return b.getI64IntegerAttr(value ? value.getInt() : local);
    };
    attrs.append("num_heads", global("tfm.global_heads", attention.getNumHeads()));
    attrs.append("num_kv_heads", global("tfm.global_kv_heads", attention.getNumKvHeads()));
    for (StringRef name : {"rank_heads", "rank_head_offsets", "rank_kv_heads",
                           "rank_kv_head_offsets"})
      if (auto list = attention->getAttrOfType<ArrayAttr>(("tfm." + name).str()))
        attrs.append(name, list);
    attrs.append("head_dim", b.getI64IntegerAttr(attention.getHeadDim()));
    attrs.append("scale", b.getF32FloatAttr(attention.getScale().convertToFloat()));
    attrs.append("causal", b.getI64IntegerAttr(attention.getCausal() ? 1 : 0));
    attrs.append("alibi", b.getI64IntegerAttr(attention.getAlibi() ? 1 : 0));
    attrs.append("window", b.getI64IntegerAttr(attention.getWindow() ? *attention.getWindow() : 0));
    tfm::RotaryAttr rotary = attention.getRotaryAttr();
    attrs.append("rotary_dim", b.getI64IntegerAttr(rotary ? rotary.getDim() : 0));
    attrs.append("rotary_base",
                 b.getF32FloatAttr(rotary ? static_cast<float>(rotary.getBase().convertToDouble())
                                          : 10000.0f));
    attrs.append("rotary_interleaved",
                 b.getI64IntegerAttr(rotary && rotary.getLayout() == tfm::RotaryLayout::interleaved));
    // Scaled RoPE (llama3, linear, yarn): the frequencies themselves; absent otherwise, so
    // plans of default RoPE keep their steps' attributes.
    if (rotary && rotary.getInvFreq()) {
      SmallVector<Attribute> frequencies;
      for (float frequency : rotary.getInvFreq().asArrayRef())
        frequencies.push_back(b.getF32FloatAttr(frequency));
      attrs.append("rotary_inv_freq", b.getArrayAttr(frequencies));
    }
    if (rotary && rotary.getAttentionFactor())
      attrs.append("rotary_attention_factor",
                   b.getF32FloatAttr(rotary.getAttentionFactor().getValueAsDouble()));
    attrs.append("cache_layer", b.getI64IntegerAttr(
                                    attention.getCacheLayer() ? *attention.getCacheLayer() : -1));
    // A half session cache; absent for f32, so that other plans keep their steps' attributes.
    if (TypeAttr cacheType = attention.getCacheDtypeAttr())
      attrs.append("cache_dtype", cacheType);
    appendOutputDtype(attrs, attention.getQuery(), attention.getOutput());
    // Set by recognition where the export averages a padding query's values over the
    // causally visible keys only (docs/transformer-ops.md).
    if (auto unattended = attention->getAttrOfType<StringAttr>("tfm.unattended"))
      attrs.append("unattended", unattended);
    // Gemma-2's logit soft-capping; absent (as 0) when off, so plans without it keep
    // their steps' attributes.
    if (FloatAttr softcap = attention.getSoftcapAttr())
      attrs.append("softcap", b.getF32FloatAttr(softcap.getValue().convertToFloat()));
    // Only where set, so that other steps keep the attributes they had.
    if (attention.getPackedQkv())
      attrs.append("packed_qkv", b.getI64IntegerAttr(1));
    if (FloatAttr epsilon = attention.getQkNormEpsilonAttr())
      attrs.append("qk_norm_epsilon", b.getF32FloatAttr(epsilon.getValue().convertToFloat()));
    if (attention.getQkNormAfterRotary())
      attrs.append("qk_norm_after_rotary", b.getI64IntegerAttr(1));
    // An encoder-decoder's cross-attention in the session programs (dsc-derive-cache-programs):
    // its cache layer holds the encoder's keys, written by prefill, read by decode.
    if (attention->hasAttr("tfm.cross_keys"))
      attrs.append("cross", b.getI64IntegerAttr(1));
  } else if (auto moe = dyn_cast<tfm::MoeOp>(op)) {
    attrs.append("top_k", b.getI64IntegerAttr(moe.getTopK()));
    attrs.append("scoring", b.getStringAttr(tfm::stringifyRouterScoring(moe.getScoring())));
    attrs.append("normalize", b.getI64IntegerAttr(moe.getNormalize() ? 1 : 0));
    attrs.append("activation", b.getStringAttr(tfm::stringifyActivationKind(moe.getActivation())));
    // GPT-OSS's clamped SwiGLU and TP's once-added down bias: only where set, so that other
    // plans keep their steps' attributes.
    if (FloatAttr alpha = moe.getSwigluAlphaAttr()) {
      attrs.append("swiglu_alpha", b.getF32FloatAttr(alpha.getValue().convertToFloat()));
      attrs.append("swiglu_limit",
                   b.getF32FloatAttr(moe.getSwigluLimitAttr().getValue().convertToFloat()));
    }
    if (std::optional<int64_t> rank = moe.getDownBiasRank())
      attrs.append("down_bias_rank", b.getI64IntegerAttr(*rank));
    // Expert parallelism: each rank's experts, as tfm.attention's rank_heads.
    if (auto counts = moe.getRankExperts()) {
      attrs.append("rank_experts", b.getI64ArrayAttr(*counts));
      attrs.append("rank_expert_offsets", b.getI64ArrayAttr(*moe.getRankExpertOffsets()));
    }
  } else if (auto reduce = dyn_cast<tfm::AllReduceOp>(op)) {
    attrs.append("ranks", b.getI64IntegerAttr(reduce.getRanks()));
  } else if (auto gather = dyn_cast<tfm::AllGatherOp>(op)) {
    attrs.append("axis", b.getI64IntegerAttr(gather.getAxis()));
    attrs.append("ranks", b.getI64IntegerAttr(gather.getRanks()));
    if (auto sizes = gather.getSizes())
      attrs.append("sizes", b.getI64ArrayAttr(*sizes));
  } else if (!isa<tfm::ResidualAddOp>(op)) {
    return op->emitOpError("has no runtime step");
  }
  return attrs.getDictionary(op->getContext());
}

} // namespace

FailureOr<DictionaryAttr> stepAttributes(Operation *op) {
  if (op->getDialect() && op->getDialect()->getNamespace() == "tfm")
    return tfmStepAttributes(op);
  // The inherent attributes of an onnx op (attributes that only carry defaults are absent).
  NamedAttrList attrs;
  for (StringAttr name : op->getName().getRegisteredInfo()->getAttributeNames())
    if (std::optional<Attribute> value = op->getInherentAttr(name); value && *value)
      attrs.append(name, *value);
  return attrs.getDictionary(op->getContext());
}

FailureOr<dsrt::ops::AttrMap> kernelAttributes(Operation *op) {
  FailureOr<DictionaryAttr> step = stepAttributes(op);
  if (failed(step))
    return failure();
  dsrt::ops::AttrMap attrs;
  for (NamedAttribute named : *step) {
    StringAttr name = named.getName();
    Attribute value = named.getValue();
    dsrt::ops::Attr attr;
    if (auto integer = dyn_cast<IntegerAttr>(value)) {
      // A 1-bit attribute is a bool (0 or 1), not a signed -1.
      const APInt &bits = integer.getValue();
      attr = dsrt::ops::Attr::ofInt(bits.getBitWidth() == 1 ? bits.getZExtValue()
                                                            : bits.getSExtValue());
    } else if (auto real = dyn_cast<FloatAttr>(value)) {
      attr = dsrt::ops::Attr::ofFloat(static_cast<float>(real.getValueAsDouble()));
    } else if (auto text = dyn_cast<StringAttr>(value)) {
      attr = dsrt::ops::Attr::ofString(text.str());
    } else if (auto type = dyn_cast<TypeAttr>(value)) {
      attr = dsrt::ops::Attr::ofType(runtimeDType(type.getValue()));
    } else if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
      attr = dsrt::ops::Attr::ofTensor(tensorFromAttr(dense));
    } else if (auto array = dyn_cast<ArrayAttr>(value)) {
      if (!array.empty() && isa<FloatAttr>(array[0])) {
        std::vector<float> floats;
        for (Attribute element : array)
          floats.push_back(static_cast<float>(cast<FloatAttr>(element).getValueAsDouble()));
        attr = dsrt::ops::Attr::ofFloats(std::move(floats));
      } else {
        std::vector<int64_t> ints;
        for (Attribute element : array)
          ints.push_back(cast<IntegerAttr>(element).getValue().getSExtValue());
        attr = dsrt::ops::Attr::ofInts(std::move(ints));
      }
    } else {
      return op->emitOpError() << "attribute '" << name.str() << "' has no kernel form";
    }
    attrs[name.str()] = std::move(attr);
  }
  return attrs;
}

Type mlirElementType(MLIRContext *context, dsrt::DType dtype) {
  Builder b(context);
  switch (dtype) {
  case dsrt::DType::F32: return b.getF32Type();
  case dsrt::DType::F16: return b.getF16Type();
  case dsrt::DType::BF16: return b.getBF16Type();
  case dsrt::DType::F64: return b.getF64Type();
  case dsrt::DType::I64: return b.getI64Type();
  case dsrt::DType::I32: return b.getI32Type();
  case dsrt::DType::I16: return b.getI16Type();
  case dsrt::DType::I8: return b.getI8Type();
  case dsrt::DType::Bool: return b.getI1Type();
  case dsrt::DType::U8: return b.getIntegerType(8, false);
  case dsrt::DType::U16: return b.getIntegerType(16, false);
  case dsrt::DType::U32: return b.getIntegerType(32, false);
  case dsrt::DType::U64: return b.getIntegerType(64, false);
  default: return nullptr;
  }
}

DenseElementsAttr attrFromTensor(MLIRContext *context, const dsrt::OwnedTensor &tensor) {
  auto type = RankedTensorType::get(tensor.shape, mlirElementType(context, tensor.dtype));
  if (tensor.dtype == dsrt::DType::Bool) {
    SmallVector<bool> values(tensor.storage.begin(), tensor.storage.end());
    return DenseElementsAttr::get(type, ArrayRef<bool>(values));
  }
  return DenseElementsAttr::getFromRawBuffer(
      type, ArrayRef<char>(reinterpret_cast<const char *>(tensor.storage.data()),
                           tensor.storage.size()));
}

FailureOr<std::vector<dsrt::OwnedTensor>> runKernelOnce(Operation *op,
                                                       const dsrt::ops::Inputs &inputs,
                                                       int64_t maxElements) {
  FailureOr<dsrt::ops::AttrMap> attrs = kernelAttributes(op);
  if (failed(attrs))
    return failure();
  std::string name = op->getName().stripDialect().str();
  std::vector<dsrt::ops::OutputSpec> specs;
  if (!dsrt::ops::inferShapes(name, *attrs, inputs, op->getNumResults(), specs).isOk() ||
      specs.size() != op->getNumResults())
    return failure();
  std::vector<dsrt::OwnedTensor> results;
  for (const auto &spec : specs) {
    if (dsrt::elementCount(spec.shape) > maxElements)
      return failure();
    results.emplace_back(spec.dtype, spec.shape);
  }
  std::vector<dsrt::TensorRef> refs;
  for (auto &result : results)
    refs.push_back(result.ref());
  dsrt::ops::Outputs outputs;
  for (auto &ref : refs)
    outputs.push_back(&ref);
  if (!dsrt::ops::compute(name, *attrs, inputs, outputs).isOk())
    return failure();
  return results;
}

} // namespace dsc
