// ONNX Runtime's contrib ops (domain com.microsoft) that its GenAI model builder, Olive and
// its transformer optimizer write, written out in primitive ops as FunctionOps.cpp does for
// opset 23's function ops: the recognisers then prove what each computes, as they do for any
// other exporter's graph. The definitions are ONNX Runtime's (docs/ContribOperators.md and
// its CPU kernels); docs/ortgenai.md says where dsc reads one differently and why.
#include "frontends/onnx/GraphImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace dsc::onnx_frontend {

namespace {

bool isGiven(ArrayRef<Value> inputs, size_t index) {
  return index < inputs.size() && !isa<NoneType>(inputs[index].getType());
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
  } else if (op == "Attention") {
    if (failed(writeAttention(node, attrs, loc, inputs, results)))
      return failure();
  } else if (op == "MultiHeadAttention") {
    if (failed(writeMultiHeadAttention(node, attrs, loc, inputs, results)))
      return failure();
  } else if (op == "BiasGelu") {
    // Gelu (erf) of input + bias.
    if (failed(refuseOthers({})))
      return failure();
    if (!given(0) || !given(1))
      return emitError(loc) << "BiasGelu needs input and bias";
    results.push_back(emit("Gelu", {emit("Add", {inputs[0], inputs[1]}, loc)}, loc,
                           {named("approximate", builder_.getStringAttr("none"))}));
  } else if (op == "EmbedLayerNormalization") {
    if (failed(writeEmbedLayerNormalization(node, attrs, loc, inputs, results)))
      return failure();
  } else if (op == "GatherBlockQuantized") {
    if (failed(writeGatherBlockQuantized(node, attrs, loc, inputs, results)))
      return failure();
  } else if (op == "MatMulNBits") {
    if (failed(writeMatMulNBits(node, attrs, loc, inputs, results)))
      return failure();
  } else if (op == "MoE" || op == "QMoE") {
    if (failed(writeMoe(node, attrs, loc, inputs, results)))
      return failure();
  } else {
    return emitError(loc) << "com.microsoft." << op << " is not an op dsc writes out";
  }
  return bindWrittenOut(node, loc, results);
}

// EmbedLayerNormalization (the transformer optimizer's BERT embeddings): LayerNorm(word[ids]
// + position[position_ids, else 0 .. s-1] + segment[segment_ids]); mask_index is each row's
// count of valid tokens (ReduceSum of the mask, int32), zeros where there is no mask (as
// onnxruntime's); output 2 the sum before the norm.
LogicalResult GraphImporter::writeEmbedLayerNormalization(const NodeProto &node,
                                                          const NodeAttributes &attrs,
                                                          Location loc, ArrayRef<Value> inputs,
                                                          SmallVectorImpl<Value> &results) {
  auto given = [&](size_t index) { return isGiven(inputs, index); };
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  if (llvm::StringRef name = attrs.unknown({"epsilon", "mask_index_type"}); !name.empty())
    return emitError(loc) << "EmbedLayerNormalization has attribute '" << name
                          << "', which dsc does not support";
  if (attrs.intOr("mask_index_type", 1) != 1)
    return emitError(loc) << "EmbedLayerNormalization with mask_index_type "
                          << attrs.intOr("mask_index_type", 1) << " is not supported (only 1)";
  for (size_t required : {0, 2, 3, 5, 6})
    if (!given(required))
      return emitError(loc) << "EmbedLayerNormalization needs input_ids, word_embedding, "
                               "position_embedding, gamma and beta";
  if (given(1) != given(4))
    return emitError(loc) << "EmbedLayerNormalization needs segment_ids and "
                             "segment_embedding together";
  auto toI64 = [&](Value value) {
    return emit("Cast", {value}, loc, {namedAttr("to", TypeAttr::get(builder_.getI64Type()))});
  };
  auto lookup = [&](Value table, Value ids) {
    return emit("Gather", {table, ids}, loc, {intAttr("axis", 0)});
  };
  Value ids = toI64(inputs[0]);
  Value length = emit("Shape", {ids}, loc, {intAttr("start", 1), intAttr("end", 2)});
  auto scalar = [&](Value vector) { return emit("Squeeze", {vector, i64({0})}, loc); };
  Value positions =
      given(8) ? toI64(inputs[8])
               : emit("Unsqueeze", {emit("Range", {scalar(i64({0})), scalar(length),
                                                   scalar(i64({1}))},
                                         loc),
                                    i64({0})},
                      loc);
  Value sum = emit("Add", {lookup(inputs[2], ids), lookup(inputs[3], positions)}, loc);
  if (given(1))
    sum = emit("Add", {sum, lookup(inputs[4], toI64(inputs[1]))}, loc);
  Value normed = emit("LayerNormalization", {sum, inputs[5], inputs[6]}, loc,
                      {intAttr("axis", -1),
                       namedAttr("epsilon",
                                 builder_.getF32FloatAttr(attrs.floatOr("epsilon", 1e-12f)))},
                      3, 0);
  auto toI32 = [&](Value value) {
    return emit("Cast", {value}, loc, {namedAttr("to", TypeAttr::get(builder_.getI32Type()))});
  };
  Value counts;
  if (given(7)) {
    counts = toI32(emit("ReduceSum", {inputs[7], i64({1})}, loc, {intAttr("keepdims", 0)}));
  } else {
    // onnxruntime gives zeros without a mask (its node test shows it).
    Value batch = emit("Shape", {ids}, loc, {intAttr("start", 0), intAttr("end", 1)});
    counts = toI32(emit("Expand", {i64({0}), batch}, loc));
  }
  results.assign({normed, counts, sum});
  return success();
}

