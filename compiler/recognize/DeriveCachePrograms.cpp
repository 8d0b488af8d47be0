// dsc-derive-cache-programs: see Passes.td.
#include "compiler/recognize/Passes.h"
#include "compiler/recognize/DeadOps.h"
#include "compiler/recognize/ImpliedPositions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <limits>
#include <optional>

namespace dsc {
#define GEN_PASS_DEF_DERIVECACHEPROGRAMS
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

llvm::StringRef argName(func::FuncOp func, unsigned index) {
  auto name = func.getArgAttrOfType<StringAttr>(index, "onnx.name");
  return name ? name.getValue() : "";
}

llvm::StringRef resultName(func::FuncOp func, unsigned index) {
  auto name = func.getResultAttrOfType<StringAttr>(index, "onnx.name");
  return name ? name.getValue() : "";
}

// The same attention without past operands and present results: the step reads and
// writes the session's cache layer in place.
tfm::AttentionOp toSessionMode(tfm::AttentionOp op) {
  OpBuilder builder(op);
  auto session = tfm::AttentionOp::create(
      builder, op.getLoc(), op.getOutput().getType(), TypeRange(), op.getQuery(), op.getKey(),
      op.getValue(), op.getMask(), ValueRange(), op.getPositions(), op.getBias(),
      op.getNumHeadsAttr(),
      op.getNumKvHeadsAttr(), op.getHeadDimAttr(), op.getScaleAttr(), op.getCausalAttr(),
      op.getAlibiAttr(), op.getWindowAttr(), op.getRotaryAttr(), op.getCacheLayerAttr(),
      op.getSoftcapAttr(), op.getPackedQkvAttr());
  session->setDiscardableAttrs(op->getDiscardableAttrDictionary());
  op.getOutput().replaceAllUsesWith(session.getOutput());
  op.erase();
  return session;
}


BlockArgument namedArgument(func::FuncOp func, llvm::StringRef name) {
  for (BlockArgument argument : func.getArguments())
    if (argName(func, argument.getArgNumber()) == name)
      return argument;
  return {};
}

// An encoder-decoder's decoder reads the encoder's output: the argument the importer marks
// `dsc.cross_states` (ModelInfo finds it by shape and use).
BlockArgument crossStatesArgument(func::FuncOp func) {
  for (BlockArgument argument : func.getArguments())
    if (func.getArgAttr(argument.getArgNumber(), "dsc.cross_states"))
      return argument;
  return {};
}

// The encoder's padding mask: a [batch, tokens] argument as long as the encoder's output
// (the same dimension name), beside it.
bool isEncoderMask(Value value) {
  auto mask = dyn_cast_or_null<BlockArgument>(value);
  auto func = mask ? dyn_cast<func::FuncOp>(mask.getOwner()->getParentOp()) : func::FuncOp();
  BlockArgument states = func ? crossStatesArgument(func) : BlockArgument();
  if (!states)
    return false;
  auto maskDims = func.getArgAttrOfType<ArrayAttr>(mask.getArgNumber(), "onnx.dims");
  auto stateDims = func.getArgAttrOfType<ArrayAttr>(states.getArgNumber(), "onnx.dims");
  if (!maskDims || !stateDims || maskDims.size() != 2 || stateDims.size() != 3)
    return false;
  auto length = cast<StringAttr>(maskDims[1]).getValue();
  return !length.empty() && length == cast<StringAttr>(stateDims[1]).getValue();
}

// Whether `attention` attends to the keys of another sequence: its keys are computed from
// the encoder's output, not through another attention (every layer after the first reads
// the encoder's output through the residual stream), or, in optimum's branch with a cache,
// read from the cached ones under the encoder's mask.
bool isCrossAttention(tfm::AttentionOp attention) {
  if (isEncoderMask(attention.getMask()))
    return true;
  SmallVector<Value> work = {attention.getKey()};
  llvm::DenseSet<Operation *> seen;
  while (!work.empty()) {
    Value value = work.pop_back_val();
    if (auto argument = dyn_cast<BlockArgument>(value)) {
      auto func = dyn_cast<func::FuncOp>(argument.getOwner()->getParentOp());
      if (func && func.getArgAttr(argument.getArgNumber(), "dsc.cross_states"))
        return true;
      continue;
    }
    Operation *def = value.getDefiningOp();
    if (!def || isa<tfm::AttentionOp>(def) || !seen.insert(def).second)
      continue;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return false;
}

// The padding mask of the tokens the session caches, by role: the argument the
// self-attentions read as their mask. Without one, a decoder-only export's
// `attention_mask` (read by nothing but positions); an encoder-decoder's `attention_mask`
// may be the encoder's, which its cross-attentions read.
BlockArgument paddingMaskArgument(func::FuncOp func) {
  BlockArgument mask;
  func.walk([&](tfm::AttentionOp op) {
    if (!mask && !isCrossAttention(op))
      mask = dyn_cast_or_null<BlockArgument>(op.getMask());
  });
  if (mask || crossStatesArgument(func))
    return mask;
  return namedArgument(func, "attention_mask");
}

// The embedding lookups (tfm.embedding ids, or the indices of an onnx.Gather along axis 0
// before layer recognition) computed from the padding mask outside the attention (OPT:
// positions = cumsum(mask) * mask - 1 + 2, over every column of the mask); none when the mask
// is read by nothing but attention; null when it reaches anything else.
std::optional<SmallVector<OpOperand *>> maskPositionEmbeddings(func::FuncOp func) {
  SmallVector<OpOperand *> embeddings;
  BlockArgument mask = paddingMaskArgument(func);
  if (!mask)
    return embeddings;
  llvm::DenseSet<Operation *> seen;
  SmallVector<Value> work = {mask};
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (isa<tfm::AttentionOp>(user) && use.getOperandNumber() == 3)
        continue;
      // Its width (implied positions: past + t) is what the session's mask has too.
      if (isa<onnx::ShapeOp, onnx::SizeOp>(user))
        continue;
      if (!seen.insert(user).second)
        continue;
      auto gather = dyn_cast<onnx::GatherOp>(user);
      if (isa<tfm::EmbeddingOp>(user) || (gather && gather.getAxis() == 0)) {
        if (use.getOperandNumber() != (gather ? 1u : 0u))
          return std::nullopt;
        embeddings.push_back(&use);
        continue;
      }
      // Per-column integer arithmetic on [batch, width] tensors, as OPT's positions.
      auto type = user->getNumResults() == 1
                      ? dyn_cast<RankedTensorType>(user->getResult(0).getType())
                      : RankedTensorType();
      if (user->getDialect()->getNamespace() != "onnx" || user->getNumRegions() != 0 ||
          !type || type.getRank() != 2 || !type.getElementType().isInteger())
        return std::nullopt;
      work.push_back(user->getResult(0));
    }
  }
  return embeddings;
}

