// Projections that read the same input, joined into one linear layer (docs/design.md §3.6: Q, K
// and V become one projection, gate and up another): at batch-1 decode each linear is a
// pass over its weights with its own launch (or thread-pool hand-off on the CPU), and one
// longer pass reads the same bytes with fewer ramps and drains.
#include "compiler/fuse/Passes.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/Dominance.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace dsc {
#define GEN_PASS_DEF_FUSEPROJECTIONS
#include "compiler/fuse/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// The tfm.weight that `value` is, if it is one.
tfm::WeightOp weightOf(Value value) {
  return value ? value.getDefiningOp<tfm::WeightOp>() : nullptr;
}

// Whether the weight's TP shard, if it has one, gives every rank as many rows: only then do
// the joined projections split at the same offsets on every rank.
bool evenShard(tfm::WeightOp weight) {
  if (ArrayAttr transforms = weight.getTransformsAttr())
    for (Attribute transform : transforms)
      if (auto shard = dyn_cast<tfm::ShardAttr>(transform))
        if (!llvm::all_equal(shard.getSizes()))
          return false;
  return true;
}

// Why `linear` cannot be joined with others, or "".
std::string blocker(tfm::LinearOp linear) {
  if (linear.getParallel() == tfm::Parallelism::row)
    return "it is row-parallel (its result is a partial sum before a tfm.all_reduce)";
  if (linear.getActivation() || linear.getResidual())
    return "it has an epilogue already (an activation or a residual)";
  auto out = cast<RankedTensorType>(linear.getOutput().getType());
  if (out.isDynamicDim(out.getRank() - 1))
    return "its feature count is not static";
  for (auto [what, value] : {std::pair{"weight", linear.getWeight()},
                             std::pair{"scales", linear.getScales()},
                             std::pair{"bias", linear.getBias()}}) {
    if (!value)
      continue;
    tfm::WeightOp weight = weightOf(value);
    if (!weight)
      return std::string("its ") + what + " is not a tfm.weight";
    if (!evenShard(weight))
      return std::string("its ") + what + "'s tensor-parallel shard differs in size between "
             "ranks, so the joined result would split differently on each rank";
  }
  return "";
}

// Linears with equal keys can be joined: everything but the output features agrees (the
// scales' and the bias's row counts are the output features too).
std::string compatibilityKey(tfm::LinearOp linear) {
  std::string key;
  llvm::raw_string_ostream os(key);
  auto out = cast<RankedTensorType>(linear.getOutput().getType());
  auto weight = cast<RankedTensorType>(linear.getWeight().getType());
  os << stringifyParallelism(linear.getParallel()) << ", weight " << weight.getElementType()
     << " in " << weight.getDimSize(1) << ", result " << out.getElementType();
  for (int64_t d = 0; d + 1 < out.getRank(); ++d)
    os << "x" << out.getDimSize(d);
  if (Value scales = linear.getScales()) {
    auto type = cast<RankedTensorType>(scales.getType());
    os << ", scales " << type.getElementType() << " groups " << type.getDimSize(1);
  }
  if (Value bias = linear.getBias())
    os << ", bias " << cast<RankedTensorType>(bias.getType()).getElementType();
  return key;
}

// The weights `parts` (tfm.weights) joined along their rows, at the builder's point.
Value concatenate(OpBuilder &builder, Location loc, ArrayRef<Value> parts) {
  auto first = cast<RankedTensorType>(parts.front().getType());
  SmallVector<int64_t> shape(first.getShape());
  shape[0] = 0;
  for (Value part : parts)
    shape[0] += cast<RankedTensorType>(part.getType()).getDimSize(0);
  return tfm::ConcatWeightsOp::create(builder, loc,
                                      RankedTensorType::get(shape, first.getElementType()), parts)
      .getOutput();
}

// The tfm.gated_act that is the only reader of both linears of `group`, if there is one.
tfm::GatedActOp soleGatedReader(ArrayRef<tfm::LinearOp> group) {
  if (group.size() != 2)
    return nullptr;
  for (tfm::LinearOp linear : group)
    if (!linear.getOutput().hasOneUse())
      return nullptr;
  tfm::LinearOp a = group[0], b = group[1];
  auto gated = dyn_cast<tfm::GatedActOp>(*a.getOutput().getUsers().begin());
  if (!gated || *b.getOutput().getUsers().begin() != gated.getOperation())
    return nullptr;
  return gated;
}

