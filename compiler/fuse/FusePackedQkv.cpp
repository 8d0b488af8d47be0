// Packed Q, K and V: an attention whose query, key and value are the three parts of one
// Split of a joined projection (or three Slices of it, Phi-3's; the query possibly scaled
// by a constant first, OPT's, which moves into the attention's scale) reads the joined
// tensor itself (`packed_qkv`), so that nothing copies them apart: one launch fewer per
// layer on the GPU, one copy fewer on the CPU (docs/design.md §3.6, issue 14).
#include "compiler/fuse/FusionRewrite.h"
#include "compiler/fuse/Passes.h"
#include "dialects/onnx/IR/OnnxConstants.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"

#include <algorithm>
#include <cmath>
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

// The features [start, end) that `value` takes of a [batch, seq, features] source, when it
// is an onnx.Slice of that one axis with a unit step and constant bounds (Phi-3's q, k and
// v of its qkv_proj); `end` is clamped to the source's static width.
struct FeatureSlice {
  onnx::SliceOp op;
  int64_t start = 0, end = 0;
};
std::optional<FeatureSlice> featureSlice(Value value) {
  auto slice = value.getDefiningOp<onnx::SliceOp>();
  if (!slice)
    return std::nullopt;
  auto source = dyn_cast<RankedTensorType>(slice.getData().getType());
  if (!source || source.getRank() != 3)
    return std::nullopt;
  std::optional<int64_t> start = onnx::constantIndex(slice.getStarts());
  std::optional<int64_t> end = onnx::constantIndex(slice.getEnds());
  std::optional<int64_t> axis = onnx::constantIndex(slice.getAxes());
  bool unitStep = isa<NoneType>(slice.getSteps().getType()) ||
                  onnx::constantIndex(slice.getSteps()) == std::optional<int64_t>(1);
  if (!start || !end || !axis || !unitStep || *start < 0 || (*axis != 2 && *axis != -1))
    return std::nullopt;
  int64_t last = *end;
  if (!source.isDynamicDim(2))
    last = std::min(last, source.getDimSize(2));
  return FeatureSlice{slice, *start, last};
}

// The joined projection an attention's query, key and value are the three parts of, and
// the ops that take them apart (one Split, or three Slices), when they are; else why not.
std::string partsOfOneProjection(tfm::AttentionOp attention, Value &joined,
                                 SmallVector<Operation *> &parts,
                                 std::optional<SmallVector<int64_t>> &sizes) {
  if (auto split = attention.getQuery().getDefiningOp<onnx::SplitOp>()) {
    if (split.getNumResults() != 3 || attention.getQuery() != split.getResult(0) ||
        attention.getKey() != split.getResult(1) || attention.getValue() != split.getResult(2))
      return "its query, key and value are not the three parts of one Split, in that order";
    for (Value part : split.getOutputs())
      if (!part.hasOneUse())
        return "a part of the Split has another user";
    auto type = dyn_cast<RankedTensorType>(split.getInput().getType());
    if (!type || type.getRank() != 3)
      return "the joined projection is not [batch, seq, features]";
    int64_t axis = split.getAxis() < 0 ? split.getAxis() + 3 : split.getAxis();
    if (axis != 2)
      return "the Split is not along the features";
    joined = split.getInput();
    parts = {split};
    sizes = splitSizes(split, axis);
    return "";
  }
  // Three Slices of one source, one after another along the features from 0.
  SmallVector<FeatureSlice> slices;
  for (Value part : {attention.getQuery(), attention.getKey(), attention.getValue()}) {
    std::optional<FeatureSlice> slice = featureSlice(part);
    if (!slice)
      return "its query, key and value are not the three parts of one Split or of three "
             "Slices along the features";
    if (!part.hasOneUse())
      return "a part of the joined projection has another user";
    slices.push_back(*slice);
  }
  joined = slices.front().op.getData();
  int64_t next = 0;
  sizes.emplace();
  for (FeatureSlice &slice : slices) {
    if (slice.op.getData() != joined || slice.start != next || slice.end <= slice.start)
      return "the Slices are not the consecutive parts of one projection from its first "
             "feature";
    sizes->push_back(slice.end - slice.start);
    next = slice.end;
  }
  for (FeatureSlice &slice : slices)
    parts.push_back(slice.op);
  return "";
}

// OPT's query is q_proj's result times 1/sqrt(head_dim) (an onnx.Mul by a constant) before
// the attention, which scales the scores again: q·k·(c·scale) is (c·q)·k·scale, and the
// cap, ALiBi and a bias all come after the scale. The constant moves into `scale`, so that
// the query is a part of the joined projection again. Folded only for a positive constant
// whose Mul the attention alone reads, and a query of the Mul's own type.
void foldQueryScale(tfm::AttentionOp attention) {
  auto mul = attention.getQuery().getDefiningOp<onnx::MulOp>();
  if (!mul || !mul->getResult(0).hasOneUse())
    return;
  for (auto [operand, other] : {std::pair(mul->getOperand(0), mul->getOperand(1)),
                                std::pair(mul->getOperand(1), mul->getOperand(0))}) {
    std::optional<double> c = finiteNonzeroSplat(other);
    if (!c || *c < 0 || operand.getType() != mul->getResult(0).getType())
      continue;
    float scale = attention.getScale().convertToFloat() * static_cast<float>(*c);
    if (!(scale > 0.0f) || !std::isfinite(scale))
      return;
    attention->setOperand(0, operand);
    attention.setScaleAttr(FloatAttr::get(attention.getScaleAttr().getType(), scale));
    mul->erase();
    return;
  }
}

// Empty when `attention` can read its joined Q, K and V packed; else why not.
std::string whyNotPacked(tfm::AttentionOp attention, Value &joinedValue,
                         SmallVector<Operation *> &parts) {
  if (attention.getPackedQkv())
    return "already packed";
  if (!attention.getPast().empty() || attention.getBias())
    return "it has past inputs or a bias";
  std::optional<SmallVector<int64_t>> sizes;
  std::string why = partsOfOneProjection(attention, joinedValue, parts, sizes);
  if (!why.empty())
    return why;
  auto joined = cast<RankedTensorType>(joinedValue.getType());
  // Every rank must hold the same counts: the packed layout is the op's (rank 0's) heads.
  for (StringRef name : {"tfm.rank_heads", "tfm.rank_kv_heads"})
    if (auto counts = attention->getAttrOfType<ArrayAttr>(name))
      if (llvm::any_of(counts, [&](Attribute c) { return c != counts[0]; }))
        return "its tensor-parallel ranks hold different head counts";
  const int64_t d = static_cast<int64_t>(attention.getHeadDim());
  const int64_t heads = static_cast<int64_t>(attention.getNumHeads());
  const int64_t kvHeads = static_cast<int64_t>(attention.getNumKvHeads());
  SmallVector<int64_t> expected = {heads * d, kvHeads * d, kvHeads * d};
  if (!sizes || *sizes != expected)
    return "the parts are not the attention's query, key and value widths";
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
      if (!attention.getPackedQkv())
        foldQueryScale(attention);
      Value joined;
      SmallVector<Operation *> parts;
      std::string why = whyNotPacked(attention, joined, parts);
      if (!why.empty()) {
        if (remarks && why != "already packed")
          attention.emitRemark() << "Q, K and V not packed: " << why;
        continue;
      }
      attention->setOperand(0, joined);
      attention->setOperand(1, joined);
      attention->setOperand(2, joined);
      attention.setPackedQkv(true);
      for (Operation *part : parts)
        part->erase();
    }
  }
};

} // namespace
} // namespace dsc
