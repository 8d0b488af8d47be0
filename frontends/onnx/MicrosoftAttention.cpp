// ONNX Runtime's attention contrib ops, written out in primitive ops (MicrosoftOps.cpp says
// why): GroupQueryAttention (its GenAI builder's), Attention and MultiHeadAttention (its
// transformer optimizer's). One core, `attend`, computes what all three share.
#include "frontends/onnx/GraphImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace dsc::onnx_frontend {

namespace {

bool isGiven(ArrayRef<Value> inputs, size_t index) {
  return index < inputs.size() && !isa<NoneType>(inputs[index].getType());
}

// The graph's padding mask behind a count of its valid tokens: ReduceSum(mask, axis 1)
// (EmbedLayerNormalization's mask_index), minus `offset` (GroupQueryAttention's seqlens_k is
// the count minus one), through casts. Null when `lengths` is not that.
Value paddingMaskBehind(Value lengths, int64_t offset) {
  auto throughCasts = [](Value value) {
    while (auto cast = value.getDefiningOp<onnx::CastOp>())
      value = cast.getInput();
    return value;
  };
  Value counted = throughCasts(lengths);
  if (offset != 0) {
    auto sub = counted.getDefiningOp<onnx::SubOp>();
    if (!sub)
      return {};
    auto one = sub.getB().getDefiningOp<onnx::ConstantOp>();
    auto values = one ? dyn_cast<DenseIntElementsAttr>(one.getValue()) : DenseIntElementsAttr();
    if (!values || values.getNumElements() != 1 || (*values.begin()).getSExtValue() != offset)
      return {};
    counted = throughCasts(sub.getA());
  }
  auto sum = counted.getDefiningOp<onnx::ReduceSumOp>();
  if (!sum)
    return {};
  Value mask = throughCasts(sum.getData());
  auto maskType = dyn_cast<RankedTensorType>(mask.getType());
  auto sumType = dyn_cast<RankedTensorType>(sum.getReduced().getType());
  // [batch, total] summed to [batch]: the mask of a graph input.
  if (!maskType || maskType.getRank() != 2 || (sumType && sumType.getRank() != 1) ||
      !isa<BlockArgument>(mask))
    return {};
  return mask;
}

} // namespace

Value GraphImporter::headsFirst(Value x, int64_t heads, int64_t headSize, Location loc) {
  return emit("Transpose", {emit("Reshape", {x, constantI64({0, 0, heads, headSize}, loc)}, loc)},
              loc, {namedAttr("perm", builder_.getI64ArrayAttr({0, 2, 1, 3}))});
}

