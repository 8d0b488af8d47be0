// dsc-recognize-attention: the structure a softmax proposes (Q, K, V, past, present, output).
#include "compiler/recognize/AttentionMatch.h"

#include "compiler/evaluate/Evaluator.h"
#include "compiler/lowering/RuntimeTypes.h"
#include "compiler/lowering/SymbolicDims.h"
#include "ops/OpTraits.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace dsc::attention {

std::vector<int64_t> Matcher::positions() const {
  if (!positionIds_)
    return impliedPositions_;
  const Info *info = probe_.lookup(positionIds_);
  if (!info || !info->value)
    return {};
  return integers(*info->value);
}

// Whether `value`, [batch, seq, head_dim], is a single head's [batch, 1, seq, head_dim]
// with the head axis folded into the batch ([batch * 1, seq, head_dim]: sdpa's decomposition
// of a multi-query key, Falcon's under the dynamo exporter, before its transpose). It has a
// projection's shape, but it is head plumbing: the heads were made, rotated and cached before
// it.
bool Matcher::foldsOneHeadIntoBatch(Value value) {
  Operation *def = value.getDefiningOp();
  if (!def || !(isOp(def, "onnx.Reshape") || isOp(def, "onnx.Squeeze") ||
                isOp(def, "onnx.Flatten")))
    return false;
  const dsrt::Shape *from = shapeOf(def->getOperand(0)), *to = shapeOf(value);
  return from && to && from->size() == 4 && to->size() == 3 && (*from)[0] == batch_ &&
         (*from)[1] == 1 && (*from)[2] == fresh_ && (*from)[3] == (*to)[2];
}

