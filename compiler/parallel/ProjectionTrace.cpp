// Where an attention's Q, K and V come from: ProjectionTrace.h.
#include "compiler/parallel/ProjectionTrace.h"

#include "dialects/onnx/IR/OnnxConstants.h"
#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <optional>

using namespace mlir;

namespace dsc::parallel {
namespace {

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

// Whether `dims` view a fused projection per KV group, [.., kv_heads, (r + 2) * head_dim] or
// [.., kv_heads, r + 2, head_dim] with r = heads / kv_heads: each group's r queries, then
// its key and value (BLOOM's and GPT-NeoX's [heads, 3, head_dim], where r is 1; Falcon's new
// architecture).
bool isPerGroupView(ArrayRef<int64_t> dims, int64_t heads, int64_t kvHeads, int64_t headDim) {
  const int64_t parts = heads / kvHeads + 2;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    if (dims[i] == kvHeads && dims[i + 1] == parts * headDim)
      return true;
    if (i + 2 < dims.size() && dims[i] == kvHeads && dims[i + 1] == parts &&
        dims[i + 2] == headDim)
      return true;
  }
  return false;
}

// An elementwise op of `def`'s first operand and scalar constants (OLMo's clamp of q, k and
// v, a scaling): it computes each feature alone, so it works on whichever heads a rank holds.
bool isElementwiseWithScalars(Operation *def) {
  StringRef name = def->getName().getStringRef();
  if (name == "onnx.Mul" || name == "onnx.Div")
    return isScalarConstant(def->getOperand(1));
  if (name == "onnx.Clip")
    return llvm::all_of(def->getOperands().drop_front(), [](Value bound) {
      return isa<NoneType>(bound.getType()) || isScalarConstant(bound);
    });
  return false;
}

// The indices [begin, end) of one axis of static size `size` that `def` takes with constant
// bounds (a Slice of unit step, a Gather or GatherND of one index); none for anything else.
struct Taken {
  int64_t size = 0, begin = 0, end = 0;
};
std::optional<Taken> takenRange(Operation *def) {
  auto data = dyn_cast<RankedTensorType>(def->getOperand(0).getType());
  if (!data)
    return std::nullopt;
  auto axisOf = [&](int64_t axis) -> std::optional<int64_t> {
    if (axis < 0)
      axis += data.getRank();
    if (axis < 0 || axis >= data.getRank() || data.isDynamicDim(axis))
      return std::nullopt;
    return axis;
  };
  auto take = [&](std::optional<int64_t> axis, int64_t begin,
                  int64_t end) -> std::optional<Taken> {
    if (!axis)
      return std::nullopt;
    int64_t size = data.getDimSize(*axis);
    auto clamp = [&](int64_t at) { return std::clamp<int64_t>(at < 0 ? at + size : at, 0, size); };
    return Taken{size, clamp(begin), clamp(end)};
  };
  if (auto slice = dyn_cast<onnx::SliceOp>(def)) {
    std::optional<int64_t> start = onnx::constantIndex(slice.getStarts()),
                           end = onnx::constantIndex(slice.getEnds());
    std::optional<int64_t> axis =
        isa<NoneType>(slice.getAxes().getType()) ? std::optional<int64_t>(0)
                                                 : onnx::constantIndex(slice.getAxes());
    bool unitStep = isa<NoneType>(slice.getSteps().getType()) ||
                    onnx::constantIndex(slice.getSteps()) == std::optional<int64_t>(1);
    if (!start || !end || !axis || !unitStep)
      return std::nullopt;
    return take(axisOf(*axis), *start, *end);
  }
  if (auto gather = dyn_cast<onnx::GatherOp>(def)) {
    std::optional<int64_t> index = onnx::constantIndex(gather.getIndices());
    if (!index)
      return std::nullopt;
    std::optional<int64_t> axis = axisOf(gather.getAxis());
    int64_t at = axis && *index < 0 ? *index + data.getDimSize(*axis) : *index;
    return take(axis, at, at + 1);
  }
  if (auto gather = dyn_cast<onnx::GatherNDOp>(def)) {
    std::optional<int64_t> index = onnx::constantIndex(gather.getIndices());
    if (!index || gather.getBatchDims() != 0)
      return std::nullopt;
    std::optional<int64_t> axis = axisOf(0);
    int64_t at = axis && *index < 0 ? *index + data.getDimSize(*axis) : *index;
    return take(axis, at, at + 1);
  }
  return std::nullopt;
}

// Whether what `def` takes of a fused projection's axis lies within part `part` (0 q, 1 k,
// 2 v): an axis of the heads (heads + 2 kv_heads), of the features ((heads + 2 kv_heads)
// head_dim), or of a KV group's parts (r + 2 or (r + 2) head_dim with r = heads / kv_heads:
// BLOOM's and GPT-NeoX's 3 per head, Falcon's queries, key and value per group). Taking
// from an axis of another size is not judged here.
bool takesWithinPart(Operation *def, int part, int64_t heads, int64_t kvHeads,
                     int64_t headDim) {
  std::optional<Taken> taken = takenRange(def);
  if (!taken)
    return true;
  const int64_t firsts[4] = {0, heads, heads + kvHeads, heads + 2 * kvHeads};
  const int64_t repeats = heads / kvHeads;
  const int64_t groupFirsts[4] = {0, repeats, repeats + 1, repeats + 2};
  auto within = [&](int64_t unit, int64_t begin, int64_t end) {
    return taken->begin >= begin * unit && taken->end <= end * unit;
  };
  if (taken->size == heads + 2 * kvHeads)
    return within(1, firsts[part], firsts[part + 1]);
  if (taken->size == (heads + 2 * kvHeads) * headDim)
    return within(headDim, firsts[part], firsts[part + 1]);
  if (taken->size == repeats + 2)
    return within(1, groupFirsts[part], groupFirsts[part + 1]);
  if (taken->size == (repeats + 2) * headDim)
    return within(headDim, groupFirsts[part], groupFirsts[part + 1]);
  return true;
}

} // namespace

