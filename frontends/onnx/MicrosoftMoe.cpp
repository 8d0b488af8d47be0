// com.microsoft.MoE and QMoE, ONNX Runtime's mixture-of-experts ops (its GenAI builder writes
// MoE for GPT-OSS and the other MoE families at fp32, fp16 and bf16, QMoE at int4 and int8),
// written out in primitive ops in the form the project's exporter writes transformers'
// experts (tools/fixtures/moe_export.py), which dsc-recognize-moe reads:
//
//   dense = ScatterElements(zeros [T, E], TopK indices, routing weights)
//   out   = sum over e of down_e(act(gate_e(x), up_e(x))) * dense[..., e:e+1]
//
// with each expert's gate, up and down a MatMul by a weight of its own: its rows of the
// stacked [E, out, in] initializers (views, not copies, where the rows are contiguous). A
// QMoE expert's weight is its rows of the stacked codes, scales and zero points as one
// MatMulNBits coding (NBitsWeights.h: [out, in / block, block * bits / 8] codes, the low
// nibble first, a default zero point of 2^(bits - 1)), so an int4 plan keeps them.
// The definition is ONNX Runtime's (docs/ContribOperators.md and its CPU kernels): the router
// input is the logits [T, E]; softmax over every expert, top k, and with
// normalize_routing_weights the k renormalised (the softmax of the k chosen logits); fc1
// [E, N1, H] and fc2 [E, H, I], each [out, in]. SwiGLU is g * sigmoid(alpha * g) * (u + beta)
// with g = min(gate, limit) and u = clip(up, -limit, limit) where swiglu_limit is given, gate
// and up interleaved in fc1's rows (swiglu_fusion 1, the one layout onnxruntime's CPU kernel
// takes). docs/ortgenai.md, "Mixture of experts".
#include "frontends/onnx/GraphImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "frontends/onnx/NBitsWeights.h"
#include "frontends/onnx/TensorConversion.h"

#include <cmath>
#include <cstring>

using namespace mlir;

