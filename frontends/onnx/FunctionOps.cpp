// Opset 23's function ops, Attention, RotaryEmbedding and RMSNormalization, written out in
// the primitive ops their ONNX definitions are made of (onnx/reference/ops: op_attention,
// op_rotary_embedding, op_rms_normalization). The dynamo exporter at opset 23 writes sdpa,
// rotary embeddings and RMS norms as these ops; written out, they are the graph an
// exporter that spelled them out would have given, so the recognisers (which prove what a
// subgraph computes on a probe) and the generic path's kernels need nothing new for them.
// ReduceLogSumExp (torch.logsumexp: Granite-SWA's attention sinks) likewise, shifted by the
// maximum as a careful implementation computes it.
#include "frontends/onnx/GraphImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace dsc::onnx_frontend {

LogicalResult NodeAttributes::read(const NodeProto &node, Location loc) {
  for (const auto &attr : node.attribute()) {
    if (attr.type() == AttributeProto::INT)
      ints[attr.name()] = attr.i();
    else if (attr.type() == AttributeProto::FLOAT)
      floats[attr.name()] = attr.f();
    else if (attr.type() == AttributeProto::INTS)
      intLists[attr.name()].assign(attr.ints().begin(), attr.ints().end());
    else if (attr.type() == AttributeProto::STRING)
      strings[attr.name()] = attr.s();
    else
      return emitError(loc) << node.op_type() << " attribute '" << attr.name()
                            << "' has an unexpected type";
  }
  return success();
}

int64_t NodeAttributes::intOr(llvm::StringRef name, int64_t fallback) const {
  auto it = ints.find(name);
  return it == ints.end() ? fallback : it->second;
}

llvm::StringRef NodeAttributes::unknown(std::initializer_list<llvm::StringRef> known) const {
  auto find = [&](const auto &table) -> llvm::StringRef {
    for (const auto &entry : table)
      if (!llvm::is_contained(known, entry.getKey()))
        return entry.getKey();
    return "";
  };
  if (llvm::StringRef name = find(ints); !name.empty())
    return name;
  if (llvm::StringRef name = find(floats); !name.empty())
    return name;
  if (llvm::StringRef name = find(strings); !name.empty())
    return name;
  return find(intLists);
}

llvm::StringRef NodeAttributes::stringOr(llvm::StringRef name, llvm::StringRef fallback) const {
  auto it = strings.find(name);
  return it == strings.end() ? fallback : llvm::StringRef(it->second);
}

float NodeAttributes::floatOr(llvm::StringRef name, float fallback) const {
  auto it = floats.find(name);
  return it == floats.end() ? fallback : it->second;
}

Value GraphImporter::emit(llvm::StringRef op, ArrayRef<Value> operands, Location loc,
                          ArrayRef<NamedAttribute> attributes, unsigned numResults,
                          unsigned result) {
  OperationState state(loc, ("onnx." + op).str());
  NamedAttrList attrs(attributes);
  for (unsigned i = 0; i < numResults; ++i)
    state.addTypes(inferResultType(op, operands, attrs, i));
  state.addOperands(operands);
  state.addAttributes(attrs);
  return builder_.create(state)->getResult(result);
}

Value GraphImporter::floatScalar(double value, Type element, Location loc) {
  auto type = RankedTensorType::get({}, element);
  return onnx::ConstantOp::create(
      builder_, loc, type,
      DenseElementsAttr::get(type, ArrayRef<Attribute>{FloatAttr::get(element, value)}));
}

