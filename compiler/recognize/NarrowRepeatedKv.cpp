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

// The KV heads `attention` would have with its keys and values taken once per group, or
// none when they are not repeated (or the past's are: the export's interface keeps them).
std::optional<int64_t> narrowedHeads(tfm::AttentionOp attention) {
  if (!attention.getPast().empty() || !attention.getPresent().empty() ||
      attention.getPackedQkv())
    return std::nullopt;
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
      if (std::optional<uint64_t> layer = attention.getCacheLayer(); layer && !layers[*layer])
        continue;
      const int64_t features = heads * static_cast<int64_t>(attention.getHeadDim());
      OpBuilder builder(attention);
      for (int operand : {1, 2}) {
        Value groups =
            repeatedHeads(attention->getOperand(operand), attention.getNumKvHeads(),
                          attention.getHeadDim())
                ->groups;
        attention->setOperand(operand, asRows(builder, groups, features));
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