FailureOr<Value> transformedWeight(Value weight, ArrayRef<Attribute> extra) {
  auto op = weight.getDefiningOp<tfm::WeightOp>();
  if (!op)
    return failure();
  OpBuilder builder(op);
  return op.withTransforms(builder, extra);
}

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

Value normalisedPerHead(Value part, Operation *headNorm, int64_t headDim, Operation *before) {
  OpBuilder builder(before);
  Location loc = headNorm->getLoc();
  auto type = cast<RankedTensorType>(part.getType());
  auto shapeOf = [&](ArrayRef<int64_t> dims) -> Value {
    auto shapeType = RankedTensorType::get({int64_t(dims.size())}, builder.getI64Type());
    return onnx::ConstantOp::create(builder, loc, shapeType,
                                    DenseElementsAttr::get(shapeType, dims));
  };
  // Leading dimensions copied (0), the heads inferred (-1): the same on every rank, whatever
  // its number of heads.
  SmallVector<int64_t> viewDims(type.getRank() - 1, 0), flatDims(type.getRank() - 1, 0);
  viewDims.append({-1, headDim});
  flatDims.push_back(-1);
  SmallVector<int64_t> headShape(type.getShape().drop_back());
  const int64_t features = type.getShape().back();
  headShape.append({ShapedType::isDynamic(features) ? ShapedType::kDynamic : features / headDim,
                    headDim});
  auto headType = RankedTensorType::get(headShape, type.getElementType());
  Value heads = onnx::ReshapeOp::create(builder, loc, headType, part, shapeOf(viewDims),
                                        builder.getI64IntegerAttr(0));
  Operation *norm = builder.clone(*headNorm);
  norm->setOperand(0, heads);
  norm->getResult(0).setType(headType);
  return onnx::ReshapeOp::create(builder, loc, type, norm->getResult(0), shapeOf(flatDims),
                                 builder.getI64IntegerAttr(0));
}

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

bool isScalarConstant(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.hasStaticShape() && type.getNumElements() == 1 &&
         matchPattern(value, m_Constant());
}

bool hasOneDataUse(Value value, int64_t heads, int64_t headDim) {
  int64_t data = 0;
  for (Operation *user : value.getUsers())
    data += !readsKeptDims(user, value, heads, headDim);
  return data == 1;
}

