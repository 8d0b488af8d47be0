// tfm.attention's verifier: the modes' inputs and outputs (I/O with past and presents, the
// session's KV cache, the serving engine's paged rows, cross-attention), their shapes, and
// the attributes that go with each (docs/transformer-ops.md, "tfm.attention").
#include "dialects/tfm/IR/TfmDialect.h"
#include "dialects/tfm/IR/VerifyHelpers.h"

#include "mlir/IR/Builders.h"

#include <cmath>
#include <optional>

using namespace mlir;

namespace dsc::tfm {

//===----------------------------------------------------------------------===//
// tfm.attention
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  int64_t heads = getNumHeads(), kvHeads = getNumKvHeads(), headDim = getHeadDim();
  if (heads % kvHeads != 0)
    return emitOpError() << "num_heads " << heads << " is not a multiple of num_kv_heads "
                         << kvHeads;
  float scale = getScale().convertToFloat();
  if (!(scale > 0) || !std::isfinite(scale))
    return emitOpError("scale must be positive and finite");
  if (FloatAttr softcapAttr = getSoftcapAttr()) {
    float softcap = softcapAttr.getValue().convertToFloat();
    if (!(softcap > 0) || !std::isfinite(softcap))
      return emitOpError() << "softcap must be positive and finite (absent = off), not "
                           << softcap;
  }

  if (std::optional<Type> cacheType = getCacheDtype()) {
    if (!getCacheLayer() || !getPast().empty())
      return emitOpError("cache_dtype needs cache_layer and no past: it is the type of the "
                         "session's KV cache");
    if (!cacheType->isF16() && !cacheType->isBF16())
      return emitOpError() << "cache_dtype must be f16 or bf16 (absent: f32), not "
                           << *cacheType;
  }
  if (!getQueryNormScale() != !getKeyNormScale() ||
      !getQueryNormScale() != !getQkNormEpsilonAttr())
    return emitOpError("query_norm_scale, key_norm_scale and qk_norm_epsilon come together");
  if (FloatAttr epsilonAttr = getQkNormEpsilonAttr()) {
    float epsilon = epsilonAttr.getValue().convertToFloat();
    if (!(epsilon >= 0) || !std::isfinite(epsilon))
      return emitOpError() << "qk_norm_epsilon must be finite and >= 0, not " << epsilon;
    // Per head ([head_dim]: Qwen3, Gemma-3) or over all of the query's or key's heads
    // ([heads * head_dim]: OLMo-2), the two alike.
    auto spans = [&](Value scale, int64_t heads) -> std::optional<bool> {
      auto type = cast<RankedTensorType>(scale.getType());
      if (type.getRank() != 1)
        return std::nullopt;
      if (compatible(type.getDimSize(0), headDim))
        return false;
      if (compatible(type.getDimSize(0), heads * headDim))
        return true;
      return std::nullopt;
    };
    std::optional<bool> query = spans(getQueryNormScale(), getNumHeads()),
                        key = spans(getKeyNormScale(), getNumKvHeads());
    if (!query || !key || (*query != *key && getNumHeads() > 1 && getNumKvHeads() > 1))
      return emitOpError() << "q/k norm scales must be [" << headDim << "] each, or ["
                           << getNumHeads() * headDim << "] and [" << getNumKvHeads() * headDim
                           << "] (over all heads), not " << getQueryNormScale().getType()
                           << " and " << getKeyNormScale().getType();
    if (getQkNormAfterRotary() && (*query || *key))
      return emitOpError("qk_norm_after_rotary needs scales of [head_dim]: a head's scale "
                         "after the rotation");
  }
  if (getQkNormAfterRotary() && !getQkNormEpsilonAttr())
    return emitOpError("qk_norm_after_rotary needs the q/k norms");
  if (Value sinks = getSinks()) {
    // This rank's heads, or every head of the model under tensor parallelism (as `bias`).
    auto type = dyn_cast<RankedTensorType>(sinks.getType());
    auto global = (*this)->getAttrOfType<IntegerAttr>("tfm.global_heads");
    if (!type || type.getRank() != 1 || !isa<FloatType>(type.getElementType()) ||
        !(compatible(type.getDimSize(0), getNumHeads()) ||
          (global && compatible(type.getDimSize(0), global.getInt()))))
      return emitOpError() << "sinks must be a float [" << getNumHeads()
                           << "] (one logit per head), not " << sinks.getType();
  }

