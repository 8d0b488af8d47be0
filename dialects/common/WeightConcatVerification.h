// The checks tfm.concat_weights and plan.weight_concat share: two parts or more, each a
// weight op of its dialect, joined along the first dimension into the result (the same
// element type and every later dimension). Header-only: both dialect libraries include it.
#ifndef DSC_DIALECTS_COMMON_WEIGHTCONCATVERIFICATION_H
#define DSC_DIALECTS_COMMON_WEIGHTCONCATVERIFICATION_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

namespace dsc {

// `isWeight(part)`: whether the part is defined by the dialect's weight op, named `weightOp`
// in the error. `rankParts` (may be empty): rank r joins only parts [rankParts[2r],
// rankParts[2r + 1]) (expert parallelism: each rank its whole experts), and the result is
// rank 0's, as every sharded type in the IR is.
template <typename IsWeight>
llvm::LogicalResult verifyWeightConcat(mlir::Operation *op, mlir::ValueRange parts,
                                       mlir::Value result, IsWeight isWeight,
                                       llvm::StringRef weightOp,
                                       llvm::ArrayRef<int64_t> rankParts = {}) {
  if (parts.size() < 2)
    return op->emitOpError("needs two parts or more");
  const int64_t count = static_cast<int64_t>(parts.size());
  if (!rankParts.empty()) {
    if (rankParts.size() % 2 != 0)
      return op->emitOpError("rank_parts needs a first and an end part per rank");
    for (size_t r = 0; r < rankParts.size(); r += 2)
      if (rankParts[r] < 0 || rankParts[r] >= rankParts[r + 1] || rankParts[r + 1] > count)
        return op->emitOpError() << "rank " << r / 2 << "'s parts [" << rankParts[r] << ", "
                                 << rankParts[r + 1] << ") are not a range of the " << count;
  }
  const int64_t first = rankParts.empty() ? 0 : rankParts[0];
  const int64_t end = rankParts.empty() ? count : rankParts[1];
  auto out = llvm::cast<mlir::RankedTensorType>(result.getType());
  int64_t rows = 0;
  for (auto [index, part] : llvm::enumerate(parts)) {
    if (!isWeight(part))
      return op->emitOpError() << "part " << index << " is not a " << weightOp;
    auto type = llvm::cast<mlir::RankedTensorType>(part.getType());
    if (type.getElementType() != out.getElementType() || type.getRank() != out.getRank() ||
        out.getRank() < 1 || type.getShape().drop_front() != out.getShape().drop_front())
      return op->emitOpError() << "part " << index << " (" << type
                               << ") differs from the result " << out
                               << " in element type or in a dimension after the first";
    if (static_cast<int64_t>(index) >= first && static_cast<int64_t>(index) < end)
      rows += type.getDimSize(0);
  }
  if (out.getDimSize(0) != rows)
    return op->emitOpError() << "the parts have " << rows << " rows, the result " << out;
  return mlir::success();
}

} // namespace dsc

#endif