// Follows a Q/K/V operand of the attention back through the head plumbing (reshapes,
// transposes, rotary, repeat_kv, scales, casts, the past concat) to where it enters:
// a [b, s, n * d] projection, or a graph input (the past). Which ops these are does not
// matter for correctness: the probe proves what they compute.
std::string Matcher::findSources(Value from, int64_t exactHeads, int64_t maxHeads,
                                 bool allowPast, Value &source, Value &past,
                                 int64_t &sourceHeads, bool &headsFirst,
                                 tfm::RmsNormOp *postRotaryNorm) {
  headsFirst = false;
  static const llvm::StringSet<> plumbing = {
      "onnx.Reshape",   "onnx.Transpose", "onnx.Mul",    "onnx.Div",    "onnx.Add",
      "onnx.Sub",       "onnx.Neg",       "onnx.Slice",  "onnx.Gather", "onnx.Concat",
      "onnx.Unsqueeze", "onnx.Squeeze",   "onnx.Expand", "onnx.Cast",   "onnx.Split",
      "onnx.Identity",  "onnx.Tile",      "onnx.Where",  "onnx.Flatten", "onnx.GatherND"};
  llvm::SetVector<Value> stops;
  llvm::SmallPtrSet<Operation *, 32> visited;
  SmallVector<Value> worklist = {from};
  SmallVector<Value> headViews;  // [b, s, n, d] values met on the way
  SmallVector<Value> headsFirstViews;  // and [b, n, s, d] ones
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    const dsrt::Shape *shape = shapeOf(value);
    if (!shape)
      return "a value on the Q/K/V path has no shape on the probe";
    if (isa<BlockArgument>(value)) {
      stops.insert(value);
      continue;
    }
    if (value != from && shape->size() == 3 && (*shape)[0] == batch_ &&
        (*shape)[1] == fresh_ && !foldsOneHeadIntoBatch(value)) {
      stops.insert(value);
      continue;
    }
    // Keys and values of a cross-attention: projected from another sequence, as long as
    // the keys the scores have.
    if (allowPast && value != from && shape->size() == 3 && (*shape)[0] == batch_ &&
        (*shape)[1] == total_ && total_ != fresh_ &&
        !plumbing.contains(value.getDefiningOp()->getName().getStringRef())) {
      stops.insert(value);
      continue;
    }
    bool headView = shape->size() == 4 && (*shape)[0] == batch_ && (*shape)[1] == fresh_ &&
                    (*shape)[3] == headDim_;
    if (headView)
      headViews.push_back(value);
    bool headsFirstView = !headView && shape->size() == 4 && (*shape)[0] == batch_ &&
                          (*shape)[2] == fresh_ && (*shape)[3] == headDim_;
    if (headsFirstView)
      headsFirstViews.push_back(value);
    Operation *def = value.getDefiningOp();
    // A norm over each head after the rotary (NanoChat's, HunYuan-Dense's): the heads enter
    // before both, and the attention normalises them (Candidate::queryNorm).
    if (auto norm = dyn_cast_or_null<tfm::RmsNormOp>(def);
        norm && (headView || headsFirstView) && postRotaryNorm && movePostRotaryNorms_ &&
        isMovableHeadNorm(norm)) {
      if (*postRotaryNorm && *postRotaryNorm != norm)
        return "the heads are normalised twice";
      *postRotaryNorm = norm;
      if (visited.insert(norm).second)
        worklist.push_back(norm.getInput());
      continue;
    }
    // A norm over each head (Qwen3's q/k norm on [b, s, n, d], Gemma-3's on [b, n, s, d])
    // is where the heads enter: the attention takes the normalised heads.
    if ((headView || headsFirstView) && isa<tfm::RmsNormOp, tfm::LayerNormOp>(def)) {
      stops.insert(value);
      continue;
    }
    // So are heads normalised one by one with weights of their own (StableLM-2's
    // qk_layernorm: a LayerNorm per head) and concatenated back along the head axis.
    if ((headView || headsFirstView) && isa<onnx::ConcatOp>(def) && def->getNumOperands() > 1 &&
        cast<onnx::ConcatOp>(def).getAxis() == (headView ? 2 : 1) &&
        llvm::all_of(def->getOperands(), [&](Value part) {
          const dsrt::Shape *partShape = shapeOf(part);
          return isa_and_nonnull<tfm::RmsNormOp, tfm::LayerNormOp>(part.getDefiningOp()) &&
                 partShape && partShape->size() == 4 && (*partShape)[headView ? 2 : 1] == 1;
        })) {
      stops.insert(value);
      continue;
    }
    if (!plumbing.contains(def->getName().getStringRef()))
      return "'" + evaluate::describeLocation(def->getLoc()) + "' (" +
             def->getName().getStringRef().str() + ") on the Q/K/V path is not head plumbing";
    if (!visited.insert(def).second)
      continue;
    for (Value operand : def->getOperands())
      if (isTainted(operand))
        worklist.push_back(operand);
  }
  SmallVector<Value> fresh, pasts;
  for (Value stop : stops) {
    const dsrt::Shape *shape = shapeOf(stop);
    if (shape->size() == 3 && (*shape)[0] == batch_ &&
        ((*shape)[1] == fresh_ || (allowPast && (*shape)[1] == total_)))
      fresh.push_back(stop);
    else if (shape->size() == 4 && !isa<BlockArgument>(stop))
      fresh.push_back(stop);  // normalised heads
    else if (shape->size() == 4 && isa<BlockArgument>(stop))
      pasts.push_back(stop);
    else
      return "the Q/K/V path starts at a graph input that is neither the hidden state nor a "
             "past key/value";
  }
  // A cross-attention's keys or values cached from the first step (optimum's merged
  // decoder, the branch with a cache): a graph input [b, kv_heads, source, d] as long as
  // the scores' keys, beside an encoder padding mask, and no new ones.
  if (fresh.empty() && pasts.size() == 1 && allowPast && crossMask_) {
    const dsrt::Shape &cached = *shapeOf(pasts.front());
    int64_t n = cached[1];
    if (cached[0] == batch_ && cached[2] == total_ && total_ != fresh_ &&
        cached[3] == headDim_ && n <= maxHeads && maxHeads % n == 0) {
      source = pasts.front();
      past = Value();
      sourceHeads = n;
      headsFirst = true;
      return "";
    }
  }
  if (fresh.size() != 1)
    return "the Q/K/V path does not start at exactly one [batch, seq, features] value";
  if (pasts.size() > 1 || (!pasts.empty() && !allowPast))
    return "the Q/K/V path reads more than one past input";
  source = fresh.front();
  past = pasts.empty() ? Value() : widenedInput(pasts.front());
  if (shapeOf(source)->size() == 4) {
    const dsrt::Shape &heads = *shapeOf(source);
    headsFirst = !(heads[1] == fresh_ && heads[3] == headDim_);
    int64_t n = headsFirst ? heads[1] : heads[2];
    if (exactHeads ? n != exactHeads : (n > maxHeads || maxHeads % n != 0))
      return "the normalised heads are not a whole number of the attention's heads";
    sourceHeads = n;
    return "";
  }
  int64_t features = (*shapeOf(source))[2];
  if (features % headDim_ == 0) {
    int64_t n = features / headDim_;
    if (exactHeads ? n == exactHeads : (n <= maxHeads && maxHeads % n == 0)) {
      sourceHeads = n;
      return "";
    }
  }
  // A fused projection (BLOOM's query_key_value): the earliest per-head view of this part,
  // [b, s, n, d] (heads at 2), else [b, n, s, d] (GPT-NeoX under transformers 5: heads at 1).
  auto earliest = [&](ArrayRef<Value> views, size_t headAxis) {
    Value view;
    for (Value v : views) {
      int64_t n = (*shapeOf(v))[headAxis];
      if (exactHeads ? n != exactHeads : (n > maxHeads || maxHeads % n != 0))
        continue;
      if (!view || v.getDefiningOp()->isBeforeInBlock(view.getDefiningOp()))
        view = v;
    }
    return view;
  };
  Value view = earliest(headViews, 2);
  if (!view) {
    view = earliest(headsFirstViews, 1);
    if (view) {
      source = view;
      sourceHeads = (*shapeOf(view))[1];
      headsFirst = true;
      return "";
    }
  }
  if (!view)
    return "the projection [batch, seq, " + std::to_string(features) +
           "] is not a whole number of heads and has no per-head view";
  source = view;
  sourceHeads = (*shapeOf(view))[2];
  return "";
}

