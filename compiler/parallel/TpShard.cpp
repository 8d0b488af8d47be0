// The tp-shard pass (docs/design.md §3.4): one program for every tensor-parallel rank, typed
// with rank 0's shard. Weights get a #tfm.shard transform (the plan writer writes each
// rank's part into its section); what differs between ranks and is not a shape goes into
// per-rank attribute lists that the kernels index with their rank.
#include "compiler/parallel/Passes.h"

#include "compiler/parallel/GreedyPrograms.h"
#include "compiler/parallel/ProjectionTrace.h"
#include "compiler/parallel/Sharder.h"

#include "compiler/lowering/ExportPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace dsc {
#define GEN_PASS_DEF_TPSHARD
#include "compiler/parallel/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc::parallel {

// n split into `ranks` consecutive parts, the remainder going to the lowest ranks (so
// rank 0's part, the IR's, is the largest).
SmallVector<int64_t> evenSizes(int64_t n, int64_t ranks) {
  SmallVector<int64_t> sizes;
  for (int64_t r = 0; r < ranks; ++r)
    sizes.push_back(n / ranks + (r < n % ranks ? 1 : 0));
  return sizes;
}

SmallVector<int64_t> offsetsOf(ArrayRef<int64_t> sizes) {
  SmallVector<int64_t> offsets;
  int64_t at = 0;
  for (int64_t size : sizes) {
    offsets.push_back(at);
    at += size;
  }
  return offsets;
}

SmallVector<int64_t> scaled(ArrayRef<int64_t> values, int64_t factor) {
  SmallVector<int64_t> out;
  for (int64_t v : values)
    out.push_back(v * factor);
  return out;
}

namespace {

// Whole KV-head groups when there are at least as many KV heads as ranks; otherwise each
// KV head's group of query heads is split over ranks of its own, so every rank reads one KV
// head (replicated on the ranks of its group). The groups with the fewest ranks come
// first: rank 0 then holds the most heads, whose types the program carries.
std::string splitHeads(int64_t heads, int64_t kvHeads, int64_t ranks, HeadSplit &split) {
  int64_t group = heads / kvHeads;
  if (kvHeads >= ranks) {
    split.kvHeads = evenSizes(kvHeads, ranks);
    split.kvOffsets = offsetsOf(split.kvHeads);
    split.heads = scaled(split.kvHeads, group);
    split.headOffsets = scaled(split.kvOffsets, group);
    return "";
  }
  split.kvReplicated = true;
  SmallVector<int64_t> ranksPerGroup = evenSizes(ranks, kvHeads);
  std::reverse(ranksPerGroup.begin(), ranksPerGroup.end());
  for (int64_t g = 0; g < kvHeads; ++g) {
    SmallVector<int64_t> shares = evenSizes(group, ranksPerGroup[g]);
    int64_t offset = g * group;
    for (int64_t share : shares) {
      split.heads.push_back(share);
      split.headOffsets.push_back(offset);
      split.kvHeads.push_back(1);
      split.kvOffsets.push_back(g);
      offset += share;
    }
  }
  for (int64_t r = 0; r < ranks; ++r)
    if (split.heads[r] > split.heads[0] || split.heads[r] == 0)
      return "rank " + std::to_string(r) + " would hold " + std::to_string(split.heads[r]) +
             " query heads against rank 0's " + std::to_string(split.heads[0]);
  return "";
}

ArrayAttr i64Array(Builder &b, ArrayRef<int64_t> values) { return b.getI64ArrayAttr(values); }

} // namespace

RankedTensorType withDim(Type type, int64_t axis, int64_t size) {
  auto ranked = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(ranked.getShape());
  shape[axis < 0 ? shape.size() + axis : axis] = size;
  return RankedTensorType::get(shape, ranked.getElementType());
}


