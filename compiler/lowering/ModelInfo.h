// What `dsc` tells the runtime's generator about a model: the roles of the program inputs
// and outputs, the special tokens, the forward program's past/present pairs, and the
// tokenizer found beside the model (docs/transformer-ops.md).
#ifndef DSC_COMPILER_LOWERING_MODELINFO_H
#define DSC_COMPILER_LOWERING_MODELINFO_H

#include "plan_generated.h"

#include "mlir/IR/Location.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace dsc {

// Fills plan.model from the programs already in `plan`, and plan.tokenizer_json from
// `modelDirectory`/tokenizer.json. `modelDirectory`'s config.json and generation_config.json
// give the special tokens; a file that is present but malformed is an error at `loc`.
// A plan limit of more tokens than config.json's position count is an error for models with
// a learned position table (the lookup would fail at run time), a warning for the others.
mlir::LogicalResult describeModel(dsp::PlanT &plan, const std::string &modelDirectory,
                                  int64_t maxSeqLen, mlir::Location loc);

// The positions config.json beside the model gives (max_position_embeddings, or GPT-2's
// n_positions); none when there is no such file or number (a malformed file is reported by
// describeModel).
std::optional<int64_t> configuredPositions(const std::string &modelDirectory);

// The norms' epsilon config.json beside the model gives (rms_norm_eps, layer_norm_eps ...);
// none when there is no such file or positive number.
std::optional<double> configuredNormEpsilon(const std::string &modelDirectory);

// Records the greedy programs' local logits and each rank's shard of the vocabulary
// (`vocabSizes`, the tp-shard pass's split) in plan.model, when the plan has prefill_greedy
// and decode_greedy programs with a `local_logits` output.
void describeVocabularyShards(dsp::PlanT &plan, llvm::ArrayRef<int64_t> vocabSizes);

} // namespace dsc

#endif