Value GraphImporter::rmsNorm(Value x, Value scale, ArrayRef<int64_t> axes, float epsilon,
                             Location loc) {
  auto named = [&](llvm::StringRef name, Attribute value) {
    return NamedAttribute(builder_.getStringAttr(name), value);
  };
  auto f32 = [&](double value) { return floatScalar(value, builder_.getF32Type(), loc); };
  Type element = cast<TensorType>(x.getType()).getElementType();
  if (!element.isF32())
    x = emit("Cast", {x}, loc, {named("to", TypeAttr::get(builder_.getF32Type()))});
  Value squared = emit("Pow", {x, f32(2.0f)}, loc);
  Value mean = emit("ReduceMean", {squared, constantI64(axes, loc)}, loc,
                    {named("keepdims", builder_.getI64IntegerAttr(1))});
  Value rms = emit("Sqrt", {emit("Add", {mean, f32(epsilon)}, loc)}, loc);
  Value normed = emit("Mul", {x, emit("Reciprocal", {rms}, loc)}, loc);
  if (!element.isF32())
    normed = emit("Cast", {normed}, loc, {named("to", TypeAttr::get(element))});
  return emit("Mul", {normed, scale}, loc);
}

Value GraphImporter::rotate(Value x, Value cosines, Value sines, int64_t heads, bool threeD,
                          int64_t rotaryDim, bool interleaved, Location loc) {
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  auto axisAttr = [&](int64_t axis) {
    return NamedAttribute(builder_.getStringAttr("axis"), builder_.getI64IntegerAttr(axis));
  };
  // [b, s, d/2] against [b, s, heads, d] (3-D, reshaped) or [b, heads, s, d] (4-D).
  if (threeD)
    x = emit("Reshape", {x, i64({0, 0, heads, -1})}, loc);
  Value headAxis = i64({threeD ? 2 : 1});
  cosines = emit("Unsqueeze", {cosines, headAxis}, loc);
  sines = emit("Unsqueeze", {sines, headAxis}, loc);
  const int64_t maxIndex = std::numeric_limits<int64_t>::max();
  Value last = i64({-1});
  Value rotated = x, passed;
  if (rotaryDim > 0) {
    rotated = emit("Slice", {x, i64({0}), i64({rotaryDim}), last, noValue(loc)}, loc);
    passed = emit("Slice", {x, i64({rotaryDim}), i64({maxIndex}), last, noValue(loc)}, loc);
  }
  Value first, second;
  if (interleaved) {
    first = emit("Slice", {rotated, i64({0}), i64({maxIndex}), last, i64({2})}, loc);
    second = emit("Slice", {rotated, i64({1}), i64({maxIndex}), last, i64({2})}, loc);
  } else {
    first = emit("Split", {rotated, noValue(loc)}, loc, {axisAttr(-1)}, 2, 0);
    second = first.getDefiningOp()->getResult(1);
  }
  Value real = emit("Sub", {emit("Mul", {cosines, first}, loc),
                            emit("Mul", {sines, second}, loc)}, loc);
  Value imaginary = emit("Add", {emit("Mul", {sines, first}, loc),
                                 emit("Mul", {cosines, second}, loc)}, loc);
  Value turned;
  if (interleaved) {
    // (real, imaginary) pairs back in place: [.., d/2, 2] -> [.., d].
    Value pairs = emit("Concat", {emit("Unsqueeze", {real, last}, loc),
                                  emit("Unsqueeze", {imaginary, last}, loc)},
                       loc, {axisAttr(-1)});
    turned = emit("Reshape", {pairs, i64({0, 0, 0, -1})}, loc);
  } else {
    turned = emit("Concat", {real, imaginary}, loc, {axisAttr(-1)});
  }
  if (passed)
    turned = emit("Concat", {turned, passed}, loc, {axisAttr(-1)});
  if (threeD)
    turned = emit("Reshape", {turned, i64({0, 0, -1})}, loc);
  return turned;
}

