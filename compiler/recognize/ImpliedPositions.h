// Positions that an export computes inside its graph instead of taking position_ids:
// transformers without position_ids rotates the new tokens (or looks up a learned position
// table) at past + 0 .. past + new - 1 (its cache_position), whatever the padding. The recognised attention keeps that meaning
// in the export's own program through a small chain of shape ops; the session programs,
// whose positions the generator computes from the mask as transformers' generate does,
// take a position_ids input in its place (docs/transformer-ops.md).
#ifndef DSC_COMPILER_RECOGNIZE_IMPLIEDPOSITIONS_H
#define DSC_COMPILER_RECOGNIZE_IMPLIEDPOSITIONS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

namespace dsc {

// Marks the op whose result is the implied positions.
inline constexpr const char *kImpliedPositionsAttr = "dsc.implied_positions";

// [batch, new] int64 positions width(mask) - new + t for t in [0, new), batch and new
// being the first two dimensions of `tokens` (the ids [batch, new], or a query
// [batch, new, features]); without a mask (an export of the ids alone, nothing cached), t.
mlir::Value buildImpliedPositions(mlir::OpBuilder &builder, mlir::Location loc,
                                  mlir::Value mask, mlir::Value tokens);

// The token ids, by role: the graph argument an embedding lookup (tfm.embedding) reads as its
// ids, directly or through casts and views (`input_ids`, an encoder-decoder's
// `decoder_input_ids`); failing that, the argument named input_ids; else null.
mlir::BlockArgument tokenIdsArgument(mlir::func::FuncOp func);

// Whether `value` is computed from lengths alone: every path back to a graph input passes
// through a Shape or Size. Positions counted from the start (arange over the new tokens,
// past the cached ones) and T5's relative position bias qualify; RoBERTa's positions, which
// skip padding tokens (a cumsum over ids != pad), and OPT's, from the mask's values, do not.
// `lengthReads`, when given, receives the Shape and Size ops it passes through.
bool computedFromLengthsAlone(mlir::Value value,
                              llvm::SmallVectorImpl<mlir::Operation *> *lengthReads = nullptr);

} // namespace dsc

#endif
