// dsc-narrow-repeated-kv: see Passes.td. Keys (and values) that the export repeats across a
// group's query heads before the attention (Falcon's new decoder architecture broadcasts
// each KV group's key to its query heads) are the group's key once: the attention is
// grouped-query with one KV head per group, so that the session's cache holds each group
// once, tp-shard can split the groups and dsc-unpack-qkv can take the fused projection apart.
#include "compiler/recognize/DeadOps.h"
#include "compiler/recognize/Passes.h"

#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/SetVector.h"

#include <map>
#include <optional>

namespace dsc {
#define GEN_PASS_DEF_NARROWREPEATEDKV
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// The product of the dimensions of `type` from axis 2 on, when they are static: the
// features of each [batch, sequence] row.
std::optional<int64_t> rowWidth(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || ranked.getRank() < 3)
    return std::nullopt;
  int64_t width = 1;
  for (int64_t axis = 2; axis < ranked.getRank(); ++axis) {
    if (ranked.isDynamicDim(axis))
      return std::nullopt;
    width *= ranked.getDimSize(axis);
  }
  return width;
}

// A key or value operand that is, through reshapes that keep each row's features in order,
// Expand(x) from x = [b, s, groups, 1, head_dim] to [b, s, groups, repeats, head_dim]:
// head h of the operand is x's group h / repeats.
struct Repeated {
  Value groups;  // x
  int64_t count = 0;
};

std::optional<Repeated> repeatedHeads(Value operand, int64_t heads, int64_t headDim) {
  std::optional<int64_t> width = rowWidth(operand.getType());
  if (!width || *width != heads * headDim)
    return std::nullopt;
  Value value = operand;
  while (auto reshape = value.getDefiningOp<onnx::ReshapeOp>()) {
    // Each row keeps its features, in order, as long as every value on the way has rows
    // of the same width: a reshape never moves an element.
    if (rowWidth(reshape.getData().getType()) != width)
      return std::nullopt;
    value = reshape.getData();
  }
  auto expand = value.getDefiningOp<onnx::ExpandOp>();
  if (!expand)
    return std::nullopt;
  auto from = dyn_cast<RankedTensorType>(expand.getInput().getType());
  auto to = dyn_cast<RankedTensorType>(expand.getResult().getType());
  if (!from || !to || from.getRank() != 5 || to.getRank() != 5 || !rowWidth(from) ||
      !rowWidth(to) || *rowWidth(to) != *width)
    return std::nullopt;
  const int64_t groups = to.getDimSize(2), repeats = to.getDimSize(3);
  if (from.getDimSize(2) != groups || from.getDimSize(3) != 1 || from.getDimSize(4) != headDim ||
      to.getDimSize(4) != headDim || repeats < 2)
    return std::nullopt;
  // The batch and sequence are the operand's: an Expand that broadcast them as well would
  // make x's rows too few, which the attention's shape checks refuse at run time.
  for (int64_t axis : {0, 1})
    if (!from.isDynamicDim(axis) && !to.isDynamicDim(axis) &&
        from.getDimSize(axis) != to.getDimSize(axis))
      return std::nullopt;
  return Repeated{expand.getInput(), groups};
}

// x = [b, s, groups, 1, head_dim] as [b, s, groups * head_dim].
Value asRows(OpBuilder &builder, Value groups, int64_t features) {
  auto type = cast<RankedTensorType>(groups.getType());
  auto shapeType = RankedTensorType::get({3}, builder.getI64Type());
  Location loc = groups.getLoc();
  Value shape = onnx::ConstantOp::create(
      builder, loc, shapeType, DenseElementsAttr::get(shapeType, ArrayRef<int64_t>{0, 0, -1}));
  auto rows = RankedTensorType::get({type.getDimSize(0), type.getDimSize(1), features},
                                    type.getElementType());
  return onnx::ReshapeOp::create(builder, loc, rows, groups, shape,
                                 builder.getI64IntegerAttr(0));
}

