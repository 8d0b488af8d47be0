// Graphs, scopes and nodes: the structure of the import. Attribute conversion, opset
// normalisation and result types are in NodeNormalization.cpp.
#include "frontends/onnx/GraphImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "frontends/onnx/TensorConversion.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Verifier.h"

#include "onnx/defs/schema.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace dsc::onnx_frontend {

static std::string describeNode(const NodeProto &node, int index) {
  return node.name().empty() ? node.op_type() + " #" + std::to_string(index) : node.name();
}

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
  for (const auto &info : graph.value_info()) {
    // A QDQ export declares its 4-bit codes too; only a planned DequantizeLinear reads them
    // (BlockedDequantization.cpp), so their type has no use here.
    if (info.type().has_tensor_type() &&
        isFourBitIntegerType(info.type().tensor_type().elem_type()))
      continue;
    if (failed(record(info)))
      return failure();
  }
  for (const auto &info : graph.output())
    if (failed(record(info)))
      return failure();
  return success();
}

Value GraphImporter::noValue(Location loc) {
  return onnx::NoValueOp::create(builder_, loc, builder_.getNoneType()).getResult();
}

Value GraphImporter::constantI64(ArrayRef<int64_t> values, Location loc) {
  auto type = RankedTensorType::get({static_cast<int64_t>(values.size())},
                                    builder_.getI64Type());
  return onnx::ConstantOp::create(builder_, loc, type, DenseIntElementsAttr::get(type, values));
}

