// Per-node work of the import: ONNX attributes as MLIR attributes, the opset differences
// normalised away, Constant nodes, and result types where the model declares none.
#include "frontends/onnx/GraphImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "frontends/onnx/TensorConversion.h"

#include "mlir/Dialect/Traits.h"

using namespace mlir;

namespace dsc::onnx_frontend {

FailureOr<Attribute> GraphImporter::convertAttribute(const AttributeProto &attr, Location loc) {
  switch (attr.type()) {
  case AttributeProto::FLOAT:
    return Attribute(builder_.getF32FloatAttr(attr.f()));
  case AttributeProto::INT:
    return Attribute(builder_.getI64IntegerAttr(attr.i()));
  case AttributeProto::STRING:
    return Attribute(builder_.getStringAttr(attr.s()));
  case AttributeProto::INTS:
    return Attribute(builder_.getI64ArrayAttr(
        SmallVector<int64_t>(attr.ints().begin(), attr.ints().end())));
  case AttributeProto::FLOATS:
    return Attribute(builder_.getF32ArrayAttr(
        SmallVector<float>(attr.floats().begin(), attr.floats().end())));
  case AttributeProto::TENSOR: {
    std::vector<uint8_t> bytes;
    std::string error;
    if (!decodeInlineTensor(attr.t(), bytes, error))
      return emitError(loc) << "attribute '" << attr.name() << "': tensor " << error;
    Type element = convertElementType(context_, attr.t().data_type());
    auto type = RankedTensorType::get(
        SmallVector<int64_t>(attr.t().dims().begin(), attr.t().dims().end()), element);
    if (type.getNumElements() > kInlineConstantElements)
      return emitError(loc) << "attribute '" << attr.name() << "' holds a tensor of "
                            << type.getNumElements() << " elements, more than the "
                            << kInlineConstantElements << " supported";
    return Attribute(denseFromBytes(type, bytes));
  }
  default:
    return emitError(loc) << "attribute '" << attr.name() << "' has ONNX attribute type "
                          << static_cast<int>(attr.type()) << ", which is not supported here";
  }
}

// Converts the node's attributes and inputs to the dialect's form, whatever the opset.
LogicalResult GraphImporter::normalizeNode(const NodeProto &node, const OpSpec &spec,
                                           Location loc, SmallVectorImpl<Value> &operands,
                                           NamedAttrList &attributes) {
  int64_t opset = opsetOf(node.domain());
  llvm::StringRef op = spec.dialectOp;
  for (const auto &attr : node.attribute()) {
    if (!attr.ref_attr_name().empty())
      return emitError(loc) << "attribute '" << attr.name()
                            << "' refers to a function attribute, which is not supported";
    // Before opset 18 the reductions take their axes as an attribute.
    if (attr.name() == "axes" && (op == "ReduceMean" || op == "ReduceMax") && opset < 18) {
      if (attr.type() != AttributeProto::INTS)
        return emitError(loc) << "attribute 'axes' must be a list of integers";
      if (operands.size() > 1)
        return emitError(loc) << "axes are given both as attribute and as input";
      operands.push_back(constantI64(
          SmallVector<int64_t>(attr.ints().begin(), attr.ints().end()), loc));
      continue;
    }
    // From opset 18 Split may give the number of outputs, which the result count carries.
    if (attr.name() == "num_outputs" && op == "Split" && opset >= 18) {
      if (attr.type() != AttributeProto::INT || attr.i() != node.output_size())
        return emitError(loc) << "num_outputs must equal the " << node.output_size()
                              << " outputs of the node";
      continue;
    }
    // The scatters' reduction came at opset 16, its max and min at 18: an older opset's
    // node with them is not that opset's op, and ONNX's schema check here reads no values.
    if (attr.name() == "reduction" && (op == "ScatterElements" || op == "ScatterND") &&
        attr.s() != "none") {
      int64_t since = attr.s() == "max" || attr.s() == "min" ? 18 : 16;
      if (opset < since)
        return emitError(loc) << op << " reduction '" << attr.s() << "' needs opset " << since
                              << "; the model imports opset " << opset;
    }
    if (attr.name() == "to" && op == "Cast") {
      Type to = attr.type() == AttributeProto::INT ? convertElementType(context_, attr.i())
                                                   : Type();
      if (!to)
        return emitError(loc) << "Cast to an unsupported data type";
      attributes.append("to", TypeAttr::get(to));
      continue;
    }
    FailureOr<Attribute> converted = convertAttribute(attr, loc);
    if (failed(converted))
      return failure();
    attributes.append(attr.name(), *converted);
  }
  if (spec.domain == "com.microsoft") {
    if (spec.opType == "FastGelu") {
      if (operands.size() > 2)
        return emitError(loc) << "FastGelu takes at most 2 inputs (X and bias)";
      attributes.set("approximate", builder_.getStringAttr("tanh"));
      if (operands.size() == 2 && !isa<NoneType>(operands[1].getType())) {
        auto sum = onnx::AddOp::create(builder_, loc, operands[0].getType(), operands[0],
                                                operands[1]);
        operands.assign({sum.getResult()});
      }
      operands.resize(1);
    }
  }
  return success();
}

Type GraphImporter::inferResultType(llvm::StringRef op, ArrayRef<Value> operands,
                                    const NamedAttrList &attributes, unsigned index) const {
  auto typeOf = [&](unsigned i) -> TensorType {
    return i < operands.size() ? dyn_cast<TensorType>(operands[i].getType()) : nullptr;
  };
  Builder b(&context_);
  Type element;
  if (llvm::is_contained({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And",
                          "Or", "Not", "IsNaN"}, op) ||
      (op == "Dropout" && index == 1))
    element = b.getI1Type();
  else if (op == "Shape" || op == "Size" || op == "NonZero" || (op == "TopK" && index == 1))
    element = b.getI64Type();
  else if (op == "OneHot")
    element = typeOf(2) ? typeOf(2).getElementType() : Type();
  else if (op == "Cast")
    element = cast<TypeAttr>(attributes.get("to")).getValue();
  else if (op == "LayerNormalization" && index > 0)
    element = b.getF32Type();
  else if (op == "CastLike" || op == "Where")
    element = typeOf(1) ? typeOf(1).getElementType() : Type();
  else if (op == "ConstantOfShape") {
    auto value = dyn_cast_or_null<ElementsAttr>(attributes.get("value"));
    element = value ? value.getElementType() : b.getF32Type();
  } else if (typeOf(0))
    element = typeOf(0).getElementType();
  if (!element)
    element = b.getF32Type();  // the verifier reports the operand that lacked a type

  // Shapes that follow from the operands alone; everything else waits for shape inference.
  bool sameShape = llvm::is_contained(
      {"Sqrt", "Reciprocal", "Neg", "Abs", "Exp", "Log", "Erf", "Tanh", "Sigmoid", "Relu", "Cos",
       "Sin", "Floor", "Not", "IsNaN", "Identity", "Gelu", "Clip", "Cast", "CastLike", "Softmax",
       "LogSoftmax", "CumSum", "Trilu", "Dropout"}, op) ||
      (op == "LayerNormalization" && index == 0);
  if (sameShape && typeOf(0))
    return typeOf(0).clone(element);
  if (op == "Size")
    return RankedTensorType::get({}, element);
  bool broadcasts = llvm::is_contained({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min",
                                        "Equal", "Less", "Greater", "LessOrEqual",
                                        "GreaterOrEqual", "And", "Or", "Where"}, op);
  if (broadcasts) {
    SmallVector<int64_t> shape;
    for (Value operand : operands) {
      auto ranked = dyn_cast<RankedTensorType>(operand.getType());
      if (!ranked)
        return UnrankedTensorType::get(element);
      SmallVector<int64_t> next;
      if (!OpTrait::util::getBroadcastedShape(shape, ranked.getShape(), next))
        return UnrankedTensorType::get(element);  // the verifier says why
      shape = std::move(next);
    }
    return RankedTensorType::get(shape, element);
  }
  if (op == "Shape" && typeOf(0) && typeOf(0).hasRank() && !attributes.get("start") &&
      !attributes.get("end"))
    return RankedTensorType::get({typeOf(0).getRank()}, element);
  return UnrankedTensorType::get(element);
}

LogicalResult GraphImporter::importConstant(const NodeProto &node, Location loc) {
  if (node.attribute_size() != 1 || node.output_size() != 1)
    return emitError(loc) << "Constant needs exactly one value attribute and one output";
  const AttributeProto &attr = node.attribute(0);
  const std::string &name = node.output(0);
  DenseElementsAttr value;
  if (attr.name() == "value" && attr.type() == AttributeProto::TENSOR) {
    std::vector<uint8_t> bytes;
    std::string error;
    if (!decodeInlineTensor(attr.t(), bytes, error))
      return emitError(loc) << "Constant: tensor " << error;
    auto type = RankedTensorType::get(
        SmallVector<int64_t>(attr.t().dims().begin(), attr.t().dims().end()),
        convertElementType(context_, attr.t().data_type()));
    if (type.getNumElements() > kInlineConstantElements) {
      // Large constants (causal-mask buffers, folded weights) are weights, not attributes.
      // If branches may reuse a value name, so the store key is made unique.
      std::string key = weightKey(name);
      for (int suffix = 1; store_.lookup(key); ++suffix)
        key = weightKey(name) + "#" + std::to_string(suffix);
      if (!store_.add(attr.t(), key, error))
        return emitError(loc) << "Constant: " << error;
      return bind(name, onnx::WeightOp::create(builder_, loc, type, key), loc);
    }
    value = denseFromBytes(type, bytes);
  } else if (attr.name() == "value_float" && attr.type() == AttributeProto::FLOAT) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, builder_.getF32Type()), attr.f());
  } else if (attr.name() == "value_int" && attr.type() == AttributeProto::INT) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, builder_.getI64Type()),
                                   static_cast<int64_t>(attr.i()));
  } else if (attr.name() == "value_ints" && attr.type() == AttributeProto::INTS) {
    SmallVector<int64_t> ints(attr.ints().begin(), attr.ints().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({static_cast<int64_t>(ints.size())}, builder_.getI64Type()),
        ArrayRef<int64_t>(ints));
  } else if (attr.name() == "value_floats" && attr.type() == AttributeProto::FLOATS) {
    SmallVector<float> floats(attr.floats().begin(), attr.floats().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({static_cast<int64_t>(floats.size())}, builder_.getF32Type()),
        ArrayRef<float>(floats));
  } else {
    return emitError(loc) << "Constant with attribute '" << attr.name()
                          << "' is not supported";
  }
  auto constant = onnx::ConstantOp::create(builder_, loc, value.getType(), value);
  return bind(name, constant, loc);
}

} // namespace dsc::onnx_frontend
