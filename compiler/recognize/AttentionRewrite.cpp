// dsc-recognize-attention: the rewrite into tfm.attention and the implied positions.
#include "compiler/recognize/AttentionMatch.h"

#include "compiler/evaluate/Evaluator.h"
#include "compiler/lowering/RuntimeTypes.h"
#include "compiler/lowering/SymbolicDims.h"
#include "ops/OpTraits.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"
#include "compiler/recognize/DeadOps.h"
#include "compiler/recognize/ImpliedPositions.h"

#include "mlir/IR/Dominance.h"
#include "mlir/IR/Verifier.h"

#include <cmath>
#include <functional>
#include <cstring>
#include <limits>

namespace dsc::attention {

// An operand of [b, s, n * d] with a ranked type, reshaping a per-head view or a value of
// unknown type.
Value asProjection(OpBuilder &builder, Value source, int64_t probeRank, int64_t features) {
  Type element = cast<TensorType>(source.getType()).getElementType();
  auto type = dyn_cast<RankedTensorType>(source.getType());
  if (type && type.getRank() == 3 && type.getDimSize(2) == features)
    return source;
  // The importer leaves many intermediate types unranked; the probe proved this one is
  // [b, s, features], so its type is refined in place rather than reshaped.
  if (!type && probeRank == 3 && isa<OpResult>(source) && isOnnx(source.getDefiningOp())) {
    source.setType(RankedTensorType::get(
        {ShapedType::kDynamic, ShapedType::kDynamic, features}, element));
    return source;
  }
  // onnx.Reshape with 0 copying batch and sequence, -1 the features.
  if (probeRank == 4) {
    if (auto reshape = source.getDefiningOp(); isOp(reshape, "onnx.Reshape")) {
      auto inner = dyn_cast<RankedTensorType>(reshape->getOperand(0).getType());
      if (inner && inner.getRank() == 3 && inner.getDimSize(2) == features)
        return reshape->getOperand(0);
    }
  }
  Location loc = source.getLoc();
  auto shapeType = RankedTensorType::get({3}, builder.getI64Type());
  Value shape = onnx::ConstantOp::create(
      builder, loc, shapeType,
      DenseElementsAttr::get(shapeType, ArrayRef<int64_t>{0, 0, -1}));
  SmallVector<int64_t> dims = {ShapedType::kDynamic, ShapedType::kDynamic, features};
  if (type && type.getRank() >= 2) {
    dims[0] = type.getDimSize(0);
    dims[1] = type.getDimSize(1);
  }
  return onnx::ReshapeOp::create(builder, loc, RankedTensorType::get(dims, element), source,
                                 shape, builder.getI64IntegerAttr(0));
}

// A heads-first source [b, n, s, d] as [b, s, n, d].
Value headsSecond(OpBuilder &builder, Value source, bool headsFirst) {
  if (!headsFirst)
    return source;
  auto type = dyn_cast<RankedTensorType>(source.getType());
  Type element = cast<TensorType>(source.getType()).getElementType();
  SmallVector<int64_t> dims(4, ShapedType::kDynamic);
  if (type && type.getRank() == 4)
    dims = {type.getDimSize(0), type.getDimSize(2), type.getDimSize(1), type.getDimSize(3)};
  return onnx::TransposeOp::create(builder, source.getLoc(), RankedTensorType::get(dims, element),
                                   source, builder.getI64ArrayAttr({0, 2, 1, 3}));
}

// The source's heads normalised by a norm like `norm` (Candidate::queryNorm), placed where
// the heads enter: [b, s, n, d], or [b, n, s, d] for a heads-first source.
static Value normaliseHeads(OpBuilder &builder, Value source, int64_t probeRank, int64_t heads,
                            int64_t headDim, tfm::RmsNormOp norm) {
  if (!norm)
    return source;
  Location loc = norm.getLoc();
  if (probeRank == 3) {
    source = asProjection(builder, source, 3, heads * headDim);
    Type element = cast<TensorType>(source.getType()).getElementType();
    auto shapeType = RankedTensorType::get({4}, builder.getI64Type());
    Value shape = onnx::ConstantOp::create(
        builder, loc, shapeType,
        DenseElementsAttr::get(shapeType, ArrayRef<int64_t>{0, 0, heads, headDim}));
    SmallVector<int64_t> dims = {ShapedType::kDynamic, ShapedType::kDynamic, heads, headDim};
    if (auto type = dyn_cast<RankedTensorType>(source.getType()); type && type.getRank() == 3) {
      dims[0] = type.getDimSize(0);
      dims[1] = type.getDimSize(1);
    }
    source = onnx::ReshapeOp::create(builder, loc, RankedTensorType::get(dims, element), source,
                                     shape, builder.getI64IntegerAttr(0));
  }
  return tfm::RmsNormOp::create(builder, loc, source.getType(), source, norm.getScale(),
                                norm.getEpsilonAttr())
      .getOutput();
}

// One dimension of `source` (axis `axis`) as a 1-D i64 tensor, before `at`.
static Value dimensionOf(OpBuilder &builder, Location loc, Value source, int64_t axis) {
  return onnx::ShapeOp::create(builder, loc, RankedTensorType::get({1}, builder.getI64Type()),
                               source, builder.getI64IntegerAttr(axis),
                               builder.getI64IntegerAttr(axis + 1));
}



// The Shape reads of the region, computed from the attention's sources (see ShapeRead):
// a read whose sizes come from a source defined after it stays as it was.
static void replaceShapeReads(Candidate &c) {
  if (c.shapeReads.empty())
    return;
  DominanceInfo dominance;
  auto availableAt = [&](Value value, Operation *at) {
    return value && dominance.properlyDominates(value, at);
  };
  for (Candidate::ShapeRead &read : c.shapeReads) {
    Operation *shape = read.shape;
    OpBuilder builder(shape);
    Location loc = shape->getLoc();
    auto sequenceAxis = [](int64_t rank, bool headsFirst) { return rank == 4 && headsFirst ? 2 : 1; };
    SmallVector<Value> parts;
    for (auto [dim, constant] : read.dims) {
      Value part;
      switch (dim) {
      case Candidate::ShapeRead::Constant: {
        auto type = RankedTensorType::get({1}, builder.getI64Type());
        part = onnx::ConstantOp::create(builder, loc, type,
                                        DenseElementsAttr::get(type, ArrayRef<int64_t>{constant}));
        break;
      }
      case Candidate::ShapeRead::Batch:
        for (Value source : {c.querySource, c.keySource, c.valueSource})
          if (!part && availableAt(source, shape))
            part = dimensionOf(builder, loc, source, 0);
        break;
      case Candidate::ShapeRead::Queries:
        if (availableAt(c.querySource, shape))
          part = dimensionOf(builder, loc, c.querySource,
                             sequenceAxis(c.queryRank, c.queryHeadsFirst));
        break;
      case Candidate::ShapeRead::Keys:
        if (!availableAt(c.keySource, shape) || (c.pastKey && !availableAt(c.pastKey, shape)))
          break;
        part = dimensionOf(builder, loc, c.keySource, sequenceAxis(c.keyRank, c.keyHeadsFirst));
        if (c.pastKey)
          part = onnx::AddOp::create(builder, loc, part.getType(),
                                     dimensionOf(builder, loc, c.pastKey, 2), part);
        break;
      }
      if (!part)
        break;
      parts.push_back(part);
    }
    if (parts.size() != read.dims.size()) {
      for (Value part : llvm::reverse(parts))
        if (Operation *op = part.getDefiningOp(); op && op->use_empty())
          op->erase();
      continue;
    }
    auto type = RankedTensorType::get({int64_t(parts.size())}, builder.getI64Type());
    Value replacement = parts.size() == 1
                            ? parts.front()
                            : onnx::ConcatOp::create(builder, loc, type, parts,
                                                     builder.getI64IntegerAttr(0))
                                  .getResult();
    shape->getResult(0).replaceAllUsesWith(replacement);
    shape->erase();
  }
  c.shapeReads.clear();
}

std::string rewrite(Candidate &c, int64_t layer, Value attentionMask, Value positionIds) {
  Operation *rootOp = c.root.getDefiningOp();
  OpBuilder builder(rootOp);
  Location loc = c.softmax->getLoc();
  MLIRContext *context = builder.getContext();
  int64_t qFeatures = c.heads * c.headDim, kvFeatures = c.kvHeads * c.headDim;
  auto rootType = dyn_cast<RankedTensorType>(c.root.getType());
  if (!rootType || c.flatRoot || c.headsRoot)
    rootType = RankedTensorType::get({ShapedType::kDynamic, ShapedType::kDynamic, qFeatures},
                                     cast<TensorType>(c.root.getType()).getElementType());
  if (rootType.getRank() != 3 || rootType.getDimSize(2) != qFeatures)
    return "the attention output has no [batch, seq, heads * head_dim] type";
  SmallVector<Type> presentTypes;
  if (c.presentKey) {
    if (c.presentKey.getType() != c.presentValue.getType())
      return "the present key and value have different types";
    presentTypes = {c.presentKey.getType(), c.presentValue.getType()};
  }
  SmallVector<Value> past;
  if (c.pastKey) {
    if (c.pastKey.getType() != c.pastValue.getType())
      return "the past key and value have different types";
    past = {c.pastKey, c.pastValue};
  }
  auto normalisedProjection = [&](Value source, int64_t rank, bool headsFirst, int64_t heads,
                                  tfm::RmsNormOp norm) {
    Value normalised = normaliseHeads(builder, source, rank, heads, c.headDim, norm);
    return asProjection(builder, headsSecond(builder, normalised, headsFirst),
                        norm ? 4 : rank, heads * c.headDim);
  };
  // Norms after the rotation are the attention's own (its q/k norm operands).
  Value query = normalisedProjection(c.querySource, c.queryRank, c.queryHeadsFirst, c.heads,
                                     c.normsAfterRotary ? tfm::RmsNormOp() : c.queryNorm);
  Value key = normalisedProjection(c.keySource, c.keyRank, c.keyHeadsFirst, c.kvHeads,
                                   c.normsAfterRotary ? tfm::RmsNormOp() : c.keyNorm);
  Value value = asProjection(builder, headsSecond(builder, c.valueSource, c.valueHeadsFirst),
                             c.valueRank, kvFeatures);
  if (key.getType() != value.getType())
    return "the key and value projections have different types";
  tfm::RotaryAttr rotary;
  if (c.rotary)
    rotary = tfm::RotaryAttr::get(
        context, c.rotary->dim, llvm::APFloat(c.rotary->base),
        c.rotary->interleaved ? tfm::RotaryLayout::interleaved : tfm::RotaryLayout::half_split,
        c.rotary->explicitTable ? DenseF32ArrayAttr::get(context, c.rotary->invFreq)
                                : DenseF32ArrayAttr(),
        c.rotary->attentionFactor != 1
            ? FloatAttr::get(Float32Type::get(context), c.rotary->attentionFactor)
            : FloatAttr());
  Value positions = positionIds;
  if (c.rotary && c.impliedPositions) {
    if (!attentionMask && c.pastKey)
      return "the positions are computed in the graph, and there is no attention_mask";
    positions = buildImpliedPositions(builder, loc, attentionMask, query);
  }
  Value bias = c.bias;
  if (bias && !isa<RankedTensorType>(bias.getType())) {
    // The probe proved it 4-D; the importer left its type unranked.
    if (!isa<OpResult>(bias) || !isOnnx(bias.getDefiningOp()))
      return "the bias has no ranked type";
    bias.setType(RankedTensorType::get(SmallVector<int64_t>(4, ShapedType::kDynamic),
                                       cast<TensorType>(bias.getType()).getElementType()));
  }
  Value mask = !c.padding ? Value() : c.cross ? c.crossMask : attentionMask;
  // The proven logits, one per head (the initializer they were broadcast from dies with the
  // softmax's Concat).
  Value sinks;
  if (!c.sinks.empty()) {
    auto sinksType = RankedTensorType::get({c.heads}, builder.getF32Type());
    sinks = onnx::ConstantOp::create(builder, loc, sinksType,
                                     DenseElementsAttr::get(sinksType, ArrayRef<float>(c.sinks)));
  }
  auto attention = tfm::AttentionOp::create(
      builder, loc, rootType, presentTypes, query, key, value, mask, past,
      c.rotary ? positions : Value(), bias,
      builder.getI64IntegerAttr(c.heads), builder.getI64IntegerAttr(c.kvHeads),
      builder.getI64IntegerAttr(c.headDim), builder.getF32FloatAttr(float(c.scale)),
      c.causal ? builder.getUnitAttr() : UnitAttr(),
      c.alibi ? builder.getUnitAttr() : UnitAttr(),
      c.window ? builder.getI64IntegerAttr(c.window) : IntegerAttr(), rotary,
      builder.getI64IntegerAttr(layer));
  if (c.unattended != "all")
    attention->setAttr("tfm.unattended", builder.getStringAttr(c.unattended));
  if (c.softcap > 0)
    attention->setAttr("softcap", builder.getF32FloatAttr(float(c.softcap)));
  if (sinks)
    attention.getSinksMutable().assign(sinks);
  if (c.normsAfterRotary) {
    attention.getQueryNormScaleMutable().assign(c.queryNorm.getScale());
    attention.getKeyNormScaleMutable().assign(c.keyNorm.getScale());
    attention.setQkNormEpsilonAttr(c.queryNorm.getEpsilonAttr());
    attention.setQkNormAfterRotary(true);
  }
  if (failed(verify(attention))) {
    attention->erase();
    return "the recognised tfm.attention does not verify";
  }
  Value output = attention.getOutput();
  if (c.flatRoot && c.restoredProjection) {
    // The projection takes [b, s, heads * d] as any other linear does (tp-shard then sees
    // the attention feed its output projection).
    Operation *linear = *c.root.getUsers().begin();
    Operation *restore = c.restoredProjection.getDefiningOp();
    OpBuilder after(restore);
    Operation *projection = after.clone(*linear);
    projection->setOperand(0, output);
    auto rowsType = cast<RankedTensorType>(linear->getResult(0).getType());
    projection->getResult(0).setType(RankedTensorType::get(
        {ShapedType::kDynamic, ShapedType::kDynamic, rowsType.getDimSize(1)},
        rowsType.getElementType()));
    c.restoredProjection.replaceAllUsesWith(projection->getResult(0));
    restore->erase();
    linear->erase();
  } else if (c.flatRoot) {
    auto shapeType = RankedTensorType::get({2}, builder.getI64Type());
    Value shape = onnx::ConstantOp::create(
        builder, loc, shapeType, DenseElementsAttr::get(shapeType, ArrayRef<int64_t>{-1, qFeatures}));
    auto flatType = dyn_cast<RankedTensorType>(c.root.getType());
    if (!flatType)
      flatType = RankedTensorType::get({ShapedType::kDynamic, qFeatures}, rootType.getElementType());
    output = onnx::ReshapeOp::create(builder, loc, flatType, output, shape,
                                     builder.getI64IntegerAttr(0));
  } else if (c.headsRoot) {
    auto shapeType = RankedTensorType::get({4}, builder.getI64Type());
    Value shape = onnx::ConstantOp::create(
        builder, loc, shapeType,
        DenseElementsAttr::get(shapeType, ArrayRef<int64_t>{0, 0, c.heads, c.headDim}));
    auto headsType = RankedTensorType::get(
        {rootType.getDimSize(0), rootType.getDimSize(1), c.heads, c.headDim},
        rootType.getElementType());
    output = onnx::ReshapeOp::create(builder, loc, headsType, output, shape,
                                     builder.getI64IntegerAttr(0));
  }
  c.root.replaceAllUsesWith(output);
  replaceShapeReads(c);
  if (c.presentKey) {
    // The graph's outputs, and the Casts that give them a half type the export declares.
    Operation *terminator = c.softmax->getBlock()->getTerminator();
    for (auto [present, result] : {std::pair(c.presentKey, attention.getPresent()[0]),
                                   std::pair(c.presentValue, attention.getPresent()[1])})
      present.replaceUsesWithIf(result, [&](OpOperand &use) {
        Operation *user = use.getOwner();
        return user == terminator ||
               (user->getNumResults() == 1 && interfaceCastInput(user->getResult(0)) == present);
      });
  }
  return "";
}


SmallVector<ImpliedTable> tablesAtImpliedPositions(func::FuncOp func, const ProbeEvaluator &probe,
                                                   int64_t cached,
                                                   ArrayRef<Value> skipLengthsOf) {
  SmallVector<ImpliedTable> tables;
  func.walk([&](Operation *op) {
    Value indices;
    if (auto embedding = dyn_cast<tfm::EmbeddingOp>(op)) {
      indices = embedding.getIds();
    } else if (auto gather = dyn_cast<onnx::GatherOp>(op)) {
      // A table [rows, features] (sinusoids, or a learned one before layer recognition made
      // it an embedding) read at one row of positions, or at [1 or batch, new] of them (the
      // probe's shapes say which; the importer may not have typed them).
      auto type = dyn_cast<RankedTensorType>(gather.getData().getType());
      Operation *table = gather.getData().getDefiningOp();
      if (gather.getAxis() != 0 || !type || type.getRank() != 2 || !table ||
          !(isa<tfm::WeightOp, onnx::WeightOp>(table) ||
            matchPattern(gather.getData(), m_Constant())))
        return;
      indices = gather.getIndices();
    } else {
      return;
    }
    SmallVector<Operation *> lengthReads;
    if (isa<BlockArgument>(indices) || !computedFromLengthsAlone(indices, &lengthReads))
      return;
    for (Operation *read : lengthReads)
      if (llvm::is_contained(skipLengthsOf, read->getOperand(0)))
        return;
    const Info *info = probe.lookup(indices);
    if (!info || !info->value)
      return;
    const bool oneRow = info->shape.size() == 1 && info->shape[0] == kProbeNew;
    if (!oneRow && (info->shape.size() != 2 || info->shape[1] != kProbeNew ||
                    (info->shape[0] != 1 && info->shape[0] != kProbeBatch)))
      return;
    std::vector<int64_t> values = integers(*info->value);
    if (values.empty())
      return;
    // Positions that start before the cached tokens end ignore them (optimum's branch
    // without a cache, probed with one): not the positions of the new tokens.
    const int64_t offset = values[0] - cached;
    if (offset < 0)
      return;
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] != cached + offset + int64_t(i) % kProbeNew)
        return;
    // The lookup's users must take [batch, new, hidden] where they took [1, new, hidden]
    // (or [new, hidden]): elementwise ops whose result on the probe is [batch, new, ...]
    // already, so that the new rows broadcast to the same result, through casts. Any other
    // onnx user is bound to the old shape; a recognised attention may still take it away.
    ImpliedTable table{op, offset, {}};
    std::function<bool(Operation *)> broadcasts = [&](Operation *user) {
      if (isa<onnx::CastOp>(user))
        return llvm::all_of(user->getUsers(), broadcasts);
      if (!isa<onnx::AddOp, onnx::SubOp, onnx::MulOp, onnx::DivOp>(user))
        return false;
      const Info *result = probe.lookup(user->getResult(0));
      return result && result->shape.size() == 3 && result->shape[0] == kProbeBatch &&
             result->shape[1] == kProbeNew;
    };
    for (Operation *user : op->getUsers()) {
      if (!isOnnx(user))
        return;
      if (!broadcasts(user))
        table.shapeBoundUsers.push_back(user);
    }
    tables.push_back(std::move(table));
  });
  return tables;
}