LogicalResult GraphImporter::importInitializer(const TensorProto &tensor) {
  std::string error;
  std::string key = weightKey(tensor.name());
  if (!store_.add(tensor, key, error))
    return emitError(fileLoc_) << "initializer: " << error;
  const WeightRecord *record = store_.lookup(key);
  // 4-bit codes stay packed in the store, a weight no op reads but the DequantizeLinear
  // the importer plans for them (BlockedDequantization.cpp).
  const bool fourBit = isFourBitIntegerType(record->onnxType);
  Type element = fourBit ? builder_.getIntegerType(4, record->onnxType == kOnnxInt4)
                         : convertElementType(context_, record->onnxType);
  auto type = RankedTensorType::get(record->dims, element);
  int64_t count = type.getNumElements();
  Location loc = NameLoc::get(builder_.getStringAttr(tensor.name()), fileLoc_);
  Value value;
  bool shapeData = element.isInteger() && count <= kInlineIntegerInitializerElements;
  if (!fourBit && (shapeData || count <= 1))
    value = onnx::ConstantOp::create(builder_, loc, type, denseFromBytes(type, record->bytes));
  else
    value = onnx::WeightOp::create(builder_, loc, type, key);
  return bind(tensor.name(), value, loc);
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

// The declared type of an If's result, its dimensions known where the branches agree on
// them and the declaration leaves them open (the GenAI builder declares LongRoPE's chosen
// rotary tables [?, ?]; both branches' tables have r / 2 columns, which the importer's
// GroupQueryAttention needs to see a partial rotary).
static Type refineByBranches(TensorType declared, Type joined) {
  auto branches = dyn_cast<RankedTensorType>(joined);
  if (!branches || branches.getElementType() != declared.getElementType())
    return declared;
  if (!declared.hasRank())
    return branches;
  if (declared.getRank() != branches.getRank())
    return declared;
  SmallVector<int64_t> shape;
  for (auto [given, agreed] : llvm::zip(declared.getShape(), branches.getShape()))
    shape.push_back(ShapedType::isDynamic(given) ? agreed : given);
  return RankedTensorType::get(shape, declared.getElementType());
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
    onnx::YieldOp::create(builder_, loc, outputs);
    yielded.push_back(outputs);
    regions.push_back(std::move(region));
  }

  SmallVector<Type> resultTypes;
  for (int i = 0; i < node.output_size(); ++i) {
    TensorType declared = declaredType(node.output(i));
    Type joined = joinBranchTypes(yielded[0][i].getType(), yielded[1][i].getType());
    resultTypes.push_back(declared ? refineByBranches(declared, joined) : joined);
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

// The node against ONNX's own schema of its op at the model's opset (the onnx library's
// registry, the one table of every op's required attributes and input and output counts),
// before any importer code reads an attribute or an input: a node without Cast's `to` or
// with too few inputs is an error that names what is missing, never a crash. Ops the
// library has no schema for (other domains) keep the op table's checks. Above the newest
// opset the library knows (Debian's onnx 1.12 stops at 17), its schemas may be older than
// the node's (ReduceMean took its axes as an input from 18 on): only the required
// attributes are checked there, which no opset since 13 has dropped.
static LogicalResult checkAgainstSchema(const NodeProto &node, int64_t opset, Location loc) {
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    return success();
  const ::onnx::OpSchema *schema =
      ::onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(opset), "");
  if (!schema)
    return success();
  const auto &ranges = ::onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  auto range = ranges.find("");
  const bool schemaIsCurrent = range != ranges.end() && opset <= range->second.second;
  for (const auto &[name, attribute] : schema->attributes()) {
    if (!attribute.required)
      continue;
    bool present = llvm::any_of(node.attribute(), [&, &name = name](const auto &given) {
      return given.name() == name;
    });
    if (!present)
      return emitError(loc) << node.op_type() << " lacks its required attribute '" << name
                            << "' (ONNX opset " << opset << ")";
  }
  if (!schemaIsCurrent)
    return success();
  if (node.input_size() < schema->min_input() || node.input_size() > schema->max_input())
    return emitError(loc) << node.op_type() << " has " << node.input_size()
                          << " inputs; ONNX opset " << opset << " takes "
                          << schema->min_input() << " to " << schema->max_input();
  const auto &formals = schema->inputs();
  for (int i = 0; i < node.input_size() && i < static_cast<int>(formals.size()); ++i)
    if (node.input(i).empty() &&
        formals[i].GetOption() == ::onnx::OpSchema::FormalParameterOption::Single)
      return emitError(loc) << node.op_type() << " input " << i << " ('"
                            << formals[i].GetName() << "') is required but empty";
  if (node.output_size() < schema->min_output() || node.output_size() > schema->max_output())
    return emitError(loc) << node.op_type() << " has " << node.output_size()
                          << " outputs; ONNX opset " << opset << " gives "
                          << schema->min_output() << " to " << schema->max_output();
  return success();
}

LogicalResult GraphImporter::importNode(const NodeProto &node, int index, int depth) {
  Location loc = NameLoc::get(builder_.getStringAttr(describeNode(node, index)), fileLoc_);
  const OpSpec *spec = lookupOp(node.domain(), node.op_type(), opsetOf(node.domain()));
  assert(spec && "checkSupported rejects unsupported nodes first");
  if (failed(checkAgainstSchema(node, opsetOf(node.domain()), loc)))
    return failure();
  if (node.output_size() > 0)
    if (auto planned = quantizedNodes_.find(node.output(0)); planned != quantizedNodes_.end())
      return importQuantizedNode(graphs_.back(), node, planned->second, loc);

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
  if (spec->dialectOp.empty()) {
    if (static_cast<int>(operands.size()) > spec->numOperands ||
        node.output_size() > spec->numResults)
      return emitError(loc) << node.op_type() << " has " << operands.size() << " inputs and "
                            << node.output_size() << " outputs; at most " << spec->numOperands
                            << " and " << spec->numResults << " are supported";
    return spec->domain == "com.microsoft" ? importMicrosoftOp(node, loc, operands)
                                           : importFunctionOp(node, loc, operands);
  }

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

LogicalResult GraphImporter::checkNamesWrittenOnce(const GraphProto &graph) {
  llvm::StringMap<std::string> writer;
  for (const auto &input : graph.input())
    writer.try_emplace(input.name(), "it is an input of the graph");
  for (const auto &tensor : graph.initializer())
    writer.try_emplace(tensor.name(), "it is an initializer");
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeProto &node = graph.node(i);
    for (const std::string &output : node.output()) {
      if (output.empty())
        continue;
      auto [it, fresh] =
          writer.try_emplace(output, "node '" + describeNode(node, i) + "' writes too");
      if (!fresh)
        return emitError(NameLoc::get(builder_.getStringAttr(describeNode(node, i)), fileLoc_))
               << "value '" << output << "' is defined more than once: " << it->second
               << " (an ONNX graph assigns each name once)";
    }
  }
  return success();
}

LogicalResult GraphImporter::importGraph(const GraphProto &graph, int depth,
                                         SmallVectorImpl<Value> &outputs) {
  values_.emplace_back();
  types_.emplace_back();
  llvm::scope_exit popScopes([&] {
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
      if (store_.lookup(weightKey(input.name())))
        continue;
      if (failed(bind(input.name(), entry->getArgument(argument++), fileLoc_)))
        return failure();
    }
  }
  if (failed(checkNamesWrittenOnce(graph)))
    return failure();
  planBlockedDequantization(graph);
  planDynamicQuantization(graph);
  graphs_.push_back(&graph);
  llvm::scope_exit popGraph([&] { graphs_.pop_back(); });
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

LogicalResult GraphImporter::importModel(const ModelProto &model, ModuleOp module,
                                         llvm::StringRef function) {
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
  auto func = func::FuncOp::create(builder_, fileLoc_, function,
                                            builder_.getFunctionType(argumentTypes, {}));
  Block *entry = func.addEntryBlock();
  builder_.setInsertionPointToStart(entry);
  SmallVector<Value> outputs;
  if (failed(importGraph(graph, 0, outputs)))
    return failure();
  func::ReturnOp::create(builder_, fileLoc_, outputs);

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
  // The argument types as the import left them: a written-out op may have refined one (the
  // GenAI builder's caches declare their head size by a symbol).
  func.setFunctionType(builder_.getFunctionType(entry->getArgumentTypes(), resultTypes));
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

} // namespace dsc::onnx_frontend
