// ONNX Runtime's dynamic quantization (`quantize_dynamic`, QOperator format: the Hub's
// model_quantized.onnx and model_int8.onnx). Each quantized MatMul is
//   x -> DynamicQuantizeLinear -> (xq, x_scale, x_zero) ; MatMulInteger(xq, B, x_zero, B_zero)
//     -> Cast(float) -> Mul(., Mul(x_scale, B_scale))
// and each quantized embedding DequantizeLinear(Gather(int8 table, ids), scale, zero). dsc
// reads the weights as their publisher quantized them and multiplies x exact, as it reads
// MatMulNBits at accuracy_level 0 (docs/ortgenai.md): MatMul(x, (B - B_zero) * B_scale), a
// float weight whose bytes are the int8 codes (an 8-bit NBits coding), which recognition reads
// as any linear layer. ONNX Runtime rounds x to 8 bits per tensor as well; dsc does not, so
// its result is the weights' own product (closer to the float model), not onnxruntime's.
// A node of these types outside the pattern is refused, saying where the pattern breaks.
#include "frontends/onnx/GraphImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "frontends/onnx/NBitsWeights.h"

using namespace mlir;

namespace dsc::onnx_frontend {

namespace {

using TensorProto = ::onnx::TensorProto;

struct Use {
  int node, slot;
};

bool isInt8Codes(const WeightRecord *record) {
  return record && record->bytes.size() > 0 &&
         (record->onnxType == TensorProto::INT8 || record->onnxType == TensorProto::UINT8);
}

int64_t elementCount(const WeightRecord &record) {
  int64_t count = 1;
  for (int64_t d : record.dims)
    count *= d;
  return count;
}

// Whether a Transpose swaps the two dimensions of a matrix (its perm absent or [1, 0]).
bool transposesMatrix(const NodeProto &node) {
  for (const auto &attr : node.attribute())
    if (attr.name() == "perm")
      return attr.ints_size() == 2 && attr.ints(0) == 1 && attr.ints(1) == 0;
  return true;
}

// A DequantizeLinear's axis over a matrix (1 by default; -1 and -2 counted from the end),
// or -1 for one a matrix does not have.
int matrixAxis(const NodeProto &node) {
  const int64_t axis = intAttribute(node, "axis", 1);
  return axis == 0 || axis == -2 ? 0 : axis == 1 || axis == -1 ? 1 : -1;
}

} // namespace

int64_t intAttribute(const NodeProto &node, llvm::StringRef name, int64_t fallback) {
  for (const auto &attr : node.attribute())
    if (attr.name() == name)
      return attr.i();
  return fallback;
}

void GraphImporter::planDynamicQuantization(const GraphProto &graph) {
  llvm::StringMap<int> producer;
  llvm::StringMap<llvm::SmallVector<Use, 2>> users;
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeProto &node = graph.node(i);
    for (const std::string &output : node.output())
      if (!output.empty())
        producer[output] = i;
    for (int slot = 0; slot < node.input_size(); ++slot)
      if (!node.input(slot).empty())
        users[node.input(slot)].push_back({i, slot});
  }
  // Graph outputs read a value too.
  for (const auto &output : graph.output())
    users[output.name()].push_back({-1, 0});
  auto usersOf = [&](const std::string &name) -> llvm::ArrayRef<Use> {
    auto it = users.find(name);
    return it == users.end() ? llvm::ArrayRef<Use>() : llvm::ArrayRef<Use>(it->second);
  };
  auto opOf = [&](int index) -> llvm::StringRef {
    return index < 0 ? llvm::StringRef() : llvm::StringRef(graph.node(index).op_type());
  };
  auto initializer = [&](const std::string &name) -> const WeightRecord * {
    return name.empty() ? nullptr : store_.lookup(weightKey(name));
  };
  auto keyOf = [&](int index) { return graph.node(index).output(0); };
  auto refuse = [&](int index, std::string why) {
    quantizedNodes_[keyOf(index)] = {QuantizedNode::Refuse, 0, "", -1, std::move(why)};
  };