// The coding of GatherBlockQuantized's 4-bit typed data [rows, columns] and its zero points
// [rows, blocks] (packed over the whole tensor) in MatMulNBits' form: each row's codes and
// zero points from a whole byte, unsigned (storedCode). Without zero points the 4-bit types'
// default is 0, which for INT4 codes so stored is 8, MatMulNBits' own default; UINT4 ones
// get zero points of 0.
bool GraphImporter::fourBitGatherCoding(const WeightRecord &data, NBitsCoding &coding,
                                        std::string &why) {
  const int64_t rows = data.dims[0], columns = data.dims[1];
  if (columns % 2 != 0 || coding.blockSize <= 0) {
    why = "4-bit data of an odd number of columns (" + std::to_string(columns) + ")";
    return false;
  }
  const int64_t blocks = llvm::divideCeilSigned(columns, coding.blockSize);
  const int64_t zeroBytes = (blocks + 1) / 2;
  if (data.bytes.size() != size_t(rows * columns / 2)) {
    why = "its 4-bit data holds " + std::to_string(data.bytes.size()) + " bytes, not " +
          std::to_string(rows * columns / 2);
    return false;
  }
  auto put = [](std::vector<uint8_t> &bytes, int64_t at, unsigned code) {
    bytes[static_cast<size_t>(at / 2)] |= static_cast<uint8_t>(code << (4 * (at % 2)));
  };
  std::vector<uint8_t> codes(data.bytes.size(), 0);
  for (int64_t i = 0; i < rows * columns; ++i)
    put(codes, i, storedCode(data, i));
  std::vector<uint8_t> zeros(static_cast<size_t>(rows * zeroBytes), 0);
  const WeightRecord *given = coding.zeroPoints;
  if (given && (given->onnxType != data.onnxType || given->dims.size() != 2 ||
                given->dims[0] != rows || given->dims[1] != blocks ||
                given->bytes.size() != size_t((rows * blocks + 1) / 2))) {
    why = "its zero points are not of the data's type, [rows, blocks] = [" +
          std::to_string(rows) + ", " + std::to_string(blocks) + "]";
    return false;
  }
  const unsigned defaultZero = isSignedCodeType(data.onnxType) ? 8 : 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; ++b)
      put(zeros, r * zeroBytes * 2 + b, given ? storedCode(*given, r * blocks + b) : defaultZero);
  std::string error;
  coding.bits = 4;
  coding.n = rows;
  coding.k = columns;
  coding.codes = store_.addOwned(data.name + ".nbits_codes", TensorProto::UINT8,
                                 {rows, columns / 2}, std::move(codes), error);
  coding.zeroPoints = coding.codes ? store_.addOwned(data.name + ".nbits_zero_points",
                                                     TensorProto::UINT8, {rows, zeroBytes},
                                                     std::move(zeros), error)
                                   : nullptr;
  if (!coding.zeroPoints) {
    why = error;
    return false;
  }
  return true;
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
  auto initializer = [&](size_t index) -> const WeightRecord * {
    return given(index) ? store_.lookup(weightKey(node.input(static_cast<int>(index))))
                        : nullptr;
  };
  NBitsCoding coding;
  coding.blockSize = attrs.intOr("block_size", 128);
  coding.rows = true;
  coding.scales = initializer(2);
  coding.zeroPoints = initializer(3);
  if (!coding.scales || (given(3) && !coding.zeroPoints))
    return emitError(loc) << "GatherBlockQuantized needs scales and zero_points as initializers";
  if (codes && dataType && dataType.hasStaticShape() && dataType.getRank() == 2 &&
      isFourBitIntegerType(codes->onnxType)) {
    // Data of ONNX's 4-bit types [rows, columns] (the builder's quantized Gather without a
    // shared embedding): codes with a zero point of 0 by default, where the uint8 form has
    // MatMulNBits' 8. Written as that form's coding.
    std::string why;
    if (!fourBitGatherCoding(*codes, coding, why))
      return emitError(loc) << "GatherBlockQuantized: " << why;
  } else {
    if (!codes || !dataType || !dataType.hasStaticShape() || dataType.getRank() != 2 ||
        !dataType.getElementType().isUnsignedInteger(8))
      return emitError(loc) << "GatherBlockQuantized needs its data as a uint8 [rows, bytes] "
                               "initializer (or one reshaped to that), or an INT4 or UINT4 "
                               "[rows, columns] one";
    coding.bits = attrs.intOr("bits", 4);
    coding.n = dataType.getDimSize(0);
    coding.k = coding.bits > 0 && coding.bits <= 8 ? dataType.getDimSize(1) * 8 / coding.bits : 0;
    coding.codes = codes;
  }
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
