// com.microsoft.MoE, ONNX Runtime's mixture-of-experts op (its GenAI builder writes it for
// GPT-OSS and the other MoE families at fp32, fp16 and bf16), written out in primitive ops
// in the form the project's exporter writes transformers' experts (tools/fixtures/
// moe_export.py), which dsc-recognize-moe reads:
//
//   dense = ScatterElements(zeros [T, E], TopK indices, routing weights)
//   out   = sum over e of down_e(act(gate_e(x), up_e(x))) * dense[:, e:e+1]
//
// with each expert's gate, up and down a MatMul by a weight of its own: its rows of the
// stacked [E, out, in] initializers (views, not copies, where the rows are contiguous).
// The definition is ONNX Runtime's (docs/ContribOperators.md and its CPU kernel): the router
// input is the logits [T, E]; softmax over every expert, top k, and with
// normalize_routing_weights the k renormalised (the softmax of the k chosen logits); fc1
// [E, N1, H] and fc2 [E, H, I], each [out, in]. SwiGLU is g * sigmoid(alpha * g) * (u + beta)
// with g = min(gate, limit) and u = clip(up, -limit, limit) where swiglu_limit is given, gate
// and up interleaved in fc1's rows (swiglu_fusion 1, the one layout onnxruntime's CPU kernel
// takes). docs/ortgenai.md, "Mixture of experts".
#include "frontends/onnx/GraphImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "frontends/onnx/TensorConversion.h"

#include <cmath>
#include <cstring>

using namespace mlir;