  for (int d = 0; d < graph.node_size(); ++d) {
    const NodeProto &quantize = graph.node(d);
    if (quantize.op_type() != "DynamicQuantizeLinear" || quantize.output_size() < 1)
      continue;
    const std::string y = quantize.output(0);
    const std::string scale = quantize.output_size() > 1 ? quantize.output(1) : "";
    const std::string zero = quantize.output_size() > 2 ? quantize.output(2) : "";
    llvm::StringMap<QuantizedNode> planned;
    std::string why;
    for (const Use &use : usersOf(y)) {
      if (opOf(use.node) != "MatMulInteger" || use.slot != 0 ||
          graph.node(use.node).output_size() < 1) {
        why = "its quantized x is read by " + (use.node < 0 ? std::string("a graph output")
                                                            : opOf(use.node).str()) +
              ", not only as MatMulInteger's A";
        break;
      }
      const NodeProto &product = graph.node(use.node);
      if (product.input_size() < 3 || product.input(2) != zero) {
        why = "MatMulInteger '" + product.output(0) + "' does not take its zero point";
        break;
      }
      const WeightRecord *b = initializer(product.input(1));
      const WeightRecord *bZero = product.input_size() > 3 ? initializer(product.input(3)) : nullptr;
      if (!isInt8Codes(b) || b->dims.size() != 2 ||
          (product.input_size() > 3 && !product.input(3).empty() &&
           (!bZero || bZero->onnxType != b->onnxType ||
            (elementCount(*bZero) != 1 && elementCount(*bZero) != b->dims[1])))) {
        why = "MatMulInteger '" + product.output(0) +
              "' needs B as an int8 or uint8 [K, N] initializer and its zero point as one "
              "or N of them";
        break;
      }
      llvm::ArrayRef<Use> castUses = usersOf(product.output(0));
      if (castUses.size() != 1 || opOf(castUses[0].node) != "Cast" ||
          graph.node(castUses[0].node).output_size() < 1 ||
          intAttribute(graph.node(castUses[0].node), "to", 0) != TensorProto::FLOAT) {
        why = "MatMulInteger '" + product.output(0) + "' is not read by one Cast to float";
        break;
      }
      const NodeProto &cast = graph.node(castUses[0].node);
      llvm::ArrayRef<Use> mulUses = usersOf(cast.output(0));
      if (mulUses.size() != 1 || opOf(mulUses[0].node) != "Mul" ||
          graph.node(mulUses[0].node).input_size() != 2 ||
          graph.node(mulUses[0].node).output_size() < 1) {
        why = "the Cast of MatMulInteger '" + product.output(0) + "' is not read by one Mul";
        break;
      }
      const NodeProto &rescale = graph.node(mulUses[0].node);
      const std::string factor = rescale.input(1 - mulUses[0].slot);
      auto factorNode = producer.find(factor);
      const NodeProto *scales =
          factorNode == producer.end() ? nullptr : &graph.node(factorNode->second);
      // Mul(x_scale, B_scale), read by this rescale alone.
      std::string weightScale;
      if (scales && scales->op_type() == "Mul" && scales->input_size() == 2 &&
          usersOf(factor).size() == 1) {
        for (int side = 0; side < 2; ++side)
          if (scales->input(side) == scale) {
            const WeightRecord *w = initializer(scales->input(1 - side));
            if (w && w->onnxType == TensorProto::FLOAT &&
                (elementCount(*w) == 1 || elementCount(*w) == b->dims[1]))
              weightScale = scales->input(1 - side);
          }
      }
      if (weightScale.empty()) {
        why = "MatMulInteger '" + product.output(0) +
              "' is not rescaled by Mul(x_scale, B_scale) with B_scale a float initializer";
        break;
      }
      planned[product.output(0)] = {QuantizedNode::Product, 0, weightScale, -1, ""};
      planned[cast.output(0)] = {QuantizedNode::AliasInput, 0, "", -1, ""};
      planned[rescale.output(0)] = {QuantizedNode::AliasInput, mulUses[0].slot, "", -1, ""};
      planned[scales->output(0)] = {QuantizedNode::One, 0, "", -1, ""};
    }
    if (why.empty())
      for (const Use &use : usersOf(zero))
        if (opOf(use.node) != "MatMulInteger" || use.slot != 2)
          why = "its zero point is read by " + opOf(use.node).str();
    if (why.empty())
      for (const Use &use : usersOf(scale))
        if (use.node < 0 || graph.node(use.node).output_size() < 1 ||
            !planned.count(graph.node(use.node).output(0)))
          why = "its scale is read outside Mul(x_scale, B_scale)";
    if (!why.empty()) {
      refuse(d, "DynamicQuantizeLinear is read as ONNX Runtime's quantize_dynamic does not "
                "write it (" + why + ")");
      continue;
    }
    for (auto &entry : planned)
      quantizedNodes_[entry.getKey()] = entry.getValue();
    quantizedNodes_[y] = {QuantizedNode::Exact, 0, "", -1, ""};
  }

