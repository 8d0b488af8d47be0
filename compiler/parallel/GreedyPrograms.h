// tp-shard's greedy programs: prefill_greedy and decode_greedy (GreedyPrograms.cpp).
#ifndef DSC_COMPILER_PARALLEL_GREEDYPROGRAMS_H
#define DSC_COMPILER_PARALLEL_GREEDYPROGRAMS_H

#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace dsc {

// Adds prefill_greedy and decode_greedy to a sharded module whose prefill and decode end in
// a vocabulary-parallel LM head's gathered logits: copies that return each rank's shard
// (output `local_logits`). Returns the vocabulary split, nothing when the programs have no
// such head; fails only on errors already emitted.
mlir::FailureOr<std::optional<llvm::SmallVector<int64_t>>> addGreedyPrograms(mlir::ModuleOp module);

} // namespace dsc

#endif
