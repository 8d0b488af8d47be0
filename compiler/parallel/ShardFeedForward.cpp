// tp-shard's feed-forward parts (Sharder.h): the MLPs, recognised or with an activation of
// elementwise ops, and the LM head, each column- then row-parallel or split by vocabulary.
#include "compiler/parallel/ElementwiseMlp.h"
#include "compiler/parallel/ProjectionTrace.h"
#include "compiler/parallel/Sharder.h"

#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace dsc::parallel {

// linear -> activation -> linear, and act(gate) * up -> linear: the first projections
// column-parallel over the intermediate features, the last row-parallel.
LogicalResult Sharder::shardMlps() {
  SmallVector<Operation *> acts;
  func_.walk([&](Operation *op) {
    if (isa<tfm::ActivationOp, tfm::GatedActOp>(op))
      acts.push_back(op);
  });
  for (Operation *act : acts) {
    SmallVector<tfm::LinearOp> firsts;
    SmallVector<Value> inputs;
    bool usable = true;
    for (Value input : act->getOperands()) {
      // GPT-2's flattened c_fc: Reshape([b * s, features] -> [b, s, features]).
      Operation *reshape = input.getDefiningOp();
      bool unflattens = reshape && reshape->getName().getStringRef() == "onnx.Reshape" &&
                        reshape->hasOneUse();
      auto linear = unflattens ? reshape->getOperand(0).getDefiningOp<tfm::LinearOp>()
                               : input.getDefiningOp<tfm::LinearOp>();
      if (!linear || !linear->hasOneUse() || linear.getScales() ||
          linear.getParallel() != tfm::Parallelism::replicated) {
        usable = false;
        continue;
      }
      Value from = unflattens ? unflattenedInput(linear) : linear.getInput();
      if (unflattens && cast<RankedTensorType>(from.getType()).getRank() !=
                            cast<RankedTensorType>(input.getType()).getRank()) {
        usable = false;
        continue;
      }
      firsts.push_back(linear);
      inputs.push_back(from);
    }
    Value out = act->getResult(0);
    auto last = out.hasOneUse() ? dyn_cast<tfm::LinearOp>(*out.getUsers().begin())
                                : tfm::LinearOp();
    // GPT-2's flattened c_proj: Reshape -> linear -> Reshape back to the activation's rank.
    // Its other users may only read the shape: the batch and sequence dimensions, which
    // sharding keeps, and the features, which only the bypassed flattening reads.
    Operation *unflatten = nullptr;
    SmallVector<Operation *> dataUsers;
    for (Operation *user : out.getUsers())
      if (user->getName().getStringRef() != "onnx.Shape")
        dataUsers.push_back(user);
    if (!last && dataUsers.size() == 1) {
      Operation *flatten = dataUsers.front();
      auto linear = flatten->getName().getStringRef() == "onnx.Reshape" &&
                            flatten->getResult(0).hasOneUse()
                        ? dyn_cast<tfm::LinearOp>(*flatten->getResult(0).getUsers().begin())
                        : tfm::LinearOp();
      Operation *back = linear && linear.getOutput().hasOneUse()
                            ? *linear.getOutput().getUsers().begin()
                            : nullptr;
      auto backType = back ? dyn_cast<RankedTensorType>(back->getResult(0).getType())
                           : RankedTensorType();
      if (back && back->getName().getStringRef() == "onnx.Reshape" && backType &&
          backType.getRank() == cast<RankedTensorType>(out.getType()).getRank() &&
          backType.getShape().back() ==
              cast<RankedTensorType>(linear.getWeight().getType()).getDimSize(0)) {
        last = linear;
        unflatten = back;
      }
    }
    if (!usable || !last || (!unflatten && last.getInput() != out) || last.getScales() ||
        last.getParallel() != tfm::Parallelism::replicated) {
      act->emitWarning("tp-shard: this MLP stays replicated: its projections are not "
                       "linear -> activation -> linear");
      continue;
    }
    int64_t features = cast<RankedTensorType>(firsts[0].getWeight().getType()).getDimSize(0);
    SmallVector<int64_t> sizes = evenSizes(features, ranks_), offsets = offsetsOf(sizes);
    for (auto [index, first] : llvm::enumerate(firsts)) {
      FailureOr<Value> column = columnParallel(first, inputs[index], {}, offsets, sizes);
      if (failed(column))
        return failure();
      act->setOperand(index, *column);
    }
    out.setType(withDim(out.getType(), -1, sizes[0]));
    if (failed(rowParallel(last, offsets, sizes, unflatten)))
      return failure();
  }
  return success();
}

// MLPs whose activation is a graph of elementwise ops (ElementwiseMlp.h): the same
// column- and row-parallel halves, each op retyped for the rank's features.
LogicalResult Sharder::shardElementwiseMlps() {
  for (ElementwiseMlp &mlp : findElementwiseMlps(func_)) {
    int64_t features = cast<RankedTensorType>(mlp.up.getWeight().getType()).getDimSize(0);
    SmallVector<int64_t> sizes = evenSizes(features, ranks_), offsets = offsetsOf(sizes);
    FailureOr<Value> column = columnParallel(mlp.up, mlp.up.getInput(), {}, offsets, sizes);
    if (failed(column))
      return failure();
    mlp.up.getOutput().replaceAllUsesWith(*column);
    for (Operation *op : mlp.ops)
      op->getResult(0).setType(withDim(op->getResult(0).getType(), -1, sizes[0]));
    if (failed(rowParallel(mlp.down, offsets, sizes, nullptr)))
      return failure();
  }
  return success();
}

