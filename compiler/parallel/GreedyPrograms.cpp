// tp-shard's greedy programs (docs/transformer-ops.md, "Tensor parallelism"): copies of
// prefill and decode that end at each rank's shard of a vocabulary-parallel LM head, for
// the distributed argmax, instead of gathering the logits.
#include "compiler/parallel/GreedyPrograms.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

namespace dsc {
namespace {

RankedTensorType withDim(Type type, int64_t axis, int64_t size) {
  auto ranked = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(ranked.getShape());
  shape[axis < 0 ? shape.size() + axis : axis] = size;
  return RankedTensorType::get(shape, ranked.getElementType());
}

// The name of the greedy programs' output (docs/transformer-ops.md, "Tensor parallelism").
constexpr const char kLocalLogitsName[] = "local_logits";

// The gathered logits `func` returns: the all_gather of a vocabulary-parallel LM head, then
// ops that act on each logit alone (GPT-J's lm_head bias Add, a Cast to the compute type,
// Gemma-2's cap * tanh(logits / cap)),
// each reading the logits and at most a [vocab] vector or a scalar.
struct LogitsTail {
  tfm::AllGatherOp gather;
  SmallVector<Operation *> epilogue;  // from the gather outwards
  unsigned resultIndex = 0;
};

// Whether the operand of a per-logit op that is not the logits is a scalar constant or a
// [vocab] weight that can be sharded like the LM head's rows.
bool isShardableVocabVector(Value value, int64_t vocab) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type)
    return false;
  if (type.getNumElements() == 1 && matchPattern(value, m_Constant()))
    return true;
  return type.getRank() == 1 && type.getDimSize(0) == vocab &&
         (value.getDefiningOp<tfm::WeightOp>() || value.getDefiningOp<onnx::WeightOp>());
}

std::optional<LogitsTail> findLogitsTail(func::FuncOp func) {
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  for (auto [index, returned] : llvm::enumerate(ret.getOperands())) {
    SmallVector<Operation *> epilogue;
    Value value = returned;
    while (Operation *def = value.getDefiningOp()) {
      if (!def->hasOneUse())
        break;
      if (auto gather = dyn_cast<tfm::AllGatherOp>(def)) {
        auto type = cast<RankedTensorType>(gather.getOutput().getType());
        if (!gather.getInput().getDefiningOp<tfm::LmHeadOp>() || !gather.getSizes() ||
            static_cast<int64_t>(gather.getAxis()) != type.getRank() - 1)
          break;
        std::reverse(epilogue.begin(), epilogue.end());
        return LogitsTail{gather, epilogue, static_cast<unsigned>(index)};
      }
      StringRef name = def->getName().getStringRef();
      auto resultType = dyn_cast<RankedTensorType>(def->getResult(0).getType());
      if (def->getNumResults() != 1 || !resultType || resultType.getRank() < 1)
        break;
      int64_t vocab = resultType.getShape().back();
      // A Cast to a float type, or the Tanh of Gemma-2's logit cap: each logit alone.
      if ((name == "onnx.Cast" && isa<FloatType>(resultType.getElementType())) ||
          name == "onnx.Tanh") {
        epilogue.push_back(def);
        value = def->getOperand(0);
        continue;
      }
      if (name != "onnx.Add" && name != "onnx.Sub" && name != "onnx.Mul" && name != "onnx.Div")
        break;
      // The logits are the operand of the result's type; the other is what may be sharded.
      Value lhs = def->getOperand(0), rhs = def->getOperand(1);
      bool logitsLeft = lhs.getType() == resultType && isShardableVocabVector(rhs, vocab);
      bool logitsRight = rhs.getType() == resultType && isShardableVocabVector(lhs, vocab);
      if (logitsLeft == logitsRight)
        break;
      epilogue.push_back(def);
      value = logitsLeft ? lhs : rhs;
    }
  }
  return std::nullopt;
}

