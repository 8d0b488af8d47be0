// ONNX GraphProto -> onnx dialect. Normalises opset differences (see OpTable.h and
// normalizeNode) so later passes see one form, and refers to weights by handle.
#include "frontends/onnx/OnnxImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "frontends/onnx/OpTable.h"
#include "frontends/onnx/TensorConversion.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Traits.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Verifier.h"

#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"

#include <google/protobuf/io/coded_stream.h>

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <climits>

using namespace mlir;

namespace dsc::onnx_frontend {
namespace {

using ::onnx::AttributeProto;
using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;
using ::onnx::TypeProto;

// If branches nest; deeper nesting than this is malformed input, not a real model.
constexpr int kMaxGraphDepth = 16;
// Constant nodes up to this many elements are kept inline; larger ones become handles.
constexpr int64_t kInlineConstantElements = 1024;
// Integer initializers up to this size are shape data that folding needs inline.
constexpr int64_t kInlineIntegerInitializerElements = 64;

bool isDefaultDomain(llvm::StringRef domain) { return domain.empty() || domain == "ai.onnx"; }

std::string describeNode(const NodeProto &node, int index) {
  return node.name().empty() ? node.op_type() + " #" + std::to_string(index) : node.name();
}

class GraphImporter {
public:
  GraphImporter(MLIRContext &context, llvm::StringRef modelPath, WeightStore &store)
      : context_(context), builder_(&context), store_(store),
        fileLoc_(FileLineColLoc::get(&context, modelPath, 0, 0)) {}

  LogicalResult importModel(const ModelProto &model, ModuleOp module);

private:
  LogicalResult readOpsets(const ModelProto &model);
  int64_t opsetOf(llvm::StringRef domain) const;
  LogicalResult checkSupported(const GraphProto &graph);
  struct Unsupported {
    std::string key, firstNode;
    int count = 0;
  };
  void collectUnsupported(const GraphProto &graph, int depth, std::vector<Unsupported> &found,
                          llvm::StringMap<size_t> &index, bool &tooDeep);

  LogicalResult importGraph(const GraphProto &graph, int depth, SmallVectorImpl<Value> &outputs);
  LogicalResult importInitializer(const TensorProto &tensor);
  LogicalResult importNode(const NodeProto &node, int index, int depth);
  LogicalResult importIf(const NodeProto &node, Location loc, ArrayRef<Value> inputs, int depth);
  LogicalResult importConstant(const NodeProto &node, Location loc);
  FailureOr<Attribute> convertAttribute(const AttributeProto &attr, Location loc);
  LogicalResult normalizeNode(const NodeProto &node, const OpSpec &spec, Location loc,
                              SmallVectorImpl<Value> &operands, NamedAttrList &attributes);

  Value constantI64(ArrayRef<int64_t> values, Location loc);
  Value noValue(Location loc);
  Value lookup(llvm::StringRef name) const;
  LogicalResult bind(const std::string &name, Value value, Location loc);
  TensorType declaredType(llvm::StringRef name) const;
  LogicalResult recordTypes(const GraphProto &graph);
  Type inferResultType(llvm::StringRef op, ArrayRef<Value> operands,
                       const NamedAttrList &attributes, unsigned index) const;

