// ONNX Runtime's contrib ops (domain com.microsoft) that its GenAI model builder, Olive and
// its transformer optimizer write, written out in primitive ops as FunctionOps.cpp does for
// opset 23's function ops: the recognisers then prove what each computes, as they do for any
// other exporter's graph. The definitions are ONNX Runtime's (docs/ContribOperators.md and
// its CPU kernels); docs/ortgenai.md says where dsc reads one differently and why.
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

// The graph's padding mask behind GroupQueryAttention's seqlens_k, when seqlens_k is what
// the builder computes from it: Cast(ReduceSum(mask, axis 1) - 1). Null otherwise.
Value paddingMaskBehind(Value seqlens) {
  auto throughCasts = [](Value value) {
    while (auto cast = value.getDefiningOp<onnx::CastOp>())
      value = cast.getInput();
    return value;
  };
  auto sub = throughCasts(seqlens).getDefiningOp<onnx::SubOp>();
  if (!sub)
    return {};
  auto one = sub.getB().getDefiningOp<onnx::ConstantOp>();
  auto values = one ? dyn_cast<DenseIntElementsAttr>(one.getValue()) : DenseIntElementsAttr();
  if (!values || values.getNumElements() != 1 || (*values.begin()).getSExtValue() != 1)
    return {};
  auto sum = throughCasts(sub.getA()).getDefiningOp<onnx::ReduceSumOp>();
  if (!sum)
    return {};
  Value mask = throughCasts(sum.getData());
  auto maskType = dyn_cast<RankedTensorType>(mask.getType());
  auto sumType = dyn_cast<RankedTensorType>(sum.getReduced().getType());
  // [batch, total] summed to [batch]: the mask of a graph input, as the builder reads it.
  if (!maskType || !sumType || maskType.getRank() != 2 || sumType.getRank() != 1 ||
      !isa<BlockArgument>(mask))
    return {};
  return mask;
}

} // namespace