// The gate and up linears of `group` that one tfm.gated_act alone reads, in block order;
// none when no such pair is in it.
SmallVector<tfm::LinearOp> gatedPair(ArrayRef<tfm::LinearOp> group) {
  for (tfm::LinearOp linear : group) {
    if (!linear.getOutput().hasOneUse())
      continue;
    auto gated = dyn_cast<tfm::GatedActOp>(*linear.getOutput().getUsers().begin());
    if (!gated || gated.getGate() != linear.getOutput())
      continue;
    for (tfm::LinearOp up : group) {
      SmallVector<tfm::LinearOp> pair = {linear, up};
      if (up != linear && soleGatedReader(pair) == gated)
        return up->isBeforeInBlock(linear) ? SmallVector<tfm::LinearOp>{up, linear} : pair;
    }
  }
  return {};
}

// One linear for `group` (in block order, same input, equal keys), then a Split into the
// old results; or, when the two are a tfm.gated_act's gate and up and nothing else reads
// them, the joined [gate; up] linear read by tfm.gated_act_packed (no Split). Fails,
// without changing anything, when a weight is defined where the first linear cannot see it
// (in a nested region).
LogicalResult join(ArrayRef<tfm::LinearOp> linears, DominanceInfo &dominance) {
  SmallVector<tfm::LinearOp> group(linears);
  tfm::GatedActOp gated = soleGatedReader(group);
  if (gated && gated.getGate() != group[0].getOutput())
    std::swap(group[0], group[1]);  // the gate's rows first
  tfm::LinearOp first = linears.front();
  SmallVector<tfm::WeightOp> definitions;
  for (tfm::LinearOp linear : group)
    for (Value value : {linear.getWeight(), linear.getScales(), linear.getBias()})
      if (value)
        definitions.push_back(weightOf(value));
  for (tfm::WeightOp weight : definitions)
    if (weight->getBlock() != first->getBlock() &&
        !dominance.properlyDominates(weight.getOperation(), first.getOperation()))
      return failure();
  // A tfm.weight reads nothing: it may move up to the first projection.
  for (tfm::WeightOp weight : definitions)
    if (weight->getBlock() == first->getBlock() && first->isBeforeInBlock(weight))
      weight->moveBefore(first);

  OpBuilder builder(first);
  std::string names;
  SmallVector<Location> locations;
  for (tfm::LinearOp linear : group) {
    locations.push_back(linear.getLoc());
    // Parts of one node (GPT-2's c_attn split by TP) give its name once.
    if (auto name = dyn_cast<NameLoc>(linear.getLoc());
        name && names != name.getName() &&
        !StringRef(names).ends_with("+" + name.getName().str()))
      names += (names.empty() ? "" : "+") + name.getName().str();
  }
  Location loc = names.empty() ? builder.getFusedLoc(locations)
                               : Location(NameLoc::get(builder.getStringAttr(names)));
  auto gather = [&](auto get) {
    SmallVector<Value> values;
    for (tfm::LinearOp linear : group)
      values.push_back(get(linear));
    return values;
  };
  Value weight = concatenate(builder, loc, gather([](tfm::LinearOp l) { return l.getWeight(); }));
  Value scales, bias;
  if (first.getScales())
    scales = concatenate(builder, loc, gather([](tfm::LinearOp l) { return l.getScales(); }));
  if (first.getBias())
    bias = concatenate(builder, loc, gather([](tfm::LinearOp l) { return l.getBias(); }));

  auto firstType = cast<RankedTensorType>(first.getOutput().getType());
  const int64_t axis = firstType.getRank() - 1;
  SmallVector<int64_t> sizes;
  SmallVector<Type> parts;
  for (tfm::LinearOp linear : group) {
    parts.push_back(linear.getOutput().getType());
    sizes.push_back(cast<RankedTensorType>(linear.getOutput().getType()).getDimSize(axis));
  }
  SmallVector<int64_t> shape(firstType.getShape());
  shape[axis] = cast<RankedTensorType>(weight.getType()).getDimSize(0);
  auto joinedType = RankedTensorType::get(shape, firstType.getElementType());
  auto joined = tfm::LinearOp::create(builder, loc, joinedType, first.getInput(), weight, bias,
                                      scales, first.getParallelAttr());
  // int8 activations where every part took them (dsc-quantize-weights sets all or none).
  if (llvm::all_of(group, [](tfm::LinearOp linear) { return linear.getInt8Activations(); }))
    joined.setInt8Activations(true);
  if (gated) {
    // After the joined linear, before the gated_act, which its operands dominate.
    builder.setInsertionPoint(gated);
    auto packed = tfm::GatedActPackedOp::create(builder, gated.getLoc(), gated.getType(),
                                                gated.getKindAttr(), joined.getOutput());
    gated.getOutput().replaceAllUsesWith(packed.getOutput());
    gated->erase();
    for (tfm::LinearOp linear : group)
      linear->erase();
    for (tfm::WeightOp definition : definitions)
      if (definition->use_empty())
        definition->erase();
    return success();
  }
  auto sizesType = RankedTensorType::get({static_cast<int64_t>(sizes.size())},
                                         builder.getI64Type());
  Value splitSizes = onnx::ConstantOp::create(builder, loc, sizesType,
                                              DenseElementsAttr::get(sizesType,
                                                                     ArrayRef<int64_t>(sizes)));
  auto split = onnx::SplitOp::create(builder, loc, parts, joined.getOutput(), splitSizes,
                                     builder.getI64IntegerAttr(axis));
  for (auto [index, result] : llvm::enumerate(split.getOutputs())) {
    tfm::LinearOp linear = group[index];
    linear.getOutput().replaceAllUsesWith(result);
    linear->erase();
  }
  for (tfm::WeightOp definition : definitions)
    if (definition->use_empty())
      definition->erase();
  return success();
}