  MLIRContext &context_;
  OpBuilder builder_;
  WeightStore &store_;
  Location fileLoc_;
  llvm::StringMap<int64_t> opsets_;
  // One entry per graph being imported (the main graph, then If branches).
  std::vector<llvm::StringMap<Value>> values_;
  std::vector<llvm::StringMap<TensorType>> types_;
};

LogicalResult GraphImporter::readOpsets(const ModelProto &model) {
  for (const auto &opset : model.opset_import())
    opsets_[isDefaultDomain(opset.domain()) ? "" : opset.domain()] = opset.version();
  auto it = opsets_.find("");
  if (it == opsets_.end())
    return emitError(fileLoc_) << "the model imports no opset of the default ONNX domain";
  if (it->second < kMinOpset || it->second > kMaxOpset)
    return emitError(fileLoc_) << "opset " << it->second
                               << " of the default ONNX domain is not supported (dsc accepts "
                               << kMinOpset << " to " << kMaxOpset << ")";
  return success();
}

int64_t GraphImporter::opsetOf(llvm::StringRef domain) const {
  auto it = opsets_.find(isDefaultDomain(domain) ? "" : domain);
  return it == opsets_.end() ? 0 : it->second;
}

void GraphImporter::collectUnsupported(const GraphProto &graph, int depth,
                                       std::vector<Unsupported> &found,
                                       llvm::StringMap<size_t> &index, bool &tooDeep) {
  if (depth > kMaxGraphDepth) {
    tooDeep = true;
    return;
  }
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeProto &node = graph.node(i);
    int64_t version = opsetOf(node.domain());
    if (!lookupOp(node.domain(), node.op_type(), version)) {
      std::string key = isDefaultDomain(node.domain()) ? node.op_type()
                                                       : node.domain() + "." + node.op_type();
      key += " (opset " + std::to_string(version) + ")";
      auto [it, inserted] = index.try_emplace(key, found.size());
      if (inserted)
        found.push_back({key, describeNode(node, i)});
      ++found[it->second].count;
    }
    for (const auto &attr : node.attribute()) {
      if (attr.has_g())
        collectUnsupported(attr.g(), depth + 1, found, index, tooDeep);
      for (const auto &g : attr.graphs())
        collectUnsupported(g, depth + 1, found, index, tooDeep);
    }
  }
}

LogicalResult GraphImporter::checkSupported(const GraphProto &graph) {
  std::vector<Unsupported> found;
  llvm::StringMap<size_t> index;
  bool tooDeep = false;
  collectUnsupported(graph, 0, found, index, tooDeep);
  if (tooDeep)
    return emitError(fileLoc_) << "subgraphs are nested more than " << kMaxGraphDepth
                               << " deep";
  if (found.empty())
    return success();
  auto diag = emitError(fileLoc_);
  diag << found.size() << " unsupported ONNX operator type" << (found.size() > 1 ? "s" : "")
       << ":";
  for (const Unsupported &entry : found)
    diag << "\n  " << entry.key << ": " << entry.count << " node" << (entry.count > 1 ? "s" : "")
         << ", first '" << entry.firstNode << "'";
  return failure();
}

Value GraphImporter::lookup(llvm::StringRef name) const {
  for (auto scope = values_.rbegin(); scope != values_.rend(); ++scope)
    if (auto it = scope->find(name); it != scope->end())
      return it->second;
  return nullptr;
}

TensorType GraphImporter::declaredType(llvm::StringRef name) const {
  for (auto scope = types_.rbegin(); scope != types_.rend(); ++scope)
    if (auto it = scope->find(name); it != scope->end())
      return it->second;
  return nullptr;
}

LogicalResult GraphImporter::bind(const std::string &name, Value value, Location loc) {
  if (name.empty())
    return success();
  if (!values_.back().try_emplace(name, value).second)
    return emitError(loc) << "value '" << name << "' is defined more than once";
  return success();
}

LogicalResult GraphImporter::recordTypes(const GraphProto &graph) {
  auto record = [&](const ::onnx::ValueInfoProto &info) -> LogicalResult {
    ConvertedType converted;
    std::string error;
    if (!convertType(context_, info.type(), converted, error))
      return emitError(fileLoc_) << "value '" << info.name() << "' " << error;
    if (converted.type)
      types_.back()[info.name()] = converted.type;
    return success();
  };
  for (const auto &info : graph.value_info())
    if (failed(record(info)))
      return failure();
  for (const auto &info : graph.output())
    if (failed(record(info)))
      return failure();
  return success();
}

Value GraphImporter::noValue(Location loc) {
  return builder_.create<onnx::NoValueOp>(loc, builder_.getNoneType()).getResult();
}

Value GraphImporter::constantI64(ArrayRef<int64_t> values, Location loc) {
  auto type = RankedTensorType::get({static_cast<int64_t>(values.size())},
                                    builder_.getI64Type());
  return builder_.create<onnx::ConstantOp>(loc, type, DenseIntElementsAttr::get(type, values));
}

LogicalResult GraphImporter::importInitializer(const TensorProto &tensor) {
  std::string error;
  if (!store_.add(tensor, tensor.name(), error))
    return emitError(fileLoc_) << "initializer: " << error;
  const WeightRecord *record = store_.lookup(tensor.name());
  Type element = convertElementType(context_, record->onnxType);
  auto type = RankedTensorType::get(record->dims, element);
  int64_t count = type.getNumElements();
  Location loc = NameLoc::get(builder_.getStringAttr(tensor.name()), fileLoc_);
  Value value;
  bool shapeData = element.isInteger() && count <= kInlineIntegerInitializerElements;
  if (shapeData || count <= 1)
    value = builder_.create<onnx::ConstantOp>(loc, type, denseFromBytes(type, record->bytes));
  else
    value = builder_.create<onnx::WeightOp>(loc, type, tensor.name());
  return bind(tensor.name(), value, loc);
}

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
        auto sum = builder_.create<onnx::AddOp>(loc, operands[0].getType(), operands[0],
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
  else if (op == "Shape" || op == "Size")
    element = b.getI64Type();
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
      std::string key = name;
      for (int suffix = 1; store_.lookup(key); ++suffix)
        key = name + "#" + std::to_string(suffix);
      if (!store_.add(attr.t(), key, error))
        return emitError(loc) << "Constant: " << error;
      return bind(name, builder_.create<onnx::WeightOp>(loc, type, key), loc);
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
  auto constant = builder_.create<onnx::ConstantOp>(loc, value.getType(), value);
  return bind(name, constant, loc);
}

// The type both branches agree on: equal types stay, otherwise the differing dimensions
// (or the whole shape) become dynamic.
static Type joinBranchTypes(Type a, Type b) {
  if (a == b)
    return a;
  auto ta = cast<TensorType>(a), tb = cast<TensorType>(b);
  if (ta.hasRank() && tb.hasRank() && ta.getRank() == tb.getRank()) {
    SmallVector<int64_t> shape;
    for (auto [x, y] : llvm::zip(ta.getShape(), tb.getShape()))
      shape.push_back(x == y ? x : ShapedType::kDynamic);
    return RankedTensorType::get(shape, ta.getElementType());
  }
  return UnrankedTensorType::get(ta.getElementType());
}

LogicalResult GraphImporter::importIf(const NodeProto &node, Location loc,
                                      ArrayRef<Value> inputs, int depth) {
  const GraphProto *branches[2] = {nullptr, nullptr};
  for (const auto &attr : node.attribute()) {
    if (attr.name() == "then_branch" && attr.has_g())
      branches[0] = &attr.g();
    else if (attr.name() == "else_branch" && attr.has_g())
      branches[1] = &attr.g();
    else
      return emitError(loc) << "If has an unexpected attribute '" << attr.name() << "'";
  }
  if (!branches[0] || !branches[1])
    return emitError(loc) << "If needs both then_branch and else_branch graphs";
  if (inputs.size() != 1)
    return emitError(loc) << "If takes exactly one input (the condition)";

  SmallVector<std::unique_ptr<Region>, 2> regions;
  SmallVector<SmallVector<Value>, 2> yielded;
  for (const GraphProto *branch : branches) {
    OpBuilder::InsertionGuard guard(builder_);
    if (branch->output_size() != node.output_size())
      return emitError(loc) << "a branch of If has " << branch->output_size()
                            << " outputs for the node's " << node.output_size();
    auto region = std::make_unique<Region>();
    builder_.setInsertionPointToStart(&region->emplaceBlock());
    SmallVector<Value> outputs;
    if (failed(importGraph(*branch, depth + 1, outputs)))
      return failure();
    builder_.create<onnx::YieldOp>(loc, outputs);
    yielded.push_back(outputs);
    regions.push_back(std::move(region));
  }

  SmallVector<Type> resultTypes;
  for (int i = 0; i < node.output_size(); ++i) {
    TensorType declared = declaredType(node.output(i));
    resultTypes.push_back(declared ? Type(declared)
                                   : joinBranchTypes(yielded[0][i].getType(),
                                                     yielded[1][i].getType()));
  }
  OperationState state(loc, onnx::IfOp::getOperationName());
  state.addOperands(inputs);
  state.addTypes(resultTypes);
  for (auto &region : regions)
    state.addRegion(std::move(region));
  Operation *op = builder_.create(state);
  for (int i = 0; i < node.output_size(); ++i)
    if (failed(bind(node.output(i), op->getResult(i), loc)))
      return failure();
  return success();
}

LogicalResult GraphImporter::importNode(const NodeProto &node, int index, int depth) {
  Location loc = NameLoc::get(builder_.getStringAttr(describeNode(node, index)), fileLoc_);
  const OpSpec *spec = lookupOp(node.domain(), node.op_type(), opsetOf(node.domain()));
  assert(spec && "checkSupported rejects unsupported nodes first");

  SmallVector<Value> operands;
  for (const std::string &name : node.input()) {
    if (name.empty()) {
      operands.push_back(noValue(loc));
      continue;
    }
    Value value = lookup(name);
    if (!value)
      return emitError(loc) << node.op_type() << " input '" << name
                            << "' is not defined by an earlier node, a graph input or an "
                               "initializer";
    operands.push_back(value);
  }
  if (spec->opType == "Constant")
    return importConstant(node, loc);
  if (spec->opType == "If")
    return importIf(node, loc, operands, depth);

  NamedAttrList attributes;
  if (failed(normalizeNode(node, *spec, loc, operands, attributes)))
    return failure();
  if (spec->numOperands != kVariadic) {
    if (static_cast<int>(operands.size()) > spec->numOperands)
      return emitError(loc) << node.op_type() << " has " << operands.size()
                            << " inputs but takes at most " << spec->numOperands;
    while (static_cast<int>(operands.size()) < spec->numOperands)
      operands.push_back(noValue(loc));
  }
  int numResults = spec->numResults == kVariadic ? node.output_size() : spec->numResults;
  if (node.output_size() > numResults)
    return emitError(loc) << node.op_type() << " has " << node.output_size()
                          << " outputs but produces at most " << numResults;

  OperationState state(loc, ("onnx." + spec->dialectOp).str());
  auto registered = state.name.getRegisteredInfo();
  assert(registered && "every op of the table is in the dialect");
  for (const NamedAttribute &attr : attributes)
    if (!llvm::is_contained(registered->getAttributeNames(), attr.getName()))
      return emitError(loc) << node.op_type() << " has attribute '" << attr.getName().str()
                            << "', which dsc does not support";
  for (int i = 0; i < numResults; ++i) {
    // A declared type wins unless it says less than what the operands already tell.
    TensorType declared = i < node.output_size() ? declaredType(node.output(i)) : nullptr;
    Type inferred = inferResultType(spec->dialectOp, operands, attributes, i);
    bool preferInferred = declared && !declared.hasRank() && cast<TensorType>(inferred).hasRank() &&
                          declared.getElementType() == cast<TensorType>(inferred).getElementType();
    state.addTypes(declared && !preferInferred ? Type(declared) : inferred);
  }
  state.addOperands(operands);
  state.addAttributes(attributes);
  Operation *op = builder_.create(state);
  for (const NamedAttribute &attr : attributes)
    if (op->getInherentAttr(attr.getName()) != attr.getValue())
      return emitError(loc) << node.op_type() << " attribute '" << attr.getName().str()
                            << "' has the wrong type";
  for (int i = 0; i < node.output_size(); ++i)
    if (failed(bind(node.output(i), op->getResult(i), loc)))
      return failure();
  return success();
}

LogicalResult GraphImporter::importGraph(const GraphProto &graph, int depth,
                                         SmallVectorImpl<Value> &outputs) {
  values_.emplace_back();
  types_.emplace_back();
  auto popScopes = llvm::make_scope_exit([&] {
    values_.pop_back();
    types_.pop_back();
  });
  if (graph.sparse_initializer_size() > 0)
    return emitError(fileLoc_) << "sparse initializers are not supported";
  if (failed(recordTypes(graph)))
    return failure();
  for (const auto &tensor : graph.initializer())
    if (failed(importInitializer(tensor)))
      return failure();
  if (depth == 0) {
    // The entry block's arguments are the graph inputs; bind them in this scope.
    Block *entry = builder_.getInsertionBlock();
    unsigned argument = 0;
    for (const auto &input : graph.input()) {
      if (store_.lookup(input.name()))
        continue;
      if (failed(bind(input.name(), entry->getArgument(argument++), fileLoc_)))
        return failure();
    }
  }
  for (int i = 0; i < graph.node_size(); ++i)
    if (failed(importNode(graph.node(i), i, depth)))
      return failure();
  for (const auto &output : graph.output()) {
    Value value = lookup(output.name());
    if (!value)
      return emitError(fileLoc_) << "graph output '" << output.name()
                                 << "' is not produced by any node, input or initializer";
    outputs.push_back(value);
  }
  return success();
}

LogicalResult GraphImporter::importModel(const ModelProto &model, ModuleOp module) {
  if (failed(readOpsets(model)) || failed(checkSupported(model.graph())))
    return failure();
  const GraphProto &graph = model.graph();

  // Graph inputs that are also initializers (IR version < 4) are weights, not arguments.
  llvm::StringSet<> initializers;
  for (const auto &tensor : graph.initializer())
    initializers.insert(tensor.name());
  SmallVector<Type> argumentTypes;
  SmallVector<DictionaryAttr> argumentAttrs;
  auto describe = [&](const ::onnx::ValueInfoProto &info,
                      const ConvertedType &converted) -> DictionaryAttr {
    NamedAttrList attrs;
    attrs.append("onnx.name", builder_.getStringAttr(info.name()));
    if (converted.hasSymbolicDims) {
      SmallVector<Attribute> names;
      for (const std::string &dim : converted.dimNames)
        names.push_back(builder_.getStringAttr(dim));
      attrs.append("onnx.dims", builder_.getArrayAttr(names));
    }
    return attrs.getDictionary(&context_);
  };
  for (const auto &input : graph.input()) {
    if (initializers.contains(input.name()))
      continue;
    ConvertedType converted;
    std::string error;
    if (!convertType(context_, input.type(), converted, error))
      return emitError(fileLoc_) << "graph input '" << input.name() << "' " << error;
    if (!converted.type)
      return emitError(fileLoc_) << "graph input '" << input.name() << "' has no tensor type";
    argumentTypes.push_back(converted.type);
    argumentAttrs.push_back(describe(input, converted));
  }

  builder_.setInsertionPointToEnd(module.getBody());
  auto func = builder_.create<func::FuncOp>(fileLoc_, "main",
                                            builder_.getFunctionType(argumentTypes, {}));
  Block *entry = func.addEntryBlock();
  builder_.setInsertionPointToStart(entry);
  SmallVector<Value> outputs;
  if (failed(importGraph(graph, 0, outputs)))
    return failure();
  builder_.create<func::ReturnOp>(fileLoc_, outputs);

  SmallVector<Type> resultTypes;
  SmallVector<DictionaryAttr> resultAttrs;
  for (auto [output, value] : llvm::zip(graph.output(), outputs)) {
    ConvertedType converted;
    std::string error;
    if (!convertType(context_, output.type(), converted, error))
      return emitError(fileLoc_) << "graph output '" << output.name() << "' " << error;
    if (converted.type && (converted.type.getElementType() !=
                               cast<TensorType>(value.getType()).getElementType() ||
                           failed(verifyCompatibleShape(converted.type, value.getType()))))
      return emitError(fileLoc_) << "graph output '" << output.name() << "' is declared as "
                                 << converted.type << " but its value has type "
                                 << value.getType();
    resultTypes.push_back(value.getType());
    resultAttrs.push_back(describe(output, converted));
  }
  func.setFunctionType(builder_.getFunctionType(argumentTypes, resultTypes));
  func.setAllArgAttrs(argumentAttrs);
  func.setAllResultAttrs(resultAttrs);

  NamedAttrList opsetAttrs;
  for (auto &entry : opsets_)
    opsetAttrs.append(entry.getKey().empty() ? "ai.onnx" : entry.getKey(),
                      builder_.getI64IntegerAttr(entry.getValue()));
  module->setAttr("onnx.opset_import", opsetAttrs.getDictionary(&context_));
  module->setAttr("onnx.ir_version", builder_.getI64IntegerAttr(model.ir_version()));
  if (!model.producer_name().empty())
    module->setAttr("onnx.producer",
                    builder_.getStringAttr(model.producer_name() + " " + model.producer_version()));
  return verify(module);
}

bool looksLikeText(llvm::StringRef path, llvm::StringRef bytes) {
  if (path.ends_with(".onnxtxt") || path.ends_with(".txt"))
    return true;
  llvm::StringRef start = bytes.ltrim();
  return start.starts_with("<") || start.starts_with("#");
}

FailureOr<std::unique_ptr<ModelProto>> parseModel(llvm::StringRef bytes, bool text,
                                                  Location loc) {
  auto model = std::make_unique<ModelProto>();
  if (text) {
    std::string source = bytes.str();
    try {
      ::onnx::OnnxParser parser(source.c_str());
      auto status = parser.Parse(*model);
      if (!status.IsOK())
        return emitError(loc) << "ONNX text syntax error: " << status.ErrorMessage();
      if (!parser.EndOfInput())
        return emitError(loc) << "ONNX text syntax error: unexpected text after the model";
    } catch (const std::exception &e) {
      return emitError(loc) << "ONNX text syntax error: " << e.what();
    }
    return model;
  }
  if (bytes.size() > INT_MAX)
    return emitError(loc) << "the model file is larger than 2 GiB; store its weights as "
                             "external data";
  google::protobuf::io::CodedInputStream stream(
      reinterpret_cast<const uint8_t *>(bytes.data()), static_cast<int>(bytes.size()));
  stream.SetTotalBytesLimit(INT_MAX);
  if (!model->ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage())
    return emitError(loc) << "not a valid ONNX model: the protobuf cannot be parsed";
  if (!model->has_graph())
    return emitError(loc) << "not a valid ONNX model: it has no graph";
  return model;
}

} // namespace

