// dsc-fold-constants: see Passes.td.
#include "compiler/lowering/Passes.h"

#include "compiler/lowering/ShapeBounds.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Iterators.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace dsc {
#define GEN_PASS_DEF_FOLDCONSTANTS
#include "compiler/lowering/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

struct FoldConstantsPass : impl::FoldConstantsBase<FoldConstantsPass> {
  using FoldConstantsBase::FoldConstantsBase;

  void runOnOperation() override {
    removeNoOps();
    SmallVector<Operation *> candidates;
    getOperation().walk([&](Operation *op) {
      if (op->getDialect() && op->getDialect()->getNamespace() == "onnx" &&
          !isa<onnx::WeightOp, onnx::ConstantOp, onnx::NoValueOp, onnx::IfOp, onnx::YieldOp>(op))
        candidates.push_back(op);
    });
    // Program order: a fold makes the constants that the next candidates need.
    for (Operation *op : candidates)
      fold(op);
    // Folding leaves the constants it consumed (and shape ops of static shapes) unused.
    getOperation().walk<WalkOrder::PostOrder, mlir::ReverseIterator>([&](Operation *op) {
      if (op->getDialect() && op->getDialect()->getNamespace() == "onnx" &&
          isOpTriviallyDead(op))
        op->erase();
    });
  }

  // Uses by a terminator keep the no-op: a function's or branch's result type must match.
  void removeNoOps() {
    getOperation().walk([&](Operation *op) {
      bool noOp = isa<onnx::IdentityOp>(op);
      if (auto cast = dyn_cast<onnx::CastOp>(op))
        noOp = getElementTypeOrSelf(cast.getInput().getType()) == cast.getTo();
      if (!noOp)
        return;
      Value input = op->getOperand(0);
      op->getResult(0).replaceUsesWithIf(input, [](OpOperand &use) {
        return !use.getOwner()->hasTrait<OpTrait::IsTerminator>();
      });
    });
  }

  void fold(Operation *op) {
    llvm::StringRef name = op->getName().stripDialect();
    bool readsOnlyShapes = name == "Shape" || name == "Size";
    std::vector<dsrt::OwnedTensor> values(op->getNumOperands());
    std::vector<dsrt::TensorRef> refs(op->getNumOperands());
    dsrt::ops::Inputs inputs;
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      if (isa<NoneType>(operand.getType())) {
        inputs.push_back(nullptr);
        continue;
      }
      auto constant = operand.getDefiningOp<onnx::ConstantOp>();
      auto dense = constant ? dyn_cast<DenseElementsAttr>(constant.getValue()) : nullptr;
      auto type = dyn_cast<RankedTensorType>(operand.getType());
      if (dense) {
        values[i] = tensorFromAttr(dense);
        refs[i] = values[i].ref();
      } else if (readsOnlyShapes && type && type.hasStaticShape()) {
        refs[i] = {runtimeDType(type), dsrt::Shape(type.getShape().begin(), type.getShape().end()),
                   nullptr};
      } else {
        return;
      }
      inputs.push_back(&refs[i]);
    }
    // The verifier or the runtime reports real errors; folding only declines.
    FailureOr<std::vector<dsrt::OwnedTensor>> results = runKernelOnce(op, inputs, maxElements);
    if (failed(results))
      return;
    OpBuilder builder(op);
    for (auto [result, tensor] : llvm::zip(op->getResults(), *results)) {
      DenseElementsAttr value = attrFromTensor(op->getContext(), tensor);
      if (getElementTypeOrSelf(result.getType()) != value.getElementType())
        return;  // the kernel disagrees with the op's type; leave it to the verifier
    }
    for (auto [result, tensor] : llvm::zip(op->getResults(), *results)) {
      DenseElementsAttr value = attrFromTensor(op->getContext(), tensor);
      auto constant = onnx::ConstantOp::create(builder, op->getLoc(), value.getType(), value);
      // Uses that need the old (less precise) type keep working: the constant's type is the
      // fully static refinement of it.
      result.replaceAllUsesWith(constant.getResult());
    }
    op->erase();
  }
};

} // namespace
} // namespace dsc