// The tables' indices become the implied positions, which the session programs take as
// their position_ids input (takePositionsAsInput).
void takeImpliedPositions(func::FuncOp func, llvm::ArrayRef<ImpliedTable> tables, Value mask) {
  Value ids = tokenIdsArgument(func);
  if (!ids || tables.empty())
    return;
  const llvm::DenseSet<Operation *> dead = opsLeftDead(func);
  for (const ImpliedTable &table : tables) {
    Operation *lookup = table.lookup;
    if (dead.contains(lookup) ||
        llvm::any_of(table.shapeBoundUsers, [&](Operation *user) { return !dead.contains(user); }))
      continue;
    OpBuilder builder(lookup);
    Location loc = lookup->getLoc();
    Value positions = buildImpliedPositions(builder, loc, mask, ids);
    if (table.offset != 0) {
      auto scalar = RankedTensorType::get({}, builder.getI64Type());
      Value offset = onnx::ConstantOp::create(
          builder, loc, scalar, DenseElementsAttr::get(scalar, ArrayRef<int64_t>{table.offset}));
      positions = onnx::AddOp::create(builder, loc, positions.getType(), positions, offset);
    }
    // The features: the table's second dimension.
    unsigned operand = isa<tfm::EmbeddingOp>(lookup) ? 0 : 1;
    auto tableType = cast<RankedTensorType>(lookup->getOperand(1 - operand).getType());
    lookup->setOperand(operand, positions);
    lookup->getResult(0).setType(RankedTensorType::get(
        {ShapedType::kDynamic, ShapedType::kDynamic, tableType.getDimSize(1)},
        tableType.getElementType()));
  }
}


} // namespace dsc::attention
