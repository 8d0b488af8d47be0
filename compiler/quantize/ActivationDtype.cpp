// dsc-activation-dtype: f16/bf16 values between an attention or a gated linear and the
// linear layers that read them, in the session programs (docs/transformer-ops.md,
// "Activation dtype"). The type is the plan's: both backends round where the value is
// written and widen where it is read.
#include "compiler/quantize/HalfDtype.h"
#include "compiler/quantize/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace dsc {
#define GEN_PASS_DEF_ACTIVATIONDTYPE
#include "compiler/quantize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// A program whose attention keeps its keys and values in the session's cache (prefill,
// decode): the export's own interface (`forward`, past and present as graph values) keeps
// the types the export gave it.
bool isSessionProgram(func::FuncOp function) {
  bool session = false;
  function.walk([&](tfm::AttentionOp attention) {
    if (attention.getCacheLayer() && attention.getPast().empty())
      session = true;
  });
  return session;
}

// Only linear layers read `value`, each as its input (never as a residual, a bias or a
// norm's parameter) and with no norm prologue (whose kernels normalise f32 rows), and
// nothing returns it.
bool onlyLinearsRead(Value value) {
  if (value.use_empty())
    return false;
  for (OpOperand &use : value.getUses()) {
    auto linear = dyn_cast<tfm::LinearOp>(use.getOwner());
    if (!linear || use.getOperandNumber() != 0 || linear.getNorm() ||
        linear.getResidual() == value)
      return false;
  }
  return true;
}

void narrow(Value value, Type element) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getElementType().isF32())
    value.setType(type.clone(element));
}

struct ActivationDtypePass : impl::ActivationDtypeBase<ActivationDtypePass> {
  using ActivationDtypeBase::ActivationDtypeBase;

  void runOnOperation() override {
    Type element;
    if (failed(parseHalfDtype(getOperation(), dtype, "the activation dtype", element)))
      return signalPassFailure();
    if (!element)
      return;
    getOperation().walk([&](func::FuncOp function) {
      if (!isSessionProgram(function))
        return;
      function.walk([&](Operation *op) {
        if (auto attention = dyn_cast<tfm::AttentionOp>(op)) {
          // The session's own attention: a cross-attention (the encoder's cached keys) and
          // one with a bias (T5's relative positions) run the prefill kernel for their
          // decode steps too, which writes f32 (codegen/kernels/AttentionRules.cpp).
          const bool session = attention.getCacheLayer() && attention.getPast().empty() &&
                               !attention.getBias() &&
                               !attention->hasAttr("tfm.cross_keys");
          if (session && onlyLinearsRead(attention.getOutput()))
            narrow(attention.getOutput(), element);
        } else if (auto linear = dyn_cast<tfm::LinearOp>(op)) {
          if (linear.getGated() && onlyLinearsRead(linear.getOutput()))
            narrow(linear.getOutput(), element);
        }
      });
    });
  }
};

} // namespace
} // namespace dsc
