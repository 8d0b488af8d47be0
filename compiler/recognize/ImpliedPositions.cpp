#include "compiler/recognize/ImpliedPositions.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;

namespace dsc {

Value buildImpliedPositions(OpBuilder &builder, Location loc, Value mask, Value tokens) {
  auto i64 = builder.getI64Type();
  auto vector = [&](int64_t n) { return RankedTensorType::get({n}, i64); };
  auto constant = [&](int64_t value) -> Value {
    return onnx::ConstantOp::create(builder, loc, vector(1),
                                    DenseElementsAttr::get(vector(1), ArrayRef<int64_t>{value}));
  };
  auto scalarConstant = [&](int64_t value) -> Value {
    auto scalar = RankedTensorType::get({}, i64);
    return onnx::ConstantOp::create(builder, loc, scalar,
                                    DenseElementsAttr::get(scalar, ArrayRef<int64_t>{value}));
  };
  auto scalarDim = [&](Value shape, int64_t index) -> Value {
    return onnx::GatherOp::create(builder, loc, RankedTensorType::get({}, i64), shape,
                                  scalarConstant(index), builder.getI64IntegerAttr(0));
  };
  // [batch, new] or [batch, new, features]: only the first two dimensions are read.
  Value tokensShape = onnx::ShapeOp::create(builder, loc, vector(2), tokens, IntegerAttr(),
                                            builder.getI64IntegerAttr(2));
  Value fresh = scalarDim(tokensShape, 1);
  Value batch = scalarDim(tokensShape, 0);
  Value total = fresh, start = scalarConstant(0);
  if (mask) {
    Value maskShape =
        onnx::ShapeOp::create(builder, loc, vector(2), mask, IntegerAttr(), IntegerAttr());
    total = scalarDim(maskShape, 1);
    start = onnx::SubOp::create(builder, loc, RankedTensorType::get({}, i64), total, fresh);
  }
  Value range = onnx::RangeOp::create(builder, loc, RankedTensorType::get({ShapedType::kDynamic}, i64),
                                      start, total, scalarConstant(1));
  Value row = onnx::UnsqueezeOp::create(
      builder, loc, RankedTensorType::get({1, ShapedType::kDynamic}, i64), range, constant(0));
  Value zero = constant(0);
  Value shape = onnx::ConcatOp::create(
      builder, loc, vector(2),
      ValueRange{onnx::UnsqueezeOp::create(builder, loc, vector(1), batch, zero),
                 onnx::UnsqueezeOp::create(builder, loc, vector(1), fresh, zero)},
      builder.getI64IntegerAttr(0));
  auto positions = onnx::ExpandOp::create(
      builder, loc, RankedTensorType::get({ShapedType::kDynamic, ShapedType::kDynamic}, i64),
      row, shape);
  positions->setAttr(kImpliedPositionsAttr, builder.getUnitAttr());
  return positions;
}

bool computedFromLengthsAlone(Value value, llvm::SmallVectorImpl<Operation *> *lengthReads) {
  SmallVector<Value> work = {value};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Value next = work.pop_back_val();
    Operation *def = next.getDefiningOp();
    if (!def)
      return false;
    if (!seen.insert(def).second)
      continue;
    if (isa<onnx::ShapeOp, onnx::SizeOp>(def)) {
      if (lengthReads)
        lengthReads->push_back(def);
      continue;
    }
    if (def->getNumRegions() != 0)
      return false;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return true;
}

BlockArgument tokenIdsArgument(func::FuncOp func) {
  BlockArgument ids;
  func.walk([&](tfm::EmbeddingOp embedding) {
    Value value = embedding.getIds();
    while (Operation *def = value.getDefiningOp()) {
      if (!isa<onnx::CastOp, onnx::ReshapeOp, onnx::SqueezeOp, onnx::UnsqueezeOp,
               onnx::IdentityOp, onnx::FlattenOp>(def))
        break;
      value = def->getOperand(0);
    }
    if (!ids)
      ids = dyn_cast<BlockArgument>(value);
  });
  if (ids)
    return ids;
  for (BlockArgument argument : func.getArguments())
    if (auto name = func.getArgAttrOfType<StringAttr>(argument.getArgNumber(), "onnx.name");
        name && name.getValue() == "input_ids")
      return argument;
  return {};
}

} // namespace dsc
