// The tp-shard pass (DESIGN.md §3.4): one program for every tensor-parallel rank, typed
// with rank 0's shard. Weights get a #tfm.shard transform (the plan writer writes each
// rank's part into its section); what differs between ranks and is not a shape goes into
// per-rank attribute lists that the kernels index with their rank.
#include "compiler/parallel/Passes.h"

#include "compiler/parallel/GreedyPrograms.h"

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

namespace dsc {
namespace {

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

// Each rank's query and KV heads.
struct HeadSplit {
  SmallVector<int64_t> heads, headOffsets, kvHeads, kvOffsets;
  bool kvReplicated = false;
};

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

RankedTensorType withDim(Type type, int64_t axis, int64_t size) {
  auto ranked = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(ranked.getShape());
  shape[axis < 0 ? shape.size() + axis : axis] = size;
  return RankedTensorType::get(shape, ranked.getElementType());
}

// A tfm.weight: `weight`'s transforms followed by `extra`.
FailureOr<Value> transformedWeight(Value weight, ArrayRef<Attribute> extra) {
  auto op = weight.getDefiningOp<tfm::WeightOp>();
  if (!op)
    return failure();
  OpBuilder builder(op);
  return op.withTransforms(builder, extra);
}

// Where a Q, K or V operand comes from: a projection, or one part of a fused one.
struct Projection {
  tfm::LinearOp linear;
  SmallVector<Attribute> select;  // transforms selecting this part of a fused weight
  bool fused = false;
  // An unfused projection reached through scalar arithmetic (OPT scales its query):
  // those ops stay, with the shard's type.
  SmallVector<Operation *> scalarOps;
  // An unfused projection reached through reshapes and a per-head norm (Qwen3's q/k
  // norm): those ops stay, retyped for the rank's heads.
  SmallVector<Operation *> headOps;
  // Keys or values read from a graph input that holds every KV head (a cross-attention's
  // cache in optimum's merged decoder): not sharded; each rank reads its own heads.
  bool allHeads = false;
};

// Whether `operand` is a graph input seen through reshapes and transposes only.
bool viewsGraphInput(Value operand) {
  Value value = operand;
  while (Operation *def = value.getDefiningOp()) {
    StringRef name = def->getName().getStringRef();
    if (name != "onnx.Reshape" && name != "onnx.Transpose" && name != "onnx.Identity")
      return false;
    value = def->getOperand(0);
  }
  return isa<BlockArgument>(value);
}

// `type` with the rank's heads where it had `heads` heads: [.., heads * d] or a per-head
// view [.., heads, d] / [b, heads, s, d]. Other types are kept.
Type withLocalHeads(Type type, int64_t heads, int64_t local, int64_t headDim) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || ranked.getRank() == 0)
    return type;
  SmallVector<int64_t> shape(ranked.getShape());
  if (shape.back() == heads * headDim && heads * headDim != headDim) {
    shape.back() = local * headDim;
  } else if (shape.size() == 4 && shape[3] == headDim) {
    if (shape[2] == heads)
      shape[2] = local;
    else if (shape[1] == heads)
      shape[1] = local;
  }
  return RankedTensorType::get(shape, ranked.getElementType());
}

// The [.., in] value a flattened projection (GPT-2's Reshape-Gemm-Reshape) reads.
Value unflattenedInput(tfm::LinearOp linear) {
  Value input = linear.getInput();
  if (auto reshape = input.getDefiningOp(); reshape && reshape->getName().getStringRef() ==
                                                           "onnx.Reshape") {
    auto inner = dyn_cast<RankedTensorType>(reshape->getOperand(0).getType());
    auto flat = cast<RankedTensorType>(input.getType());
    if (inner && inner.getRank() >= 3 && inner.getShape().back() == flat.getShape().back())
      return reshape->getOperand(0);
  }
  return input;
}

bool isPerHeadView(ArrayRef<int64_t> dims, int64_t heads, int64_t headDim) {
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    if (dims[i] == heads && dims[i + 1] == 3 * headDim)
      return true;
    if (i + 2 < dims.size() && dims[i] == heads && dims[i + 1] == 3 && dims[i + 2] == headDim)
      return true;
  }
  return false;
}