Value GraphImporter::attend(Value query, Value key, Value value, int64_t heads, int64_t kvHeads,
                            int64_t headSize, double scale, const AttentionMasks &masks,
                            Location loc) {
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  auto scalarI64 = [&](Value vector) { return emit("Squeeze", {vector, i64({0})}, loc); };
  auto perm = [&](ArrayRef<int64_t> order) {
    return namedAttr("perm", builder_.getI64ArrayAttr(order));
  };
  Type element = cast<TensorType>(query.getType()).getElementType();
  auto typed = [&](double number) { return floatScalar(number, element, loc); };
  if (heads != kvHeads) {
    key = repeatKv(key, i64({heads / kvHeads}), loc);
    value = repeatKv(value, i64({heads / kvHeads}), loc);
  }
  Value scores = emit("MatMul", {query, emit("Transpose", {key}, loc, {perm({0, 1, 3, 2})})}, loc);
  scores = emit("Mul", {scores, typed(scale != 0 ? scale : 1.0 / std::sqrt(double(headSize)))},
                loc);
  if (masks.softcap > 0) {
    Value cap = typed(masks.softcap);
    scores = emit("Mul", {emit("Tanh", {emit("Div", {scores, cap}, loc)}, loc), cap}, loc);
  }
  if (masks.bias)
    scores = emit("Add", {scores, masks.bias}, loc);

  // Query i of s (at past + i) sees keys j <= past + i when causal, and of those the last
  // `window` (keys j > past + i - window, as onnxruntime's kernels compute), and only valid
  // keys: where the padding mask is nonzero, or below each row's length.
  auto dimension = [&](Value x, int64_t axis) {
    return emit("Shape", {x}, loc, {intAttr("start", axis), intAttr("end", axis + 1)});
  };
  Value total = scalarI64(dimension(key, 2));
  Value one = scalarI64(i64({1}));
  Value cols = emit("Unsqueeze", {emit("Range", {scalarI64(i64({0})), total, one}, loc), i64({0})},
                    loc);  // [1, total]
  Value allowed;
  auto both = [&](Value a, Value b) { return a ? emit("And", {a, b}, loc) : b; };
  if (masks.causal || masks.window >= 0) {
    Value past = emit("Sub", {total, scalarI64(dimension(query, 2))}, loc);
    Value rows = emit("Unsqueeze", {emit("Range", {past, total, one}, loc), i64({1})}, loc);
    if (masks.causal)
      allowed = emit("LessOrEqual", {cols, rows}, loc);  // [s, total]
    if (masks.window >= 0)
      allowed = both(allowed, emit("Greater", {cols, emit("Sub", {rows, i64({masks.window})}, loc)},
                                   loc));
  }
  Value valid;
  auto toI64 = [&](Value x) {
    return emit("Cast", {x}, loc, {namedAttr("to", TypeAttr::get(builder_.getI64Type()))});
  };
  if (masks.padding)
    valid = emit("Not", {emit("Equal", {toI64(masks.padding), i64({0})}, loc)}, loc);
  else if (masks.lengths)
    valid = emit("Less", {cols, emit("Unsqueeze", {toI64(masks.lengths), i64({1})}, loc)}, loc);
  if (valid)
    allowed = both(allowed, emit("Unsqueeze", {valid, i64({1, 2})}, loc));  // [b, 1, 1, total]
  if (allowed) {
    Value masked = typed(masks.maskValue ? *masks.maskValue
                                         : -std::numeric_limits<double>::infinity());
    scores = emit("Add", {scores, emit("Where", {allowed, typed(0.0), masked}, loc)}, loc);
  }
  // Sinks (GPT-OSS's, GroupQueryAttention's head_sink): a column of one logit per head
  // joins each row's softmax and is dropped after it, the form HF's GPT-OSS exports and
  // recognition reads as tfm.attention's `sinks`.
  if (masks.sinks) {
    Value perHead = emit("Reshape", {masks.sinks, i64({1, heads, 1, 1})}, loc);
    Value shape = emit("Concat",
                       {emit("Shape", {scores}, loc, {intAttr("start", 0), intAttr("end", 3)}),
                        i64({1})},
                       loc, {intAttr("axis", 0)});
    scores = emit("Concat", {scores, emit("Expand", {perHead, shape}, loc)}, loc,
                  {intAttr("axis", -1)});
  }
  Value probabilities = emit("Softmax", {scores}, loc, {intAttr("axis", -1)});
  if (masks.sinks)
    probabilities = emit("Slice", {probabilities, i64({0}), i64({-1}), i64({-1}), noValue(loc)},
                         loc);
  // A row with every key masked (a padded query) gives zeros, not NaN.
  probabilities =
      emit("Where", {emit("IsNaN", {probabilities}, loc), typed(0.0), probabilities}, loc);
  Value out = emit("MatMul", {probabilities, value}, loc);
  return emit("Reshape", {emit("Transpose", {out}, loc, {perm({0, 2, 1, 3})}),
                          i64({0, 0, heads * headSize})},
              loc);
}

