#include "compiler/lowering/PositionTables.h"

#include "compiler/lowering/SymbolicDims.h"
#include "compiler/recognize/ImpliedPositions.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinTypes.h"

#include <algorithm>

using namespace mlir;

namespace dsc {
namespace {

// The largest (or smallest) element of an integer constant; none for anything else.
std::optional<int64_t> constantExtreme(Value value, bool largest) {
  auto constant = value.getDefiningOp<onnx::ConstantOp>();
  auto dense = constant ? dyn_cast<DenseIntElementsAttr>(constant.getValue()) : nullptr;
  if (!dense || dense.empty())
    return std::nullopt;
  std::optional<int64_t> extreme;
  for (const APInt &element : dense.getValues<APInt>()) {
    int64_t v = element.getSExtValue();
    extreme = !extreme ? v : largest ? std::max(*extreme, v) : std::min(*extreme, v);
  }
  return extreme;
}

class PositionBounds {
public:
  explicit PositionBounds(func::FuncOp func) : func_(func), dims_(InputDims::of(func)) {}

  // c such that every element of `value` is at most total + c, total being the cached and
  // new tokens of its sequence (positions run to total - 1); none where that is not known.
  std::optional<int64_t> excessOverTotal(Value value, int depth = 0) const {
    if (depth > 32)
      return std::nullopt;
    if (auto argument = dyn_cast<BlockArgument>(value)) {
      if (argument.getOwner()->getParentOp() == func_ &&
          dims_.kindOf(argument.getArgNumber()) == InputKind::Positions)
        return -1;
      return std::nullopt;
    }
    Operation *def = value.getDefiningOp();
    if (def->hasAttr(kImpliedPositionsAttr))
      return -1;
    // Views and subsets keep the largest element (Gather's data side: it picks elements).
    if (isa<onnx::ReshapeOp, onnx::SqueezeOp, onnx::UnsqueezeOp, onnx::FlattenOp,
            onnx::IdentityOp, onnx::ExpandOp, onnx::SliceOp, onnx::TransposeOp>(def) ||
        (isa<onnx::CastOp>(def) && isa<IntegerType>(getElementTypeOrSelf(value.getType()))))
      return excessOverTotal(def->getOperand(0), depth + 1);
    if (auto gather = dyn_cast<onnx::GatherOp>(def))
      return excessOverTotal(gather.getData(), depth + 1);
    // OPT: cumsum(mask) counts at most every column of the mask.
    if (auto cumsum = dyn_cast<onnx::CumSumOp>(def))
      return isMask(def->getOperand(0)) ? std::optional<int64_t>(0) : std::nullopt;
    if (isa<onnx::AddOp, onnx::SubOp>(def)) {
      bool add = isa<onnx::AddOp>(def);
      for (int side = 0; side < (add ? 2 : 1); ++side) {
        std::optional<int64_t> offset = constantExtreme(def->getOperand(1 - side), add);
        if (!offset)
          continue;
        std::optional<int64_t> bound = excessOverTotal(def->getOperand(side), depth + 1);
        if (bound)
          return add ? *bound + *offset : *bound - *offset;
      }
      return std::nullopt;
    }
    // x * mask (0 or 1) is x or 0, and 0 is at most total - 1.
    if (isa<onnx::MulOp>(def))
      for (int side = 0; side < 2; ++side)
        if (isMask(def->getOperand(1 - side)))
          if (std::optional<int64_t> bound = excessOverTotal(def->getOperand(side), depth + 1))
            return std::max<int64_t>(*bound, -1);
    return std::nullopt;
  }

private:
  bool isMask(Value value) const {
    while (auto cast = value.getDefiningOp<onnx::CastOp>())
      value = cast.getOperand();
    auto argument = dyn_cast<BlockArgument>(value);
    return argument && argument.getOwner()->getParentOp() == func_ &&
           dims_.kindOf(argument.getArgNumber()) == InputKind::Mask;
  }

  Operation *func_;
  InputDims dims_;
};

// The rows of a lookup's table, when static.
std::optional<int64_t> tableRows(Value table) {
  auto type = dyn_cast<RankedTensorType>(table.getType());
  if (!type || type.getRank() < 1 || type.isDynamicDim(0))
    return std::nullopt;
  return type.getDimSize(0);
}

} // namespace

std::optional<PositionTableLimit> positionTableLimit(func::FuncOp func) {
  for (BlockArgument argument : func.getArguments())
    if (!isa<RankedTensorType>(argument.getType()))
      return std::nullopt;  // InputDims needs ranks; lowering reports the input
  PositionBounds bounds(func);
  std::optional<PositionTableLimit> tightest;
  auto consider = [&](Operation *lookup, Value indices, Value table) {
    std::optional<int64_t> rows = tableRows(table);
    if (!rows)
      return;
    std::optional<int64_t> excess = bounds.excessOverTotal(indices);
    if (!excess)
      return;
    // total + excess <= rows - 1.
    int64_t tokens = *rows - 1 - *excess;
    if (!tightest || tokens < tightest->tokens)
      tightest = PositionTableLimit{tokens, lookup, *rows};
  };
  func.walk([&](Operation *op) {
    if (auto embedding = dyn_cast<tfm::EmbeddingOp>(op))
      consider(op, embedding.getIds(), embedding.getTable());
    else if (auto gather = dyn_cast<onnx::GatherOp>(op); gather && gather.getAxis() == 0)
      consider(op, gather.getIndices(), gather.getData());
  });
  return tightest;
}

} // namespace dsc