  auto q = getQuery().getType(), k = getKey().getType(), v = getValue().getType();
  auto out = getOutput().getType();
  for (auto [type, what] : {std::pair(q, "query"), std::pair(k, "key"), std::pair(v, "value"),
                            std::pair(out, "result")})
    if (type.getRank() != 3)
      return emitOpError() << what << " must be 3-D [batch, seq, heads * head_dim], not rank "
                           << type.getRank();
  Type element = q.getElementType();
  if (k.getElementType() != element || v.getElementType() != element ||
      (out.getElementType() != element && !isActivationStorage(out.getElementType(), element)))
    return emitOpError("query, key, value and result must have the same element type (the "
                       "result may be f16/bf16 beside f32: the plan's activation dtype)");
  if (k != v)
    return emitOpError() << "key " << k << " and value " << v << " must have the same type";
  if (getPackedQkv()) {
    if (getQuery() != getKey() || getQuery() != getValue())
      return emitOpError("with packed_qkv, query, key and value must be one tensor");
    if (failed(expectDim(*this, q, 2, (heads + 2 * kvHeads) * headDim,
                         "packed query/key/value dimension 2 ((heads + 2 kv_heads) head_dim)")))
      return failure();
    if (!getPast().empty() || getBias())
      return emitOpError("packed_qkv takes no past and no bias");
  }
  // Under tensor parallelism, keys and values read from a graph input may hold every KV
  // head of the model (`tfm.global_kv_heads`), of which a rank reads its own.
  auto globalKvHeads = (*this)->getAttrOfType<IntegerAttr>("tfm.global_kv_heads");
  bool allKvHeads = globalKvHeads && k.getDimSize(2) == globalKvHeads.getInt() * headDim;
  if (!getPackedQkv() &&
      (failed(expectDim(*this, q, 2, heads * headDim, "query dimension 2 (heads * head_dim)")) ||
       (!allKvHeads && failed(expectDim(*this, k, 2, kvHeads * headDim,
                                        "key/value dimension 2 (kv_heads * head_dim)")))))
    return failure();
  int64_t batch = q.getDimSize(0), seq = q.getDimSize(1), kvSeq = k.getDimSize(1);
  if (!compatible(k.getDimSize(0), batch))
    return emitOpError() << "key batch " << k.getDimSize(0) << " differs from query batch "
                         << batch;
  if (!compatible(out.getDimSize(0), batch) || !compatible(out.getDimSize(1), seq) ||
      !compatible(out.getDimSize(2), heads * headDim))
    return emitOpError() << "result " << out << " must be [" << dimString(batch) << ", "
                         << dimString(seq) << ", " << heads * headDim << "]";

  // The cache: past(key, value) operands and present(key, value) results.
  auto checkCache = [&](TypeRange types, StringRef what, int64_t past) -> FailureOr<int64_t> {
    if (types.empty())
      return past;
    if (types.size() != 2)
      return emitOpError() << what << " must be a (key, value) pair, not " << types.size()
                           << " tensors";
    if (types[0] != types[1])
      return emitOpError() << what << " key and value must have the same type";
    auto type = cast<RankedTensorType>(types[0]);
    if (type.getRank() != 4 || type.getElementType() != element)
      return emitOpError() << what << " must be 4-D [batch, kv_heads, len, head_dim] of "
                           << element;
    // Under tensor parallelism the past holds every KV head (`tfm.global_kv_heads`), of
    // which a rank reads its own.
    auto globalKv = (*this)->getAttrOfType<IntegerAttr>("tfm.global_kv_heads");
    bool allHeads = what == "past" && globalKv &&
                    compatible(type.getDimSize(1), globalKv.getInt());
    if (!compatible(type.getDimSize(0), batch) ||
        (!compatible(type.getDimSize(1), kvHeads) && !allHeads) ||
        !compatible(type.getDimSize(3), headDim))
      return emitOpError() << what << " " << type << " must be [" << dimString(batch) << ", "
                           << kvHeads << ", len, " << headDim << "]";
    return type.getDimSize(2);
  };
  FailureOr<int64_t> past = checkCache(getPast().getTypes(), "past", 0);
  if (failed(past))
    return failure();
  int64_t total = (isDyn(*past) || isDyn(kvSeq)) ? ShapedType::kDynamic : *past + kvSeq;
  if (!getPresent().empty()) {
    FailureOr<int64_t> present = checkCache(getPresent().getTypes(), "present", 0);
    if (failed(present))
      return failure();
    if (!compatible(*present, total))
      return emitOpError() << "present length " << *present << " must be past + new = "
                           << total;
  }