void loadImportDialects(MLIRContext &context) {
  context.loadDialect<onnx::OnnxDialect, func::FuncDialect>();
}

FailureOr<ImportedModel> importModelBuffer(MLIRContext &context, llvm::StringRef bytes,
                                           llvm::StringRef modelPath, ModelSyntax syntax) {
  loadImportDialects(context);
  Location fileLoc = FileLineColLoc::get(&context, modelPath, 0, 0);
  bool text = syntax == ModelSyntax::Text ||
              (syntax == ModelSyntax::Detect && looksLikeText(modelPath, bytes));
  auto model = parseModel(bytes, text, fileLoc);
  if (failed(model))
    return failure();

  llvm::SmallString<256> directory(modelPath);
  llvm::sys::path::remove_filename(directory);
  if (directory.empty())
    directory = ".";
  ImportedModel imported;
  imported.weights = std::make_shared<WeightStore>(std::string(directory));
  const ModelProto &proto = **model;
  imported.weights->adoptModel(std::move(*model));
  imported.module = ModuleOp::create(fileLoc);
  GraphImporter importer(context, modelPath, *imported.weights);
  if (failed(importer.importModel(proto, *imported.module)))
    return failure();
  return imported;
}

FailureOr<ImportedModel> importModelFile(MLIRContext &context, llvm::StringRef path,
                                         ModelSyntax syntax) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return emitError(FileLineColLoc::get(&context, path, 0, 0))
           << "cannot read the model: " << buffer.getError().message();
  return importModelBuffer(context, (*buffer)->getBuffer(), path, syntax);
}

} // namespace dsc::onnx_frontend
