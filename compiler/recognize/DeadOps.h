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

// The ops below `root` that would be left without uses and effects once the others went:
// those without uses, then those whose every user is one. A rewrite's leftovers are still in
// place, so a pass can ask whether a value outlives them before anything is erased.
inline llvm::DenseSet<mlir::Operation *> opsLeftDead(mlir::Operation *root) {
  llvm::DenseSet<mlir::Operation *> dead;
  // A user inside a dead op (an If's branch) goes with it.
  auto gone = [&](mlir::Operation *op) {
    for (; op && op != root; op = op->getParentOp())
      if (dead.contains(op))
        return true;
    return false;
  };
  auto erasable = [&](mlir::Operation *op) {
    return op != root && !op->hasTrait<mlir::OpTrait::IsTerminator>() &&
           mlir::wouldOpBeTriviallyDead(op) && llvm::all_of(op->getUsers(), gone);
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
    // The producers of what it reads, its nested ops' reads included.
    op->walk([&](mlir::Operation *reader) {
      for (mlir::Value operand : reader->getOperands())
        if (mlir::Operation *producer = operand.getDefiningOp())
          if (!gone(producer) && erasable(producer))
            worklist.push_back(producer);
    });
  }
  return dead;
}

// Erases those ops (opsLeftDead) in one pass: users before their producers (the reverse of
// a post-order walk), and an op inside a dead one with it.
inline void eraseDeadOps(mlir::Operation *root) {
  llvm::DenseSet<mlir::Operation *> dead = opsLeftDead(root);
  if (dead.empty())
    return;
  llvm::SmallVector<mlir::Operation *> outermost;
  root->walk<mlir::WalkOrder::PostOrder>([&](mlir::Operation *op) {
    if (!dead.contains(op))
      return;
    for (mlir::Operation *parent = op->getParentOp(); parent && parent != root;
         parent = parent->getParentOp())
      if (dead.contains(parent))
        return;
    outermost.push_back(op);
  });
  for (mlir::Operation *op : llvm::reverse(outermost))
    op->erase();
}

} // namespace dsc

#endif