// GroupQueryAttention (ONNX Runtime's contrib op; its CPU kernel, gqa_attention_base.h):
// query [b, s, heads * d] or packed [b, s, (heads + 2 * kv_heads) * d] with key and value
// absent; past key and value [b, kv_heads, past, d]; seqlens_k [b] (each row's total length
// minus one) and total_sequence_length; the rotary caches [max positions, r / 2].
//
// ONNX Runtime reads seqlens_k as right padding: row b's valid keys are 0..seqlens_k[b], and
// a first prompt's positions are 0..s-1 whatever its padding. dsc reads the builder's
// seqlens_k (ReduceSum of the graph's attention_mask, minus one) as that mask itself, as
// transformers does: a padded key is masked where it is. The two agree on every unpadded
// batch; a padded batch is served by the session programs, which mask and count positions
// as transformers' generate does (docs/ortgenai.md).
LogicalResult GraphImporter::writeGroupQueryAttention(const NodeProto &node,
                                                      const NodeAttributes &attrs, Location loc,
                                                      ArrayRef<Value> inputs,
                                                      SmallVectorImpl<Value> &results) {
  auto given = [&](size_t index) { return isGiven(inputs, index); };
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  auto named = [&](llvm::StringRef name, Attribute value) { return namedAttr(name, value); };
  auto integer = [&](llvm::StringRef name, int64_t value) { return intAttr(name, value); };
  auto toI64 = [&](Value value) {
    return emit("Cast", {value}, loc, {named("to", TypeAttr::get(builder_.getI64Type()))});
  };
  auto scalarI64 = [&](Value vector) { return emit("Squeeze", {vector, i64({0})}, loc); };
  auto dimension = [&](Value x, int64_t axis) {
    return emit("Shape", {x}, loc, {integer("start", axis), integer("end", axis + 1)});
  };
  // sliding_window_cache (the builder's default on sliding-window layers, windowed_kv_cache)
  // says how onnxruntime stores this layer's cache: a buffer of capacity C >= the window
  // whose first rows are the most recent keys, compacted as the window moves. The attention
  // is the window's either way, and so is what dsc computes: its session programs keep their
  // own cache, and the forward program reads the past as the sequence's cached keys in
  // order, which is onnxruntime's buffer until it is first compacted (docs/ortgenai.md).
  if (attrs.intOr("sliding_window_cache", 0) != 0) {
    if (attrs.intOr("local_window_size", -1) <= 0)
      return emitError(loc) << "GroupQueryAttention has sliding_window_cache = 1 without a "
                               "window (local_window_size "
                            << attrs.intOr("local_window_size", -1)
                            << "): a windowed KV cache needs local_window_size > 0";
    if (!isGiven(inputs, 3))
      return emitError(loc) << "GroupQueryAttention has sliding_window_cache = 1 without "
                               "past_key and past_value: a windowed KV cache needs them";
  }
  if (llvm::StringRef name = attrs.unknown({"num_heads", "kv_num_heads", "scale", "softcap",
                                             "local_window_size", "do_rotary",
                                             "rotary_interleaved", "smooth_softmax",
                                             "qk_output", "sliding_window_cache",
                                             "qk_norm_epsilon"});
      !name.empty())
    return emitError(loc) << "GroupQueryAttention has attribute '" << name
                          << "', which dsc does not support";
  if (attrs.intOr("qk_output", 0) != 0)
    return emitError(loc) << "GroupQueryAttention with qk_output is not supported";
  const int64_t heads = attrs.intOr("num_heads", 0), kvHeads = attrs.intOr("kv_num_heads", 0);
  if (heads <= 0 || kvHeads <= 0 || heads % kvHeads != 0)
    return emitError(loc) << "GroupQueryAttention needs num_heads a positive multiple of "
                             "kv_num_heads, not "
                          << heads << " and " << kvHeads;
  if (!given(0) || !given(5))
    return emitError(loc) << "GroupQueryAttention needs query and seqlens_k";
  const bool packed = !given(1);
  if (packed == given(2))
    return emitError(loc) << "GroupQueryAttention needs key and value together, or neither "
                             "(packed QKV)";
  if (given(3) != given(4))
    return emitError(loc) << "GroupQueryAttention needs past_key and past_value together";
  if (given(12) || given(13))
    return emitError(loc) << "GroupQueryAttention with k_scale and v_scale (a quantized KV "
                             "cache) is not supported";
  const bool rotary = attrs.intOr("do_rotary", 0) != 0;
  if (rotary && (!given(7) || !given(8)))
    return emitError(loc) << "GroupQueryAttention with do_rotary needs cos_cache and sin_cache";
  Value query = inputs[0];
  auto queryType = dyn_cast<RankedTensorType>(query.getType());
  if (!queryType || queryType.getRank() != 3 || queryType.isDynamicDim(2))
    return emitError(loc) << "GroupQueryAttention needs a 3-D query with a known last "
                             "dimension";
  Type element = queryType.getElementType();
  if (!isa<FloatType>(element))
    return emitError(loc) << "GroupQueryAttention needs a float query";
  const int64_t width = queryType.getDimSize(2);
  const int64_t columns = packed ? heads + 2 * kvHeads : heads;
  if (width % columns != 0)
    return emitError(loc) << "GroupQueryAttention's query width " << width
                          << " is not a multiple of its " << columns << " heads";
  const int64_t headSize = width / columns;

  Value key = packed ? Value() : inputs[1], value = packed ? Value() : inputs[2];
  if (packed) {
    auto part = [&](int64_t from, int64_t size) {
      return emit("Slice", {query, i64({from * headSize}), i64({(from + size) * headSize}),
                            i64({-1}), noValue(loc)},
                  loc);
    };
    key = part(heads, kvHeads);
    value = part(heads + kvHeads, kvHeads);
    query = part(0, heads);
  }

  // The padding mask [b, total], and the query tokens' positions: cached + t for the t-th
  // new token, counted from lengths alone (the mask's width, else the cache's length), as
  // transformers counts them without position_ids. The session programs take the positions
  // the generator counts from the mask instead (docs/ortgenai.md).
  Value length = dimension(query, 1);
  Value mask = paddingMaskBehind(inputs[5], 1), positions;
  Value cached = mask ? emit("Sub", {dimension(mask, 1), length}, loc)
                 : given(3) ? dimension(inputs[3], 2)
                            : i64({0});
  Value steps = emit("Range", {scalarI64(cached), scalarI64(emit("Add", {cached, length}, loc)),
                               scalarI64(i64({1}))},
                     loc);
  positions = emit("Unsqueeze", {steps, i64({0})}, loc);  // [1, s]
  if (given(9))
    positions = toI64(inputs[9]);
  query = headsFirst(query, heads, headSize, loc);
  key = headsFirst(key, kvHeads, headSize, loc);
  value = headsFirst(value, kvHeads, headSize, loc);
  // q_norm_weight and k_norm_weight (the builder's CUDA exports of Qwen3, where onnxruntime
  // fuses the QK norm into the node): an RMS norm over each head of the query and the key,
  // before the rotary, as Qwen3's q_norm and k_norm.
  if (given(14) != given(15))
    return emitError(loc) << "GroupQueryAttention needs q_norm_weight and k_norm_weight "
                             "together";
  if (given(14)) {
    for (size_t index : {14, 15}) {
      auto type = dyn_cast<RankedTensorType>(inputs[index].getType());
      if (!type || type.getRank() != 1 ||
          (!type.isDynamicDim(0) && type.getDimSize(0) != headSize))
        return emitError(loc) << "GroupQueryAttention's " << (index == 14 ? "q" : "k")
                              << "_norm_weight must be [head_size] = [" << headSize << "]";
    }
    const float epsilon = attrs.floatOr("qk_norm_epsilon", 1e-6f);
    query = rmsNorm(query, inputs[14], {-1}, epsilon, loc);
    key = rmsNorm(key, inputs[15], {-1}, epsilon, loc);
  }
  if (rotary) {
    // The caches' rows at the flattened positions, then [b, s, r / 2]: a lookup by 2-D ids
    // would read as a token embedding, and the cache is a rotary table.
    Value flat = emit("Reshape", {positions, i64({-1})}, loc);
    auto rowsAt = [&](Value cache) {
      Value rows = emit("Gather", {cache, flat}, loc, {integer("axis", 0)});
      return emit("Reshape", {rows, emit("Concat", {emit("Shape", {positions}, loc), i64({-1})},
                                         loc, {integer("axis", 0)})},
                  loc);
    };
    Value cosines = rowsAt(inputs[7]);
    Value sines = rowsAt(inputs[8]);
    // A cache narrower than half a head turns only the first elements (partial rotary).
    auto cacheType = dyn_cast<RankedTensorType>(inputs[7].getType());
    int64_t rotaryDim = 0;
    if (cacheType && cacheType.getRank() == 2 && !cacheType.isDynamicDim(1) &&
        2 * cacheType.getDimSize(1) < headSize)
      rotaryDim = 2 * cacheType.getDimSize(1);
    const bool interleaved = attrs.intOr("rotary_interleaved", 0) != 0;
    // On [b, heads, s, d], as transformers' apply_rotary_pos_emb turns them.
    query = rotate(query, cosines, sines, heads, /*threeD=*/false, rotaryDim, interleaved, loc);
    key = rotate(key, cosines, sines, kvHeads, /*threeD=*/false, rotaryDim, interleaved, loc);
  }

  if (given(3)) {
    // A cache input whose heads or head size the model names by a symbol (the builder's
    // kv_cache_dim) has this node's: the cache's other dimensions then stay the ones that
    // vary (batch, past).
    for (Value cache : {inputs[3], inputs[4]}) {
      auto type = dyn_cast<RankedTensorType>(cache.getType());
      if (!isa<BlockArgument>(cache) || !type || type.getRank() != 4)
        continue;
      SmallVector<int64_t> shape(type.getShape());
      shape[1] = kvHeads;
      shape[3] = headSize;
      if (shape != type.getShape()) {
        if (!llvm::all_of(llvm::zip(shape, type.getShape()), [](auto pair) {
              return std::get<1>(pair) == ShapedType::kDynamic ||
                     std::get<0>(pair) == std::get<1>(pair);
            }))
          return emitError(loc) << "GroupQueryAttention's cache input has type " << type
                                << ", not [batch, " << kvHeads << ", past, " << headSize << "]";
        cache.setType(RankedTensorType::get(shape, type.getElementType()));
      }
    }
    key = emit("Concat", {inputs[3], key}, loc, {integer("axis", 2)});
    value = emit("Concat", {inputs[4], value}, loc, {integer("axis", 2)});
  }
  AttentionMasks masks;
  masks.causal = true;
  masks.window = attrs.intOr("local_window_size", -1);
  masks.softcap = attrs.floatOr("softcap", 0.0f);
  masks.padding = mask;
  if (!mask) {
    // ONNX Runtime's reading: row b's valid keys are 0 .. seqlens_k[b].
    masks.lengths = emit("Add", {toI64(inputs[5]), i64({1})}, loc);
  }
  if (given(10))
    masks.bias = inputs[10];
  // head_sink [heads] is a sink per head; smooth_softmax without it, a sink of 0 logit for
  // every head (a 1 in each row's denominator), as onnxruntime's kernel reads them.
  if (given(11)) {
    auto sinkType = dyn_cast<RankedTensorType>(inputs[11].getType());
    if (!sinkType || sinkType.getRank() != 1 ||
        (!sinkType.isDynamicDim(0) && sinkType.getDimSize(0) != heads))
      return emitError(loc) << "GroupQueryAttention's head_sink must be [num_heads] = [" << heads
                            << "]";
    masks.sinks = inputs[11];
  } else if (attrs.intOr("smooth_softmax", 0) != 0) {
    masks.sinks = emit("Expand", {floatScalar(0.0, element, loc), i64({heads})}, loc);
  }
  Value out = attend(query, key, value, heads, kvHeads, headSize, attrs.floatOr("scale", 0.0f),
                     masks, loc);
  results.assign({out, key, value});
  return success();
}

