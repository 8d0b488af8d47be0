// Internal to frontends/onnx: walks an ONNX graph and builds the onnx dialect. Split over
// GraphImporter.cpp (graphs, values, nodes) and NodeNormalization.cpp (attributes, opset
// normalisation, result types).
#ifndef DSC_FRONTENDS_ONNX_GRAPHIMPORTER_H
#define DSC_FRONTENDS_ONNX_GRAPHIMPORTER_H

#include "frontends/onnx/OpTable.h"
#include "frontends/onnx/WeightStore.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include "onnx/onnx_pb.h"

#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>
#include <vector>

namespace dsc::onnx_frontend {

// The importer of one model; see OnnxImporter.h for the entry points.
// If branches nest; deeper nesting than this is malformed input, not a real model.
constexpr int kMaxGraphDepth = 16;
// Constant nodes up to this many elements are kept inline; larger ones become handles.
constexpr int64_t kInlineConstantElements = 1024;
// Integer initializers up to this size are shape data that folding needs inline.
constexpr int64_t kInlineIntegerInitializerElements = 64;

inline bool isDefaultDomain(llvm::StringRef domain) {
  return domain.empty() || domain == "ai.onnx";
}

using mlir::ArrayRef;
using mlir::Attribute;
using mlir::FailureOr;
using mlir::FileLineColLoc;
using mlir::Location;
using mlir::LogicalResult;
using mlir::ModuleOp;
using mlir::MLIRContext;
using mlir::NamedAttrList;
using mlir::OpBuilder;
using mlir::SmallVectorImpl;
using mlir::TensorType;
using mlir::Type;
using mlir::Value;
using ::onnx::AttributeProto;
using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

// The int attribute `name` of `node`, or `fallback` (for the planners, which read a few
// attributes of nodes they have not imported).
int64_t intAttribute(const NodeProto &node, llvm::StringRef name, int64_t fallback);

// A node's integer, float, string and integer-list attributes: all that the ops written out
// in primitive ops (FunctionOps.cpp, MicrosoftOps.cpp) take.
struct NodeAttributes {
  llvm::StringMap<int64_t> ints;
  llvm::StringMap<float> floats;
  llvm::StringMap<std::string> strings;
  llvm::StringMap<llvm::SmallVector<int64_t>> intLists;
  // Fails, naming the attribute, on one of another type.
  LogicalResult read(const NodeProto &node, Location loc);
  int64_t intOr(llvm::StringRef name, int64_t fallback) const;
  float floatOr(llvm::StringRef name, float fallback) const;
  llvm::StringRef stringOr(llvm::StringRef name, llvm::StringRef fallback) const;
  // The name of an attribute that is not among `known`, or "" when there is none.
  llvm::StringRef unknown(std::initializer_list<llvm::StringRef> known) const;
};

// What an attention's scores are masked by (GraphImporter::attend).
struct AttentionMasks {
  bool causal = false;
  int64_t window = -1;          // >= 0: only the last `window` keys up to the query
  float softcap = 0;            // > 0: scores become softcap * tanh(scores / softcap)
  Value padding;                // [b, total] nonzero where a key is valid
  Value lengths;                // [b] valid keys 0 .. lengths[b] - 1 (without `padding`)
  Value bias;                   // added to the scores
  Value sinks;                  // [heads]: one more logit per row, in the softmax only
  std::optional<double> maskValue;  // what a masked score becomes; none: -inf
};

class GraphImporter {
public:
  // `weightPrefix` keeps the initializers of two models imported into one module (an
  // encoder and a decoder) apart in the store: exporters reuse names across files.
  GraphImporter(MLIRContext &context, llvm::StringRef modelPath, WeightStore &store,
                std::string weightPrefix = "")
      : context_(context), builder_(&context), store_(store),
        fileLoc_(FileLineColLoc::get(&context, modelPath, 0, 0)),
        weightPrefix_(std::move(weightPrefix)) {}