std::string Sharder::planAttention(tfm::AttentionOp attention, AttentionPlan &plan) {
  plan.op = attention;
  int64_t heads = attention.getNumHeads(), kvHeads = attention.getNumKvHeads();
  if (std::string why = splitHeads(heads, kvHeads, ranks_, plan.split); !why.empty())
    return why;
  if (Value mask = attention.getMask()) {
    auto type = dyn_cast<RankedTensorType>(mask.getType());
    if (!type || (type.getRank() == 4 && type.getDimSize(1) != 1))
      return "its mask may differ per head";
  }
  Value operands[3] = {attention.getQuery(), attention.getKey(), attention.getValue()};
  if (std::string why = traceProjection(operands[0], attention, 0, plan.parts[0]); !why.empty())
    return why;
  if (std::string why = traceKeysAndValues(operands[1], operands[2], attention,
                                                     plan.parts[1], plan.parts[2]);
      !why.empty())
    return why;
  if (plan.parts[1].allHeads != plan.parts[2].allHeads)
    return "only one of the keys and values is read from a graph input";
  // Replicated KV heads would count their squares once per copy.
  if (plan.parts[1].globalNorm && plan.split.kvReplicated)
    return "its keys are normalised over all " + std::to_string(kvHeads) +
           " KV heads, which are fewer than the ranks";
  for (Projection &p : plan.parts)
    if (!p.allHeads &&
        (p.linear.getScales() || p.linear.getParallel() != tfm::Parallelism::replicated))
      return "a Q/K/V projection is quantized or already parallel";
  if (!attention.getOutput().hasOneUse())
    return "the attention output has more than one user";
  auto output = dyn_cast<tfm::LinearOp>(*attention.getOutput().getUsers().begin());
  if (!output || output.getInput() != attention.getOutput() || output.getScales() ||
      output.getParallel() != tfm::Parallelism::replicated)
    return "the attention output does not feed one output projection";
  plan.output = output;
  return "";
}

// A column-parallel copy of `linear` (of the rows `select` picks, for a fused projection):
// rank r computes the output features [offsets[r], +sizes[r]).
FailureOr<Value> Sharder::columnParallel(tfm::LinearOp linear, Value input,
                                         ArrayRef<Attribute> select, ArrayRef<int64_t> offsets,
                                         ArrayRef<int64_t> sizes) {
  SmallVector<Attribute> transforms(select);
  transforms.push_back(shard(0, offsets, sizes));
  FailureOr<Value> weight = transformedWeight(linear.getWeight(), transforms);
  if (failed(weight))
    return linear.emitOpError("tp-shard: cannot shard the weight");
  Value bias;
  if (Value old = linear.getBias()) {
    // The bias [out] is selected and sharded like the weight's rows.
    FailureOr<Value> sharded = transformedWeight(old, transforms);
    if (failed(sharded))
      return linear.emitOpError("tp-shard: cannot shard the bias");
    bias = *sharded;
  }
  OpBuilder builder(linear);
  auto type = withDim(input.getType(), -1, sizes[0]);
  auto column = tfm::LinearOp::create(
      builder, linear.getLoc(), type, input, *weight, bias, Value(),
      tfm::ParallelismAttr::get(builder.getContext(), tfm::Parallelism::column));
  return column.getOutput();
}

// Rank r multiplies the input features [offsets[r], +sizes[r]); a tfm.all_reduce sums the
// partial results, then the bias is added once.
// With `unflatten` (GPT-2's Reshape-Gemm-Reshape: `linear` reads a flattened [b * s, in]
// and `unflatten` restores [b, s, out]), the row-parallel layer reads the unflattened input
// and replaces `unflatten`.
LogicalResult Sharder::rowParallel(tfm::LinearOp linear, ArrayRef<int64_t> offsets,
                                   ArrayRef<int64_t> sizes, Operation *unflatten) {
  FailureOr<Value> weight = transformedWeight(linear.getWeight(), {shard(1, offsets, sizes)});
  if (failed(weight))
    return linear.emitOpError("tp-shard: cannot shard the weight");
  OpBuilder builder(linear);
  Location loc = linear.getLoc();
  Type type = linear.getOutput().getType();
  Value input = linear.getInput();
  if (unflatten) {
    Operation *flatten = input.getDefiningOp();
    input = flatten->getOperand(0);
    type = unflatten->getResult(0).getType();
  }
  auto row = tfm::LinearOp::create(
      builder, loc, type, input, *weight, Value(), Value(),
      tfm::ParallelismAttr::get(builder.getContext(), tfm::Parallelism::row));
  Value result = tfm::AllReduceOp::create(builder, loc, type, row.getOutput(),
                                          builder.getI64IntegerAttr(ranks_));
  if (Value bias = linear.getBias())
    result = onnx::AddOp::create(builder, loc, type, result, bias);
  Value replaced = unflatten ? unflatten->getResult(0) : Value(linear.getOutput());
  replaced.replaceAllUsesWith(result);
  return success();
}