namespace {

// The ops of the other part of a shared key/value projection, and this part's own: a user
// only the other part has is not counted.
struct SharedPaths {
  const llvm::SmallPtrSetImpl<Operation *> *other = nullptr, *own = nullptr;
  bool onlyOthers(Operation *user) const {
    return other && other->contains(user) && !own->contains(user);
  }
};

// Whether `user` is another attention that reads `value` in the same role, with the same
// KV heads (Gemma-4's KV-shared layers attend to an earlier layer's keys and values): tp-shard
// shards every attention of a function or none, so the shared projection is sharded once
// for all of them.
bool readBySiblingAttention(Operation *user, Value value, tfm::AttentionOp attention, int part) {
  // Each attention's rewrite flattened the shared heads with a Reshape of its own.
  if (user->getName().getStringRef() == "onnx.Reshape" && user->getOperand(0) == value &&
      user->getResult(0).hasOneUse()) {
    value = user->getResult(0);
    user = *value.getUsers().begin();
  }
  auto sibling = dyn_cast<tfm::AttentionOp>(user);
  return part != 0 && sibling && sibling != attention && !sibling.getPackedQkv() &&
         sibling->getOperand(part) == value &&
         sibling.getNumKvHeads() == attention.getNumKvHeads() &&
         sibling.getHeadDim() == attention.getHeadDim();
}

bool hasOneOwnDataUse(Value value, int64_t heads, int64_t headDim, const SharedPaths &shared,
                      tfm::AttentionOp attention, int part) {
  int64_t data = 0;
  for (Operation *user : value.getUsers())
    data += !readsKeptDims(user, value, heads, headDim) && !shared.onlyOthers(user) &&
            !readBySiblingAttention(user, value, attention, part);
  return data == 1;
}

} // namespace

static std::string traceProjectionOf(Value operand, tfm::AttentionOp attention, int part,
                                     Projection &out, const SharedPaths &shared,
                                     bool checkUses);

std::string traceProjection(Value operand, tfm::AttentionOp attention, int part,
                            Projection &out) {
  return traceProjectionOf(operand, attention, part, out, {}, /*checkUses=*/true);
}

std::string traceKeysAndValues(Value keys, Value values, tfm::AttentionOp attention,
                               Projection &keyOut, Projection &valueOut) {
  std::string why = traceProjection(keys, attention, 1, keyOut);
  if (why.empty())
    why = traceProjection(values, attention, 2, valueOut);
  if (why.empty())
    return why;
  // One projection for both: each path's values may be read by the other path's ops.
  Projection key, value;
  if (!traceProjectionOf(keys, attention, 1, key, {}, false).empty() ||
      !traceProjectionOf(values, attention, 2, value, {}, false).empty() || !key.linear ||
      key.linear != value.linear || key.fused || value.fused || key.allHeads ||
      value.allHeads || !key.scalarOps.empty() || !value.scalarOps.empty() ||
      key.globalNorm || value.globalNorm || key.headOps.empty() || value.headOps.empty())
    return why;
  llvm::SmallPtrSet<Operation *, 16> keyOps(key.headOps.begin(), key.headOps.end()),
      valueOps(value.headOps.begin(), value.headOps.end());
  keyOut = Projection();
  valueOut = Projection();
  if (!traceProjectionOf(keys, attention, 1, keyOut, {&valueOps, &keyOps}, true).empty() ||
      !traceProjectionOf(values, attention, 2, valueOut, {&keyOps, &valueOps}, true).empty())
    return why;
  valueOut.sharesKeyProjection = true;
  llvm::erase_if(valueOut.headOps, [&](Operation *op) { return keyOps.contains(op); });
  return "";
}