  if (auto mask = ranked(getMask())) {
    Type maskElement = mask.getElementType();
    if (isa<FloatType>(maskElement)) {
      if (mask.getRank() != 4)
        return emitOpError("an additive mask must be 4-D [batch, heads, seq, total]");
      int64_t expected[] = {batch, heads, seq, total};
      for (int64_t i = 0; i < 4; ++i) {
        int64_t dim = mask.getDimSize(i);
        bool broadcast = i < 2 && dim == 1;
        if (!broadcast && !compatible(dim, expected[i]))
          return emitOpError() << "mask dimension " << i << " is " << dim << ", expected "
                               << dimString(expected[i]) << (i < 2 ? " or 1" : "");
      }
    } else if (isa<IntegerType>(maskElement)) {
      if (mask.getRank() != 2)
        return emitOpError("a padding mask must be 2-D [batch, total]");
      if (!compatible(mask.getDimSize(0), batch) || !compatible(mask.getDimSize(1), total))
        return emitOpError() << "padding mask " << mask << " must be [" << dimString(batch)
                             << ", " << dimString(total) << "]";
    } else {
      return emitOpError() << "mask must be an integer padding mask or a float additive mask, "
                              "not "
                           << mask;
    }
  }

  if (auto bias = ranked(getBias())) {
    if (bias.getRank() != 4)
      return emitOpError("the bias must be 4-D [batch, heads, seq, total]");
    auto globalHeads = (*this)->getAttrOfType<IntegerAttr>("tfm.global_heads");
    int64_t expected[] = {batch, heads, seq, total};
    for (int64_t i = 0; i < 4; ++i) {
      int64_t dim = bias.getDimSize(i);
      bool broadcast = i < 2 && dim == 1;
      bool allHeads = i == 1 && globalHeads && dim == globalHeads.getInt();
      if (!broadcast && !allHeads && !compatible(dim, expected[i]))
        return emitOpError() << "bias dimension " << i << " is " << dim << ", expected "
                             << dimString(expected[i]) << (i < 2 ? " or 1" : "");
    }
  }
  if (!compatible(kvSeq, seq) && (getCausal() || getWindow() || getRotaryAttr() ||
                                  !getPast().empty()))
    return emitOpError() << "keys of another sequence (" << kvSeq << " against " << seq
                         << " queries) have no past, causal mask, window or rotary";

  if (auto rotary = getRotaryAttr()) {
    if (rotary.getDim() > headDim)
      return emitOpError() << "rotary dim " << rotary.getDim() << " exceeds head_dim "
                           << headDim;
    if (getAlibi())
      return emitOpError("rotary embeddings and ALiBi exclude each other");
    if (!getPositions())
      return emitOpError("rotary embeddings need the positions operand");
  }
  if (auto positions = ranked(getPositions())) {
    if (positions.getRank() != 2 || !compatible(positions.getDimSize(0), batch) ||
        !compatible(positions.getDimSize(1), seq))
      return emitOpError() << "positions " << positions << " must be [" << dimString(batch)
                           << ", " << dimString(seq) << "]";
  }
  return success();
}

} // namespace dsc::tfm
