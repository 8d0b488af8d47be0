// dsc-lower-onnx-to-plan: see Passes.td.
#include "compiler/lowering/Passes.h"

#include "compiler/lowering/PositionTables.h"
#include "compiler/lowering/ShapeBounds.h"
#include "compiler/lowering/SymbolicDims.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/TypeUtilities.h"

#include "llvm/ADT/StringExtras.h"

namespace dsc {
#define GEN_PASS_DEF_LOWERONNXTOPLAN
#include "compiler/lowering/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

using Probe = TokenSplit;

// A tfm.weight transform as the plan's dictionary form ({kind = "transpose", perm = [..]},
// {kind = "slice", ...}, {kind = "convert", to = f16}), which the plan writer applies.
FailureOr<Attribute> planTransform(Operation *op, Attribute transform) {
  Builder b(op->getContext());
  if (auto transpose = dyn_cast<tfm::TransposeAttr>(transform))
    return Attribute(b.getDictionaryAttr(
        {b.getNamedAttr("kind", b.getStringAttr("transpose")),
         b.getNamedAttr("perm", b.getI64ArrayAttr(transpose.getPerm()))}));
  if (auto slice = dyn_cast<tfm::SliceAttr>(transform))
    return Attribute(b.getDictionaryAttr(
        {b.getNamedAttr("kind", b.getStringAttr("slice")),
         b.getNamedAttr("axis", b.getI64IntegerAttr(slice.getAxis())),
         b.getNamedAttr("offset", b.getI64IntegerAttr(slice.getOffset())),
         b.getNamedAttr("size", b.getI64IntegerAttr(slice.getSize()))}));
  if (auto blocks = dyn_cast<tfm::BlocksAttr>(transform))
    return Attribute(b.getDictionaryAttr(
        {b.getNamedAttr("kind", b.getStringAttr("slice")),
         b.getNamedAttr("axis", b.getI64IntegerAttr(blocks.getAxis())),
         b.getNamedAttr("groups", b.getI64IntegerAttr(blocks.getGroups())),
         b.getNamedAttr("offset", b.getI64IntegerAttr(blocks.getOffset())),
         b.getNamedAttr("size", b.getI64IntegerAttr(blocks.getSize()))}));
  // Each rank's part is chosen when the plan writer fills that rank's section.
  if (auto shard = dyn_cast<tfm::ShardAttr>(transform))
    return Attribute(b.getDictionaryAttr(
        {b.getNamedAttr("kind", b.getStringAttr("shard")),
         b.getNamedAttr("axis", b.getI64IntegerAttr(shard.getAxis())),
         b.getNamedAttr("offsets", b.getI64ArrayAttr(shard.getOffsets())),
         b.getNamedAttr("sizes", b.getI64ArrayAttr(shard.getSizes())),
         b.getNamedAttr("groups", b.getI64IntegerAttr(shard.getGroups()))}));
  if (auto scale = dyn_cast<tfm::ScaleAttr>(transform))
    return Attribute(b.getDictionaryAttr({b.getNamedAttr("kind", b.getStringAttr("scale")),
                                          b.getNamedAttr("factor", scale.getFactor())}));
  if (auto convert = dyn_cast<tfm::ConvertAttr>(transform))
    return Attribute(b.getDictionaryAttr({b.getNamedAttr("kind", b.getStringAttr("convert")),
                                          b.getNamedAttr("to", TypeAttr::get(convert.getDtype()))}));
  if (auto quantize = dyn_cast<tfm::QuantizeInt8Attr>(transform))
    return Attribute(b.getDictionaryAttr(
        {b.getNamedAttr("kind", b.getStringAttr("quantize_int8")),
         b.getNamedAttr("group_size", b.getI64IntegerAttr(quantize.getGroupSize()))}));
  // The plan writer computes scales in f32; the weight's type converts them further.
  if (auto scales = dyn_cast<tfm::QuantScalesAttr>(transform)) {
    if (!scales.getDtype().isF32())
      return op->emitOpError() << "has int8 scales of type " << scales.getDtype()
                                << "; the plan writer computes f32 scales (the stored dtype "
                                   "is --compute-dtype)";
    return Attribute(b.getDictionaryAttr(
        {b.getNamedAttr("kind", b.getStringAttr("quant_scales")),
         b.getNamedAttr("group_size", b.getI64IntegerAttr(scales.getGroupSize()))}));
  }
  if (auto quantize = dyn_cast<tfm::QuantizeInt4Attr>(transform))
    return Attribute(b.getDictionaryAttr(
        {b.getNamedAttr("kind", b.getStringAttr("quantize_int4")),
         b.getNamedAttr("group_size", b.getI64IntegerAttr(quantize.getGroupSize()))}));
  if (auto scales = dyn_cast<tfm::QuantScalesInt4Attr>(transform)) {
    if (!scales.getDtype().isF32())
      return op->emitOpError() << "has int4 scales of type " << scales.getDtype()
                                << "; the plan writer computes f32 scales (the stored dtype "
                                   "is --compute-dtype)";
    return Attribute(b.getDictionaryAttr(
        {b.getNamedAttr("kind", b.getStringAttr("quant_scales_int4")),
         b.getNamedAttr("group_size", b.getI64IntegerAttr(scales.getGroupSize()))}));
  }
  return op->emitOpError() << "has a transform the plan writer cannot apply: " << transform;
}


std::string sourceOf(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  return "";
}

class Lowering {
public:
  Lowering(OpBuilder &builder, const ShapeBounds &bounds) : builder_(builder), bounds_(bounds) {}