// A session program's mask also covers the cached tokens, so an export traced without a
// cache computes positions for every token so far: the new tokens' are the last
// width(input_ids) columns.
LogicalResult keepNewTokenPositions(func::FuncOp func, std::string &why) {
  std::optional<SmallVector<OpOperand *>> embeddings = maskPositionEmbeddings(func);
  if (!embeddings) {
    why = "attention_mask is read outside the attention for more than positions";
    return failure();
  }
  if (embeddings->empty())
    return success();
  BlockArgument ids = tokenIdsArgument(func);
  if (!ids) {
    why = "positions come from the mask, and there are no token ids to count new tokens by";
    return failure();
  }
  OpBuilder builder(func.getContext());
  builder.setInsertionPointToStart(&func.getBody().front());
  Location loc = func.getLoc();
  auto vector = RankedTensorType::get({1}, builder.getI64Type());
  auto constant = [&](int64_t value) -> Value {
    return onnx::ConstantOp::create(builder, loc, vector,
                                    DenseElementsAttr::get(vector, ArrayRef<int64_t>{value}));
  };
  Value idsShape = onnx::ShapeOp::create(builder, loc, RankedTensorType::get({2}, builder.getI64Type()),
                                         ids, IntegerAttr(), IntegerAttr());
  Value fresh = onnx::GatherOp::create(builder, loc, vector, idsShape, constant(1),
                                       builder.getI64IntegerAttr(0));
  Value start = onnx::NegOp::create(builder, loc, vector, fresh);
  Value end = constant(std::numeric_limits<int64_t>::max());
  Value axis = constant(1);
  Value none = onnx::NoValueOp::create(builder, loc, builder.getNoneType());
  for (OpOperand *positions : *embeddings) {
    builder.setInsertionPoint(positions->getOwner());
    auto type = cast<RankedTensorType>(positions->get().getType());
    auto sliced = onnx::SliceOp::create(
        builder, loc, RankedTensorType::get({type.getDimSize(0), ShapedType::kDynamic},
                                            type.getElementType()),
        positions->get(), start, end, axis, none);
    positions->set(sliced);
  }
  return success();
}

// A session program takes the positions the generator computes from the mask, as
// transformers' generate does, where the export computed past + t itself (no position_ids
// input): the two agree for rows without padding, and only the input is right for
// left-padded ones.
void takePositionsAsInput(func::FuncOp func) {
  SmallVector<Operation *> implied;
  func.walk([&](Operation *op) {
    if (op->hasAttr(kImpliedPositionsAttr))
      implied.push_back(op);
  });
  if (implied.empty() || namedArgument(func, "position_ids"))
    return;
  BlockArgument ids = tokenIdsArgument(func);
  Builder builder(func.getContext());
  SmallVector<NamedAttribute> attrs = {
      builder.getNamedAttr("onnx.name", builder.getStringAttr("position_ids"))};
  if (ids)
    if (auto dims = func.getArgAttrOfType<ArrayAttr>(ids.getArgNumber(), "onnx.dims"))
      attrs.push_back(builder.getNamedAttr("onnx.dims", dims));
  auto type = RankedTensorType::get({ShapedType::kDynamic, ShapedType::kDynamic},
                                    builder.getI64Type());
  unsigned index = func.getNumArguments();
  (void)func.insertArgument(index, type, builder.getDictionaryAttr(attrs), func.getLoc());
  for (Operation *op : implied)
    op->getResult(0).replaceAllUsesWith(func.getArgument(index));
}