LogicalResult GraphImporter::importMicrosoftOp(const NodeProto &node, Location loc,
                                               ArrayRef<Value> inputs) {
  NodeAttributes attrs;
  if (failed(attrs.read(node, loc)))
    return failure();
  const llvm::StringRef op = node.op_type();
  auto given = [&](size_t index) { return isGiven(inputs, index); };
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  auto named = [&](llvm::StringRef name, Attribute value) { return namedAttr(name, value); };
  auto integer = [&](llvm::StringRef name, int64_t value) { return intAttr(name, value); };
  auto refuseOthers = [&](std::initializer_list<llvm::StringRef> known) -> LogicalResult {
    if (llvm::StringRef name = attrs.unknown(known); !name.empty())
      return emitError(loc) << op << " has attribute '" << name
                            << "', which dsc does not support";
    return success();
  };
  SmallVector<Value, 4> results;

  if (op == "SkipSimplifiedLayerNormalization" || op == "SkipLayerNormalization") {
    // input + skip (+ bias), normalised: the residual stream and the next layer's norm in
    // one node. Output 3 is the sum itself (the stream the next skip norm reads).
    const bool simplified = op == "SkipSimplifiedLayerNormalization";
    if (failed(refuseOthers({"epsilon"})))
      return failure();
    if (!given(0) || !given(1) || !given(2))
      return emitError(loc) << op << " needs input, skip and gamma";
    const size_t biasInput = simplified ? 3 : 4;
    Value sum = emit("Add", {inputs[0], inputs[1]}, loc);
    if (given(biasInput))
      sum = emit("Add", {sum, inputs[biasInput]}, loc);
    const float epsilon = attrs.floatOr("epsilon", 1e-5f);
    Value normed;
    if (simplified) {
      normed = rmsNorm(sum, inputs[2], {-1}, epsilon, loc);
    } else {
      normed = emit("LayerNormalization",
                    {sum, inputs[2], given(3) ? inputs[3] : noValue(loc)}, loc,
                    {integer("axis", -1),
                     named("epsilon", builder_.getF32FloatAttr(epsilon))},
                    3, 0);
    }
    // Mean and inverse standard deviation (outputs 1, 2) are training outputs; no exporter
    // reads them.
    results = {normed, Value(), Value(), sum};
  } else if (op == "RotaryEmbedding") {
    // ONNX Runtime's own, older than opset 23's and with its inputs in another order:
    // (input, position_ids, cos_cache, sin_cache).
    if (failed(refuseOthers({"interleaved", "num_heads", "rotary_embedding_dim", "scale",
                             "is_packed_batching"})))
      return failure();
    if (attrs.intOr("is_packed_batching", 0) != 0)
      return emitError(loc) << "RotaryEmbedding with is_packed_batching is not supported";
    if (attrs.floatOr("scale", 1.0f) != 1.0f)
      return emitError(loc) << "RotaryEmbedding with a scale other than 1 is not supported";
    if (!given(0) || !given(1) || !given(2) || !given(3))
      return emitError(loc) << "RotaryEmbedding needs input, position_ids, cos_cache and "
                               "sin_cache";
    Value x = inputs[0];
    auto ranked = dyn_cast<RankedTensorType>(x.getType());
    if (!ranked || (ranked.getRank() != 3 && ranked.getRank() != 4))
      return emitError(loc) << "RotaryEmbedding needs a 3-D or 4-D input of known rank";
    const bool threeD = ranked.getRank() == 3;
    int64_t heads = attrs.intOr("num_heads", 0);
    const int64_t rotaryDim = attrs.intOr("rotary_embedding_dim", 0);
    if (threeD && heads <= 0) {
      // Without num_heads the heads are hidden / (2 * cos_cache's width) (full rotary).
      auto cacheType = dyn_cast<RankedTensorType>(inputs[2].getType());
      if (rotaryDim > 0 || !cacheType || cacheType.getRank() != 2 ||
          cacheType.isDynamicDim(1) || ranked.isDynamicDim(2) ||
          ranked.getDimSize(2) % (2 * cacheType.getDimSize(1)) != 0)
        return emitError(loc) << "RotaryEmbedding of a 3-D input needs num_heads";
      heads = ranked.getDimSize(2) / (2 * cacheType.getDimSize(1));
    }
    // position_ids [b, s], or [1]: the first position of every row.
    Value positions = inputs[1];
    auto positionType = dyn_cast<RankedTensorType>(positions.getType());
    if (positionType && positionType.getRank() == 1) {
      Value length = emit("Squeeze", {emit("Shape", {x}, loc,
                                           {integer("start", threeD ? 1 : 2),
                                            integer("end", threeD ? 2 : 3)}),
                                      i64({0})},
                          loc);
      Value start = emit("Squeeze", {emit("Cast", {positions}, loc,
                                          {named("to", TypeAttr::get(builder_.getI64Type()))}),
                                     i64({0})},
                         loc);
      Value one = emit("Squeeze", {i64({1}), i64({0})}, loc);
      positions = emit("Unsqueeze", {emit("Range", {start, emit("Add", {start, length}, loc), one},
                                          loc),
                                     i64({0})},
                       loc);
    }
    Value cosines = emit("Gather", {inputs[2], positions}, loc, {integer("axis", 0)});
    Value sines = emit("Gather", {inputs[3], positions}, loc, {integer("axis", 0)});
    results.push_back(rotate(x, cosines, sines, heads, threeD, rotaryDim,
                             attrs.intOr("interleaved", 0) != 0, loc));
  } else if (op == "GroupQueryAttention") {
    if (failed(writeGroupQueryAttention(node, attrs, loc, inputs, results)))
      return failure();
  } else if (op == "GatherBlockQuantized") {
    if (failed(writeGatherBlockQuantized(node, attrs, loc, inputs, results)))
      return failure();
  } else if (op == "MatMulNBits") {
    if (failed(writeMatMulNBits(node, attrs, loc, inputs, results)))
      return failure();
  } else {
    return emitError(loc) << "com.microsoft." << op << " is not an op dsc writes out";
  }
  return bindWrittenOut(node, loc, results);
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
  if (llvm::StringRef name = attrs.unknown({"num_heads", "kv_num_heads", "scale", "softcap",
                                             "local_window_size", "do_rotary",
                                             "rotary_interleaved", "smooth_softmax",
                                             "qk_output"});
      !name.empty())
    return emitError(loc) << "GroupQueryAttention has attribute '" << name
                          << "', which dsc does not support";
  if (attrs.intOr("smooth_softmax", 0) != 0)
    return emitError(loc) << "GroupQueryAttention with smooth_softmax (a sink of weight 1) is "
                             "not supported";
  if (attrs.intOr("qk_output", 0) != 0)
    return emitError(loc) << "GroupQueryAttention with qk_output is not supported";
  if (given(11))
    return emitError(loc) << "GroupQueryAttention with head_sink is not supported";
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
  Value mask = paddingMaskBehind(inputs[5]), positions;
  Value cached = mask ? emit("Sub", {dimension(mask, 1), length}, loc)
                 : given(3) ? dimension(inputs[3], 2)
                            : i64({0});
  Value steps = emit("Range", {scalarI64(cached), scalarI64(emit("Add", {cached, length}, loc)),
                               scalarI64(i64({1}))},
                     loc);
  positions = emit("Unsqueeze", {steps, i64({0})}, loc);  // [1, s]
  if (given(9))
    positions = toI64(inputs[9]);
  // [b, s, n * d] -> [b, n, s, d].
  auto headsFirst = [&](Value x, int64_t count) {
    return emit("Transpose", {emit("Reshape", {x, i64({0, 0, count, headSize})}, loc)}, loc,
                {named("perm", builder_.getI64ArrayAttr({0, 2, 1, 3}))});
  };
  query = headsFirst(query, heads);
  key = headsFirst(key, kvHeads);
  value = headsFirst(value, kvHeads);
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
  Value presentKey = key, presentValue = value;
  if (heads != kvHeads) {
    key = repeatKv(key, i64({heads / kvHeads}), loc);
    value = repeatKv(value, i64({heads / kvHeads}), loc);
  }

  auto typed = [&](double number) { return floatScalar(number, element, loc); };
  Value scores = emit("MatMul", {query, emit("Transpose", {key}, loc,
                                             {named("perm",
                                                    builder_.getI64ArrayAttr({0, 1, 3, 2}))})},
                      loc);
  const float scale = attrs.floatOr("scale", 0.0f);
  scores = emit("Mul", {scores, typed(scale != 0.0f ? scale : 1.0 / std::sqrt(double(headSize)))},
                loc);
  if (const float softcap = attrs.floatOr("softcap", 0.0f); softcap > 0) {
    Value cap = typed(softcap);
    scores = emit("Mul", {emit("Tanh", {emit("Div", {scores, cap}, loc)}, loc), cap}, loc);
  }
  if (given(10))
    scores = emit("Add", {scores, inputs[10]}, loc);

  // Query i (at past + i) sees keys j <= past + i, the last local_window_size of them when
  // that is set (keys j > past + i - local_window_size, as onnxruntime's kernel computes:
  // test/node-tests/com.microsoft), and only valid keys.
  Value total = scalarI64(dimension(key, 2));
  Value past = emit("Sub", {total, scalarI64(length)}, loc);
  Value one = scalarI64(i64({1}));
  Value rows = emit("Unsqueeze", {emit("Range", {past, total, one}, loc), i64({1})}, loc);
  Value cols = emit("Unsqueeze", {emit("Range", {scalarI64(i64({0})), total, one}, loc),
                                  i64({0})},
                    loc);
  Value allowed = emit("LessOrEqual", {cols, rows}, loc);  // [s, total]
  if (const int64_t window = attrs.intOr("local_window_size", -1); window >= 0)
    allowed = emit("And", {allowed, emit("Greater",
                                         {cols, emit("Sub", {rows, i64({window})}, loc)}, loc)},
                   loc);
  if (!mask) {
    Value lengths = emit("Add", {toI64(inputs[5]), i64({1})}, loc);
    mask = emit("Less", {cols, emit("Unsqueeze", {lengths, i64({1})}, loc)}, loc);  // [b, total]
  }
  Value valid = emit("Not", {emit("Equal", {toI64(mask), i64({0})}, loc)}, loc);
  allowed = emit("And", {allowed, emit("Unsqueeze", {valid, i64({1, 2})}, loc)}, loc);
  const double masked = -std::numeric_limits<double>::infinity();
  scores = emit("Add", {scores, emit("Where", {allowed, typed(0.0), typed(masked)}, loc)}, loc);
  Value probabilities = emit("Softmax", {scores}, loc, {integer("axis", -1)});
  // A row with every key masked (a padded query) gives zeros, not NaN.
  probabilities =
      emit("Where", {emit("IsNaN", {probabilities}, loc), typed(0.0), probabilities}, loc);
  Value out = emit("MatMul", {probabilities, value}, loc);
  out = emit("Reshape", {emit("Transpose", {out}, loc,
                              {named("perm", builder_.getI64ArrayAttr({0, 2, 1, 3}))}),
                         i64({0, 0, heads * headSize})},
             loc);
  results.assign({out, presentKey, presentValue});
  return success();
}