  LogicalResult lowerBlock(Block &block);
  IRMapping mapping;

private:
  LogicalResult lowerOp(Operation *op);
  FailureOr<Type> rankedType(Value value, ArrayRef<int64_t> bound);
  FailureOr<ArrayAttr> resultBounds(Operation *op, SmallVectorImpl<Type> &types);

  OpBuilder &builder_;
  const ShapeBounds &bounds_;
};

// A ranked type for a value whose import left it unranked: the bound gives the rank.
FailureOr<Type> Lowering::rankedType(Value value, ArrayRef<int64_t> bound) {
  auto type = cast<TensorType>(value.getType());
  if (type.hasRank())
    return Type(type);
  SmallVector<int64_t> shape(bound.size(), ShapedType::kDynamic);
  return Type(RankedTensorType::get(shape, type.getElementType()));
}

FailureOr<ArrayAttr> Lowering::resultBounds(Operation *op, SmallVectorImpl<Type> &types) {
  SmallVector<Attribute> attrs;
  for (Value result : op->getResults()) {
    const ShapeBounds::Entry *entry = bounds_.lookup(result);
    if (!entry)
      return op->emitOpError("has a result whose shape could not be bounded under the "
                             "plan's limits");
    if (!entry->bounded) {
      if (!entry->dynamicWhy.empty())
        op->emitWarning() << entry->dynamicWhy;
      // Allocated when it runs: unranked, with an empty bound.
      types.push_back(UnrankedTensorType::get(getElementTypeOrSelf(result.getType())));
      attrs.push_back(DenseI64ArrayAttr::get(op->getContext(), {}));
      continue;
    }
    FailureOr<Type> type = rankedType(result, entry->shape);
    if (failed(type))
      return failure();
    types.push_back(*type);
    attrs.push_back(DenseI64ArrayAttr::get(op->getContext(), entry->shape));
  }
  return ArrayAttr::get(op->getContext(), attrs);
}

LogicalResult Lowering::lowerBlock(Block &block) {
  for (Operation &op : block)
    if (failed(lowerOp(&op)))
      return failure();
  return success();
}

LogicalResult Lowering::lowerOp(Operation *op) {
  Location loc = op->getLoc();
  if (auto weight = dyn_cast<onnx::WeightOp>(op)) {
    mapping.map(weight.getOutput(),
                plan::WeightTensorOp::create(builder_, loc, weight.getType(), weight.getName(),
                                             /*source_type=*/nullptr, /*transforms=*/nullptr));
    return success();
  }
  if (auto weight = dyn_cast<tfm::WeightOp>(op)) {
    SmallVector<Attribute> transforms;
    if (ArrayAttr list = weight.getTransformsAttr())
      for (Attribute transform : list) {
        FailureOr<Attribute> converted = planTransform(op, transform);
        if (failed(converted))
          return failure();
        transforms.push_back(*converted);
      }
    mapping.map(weight.getOutput(),
                plan::WeightTensorOp::create(
                    builder_, loc, storedWeightType(weight.getType()), weight.getName(),
                    TypeAttr::get(weight.getSourceType()),
                    transforms.empty() ? ArrayAttr() : builder_.getArrayAttr(transforms)));
    return success();
  }
  if (auto concat = dyn_cast<tfm::ConcatWeightsOp>(op)) {
    SmallVector<Value> parts;
    for (Value part : concat.getParts())
      parts.push_back(mapping.lookup(part));
    mapping.map(concat.getOutput(),
                plan::WeightConcatOp::create(builder_, loc, storedWeightType(concat.getType()),
                                             parts, concat.getRankPartsAttr()));
    return success();
  }
  if (auto constant = dyn_cast<onnx::ConstantOp>(op)) {
    mapping.map(constant.getOutput(),
                plan::ConstantOp::create(builder_, loc, constant.getType(), constant.getValue()));
    return success();
  }
  if (auto none = dyn_cast<onnx::NoValueOp>(op)) {
    mapping.map(none.getResult(), plan::NoneOp::create(builder_, loc, builder_.getNoneType()));
    return success();
  }
  if (auto yield = dyn_cast<onnx::YieldOp>(op)) {
    SmallVector<Value> outputs;
    for (Value value : yield.getOutputs())
      outputs.push_back(mapping.lookup(value));
    plan::YieldOp::create(builder_, loc, outputs);
    return success();
  }
  if (auto ret = dyn_cast<func::ReturnOp>(op)) {
    SmallVector<Value> outputs;
    for (Value value : ret.getOperands())
      outputs.push_back(mapping.lookup(value));
    auto func = ret->getParentOfType<func::FuncOp>();
    SmallVector<Attribute> names;
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      auto name = func.getResultAttrOfType<StringAttr>(i, "onnx.name");
      names.push_back(name ? name : builder_.getStringAttr("output_" + std::to_string(i)));
    }
    plan::ReturnOp::create(builder_, loc, outputs, builder_.getArrayAttr(names));
    return success();
  }

