// Shared by the recognition passes: what a rewrite leaves without users (mask and rotary
// subgraphs, the past's arithmetic) goes, so that later passes and the report see only live
// ops.
#ifndef DSC_COMPILER_RECOGNIZE_DEADOPS_H
#define DSC_COMPILER_RECOGNIZE_DEADOPS_H

#include "mlir/IR/Operation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/DenseSet.h"
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

// The ops eraseDeadOps(root) would erase, without erasing them: a rewrite's leftovers are
// still in place, and a pass can ask whether a value outlives them.
inline llvm::DenseSet<mlir::Operation *> opsLeftDead(mlir::Operation *root) {
  llvm::DenseSet<mlir::Operation *> dead;
  auto erasable = [&](mlir::Operation *op) {
    return op != root && !op->hasTrait<mlir::OpTrait::IsTerminator>() &&
           mlir::wouldOpBeTriviallyDead(op) &&
           llvm::all_of(op->getUsers(), [&](mlir::Operation *user) { return dead.contains(user); });
  };
  llvm::SmallVector<mlir::Operation *> worklist;
  root->walk([&](mlir::Operation *op) {
    if (op->use_empty() && erasable(op))
      worklist.push_back(op);
  });
  while (!worklist.empty()) {
    mlir::Operation *op = worklist.pop_back_val();
    if (!dead.insert(op).second)
      continue;
    for (mlir::Value operand : op->getOperands())
      if (mlir::Operation *producer = operand.getDefiningOp())
        if (!dead.contains(producer) && erasable(producer))
          worklist.push_back(producer);
  }
  return dead;
}

} // namespace dsc

#endif