// Follows a fused projection's plumbing (onnx reshapes, splits, slices) back to the one
// tfm.linear it reads, and says which rows of its [out, in] weight this part is. Without
// `checkUses`, whether the values on the way have other readers is not asked.
static std::string traceProjectionOf(Value operand, tfm::AttentionOp attention, int part,
                                     Projection &out, const SharedPaths &shared,
                                     bool checkUses) {
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
    if (!hasOneOwnDataUse(linear.getOutput(), partHeads, dim, shared, attention, part))
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
  bool perGroup = false;
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
      // An RMS norm over every head of this part (OLMo-2's q_norm and k_norm): each rank
      // normalises its heads with the sum of squares of all of them (tp-shard all-reduces
      // it), so it is kept apart from the per-head ops. What follows it may only act on
      // each feature alone (OLMoE's clip_qkv clamp after its norms), which the rank's
      // features take as they are.
      auto norm = dyn_cast<tfm::RmsNormOp>(def);
      if (norm && type && type.getRank() == 1 && type.getDimSize(0) == partHeads * dim &&
          partHeads > 1 && !norm.getResidual() && !norm.getPostResidual() && !norm.getSum() &&
          !out.globalNorm && llvm::all_of(out.headOps, isElementwiseWithScalars) &&
          norm.getInput().getDefiningOp<tfm::LinearOp>()) {
        out.globalNorm = def;
        worklist.push_back(norm.getInput());
        continue;
      }
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
    if (isElementwiseWithScalars(def)) {
      if (!visited.insert(def).second)
        continue;
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
    // So must the slices and gathers that take a part (BLOOM's gathers of one of each
    // head's three, Falcon's slice of the query heads and gathers of its key and value).
    if (!takesWithinPart(def, part, heads, kvHeads, headDim))
      return "a fused projection's slices or gathers do not give q, k and v in that order";
    // BLOOM (and GPT-NeoX) view the fused projection as [.., heads, 3 * head_dim] or
    // [.., heads, 3, head_dim]: Q, K and V interleaved per head; Falcon's new architecture
    // as [.., kv_heads, r + 2, head_dim]: each group's queries, key and value. The view's
    // type or its constant shape says so.
    if (auto type = dyn_cast<RankedTensorType>(value.getType()))
      perGroup |= isPerGroupView(type.getShape(), heads, kvHeads, headDim);
    DenseIntElementsAttr shape;
    if (def->getName().getStringRef() == "onnx.Reshape" &&
        matchPattern(def->getOperand(1), m_Constant(&shape))) {
      SmallVector<int64_t> dims;
      for (const APInt &d : shape.getValues<APInt>())
        dims.push_back(d.getSExtValue());
      perGroup |= isPerGroupView(dims, heads, kvHeads, headDim);
    }
    // Only the data operand: the others are shapes, indices and split sizes.
    worklist.push_back(def->getOperand(0));
  }
  if (!found)
    return "a Q/K/V operand reads no projection";
  int64_t features = cast<RankedTensorType>(found.getWeight().getType()).getDimSize(0);
  // A projection of this part alone, seen through reshapes and a per-head norm.
  if (features == (part == 0 ? heads : kvHeads) * headDim) {
    out.linear = found;
    if (!checkUses)
      return "";
    if (!hasOneOwnDataUse(found.getOutput(), partHeads, dim, shared, attention, part))
      return "a Q/K/V projection has other users";
    for (Operation *op : out.headOps)
      if (!hasOneOwnDataUse(op->getResult(0), partHeads, dim, shared, attention, part))
        return "a value between a Q/K/V projection and the attention has other users";
    if (out.globalNorm && !hasOneDataUse(out.globalNorm->getResult(0), partHeads, dim))
      return "a value between a Q/K/V projection and the attention has other users";
    out.linear = found;
    return "";
  }
  if (out.globalNorm)
    return "a part of a fused projection is normalised over all of its heads";
  for (Operation *op : out.headOps) {
    if (isElementwiseWithScalars(op))
      return "a part of a fused projection is computed by '" +
             op->getName().getStringRef().str() + "'";
    if (isa<tfm::RmsNormOp, tfm::LayerNormOp>(op)) {
      // Normalising each head alone: no residual, no sum output.
      auto rms = dyn_cast<tfm::RmsNormOp>(op);
      auto layer = dyn_cast<tfm::LayerNormOp>(op);
      if ((rms && (rms.getResidual() || rms.getPostResidual() || rms.getSum())) ||
          (layer && (layer.getResidual() || layer.getSum())))
        return "a part of a fused projection is normalised with a residual";
      out.headNorm = op;
    }
  }
  out.headOps.clear();
  if (features != (heads + 2 * kvHeads) * headDim) {
    // Fewer KV heads than the attention reads: the export repeats each group's key and
    // value for its query heads, which dsc-narrow-repeated-kv undoes where the cache is the
    // session's, but not where the export's past and present hold every copy.
    const int64_t groups = (features / headDim - heads) / 2;
    if (features % headDim == 0 && groups > 0 && groups < kvHeads && kvHeads % groups == 0 &&
        features == (heads + 2 * groups) * headDim)
      return "the export repeats each of its " + std::to_string(groups) +
             " KV heads for every query head of its group, and its past and present hold "
             "every copy";
    return "a fused projection of " + std::to_string(features) +
           " features is not the attention's Q, K and V";
  }
  out.linear = found;
  out.fused = true;
  int64_t size = part == 0 ? heads * headDim : kvHeads * headDim;
  if (perGroup) {
    // Of each group's rows, the r queries, the key or the value.
    const int64_t repeats = heads / kvHeads;
    const int64_t offset = part == 0 ? 0 : (repeats + part - 1) * headDim;
    out.select.push_back(tfm::BlocksAttr::get(attention.getContext(), 0, kvHeads, offset,
                                              part == 0 ? repeats * headDim : headDim));
  } else {
    // GPT-2's c_attn: [q | k | v] columns.
    int64_t offset = part == 0 ? 0 : part == 1 ? heads * headDim : (heads + kvHeads) * headDim;
    out.select.push_back(tfm::BlocksAttr::get(attention.getContext(), 0, 1, offset, size));
  }
  return "";
}

} // namespace dsc::parallel
