// Shared by the recognition passes: what a rewrite leaves without users (mask and rotary
// subgraphs, the past's arithmetic) goes, so that later passes and the report see only live
// ops.
#ifndef DSC_COMPILER_RECOGNIZE_DEADOPS_H
#define DSC_COMPILER_RECOGNIZE_DEADOPS_H

#include "mlir/IR/Operation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

namespace dsc {

// Erases ops without uses and effects below `root`, children first, until nothing changes.
inline void eraseDeadOps(mlir::Operation *root) {
  bool changed = true;
  while (changed) {
    changed = false;
    llvm::SmallVector<mlir::Operation *> dead;
    root->walk<mlir::WalkOrder::PostOrder>([&](mlir::Operation *op) {
      if (op != root && !op->hasTrait<mlir::OpTrait::IsTerminator>() &&
          mlir::isOpTriviallyDead(op))
        dead.push_back(op);
    });
    for (mlir::Operation *op : llvm::reverse(dead)) {
      if (mlir::isOpTriviallyDead(op)) {
        op->erase();
        changed = true;
      }
    }
  }
}

} // namespace dsc

#endif