LogicalResult Sharder::shardAttention(AttentionPlan &plan) {
  tfm::AttentionOp attention = plan.op;
  const HeadSplit &split = plan.split;
  int64_t headDim = attention.getHeadDim();
  int64_t globalHeads = attention.getNumHeads(), globalKv = attention.getNumKvHeads();
  for (int part = 0; part < 3; ++part) {
    Projection &p = plan.parts[part];
    if (p.allHeads)
      continue;
    ArrayRef<int64_t> counts = part == 0 ? split.heads : split.kvHeads;
    ArrayRef<int64_t> firsts = part == 0 ? split.headOffsets : split.kvOffsets;
    int64_t partHeads = part == 0 ? globalHeads : globalKv;
    auto retypeHeadOps = [&] {
      for (Operation *op : p.headOps)
        if (retypedHeadOps_.insert(op).second)
          op->getResult(0).setType(
              withLocalHeads(op->getResult(0).getType(), partHeads, counts[0], headDim));
    };
    if (p.sharesKeyProjection) {
      // The keys' column-parallel projection feeds these values too.
      retypeHeadOps();
      continue;
    }
    // Another attention of the function read the same keys or values and sharded them;
    // only the views this one reads them through are its own.
    if (!p.fused && !shardedProjections_.insert(p.linear).second) {
      retypeHeadOps();
      continue;
    }
    // A fused projection's part is computed from the unflattened input, [b, s, features].
    Value input = p.fused ? unflattenedInput(p.linear) : p.linear.getInput();
    FailureOr<Value> column = columnParallel(p.linear, input, p.select,
                                             scaled(firsts, headDim), scaled(counts, headDim));
    if (failed(column))
      return failure();
    if (p.fused) {
      attention->setOperand(part, p.headNorm ? normalisedPerHead(*column, p.headNorm, headDim,
                                                                 attention)
                                             : *column);
      continue;
    }
    p.linear.getOutput().replaceAllUsesWith(*column);
    for (Operation *op : llvm::reverse(p.scalarOps))
      op->getResult(0).setType(withDim(op->getResult(0).getType(), -1,
                                       counts[0] * headDim));
    if (p.globalNorm &&
        failed(shardGlobalNorm(cast<tfm::RmsNormOp>(p.globalNorm), scaled(firsts, headDim),
                               scaled(counts, headDim), partHeads * headDim)))
      return failure();
    retypeHeadOps();
  }
  if (failed(rowParallel(plan.output, scaled(split.headOffsets, headDim),
                         scaled(split.heads, headDim))))
    return failure();

  attention->setAttr("tfm.global_heads", b_.getI64IntegerAttr(globalHeads));
  attention->setAttr("tfm.global_kv_heads", b_.getI64IntegerAttr(globalKv));
  attention->setAttr("tfm.rank_heads", i64Array(b_, split.heads));
  attention->setAttr("tfm.rank_head_offsets", i64Array(b_, split.headOffsets));
  attention->setAttr("tfm.rank_kv_heads", i64Array(b_, split.kvHeads));
  attention->setAttr("tfm.rank_kv_head_offsets", i64Array(b_, split.kvOffsets));
  attention.setNumHeads(split.heads[0]);
  attention.setNumKvHeads(split.kvHeads[0]);
  attention.getOutput().setType(
      withDim(attention.getOutput().getType(), -1, split.heads[0] * headDim));
  // The I/O cache's presents: each rank's KV heads, gathered along the head axis. With
  // fewer KV heads than ranks, ranks that read the same KV head hold the same copy: the
  // gathered heads are then taken once each, in order (a Gather of constant indices, the
  // same on every rank).
  OpBuilder builder(attention);
  builder.setInsertionPointAfter(attention);
  SmallVector<int64_t> firstCopies;
  int64_t gathered = 0;
  for (int64_t r = 0, next = 0; r < ranks_; ++r) {
    for (int64_t h = 0; h < split.kvHeads[r]; ++h)
      if (split.kvOffsets[r] + h == next) {
        firstCopies.push_back(gathered + h);
        ++next;
      }
    gathered += split.kvHeads[r];
  }
  if (static_cast<int64_t>(firstCopies.size()) != globalKv)
    return attention.emitOpError("tp-shard: the ranks' KV heads do not cover the model's ")
           << globalKv;
  for (Value present : attention.getPresent()) {
    Type full = present.getType();
    present.setType(withDim(full, 1, split.kvHeads[0]));
    Type all = gathered == globalKv ? full : withDim(full, 1, gathered);
    auto gather = tfm::AllGatherOp::create(builder, attention.getLoc(), all, present,
                                           builder.getI64IntegerAttr(1),
                                           builder.getI64IntegerAttr(ranks_),
                                           builder.getDenseI64ArrayAttr(split.kvHeads));
    Value result = gather.getOutput();
    if (gathered != globalKv) {
      auto indicesType = RankedTensorType::get({globalKv}, builder.getI64Type());
      Value indices = onnx::ConstantOp::create(
          builder, attention.getLoc(), indicesType,
          DenseElementsAttr::get(indicesType, ArrayRef<int64_t>(firstCopies)));
      result = onnx::GatherOp::create(builder, attention.getLoc(), full, result, indices,
                                      builder.getI64IntegerAttr(1));
    }
    present.replaceAllUsesExcept(result, gather);
  }
  return success();
}

