// The inputs a session program takes where the export took others (SessionPrograms.h).
#include "compiler/recognize/SessionPrograms.h"
#include "compiler/recognize/ImpliedPositions.h"
#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/IR/Builders.h"

#include <algorithm>
#include <limits>

using namespace mlir;

namespace dsc::session {

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

// An export without a cache was traced with as many mask columns as new tokens, and may
// read the new tokens' count off either input (the dynamo exporter reads it off whichever
// input it met first under their shared dimension: GPT-2's and OPT's views of the ids and
// the hidden states read the mask's). In a session program the mask also covers the cached
// tokens, so every read of its width that is still live outside the attention (whose own
// reads went with the subgraph it replaced; positions were mended by keepNewTokenPositions
// and takePositionsAsInput) reads the ids' instead: the two agree on the batch, and on the
// width in a first step. A read that sizes an attention's bias is left alone: the bias is
// over the keys, all of them (biasAtSessionPositions).
LogicalResult readNewTokensOffIds(func::FuncOp func, std::string &why) {
  BlockArgument mask = paddingMaskArgument(func);
  if (!mask)
    return success();
  SmallVector<Operation *> reads;
  for (Operation *user : mask.getUsers())
    if (isa<onnx::ShapeOp, onnx::SizeOp>(user))
      reads.push_back(user);
  if (reads.empty())
    return success();
  llvm::DenseSet<Operation *> sizesBias;
  SmallVector<Value> work;
  func.walk([&](tfm::AttentionOp op) {
    if (op.getBias())
      work.push_back(op.getBias());
  });
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (def && sizesBias.insert(def).second)
      for (Value operand : def->getOperands())
        work.push_back(operand);
  }
  BlockArgument ids = tokenIdsArgument(func);
  auto idsType = ids ? dyn_cast<RankedTensorType>(ids.getType()) : RankedTensorType();
  OpBuilder builder(func.getContext());
  for (Operation *read : reads) {
    if (sizesBias.contains(read))
      continue;
    if (!idsType || idsType.getRank() < 2) {
      why = "attention_mask's width is read outside the attention, and there are no token "
            "ids to count the new tokens by";
      return failure();
    }
    if (auto shape = dyn_cast<onnx::ShapeOp>(read)) {
      // The mask's dimensions 0 and 1 are the ids' (or the embeddings') 0 and 1.
      auto clamp = [](int64_t index) { return std::clamp<int64_t>(index < 0 ? index + 2 : index, 0, 2); };
      int64_t start = clamp(shape.getStart() ? *shape.getStart() : 0);
      int64_t end = clamp(shape.getEnd() ? *shape.getEnd() : 2);
      builder.setInsertionPoint(shape);
      auto replacement = onnx::ShapeOp::create(builder, shape.getLoc(), shape.getType(), ids,
                                               builder.getI64IntegerAttr(start),
                                               builder.getI64IntegerAttr(end));
      shape.getResult().replaceAllUsesWith(replacement.getResult());
      shape.erase();
      continue;
    }
    if (idsType.getRank() != 2) {
      why = "attention_mask's size is read outside the attention, and the new tokens come as "
            "embeddings, not ids";
      return failure();
    }
    read->setOperand(0, ids);
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
void emptyCrossKeys(func::FuncOp decode) {
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
// position's logits. A head that already reads one position (ONNX Runtime GenAI's
// prune_lm_head gathers the last before it: logits [batch, 1, vocab]) is left as it is.
void lastPositionLogits(func::FuncOp prefill) {
  SmallVector<tfm::LmHeadOp> heads;
  prefill.walk([&](tfm::LmHeadOp head) { heads.push_back(head); });
  if (heads.size() != 1)
    return;
  tfm::LmHeadOp head = heads.front();
  auto hidden = dyn_cast<RankedTensorType>(head.getHidden().getType());
  if (!hidden || hidden.getRank() != 3 || hidden.getDimSize(1) == 1)
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

} // namespace dsc::session