bool isScalarConstant(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.getNumElements() == 1 && matchPattern(value, m_Constant());
}

// Whether `user` reads only dimensions of `value` that sharding its heads keeps: an
// onnx.Shape that stops before them (the implied positions read [batch, seq] of the query).
bool readsKeptDims(Operation *user, Value value, int64_t heads, int64_t headDim) {
  auto shape = dyn_cast<onnx::ShapeOp>(user);
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!shape || !type)
    return false;
  int64_t rank = type.getRank(), start = shape.getStart().value_or(0),
          end = shape.getEnd().value_or(rank);
  if (start < 0)
    start += rank;
  if (end < 0)
    end += rank;
  auto local = cast<RankedTensorType>(withLocalHeads(type, heads, 1, headDim));
  for (int64_t dim = std::max<int64_t>(start, 0); dim < std::min(end, rank); ++dim)
    if (local.getDimSize(dim) != type.getDimSize(dim))
      return false;
  return true;
}

// One use that computes with `value`, and any number that read only the dimensions its
// sharding keeps (they follow it to the rank's shard).
bool hasOneDataUse(Value value, int64_t heads, int64_t headDim) {
  int64_t data = 0;
  for (Operation *user : value.getUsers())
    data += !readsKeptDims(user, value, heads, headDim);
  return data == 1;
}

class Sharder {
public:
  Sharder(func::FuncOp func, int64_t ranks) : func_(func), ranks_(ranks), b_(func.getContext()) {}

  // Shards what it can; a function whose attention cannot be sharded stays replicated
  // (with a warning). Fails only on errors already emitted.
  LogicalResult run();

private:
  struct AttentionPlan {
    tfm::AttentionOp op;
    HeadSplit split;
    Projection parts[3];  // Q, K, V
    tfm::LinearOp output;
  };

  std::string planAttention(tfm::AttentionOp attention, AttentionPlan &plan);
  std::string traceProjection(Value operand, tfm::AttentionOp attention, int part,
                              Projection &out);
  LogicalResult shardAttention(AttentionPlan &plan);
  FailureOr<Value> columnParallel(tfm::LinearOp linear, Value input,
                                  ArrayRef<Attribute> select, ArrayRef<int64_t> offsets,
                                  ArrayRef<int64_t> sizes);
  LogicalResult rowParallel(tfm::LinearOp linear, ArrayRef<int64_t> offsets,
                            ArrayRef<int64_t> sizes, Operation *unflatten = nullptr);
  LogicalResult shardMlps();
  LogicalResult shardLmHeads();
  void eraseDead();

  Attribute shard(int64_t axis, ArrayRef<int64_t> offsets, ArrayRef<int64_t> sizes) {
    return tfm::ShardAttr::get(b_.getContext(), axis, offsets, sizes, 1);
  }

  func::FuncOp func_;
  int64_t ranks_;
  Builder b_;
};