// Whether `read` (a Shape) reads dimensions of [batch, tokens] of the token ids or of a
// value computed from them (optimum's T5 measures its query projection [batch, tokens,
// features]): the token axis of the decoder's own sequence, never the encoder's, whose
// values do not depend on the ids.
bool readsTokenAxis(Operation *read, BlockArgument ids) {
  auto shape = dyn_cast<onnx::ShapeOp>(read);
  auto type = shape ? dyn_cast<RankedTensorType>(shape.getData().getType()) : RankedTensorType();
  if (!shape || !ids || !type || type.getRank() < 2)
    return false;
  const int64_t rank = type.getRank();
  int64_t start = shape.getStart() ? *shape.getStart() : 0;
  int64_t end = shape.getEnd() ? *shape.getEnd() : rank;
  start = start < 0 ? start + rank : start;
  end = end < 0 ? end + rank : end;
  if (start < 0 || end > 2 || start >= end)
    return false;
  // Batch and tokens are dynamic; a static dimension there (heads first) is something else.
  for (int64_t d = start; d < end; ++d)
    if (!type.isDynamicDim(d))
      return false;
  SmallVector<Value> work = {shape.getData()};
  llvm::DenseSet<Operation *> seen;
  while (!work.empty()) {
    Value value = work.pop_back_val();
    if (value == ids)
      return true;
    Operation *def = value.getDefiningOp();
    if (!def || !seen.insert(def).second)
      continue;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return false;
}

// A bias computed from lengths alone (T5's relative positions) was traced for the export's
// tokens, which are all new: its queries and keys are positions 0 .. S-1 of the token ids.
// `idsReads` receives its Shape reads of the ids (S); empty, or the reason it cannot be
// computed for a cached step.
std::string biasLengthReads(func::FuncOp func, Value bias,
                            SmallVectorImpl<Operation *> &idsReads) {
  BlockArgument ids = tokenIdsArgument(func);
  SmallVector<Operation *> reads;
  if (!ids || !computedFromLengthsAlone(bias, &reads))
    return "an attention adds a bias computed from values, not from the token count alone";
  // The ops that compute it: a Shape of one of them follows from the others.
  llvm::DenseSet<Operation *> slice;
  SmallVector<Value> work = {bias};
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !slice.insert(def).second || isa<onnx::ShapeOp, onnx::SizeOp>(def))
      continue;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  for (Operation *read : reads) {
    Value of = read->getOperand(0);
    if (Operation *def = of.getDefiningOp(); def && slice.contains(def))
      continue;
    if (readsTokenAxis(read, ids)) {
      idsReads.push_back(read);
      continue;
    }
    return "an attention's bias reads the length of something other than the token ids";
  }
  if (idsReads.empty())
    return "an attention's bias does not follow the token count";
  return "";
}

// The bias of a session program's step: the queries are the last S of the mask's T
// positions and the keys all T. The bias is computed for T tokens (its reads of the ids'
// length read the mask's instead: [batch, T] as the ids are [batch, S]) and its last S
// query rows are kept.
LogicalResult biasAtSessionPositions(func::FuncOp func, std::string &why) {
  BlockArgument mask = paddingMaskArgument(func);
  BlockArgument ids = tokenIdsArgument(func);
  llvm::SetVector<Value> biases;
  func.walk([&](tfm::AttentionOp op) {
    if (op.getBias() && !isCrossAttention(op))
      biases.insert(op.getBias());
  });
  if (biases.empty())
    return success();
  if (!mask || !ids) {
    why = "an attention's bias needs the padding mask and the token ids of a cached step";
    return failure();
  }
  for (Value bias : biases) {
    SmallVector<Operation *> idsReads;
    if (why = biasLengthReads(func, bias, idsReads); !why.empty())
      return failure();
    llvm::DenseSet<Operation *> slice;
    SmallVector<Value> work = {bias};
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || !slice.insert(def).second)
        continue;
      for (Value operand : def->getOperands())
        work.push_back(operand);
    }
    for (Operation *read : idsReads) {
      // The same dimensions of the mask [batch, past + tokens] (readsTokenAxis: within 0..2).
      auto shape = cast<onnx::ShapeOp>(read);
      OpBuilder builder(read);
      auto rank = cast<RankedTensorType>(shape.getData().getType()).getRank();
      int64_t start = shape.getStart() ? *shape.getStart() : 0;
      int64_t end = shape.getEnd() ? *shape.getEnd() : rank;
      Value total = onnx::ShapeOp::create(builder, read->getLoc(), shape.getType(), mask,
                                          builder.getI64IntegerAttr(start < 0 ? start + rank : start),
                                          builder.getI64IntegerAttr(end < 0 ? end + rank : end));
      shape.getResult().replaceUsesWithIf(total, [&](OpOperand &use) {
        return slice.contains(use.getOwner());
      });
    }
    // The last S rows of the queries' axis (2 of [batch, heads, queries, keys]).
    auto type = dyn_cast<RankedTensorType>(bias.getType());
    if (!type || type.getRank() != 4) {
      why = "an attention's bias is not [batch, heads, queries, keys]";
      return failure();
    }
    OpBuilder builder(func.getContext());
    builder.setInsertionPointAfterValue(bias);
    Location loc = bias.getLoc();
    auto vector = RankedTensorType::get({1}, builder.getI64Type());
    auto constant = [&](int64_t value) -> Value {
      return onnx::ConstantOp::create(builder, loc, vector,
                                      DenseElementsAttr::get(vector, ArrayRef<int64_t>{value}));
    };
    Value fresh = onnx::ShapeOp::create(builder, loc, vector, ids, builder.getI64IntegerAttr(1),
                                        builder.getI64IntegerAttr(2));
    Value start = onnx::NegOp::create(builder, loc, vector, fresh);
    auto rows = RankedTensorType::get({type.getDimSize(0), type.getDimSize(1),
                                       ShapedType::kDynamic, ShapedType::kDynamic},
                                      type.getElementType());
    Value last = onnx::SliceOp::create(builder, loc, rows, bias, start,
                                       constant(std::numeric_limits<int64_t>::max()),
                                       constant(2), onnx::NoValueOp::create(builder, loc,
                                                                           builder.getNoneType()));
    bias.replaceUsesWithIf(last, [&](OpOperand &use) {
      return isa<tfm::AttentionOp>(use.getOwner()) && use.getOwner() != last.getDefiningOp();
    });
  }
  return success();
}