  for (int q = 0; q < graph.node_size(); ++q) {
    const NodeProto &dequantize = graph.node(q);
    if (dequantize.op_type() != "DequantizeLinear" || dequantize.output_size() < 1 ||
        quantizedNodes_.count(dequantize.output(0)))  // a blocked one's (planned first)
      continue;
    if (dequantize.input_size() < 2) {
      refuse(q, "DequantizeLinear needs x and x_scale");
      continue;
    }
    const WeightRecord *scale = initializer(dequantize.input_size() > 1 ? dequantize.input(1) : "");
    const WeightRecord *zero = initializer(dequantize.input_size() > 2 ? dequantize.input(2) : "");
    const std::string x = dequantize.input(0);
    const WeightRecord *codes = initializer(x);
    auto gather = producer.find(x);
    const NodeProto *lookup = gather == producer.end() ? nullptr : &graph.node(gather->second);
    // A table read by Gather (an embedding), or transposed (the LM head of a tied one).
    if (lookup && ((lookup->op_type() == "Gather" && lookup->input_size() == 2 &&
                    intAttribute(*lookup, "axis", 0) == 0) ||
                   (lookup->op_type() == "Transpose" && lookup->input_size() == 1 &&
                    transposesMatrix(*lookup))))
      codes = initializer(lookup->input(0));
    else
      lookup = nullptr;
    const bool perTensor = scale && scale->onnxType == TensorProto::FLOAT &&
                           elementCount(*scale) == 1 &&
                           (!zero || (elementCount(*zero) == 1 && codes &&
                                      zero->onnxType == codes->onnxType));
    const bool perAxis = !lookup && codes && codes->dims.size() == 2 && scale &&
                         scale->onnxType == TensorProto::FLOAT &&
                         matrixAxis(dequantize) >= 0 &&
                         elementCount(*scale) == codes->dims[matrixAxis(dequantize)] &&
                         (!zero || (elementCount(*zero) == elementCount(*scale) &&
                                    zero->onnxType == codes->onnxType));
    if (!isInt8Codes(codes) || codes->dims.size() != 2 || !(perTensor || perAxis) ||
        intAttribute(dequantize, "block_size", 0) != 0 ||
        (lookup && usersOf(x).size() != 1)) {
      refuse(q, "DequantizeLinear is supported on an int8 or uint8 2-D initializer (per "
                "tensor or per axis) or on a Gather or Transpose of one (per tensor), as ONNX "
                "Runtime's quantize_dynamic writes it; not on a computed tensor");
      continue;
    }
    if (lookup) {
      quantizedNodes_[x] = {QuantizedNode::SkipGather, 0, "", -1, ""};
      quantizedNodes_[dequantize.output(0)] = {QuantizedNode::DequantizedGather, 0, "",
                                               gather->second, ""};
    } else {
      quantizedNodes_[dequantize.output(0)] = {QuantizedNode::DequantizedInitializer, 0, "",
                                               -1, ""};
    }
  }

  for (int m = 0; m < graph.node_size(); ++m) {
    const NodeProto &node = graph.node(m);
    if (node.op_type() == "MatMulInteger" && node.output_size() > 0 &&
        !quantizedNodes_.count(node.output(0)))
      refuse(m, "MatMulInteger is supported where ONNX Runtime's quantize_dynamic writes it: "
                "A from a DynamicQuantizeLinear, then a Cast to float and a Mul by "
                "Mul(x_scale, B_scale)");
  }
}

