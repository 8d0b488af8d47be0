// The roles of a decoder's inputs and attentions, found by use, not by name (SessionPrograms.h).
#include "compiler/recognize/SessionPrograms.h"
#include "compiler/lowering/SymbolicDims.h"

using namespace mlir;

namespace dsc::session {

llvm::StringRef argName(func::FuncOp func, unsigned index) {
  auto name = func.getArgAttrOfType<StringAttr>(index, "onnx.name");
  return name ? name.getValue() : "";
}

BlockArgument namedArgument(func::FuncOp func, llvm::StringRef name) {
  for (BlockArgument argument : func.getArguments())
    if (argName(func, argument.getArgNumber()) == name)
      return argument;
  return {};
}

// An encoder-decoder's decoder reads the encoder's output: the argument the importer marks
// `dsc.cross_states` (ModelInfo finds it by shape and use).
BlockArgument crossStatesArgument(func::FuncOp func) {
  for (BlockArgument argument : func.getArguments())
    if (func.getArgAttr(argument.getArgNumber(), "dsc.cross_states"))
      return argument;
  return {};
}

// The encoder's padding mask: an integer [batch, tokens] argument as long as the encoder's
// output, as the shape bounds and the attention probe size it (InputDims).
static bool isEncoderMask(Value value) {
  auto mask = dyn_cast_or_null<BlockArgument>(value);
  auto func = mask ? dyn_cast<func::FuncOp>(mask.getOwner()->getParentOp()) : func::FuncOp();
  auto type = mask ? dyn_cast<RankedTensorType>(mask.getType()) : RankedTensorType();
  if (!func || !type || type.getRank() != 2 || !type.getElementType().isInteger() ||
      !crossStatesArgument(func))
    return false;
  return InputDims::of(func).readsSource(mask.getArgNumber());
}

// Whether `attention` attends to the keys of another sequence: its keys are computed from
// the encoder's output, not through another attention (every layer after the first reads
// the encoder's output through the residual stream), or, in optimum's branch with a cache,
// read from the cached ones under the encoder's mask.
bool isCrossAttention(tfm::AttentionOp attention) {
  if (isEncoderMask(attention.getMask()))
    return true;
  SmallVector<Value> work = {attention.getKey()};
  llvm::DenseSet<Operation *> seen;
  while (!work.empty()) {
    Value value = work.pop_back_val();
    if (auto argument = dyn_cast<BlockArgument>(value)) {
      auto func = dyn_cast<func::FuncOp>(argument.getOwner()->getParentOp());
      if (func && func.getArgAttr(argument.getArgNumber(), "dsc.cross_states"))
        return true;
      continue;
    }
    Operation *def = value.getDefiningOp();
    if (!def || isa<tfm::AttentionOp>(def) || !seen.insert(def).second)
      continue;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return false;
}

// The padding mask of the tokens the session caches, by role: the argument the
// self-attentions read as their mask. Without one, a decoder-only export's
// `attention_mask` (read by nothing but positions); an encoder-decoder's `attention_mask`
// may be the encoder's, which its cross-attentions read.
BlockArgument paddingMaskArgument(func::FuncOp func) {
  BlockArgument mask;
  func.walk([&](tfm::AttentionOp op) {
    if (!mask && !isCrossAttention(op))
      mask = dyn_cast_or_null<BlockArgument>(op.getMask());
  });
  if (mask || crossStatesArgument(func))
    return mask;
  return namedArgument(func, "attention_mask");
}

} // namespace dsc::session