  SmallVector<Type> types;
  FailureOr<ArrayAttr> maxShapes = resultBounds(op, types);
  if (failed(maxShapes))
    return failure();
  if (auto branch = dyn_cast<onnx::IfOp>(op)) {
    auto lowered = plan::IfOp::create(builder_, loc, types, mapping.lookup(branch.getCond()),
                                      *maxShapes, DenseI64ArrayAttr());
    for (auto [from, to] : {std::pair{&branch.getThenBranch(), &lowered.getThenBranch()},
                            std::pair{&branch.getElseBranch(), &lowered.getElseBranch()}}) {
      OpBuilder::InsertionGuard guard(builder_);
      builder_.setInsertionPointToStart(&to->emplaceBlock());
      if (failed(lowerBlock(from->front())))
        return failure();
    }
    for (auto [from, to] : llvm::zip(branch.getResults(), lowered.getResults()))
      mapping.map(from, to);
    return success();
  }
  llvm::StringRef dialect = op->getDialect()->getNamespace();
  if ((dialect != "onnx" && dialect != "tfm") || op->getNumRegions() != 0)
    return op->emitOpError("cannot be lowered to a plan step");

  // An absent optional operand of a tfm op is an absent input (docs/transformer-ops.md).
  SmallVector<Value> inputs;
  for (Value operand : stepInputs(op))
    inputs.push_back(operand ? mapping.lookup(operand)
                             : plan::NoneOp::create(builder_, loc, builder_.getNoneType()));
  FailureOr<DictionaryAttr> attrs = stepAttributes(op);
  if (failed(attrs))
    return failure();
  auto exec = plan::ExecOp::create(builder_, loc, types, stepName(op), inputs, *attrs,
                                   *maxShapes, DenseI64ArrayAttr(),
                                   builder_.getStringAttr(sourceOf(loc)),
                                   /*kernels=*/ArrayAttr(), /*kernel_decline=*/StringAttr());
  for (auto [from, to] : llvm::zip(op->getResults(), exec.getResults()))
    mapping.map(from, to);
  return success();
}