// Empty when @main is a decoder whose every attention can use the session cache, for the
// `decode` program or the prefill one (whose first step has nothing cached: a bias traced
// for the new tokens alone is right there).
std::string whyNotDecoder(func::FuncOp main, int64_t &logitsIndex, bool decode) {
  int64_t attentions = 0;
  std::string why;
  main.walk([&](Operation *op) {
    if (!why.empty())
      return;
    if (op->getName().getStringRef() == "onnx.Softmax") {
      why = "a softmax was not recognised as attention";
      return;
    }
    if (op != main && op->getNumRegions() != 0) {
      why = "the graph has control flow ('" + op->getName().getStringRef().str() + "')";
      return;
    }
    auto attention = dyn_cast<tfm::AttentionOp>(op);
    if (!attention)
      return;
    ++attentions;
    auto mask = dyn_cast_or_null<BlockArgument>(attention.getMask());
    if (isCrossAttention(attention)) {
      // Its keys go into a cache layer of their own, written by prefill from the encoder's
      // output; the encoder's padding mask says how many it holds.
      if (attention.getCausal())
        why = "a cross-attention is causal";
      else if (!attention.getPast().empty())
        why = "a cross-attention reads cached keys";
      else if (attention.getBias())
        why = "a cross-attention adds a bias";
      else if (!mask)
        why = "a cross-attention has no padding mask of the encoder's tokens (the session "
              "cache needs its width)";
      else if (!attention.getCacheLayer())
        why = "an attention has no cache layer";
      return;
    }
    // An export of the ids alone (no mask, nothing cached) attends every token it is given:
    // its session programs take a mask of their own (addPaddingMask).
    // Optimum's T5 decoder takes no mask of its own even with its cache; the session's
    // programs get one too.
    bool idsAlone = !attention.getMask() && !paddingMaskArgument(main);
    // A bias (T5's relative positions) must be one that a cached step can compute for its
    // positions (biasAtSessionPositions).
    SmallVector<Operation *> biasReads;
    if (!attention.getCausal())
      why = "an attention is not causal";
    // With past inputs the bias follows their length (replacePastShapes gives it the
    // session's); without, the token count's (biasAtSessionPositions).
    else if (attention.getBias() && !attention.getPast().empty() &&
             !computedFromLengthsAlone(attention.getBias()))
      why = "an attention adds a bias computed from values, not from lengths alone";
    else if (attention.getBias() && attention.getPast().empty() &&
             !computedFromLengthsAlone(attention.getBias()))
      why = "an attention adds a bias computed from values, not from lengths alone";
    else if (decode && attention.getBias() && attention.getPast().empty() &&
             !(why = biasLengthReads(main, attention.getBias(), biasReads)).empty())
      ;
    else if (idsAlone)
      ;
    else if (!mask || mask != paddingMaskArgument(main))
      why = "an attention has no padding mask of its tokens (the session cache needs it to "
            "know how many tokens it holds)";
    else if (!attention.getCacheLayer())
      why = "an attention has no cache layer";
  });
  if (!why.empty())
    return why;
  if (attentions == 0)
    return "no attention was recognised";
  // Without past inputs, whatever else reads the mask was traced for no cached tokens; only
  // positions computed from it (OPT) can be mended (keepNewTokenPositions). With them, the
  // export computes right for any past length, which the session programs give it through
  // the past's shape.
  bool hasPast = false;
  main.walk([&](tfm::AttentionOp op) { hasPast |= !op.getPast().empty(); });
  if (!hasPast && !maskPositionEmbeddings(main))
    return "attention_mask is also read outside the attention, for more than positions "
           "(which would need a past length the session cache does not give)";
  logitsIndex = -1;
  for (unsigned i = 0; i < main.getNumResults(); ++i)
    if (resultName(main, i) == "logits")
      logitsIndex = i;
  if (logitsIndex < 0)
    return "the graph has no logits output";
  return "";
}


