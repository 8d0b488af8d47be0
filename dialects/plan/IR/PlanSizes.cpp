// Sizes in the plan dialect: bytes of buffers, bounds of runtime sizes, mixed
// static/dynamic lists.
#include "dialects/plan/IR/PlanDialect.h"

#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace dsc::plan {

static bool isDyn(int64_t value) { return ShapedType::isDynamic(value); }

//===----------------------------------------------------------------------===//
// Size helpers
//===----------------------------------------------------------------------===//

int64_t getElementByteSize(Type type) {
  if (!type.isIntOrFloat() || type.getIntOrFloatBitWidth() % 8 != 0)
    return 0;
  return type.getIntOrFloatBitWidth() / 8;
}

std::optional<int64_t> getByteSize(Value buffer) {
  if (auto op = buffer.getDefiningOp<BufferOp>())
    return static_cast<int64_t>(op.getSize());
  if (auto op = buffer.getDefiningOp<WeightOp>()) {
    auto type = cast<RankedTensorType>(op.getTensorType());
    return type.getNumElements() * getElementByteSize(type.getElementType());
  }
  return std::nullopt;
}

// An upper bound of `expr` for symbols bounded by `symbols` (all sizes, so non-negative).
static std::optional<int64_t> boundOf(AffineExpr expr, ArrayRef<std::optional<int64_t>> symbols) {
  if (auto constant = dyn_cast<AffineConstantExpr>(expr)) {
    if (constant.getValue() < 0)
      return std::nullopt; // a negative term breaks monotonicity
    return constant.getValue();
  }
  if (auto symbol = dyn_cast<AffineSymbolExpr>(expr))
    return symbols[symbol.getPosition()];
  auto binary = dyn_cast<AffineBinaryOpExpr>(expr);
  if (!binary)
    return std::nullopt;
  std::optional<int64_t> lhs = boundOf(binary.getLHS(), symbols);
  if (!lhs)
    return std::nullopt;
  auto divisor = dyn_cast<AffineConstantExpr>(binary.getRHS());
  switch (expr.getKind()) {
  case AffineExprKind::Add:
  case AffineExprKind::Mul: {
    std::optional<int64_t> rhs = boundOf(binary.getRHS(), symbols);
    if (!rhs)
      return std::nullopt;
    int64_t result;
    bool overflow = expr.getKind() == AffineExprKind::Add
                        ? llvm::AddOverflow(*lhs, *rhs, result)
                        : llvm::MulOverflow(*lhs, *rhs, result);
    return overflow ? std::nullopt : std::optional<int64_t>(result);
  }
  case AffineExprKind::FloorDiv:
    if (!divisor || divisor.getValue() <= 0)
      return std::nullopt;
    return *lhs / divisor.getValue();
  case AffineExprKind::CeilDiv:
    if (!divisor || divisor.getValue() <= 0)
      return std::nullopt;
    return llvm::divideCeil(*lhs, divisor.getValue());
  case AffineExprKind::Mod:
    if (!divisor || divisor.getValue() <= 0)
      return std::nullopt;
    return std::min(*lhs, divisor.getValue() - 1);
  default:
    return std::nullopt;
  }
}

std::optional<int64_t> getUpperBound(Value index) {
  if (auto dim = index.getDefiningOp<DimOp>())
    return static_cast<int64_t>(dim.getMax());
  if (auto apply = index.getDefiningOp<ApplyOp>()) {
    AffineMap map = apply.getMap();
    if (map.getNumResults() != 1 || map.getNumDims() != 0 ||
        map.getNumSymbols() != apply.getOperands().size())
      return std::nullopt;
    SmallVector<std::optional<int64_t>> symbols;
    for (Value operand : apply.getOperands())
      symbols.push_back(getUpperBound(operand));
    return boundOf(map.getResult(0), symbols);
  }
  return std::nullopt;
}

std::optional<int64_t> getMixedUpperBound(ArrayRef<int64_t> statics, ValueRange dynamic,
                                          unsigned i) {
  if (!isDyn(statics[i]))
    return statics[i];
  unsigned position = llvm::count_if(statics.take_front(i), isDyn);
  if (position >= dynamic.size())
    return std::nullopt;
  return getUpperBound(dynamic[position]);
}

void dispatchMixed(ArrayRef<OpFoldResult> mixed, SmallVectorImpl<Value> &dynamic,
                   SmallVectorImpl<int64_t> &statics) {
  for (OpFoldResult entry : mixed) {
    if (auto value = dyn_cast<Value>(entry)) {
      dynamic.push_back(value);
      statics.push_back(ShapedType::kDynamic);
    } else {
      statics.push_back(cast<IntegerAttr>(cast<Attribute>(entry)).getInt());
    }
  }
}

SmallVector<OpFoldResult> getMixed(MLIRContext *context, ArrayRef<int64_t> statics,
                                   ValueRange dynamic) {
  SmallVector<OpFoldResult> mixed;
  unsigned next = 0;
  Builder builder(context);
  for (int64_t value : statics) {
    if (isDyn(value) && next < dynamic.size())
      mixed.push_back(dynamic[next++]);
    else
      mixed.push_back(builder.getI64IntegerAttr(value));
  }
  return mixed;
}

} // namespace dsc::plan