struct FuseProjectionsPass : impl::FuseProjectionsBase<FuseProjectionsPass> {
  using FuseProjectionsBase::FuseProjectionsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Per input, its readers in walk (block) order.
    llvm::MapVector<Value, SmallVector<tfm::LinearOp>> readers;
    module.walk([&](tfm::LinearOp linear) { readers[linear.getInput()].push_back(linear); });
    DominanceInfo dominance(module);
    for (auto &[input, linears] : readers) {
      if (linears.size() < 2)
        continue;
      // Keyed by block and compatibility, in the order of their first linear.
      llvm::MapVector<std::pair<Block *, unsigned>, SmallVector<tfm::LinearOp>> groups;
      llvm::StringMap<unsigned> keys;
      for (tfm::LinearOp linear : linears) {
        std::string reason = blocker(linear);
        if (reason.empty()) {
          unsigned key = keys.try_emplace(compatibilityKey(linear), keys.size()).first->second;
          groups[{linear->getBlock(), key}].push_back(linear);
          continue;
        }
        if (remarks)
          linear.emitRemark() << "not joined with the other projections of its input: "
                              << reason;
      }
      // A parallel block's input feeds the attention's Q, K and V and the MLP's gate and up
      // (Cohere's): those join apart, so that the attention reads its QKV packed and the
      // gated activation becomes the gate-up linear's epilogue, with no Split between.
      SmallVector<SmallVector<tfm::LinearOp>> joins;
      for (auto &[key, group] : groups) {
        SmallVector<tfm::LinearOp> gateUp = gatedPair(group);
        if (gateUp.empty() || group.size() < 3) {
          joins.push_back(group);
          continue;
        }
        SmallVector<tfm::LinearOp> rest;
        for (tfm::LinearOp linear : group)
          if (!llvm::is_contained(gateUp, linear))
            rest.push_back(linear);
        joins.push_back(rest);
        joins.push_back(gateUp);
      }
      for (SmallVector<tfm::LinearOp> &group : joins) {
        if (group.size() < 2) {
          if (remarks && groups.size() > 1)
            group.front().emitRemark()
                << "not joined with the other projections of its input: they differ in "
                   "weight, scale or bias types, in-features, parallelism or result shape";
          continue;
        }
        if (failed(join(group, dominance)) && remarks)
          group.front().emitRemark() << "not joined with the other projections of its input: "
                                        "a weight is defined in a region the first projection "
                                        "does not see";
      }
    }
  }
};

} // namespace
} // namespace dsc