// An RMS norm over all of a part's heads (OLMo-2's q_norm and k_norm), reading the
// column-parallel projection: each rank sums the squares of its features, the sums are
// all-reduced, and each rank normalises its own, x / sqrt(sum / features + eps) * its part
// of the scale, as the norm does over every feature. Generic ops around one small
// all-reduce ([.., 1] per token), not one fused kernel.
LogicalResult Sharder::shardGlobalNorm(tfm::RmsNormOp norm, ArrayRef<int64_t> offsets,
                                       ArrayRef<int64_t> sizes, int64_t features) {
  FailureOr<Value> scale = transformedWeight(norm.getScale(), {shard(0, offsets, sizes)});
  if (failed(scale))
    return norm.emitOpError("tp-shard: cannot shard the norm's scale");
  OpBuilder builder(norm);
  Location loc = norm.getLoc();
  Value input = norm.getInput();
  auto inputType = cast<RankedTensorType>(input.getType());
  Type element = inputType.getElementType();
  SmallVector<int64_t> rowShape(inputType.getShape());
  rowShape.back() = 1;
  auto rowType = RankedTensorType::get(rowShape, element);
  auto scalar = [&](double value) -> Value {
    auto type = RankedTensorType::get({}, element);
    return onnx::ConstantOp::create(
        builder, loc, type, DenseElementsAttr::get(type, builder.getFloatAttr(element, value)));
  };
  auto axesType = RankedTensorType::get({1}, builder.getI64Type());
  Value axes = onnx::ConstantOp::create(builder, loc, axesType,
                                        DenseElementsAttr::get(axesType, ArrayRef<int64_t>{-1}));
  Value squares = onnx::MulOp::create(builder, loc, inputType, input, input);
  Value sum = onnx::ReduceSumOp::create(builder, loc, rowType, squares, axes,
                                        builder.getI64IntegerAttr(1),
                                        builder.getI64IntegerAttr(0));
  Value total = tfm::AllReduceOp::create(builder, loc, rowType, sum,
                                         builder.getI64IntegerAttr(ranks_));
  Value mean = onnx::DivOp::create(builder, loc, rowType, total, scalar(double(features)));
  Value shifted = onnx::AddOp::create(builder, loc, rowType, mean,
                                      scalar(norm.getEpsilon().convertToDouble()));
  Value root = onnx::SqrtOp::create(builder, loc, rowType, shifted);
  Value normalised = onnx::DivOp::create(builder, loc, inputType, input, root);
  Value result = onnx::MulOp::create(builder, loc, inputType, normalised, *scale);
  norm.getOutput().replaceAllUsesWith(result);
  norm.erase();
  return success();
}