namespace dsc::onnx_frontend {

namespace {

bool isGiven(ArrayRef<Value> inputs, size_t index) {
  return index < inputs.size() && !isa<NoneType>(inputs[index].getType());
}

size_t elementBytes(const WeightRecord &record) {
  return record.onnxType == ::onnx::TensorProto::FLOAT      ? 4
         : record.onnxType == ::onnx::TensorProto::FLOAT16  ? 2
         : record.onnxType == ::onnx::TensorProto::BFLOAT16 ? 2
                                                            : 0;
}

} // namespace

LogicalResult GraphImporter::writeMoe(const NodeProto &node, const NodeAttributes &attrs,
                                      Location loc, ArrayRef<Value> inputs,
                                      SmallVectorImpl<Value> &results) {
  auto given = [&](size_t index) { return isGiven(inputs, index); };
  auto i64 = [&](ArrayRef<int64_t> values) { return constantI64(values, loc); };
  auto integer = [&](llvm::StringRef name, int64_t value) { return intAttr(name, value); };
  if (llvm::StringRef name = attrs.unknown({"k", "activation_type", "normalize_routing_weights",
                                             "use_sparse_mixer", "swiglu_fusion", "swiglu_limit",
                                             "activation_alpha", "activation_beta"});
      !name.empty())
    return emitError(loc) << "MoE has attribute '" << name << "', which dsc does not support";
  if (attrs.intOr("use_sparse_mixer", 0) != 0)
    return emitError(loc) << "MoE with use_sparse_mixer (Phi-MoE's sparse mixer routing) is "
                             "not supported";
  const llvm::StringRef activation = attrs.stringOr("activation_type", "relu");
  const bool swiglu = activation == "swiglu";
  if (!swiglu && activation != "relu" && activation != "gelu" && activation != "silu" &&
      activation != "identity")
    return emitError(loc) << "MoE activation_type '" << activation
                          << "' is not relu, gelu, silu, identity or swiglu";
  // Gate and up interleaved in fc1's rows; onnxruntime's CPU kernel takes SwiGLU only so
  // (the other layouts, fc3's among them, have no reference to check dsc's reading against).
  const int64_t fusion = attrs.intOr("swiglu_fusion", 0);
  if (swiglu && fusion != 1)
    return emitError(loc) << "MoE with swiglu_fusion " << fusion
                          << " is not supported: dsc reads SwiGLU experts with gate and up "
                             "interleaved (swiglu_fusion 1), as onnxruntime's CPU kernel does";
  if (!given(0) || !given(1) || !given(2) || !given(4))
    return emitError(loc) << "MoE needs input, router_probs, fc1_experts_weights and "
                             "fc2_experts_weights";
  if (given(6) || given(7))
    return emitError(loc) << "MoE with fc3_experts_weights is not supported";

  std::string missing;
  auto initializer = [&](int index) -> const WeightRecord * {
    if (!given(index))
      return nullptr;
    const WeightRecord *record = store_.lookup(weightKey(node.input(index)));
    if ((!record || record->coding || elementBytes(*record) == 0) && missing.empty())
      missing = node.input(index);
    return record;
  };
  const WeightRecord *fc1 = initializer(2), *fc1Bias = initializer(3), *fc2 = initializer(4),
                     *fc2Bias = initializer(5);
  if (!missing.empty())
    return emitError(loc) << "MoE input '" << missing
                          << "' is not a float initializer; dsc reads the experts' weights "
                             "and biases only as float, float16 or bfloat16 initializers";
  auto dims = [](const WeightRecord *record) {
    return record ? record->dims : std::vector<int64_t>{};
  };
  if (fc1->dims.size() != 3 || fc2->dims.size() != 3)
    return emitError(loc) << "MoE's expert weights are not 3-D [experts, out, in]";
  const int64_t experts = fc1->dims[0], hidden = fc1->dims[2], inter = fc2->dims[2];
  const int64_t fc1Rows = swiglu ? 2 * inter : inter;
  if (fc2->dims != std::vector<int64_t>{experts, hidden, inter} || fc1->dims[1] != fc1Rows)
    return emitError(loc) << "MoE's expert weights do not agree: fc1 [" << fc1->dims[0] << ", "
                          << fc1->dims[1] << ", " << fc1->dims[2]
                          << "] must be [experts, " << (swiglu ? "2 x inter" : "inter")
                          << ", hidden], fc2 [experts, hidden, inter]";
  if ((fc1Bias && dims(fc1Bias) != std::vector<int64_t>{experts, fc1Rows}) ||
      (fc2Bias && dims(fc2Bias) != std::vector<int64_t>{experts, hidden}))
    return emitError(loc) << "MoE's expert biases are not [experts, out] of their weights";
  for (const WeightRecord *record : {fc1Bias, fc2, fc2Bias})
    if (record && record->onnxType != fc1->onnxType)
      return emitError(loc) << "MoE's expert weights and biases are not all of one type";
  const int64_t k = attrs.intOr("k", 1);
  if (k < 1 || k > experts)
    return emitError(loc) << "MoE k = " << k << " is not between 1 and its " << experts
                          << " experts";
  Value x = inputs[0];
  auto xType = dyn_cast<RankedTensorType>(x.getType());
  Type element = cast<TensorType>(x.getType()).getElementType();
  if (!isa<FloatType>(element) || convertElementType(context_, fc1->onnxType) != element)
    return emitError(loc) << "MoE's input and its experts' weights are not of one float type";
  if (xType && !xType.isDynamicDim(xType.getRank() - 1) &&
      xType.getDimSize(xType.getRank() - 1) != hidden)
    return emitError(loc) << "MoE: the input has " << xType.getDimSize(xType.getRank() - 1)
                          << " features, but the experts take " << hidden;
  auto routerType = dyn_cast<RankedTensorType>(inputs[1].getType());
  if (routerType && (routerType.getRank() != 2 || (!routerType.isDynamicDim(1) &&
                                                   routerType.getDimSize(1) != experts)))
    return emitError(loc) << "MoE's router_probs are not [tokens, " << experts << "]";

  // Each expert's rows of a stacked weight: a view where they are contiguous, else (gate and
  // up interleaved) a copy. `stride` rows apart from `first` on, `rows` of them.
  std::string error;
  auto rowsOf = [&](const WeightRecord *stacked, int64_t expert, int64_t first, int64_t stride,
                    int64_t rows, llvm::StringRef what) -> Value {
    const bool vector = stacked->dims.size() == 2;
    const int64_t columns = vector ? 1 : stacked->dims[2];
    const int64_t perExpert = stacked->dims[1] * columns;
    const size_t bytes = elementBytes(*stacked);
    const std::string name = stacked->name + ".expert" + std::to_string(expert) + "." +
                             what.str();
    std::vector<int64_t> shape = vector ? std::vector<int64_t>{rows}
                                        : std::vector<int64_t>{rows, columns};
    const WeightRecord *record = store_.lookup(name);
    if (!record && stride == 1) {
      record = store_.addView(name, *stacked, (expert * perExpert + first * columns) * bytes,
                              shape, error);
    } else if (!record) {
      std::vector<uint8_t> copy(static_cast<size_t>(rows * columns) * bytes);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(copy.data() + r * columns * bytes,
                    stacked->bytes.data() + (expert * perExpert + (first + r * stride) * columns) *
                                                 bytes,
                    columns * bytes);
      record = store_.addOwned(name, stacked->onnxType, shape, std::move(copy), error);
    }
    if (!record)
      return Value();
    SmallVector<int64_t> type(shape.begin(), shape.end());
    return onnx::WeightOp::create(builder_, loc, RankedTensorType::get(type, element), name);
  };
  // MatMul(x, W^T) (+ bias): F.linear, as the exporters write an expert's projection.
  auto linear = [&](Value input, Value weight, Value bias) {
    Value product =
        emit("MatMul", {input, emit("Transpose", {weight}, loc,
                                    {namedAttr("perm", builder_.getI64ArrayAttr({1, 0}))})},
             loc);
    return bias ? emit("Add", {product, bias}, loc) : product;
  };
  auto scalar = [&](double value) { return floatScalar(value, element, loc); };

  // The routing weights, dense [T, E], then viewed as x's leading dimensions by E: the
  // experts read x as it is, the value the router's linear reads too.
  Value tokens = x;
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
  Value sum;
  for (int64_t e = 0; e < experts; ++e) {
    // fc1's gate rows, and for SwiGLU its up rows: interleaved, 0::2 and 1::2.
    const int64_t stride = swiglu ? 2 : 1;
    Value gateWeight = rowsOf(fc1, e, 0, stride, inter, "gate");
    Value gateBias = fc1Bias ? rowsOf(fc1Bias, e, 0, stride, inter, "gate_bias") : Value();
    if (!gateWeight || (fc1Bias && !gateBias))
      return emitError(loc) << "MoE: " << error;
    Value gate = linear(tokens, gateWeight, gateBias), hiddenState;
    if (swiglu) {
      Value upWeight = rowsOf(fc1, e, 1, stride, inter, "up");
      Value upBias = fc1Bias ? rowsOf(fc1Bias, e, 1, stride, inter, "up_bias") : Value();
      if (!upWeight || (fc1Bias && !upBias))
        return emitError(loc) << "MoE: " << error;
      Value up = linear(tokens, upWeight, upBias);
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
    Value downWeight = rowsOf(fc2, e, 0, 1, hidden, "down");
    Value downBias = fc2Bias ? rowsOf(fc2Bias, e, 0, 1, hidden, "down_bias") : Value();
    if (!downWeight || (fc2Bias && !downBias))
      return emitError(loc) << "MoE: " << error;
    Value column = emit("Slice", {dense, i64({e}), i64({e + 1}), i64({-1}), noValue(loc)}, loc);
    Value term = emit("Mul", {linear(hiddenState, downWeight, downBias), column}, loc);
    sum = sum ? emit("Add", {sum, term}, loc) : term;
  }
  results.push_back(sum);
  return success();
}

} // namespace dsc::onnx_frontend