// The padding of an attention's mask input: a raw mask [b, total] (nonzero: attend) as it
// is, or a count of valid keys [b] (right padding, onnxruntime's 1-D mask_index) as lengths,
// read back as the graph's mask where it counts one (EmbedLayerNormalization's mask_index).
static LogicalResult readPadding(Value mask, llvm::StringRef op, Location loc,
                                 AttentionMasks &masks) {
  if (Value behind = paddingMaskBehind(mask, 0)) {
    masks.padding = behind;
    return success();
  }
  auto type = dyn_cast<RankedTensorType>(mask.getType());
  if (!type || (type.getRank() != 1 && type.getRank() != 2))
    return emitError(loc) << op << "'s mask must be [batch] lengths or a [batch, total] mask; "
                          << "other forms are not supported";
  (type.getRank() == 2 ? masks.padding : masks.lengths) = mask;
  return success();
}

// Attention (the transformer optimizer's, BERT and GPT-2): input [b, s, in] times the packed
// weights [in, q + k + v] plus bias, split by qkv_hidden_sizes (thirds by default); the past
// [2, b, heads, past, d] before the new keys and values; present [2, b, heads, total, d].
LogicalResult GraphImporter::writeAttention(const NodeProto &node, const NodeAttributes &attrs,
                                            Location loc, ArrayRef<Value> inputs,
                                            SmallVectorImpl<Value> &results) {
  auto given = [&](size_t index) { return isGiven(inputs, index); };
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  if (llvm::StringRef name = attrs.unknown({"num_heads", "unidirectional", "qkv_hidden_sizes",
                                             "mask_filter_value", "scale"});
      !name.empty())
    return emitError(loc) << "Attention has attribute '" << name
                          << "', which dsc does not support";
  const int64_t heads = attrs.intOr("num_heads", 0);
  if (heads <= 0)
    return emitError(loc) << "Attention needs a positive num_heads";
  if (!given(0) || !given(1))
    return emitError(loc) << "Attention needs input and weights";
  for (size_t unsupported : {5, 6})
    if (given(unsupported))
      return emitError(loc) << "Attention's input " << unsupported
                            << " (attention_bias, past_sequence_length) is not supported";
  auto weightType = dyn_cast<RankedTensorType>(inputs[1].getType());
  if (!weightType || weightType.getRank() != 2 || weightType.isDynamicDim(1))
    return emitError(loc) << "Attention needs 2-D weights of a known width";
  SmallVector<int64_t> sizes;
  if (auto listed = attrs.intLists.find("qkv_hidden_sizes"); listed != attrs.intLists.end())
    sizes.assign(listed->second.begin(), listed->second.end());
  else
    sizes.assign(3, weightType.getDimSize(1) / 3);
  if (sizes.size() != 3 || sizes[0] != sizes[1] || sizes[0] + sizes[1] + sizes[2] != weightType.getDimSize(1) ||
      sizes[0] % heads != 0 || sizes[2] % heads != 0)
    return emitError(loc) << "Attention's qkv_hidden_sizes must be three widths (query and key "
                             "equal) that add up to the weights' "
                          << weightType.getDimSize(1) << " columns and divide into " << heads
                          << " heads";
  const int64_t headSize = sizes[0] / heads;
  if (sizes[2] != sizes[0])
    return emitError(loc) << "Attention with a value width other than the query's is not "
                             "supported";
  Value packed = emit("MatMul", {inputs[0], inputs[1]}, loc);
  if (given(2))
    packed = emit("Add", {packed, inputs[2]}, loc);
  auto part = [&](int64_t from, int64_t size) {
    return emit("Slice", {packed, i64({from}), i64({from + size}), i64({-1}), noValue(loc)}, loc);
  };
  Value query = headsFirst(part(0, sizes[0]), heads, headSize, loc);
  Value key = headsFirst(part(sizes[0], sizes[1]), heads, headSize, loc);
  Value value = headsFirst(part(sizes[0] + sizes[1], sizes[2]), heads, headSize, loc);
  if (given(4)) {
    auto half = [&](int64_t index) {
      return emit("Squeeze", {emit("Slice", {inputs[4], i64({index}), i64({index + 1}), i64({0}),
                                             noValue(loc)},
                                   loc),
                              i64({0})},
                  loc);
    };
    key = emit("Concat", {half(0), key}, loc, {intAttr("axis", 2)});
    value = emit("Concat", {half(1), value}, loc, {intAttr("axis", 2)});
  }
  AttentionMasks masks;
  masks.causal = attrs.intOr("unidirectional", 0) != 0;
  masks.maskValue = attrs.floatOr("mask_filter_value", -10000.0f);
  if (given(3) && failed(readPadding(inputs[3], "Attention", loc, masks)))
    return failure();
  Value out = attend(query, key, value, heads, heads, headSize, attrs.floatOr("scale", 0.0f),
                     masks, loc);
  Value present = emit("Concat", {emit("Unsqueeze", {key, i64({0})}, loc),
                                  emit("Unsqueeze", {value, i64({0})}, loc)},
                       loc, {intAttr("axis", 0)});
  results.assign({out, present});
  return success();
}