// Whether `op` only contributes shapes (Shape/Size, or ops whose results only reach
// Shape/Size), so that it dies with the masks and reshapes it sizes.
bool readsOnlyShapes(Operation *op, int depth = 0) {
  if (isOp(op, "onnx.Shape") || isOp(op, "onnx.Size"))
    return true;
  if (depth > 4 || !isOnnx(op) || op->getNumRegions() != 0 || op->getNumResults() == 0 ||
      !isMemoryEffectFree(op))
    return false;
  for (Value result : op->getResults())
    for (Operation *user : result.getUsers())
      if (!readsOnlyShapes(user, depth + 1))
        return false;
  return true;
}

// sdpa's guard for rows with nothing to attend, Where(IsNaN(P), 0, P), reads P twice; the
// Where, or null when `probs` has other users. The probe proves the guard leaves the
// probabilities unchanged.
Operation *nanGuardOf(Value probs) {
  Operation *isNaN = nullptr, *where = nullptr;
  for (Operation *user : probs.getUsers()) {
    if (isOp(user, "onnx.IsNaN") && !isNaN)
      isNaN = user;
    else if (isOp(user, "onnx.Where") && !where && user->getOperand(2) == probs &&
             user->getOperand(1) != probs)
      where = user;
    else
      return nullptr;
  }
  if (!isNaN || !where || !isNaN->getResult(0).hasOneUse() ||
      where->getOperand(0) != isNaN->getResult(0))
    return nullptr;
  return where;
}