// GatherBlockQuantized: rows of a table of 4-bit codes (the builder's tied embedding reads the
// LM head's MatMulNBits codes through a Reshape to [vocab, hidden / 2]), dequantized. The
// table becomes a float weight [rows, hidden] read from those codes, so that the lookup is a
// Gather of a weight as any exporter's embedding.
LogicalResult GraphImporter::writeGatherBlockQuantized(const NodeProto &node,
                                                       const NodeAttributes &attrs, Location loc,
                                                       ArrayRef<Value> inputs,
                                                       SmallVectorImpl<Value> &results) {
  auto given = [&](size_t index) { return isGiven(inputs, index); };
  if (llvm::StringRef name = attrs.unknown({"bits", "block_size", "gather_axis", "quantize_axis"});
      !name.empty())
    return emitError(loc) << "GatherBlockQuantized has attribute '" << name
                          << "', which dsc does not support";
  if (attrs.intOr("gather_axis", 0) != 0 || attrs.intOr("quantize_axis", 1) != 1)
    return emitError(loc) << "GatherBlockQuantized is supported with gather_axis 0 and "
                             "quantize_axis 1 (rows of a table), not "
                          << attrs.intOr("gather_axis", 0) << " and "
                          << attrs.intOr("quantize_axis", 1);
  if (!given(0) || !given(1) || !given(2))
    return emitError(loc) << "GatherBlockQuantized needs data, indices and scales";
  // The codes: an initializer [rows, bytes per row], or one reshaped to that.
  auto dataType = dyn_cast<RankedTensorType>(inputs[0].getType());
  const WeightRecord *codes = store_.lookup(weightKey(node.input(0)));
  if (auto reshape = inputs[0].getDefiningOp<onnx::ReshapeOp>())
    if (auto weight = reshape.getData().getDefiningOp<onnx::WeightOp>())
      codes = store_.lookup(weight.getName());
  if (!codes || !dataType || !dataType.hasStaticShape() || dataType.getRank() != 2 ||
      !dataType.getElementType().isUnsignedInteger(8))
    return emitError(loc) << "GatherBlockQuantized needs its data as a uint8 [rows, bytes] "
                             "initializer (or one reshaped to that)";
  NBitsCoding coding;
  coding.bits = attrs.intOr("bits", 4);
  coding.blockSize = attrs.intOr("block_size", 128);
  coding.rows = true;
  coding.n = dataType.getDimSize(0);
  coding.k = coding.bits > 0 && coding.bits <= 8 ? dataType.getDimSize(1) * 8 / coding.bits : 0;
  coding.codes = codes;
  auto initializer = [&](size_t index) -> const WeightRecord * {
    return given(index) ? store_.lookup(weightKey(node.input(static_cast<int>(index))))
                        : nullptr;
  };
  coding.scales = initializer(2);
  coding.zeroPoints = initializer(3);
  if (!coding.scales || (given(3) && !coding.zeroPoints))
    return emitError(loc) << "GatherBlockQuantized needs scales and zero_points as initializers";
  if (std::string why = checkNBitsCoding(coding); !why.empty())
    return emitError(loc) << "GatherBlockQuantized: " << why;
  if (zeroPointsAreDefault(coding))
    coding.zeroPoints = nullptr;
  Type element = cast<TensorType>(inputs[2].getType()).getElementType();
  int32_t floatType = coding.scales->onnxType;
  const std::string name = codes->name + ".rows";
  if (!store_.lookup(name)) {
    std::string error;
    if (!store_.addNBitsWeight(name, coding, floatType, error))
      return emitError(loc) << "GatherBlockQuantized: " << error;
  }
  Value table = onnx::WeightOp::create(
      builder_, loc, RankedTensorType::get({coding.n, coding.k}, element), name);
  results.push_back(emit("Gather", {table, inputs[1]}, loc,
                         {intAttr("axis", 0)}));
  return success();
}