// The replaced projections, their weights and plumbing, and what only they fed (the shape
// arithmetic of a fused projection's views): every onnx and tfm op is free of side effects.
void Sharder::eraseDead() {
  // Until nothing changes: a post-order walk may erase the op it visits, and what an erased
  // op read may become dead in turn. Ops with regions (the merged decoder's If) stay.
  bool erased = true;
  while (erased) {
    erased = false;
    func_.walk<WalkOrder::PostOrder>([&](Operation *op) {
      if (op->getNumRegions() > 0 || op->hasTrait<OpTrait::IsTerminator>() ||
          op->getNumResults() == 0 || !op->use_empty())
        return;
      StringRef dialect = op->getDialect() ? op->getDialect()->getNamespace() : "";
      if (dialect == "onnx" || dialect == "tfm") {
        op->erase();
        erased = true;
      }
    });
  }
}

LogicalResult Sharder::run() {
  SmallVector<tfm::AttentionOp> attentions;
  func_.walk([&](tfm::AttentionOp op) { attentions.push_back(op); });
  // Every attention is planned before anything changes: one that cannot be sharded keeps
  // every attention of the function replicated (the session's KV cache holds the same heads
  // per rank in every layer). The MLPs and the LM head are sharded all the same: each is
  // whole on its own, as DeepSpeed's AutoTP shards what it can.
  std::vector<AttentionPlan> plans(attentions.size());
  bool attentionsShard = true;
  for (auto [attention, plan] : llvm::zip(attentions, plans)) {
    // Fewer query heads than ranks (a model of one head) cannot give each rank a head: the
    // attention is computed whole on every rank, as any other it cannot split.
    std::string why;
    if (static_cast<int64_t>(attention.getNumHeads()) < ranks_)
      why = std::to_string(ranks_) + " ranks are more than its " +
            std::to_string(attention.getNumHeads()) + " query heads";
    else
      why = planAttention(attention, plan);
    if (!why.empty()) {
      attention.emitWarning() << "tp-shard: @" << func_.getSymName()
                              << ": every attention stays replicated: this attention cannot be "
                                 "sharded: "
                              << why;
      attentionsShard = false;
      break;
    }
  }
  if (attentions.empty())
    func_.emitWarning() << "tp-shard: @" << func_.getSymName()
                        << ": attention stays replicated: it has no recognised attention";
  if (attentionsShard)
    for (AttentionPlan &plan : plans)
      if (failed(shardAttention(plan)))
        return failure();
  if (failed(shardMlps()) || failed(shardElementwiseMlps()) || failed(shardMoes()) ||
      failed(shardLmHeads()))
    return failure();
  eraseDead();
  return success();
}


} // namespace dsc::parallel

namespace dsc {
namespace {

struct TpShardPass : public impl::TpShardBase<TpShardPass> {
  using TpShardBase::TpShardBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (ranks < 1) {
      module.emitError() << "--tp must be at least 1, not " << int64_t(ranks);
      return signalPassFailure();
    }
    if (ranks == 1)
      return;
    bool any = false;
    for (auto func : module.getOps<func::FuncOp>()) {
      parallel::Sharder sharder(func, ranks, expertParallel);
      if (failed(sharder.run()))
        return signalPassFailure();
      func.walk([&](Operation *op) { any |= isa<tfm::AllReduceOp, tfm::AllGatherOp>(op); });
    }
    // Still a plan of `ranks` ranks: each computes the whole (replicated) model.
    if (!any)
      module.emitWarning() << "--tp " << int64_t(ranks) << ": nothing was sharded; every rank "
                              "computes the whole model (see the warnings above)";
    module->setAttr(kTensorParallelRanksAttr,
                    IntegerAttr::get(IntegerType::get(&getContext(), 64), ranks));
    FailureOr<std::optional<SmallVector<int64_t>>> vocabSizes = addGreedyPrograms(module);
    if (failed(vocabSizes))
      return signalPassFailure();
    if (*vocabSizes)
      module->setAttr(kVocabShardSizesAttr,
                      DenseI64ArrayAttr::get(&getContext(), **vocabSizes));
  }
};

} // namespace
} // namespace dsc