// A [vocab] vector's shard as the LM head's rows: a #tfm.shard weight, or the scalar itself.
Value shardVocabVector(OpBuilder &builder, Value value, ArrayRef<int64_t> sizes) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() != 1 || type.getNumElements() == 1)
    return value;
  SmallVector<int64_t> offsets;
  int64_t at = 0;
  for (int64_t size : sizes) {
    offsets.push_back(at);
    at += size;
  }
  Attribute shard = tfm::ShardAttr::get(builder.getContext(), 0, offsets, sizes, 1);
  if (auto weight = value.getDefiningOp<tfm::WeightOp>()) {
    FailureOr<Value> sharded = weight.withTransforms(builder, {shard});
    return succeeded(sharded) ? *sharded : Value();
  }
  auto weight = value.getDefiningOp<onnx::WeightOp>();
  if (!weight)
    return Value();
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointAfter(weight);
  auto created = tfm::WeightOp::create(builder, weight.getLoc(), weight.getName(), type,
                                       ArrayRef<Attribute>{shard});
  if (failed(verify(created))) {
    created->erase();
    return Value();
  }
  return created.getOutput();
}

// Makes `greedy` (a copy of a program whose logits tail is `tail`) return the rank's shard
// of the logits: the gather dropped, the per-logit ops on the shard.
LogicalResult returnLocalLogits(func::FuncOp greedy, LogitsTail tail) {
  OpBuilder builder(greedy.getContext());
  SmallVector<int64_t> sizes(*tail.gather.getSizes());
  Value local = tail.gather.getInput();
  Value full = tail.gather.getOutput();
  for (Operation *op : tail.epilogue) {
    builder.setInsertionPoint(op);
    for (OpOperand &operand : op->getOpOperands()) {
      if (operand.get() == full) {
        operand.set(local);
        continue;
      }
      Value whole = operand.get();
      Value sharded = shardVocabVector(builder, whole, sizes);
      if (!sharded)
        return op->emitError("tp-shard: cannot shard this operand of the logits like the LM "
                             "head's vocabulary");
      operand.set(sharded);
      // The whole vector, now unread here, would otherwise stay in the program.
      if (Operation *def = whole.getDefiningOp();
          def && whole.use_empty() && isa<tfm::WeightOp, onnx::WeightOp>(def))
        def->erase();
    }
    full = op->getResult(0);
    full.setType(withDim(full.getType(), -1, sizes[0]));
    local = full;
  }
  auto ret = cast<func::ReturnOp>(greedy.getBody().front().getTerminator());
  ret->setOperand(tail.resultIndex, local);
  tail.gather->erase();
  greedy.setType(FunctionType::get(greedy.getContext(), greedy.getArgumentTypes(),
                                   ret.getOperandTypes()));
  greedy.setResultAttr(tail.resultIndex, "onnx.name", builder.getStringAttr(kLocalLogitsName));
  return success();
}

} // namespace

// Greedy decoding needs each rank's best token, not the gathered logits: prefill_greedy and
// decode_greedy are prefill and decode returning the rank's shard of the logits instead
// (the generator combines the shards' argmaxes with one all-reduce). The weights are
// shared with prefill and decode (the plan stores a weight once per transform list), and
// the KV cache layers too. Returns the vocabulary split, or nothing when the programs'
// logits are not a vocabulary-parallel LM head's.
FailureOr<std::optional<SmallVector<int64_t>>> addGreedyPrograms(ModuleOp module) {
  std::optional<SmallVector<int64_t>> none;
  auto prefill = module.lookupSymbol<func::FuncOp>("prefill");
  auto decode = module.lookupSymbol<func::FuncOp>("decode");
  if (!prefill || !decode || module.lookupSymbol("prefill_greedy") ||
      module.lookupSymbol("decode_greedy"))
    return none;
  std::optional<LogitsTail> prefillTail = findLogitsTail(prefill);
  std::optional<LogitsTail> decodeTail = findLogitsTail(decode);
  if (!prefillTail || !decodeTail ||
      *prefillTail->gather.getSizes() != *decodeTail->gather.getSizes())
    return none;
  SmallVector<int64_t> sizes(*prefillTail->gather.getSizes());
  OpBuilder builder(module.getContext());
  builder.setInsertionPointAfter(decode);
  for (func::FuncOp func : {prefill, decode}) {
    auto greedy = cast<func::FuncOp>(builder.clone(*func));
    greedy.setSymName((func.getSymName() + "_greedy").str());
    std::optional<LogitsTail> tail = findLogitsTail(greedy);
    if (!tail || failed(returnLocalLogits(greedy, *tail)))
      return failure();
  }
  return std::optional<SmallVector<int64_t>>(sizes);
}

} // namespace dsc