  // The graph becomes func.func @`function` of `module`.
  LogicalResult importModel(const ModelProto &model, ModuleOp module,
                            llvm::StringRef function = "main");

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
  // Opset 23's Attention, RotaryEmbedding and RMSNormalization, written out in primitive
  // ops (FunctionOps.cpp).
  LogicalResult importFunctionOp(const NodeProto &node, Location loc, ArrayRef<Value> inputs);
  // ONNX Runtime's contrib ops that its GenAI model builder and transformer optimizer write
  // (MatMulNBits, GroupQueryAttention, the skip norms), written out (MicrosoftOps.cpp).
  LogicalResult importMicrosoftOp(const NodeProto &node, Location loc, ArrayRef<Value> inputs);
  LogicalResult writeGroupQueryAttention(const NodeProto &node, const NodeAttributes &attrs,
                                         Location loc, ArrayRef<Value> inputs,
                                         SmallVectorImpl<Value> &results);
  LogicalResult writeAttention(const NodeProto &node, const NodeAttributes &attrs, Location loc,
                               ArrayRef<Value> inputs, SmallVectorImpl<Value> &results);
  LogicalResult writeMultiHeadAttention(const NodeProto &node, const NodeAttributes &attrs,
                                        Location loc, ArrayRef<Value> inputs,
                                        SmallVectorImpl<Value> &results);
  // [b, s, heads * d] -> [b, heads, s, d].
  Value headsFirst(Value x, int64_t heads, int64_t headSize, Location loc);
  // Softmax attention of query [b, heads, s, d] over key and value [b, kvHeads, total, d]
  // (cached and new), scaled by `scale` (0: 1 / sqrt(d)) and masked by `masks`:
  // [b, s, heads * d].
  Value attend(Value query, Value key, Value value, int64_t heads, int64_t kvHeads,
               int64_t headSize, double scale, const AttentionMasks &masks, Location loc);
  LogicalResult writeEmbedLayerNormalization(const NodeProto &node, const NodeAttributes &attrs,
                                            Location loc, ArrayRef<Value> inputs,
                                            SmallVectorImpl<Value> &results);
  LogicalResult writeGatherBlockQuantized(const NodeProto &node, const NodeAttributes &attrs,
                                          Location loc, ArrayRef<Value> inputs,
                                          SmallVectorImpl<Value> &results);
  LogicalResult writeMatMulNBits(const NodeProto &node, const NodeAttributes &attrs,
                                 Location loc, ArrayRef<Value> inputs,
                                 SmallVectorImpl<Value> &results);
  // com.microsoft.MoE and QMoE (MicrosoftMoe.cpp): every expert computed, weighted by its
  // column of the routing weights, the form dsc-recognize-moe reads.
  LogicalResult writeMoe(const NodeProto &node, const NodeAttributes &attrs, Location loc,
                         ArrayRef<Value> inputs, SmallVectorImpl<Value> &results);
  // ONNX Runtime's quantize_dynamic (DynamicQuantization.cpp): what each node of its
  // pattern becomes, planned over a graph before its nodes are imported, and the node's
  // import by that plan. A node the plan holds no entry for is not one of them.
  struct QuantizedNode {
    enum Kind { Exact, Product, AliasInput, One, SkipGather, DequantizedGather,
                DequantizedInitializer, DequantizedBlocked, Refuse } kind;
    int input = 0;         // AliasInput: which input the output is
    std::string scale;     // Product: the weight scale's initializer
    int gather = -1;       // DequantizedGather: the Gather node it reads
    std::string why;       // Refuse
  };
  void planDynamicQuantization(const GraphProto &graph);
  // The QDQ form's weights: DequantizeLinear of 4-bit codes, or 8-bit ones in blocks, before
  // a MatMul (BlockedDequantization.cpp), read as MatMulNBits' coding. Planned first.
  void planBlockedDequantization(const GraphProto &graph);
  LogicalResult importBlockedDequantize(const NodeProto &node, Location loc);
  bool fourBitGatherCoding(const WeightRecord &data, NBitsCoding &coding, std::string &why);
  LogicalResult importQuantizedNode(const GraphProto *graph, const NodeProto &node,
                                    const QuantizedNode &plan, Location loc);
  llvm::StringMap<QuantizedNode> quantizedNodes_;  // by the node's first output
  std::vector<const GraphProto *> graphs_;         // the graphs being imported, innermost last
  // The rotary embedding of x ([b, s, heads * d] when `threeD`, else [b, heads, s, d]) by
  // `cosines` and `sines` [b, s, r / 2]: the first r = rotaryDim elements of each head
  // (all when 0) turn, as halves or as interleaved pairs; the rest pass.
  Value rotate(Value x, Value cosines, Value sines, int64_t heads, bool threeD,
               int64_t rotaryDim, bool interleaved, Location loc);
  // Keys or values [b, kv_heads, t, d] for `groups` query heads each: [b, kv_heads * groups,
  // t, d], each head repeated in a row (grouped-query attention).
  Value repeatKv(Value x, Value groups, Location loc);
  // x / sqrt(mean(x^2 over `axes`) + epsilon) * scale, computed in f32 (RMSNormalization's
  // stash_type 1) and returned in x's type.
  Value rmsNorm(Value x, Value scale, ArrayRef<int64_t> axes, float epsilon, Location loc);
  // A scalar constant of a float type.
  Value floatScalar(double value, Type element, Location loc);
  // Binds the node's non-empty outputs to `results`, keeping a declared type where the
  // written-out ops know less; an output past `results` is an error.
  LogicalResult bindWrittenOut(const NodeProto &node, Location loc, ArrayRef<Value> results);
  // One primitive op with the importer's inferred result types; its result `result`.
  Value emit(llvm::StringRef op, ArrayRef<Value> operands, Location loc,
             ArrayRef<mlir::NamedAttribute> attributes = {}, unsigned numResults = 1,
             unsigned result = 0);
  FailureOr<Attribute> convertAttribute(const AttributeProto &attr, Location loc);
  LogicalResult normalizeNode(const NodeProto &node, const OpSpec &spec, Location loc,
                              SmallVectorImpl<Value> &operands, NamedAttrList &attributes);

