// Positions that an export computes inside its graph instead of taking position_ids:
// transformers without position_ids rotates the new tokens (or looks up a learned position
// table) at past + 0 .. past + new - 1 (its cache_position), whatever the padding. The recognised attention keeps that meaning
// in the export's own program through a small chain of shape ops; the session programs,
// whose positions the generator computes from the mask as transformers' generate does,
// take a position_ids input in its place (docs/transformer-ops.md).
#ifndef DSC_COMPILER_RECOGNIZE_IMPLIEDPOSITIONS_H
#define DSC_COMPILER_RECOGNIZE_IMPLIEDPOSITIONS_H

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

} // namespace dsc

#endif