// MultiHeadAttention: query, key and value [b, s, heads * d] (3-D only), an optional bias
// [q + k + v], key_padding_mask, attention_bias, and past key and value [b, heads, past, d].
LogicalResult GraphImporter::writeMultiHeadAttention(const NodeProto &node,
                                                     const NodeAttributes &attrs, Location loc,
                                                     ArrayRef<Value> inputs,
                                                     SmallVectorImpl<Value> &results) {
  auto given = [&](size_t index) { return isGiven(inputs, index); };
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  if (llvm::StringRef name =
          attrs.unknown({"num_heads", "unidirectional", "mask_filter_value", "scale"});
      !name.empty())
    return emitError(loc) << "MultiHeadAttention has attribute '" << name
                          << "', which dsc does not support";
  const int64_t heads = attrs.intOr("num_heads", 0);
  if (heads <= 0)
    return emitError(loc) << "MultiHeadAttention needs a positive num_heads";
  if (!given(0) || !given(1) || !given(2))
    return emitError(loc) << "MultiHeadAttention needs query, key and value (packed forms are "
                             "not supported)";
  if (given(6) != given(7))
    return emitError(loc) << "MultiHeadAttention needs past_key and past_value together";
  for (size_t unsupported : {8, 9})
    if (given(unsupported))
      return emitError(loc) << "MultiHeadAttention's input " << unsupported
                            << " is not supported";
  SmallVector<int64_t> widths;
  for (size_t index : {0, 1, 2}) {
    auto type = dyn_cast<RankedTensorType>(inputs[index].getType());
    if (!type || type.getRank() != 3 || type.isDynamicDim(2))
      return emitError(loc) << "MultiHeadAttention needs 3-D query, key and value of known "
                               "widths";
    widths.push_back(type.getDimSize(2));
  }
  if (widths[0] != widths[1] || widths[0] % heads != 0 || widths[2] % heads != 0 ||
      widths[2] != widths[0])
    return emitError(loc) << "MultiHeadAttention needs query, key and value of one width that "
                             "divides into "
                          << heads << " heads";
  const int64_t headSize = widths[0] / heads;
  Value query = inputs[0], key = inputs[1], value = inputs[2];
  if (given(3)) {
    auto part = [&](int64_t index) {
      return emit("Slice", {inputs[3], i64({index * widths[0]}), i64({(index + 1) * widths[0]}),
                            i64({0}), noValue(loc)},
                  loc);
    };
    query = emit("Add", {query, part(0)}, loc);
    key = emit("Add", {key, part(1)}, loc);
    value = emit("Add", {value, part(2)}, loc);
  }
  query = headsFirst(query, heads, headSize, loc);
  key = headsFirst(key, heads, headSize, loc);
  value = headsFirst(value, heads, headSize, loc);
  if (given(6)) {
    key = emit("Concat", {inputs[6], key}, loc, {intAttr("axis", 2)});
    value = emit("Concat", {inputs[7], value}, loc, {intAttr("axis", 2)});
  }
  AttentionMasks masks;
  masks.causal = attrs.intOr("unidirectional", 0) != 0;
  masks.maskValue = attrs.floatOr("mask_filter_value", -10000.0f);
  if (given(4) && failed(readPadding(inputs[4], "MultiHeadAttention", loc, masks)))
    return failure();
  if (given(5))
    masks.bias = inputs[5];
  Value out = attend(query, key, value, heads, heads, headSize, attrs.floatOr("scale", 0.0f),
                     masks, loc);
  results.assign({out, key, value});
  return success();
}

} // namespace dsc::onnx_frontend