struct LowerOnnxToPlanPass : impl::LowerOnnxToPlanBase<LowerOnnxToPlanPass> {
  using LowerOnnxToPlanBase::LowerOnnxToPlanBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError("has no func.func @main to lower (import a model first)");
      return signalPassFailure();
    }
    if (maxBatch < 1 || maxSeqLen < 1) {
      module.emitError("max-batch and max-seq-len must be at least 1");
      return signalPassFailure();
    }
    // @main is the export's interface (`program`, forward by default); recognition may add
    // @prefill and @decode (docs/transformer-ops.md, "Programs"), each its own program.
    SmallVector<std::pair<func::FuncOp, std::string>> programs = {{main, programName}};
    // With --tp, @prefill_greedy and @decode_greedy (the rank's logits shard, for the
    // distributed argmax) too; an encoder-decoder's encoder is @encode.
    // With --serving, @step (the engine's decode over the sampled rows' logits).
    for (llvm::StringRef name :
         {"encode", "prefill", "decode", "prefill_greedy", "decode_greedy", "step"})
      if (auto func = module.lookupSymbol<func::FuncOp>(name))
        programs.push_back({func, name.str()});
    if (failed(checkPositionTables(programs)) || failed(checkNewTokenLimit(main)))
      return signalPassFailure();
    for (auto &[func, name] : programs)
      if (failed(lowerFunction(module, func, name)))
        return signalPassFailure();
    // What the plan's limits are, for the plan writer.
    module->setAttr("dsc.max_seq_len", IntegerAttr::get(IntegerType::get(&getContext(), 64),
                                                          int64_t(maxSeqLen)));
  }

  bool runsAt(func::FuncOp func, const InputDims &dims, const Probe &probe) {
    SmallVector<SmallVector<int64_t>> shapes;
    for (unsigned index = 0; index < func.getNumArguments(); ++index)
      shapes.push_back(dims.shapeAt(index, probe));
    ScopedDiagnosticHandler silence(&getContext(), [](Diagnostic &) { return success(); });
    return succeeded(evaluateShapeBounds(func, shapes));
  }

  // Whether the graph runs with `tokens` in all: all new, and (with a cache) one new token
  // after the rest.
  bool runsWith(func::FuncOp func, const InputDims &dims, int64_t tokens) {
    if (!runsAt(func, dims, {maxBatch, 0, tokens}))
      return false;
    return !dims.hasPast() || runsAt(func, dims, {maxBatch, tokens - 1, 1});
  }

  // A learned position table bounds the tokens where no shape does (PositionTables.h): asked
  // for more, that is an error; by default the limit becomes the table's, with a warning.
  LogicalResult
  checkPositionTables(ArrayRef<std::pair<func::FuncOp, std::string>> programs) {
    std::optional<PositionTableLimit> tightest;
    for (const auto &program : programs)
      if (std::optional<PositionTableLimit> limit = positionTableLimit(program.first))
        if (!tightest || limit->tokens < tightest->tokens)
          tightest = limit;
    if (auto branches = programs.front().first->getAttrOfType<IntegerAttr>(
            kLongestByLengthBranchesAttr);
        branches && branches.getInt() < maxSeqLen &&
        (!tightest || branches.getInt() < tightest->tokens))
      return limitTokens(programs.front().first,
                         "its recognised attention reads a rotary table that an If chooses by "
                         "the sequence's length (LongRoPE's short and long factors); dsc reads "
                         "the one for up to " +
                             std::to_string(branches.getInt()) + " tokens, so the model",
                         branches.getInt());
    if (!tightest || tightest->tokens >= maxSeqLen)
      return success();
    const std::string table = "looks up positions in a table of " +
                              std::to_string(tightest->rows) + " rows";
    if (tightest->tokens < 1)
      return tightest->lookup->emitError() << table << ", too few for any token";
    return limitTokens(tightest->lookup, table + ": the model", tightest->tokens);
  }

  // `what` ("the graph") runs with at most `limit` tokens, said at `at`: an explicit larger
  // --max-seq-len is an error naming the limit; by default the limit becomes it, with a
  // warning.
  LogicalResult limitTokens(Operation *at, llvm::StringRef what, int64_t limit) {
    if (!fitSeqLen)
      return at->emitError() << what << " runs with at most " << limit
                             << " tokens, not --max-seq-len " << int64_t(maxSeqLen)
                             << "; compile with --max-seq-len " << limit;
    at->emitWarning() << what << " runs with at most " << limit
                      << " tokens; the plan's --max-seq-len is " << limit;
    maxSeqLen = limit;
    return success();
  }

  // A graph that cannot take max-seq-len tokens (a learned position table or an ALiBi
  // table of fewer rows: BERT, GPT-2, MPT) would otherwise be bounded by the splits it does
  // run, or fail on the generic path. Asked for, that limit is an error naming the largest
  // that runs; by default the limit becomes that largest, with a warning.
  LogicalResult checkNewTokenLimit(func::FuncOp func) {
    for (BlockArgument argument : func.getArguments())
      if (!cast<TensorType>(argument.getType()).hasRank())
        return success();  // lowerFunction says so
    InputDims dims = InputDims::of(func);
    if (runsWith(func, dims, maxSeqLen))
      return success();
    int64_t low = 0, high = maxSeqLen;  // runs with low (0: none found), not with high
    for (int64_t n = 1; n < high; n *= 2) {
      if (!runsWith(func, dims, n)) {
        high = n;
        break;
      }
      low = n;
    }
    while (high - low > 1) {
      int64_t middle = low + (high - low) / 2;
      (runsWith(func, dims, middle) ? low : high) = middle;
    }
    if (low == 0)
      return success();  // it runs at no length: lowerFunction reports why
    return limitTokens(func, "the graph", low);
  }

  LogicalResult lowerFunction(ModuleOp module, func::FuncOp func, llvm::StringRef name) {
    // Sizes grow with the batch and with the tokens, but the limit is on past + new
    // tokens, so the largest tensors of a decoder appear at different splits: all new
    // tokens (prefill), one new token after a full cache (decode), and half of each
    // (products of both). Shapes are evaluated at each split and bounded by the largest.
    // A decode program takes exactly one new token, after up to max-seq-len - 1 cached ones.
    SmallVector<Probe> probes = {{maxBatch, 0, maxSeqLen},
                                 {maxBatch, maxSeqLen - 1, 1},
                                 {maxBatch, maxSeqLen / 2, maxSeqLen - maxSeqLen / 2}};
    if (name == "decode" || name == "decode_greedy")
      probes = {{maxBatch, maxSeqLen - 1, 1}};
    // The engine's step: each row one token of any sequence, so its rows are the tokens of
    // a step, which a serving plan bounds apart from the static batch.
    if (name == "step")
      probes = {{maxTokensPerStep > 0 ? int64_t(maxTokensPerStep) : int64_t(maxBatch),
                 maxSeqLen - 1, 1}};
    std::optional<ShapeBounds> merged;
    SmallVector<Diagnostic> probeErrors;
    SmallVector<SmallVector<int64_t>> inputBounds;
    for (auto [index, argument] : llvm::enumerate(func.getArguments()))
      if (!cast<TensorType>(argument.getType()).hasRank()) {
        func.emitError() << "graph input " << index << " has no rank; it cannot be bounded";
        return failure();
      }
    InputDims inputDims = InputDims::of(func);
    for (const Probe &probe : probes) {
      SmallVector<SmallVector<int64_t>> inputShapes;
      for (unsigned index = 0; index < func.getNumArguments(); ++index)
        inputShapes.push_back(inputDims.shapeAt(index, probe));
      // A split the model cannot run (a graph traced for one new token) bounds nothing;
      // its errors matter only when no split runs.
      FailureOr<ShapeBounds> bounds;
      {
        ScopedDiagnosticHandler capture(&getContext(), [&](Diagnostic &diagnostic) {
          probeErrors.push_back(std::move(diagnostic));
          return success();
        });
        bounds = evaluateShapeBounds(func, inputShapes, /*dynamicFallback=*/true);
      }
      if (failed(bounds))
        continue;
      if (!merged) {
        merged = std::move(*bounds);
        inputBounds = inputShapes;
        continue;
      }
      for (auto &[value, other] : bounds->entries) {
        auto [it, inserted] = merged->entries.try_emplace(value, other);
        if (inserted)
          continue;
        if (!other.bounded || !it->second.bounded) {
          if (it->second.bounded || it->second.dynamicWhy.empty())
            it->second.dynamicWhy = other.dynamicWhy;
          it->second.bounded = false;
          it->second.shape.clear();
          continue;
        }
        if (other.shape.size() != it->second.shape.size()) {
          emitError(value.getLoc()) << "a tensor changes rank with the number of tokens; "
                                       "its size cannot be bounded";
          return failure();
        }
        for (auto [a, b] : llvm::zip(it->second.shape, other.shape))
          a = std::max(a, b);
      }
      for (auto [bound, shape] : llvm::zip(inputBounds, inputShapes))
        for (auto [a, b] : llvm::zip(bound, shape))
          a = std::max(a, b);
    }
    if (!merged) {
      for (Diagnostic &diagnostic : probeErrors)
        getContext().getDiagEngine().emit(std::move(diagnostic));
      return failure();
    }
    ShapeBounds *bounds = &*merged;

    OpBuilder builder(module.getBodyRegion());
    builder.setInsertionPointToEnd(module.getBody());
    auto program = plan::ProgramOp::create(builder, func.getLoc(), name);
    builder.setInsertionPointToStart(&program.getRegion().front());
    Lowering lowering(builder, *bounds);
    for (auto [index, argument] : llvm::enumerate(func.getArguments())) {
      auto name = func.getArgAttrOfType<StringAttr>(index, "onnx.name");
      auto input = plan::InputOp::create(
          builder, func.getLoc(), argument.getType(), index,
          name ? name.getValue() : "input_" + std::to_string(index),
          func.getArgAttrOfType<ArrayAttr>(index, "onnx.dims"),
          builder.getDenseI64ArrayAttr(inputBounds[index]));
      lowering.mapping.map(argument, input.getResult());
    }
    if (failed(lowering.lowerBlock(func.getBody().front())))
      return failure();
    func.erase();
    return success();
  }
};

} // namespace
} // namespace dsc