  Value constantI64(ArrayRef<int64_t> values, Location loc);
  mlir::NamedAttribute namedAttr(llvm::StringRef name, Attribute value) {
    return {builder_.getStringAttr(name), value};
  }
  mlir::NamedAttribute intAttr(llvm::StringRef name, int64_t value) {
    return namedAttr(name, builder_.getI64IntegerAttr(value));
  }
  Value noValue(Location loc);
  Value lookup(llvm::StringRef name) const;
  LogicalResult bind(const std::string &name, Value value, Location loc);
  TensorType declaredType(llvm::StringRef name) const;
  LogicalResult recordTypes(const GraphProto &graph);
  // Refuses a graph in which two nodes write one name, or a node writes an input's or an
  // initializer's: the plans below look nodes up by the name they write.
  LogicalResult checkNamesWrittenOnce(const GraphProto &graph);
  Type inferResultType(llvm::StringRef op, ArrayRef<Value> operands,
                       const NamedAttrList &attributes, unsigned index) const;

  mlir::MLIRContext &context_;
  OpBuilder builder_;
  WeightStore &store_;
  Location fileLoc_;
  std::string weightPrefix_;
  std::string weightKey(llvm::StringRef name) const { return weightPrefix_ + name.str(); }
  llvm::StringMap<int64_t> opsets_;
  // One entry per graph being imported (the main graph, then If branches).
  std::vector<llvm::StringMap<Value>> values_;
  std::vector<llvm::StringMap<TensorType>> types_;
};

} // namespace dsc::onnx_frontend

#endif