namespace {

// (codes[i] - zero[i]) * scale[i] per output i of `outputs`, as an 8-bit NBits coding: one
// block of `inputs` codes per output. `at(o, k)` is output o's k-th code.
template <typename At>
bool addInt8Coding(WeightStore &store, const std::string &name, bool rows, int64_t outputs,
                   int64_t inputs, bool signedCodes, At at, const std::vector<float> &scales,
                   const std::vector<int> &zeros, int32_t floatType, std::string &error) {
  const int offset = signedCodes ? 128 : 0;
  std::vector<uint8_t> codes(static_cast<size_t>(outputs * inputs));
  for (int64_t o = 0; o < outputs; ++o)
    for (int64_t k = 0; k < inputs; ++k)
      codes[static_cast<size_t>(o * inputs + k)] = static_cast<uint8_t>(at(o, k) + offset);
  std::vector<uint8_t> scaleBytes(scales.size() * sizeof(float)), zeroBytes(zeros.size());
  std::memcpy(scaleBytes.data(), scales.data(), scaleBytes.size());
  for (size_t i = 0; i < zeros.size(); ++i)
    zeroBytes[i] = static_cast<uint8_t>(zeros[i] + offset);
  NBitsCoding coding;
  coding.bits = 8;
  coding.blockSize = inputs;
  coding.k = inputs;
  coding.n = outputs;
  coding.rows = rows;
  coding.codes = store.addOwned(name + ".codes", TensorProto::UINT8, {outputs, 1, inputs},
                                std::move(codes), error);
  coding.scales = coding.codes ? store.addOwned(name + ".scales", TensorProto::FLOAT, {outputs},
                                                std::move(scaleBytes), error)
                               : nullptr;
  coding.zeroPoints = coding.scales ? store.addOwned(name + ".zero_points", TensorProto::UINT8,
                                                     {outputs, 1}, std::move(zeroBytes), error)
                                    : nullptr;
  if (!coding.zeroPoints)
    return false;
  if (std::string why = checkNBitsCoding(coding); !why.empty()) {
    error = why;
    return false;
  }
  return store.addNBitsWeight(name, coding, floatType, error);
}

// A record's values as floats (f32) or integers (int8, uint8), broadcast to `count`.
std::vector<float> floatsOf(const WeightRecord &record, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  const int64_t have = elementCount(record);
  for (int64_t i = 0; i < count; ++i) {
    float value;
    std::memcpy(&value, record.bytes.data() + (have == 1 ? 0 : i) * sizeof(float), sizeof value);
    values[static_cast<size_t>(i)] = value;
  }
  return values;
}
std::vector<int> integersOf(const WeightRecord *record, int64_t count) {
  std::vector<int> values(static_cast<size_t>(count), 0);
  if (!record)
    return values;
  const int64_t have = elementCount(*record);
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t byte = record->bytes[static_cast<size_t>(have == 1 ? 0 : i)];
    values[static_cast<size_t>(i)] =
        record->onnxType == TensorProto::INT8 ? int(static_cast<int8_t>(byte)) : int(byte);
  }
  return values;
}

} // namespace