// A stack of weights (tfm.concat_weights) with every part sharded along `axis`: rank r
// keeps [offsets[r], +sizes[r]) of each part. The new stack has rank 0's parts' shape.
FailureOr<Value> Sharder::shardEachPart(Value stack, int64_t axis, ArrayRef<int64_t> offsets,
                                        ArrayRef<int64_t> sizes) {
  auto concat = stack.getDefiningOp<tfm::ConcatWeightsOp>();
  if (!concat)
    return failure();
  SmallVector<Value> parts;
  int64_t rows = 0;
  for (Value part : concat.getParts()) {
    FailureOr<Value> sharded = transformedWeight(part, {shard(axis, offsets, sizes)});
    if (failed(sharded))
      return failure();
    parts.push_back(*sharded);
    rows += cast<RankedTensorType>(sharded->getType()).getDimSize(0);
  }
  auto type = cast<RankedTensorType>(concat.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[0] = rows;
  if (axis == 1)
    shape[1] = sizes[0];
  OpBuilder builder(concat);
  return tfm::ConcatWeightsOp::create(builder, concat.getLoc(),
                                      RankedTensorType::get(shape, type.getElementType()), parts)
      .getOutput();
}

// A tfm.moe's shared expert split like a dense MLP (its gate and up rows, its down's inputs),
// its sigmoid gate replicated: the ranks' partial sums add up to it after the MoE's
// all-reduce, whether the routed experts are split (TP) or placed (--ep).
LogicalResult Sharder::shardSharedExpert(tfm::MoeOp moe) {
  if (!moe.getSharedGateUp())
    return success();
  SmallVector<int64_t> sizes = evenSizes(sharedWidth(moe), ranks_), offsets = offsetsOf(sizes);
  FailureOr<Value> gateUp = shardEachPart(moe.getSharedGateUp(), 0, offsets, sizes);
  FailureOr<Value> down = transformedWeight(moe.getSharedDown(), {shard(1, offsets, sizes)});
  if (failed(gateUp) || failed(down))
    return moe.emitOpError("tp-shard: cannot shard the shared expert");
  moe.getSharedGateUpMutable().assign(*gateUp);
  moe.getSharedDownMutable().assign(*down);
  return success();
}

// The intermediate features of a tfm.moe's shared expert; the ranks where it has none (it
// does not limit the split).
int64_t Sharder::sharedWidth(tfm::MoeOp moe) const {
  return moe.getSharedDown()
             ? cast<RankedTensorType>(moe.getSharedDown().getType()).getDimSize(1)
             : ranks_;
}

// The MoE's result is each rank's partial sum: one tfm.all_reduce completes it.
void Sharder::reduceAfter(tfm::MoeOp moe) {
  OpBuilder builder(moe);
  builder.setInsertionPointAfter(moe);
  auto reduce = tfm::AllReduceOp::create(builder, moe.getLoc(), moe.getOutput().getType(),
                                         moe.getOutput(), builder.getI64IntegerAttr(ranks_));
  moe.getOutput().replaceAllUsesExcept(reduce.getOutput(), reduce);
}

// Each expert of a tfm.moe split as a dense MLP is: its gate and up rows over the
// intermediate features (column-parallel), its down projection's inputs (row-parallel); the
// rank's result is a partial sum, completed by one tfm.all_reduce per MoE layer. Every rank
// routes every token (the router stays replicated) and runs its part of the chosen experts.
// Experts' gate and up biases are split with their rows; the down bias is weighted by the
// token's score, so it cannot be added after the reduce as a row-parallel linear's is: every
// rank holds it whole and rank 0 alone adds it (down_bias_rank), so the reduce holds it once.
LogicalResult Sharder::shardMoes() {
  SmallVector<tfm::MoeOp> moes;
  func_.walk([&](tfm::MoeOp moe) { moes.push_back(moe); });
  for (tfm::MoeOp moe : moes) {
    if (expertParallel_) {
      if (failed(placeExperts(moe)))
        return failure();
      continue;
    }
    const int64_t inter = cast<RankedTensorType>(moe.getDown().getType()).getDimSize(1);
    if (inter < ranks_ || sharedWidth(moe) < ranks_) {
      moe.emitWarning("tp-shard: this mixture of experts stays replicated: its experts are "
                      "narrower than the ranks");
      continue;
    }
    SmallVector<int64_t> sizes = evenSizes(inter, ranks_), offsets = offsetsOf(sizes);
    FailureOr<Value> gateUp = shardEachPart(moe.getGateUp(), 0, offsets, sizes);
    FailureOr<Value> down = shardEachPart(moe.getDown(), 1, offsets, sizes);
    FailureOr<Value> gateUpBias = moe.getGateUpBias()
                                      ? shardEachPart(moe.getGateUpBias(), 0, offsets, sizes)
                                      : FailureOr<Value>(Value());
    if (failed(gateUp) || failed(down) || failed(gateUpBias))
      return moe.emitOpError("tp-shard: cannot shard the experts' weights");
    moe.getGateUpMutable().assign(*gateUp);
    moe.getDownMutable().assign(*down);
    if (*gateUpBias) {
      moe.getGateUpBiasMutable().assign(*gateUpBias);
      moe.setDownBiasRankAttr(b_.getI64IntegerAttr(0));
    }
    if (failed(shardSharedExpert(moe)))
      return failure();
    reduceAfter(moe);
  }
  return success();
}

// Expert parallelism: rank r holds experts [offsets[r], +counts[r]) whole (the remainder
// to the lowest ranks), its weights only those (tfm.concat_weights' rank_parts); every rank
// routes every token and runs the chosen experts it holds, and one tfm.all_reduce sums the
// ranks' results. Each expert lives on one rank, so its biases are added once. Partial sums
// by all-reduce move [tokens, hidden] per layer whatever k is; an all-to-all would send each
// token only to the ranks of its k experts and back (DeepSpeed-MoE's and vLLM's EP), which
// pays once tokens are many and ranks span machines (docs/transformer-ops.md).
LogicalResult Sharder::placeExperts(tfm::MoeOp moe) {
  const int64_t experts = moe.getNumExperts();
  SmallVector<tfm::ConcatWeightsOp> stacks;
  for (Value weight : {moe.getGateUp(), moe.getDown(), moe.getGateUpBias(), moe.getDownBias()})
    if (weight)
      stacks.push_back(weight.getDefiningOp<tfm::ConcatWeightsOp>());
  if (experts < ranks_ || sharedWidth(moe) < ranks_ ||
      llvm::is_contained(stacks, tfm::ConcatWeightsOp())) {
    moe.emitWarning() << "--ep: this mixture of experts stays replicated: "
                      << (experts < ranks_           ? "it has fewer experts than ranks"
                          : sharedWidth(moe) < ranks_ ? "its shared expert is narrower than the ranks"
                                                      : "its weights are not per expert");
    return success();
  }
  if (failed(shardSharedExpert(moe)))
    return failure();
  SmallVector<int64_t> counts = evenSizes(experts, ranks_), offsets = offsetsOf(counts);
  for (tfm::ConcatWeightsOp stack : stacks) {
    const int64_t perExpert = static_cast<int64_t>(stack.getParts().size()) / experts;
    SmallVector<int64_t> rankParts;
    for (int64_t r = 0; r < ranks_; ++r)
      rankParts.append({offsets[r] * perExpert, (offsets[r] + counts[r]) * perExpert});
    auto type = cast<RankedTensorType>(stack.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[0] = shape[0] / experts * counts[0];
    OpBuilder builder(stack);
    auto placed = tfm::ConcatWeightsOp::create(
        builder, stack.getLoc(), RankedTensorType::get(shape, type.getElementType()),
        stack.getParts(), builder.getDenseI64ArrayAttr(rankParts));
    stack.getOutput().replaceUsesWithIf(placed.getOutput(), [&](OpOperand &use) {
      return use.getOwner() == moe.getOperation();
    });
  }
  moe.setRankExpertsAttr(b_.getDenseI64ArrayAttr(counts));
  moe.setRankExpertOffsetsAttr(b_.getDenseI64ArrayAttr(offsets));
  reduceAfter(moe);
  return success();
}

// The LM head split by vocabulary; the logits gathered along their last axis.
LogicalResult Sharder::shardLmHeads() {
  SmallVector<tfm::LmHeadOp> heads;
  func_.walk([&](tfm::LmHeadOp head) { heads.push_back(head); });
  for (tfm::LmHeadOp head : heads) {
    if (head.getVocabSize()) {
      head.emitWarning("tp-shard: this LM head is already a vocabulary shard");
      continue;
    }
    int64_t vocab = cast<RankedTensorType>(head.getWeight().getType()).getDimSize(0);
    SmallVector<int64_t> sizes = evenSizes(vocab, ranks_), offsets = offsetsOf(sizes);
    FailureOr<Value> weight = transformedWeight(head.getWeight(), {shard(0, offsets, sizes)});
    if (failed(weight))
      return head.emitOpError("tp-shard: cannot shard the weight");
    head.getWeightMutable().assign(*weight);
    Type full = head.getLogits().getType();
    int64_t axis = cast<RankedTensorType>(full).getRank() - 1;
    head.getLogits().setType(withDim(full, axis, sizes[0]));
    OpBuilder builder(head);
    builder.setInsertionPointAfter(head);
    auto gather = tfm::AllGatherOp::create(builder, head.getLoc(), full, head.getLogits(),
                                           builder.getI64IntegerAttr(axis),
                                           builder.getI64IntegerAttr(ranks_),
                                           builder.getDenseI64ArrayAttr(sizes));
    head.getLogits().replaceAllUsesExcept(gather.getOutput(), gather);
  }
  return success();
}

} // namespace dsc::parallel