// Outside the attention, an export may read only the past's shape (OPT: the past length
// that its positions start from). In a session program the cache holds
// mask width - new tokens of them: each Shape(past) becomes
// [batch, kv_heads, width(attention_mask) - width(input_ids), head_dim].
LogicalResult replacePastShapes(func::FuncOp func, const llvm::DenseSet<Value> &pastInputs,
                                std::string &why) {
  SmallVector<Operation *> shapes;
  for (Value past : pastInputs)
    for (Operation *user : past.getUsers()) {
      if (isa<onnx::ShapeOp>(user))
        shapes.push_back(user);
    }
  if (shapes.empty())
    return success();
  BlockArgument mask = paddingMaskArgument(func);
  BlockArgument ids = tokenIdsArgument(func);
  if (!mask || !ids) {
    why = "the past's shape is read, and there is no padding mask and token ids to give it";
    return failure();
  }
  OpBuilder builder(func.getContext());
  builder.setInsertionPointToStart(&func.getBody().front());
  Location loc = func.getLoc();
  auto i64 = builder.getI64Type();
  auto vector = [&](int64_t n) { return RankedTensorType::get({n}, i64); };
  auto constant = [&](int64_t value) -> Value {
    return onnx::ConstantOp::create(builder, loc, vector(1),
                                    DenseElementsAttr::get(vector(1), ArrayRef<int64_t>{value}));
  };
  auto dim = [&](Value shape, int64_t index) -> Value {
    return onnx::GatherOp::create(builder, loc, vector(1), shape, constant(index),
                                  builder.getI64IntegerAttr(0));
  };
  Value maskShape = onnx::ShapeOp::create(builder, loc, vector(2), mask, IntegerAttr(),
                                          IntegerAttr());
  Value idsShape = onnx::ShapeOp::create(builder, loc, vector(2), ids, IntegerAttr(),
                                         IntegerAttr());
  Value batch = dim(maskShape, 0);
  Value cached = onnx::SubOp::create(builder, loc, vector(1), dim(maskShape, 1), dim(idsShape, 1));
  for (Operation *shape : shapes) {
    auto type = dyn_cast<RankedTensorType>(shape->getOperand(0).getType());
    if (!type || type.getRank() != 4 || type.isDynamicDim(1) || type.isDynamicDim(3)) {
      why = "the past's shape is read, and its kv_heads and head_dim are not static";
      return failure();
    }
    Value replacement = onnx::ConcatOp::create(
        builder, loc, vector(4),
        ValueRange{batch, constant(type.getDimSize(1)), cached, constant(type.getDimSize(3))},
        builder.getI64IntegerAttr(0));
    // Shape's start and end (opset 15; the dynamo exporter reads one dimension so) select
    // dimensions as a Slice does.
    auto shapeOp = cast<onnx::ShapeOp>(shape);
    if (shapeOp.getStart() || shapeOp.getEnd()) {
      int64_t start = shapeOp.getStart() ? *shapeOp.getStart() : 0;
      int64_t end = shapeOp.getEnd() ? *shapeOp.getEnd() : 4;
      start = std::clamp<int64_t>(start < 0 ? start + 4 : start, 0, 4);
      end = std::clamp<int64_t>(end < 0 ? end + 4 : end, 0, 4);
      replacement = onnx::SliceOp::create(
          builder, loc, vector(std::max<int64_t>(end - start, 0)), replacement,
          constant(start), constant(end), constant(0),
          onnx::NoValueOp::create(builder, loc, builder.getNoneType()));
    }
    shape->getResult(0).replaceAllUsesWith(replacement);
  }
  return success();
}