LogicalResult GraphImporter::importQuantizedNode(const GraphProto *graph, const NodeProto &node,
                                                 const QuantizedNode &plan, Location loc) {
  auto operand = [&](int index) -> Value {
    return index < node.input_size() && !node.input(index).empty() ? lookup(node.input(index))
                                                                   : Value();
  };
  auto floatOne = [&](Type element) { return floatScalar(1.0, element, loc); };
  switch (plan.kind) {
  case QuantizedNode::Refuse:
    return emitError(loc) << plan.why;
  case QuantizedNode::Exact: {
    // x itself stands for its quantized self; its scale is 1 and its zero point unread.
    Value x = operand(0);
    if (!x || !isa<FloatType>(cast<TensorType>(x.getType()).getElementType()))
      return emitError(loc) << "DynamicQuantizeLinear needs a float x";
    if (failed(bind(node.output(0), x, loc)))
      return failure();
    if (node.output_size() > 1 &&
        failed(bind(node.output(1), floatOne(cast<TensorType>(x.getType()).getElementType()), loc)))
      return failure();
    return node.output_size() > 2 ? bind(node.output(2), constantI64({0}, loc), loc) : success();
  }
  case QuantizedNode::One: {
    Value factor = operand(0);
    Type element = factor ? cast<TensorType>(factor.getType()).getElementType()
                          : builder_.getF32Type();
    return bind(node.output(0), floatOne(element), loc);
  }
  case QuantizedNode::AliasInput: {
    Value source = operand(plan.input);
    if (!source)
      return emitError(loc) << node.op_type() << " input " << plan.input << " is not defined";
    // The chain's last Mul stands for the float MatMul it replaced, whose declared shape
    // a later op may need (GroupQueryAttention reads its query's width).
    return bindWrittenOut(node, loc, {source});
  }
  case QuantizedNode::SkipGather:
    return success();  // its DequantizeLinear gathers the dequantized table
  case QuantizedNode::Product: {
    Value x = operand(0);
    const WeightRecord *b = store_.lookup(weightKey(node.input(1)));
    const WeightRecord *bZero =
        node.input_size() > 3 && !node.input(3).empty() ? store_.lookup(weightKey(node.input(3)))
                                                        : nullptr;
    const WeightRecord *scale = store_.lookup(weightKey(plan.scale));
    Type element = cast<TensorType>(x.getType()).getElementType();
    if (!element.isF32() && !element.isF16())
      return emitError(loc) << "MatMulInteger's x must be f32 or f16";
    const int64_t k = b->dims[0], n = b->dims[1];
    auto xType = dyn_cast<RankedTensorType>(x.getType());
    if (xType && xType.getRank() >= 1 && !xType.isDynamicDim(xType.getRank() - 1) &&
        xType.getDimSize(xType.getRank() - 1) != k)
      return emitError(loc) << "MatMulInteger: x has " << xType.getDimSize(xType.getRank() - 1)
                            << " features, but B has " << k << " rows";
    // One per B and scale, as the tables below.
    const std::string name = weightKey(node.input(1)) + ".dequantized." + plan.scale;
    if (!store_.lookup(name)) {
      const bool signedCodes = b->onnxType == TensorProto::INT8;
      const uint8_t *bytes = b->bytes.data();
      std::string error;
      // B is [k, n]: output o's codes are its column.
      if (!addInt8Coding(store_, name, /*rows=*/false, n, k, signedCodes,
                         [&](int64_t o, int64_t i) {
                           return signedCodes ? int(static_cast<int8_t>(bytes[i * n + o]))
                                              : int(bytes[i * n + o]);
                         },
                         floatsOf(*scale, n), integersOf(bZero, n),
                         element.isF16() ? TensorProto::FLOAT16 : TensorProto::FLOAT, error))
        return emitError(loc) << "MatMulInteger: " << error;
    }
    Value weight = onnx::WeightOp::create(builder_, loc, RankedTensorType::get({k, n}, element),
                                          name);
    return bindWrittenOut(node, loc, {emit("MatMul", {x, weight}, loc)});
  }
  case QuantizedNode::DequantizedBlocked:
    return importBlockedDequantize(node, loc);
  case QuantizedNode::DequantizedGather:
  case QuantizedNode::DequantizedInitializer: {
    const bool gathered = plan.kind == QuantizedNode::DequantizedGather;
    const NodeProto *lookupNode = gathered ? &graph->node(plan.gather) : nullptr;
    const std::string codesName = gathered ? lookupNode->input(0) : node.input(0);
    const WeightRecord *codes = store_.lookup(weightKey(codesName));
    const WeightRecord *scale = store_.lookup(weightKey(node.input(1)));
    const WeightRecord *zero =
        node.input_size() > 2 && !node.input(2).empty() ? store_.lookup(weightKey(node.input(2)))
                                                        : nullptr;
    const int64_t rowsCount = codes->dims[0], columns = codes->dims[1];
    const bool signedCodes = codes->onnxType == TensorProto::INT8;
    const uint8_t *bytes = codes->bytes.data();
    auto code = [&](int64_t r, int64_t c) {
      const uint8_t byte = bytes[r * columns + c];
      return signedCodes ? int(static_cast<int8_t>(byte)) : int(byte);
    };
    // Per tensor or along axis 0: a row per output ([rows, columns] as a table); along axis
    // 1: a column per output (MatMul's [k, n]).
    const bool byColumn = !gathered && elementCount(*scale) != 1 && matrixAxis(node) == 1;
    const int64_t outputs = byColumn ? columns : rowsCount, inputs = byColumn ? rowsCount : columns;
    // One per table and scale: a tied embedding's Gather and its LM head's Transpose share it.
    const std::string name = weightKey(codesName) + ".dequantized." + node.input(1);
    if (!store_.lookup(name)) {
      std::string error;
      bool added =
          byColumn
              ? addInt8Coding(store_, name, false, outputs, inputs, signedCodes,
                              [&](int64_t o, int64_t i) { return code(i, o); },
                              floatsOf(*scale, outputs), integersOf(zero, outputs),
                              TensorProto::FLOAT, error)
              : addInt8Coding(store_, name, true, outputs, inputs, signedCodes,
                              [&](int64_t o, int64_t i) { return code(o, i); },
                              floatsOf(*scale, outputs), integersOf(zero, outputs),
                              TensorProto::FLOAT, error);
      if (!added)
        return emitError(loc) << "DequantizeLinear: " << error;
    }
    Value table = onnx::WeightOp::create(
        builder_, loc, RankedTensorType::get({rowsCount, columns}, builder_.getF32Type()), name);
    if (!gathered)
      return bind(node.output(0), table, loc);
    if (lookupNode->op_type() == "Transpose")
      return bind(node.output(0),
                  emit("Transpose", {table}, loc,
                       {namedAttr("perm", builder_.getI64ArrayAttr({1, 0}))}),
                  loc);
    Value ids = lookup(lookupNode->input(1));
    if (!ids)
      return emitError(loc) << "Gather input '" << lookupNode->input(1) << "' is not defined";
    return bind(node.output(0), emit("Gather", {table, ids}, loc, {intAttr("axis", 0)}), loc);
  }
  }
  return emitError(loc) << "unplanned quantized node";
}

} // namespace dsc::onnx_frontend
