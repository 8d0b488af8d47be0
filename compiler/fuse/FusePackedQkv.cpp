// Packed Q, K and V: an attention whose query, key and value are the three parts of one
// Split of a joined projection reads the joined tensor itself (`packed_qkv`), so that no
// Split copies them apart: one launch fewer per layer on the GPU, one copy fewer on the
// CPU (DESIGN.md §3.6, issue 14).
#include "compiler/fuse/Passes.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"

#include <optional>
#include <string>

namespace dsc {
#define GEN_PASS_DEF_FUSEPACKEDQKV
#include "compiler/fuse/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// The sizes a Split gives its parts along its axis: its `split` operand, else its results'
// static sizes; none when neither says.
std::optional<SmallVector<int64_t>> splitSizes(onnx::SplitOp split, int64_t axis) {
  DenseIntElementsAttr sizes;
  if (split.getSplit() && matchPattern(split.getSplit(), m_Constant(&sizes))) {
    SmallVector<int64_t> values;
    for (const APInt &size : sizes.getValues<APInt>())
      values.push_back(size.getSExtValue());
    return values;
  }
  SmallVector<int64_t> values;
  for (Value part : split.getOutputs()) {
    auto type = dyn_cast<RankedTensorType>(part.getType());
    if (!type || type.getRank() <= axis || type.isDynamicDim(axis))
      return std::nullopt;
    values.push_back(type.getDimSize(axis));
  }
  return values;
}

// Empty when `attention` can read its joined Q, K and V packed; else why not.
std::string whyNotPacked(tfm::AttentionOp attention, onnx::SplitOp &split) {
  if (attention.getPackedQkv())
    return "already packed";
  if (!attention.getPast().empty() || attention.getBias())
    return "it has past inputs or a bias";
  split = attention.getQuery().getDefiningOp<onnx::SplitOp>();
  if (!split || split.getNumResults() != 3 || attention.getQuery() != split.getResult(0) ||
      attention.getKey() != split.getResult(1) || attention.getValue() != split.getResult(2))
    return "its query, key and value are not the three parts of one Split, in that order";
  for (Value part : split.getOutputs())
    if (!part.hasOneUse())
      return "a part of the Split has another user";
  auto joined = dyn_cast<RankedTensorType>(split.getInput().getType());
  if (!joined || joined.getRank() != 3)
    return "the joined projection is not [batch, seq, features]";
  int64_t axis = split.getAxis() < 0 ? split.getAxis() + 3 : split.getAxis();
  if (axis != 2)
    return "the Split is not along the features";
  // Every rank must hold the same counts: the packed layout is the op's (rank 0's) heads.
  for (StringRef name : {"tfm.rank_heads", "tfm.rank_kv_heads"})
    if (auto counts = attention->getAttrOfType<ArrayAttr>(name))
      if (llvm::any_of(counts, [&](Attribute c) { return c != counts[0]; }))
        return "its tensor-parallel ranks hold different head counts";
  const int64_t d = static_cast<int64_t>(attention.getHeadDim());
  const int64_t heads = static_cast<int64_t>(attention.getNumHeads());
  const int64_t kvHeads = static_cast<int64_t>(attention.getNumKvHeads());
  SmallVector<int64_t> expected = {heads * d, kvHeads * d, kvHeads * d};
  std::optional<SmallVector<int64_t>> sizes = splitSizes(split, axis);
  if (!sizes || *sizes != expected)
    return "the Split's parts are not the attention's query, key and value widths";
  if (!joined.isDynamicDim(2) && joined.getDimSize(2) != expected[0] + expected[1] + expected[2])
    return "the joined projection holds more than the query, key and value";
  return "";
}

struct FusePackedQkvPass : impl::FusePackedQkvBase<FusePackedQkvPass> {
  using FusePackedQkvBase::FusePackedQkvBase;
  void runOnOperation() override {
    SmallVector<tfm::AttentionOp> attentions;
    getOperation().walk([&](tfm::AttentionOp op) { attentions.push_back(op); });
    for (tfm::AttentionOp attention : attentions) {
      onnx::SplitOp split;
      std::string why = whyNotPacked(attention, split);
      if (!why.empty()) {
        if (remarks && why != "already packed")
          attention.emitRemark() << "Q, K and V not packed: " << why;
        continue;
      }
      Value joined = split.getInput();
      attention->setOperand(0, joined);
      attention->setOperand(1, joined);
      attention->setOperand(2, joined);
      attention.setPackedQkv(true);
      split->erase();
    }
  }
};

} // namespace
} // namespace dsc