// MatMulNBits: A [..., K] times the weight that B's codes stand for (NBitsWeights.h), plus an
// optional bias. The product is a MatMul of a float weight [K, N], as any exporter's linear
// layer, so recognition, tensor parallelism and fusion read it as they read one; only its
// bytes differ (the plan writer keeps int4 codes as they are).
LogicalResult GraphImporter::writeMatMulNBits(const NodeProto &node, const NodeAttributes &attrs,
                                              Location loc, ArrayRef<Value> inputs,
                                              SmallVectorImpl<Value> &results) {
  auto given = [&](size_t index) { return isGiven(inputs, index); };
  if (llvm::StringRef name = attrs.unknown({"K", "N", "bits", "block_size", "accuracy_level"});
      !name.empty())
    return emitError(loc) << "MatMulNBits has attribute '" << name
                          << "', which dsc does not support";
  for (llvm::StringRef required : {"K", "N", "block_size"})
    if (!attrs.ints.count(required))
      return emitError(loc) << "MatMulNBits lacks its required attribute '" << required << "'";
  if (!given(0) || !given(1) || !given(2))
    return emitError(loc) << "MatMulNBits needs A, B and scales";
  // The tensors behind B, scales, zero_points and g_idx: initializers, read as stored.
  std::string missing;
  auto initializer = [&](int index) -> const WeightRecord * {
    if (!given(index))
      return nullptr;
    const WeightRecord *record = store_.lookup(weightKey(node.input(index)));
    if (!record && missing.empty())
      missing = node.input(index);
    return record;
  };
  NBitsCoding coding;
  coding.k = attrs.intOr("K", 0);
  coding.n = attrs.intOr("N", 0);
  coding.bits = attrs.intOr("bits", 4);
  coding.blockSize = attrs.intOr("block_size", 0);
  coding.codes = initializer(1);
  coding.scales = initializer(2);
  coding.zeroPoints = initializer(3);
  coding.groupIndex = initializer(4);
  if (!missing.empty())
    return emitError(loc) << "MatMulNBits input '" << missing
                          << "' is computed in the graph; dsc reads B, scales, zero_points "
                             "and g_idx only as initializers";
  if (std::string why = checkNBitsCoding(coding); !why.empty())
    return emitError(loc) << "MatMulNBits: " << why;
  if (zeroPointsAreDefault(coding))
    coding.zeroPoints = nullptr;
  if (groupIndexIsDefault(coding))
    coding.groupIndex = nullptr;

  Value input = inputs[0];
  auto inputType = dyn_cast<RankedTensorType>(input.getType());
  Type element = cast<TensorType>(input.getType()).getElementType();
  int32_t floatType = element.isF32()    ? ::onnx::TensorProto::FLOAT
                      : element.isF16()  ? ::onnx::TensorProto::FLOAT16
                      : element.isBF16() ? ::onnx::TensorProto::BFLOAT16
                                         : 0;
  if (!floatType)
    return emitError(loc) << "MatMulNBits needs an f32, f16 or bf16 input A";
  if (inputType && inputType.getRank() >= 1 && !inputType.isDynamicDim(inputType.getRank() - 1) &&
      inputType.getDimSize(inputType.getRank() - 1) != coding.k)
    return emitError(loc) << "MatMulNBits: A has " << inputType.getDimSize(inputType.getRank() - 1)
                          << " features, but K is " << coding.k;
  // One weight per B: two nodes that share B (a tied head) share it.
  const std::string name = weightKey(node.input(1)) + ".dequantized";
  if (!store_.lookup(name)) {
    std::string error;
    if (!store_.addNBitsWeight(name, coding, floatType, error))
      return emitError(loc) << "MatMulNBits: " << error;
  }
  Value weight = onnx::WeightOp::create(
      builder_, loc, RankedTensorType::get({coding.k, coding.n}, element), name);
  Value product = emit("MatMul", {input, weight}, loc);
  if (given(5))
    product = emit("Add", {product, inputs[5]}, loc);
  results.push_back(product);
  return success();
}

} // namespace dsc::onnx_frontend