// Follows a fused projection's plumbing (onnx reshapes, splits, slices) back to the one
// tfm.linear it reads, and says which rows of its [out, in] weight this part is.
std::string Sharder::traceProjection(Value operand, tfm::AttentionOp attention, int part,
                                     Projection &out) {
  const int64_t partHeads = part == 0 ? attention.getNumHeads() : attention.getNumKvHeads();
  const int64_t dim = attention.getHeadDim();
  if (part != 0 && viewsGraphInput(operand)) {
    out.allHeads = true;
    return "";
  }
  // No keys at all (a cached cross-attention's decode step: prefill wrote the encoder's):
  // nothing to shard; as keys of every head, each rank reads its own of none.
  if (part != 0 && operand.getDefiningOp<onnx::ConstantOfShapeOp>()) {
    out.allHeads = true;
    return "";
  }
  if (auto linear = operand.getDefiningOp<tfm::LinearOp>()) {
    if (!hasOneDataUse(linear.getOutput(), partHeads, dim))
      return "a Q/K/V projection has other users";
    out.linear = linear;
    return "";
  }
  // A projection times a scalar (OPT's query scaling).
  {
    Value value = operand;
    SmallVector<Operation *> path;
    while (Operation *def = value.getDefiningOp()) {
      StringRef name = def->getName().getStringRef();
      if (!(name == "onnx.Mul" || name == "onnx.Div") || !def->hasOneUse() ||
          !isScalarConstant(def->getOperand(1)))
        break;
      path.push_back(def);
      value = def->getOperand(0);
    }
    auto linear = value.getDefiningOp<tfm::LinearOp>();
    if (!path.empty() && linear && linear->hasOneUse()) {
      out.linear = linear;
      out.scalarOps = path;
      return "";
    }
  }
  static const llvm::StringSet<> plumbing = {
      "onnx.Reshape", "onnx.Transpose", "onnx.Split",   "onnx.Slice",   "onnx.Gather",
      "onnx.Squeeze", "onnx.Unsqueeze", "onnx.Identity", "onnx.Flatten", "onnx.GatherND"};
  tfm::LinearOp found;
  bool perHead = false;
  int64_t heads = attention.getNumHeads(), kvHeads = attention.getNumKvHeads(),
          headDim = attention.getHeadDim();
  SmallVector<Value> worklist = {operand};
  llvm::SmallPtrSet<Operation *, 16> visited;
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    Operation *def = value.getDefiningOp();
    if (!def)
      return "a Q/K/V operand reads a function argument";
    if (auto linear = dyn_cast<tfm::LinearOp>(def)) {
      if (found && found != linear)
        return "a Q/K/V operand reads more than one projection";
      found = linear;
      continue;
    }
    if (matchPattern(value, m_Constant()))
      continue;
    // A norm over each head (Qwen3's q/k norm) works on whichever heads a rank holds.
    if (isa<tfm::RmsNormOp, tfm::LayerNormOp>(def)) {
      auto type = dyn_cast<RankedTensorType>(def->getOperand(1).getType());
      if (!type || type.getRank() != 1 || type.getDimSize(0) != headDim)
        return "a Q/K/V operand is normalised over more than one head";
      if (!visited.insert(def).second)
        continue;
      if (llvm::any_of(out.headOps, [](Operation *op) {
            return isa<tfm::RmsNormOp, tfm::LayerNormOp>(op);
          }))
        return "a Q/K/V operand's heads are normalised each with weights of their own";
      out.headOps.push_back(def);
      worklist.push_back(def->getOperand(0));
      continue;
    }
    if (isa<onnx::ConcatOp>(def) && llvm::all_of(def->getOperands(), [](Value part) {
          return isa_and_nonnull<tfm::RmsNormOp, tfm::LayerNormOp>(part.getDefiningOp());
        }))
      return "a Q/K/V operand's heads are normalised each with weights of their own";
    if (!plumbing.contains(def->getName().getStringRef()))
      return "a Q/K/V operand is computed by '" + def->getName().getStringRef().str() + "'";
    if (!visited.insert(def).second)
      continue;
    out.headOps.push_back(def);
    // The parts are taken in the attention's order (q, k, v); a split that hands them out
    // in another order is not understood.
    if (def->getName().getStringRef() == "onnx.Split" && def->getNumResults() == 3 &&
        cast<OpResult>(value).getResultNumber() != static_cast<unsigned>(part))
      return "a fused projection's split does not give q, k and v in that order";
    // BLOOM (and GPT-NeoX) view the fused projection as [.., heads, 3 * head_dim] or
    // [.., heads, 3, head_dim]: Q, K and V interleaved per head. The view's type or its
    // constant shape says so.
    if (auto type = dyn_cast<RankedTensorType>(value.getType()))
      perHead |= isPerHeadView(type.getShape(), heads, headDim);
    DenseIntElementsAttr shape;
    if (def->getName().getStringRef() == "onnx.Reshape" &&
        matchPattern(def->getOperand(1), m_Constant(&shape))) {
      SmallVector<int64_t> dims;
      for (const APInt &d : shape.getValues<APInt>())
        dims.push_back(d.getSExtValue());
      perHead |= isPerHeadView(dims, heads, headDim);
    }
    // Only the data operand: the others are shapes, indices and split sizes.
    worklist.push_back(def->getOperand(0));
  }
  if (!found)
    return "a Q/K/V operand reads no projection";
  int64_t features = cast<RankedTensorType>(found.getWeight().getType()).getDimSize(0);
  // A projection of this part alone, seen through reshapes and a per-head norm.
  if (features == (part == 0 ? heads : kvHeads) * headDim) {
    if (!hasOneDataUse(found.getOutput(), partHeads, dim))
      return "a Q/K/V projection has other users";
    for (Operation *op : out.headOps)
      if (!hasOneDataUse(op->getResult(0), partHeads, dim))
        return "a value between a Q/K/V projection and the attention has other users";
    out.linear = found;
    return "";
  }
  out.headOps.clear();
  if (features != (heads + 2 * kvHeads) * headDim)
    return "a fused projection of " + std::to_string(features) +
           " features is not the attention's Q, K and V";
  out.linear = found;
  out.fused = true;
  int64_t size = part == 0 ? heads * headDim : kvHeads * headDim;
  if (perHead) {
    if (kvHeads != heads)
      return "a per-head fused projection with grouped KV heads";
    out.select.push_back(tfm::BlocksAttr::get(b_.getContext(), 0, heads, part * headDim, headDim));
  } else {
    // GPT-2's c_attn: [q | k | v] columns.
    int64_t offset = part == 0 ? 0 : part == 1 ? heads * headDim : (heads + kvHeads) * headDim;
    out.select.push_back(tfm::BlocksAttr::get(b_.getContext(), 0, 1, offset, size));
  }
  return "";
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
  for (int part = 0; part < 3; ++part)
    if (std::string why = traceProjection(operands[part], attention, part, plan.parts[part]);
        !why.empty())
      return why;
  if (plan.parts[1].allHeads != plan.parts[2].allHeads)
    return "only one of the keys and values is read from a graph input";
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
    // A fused projection's part is computed from the unflattened input, [b, s, features].
    Value input = p.fused ? unflattenedInput(p.linear) : p.linear.getInput();
    FailureOr<Value> column = columnParallel(p.linear, input, p.select,
                                             scaled(firsts, headDim), scaled(counts, headDim));
    if (failed(column))
      return failure();
    if (p.fused) {
      attention->setOperand(part, *column);
      continue;
    }
    p.linear.getOutput().replaceAllUsesWith(*column);
    for (Operation *op : llvm::reverse(p.scalarOps))
      op->getResult(0).setType(withDim(op->getResult(0).getType(), -1,
                                       counts[0] * headDim));
    int64_t partHeads = part == 0 ? globalHeads : globalKv;
    for (Operation *op : p.headOps)
      op->getResult(0).setType(
          withLocalHeads(op->getResult(0).getType(), partHeads, counts[0], headDim));
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
  // the whole function replicated.
  std::vector<AttentionPlan> plans(attentions.size());
  for (auto [attention, plan] : llvm::zip(attentions, plans)) {
    if (static_cast<int64_t>(attention.getNumHeads()) < ranks_)
      return attention.emitError() << "--tp " << ranks_ << " is more than the "
                                   << attention.getNumHeads() << " query heads";
    if (std::string why = planAttention(attention, plan); !why.empty()) {
      attention.emitWarning() << "tp-shard: @" << func_.getSymName()
                              << " stays replicated: this attention cannot be sharded: "
                              << why;
      return success();
    }
  }
  if (attentions.empty()) {
    func_.emitWarning() << "tp-shard: @" << func_.getSymName()
                        << " stays replicated: it has no recognised attention";
    return success();
  }
  for (AttentionPlan &plan : plans)
    if (failed(shardAttention(plan)))
      return failure();
  if (failed(shardMlps()) || failed(shardLmHeads()))
    return failure();
  eraseDead();
  return success();
}


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
      Sharder sharder(func, ranks);
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
