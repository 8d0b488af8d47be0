// How many tokens a model's position tables can serve. A learned position table (GPT-2's wpe,
// OPT's and XGLM's tables offset by 2, BigCode's, GPT-Neo's) fails at the first position past
// its rows, which no shape shows: the graph takes position_ids (or computes them from the
// mask), so every split the shape probes try runs. Without config.json beside the model the
// plan's max_seq_len would default past the table, and a long request would fail mid-step
// ("token id 1024 is outside the vocabulary") and take the step's other requests with it.
#ifndef DSC_COMPILER_LOWERING_POSITIONTABLES_H
#define DSC_COMPILER_LOWERING_POSITIONTABLES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cstdint>
#include <optional>

namespace dsc {

struct PositionTableLimit {
  int64_t tokens;            // the most cached + new tokens a sequence can hold
  mlir::Operation *lookup;   // the tfm.embedding or onnx.Gather that bounds it
  int64_t rows;              // its table's rows
};

// The tightest limit over the lookups in `func` (tfm.embedding ids, onnx.Gather indices along
// axis 0, of a table with static rows) whose indices are the tokens' positions plus a
// constant, through casts, views and constant offsets: the position_ids input, the implied
// positions recognition builds, or OPT's cumsum over the padding mask. None when no lookup
// reads positions so.
std::optional<PositionTableLimit> positionTableLimit(mlir::func::FuncOp func);

// Set on a function by dsc-recognize-attention: the most tokens in all for which the
// attentions it recognised hold, where they read a value an If chooses by the sequence's
// length (LongRoPE's rotary tables: the probes proved the short one). dsc-lower-onnx-to-plan
// bounds max-seq-len by it as by a position table.
inline constexpr const char *kLongestByLengthBranchesAttr = "dsc.longest_by_length_branches";

} // namespace dsc

#endif