// An export of the ids alone computes causal attention over every token it is given. Its
// session programs take an attention_mask [batch, cached + new] after input_ids, as the
// generator gives every program, and pass it to each attention as its padding mask: a row
// without padding computes what the export does, and a left-padded one what the model
// computes alone, which the export could not say.
// An encoder-decoder's decoder names it decoder_attention_mask (as transformers' forward
// does) when attention_mask is the encoder's.
void addPaddingMask(func::FuncOp func) {
  if (paddingMaskArgument(func))
    return;
  SmallVector<tfm::AttentionOp> attentions;
  func.walk([&](tfm::AttentionOp op) {
    if (!isCrossAttention(op))
      attentions.push_back(op);
  });
  if (attentions.empty() || llvm::any_of(attentions, [](tfm::AttentionOp op) {
        return bool(op.getMask());
      }))
    return;
  BlockArgument ids = tokenIdsArgument(func);
  Builder builder(func.getContext());
  StringRef batch = "batch";
  if (ids)
    if (auto dims = func.getArgAttrOfType<ArrayAttr>(ids.getArgNumber(), "onnx.dims");
        dims && dims.size() == 2 && !cast<StringAttr>(dims[0]).getValue().empty())
      batch = cast<StringAttr>(dims[0]).getValue();
  llvm::StringRef name =
      namedArgument(func, "attention_mask") ? "decoder_attention_mask" : "attention_mask";
  SmallVector<NamedAttribute> attrs = {
      builder.getNamedAttr("onnx.name", builder.getStringAttr(name)),
      builder.getNamedAttr("onnx.dims",
                           builder.getStrArrayAttr({batch, "past_sequence + sequence"}))};
  unsigned index = ids ? ids.getArgNumber() + 1 : 0;
  auto type = RankedTensorType::get({ShapedType::kDynamic, ShapedType::kDynamic},
                                    builder.getI64Type());
  (void)func.insertArgument(index, type, builder.getDictionaryAttr(attrs), func.getLoc());
  for (tfm::AttentionOp op : attentions)
    op.getMaskMutable().assign(func.getArgument(index));
}

// A decode step's cross-attentions add no keys: prefill wrote the encoder's into their
// cache layers. Their keys and values become an empty [batch, 0, features] (their
// projections, and the encoder's output that decode then does not take, are dead): a
// decode step reads none of the cross-attentions' key and value weights.
void readNoEncoderStates(func::FuncOp decode) {
  BlockArgument ids = tokenIdsArgument(decode);
  if (!ids)
    return;
  OpBuilder builder(decode.getContext());
  builder.setInsertionPointToStart(&decode.getBody().front());
  Location loc = decode.getLoc();
  auto vector = [&](int64_t n) { return RankedTensorType::get({n}, builder.getI64Type()); };
  auto constant = [&](int64_t value) -> Value {
    return onnx::ConstantOp::create(builder, loc, vector(1),
                                    DenseElementsAttr::get(vector(1), ArrayRef<int64_t>{value}));
  };
  Value batch;
  decode.walk([&](tfm::AttentionOp attention) {
    if (!attention->hasAttr("tfm.cross_keys"))
      return;
    auto type = dyn_cast<RankedTensorType>(attention.getKey().getType());
    if (!type || type.getRank() != 3 || type.isDynamicDim(2) ||
        attention.getValue().getType() != type)
      return;
    if (!batch)
      batch = onnx::ShapeOp::create(builder, loc, vector(1), ids, IntegerAttr(),
                                    builder.getI64IntegerAttr(1));
    Value shape = onnx::ConcatOp::create(
        builder, loc, vector(3), ValueRange{batch, constant(0), constant(type.getDimSize(2))},
        builder.getI64IntegerAttr(0));
    auto zero = RankedTensorType::get({1}, type.getElementType());
    Value empty = onnx::ConstantOfShapeOp::create(
        builder, loc, type, shape,
        DenseElementsAttr::get(zero, builder.getZeroAttr(type.getElementType())));
    attention.getKeyMutable().assign(empty);
    attention.getValueMutable().assign(empty);
  });
}

// Prefill's logits feed only the first new token, read at the last position: the generator
// left-pads, so that position is every row's last real token. The LM head then runs on that
// position alone, which saves (S-1)/S of its work and the [batch, max_seq, vocab] slot of
// its logits in the arena (issue 14). Whatever follows the head (a softcap, a cast) works
// per position and is unchanged. A model whose head was not recognised keeps every
// position's logits.
void lastPositionLogits(func::FuncOp prefill) {
  SmallVector<tfm::LmHeadOp> heads;
  prefill.walk([&](tfm::LmHeadOp head) { heads.push_back(head); });
  if (heads.size() != 1)
    return;
  tfm::LmHeadOp head = heads.front();
  auto hidden = dyn_cast<RankedTensorType>(head.getHidden().getType());
  if (!hidden || hidden.getRank() != 3)
    return;
  OpBuilder builder(head);
  Location loc = head.getLoc();
  auto vector = RankedTensorType::get({1}, builder.getI64Type());
  auto constant = [&](int64_t value) -> Value {
    return onnx::ConstantOp::create(builder, loc, vector,
                                    DenseElementsAttr::get(vector, ArrayRef<int64_t>{value}));
  };
  // The sequence dimension stays dynamic, so no type after the head changes; the shape
  // bounds see the slice's single position.
  auto last = onnx::SliceOp::create(
      builder, loc,
      RankedTensorType::get({hidden.getDimSize(0), ShapedType::kDynamic, hidden.getDimSize(2)},
                            hidden.getElementType()),
      head.getHidden(), constant(-1), constant(std::numeric_limits<int64_t>::max()),
      constant(1), onnx::NoValueOp::create(builder, loc, builder.getNoneType()));
  head.getHiddenMutable().assign(last);
  auto logits = cast<RankedTensorType>(head.getLogits().getType());
  if (logits.getDimSize(1) != ShapedType::kDynamic)
    head.getLogits().setType(RankedTensorType::get(
        {logits.getDimSize(0), ShapedType::kDynamic, logits.getDimSize(2)},
        logits.getElementType()));
}