// What each dimension of the value a Shape reads is, from its type (static: a constant)
// and its size on the probe (the batch, the queries or the keys); nothing when a size is
// ambiguous.
void Matcher::recordShapeRead(Candidate &c, Operation *shape) {
  Value value = shape->getOperand(0);
  const dsrt::Shape *sizes = shapeOf(value);
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!sizes || (type && type.getRank() != int64_t(sizes->size())))
    return;
  const int64_t rank = int64_t(sizes->size());
  Candidate::ShapeRead read{shape, {}};
  for (int64_t i = 0; i < rank; ++i) {
    int64_t size = (*sizes)[i];
    int matches = (size == batch_) + (size == fresh_) + (size == total_ && total_ != fresh_);
    // Without a type (the importer leaves many unranked), a size that is none of the
    // lengths is one of the model's: heads, KV heads or head_dim.
    bool modelSize = size == c.heads || size == c.kvHeads || size == c.headDim;
    if (type ? !type.isDynamicDim(i) : matches == 0 && modelSize) {
      read.dims.push_back({Candidate::ShapeRead::Constant, type ? type.getDimSize(i) : size});
      continue;
    }
    if (matches != 1 || (!type && modelSize))
      return;
    read.dims.push_back({size == batch_   ? Candidate::ShapeRead::Batch
                         : size == fresh_ ? Candidate::ShapeRead::Queries
                                          : Candidate::ShapeRead::Keys,
                         0});
  }
  auto clamp = [&](IntegerAttr attr, int64_t fallback) {
    int64_t at = attr ? attr.getInt() : fallback;
    if (at < 0)
      at += rank;
    return std::clamp<int64_t>(at, 0, rank);
  };
  int64_t start = clamp(shape->getAttrOfType<IntegerAttr>("start"), 0);
  int64_t end = clamp(shape->getAttrOfType<IntegerAttr>("end"), rank);
  if (start >= end)
    return;
  read.dims = SmallVector<std::pair<Candidate::ShapeRead::Dim, int64_t>>(
      read.dims.begin() + start, read.dims.begin() + end);
  c.shapeReads.push_back(std::move(read));
}

std::string Matcher::match(Operation *softmax, Candidate &c) {
  const Candidate start = c;
  movePostRotaryNorms_ = true;
  std::string why = matchOnce(softmax, c);
  if (why.empty() || (!c.queryNorm && !c.keyNorm))
    return why;
  // What came before the norms may be something no proof knows: then the attention is the
  // one that takes the normalised heads, and what made them stays as it is.
  c = start;
  movePostRotaryNorms_ = false;
  return matchOnce(softmax, c);
}