Value GraphImporter::repeatKv(Value x, Value groups, Location loc) {
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  auto axisAttr = [&](int64_t axis) {
    return NamedAttribute(builder_.getStringAttr("axis"), builder_.getI64IntegerAttr(axis));
  };
  Value shape = emit("Shape", {x}, loc);
  Value ones = i64({1, 1});
  Value wide = emit("Expand", {emit("Unsqueeze", {x, i64({2})}, loc),
                               emit("Concat", {ones, groups, ones}, loc, {axisAttr(0)})},
                    loc);
  Value batch = emit("Slice", {shape, i64({0}), i64({1}), noValue(loc), noValue(loc)}, loc);
  Value heads = emit("Mul", {emit("Slice", {shape, i64({1}), i64({2}), noValue(loc),
                                            noValue(loc)}, loc),
                             groups}, loc);
  Value rest = emit("Slice", {shape, i64({2}), i64({4}), noValue(loc), noValue(loc)}, loc);
  return emit("Reshape", {wide, emit("Concat", {batch, heads, rest}, loc, {axisAttr(0)})},
              loc);
}

LogicalResult GraphImporter::importFunctionOp(const NodeProto &node, Location loc,
                                              ArrayRef<Value> inputs) {
  NodeAttributes attrs;
  if (failed(attrs.read(node, loc)))
    return failure();
  auto intAttr = [&](llvm::StringRef name, int64_t fallback) {
    return attrs.intOr(name, fallback);
  };
  auto given = [&](size_t index) {
    return index < inputs.size() && !isa<NoneType>(inputs[index].getType());
  };
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  // A scalar of a float type (the inputs' own: fp16 and bf16 graphs keep their type).
  auto scalar = [&](double value, Type element) { return floatScalar(value, element, loc); };
  auto named = [&](llvm::StringRef name, Attribute value) {
    return NamedAttribute(builder_.getStringAttr(name), value);
  };
  auto axisAttr = [&](int64_t axis) { return named("axis", builder_.getI64IntegerAttr(axis)); };
  auto elementOf = [](Value value) { return cast<TensorType>(value.getType()).getElementType(); };
  SmallVector<Value, 4> results;

  if (node.op_type() == "ReduceLogSumExp") {
    for (const auto &[name, value] : attrs.ints)
      if (name != "keepdims" && name != "noop_with_empty_axes")
        return emitError(loc) << "ReduceLogSumExp has attribute '" << name
                              << "', which dsc does not support";
    if (!given(0) || !isa<FloatType>(elementOf(inputs[0])))
      return emitError(loc) << "ReduceLogSumExp needs a float input";
    // The axes: an input from opset 18, an attribute before; none: every axis (or none with
    // noop_with_empty_axes, which leaves the input as it is: log(exp(x)) = x below).
    auto listed = attrs.intLists.find("axes");
    if (listed != attrs.intLists.end() && given(1))
      return emitError(loc) << "ReduceLogSumExp has axes both as attribute and as input";
    Value axes = given(1) ? inputs[1]
                 : listed != attrs.intLists.end() ? i64(listed->second)
                                                  : noValue(loc);
    auto reduce = [&](llvm::StringRef op, Value data, int64_t keep) {
      return emit(op, {data, axes}, loc,
                  {named("keepdims", builder_.getI64IntegerAttr(keep)),
                   named("noop_with_empty_axes",
                         builder_.getI64IntegerAttr(intAttr("noop_with_empty_axes", 0)))});
    };
    // m + log Σ exp(x - m), m the maximum, so that exp cannot overflow; m is taken as 0
    // where it is not finite, so that a slice of -inf gives log 0 = -inf, not NaN.
    Value x = inputs[0];
    Type element = elementOf(x);
    Value maximum = reduce("ReduceMax", x, 1);
    Value finite = emit("Less", {emit("Abs", {maximum}, loc),
                                 scalar(std::numeric_limits<double>::infinity(), element)},
                        loc);
    Value shift = emit("Where", {finite, maximum, scalar(0.0, element)}, loc);
    Value sum = reduce("ReduceSum", emit("Exp", {emit("Sub", {x, shift}, loc)}, loc),
                       intAttr("keepdims", 1));
    // The shift with the result's shape: its reduced axes are already 1.
    Value shifted = intAttr("keepdims", 1) ? shift : reduce("ReduceMax", shift, 0);
    results.push_back(emit("Add", {emit("Log", {sum}, loc), shifted}, loc));
  } else if (node.op_type() == "RMSNormalization" ||
             node.op_type() == "SimplifiedLayerNormalization") {
    for (const auto &[name, value] : attrs.ints)
      if (name != "axis" && name != "stash_type")
        return emitError(loc) << node.op_type() << " has attribute '" << name
                              << "', which dsc does not support";
    if (!given(0) || !given(1))
      return emitError(loc) << node.op_type() << " needs X and scale";
    if (intAttr("stash_type", 1) != 1)
      return emitError(loc) << node.op_type() << " with stash_type "
                            << intAttr("stash_type", 1) << " is not supported (only 1, float)";
    auto epsilon = attrs.floats.find("epsilon");
    float eps = epsilon == attrs.floats.end() ? 1e-5f : epsilon->second;
    // Over the dimensions from `axis` on: [-1] for the last, else every one from it.
    int64_t axis = intAttr("axis", -1);
    SmallVector<int64_t> axes;
    auto ranked = dyn_cast<RankedTensorType>(inputs[0].getType());
    if (axis == -1) {
      axes.push_back(-1);
    } else if (ranked) {
      int64_t rank = ranked.getRank(), from = axis < 0 ? axis + rank : axis;
      if (from < 0 || from >= rank)
        return emitError(loc) << node.op_type() << " axis " << axis << " is outside rank " << rank;
      for (int64_t d = from; d < rank; ++d)
        axes.push_back(d);
    } else {
      return emitError(loc) << node.op_type() << " over axis " << axis
                            << " needs an input of known rank";
    }
    results.push_back(rmsNorm(inputs[0], inputs[1], axes, eps, loc));
  } else if (node.op_type() == "RotaryEmbedding") {
    if (!given(0) || !given(1) || !given(2))
      return emitError(loc) << "RotaryEmbedding needs X, cos_cache and sin_cache";
    Value x = inputs[0], cosines = inputs[1], sines = inputs[2];
    // A 3-D input [b, s, heads * d] needs num_heads; a 4-D one [b, heads, s, d] may have it.
    // The type tells which; without one, num_heads says 3-D.
    const int64_t heads = intAttr("num_heads", 0);
    auto ranked = dyn_cast<RankedTensorType>(x.getType());
    if (ranked && ranked.getRank() != 3 && ranked.getRank() != 4)
      return emitError(loc) << "RotaryEmbedding needs a 3-D or 4-D input, not rank "
                            << ranked.getRank();
    const bool threeD = ranked ? ranked.getRank() == 3 : heads > 0;
    if (threeD && heads <= 0)
      return emitError(loc) << "RotaryEmbedding of a 3-D input needs num_heads";
    if (given(3)) {
      cosines = emit("Gather", {cosines, inputs[3]}, loc, {axisAttr(0)});
      sines = emit("Gather", {sines, inputs[3]}, loc, {axisAttr(0)});
    }
    results.push_back(rotate(x, cosines, sines, heads, threeD,
                             intAttr("rotary_embedding_dim", 0), intAttr("interleaved", 0) != 0,
                             loc));
  } else if (node.op_type() == "Attention") {
    for (const auto &[name, value] : attrs.ints)
      if (!llvm::is_contained({"is_causal", "kv_num_heads", "q_num_heads",
                               "qk_matmul_output_mode", "softmax_precision"},
                              name))
        return emitError(loc) << "Attention has attribute '" << name
                              << "', which dsc does not support";
    if (!given(0) || !given(1) || !given(2))
      return emitError(loc) << "Attention needs Q, K and V";
    if (given(4) != given(5))
      return emitError(loc) << "Attention needs past_key and past_value together";
    Value q = inputs[0], k = inputs[1], v = inputs[2];
    Type element = elementOf(q);
    if (!isa<FloatType>(element))
      return emitError(loc) << "Attention needs float Q, K and V";
    auto typed = [&](double value) { return scalar(value, element); };
    // 3-D inputs [b, s, heads * d] come with the head counts, 4-D ones [b, heads, s, d] without.
    const int64_t qHeads = intAttr("q_num_heads", 0), kvHeads = intAttr("kv_num_heads", 0);
    if ((qHeads > 0) != (kvHeads > 0))
      return emitError(loc) << "Attention needs both q_num_heads and kv_num_heads, or neither";
    const int64_t rank = qHeads > 0 ? 3 : 4;
    for (Value operand : {q, k, v})
      if (auto ranked = dyn_cast<RankedTensorType>(operand.getType());
          ranked && ranked.getRank() != rank)
        return emitError(loc) << "Attention needs 3-D Q, K and V with q_num_heads and "
                                 "kv_num_heads, or 4-D ones without; one is of rank "
                              << ranked.getRank();
    // [b, s, n * d] -> [b, n, s, d].
    auto headsFirst = [&](Value x, int64_t heads) {
      Value split = emit("Reshape", {x, i64({0, 0, heads, -1})}, loc);
      return emit("Transpose", {split}, loc,
                  {named("perm", builder_.getI64ArrayAttr({0, 2, 1, 3}))});
    };
    if (rank == 3) {
      q = headsFirst(q, qHeads);
      k = headsFirst(k, kvHeads);
      v = headsFirst(v, kvHeads);
    }
    if (given(4)) {
      k = emit("Concat", {inputs[4], k}, loc, {axisAttr(2)});
      v = emit("Concat", {inputs[5], v}, loc, {axisAttr(2)});
    }
    Value presentKey = k, presentValue = v;
    // Grouped-query attention: each KV head serves q_heads / kv_heads query heads in a row.
    // The group is the attributes' for 3-D inputs, the types' for 4-D ones, else computed.
    Value groups;
    if (rank == 3) {
      if (qHeads % kvHeads != 0)
        return emitError(loc) << "Attention's q_num_heads " << qHeads
                              << " is not a multiple of kv_num_heads " << kvHeads;
      if (qHeads != kvHeads)
        groups = i64({qHeads / kvHeads});
    } else {
      auto qType = dyn_cast<RankedTensorType>(q.getType());
      auto kType = dyn_cast<RankedTensorType>(k.getType());
      if (qType && kType && !qType.isDynamicDim(1) && !kType.isDynamicDim(1)) {
        if (qType.getDimSize(1) % kType.getDimSize(1) != 0)
          return emitError(loc) << "Attention's query heads are not a multiple of its KV heads";
        if (qType.getDimSize(1) != kType.getDimSize(1))
          groups = i64({qType.getDimSize(1) / kType.getDimSize(1)});
      } else {
        auto headsOf = [&](Value x) {
          return emit("Shape", {x}, loc, {named("start", builder_.getI64IntegerAttr(1)),
                                          named("end", builder_.getI64IntegerAttr(2))});
        };
        groups = emit("Div", {headsOf(q), headsOf(k)}, loc);
      }
    }
    if (groups) {
      k = repeatKv(k, groups, loc);
      v = repeatKv(v, groups, loc);
    }
    // scale · Q·Kᵀ: 1/sqrt(head_size) unless given.
    Value scores = emit("MatMul", {q, emit("Transpose", {k}, loc,
                                           {named("perm", builder_.getI64ArrayAttr({0, 1, 3, 2}))})},
                        loc);
    auto scaleAttr = attrs.floats.find("scale");
    Value scale;
    if (scaleAttr != attrs.floats.end()) {
      scale = typed(scaleAttr->second);
    } else {
      Value headSize = emit("Cast", {emit("Shape", {q}, loc, {named("start", builder_.getI64IntegerAttr(3))})},
                            loc, {named("to", TypeAttr::get(element))});
      scale = emit("Reciprocal", {emit("Sqrt", {headSize}, loc)}, loc);
    }
    scores = emit("Mul", {scores, scale}, loc);
    auto softcap = attrs.floats.find("softcap");
    if (softcap != attrs.floats.end() && softcap->second > 0) {
      Value cap = typed(softcap->second);
      scores = emit("Mul", {emit("Tanh", {emit("Div", {scores, cap}, loc)}, loc), cap}, loc);
    }
    Value capped = scores;
    const double masked = -std::numeric_limits<double>::infinity();
    Value bias;
    if (given(3)) {
      Value mask = inputs[3];
      bias = elementOf(mask).isInteger(1)
                 ? emit("Where", {mask, typed(0.0), typed(masked)}, loc)
                 : mask;
    }
    if (intAttr("is_causal", 0) != 0) {
      // Query i attends keys j <= past + i (0 past without a cache: top-left aligned).
      auto length = [&](Value x) {
        return emit("Shape", {x}, loc, {named("start", builder_.getI64IntegerAttr(2)),
                                        named("end", builder_.getI64IntegerAttr(3))});
      };
      Value squeeze = i64({0});
      auto scalarOf = [&](Value vector) { return emit("Squeeze", {vector, squeeze}, loc); };
      Value past = given(4) ? scalarOf(length(inputs[4])) : scalarOf(i64({0}));
      Value one = scalarOf(i64({1}));
      Value rows = emit("Range", {past, emit("Add", {past, scalarOf(length(q))}, loc), one}, loc);
      Value cols = emit("Range", {scalarOf(i64({0})), scalarOf(length(k)), one}, loc);
      Value allowed = emit("LessOrEqual", {emit("Unsqueeze", {cols, i64({0})}, loc),
                                           emit("Unsqueeze", {rows, i64({1})}, loc)}, loc);
      Value causal = emit("Where", {allowed, typed(0.0), typed(masked)}, loc);
      bias = bias ? emit("Add", {bias, causal}, loc) : causal;
    }
    if (bias)
      scores = emit("Add", {scores, bias}, loc);
    Value withBias = scores;
    Value probabilities = emit("Softmax", {scores}, loc, {axisAttr(-1)});
    // A row with every key masked gives zeros (its softmax is NaN): sdpa's guard.
    probabilities = emit("Where", {emit("IsNaN", {probabilities}, loc), typed(0.0),
                                   probabilities},
                         loc);
    // qk_matmul_output: the scaled (and capped) scores, with the bias, or the probabilities.
    switch (intAttr("qk_matmul_output_mode", 0)) {
    case 0:
    case 1: results.push_back(capped); break;
    case 2: results.push_back(withBias); break;
    case 3: results.push_back(probabilities); break;
    default:
      return emitError(loc) << "Attention's qk_matmul_output_mode "
                            << intAttr("qk_matmul_output_mode", 0) << " is not 0 to 3";
    }
    Value out = emit("MatMul", {probabilities, v}, loc);
    if (rank == 3)
      out = emit("Reshape", {emit("Transpose", {out}, loc,
                                  {named("perm", builder_.getI64ArrayAttr({0, 2, 1, 3}))}),
                             i64({0, 0, -1})},
                 loc);
    results.insert(results.begin(), {out, presentKey, presentValue});
  } else {
    return emitError(loc) << node.op_type() << " is not a function op dsc writes out";
  }
  return bindWrittenOut(node, loc, results);
}

LogicalResult GraphImporter::bindWrittenOut(const NodeProto &node, Location loc,
                                            ArrayRef<Value> results) {
  for (int i = 0; i < node.output_size(); ++i) {
    if (node.output(i).empty())
      continue;
    if (i >= static_cast<int>(results.size()) || !results[i])
      return emitError(loc) << node.op_type() << " output " << i << " is not supported";
    // The written-out ops know less of their shapes than the model may declare, and a
    // later function op reads the rank (Gemma-3's rotary after its RMS norm).
    auto type = cast<TensorType>(results[i].getType());
    if (TensorType declared = declaredType(node.output(i));
        declared && declared.hasRank() && !type.hasRank() &&
        declared.getElementType() == type.getElementType())
      Value(results[i]).setType(declared);
    if (failed(bind(node.output(i), results[i], loc)))
      return failure();
  }
  return success();
}

} // namespace dsc::onnx_frontend