namespace dsc::onnx_frontend {

namespace {

bool isGiven(ArrayRef<Value> inputs, size_t index) {
  return index < inputs.size() && !isa<NoneType>(inputs[index].getType());
}

size_t floatBytes(int32_t onnxType) {
  return onnxType == ::onnx::TensorProto::FLOAT      ? 4
         : onnxType == ::onnx::TensorProto::FLOAT16  ? 2
         : onnxType == ::onnx::TensorProto::BFLOAT16 ? 2
                                                     : 0;
}

// One projection's stacked tensors: weights (float [E, out, in], or QMoE's codes [E, out,
// in * bits / 8]), QMoE's scales and zero points, and the bias [E, out].
struct Stacked {
  const WeightRecord *weights = nullptr, *scales = nullptr, *zeroPoints = nullptr,
                     *bias = nullptr;
};

} // namespace

LogicalResult GraphImporter::writeMoe(const NodeProto &node, const NodeAttributes &attrs,
                                      Location loc, ArrayRef<Value> inputs,
                                      SmallVectorImpl<Value> &results) {
  auto given = [&](size_t index) { return isGiven(inputs, index); };
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  auto integer = [&](llvm::StringRef name, int64_t value) { return intAttr(name, value); };
  const bool quantized = node.op_type() == "QMoE";
  const llvm::StringRef op = node.op_type();
  llvm::StringRef unknown =
      quantized ? attrs.unknown({"k", "activation_type", "normalize_routing_weights",
                                 "use_sparse_mixer", "swiglu_fusion", "swiglu_limit",
                                 "activation_alpha", "activation_beta", "expert_weight_bits",
                                 "block_size", "quant_type", "weights_prepacked"})
                : attrs.unknown({"k", "activation_type", "normalize_routing_weights",
                                 "use_sparse_mixer", "swiglu_fusion", "swiglu_limit",
                                 "activation_alpha", "activation_beta"});
  if (!unknown.empty())
    return emitError(loc) << op << " has attribute '" << unknown
                          << "', which dsc does not support";
  if (attrs.intOr("use_sparse_mixer", 0) != 0)
    return emitError(loc) << op << " with use_sparse_mixer (Phi-MoE's sparse mixer routing) is "
                                   "not supported";
  const llvm::StringRef activation = attrs.stringOr("activation_type", "relu");
  const bool swiglu = activation == "swiglu";
  if (!swiglu && activation != "relu" && activation != "gelu" && activation != "silu" &&
      activation != "identity")
    return emitError(loc) << op << " activation_type '" << activation
                          << "' is not relu, gelu, silu, identity or swiglu";
  // Gate and up interleaved in fc1's rows; onnxruntime's CPU kernel takes SwiGLU only so
  // (the other layouts, fc3's among them, have no reference to check dsc's reading against).
  const int64_t fusion = attrs.intOr("swiglu_fusion", 0);
  if (swiglu && fusion != 1)
    return emitError(loc) << op << " with swiglu_fusion " << fusion
                          << " is not supported: dsc reads SwiGLU experts with gate and up "
                             "interleaved (swiglu_fusion 1), as onnxruntime's CPU kernel does";
  const int bits = quantized ? attrs.intOr("expert_weight_bits", 4) : 0;
  if (quantized && (bits != 4 && bits != 8))
    return emitError(loc) << "QMoE expert_weight_bits " << bits << " is not 4 or 8";
  if (quantized && attrs.stringOr("quant_type", "int") != "int")
    return emitError(loc) << "QMoE quant_type '" << attrs.stringOr("quant_type", "int")
                          << "' is not supported: dsc reads integer codes ('int')";
  if (attrs.intOr("weights_prepacked", 0) > 0)
    return emitError(loc) << op << " with weights_prepacked (CUDA's CUTLASS layout) is not "
                                   "supported";
  // The inputs: MoE's weights and biases, or QMoE's weights, scales, biases and zero points.
  const size_t fc1Index = 2, fc2Index = quantized ? 5 : 4;
  if (!given(0) || !given(1) || !given(fc1Index) || !given(fc2Index) ||
      (quantized && (!given(3) || !given(6))))
    return emitError(loc) << op << " needs input, router_probs and the fc1 and fc2 experts' "
                          << (quantized ? "weights and scales" : "weights");
  static constexpr size_t kMoeUnread[] = {6, 7}, kQMoeUnread[] = {8, 9, 10, 13, 14};
  for (size_t index : quantized ? ArrayRef<size_t>(kQMoeUnread) : ArrayRef<size_t>(kMoeUnread))
    if (given(index))
      return emitError(loc) << op << " with "
                            << (index == 14 ? "router_weights" : "fc3 (a third projection)")
                            << " is not supported";
  std::string missing;
  auto initializer = [&](size_t index) -> const WeightRecord * {
    if (!given(index))
      return nullptr;
    const WeightRecord *record = store_.lookup(weightKey(node.input(index)));
    if ((!record || record->coding) && missing.empty())
      missing = node.input(index);
    return record;
  };
  Stacked fc1, fc2;
  if (quantized) {
    fc1 = {initializer(2), initializer(3), initializer(11), initializer(4)};
    fc2 = {initializer(5), initializer(6), initializer(12), initializer(7)};
  } else {
    fc1 = {initializer(2), nullptr, nullptr, initializer(3)};
    fc2 = {initializer(4), nullptr, nullptr, initializer(5)};
  }
  if (!missing.empty())
    return emitError(loc) << op << " input '" << missing
                          << "' is computed in the graph; dsc reads the experts' tensors only "
                             "as initializers";
  if (fc1.weights->dims.size() != 3 || fc2.weights->dims.size() != 3)
    return emitError(loc) << op << "'s expert weights are not 3-D [experts, out, in]";
  // In features from the stored widths: a float per input, or bits / 8 of a byte.
  auto inFeatures = [&](const WeightRecord *weights) {
    return quantized ? weights->dims[2] * 8 / bits : weights->dims[2];
  };
  const int64_t experts = fc1.weights->dims[0], hidden = inFeatures(fc1.weights),
                inter = inFeatures(fc2.weights);
  const int64_t fc1Rows = swiglu ? 2 * inter : inter;
  auto is = [](const WeightRecord *record, std::vector<int64_t> dims) {
    return record && record->dims == dims;
  };
  if (!is(fc2.weights, {experts, hidden, fc2.weights->dims[2]}) ||
      fc1.weights->dims[1] != fc1Rows)
    return emitError(loc) << op << "'s expert weights do not agree: fc1 [" << experts << ", "
                          << fc1.weights->dims[1] << ", " << fc1.weights->dims[2]
                          << "] must be [experts, " << (swiglu ? "2 x inter" : "inter")
                          << ", hidden], fc2 [experts, hidden, inter]"
                          << (quantized ? " (inputs in codes of expert_weight_bits)" : "");
  if ((fc1.bias && !is(fc1.bias, {experts, fc1Rows})) ||
      (fc2.bias && !is(fc2.bias, {experts, hidden})))
    return emitError(loc) << op << "'s expert biases are not [experts, out] of their weights";
  const int32_t floatType = (quantized ? fc1.scales : fc1.weights)->onnxType;
  for (const WeightRecord *record :
       {fc1.bias, fc2.bias, quantized ? fc2.scales : fc2.weights, quantized ? nullptr : fc1.weights})
    if (record && record->onnxType != floatType)
      return emitError(loc) << op << "'s expert "
                            << (quantized ? "scales and biases" : "weights and biases")
                            << " are not all of one float type";
  if (floatBytes(floatType) == 0)
    return emitError(loc) << op << "'s expert " << (quantized ? "scales" : "weights")
                          << " are not float, float16 or bfloat16";
  // QMoE's blocks: block_size inputs each, or one per row (per channel); codes of uint8.
  int64_t blockSize = attrs.intOr("block_size", 0);
  if (quantized) {
    for (const Stacked *projection : {&fc1, &fc2}) {
      const int64_t in = inFeatures(projection->weights), rows = projection->weights->dims[1];
      const int64_t size = blockSize > 0 ? blockSize : in;
      const bool perChannel = blockSize <= 0;
      // A row holds in * bits / 8 bytes, MatMulNBits' blocks * block_size * bits / 8: the
      // two agree only where the blocks divide the inputs. Checked before any arithmetic on
      // the size (the fuzzer's block_size of INT64_MAX overflowed the block count).
      if (size <= 0 || size > in || in % size != 0 || size * bits % 8 != 0)
        return emitError(loc) << "QMoE's block_size " << blockSize << " does not divide its "
                              << in << " inputs in whole bytes; dsc reads blocks that do";
      const int64_t blocks = in / size;
      if (projection->weights->onnxType != ::onnx::TensorProto::UINT8 ||
          !(is(projection->scales, {experts, rows, blocks}) ||
            (perChannel && is(projection->scales, {experts, rows}))))
        return emitError(loc) << "QMoE's codes are not uint8 [experts, out, in * bits / 8] with "
                                 "scales [experts, out, "
                              << (perChannel ? "1" : "ceil(in / block_size)") << "]";
      const int64_t zeroRow = (blocks * bits + 7) / 8;
      // Rows are cut from the stacked zero points as from the codes (rowsOf): [E, out, ...].
      if (projection->zeroPoints &&
          (projection->zeroPoints->onnxType != ::onnx::TensorProto::UINT8 ||
           projection->zeroPoints->dims.size() < 2 ||
           projection->zeroPoints->dims[0] != experts ||
           projection->zeroPoints->dims[1] != rows ||
           checkedElementCount(projection->zeroPoints->dims) != experts * rows * zeroRow))
        return emitError(loc) << "QMoE's zero points are not packed uint8 [experts, out, "
                              << zeroRow << "]";
    }
  }
  const int64_t k = attrs.intOr("k", 1);
  if (k < 1 || k > experts)
    return emitError(loc) << op << " k = " << k << " is not between 1 and its " << experts
                          << " experts";
  Value x = inputs[0];
  auto xType = dyn_cast<RankedTensorType>(x.getType());
  Type element = cast<TensorType>(x.getType()).getElementType();
  if (!isa<FloatType>(element) || convertElementType(context_, floatType) != element)
    return emitError(loc) << op << "'s input and its experts' "
                          << (quantized ? "scales" : "weights") << " are not of one float type";
  // A scalar input has no features to check (and no last dimension to ask about): the
  // fuzzer's scalar x reached isDynamicDim(-1).
  if (xType && xType.getRank() == 0)
    return emitError(loc) << op << "'s input is a scalar, not [tokens, " << hidden
                          << "] or [batch, sequence, " << hidden << "]";
  if (xType && !xType.isDynamicDim(xType.getRank() - 1) &&
      xType.getDimSize(xType.getRank() - 1) != hidden)
    return emitError(loc) << op << ": the input has " << xType.getDimSize(xType.getRank() - 1)
                          << " features, but the experts take " << hidden;
  auto routerType = dyn_cast<RankedTensorType>(inputs[1].getType());
  if (routerType && (routerType.getRank() != 2 || (!routerType.isDynamicDim(1) &&
                                                   routerType.getDimSize(1) != experts)))
    return emitError(loc) << op << "'s router_probs are not [tokens, " << experts << "]";

  // Expert `expert`'s rows of a stacked record [E, R, ...]: `rows` of them, `stride` apart
  // from `first` on, as a record of `dims`: a view where they are contiguous, else a copy.
  std::string error;
  auto rowsOf = [&](const WeightRecord *stacked, int64_t expert, int64_t first, int64_t stride,
                    int64_t rows, std::vector<int64_t> dims,
                    llvm::StringRef what) -> const WeightRecord * {
    const std::string name = stacked->name + ".expert" + std::to_string(expert) + "." +
                             what.str();
    if (const WeightRecord *record = store_.lookup(name))
      return record;
    const uint64_t rowBytes = stacked->bytes.size() / (experts * stacked->dims[1]);
    const uint64_t start = (expert * stacked->dims[1] + first) * rowBytes;
    if (stride == 1)
      return store_.addView(name, *stacked, start, std::move(dims), error);
    // The checks above shape every stacked tensor [E, out, ...]; this one is the last word
    // before bytes are copied (a forged [E, 1, out] zero point read past its end).
    if (first + (rows - 1) * stride >= stacked->dims[1]) {
      error = "expert rows " + std::to_string(first) + ", " + std::to_string(first + stride) +
              ", ... of " + std::to_string(rows) + " lie outside '" + stacked->name + "'";
      return nullptr;
    }
    std::vector<uint8_t> copy(rows * rowBytes);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(copy.data() + r * rowBytes, stacked->bytes.data() + start + r * stride * rowBytes,
                  rowBytes);
    return store_.addOwned(name, stacked->onnxType, std::move(dims), std::move(copy), error);
  };
  // Expert e's projection `what` of `input`: its rows of `projection` times input, plus its
  // bias. A float weight is [out, in], multiplied as F.linear (MatMul by its Transpose); a
  // QMoE one is a MatMulNBits coding [in, out].
  auto project = [&](Value input, const Stacked &projection, int64_t e, int64_t first,
                     int64_t stride, int64_t rows, llvm::StringRef what) -> Value {
    const int64_t in = inFeatures(projection.weights);
    Value weight;
    if (!quantized) {
      const WeightRecord *record =
          rowsOf(projection.weights, e, first, stride, rows, {rows, in}, what);
      if (!record)
        return Value();
      Value stored = onnx::WeightOp::create(
          builder_, loc, RankedTensorType::get({rows, in}, element), record->name);
      weight = emit("Transpose", {stored}, loc,
                    {namedAttr("perm", builder_.getI64ArrayAttr({1, 0}))});
    } else {
      const std::string name = projection.weights->name + ".expert" + std::to_string(e) + "." +
                               what.str() + ".dequantized";
      if (!store_.lookup(name)) {
        NBitsCoding coding;
        coding.bits = bits;
        coding.blockSize = blockSize > 0 ? blockSize : in;
        coding.k = in;
        coding.n = rows;
        const int64_t blocks = coding.blocks();
        coding.codes = rowsOf(projection.weights, e, first, stride, rows,
                              {rows, blocks, coding.blockSize * bits / 8}, (what + ".codes").str());
        coding.scales = coding.codes ? rowsOf(projection.scales, e, first, stride, rows,
                                              {rows, blocks}, (what + ".scales").str())
                                     : nullptr;
        if (coding.scales && projection.zeroPoints)
          coding.zeroPoints = rowsOf(projection.zeroPoints, e, first, stride, rows,
                                     {rows, (blocks * bits + 7) / 8}, (what + ".zero_points").str());
        if (!coding.scales || (projection.zeroPoints && !coding.zeroPoints))
          return Value();
        if (std::string why = checkNBitsCoding(coding); !why.empty()) {
          error = why;
          return Value();
        }
        if (zeroPointsAreDefault(coding))
          coding.zeroPoints = nullptr;
        if (!store_.addNBitsWeight(name, coding, floatType, error))
          return Value();
      }
      weight = onnx::WeightOp::create(builder_, loc, RankedTensorType::get({in, rows}, element),
                                      name);
    }
    // The bias handle before the product, as an initializer is: recognition puts the linear
    // where the MatMul is.
    Value bias;
    if (projection.bias) {
      const WeightRecord *record =
          rowsOf(projection.bias, e, first, stride, rows, {rows}, (what + "_bias").str());
      if (!record)
        return Value();
      bias = onnx::WeightOp::create(builder_, loc, RankedTensorType::get({rows}, element),
                                    record->name);
    }
    Value product = emit("MatMul", {input, weight}, loc);
    return bias ? emit("Add", {product, bias}, loc) : product;
  };
  auto scalar = [&](double value) { return floatScalar(value, element, loc); };

  // The routing weights, dense [T, E], then viewed as x's leading dimensions by E: the
  // experts read x as it is, the value the router's linear reads too.
  Value logits = inputs[1];
  const bool normalize = attrs.intOr("normalize_routing_weights", 0) != 0;
  Value scored = normalize ? logits : emit("Softmax", {logits}, loc, {integer("axis", -1)});
  Value values = emit("TopK", {scored, i64({k})}, loc,
                      {integer("axis", -1), integer("largest", 1), integer("sorted", 1)},
                      /*numResults=*/2);
  Value indices = values.getDefiningOp()->getResult(1);
  Value weights = normalize ? emit("Softmax", {values}, loc, {integer("axis", -1)}) : values;
  Value zeros = emit("ConstantOfShape", {emit("Shape", {logits}, loc)}, loc,
                     {namedAttr("value", DenseElementsAttr::get(
                                             RankedTensorType::get({1}, element),
                                             builder_.getFloatAttr(element, 0.0)))});
  Value dense = emit("ScatterElements", {zeros, indices, weights}, loc, {integer("axis", 1)});
  if (!xType || xType.getRank() != 2) {
    Value leading = emit("Shape", {x}, loc, {integer("end", -1)});
    dense = emit("Reshape", {dense, emit("Concat", {leading, i64({experts})}, loc,
                                         {integer("axis", 0)})},
                 loc);
  }

  const float alpha = attrs.floatOr("activation_alpha", 1.0f);
  const float beta = attrs.floatOr("activation_beta", 0.0f);
  const bool limited = attrs.floats.count("swiglu_limit") &&
                       std::isfinite(attrs.floatOr("swiglu_limit", 0.0f));
  const float limit = attrs.floatOr("swiglu_limit", 0.0f);
  // fc1's gate rows, and for SwiGLU its up rows: interleaved, 0::2 and 1::2.
  const int64_t stride = swiglu ? 2 : 1;
  Value sum;
  for (int64_t e = 0; e < experts; ++e) {
    Value gate = project(x, fc1, e, 0, stride, inter, "gate"), hiddenState;
    if (!gate)
      return emitError(loc) << op << ": " << error;
    if (swiglu) {
      Value up = project(x, fc1, e, 1, stride, inter, "up");
      if (!up)
        return emitError(loc) << op << ": " << error;
      if (limited) {
        gate = emit("Min", {gate, scalar(limit)}, loc);
        up = emit("Clip", {up, scalar(-limit), scalar(limit)}, loc);
      }
      Value sigmoid = emit("Sigmoid", {alpha == 1.0f ? gate : emit("Mul", {gate, scalar(alpha)},
                                                                    loc)},
                           loc);
      Value glu = emit("Mul", {gate, sigmoid}, loc);
      hiddenState = emit("Mul", {beta == 0.0f ? up : emit("Add", {up, scalar(beta)}, loc), glu},
                         loc);
    } else if (activation == "relu") {
      hiddenState = emit("Relu", {gate}, loc);
    } else if (activation == "gelu") {
      // onnxruntime's MoE kernel computes gelu with tanh (its node test here tells the two
      // apart: erf is 4.8e-4 off).
      hiddenState = emit("Gelu", {gate}, loc, {namedAttr("approximate",
                                                         builder_.getStringAttr("tanh"))});
    } else if (activation == "silu") {
      hiddenState = emit("Mul", {gate, emit("Sigmoid", {gate}, loc)}, loc);
    } else {
      hiddenState = gate;
    }
    Value down = project(hiddenState, fc2, e, 0, 1, hidden, "down");
    if (!down)
      return emitError(loc) << op << ": " << error;
    Value column = emit("Slice", {dense, i64({e}), i64({e + 1}), i64({-1}), noValue(loc)}, loc);
    Value term = emit("Mul", {down, column}, loc);
    sum = sum ? emit("Add", {sum, term}, loc) : term;
  }
  results.push_back(sum);
  return success();
}

} // namespace dsc::onnx_frontend