// @main cloned as `name` with the session cache: past inputs and present outputs gone,
// only the logits returned.
FailureOr<func::FuncOp> deriveSessionProgram(func::FuncOp main, llvm::StringRef name,
                                             int64_t logitsIndex, std::string &why) {
  auto derived = cast<func::FuncOp>(main->clone());
  derived.setSymName(name);
  auto ret = cast<func::ReturnOp>(derived.getBody().front().getTerminator());
  llvm::DenseSet<Value> pastInputs;
  SmallVector<tfm::AttentionOp> attentions;
  derived.walk([&](tfm::AttentionOp op) { attentions.push_back(op); });
  for (tfm::AttentionOp op : attentions)
    for (Value past : op.getPast())
      pastInputs.insert(past);
  {
    OpBuilder builder(ret);
    func::ReturnOp::create(builder, ret.getLoc(), ValueRange{ret.getOperand(logitsIndex)});
    ret.erase();
  }
  for (tfm::AttentionOp op : attentions) {
    if (llvm::any_of(op.getPresent(), [](Value v) { return !v.use_empty(); })) {
      why = "a present key/value is used inside the graph";
      derived.erase();
      return failure();
    }
    // The step's `cross` (RuntimeTypes): its cache layer holds the encoder's keys.
    if (isCrossAttention(op))
      op->setAttr("tfm.cross_keys", UnitAttr::get(op.getContext()));
    toSessionMode(op);
  }
  eraseDeadOps(derived);
  // The past's shape reads become the mask's width less the new tokens': the mask first.
  addPaddingMask(derived);
  if (failed(replacePastShapes(derived, pastInputs, why))) {
    derived.erase();
    return failure();
  }
  if (pastInputs.empty() && failed(keepNewTokenPositions(derived, why))) {
    derived.erase();
    return failure();
  }
  if (name == "decode" && pastInputs.empty() && failed(biasAtSessionPositions(derived, why))) {
    derived.erase();
    return failure();
  }
  takePositionsAsInput(derived);
  if (name == "decode")
    readNoEncoderStates(derived);
  eraseDeadOps(derived);
  llvm::BitVector dropResults(derived.getNumResults(), true);
  dropResults.reset(logitsIndex);
  if (failed(derived.eraseResults(dropResults))) {
    why = "the outputs cannot be removed";
    derived.erase();
    return failure();
  }
  llvm::BitVector dropArgs(derived.getNumArguments());
  // What nothing reads leaves the interface: a decode step's encoder output, and the past
  // inputs and use_cache_branch of optimum's merged decoder, derived from its branch
  // without a cache.
  for (BlockArgument argument : derived.getArguments())
    if (argument.use_empty())
      dropArgs.set(argument.getArgNumber());
  for (BlockArgument argument : derived.getArguments()) {
    bool isPast = llvm::any_of(pastInputs, [&](Value past) {
      auto pastArg = dyn_cast<BlockArgument>(past);
      return pastArg && pastArg.getArgNumber() == argument.getArgNumber();
    });
    if (!isPast)
      continue;
    if (!argument.use_empty()) {
      why = "the past input '" + argName(derived, argument.getArgNumber()).str() +
            "' is still read outside the attention";
      derived.erase();
      return failure();
    }
    dropArgs.set(argument.getArgNumber());
  }
  if (failed(derived.eraseArguments(dropArgs))) {
    why = "the past inputs cannot be removed";
    derived.erase();
    return failure();
  }
  // With the session cache the padding mask covers the cached and the new tokens, even
  // where the export (without a cache) named its width like the new tokens'.
  for (BlockArgument argument : derived.getArguments()) {
    if (argument != paddingMaskArgument(derived))
      continue;
    auto dims = derived.getArgAttrOfType<ArrayAttr>(argument.getArgNumber(), "onnx.dims");
    if (!dims || dims.size() != 2)
      continue;
    Builder builder(derived.getContext());
    derived.setArgAttr(argument.getArgNumber(), "onnx.dims",
                       builder.getStrArrayAttr(
                           {cast<StringAttr>(dims[0]).getValue(), "past_sequence + sequence"}));
  }
  if (name == "prefill")
    lastPositionLogits(derived);
  return derived;
}

