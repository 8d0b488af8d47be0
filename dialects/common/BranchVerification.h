// The checks onnx.If and plan.if share: a one-element condition, and branches whose
// terminators yield one value per result, each of the result's element type and a shape
// compatible with it. Header-only: both dialect libraries include it.
#ifndef DSC_DIALECTS_COMMON_BRANCHVERIFICATION_H
#define DSC_DIALECTS_COMMON_BRANCHVERIFICATION_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/TypeUtilities.h"

namespace dsc {

inline llvm::LogicalResult verifyTwoWayBranch(mlir::Operation *op, mlir::Value cond) {
  if (auto type = llvm::dyn_cast<mlir::RankedTensorType>(cond.getType());
      type && type.hasStaticShape() && type.getNumElements() != 1)
    return op->emitOpError("cond must hold a single element");
  for (mlir::Region &region : op->getRegions()) {
    mlir::Operation *yield = region.front().getTerminator();
    if (yield->getNumOperands() != op->getNumResults())
      return op->emitOpError() << "a branch yields " << yield->getNumOperands()
                               << " values for " << op->getNumResults() << " results";
    for (auto [value, result] : llvm::zip(yield->getOperands(), op->getResults()))
      if (mlir::getElementTypeOrSelf(value.getType()) !=
              mlir::getElementTypeOrSelf(result.getType()) ||
          mlir::failed(mlir::verifyCompatibleShape(value.getType(), result.getType())))
        return op->emitOpError() << "a branch yields " << value.getType()
                                 << " for a result of type " << result.getType();
  }
  return mlir::success();
}

} // namespace dsc

#endif