// A past key or value of the export's interface, [b, kv_heads, past, d] with each group's
// key held `repeats` times (the presents write it so), as one copy per group: heads
// 0, repeats, 2 * repeats, ... (a Slice with that step).
Value firstCopies(OpBuilder &builder, Location loc, Value past, int64_t repeats) {
  auto type = cast<RankedTensorType>(past.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[1] /= repeats;
  auto index = [&](int64_t value) -> Value {
    auto indexType = RankedTensorType::get({1}, builder.getI64Type());
    return onnx::ConstantOp::create(builder, loc, indexType,
                                    DenseElementsAttr::get(indexType, ArrayRef<int64_t>{value}));
  };
  return onnx::SliceOp::create(builder, loc, RankedTensorType::get(shape, type.getElementType()),
                               past, index(0), index(type.getDimSize(1)), index(1),
                               index(repeats));
}

// A present of one KV head per group, [b, groups, total, d], as the export's interface
// holds it: each group's key `repeats` times, group-major ([b, groups * repeats, total, d]).
Value repeatedCopies(OpBuilder &builder, Location loc, Value present, int64_t repeats) {
  auto type = cast<RankedTensorType>(present.getType());
  auto constant = [&](ArrayRef<int64_t> values) -> Value {
    auto constantType =
        RankedTensorType::get({static_cast<int64_t>(values.size())}, builder.getI64Type());
    return onnx::ConstantOp::create(builder, loc, constantType,
                                    DenseElementsAttr::get(constantType, values));
  };
  const int64_t groups = type.getDimSize(1), headDim = type.getDimSize(3);
  Type element = type.getElementType();
  Value unsqueezed = onnx::UnsqueezeOp::create(
      builder, loc,
      RankedTensorType::get({type.getDimSize(0), groups, 1, type.getDimSize(2), headDim},
                            element),
      present, constant({2}));
  Value tiled = onnx::TileOp::create(
      builder, loc,
      RankedTensorType::get({type.getDimSize(0), groups, repeats, type.getDimSize(2), headDim},
                            element),
      unsqueezed, constant({1, 1, repeats, 1, 1}));
  return onnx::ReshapeOp::create(
      builder, loc,
      RankedTensorType::get({type.getDimSize(0), groups * repeats, type.getDimSize(2), headDim},
                            element),
      tiled, constant({0, groups * repeats, -1, headDim}), builder.getI64IntegerAttr(0));
}

// The KV heads `attention` would have with its keys and values taken once per group, or
// none when they are not repeated.
std::optional<int64_t> narrowedHeads(tfm::AttentionOp attention) {
  if (attention.getPackedQkv() || attention.getPast().size() != attention.getPresent().size())
    return std::nullopt;
  for (Value cached : llvm::concat<Value>(attention.getPast(), attention.getPresent())) {
    auto type = dyn_cast<RankedTensorType>(cached.getType());
    if (!type || type.getRank() != 4 || type.isDynamicDim(1) || type.isDynamicDim(3))
      return std::nullopt;
  }
  const int64_t kvHeads = attention.getNumKvHeads(), headDim = attention.getHeadDim();
  std::optional<Repeated> key = repeatedHeads(attention.getKey(), kvHeads, headDim);
  std::optional<Repeated> value = repeatedHeads(attention.getValue(), kvHeads, headDim);
  if (!key || !value || key->count != value->count || kvHeads % key->count != 0)
    return std::nullopt;
  return key->count;
}

struct NarrowRepeatedKvPass : impl::NarrowRepeatedKvBase<NarrowRepeatedKvPass> {
  using NarrowRepeatedKvBase::NarrowRepeatedKvBase;

  void runOnOperation() override {
    // Every session program's attention of one cache layer (prefill's and decode's) must
    // size the layer alike: a layer narrows only where all of them do, to the same count.
    // (An attention with past operands reads the export's cache, not the session's.)
    std::map<uint64_t, std::optional<int64_t>> layers;
    SmallVector<std::pair<tfm::AttentionOp, int64_t>> narrow;
    getOperation().walk([&](tfm::AttentionOp attention) {
      std::optional<int64_t> heads = narrowedHeads(attention);
      std::optional<uint64_t> layer = attention.getCacheLayer();
      if (layer && attention.getPast().empty()) {
        auto [at, inserted] = layers.try_emplace(*layer, heads);
        if (!inserted && at->second != heads)
          at->second = std::nullopt;
      }
      if (heads)
        narrow.emplace_back(attention, *heads);
    });
    llvm::SetVector<Operation *> changed;
    for (auto [attention, heads] : narrow) {
      std::optional<uint64_t> layer = attention.getCacheLayer();
      if (layer && attention.getPast().empty() && !layers[*layer])
        continue;
      const int64_t features = heads * static_cast<int64_t>(attention.getHeadDim());
      const int64_t repeats = static_cast<int64_t>(attention.getNumKvHeads()) / heads;
      OpBuilder builder(attention);
      for (int operand : {1, 2}) {
        Value groups =
            repeatedHeads(attention->getOperand(operand), attention.getNumKvHeads(),
                          attention.getHeadDim())
                ->groups;
        attention->setOperand(operand, asRows(builder, groups, features));
      }
      // The export's interface keeps its every-copy past and presents around the narrowed
      // attention: it reads each group's first copy and writes them all again.
      SmallVector<Value> pasts;
      for (Value past : attention.getPast())
        pasts.push_back(firstCopies(builder, attention.getLoc(), past, repeats));
      if (!pasts.empty())
        attention.getPastMutable().assign(pasts);
      builder.setInsertionPointAfter(attention);
      for (Value present : attention.getPresent()) {
        auto type = cast<RankedTensorType>(present.getType());
        SmallVector<int64_t> shape(type.getShape());
        shape[1] = heads;
        present.setType(RankedTensorType::get(shape, type.getElementType()));
        SmallVector<OpOperand *> readers;
        for (OpOperand &use : present.getUses())
          readers.push_back(&use);
        Value copies = repeatedCopies(builder, attention.getLoc(), present, repeats);
        for (OpOperand *reader : readers)
          reader->set(copies);
      }
      attention.setNumKvHeadsAttr(builder.getI64IntegerAttr(heads));
      changed.insert(attention->getParentOfType<func::FuncOp>());
    }
    for (Operation *func : changed)
      eraseDeadOps(func);
  }
};

} // namespace
} // namespace dsc