// Optimum's merged decoder runs one of two branches (an onnx.If on its use_cache_branch
// input): with the export's cache, or without one for the first step. The session programs
// come from the branch without a cache, as from an export without one, and where that
// cannot give a decode step (T5's bias reads the shape of a mask the branch builds for its
// own tokens) decode comes from the branch with the cache, as from an export with one: a
// clone of @main (detached, the caller erases it) with the chosen branch in place of the
// If. Null when @main has no such If.
func::FuncOp withCacheBranch(func::FuncOp main, bool cached) {
  SmallVector<onnx::IfOp> ifs;
  main.walk([&](onnx::IfOp op) { ifs.push_back(op); });
  if (ifs.size() != 1 || ifs.front()->getParentOp() != main.getOperation() ||
      !isa<BlockArgument>(ifs.front().getCond()))
    return {};
  // Which branch has attentions, none of them with past inputs, while the other's read them.
  auto reads = [](Region &region, bool &any, bool &past) {
    region.walk([&](tfm::AttentionOp op) {
      any = true;
      past |= !op.getPast().empty();
    });
  };
  bool thenAny = false, thenPast = false, elseAny = false, elsePast = false;
  reads(ifs.front().getThenBranch(), thenAny, thenPast);
  reads(ifs.front().getElseBranch(), elseAny, elsePast);
  int fresh = thenAny && !thenPast && elsePast ? 0 : elseAny && !elsePast && thenPast ? 1 : -1;
  if (fresh < 0)
    return {};
  auto clone = cast<func::FuncOp>(main->clone());
  onnx::IfOp branchOp;
  clone.walk([&](onnx::IfOp op) { branchOp = op; });
  const bool takeThen = (fresh == 0) != cached;
  Block &branch = (takeThen ? branchOp.getThenBranch() : branchOp.getElseBranch()).front();
  Operation *yield = branch.getTerminator();
  SmallVector<Value> results(yield->getOperands());
  branchOp->getBlock()->getOperations().splice(branchOp->getIterator(), branch.getOperations(),
                                                branch.begin(), yield->getIterator());
  branchOp->replaceAllUsesWith(results);
  branchOp->erase();
  return clone;
}

// Whether two session programs use each cache layer for one attention of the same form
// (heads, head size, self or cross), as a request's prefill and decode steps share them.
bool sameCacheLayers(func::FuncOp prefill, func::FuncOp decode) {
  auto layers = [](func::FuncOp func) {
    std::map<int64_t, std::tuple<int64_t, int64_t, bool>> byLayer;
    func.walk([&](tfm::AttentionOp op) {
      if (op.getCacheLayer())
        byLayer[*op.getCacheLayer()] = {op.getNumKvHeads(), op.getHeadDim(),
                                        op->hasAttr("tfm.cross_keys")};
    });
    return byLayer;
  };
  return layers(prefill) == layers(decode);
}

struct DeriveCacheProgramsPass : impl::DeriveCacheProgramsBase<DeriveCacheProgramsPass> {
  using DeriveCacheProgramsBase::DeriveCacheProgramsBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || module.lookupSymbol("prefill") || module.lookupSymbol("decode"))
      return;
    // Where each program may come from, in order: @main, or a merged decoder's branches.
    func::FuncOp fresh = withCacheBranch(main, /*cached=*/false);
    func::FuncOp cached = fresh ? withCacheBranch(main, /*cached=*/true) : func::FuncOp();
    std::string why;
    SmallVector<func::FuncOp> derived;
    for (llvm::StringRef name : {"prefill", "decode"}) {
      SmallVector<func::FuncOp> bases = {fresh ? fresh : main};
      if (name == "decode" && cached)
        bases.push_back(cached);
      std::string first;
      for (func::FuncOp basis : bases) {
        int64_t logitsIndex = -1;
        why = whyNotDecoder(basis, logitsIndex, name == "decode");
        FailureOr<func::FuncOp> program =
            why.empty() ? deriveSessionProgram(basis, name, logitsIndex, why)
                        : FailureOr<func::FuncOp>(failure());
        if (succeeded(program)) {
          derived.push_back(*program);
          why.clear();
          break;
        }
        if (first.empty())
          first = why;
      }
      if (derived.size() != (name == "prefill" ? 1u : 2u)) {
        why = first;
        break;
      }
    }
    // Prefill and decode share the session's cache: each layer the same in both.
    if (derived.size() == 2 && !sameCacheLayers(derived[0], derived[1]))
      why = "prefill and decode would use the session's cache layers differently";
    if (derived.size() == 2 && why.empty()) {
      // After @main, in program order.
      OpBuilder builder(module.getContext());
      builder.setInsertionPointAfter(main);
      for (func::FuncOp program : derived)
        builder.insert(program);
    } else {
      for (func::FuncOp program : derived)
        program.erase();
    }
    if (fresh)
      fresh.erase();
    if (cached)
      cached.erase();
    if (!why.empty() && report)
      main.emitRemark() << "no prefill/decode programs: " << why;
    // The export's own interfaces (`forward`, an encoder-decoder's `encode`) keep the
    // cache in I/O mode: an attention there without past inputs attends only to the tokens
    // it is given and must not touch the session's cache.
    for (auto func : module.getOps<func::FuncOp>())
      if (func.getSymName() != "prefill" && func.getSymName() != "decode")
        func.walk([](tfm::AttentionOp op) {
          if (op.getPast().empty())
            op.removeCacheLayerAttr();
        });
  }
};

} // namespace
} // namespace dsc
