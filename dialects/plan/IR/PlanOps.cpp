// Verifiers and builders of the plan dialect's module-level ops (programs and the arena);
// the tensor ops' are in PlanTensorOps.cpp.
#include "dialects/plan/IR/PlanDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace dsc::plan {

void ProgramOp::build(OpBuilder &builder, OperationState &state, StringRef name) {
  state.addAttribute(getSymNameAttrName(state.name), builder.getStringAttr(name));
  state.addRegion()->emplaceBlock();
}

LogicalResult ProgramOp::verify() {
  // prefill_greedy/decode_greedy: tensor parallelism's greedy programs (tp-shard); encode:
  // an encoder-decoder's encoder; step: the serving engine's (dsc --serving).
  if (!llvm::is_contained(
          {"prefill", "decode", "forward", "prefill_greedy", "decode_greedy", "encode", "step"},
          getSymName()))
    return emitOpError() << "@" << getSymName()
                         << " is not a program the runtime runs (@prefill, @decode, @forward, "
                            "an encoder-decoder's @encode, the serving engine's @step); with "
                            "tensor parallelism also @prefill_greedy, @decode_greedy";
  Block &body = getRegion().front();
  if (body.getNumArguments() != 0)
    return emitOpError("body takes no arguments");
  if (body.empty() || !isa<ReturnOp>(body.back()))
    return emitOpError("body must end with plan.return");
  return success();
}

LogicalResult ArenaOp::verify() {
  if (getSize() % getAlignment() != 0)
    return emitOpError() << "size " << getSize() << " is not a multiple of the alignment "
                         << getAlignment();
  return success();
}

} // namespace dsc::plan

#define GET_OP_CLASSES
#include "dialects/plan/IR/PlanOps.cpp.inc"