std::string Matcher::matchOnce(Operation *softmax, Candidate &c) {
  c.softmax = softmax;
  c.region.insert(softmax);
  const dsrt::Shape *probsShape = shapeOf(softmax->getResult(0));
  if (!probsShape || probsShape->size() < 3)
    return "the softmax has no [.., seq, total] shape on the probe" +
           (probe_.firstFailure.empty() ? std::string()
                                        : " (the probe stopped at " + probe_.firstFailure + ")");
  auto axis = softmax->getAttrOfType<IntegerAttr>("axis");
  if (axis && axis.getInt() != -1 && axis.getInt() != int64_t(probsShape->size()) - 1)
    return "the softmax is not over the last axis";
  if (std::string why = peelSinks(c); !why.empty())
    return why;
  // Back from the softmax through the score chain (scales, additive and Where masks, the
  // clamp of masked scores to the dtype's lowest value that XGLM's and OPT's eager attention
  // take, Max(scores, lowest)) to MatMul(Q, K^T); the chain's effect is proven on the probe.
  static const llvm::StringSet<> chainOps = {"onnx.Add",   "onnx.Sub",  "onnx.Mul",
                                             "onnx.Div",   "onnx.Where", "onnx.Cast",
                                             "onnx.Reshape", "onnx.Tanh", "onnx.Max"};
  Value value = c.logits;
  while (true) {
    Operation *def = value.getDefiningOp();
    if (!def)
      return "the scores are a graph input";
    if (isOp(def, "onnx.MatMul")) {
      c.scores = def;
      break;
    }
    c.chainHasTanh |= isOp(def, "onnx.Tanh");
    if (!chainOps.contains(def->getName().getStringRef()))
      return "the scores come from '" + evaluate::describeLocation(def->getLoc()) + "' (" +
             def->getName().getStringRef().str() + "), not MatMul(Q, K^T) under masks and "
             "scales";
    SmallVector<Value> next;
    for (Value operand : def->getOperands()) {
      if (isTainted(operand)) {
        next.push_back(operand);
        continue;
      }
      // Max only as that clamp: it changes nothing but scores already masked away.
      if (isOp(def, "onnx.Max")) {
        const Info *bound = probe_.lookup(operand);
        if (!bound || !bound->value ||
            !llvm::all_of(floats(*bound->value), [](float v) { return v <= -1e30f; }))
          return "the score chain's Max at '" + evaluate::describeLocation(def->getLoc()) +
                 "' is not a clamp to the lowest value";
      }
    }
    if (next.size() != 1)
      return "the score chain at '" + evaluate::describeLocation(def->getLoc()) +
             "' combines two activations";
    value = next.front();
  }
  // Forward from the softmax (or the Slice that drops its sink) to MatMul(P, V).
  Value probs = c.probs;
  while (true) {
    Operation *user = probs.hasOneUse() ? *probs.getUsers().begin() : nanGuardOf(probs);
    if (!user)
      return "the attention probabilities are used more than once";
    c.nanGuard |= !probs.hasOneUse();
    if (isOp(user, "onnx.MatMul") && user->getOperand(0) == probs) {
      c.context = user;
      break;
    }
    bool nanGuard = isOp(user, "onnx.Where") && user->getOperand(2) == probs;
    if (!nanGuard && !isOp(user, "onnx.Cast") && !isOp(user, "onnx.Dropout") &&
        !isOp(user, "onnx.Identity") && !isOp(user, "onnx.Reshape"))
      return "the probabilities go to '" + evaluate::describeLocation(user->getLoc()) +
             "', not to MatMul(P, V)";
    probs = user->getResult(0);
  }
  // Dimensions.
  const dsrt::Shape *q = shapeOf(c.scores->getOperand(0));
  const dsrt::Shape *k = shapeOf(c.scores->getOperand(1));
  const dsrt::Shape *v = shapeOf(c.context->getOperand(1));
  // The dimensions before the last two: batch and heads, apart or merged, V's broadcast over
  // a group's query heads where it has fewer. Q and K may merge them while V keeps them
  // apart (GPT-NeoX-Japanese's baddbmm over [b·h, s, d], its scores reshaped to
  // [b, h, s, total] before the softmax): the proofs on the probe decide.
  auto leadingOf = [](const dsrt::Shape &shape) {
    int64_t product = 1;
    for (size_t i = 0; i + 2 < shape.size(); ++i)
      product *= shape[i];
    return product;
  };
  if (!q || !k || !v || q->size() < 3 || k->size() != q->size() || v->size() < 3 ||
      (v->size() != q->size() && leadingOf(*v) != leadingOf(*q)))
    return "Q, K and V have no consistent shapes on the probe";
  headDim_ = q->back();
  const int64_t leading = leadingOf(*q);
  if ((*q)[q->size() - 2] != fresh_ || leading % batch_ != 0)
    return "the query is not [batch, heads, seq, head_dim]";
  heads_ = leading / batch_;
  total_ = k->back();
  past_ = total_ - fresh_;
  if ((*k)[k->size() - 2] != headDim_ || (*v)[v->size() - 1] != headDim_ ||
      (*v)[v->size() - 2] != total_ || past_ < 0)
    return "K^T is not [.., head_dim, total] or V not [.., total, head_dim]";
  c.heads = heads_;
  c.headDim = headDim_;
  if (!c.sinks.empty() && int64_t(c.sinks.size()) != heads_)
    return "sinks: " + std::to_string(c.sinks.size()) + " sink logits for " +
           std::to_string(heads_) + " heads";
  // The output: forward through the head merge to [b, s, heads * d].
  Value out = c.context->getResult(0);
  for (int steps = 0; steps < 4; ++steps) {
    const dsrt::Shape *shape = shapeOf(out);
    if (shape && shape->size() == 3 && (*shape)[0] == batch_ && (*shape)[1] == fresh_ &&
        (*shape)[2] == heads_ * headDim_) {
      c.root = out;
      break;
    }
    if (shape && shape->size() == 2 && (*shape)[0] == batch_ * fresh_ &&
        (*shape)[1] == heads_ * headDim_) {
      c.root = out;
      c.flatRoot = true;
      // The output projection on the rows, reshaped back to [b, s, out] on the probe.
      if (out.hasOneUse() && isa<tfm::LinearOp>(*out.getUsers().begin())) {
        Value projected = out.getUsers().begin()->getResult(0);
        if (projected.hasOneUse() && isOp(*projected.getUsers().begin(), "onnx.Reshape")) {
          Value restored = projected.getUsers().begin()->getResult(0);
          const dsrt::Shape *rows = shapeOf(projected), *back = shapeOf(restored);
          if (rows && back && rows->size() == 2 && back->size() == 3 &&
              (*back)[0] == batch_ && (*back)[1] == fresh_ && (*back)[2] == (*rows)[1])
            c.restoredProjection = restored;
        }
      }
      break;
    }
    SmallVector<Operation *> dataUsers;
    for (Operation *user : out.getUsers())
      if (!isOp(user, "onnx.Shape") && !isOp(user, "onnx.Size"))
        dataUsers.push_back(user);
    bool merges = dataUsers.size() == 1 && (isOp(dataUsers.front(), "onnx.Transpose") ||
                                            isOp(dataUsers.front(), "onnx.Reshape") ||
                                            isOp(dataUsers.front(), "onnx.Cast"));
    if (!merges) {
      // The heads [b, s, heads, d] read by something else than their merge: HrmText's and
      // Qwen3-Next's sigmoid gate multiplies them first. The attention ends there, its
      // output viewed as those heads.
      if (shape && shape->size() == 4 && (*shape)[0] == batch_ && (*shape)[1] == fresh_ &&
          (*shape)[2] == heads_ && (*shape)[3] == headDim_ && out != c.context->getResult(0)) {
        c.root = out;
        c.headsRoot = true;
      }
      break;
    }
    out = dataUsers.front()->getResult(0);
  }
  if (!c.root)
    return "the attention output is not merged back into [batch, seq, heads * head_dim]";

  // Sources.
  Value unused;
  int64_t n = 0;
  std::string why = findSources(c.scores->getOperand(0), heads_, heads_, false, c.querySource,
                                unused, n, c.queryHeadsFirst, &c.queryNorm);
  if (!why.empty())
    return "query: " + why;
  why = findSources(c.scores->getOperand(1), 0, heads_, true, c.keySource, c.pastKey, n,
                    c.keyHeadsFirst, &c.keyNorm);
  if (!why.empty())
    return "key: " + why;
  c.kvHeads = n;
  why = findSources(c.context->getOperand(1), 0, heads_, true, c.valueSource, c.pastValue, n,
                    c.valueHeadsFirst);
  if (!why.empty())
    return "value: " + why;
  if (n != c.kvHeads)
    return "keys and values have different head counts";
  // A norm whose scale differs between features stays after the rotation: the attention
  // then normalises both its query and its key that way.
  for (tfm::RmsNormOp norm : {c.queryNorm, c.keyNorm})
    c.normsAfterRotary |= norm && !hasUniformScale(norm);
  if (c.normsAfterRotary &&
      (!c.queryNorm || !c.keyNorm ||
       c.queryNorm.getEpsilonAttr() != c.keyNorm.getEpsilonAttr()))
    return "the query and key are not both normalised after the rotary with one epsilon";
  c.queryRank = shapeOf(c.querySource)->size();
  c.keyRank = shapeOf(c.keySource)->size();
  c.valueRank = shapeOf(c.valueSource)->size();
  if (bool(c.pastKey) != bool(c.pastValue))
    return "only one of the keys and values has a past input";
  auto otherSequence = [&](Value source) {
    const dsrt::Shape &shape = *shapeOf(source);
    return (shape.size() == 3 && shape[1] != fresh_) ||
           (isa<BlockArgument>(source) && shape.size() == 4 && shape[2] != fresh_);
  };
  c.cross = otherSequence(c.keySource);
  if (c.cross != otherSequence(c.valueSource))
    return "the keys and the values come from different sequences";
  if (c.cross) {
    if (c.pastKey)
      return "the keys come from another sequence and from a past input";
    if (!crossMask_)
      return "the keys come from another sequence than the queries, which is not an "
             "encoder output with its padding mask";
    c.crossLength = total_;
    c.crossMask = crossMask_;
    past_ = 0;
  }

  c.region.insert(c.scores);
  c.region.insert(c.context);
  double qscale = 1, kscale = 1, vscale = 1, chainScale = 1;
  if (!(why = proveQuery(c, qscale)).empty() || !(why = proveKeyValue(c, true, kscale)).empty() ||
      !(why = proveKeyValue(c, false, vscale)).empty() ||
      !(why = proveScores(c, chainScale)).empty() || !(why = proveOutput(c)).empty())
    return why;
  // The kernel scales the rotated query by the attention factor the query's scale absorbed.
  c.scale = qscale * kscale * chainScale / c.absorbedFactor;
  // Exporters split or fold the scale into rounded constants: within float rounding of
  // 1/sqrt(head_dim) or 1 it is that value. In an export of a half model
  // (dsc-widen-half-precision's dsc.half_export) the constants were rounded to its type:
  // sqrt(scale) on q and on k each to 2^-11 (f16) or 2^-8 (bf16) of itself.
  double rounding = 1e-6;
  if (auto half = softmax->getParentOfType<ModuleOp>()->getAttrOfType<StringAttr>(
          "dsc.half_export"))
    rounding = half.getValue() == "bf16" ? 2.0 * std::ldexp(1.0, -8) : 2.0 * std::ldexp(1.0, -11);
  for (double exact : {1.0 / std::sqrt(double(c.headDim)), 1.0})
    if (std::abs(c.scale - exact) <= rounding * exact)
      c.scale = exact;
  if (bool(c.presentKey) != bool(c.presentValue))
    return "only one of the keys and values is a graph output";

  // Nothing computed inside may be used outside but the output, the presents, and shape
  // reads (which die with the masks they size).
  Operation *terminator = softmax->getBlock()->getTerminator();
  for (Operation *op : c.region)
    for (Value result : op->getResults())
      for (OpOperand &use : result.getUses()) {
        Operation *user = use.getOwner();
        if (c.region.contains(user) || result == c.root)
          continue;
        if ((user == terminator ||
             (user->getNumResults() == 1 && interfaceCastInput(user->getResult(0)) == result)) &&
            (result == c.presentKey || result == c.presentValue))
          continue;
        if (readsOnlyShapes(user)) {
          // The Shape ops at the end of the chain (a Transpose of the keys whose shape
          // alone is read, in optimum's T5).
          SmallVector<Operation *> chain = {user};
          llvm::SmallPtrSet<Operation *, 8> seen;
          while (!chain.empty()) {
            Operation *next = chain.pop_back_val();
            if (!seen.insert(next).second)
              continue;
            if (isOp(next, "onnx.Shape")) {
              recordShapeRead(c, next);
              continue;
            }
            for (Value result : next->getResults())
              for (Operation *reader : result.getUsers())
                chain.push_back(reader);
          }
          continue;
        }
        // Maybe another attention's: recognizeInFunction decides once all are matched.
        if (c.sharedWhy.empty())
          c.sharedWhy = "'" + evaluate::describeLocation(op->getLoc()) + "' (" +
                        op->getName().getStringRef().str() +
                        ") inside the attention is also used by '" +
                        evaluate::describeLocation(user->getLoc()) + "'";
        c.sharedReaders.push_back(user);
      }
  // And the region's own shape reads, whose results size something outside it (T5's bias
  // is computed from the key length measured on the keys' heads).
  for (Operation *op : c.region)
    if (isOp(op, "onnx.Shape") && c.region.contains(op->getOperand(0).getDefiningOp()))
      recordShapeRead(c, op);
  return "";
}


} // namespace dsc::attention
