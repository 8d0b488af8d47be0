// A bias computed for the export's tokens, computed again for a cached step's (SessionPrograms.h).
#include "compiler/recognize/SessionPrograms.h"
#include "compiler/recognize/ImpliedPositions.h"
#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

#include <limits>

using namespace mlir;

namespace dsc::session {

// Whether `read` (a Shape) reads dimensions of [batch, tokens] of the token ids or of a
// value computed from them (optimum's T5 measures its query projection [batch, tokens,
// features]): the token axis of the decoder's own sequence, never the encoder's, whose
// values do not depend on the ids.
static bool readsTokenAxis(Operation *read, BlockArgument ids) {
  auto shape = dyn_cast<onnx::ShapeOp>(read);
  auto type = shape ? dyn_cast<RankedTensorType>(shape.getData().getType()) : RankedTensorType();
  if (!shape || !ids || !type || type.getRank() < 2)
    return false;
  const int64_t rank = type.getRank();
  int64_t start = shape.getStart() ? *shape.getStart() : 0;
  int64_t end = shape.getEnd() ? *shape.getEnd() : rank;
  start = start < 0 ? start + rank : start;
  end = end < 0 ? end + rank : end;
  if (start < 0 || end > 2 || start >= end)
    return false;
  // Batch and tokens are dynamic; a static dimension there (heads first) is something else.
  for (int64_t d = start; d < end; ++d)
    if (!type.isDynamicDim(d))
      return false;
  SmallVector<Value> work = {shape.getData()};
  llvm::DenseSet<Operation *> seen;
  while (!work.empty()) {
    Value value = work.pop_back_val();
    if (value == ids)
      return true;
    Operation *def = value.getDefiningOp();
    if (!def || !seen.insert(def).second)
      continue;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return false;
}

// A bias computed from lengths alone (T5's relative positions) was traced for the export's
// tokens, which are all new: its queries and keys are positions 0 .. S-1 of the token ids.
// `idsReads` receives its Shape reads of the ids (S); empty, or the reason it cannot be
// computed for a cached step.
std::string biasLengthReads(func::FuncOp func, Value bias,
                            SmallVectorImpl<Operation *> &idsReads) {
  BlockArgument ids = tokenIdsArgument(func);
  SmallVector<Operation *> reads;
  if (!ids || !computedFromLengthsAlone(bias, &reads))
    return "an attention adds a bias computed from values, not from the token count alone";
  // The ops that compute it: a Shape of one of them follows from the others.
  llvm::DenseSet<Operation *> slice;
  SmallVector<Value> work = {bias};
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !slice.insert(def).second || isa<onnx::ShapeOp, onnx::SizeOp>(def))
      continue;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  for (Operation *read : reads) {
    Value of = read->getOperand(0);
    if (Operation *def = of.getDefiningOp(); def && slice.contains(def))
      continue;
    if (readsTokenAxis(read, ids)) {
      idsReads.push_back(read);
      continue;
    }
    return "an attention's bias reads the length of something other than the token ids";
  }
  if (idsReads.empty())
    return "an attention's bias does not follow the token count";
  return "";
}

// The bias of a session program's step: the queries are the last S of the mask's T
// positions and the keys all T. The bias is computed for T tokens (its reads of the ids'
// length read the mask's instead: [batch, T] as the ids are [batch, S]) and its last S
// query rows are kept.
LogicalResult biasAtSessionPositions(func::FuncOp func, std::string &why) {
  BlockArgument mask = paddingMaskArgument(func);
  BlockArgument ids = tokenIdsArgument(func);
  llvm::SetVector<Value> biases;
  func.walk([&](tfm::AttentionOp op) {
    if (op.getBias() && !isCrossAttention(op))
      biases.insert(op.getBias());
  });
  if (biases.empty())
    return success();
  if (!mask || !ids) {
    why = "an attention's bias needs the padding mask and the token ids of a cached step";
    return failure();
  }
  for (Value bias : biases) {
    SmallVector<Operation *> idsReads;
    if (why = biasLengthReads(func, bias, idsReads); !why.empty())
      return failure();
    llvm::DenseSet<Operation *> slice;
    SmallVector<Value> work = {bias};
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || !slice.insert(def).second)
        continue;
      for (Value operand : def->getOperands())
        work.push_back(operand);
    }
    for (Operation *read : idsReads) {
      // The same dimensions of the mask [batch, past + tokens] (readsTokenAxis: within 0..2).
      auto shape = cast<onnx::ShapeOp>(read);
      OpBuilder builder(read);
      auto rank = cast<RankedTensorType>(shape.getData().getType()).getRank();
      int64_t start = shape.getStart() ? *shape.getStart() : 0;
      int64_t end = shape.getEnd() ? *shape.getEnd() : rank;
      Value total = onnx::ShapeOp::create(builder, read->getLoc(), shape.getType(), mask,
                                          builder.getI64IntegerAttr(start < 0 ? start + rank : start),
                                          builder.getI64IntegerAttr(end < 0 ? end + rank : end));
      shape.getResult().replaceUsesWithIf(total, [&](OpOperand &use) {
        return slice.contains(use.getOwner());
      });
    }
    // The last S rows of the queries' axis (2 of [batch, heads, queries, keys]).
    auto type = dyn_cast<RankedTensorType>(bias.getType());
    if (!type || type.getRank() != 4) {
      why = "an attention's bias is not [batch, heads, queries, keys]";
      return failure();
    }
    OpBuilder builder(func.getContext());
    builder.setInsertionPointAfterValue(bias);
    Location loc = bias.getLoc();
    auto vector = RankedTensorType::get({1}, builder.getI64Type());
    auto constant = [&](int64_t value) -> Value {
      return onnx::ConstantOp::create(builder, loc, vector,
                                      DenseElementsAttr::get(vector, ArrayRef<int64_t>{value}));
    };
    Value fresh = onnx::ShapeOp::create(builder, loc, vector, ids, builder.getI64IntegerAttr(1),
                                        builder.getI64IntegerAttr(2));
    Value start = onnx::NegOp::create(builder, loc, vector, fresh);
    auto rows = RankedTensorType::get({type.getDimSize(0), type.getDimSize(1),
                                       ShapedType::kDynamic, ShapedType::kDynamic},
                                      type.getElementType());
    Value last = onnx::SliceOp::create(builder, loc, rows, bias, start,
                                       constant(std::numeric_limits<int64_t>::max()),
                                       constant(2), onnx::NoValueOp::create(builder, loc,
                                                                           builder.getNoneType()));
    bias.replaceUsesWithIf(last, [&](OpOperand &use) {
      return isa<tfm::AttentionOp>(use.getOwner()) && use.getOwner() != last.getDefiningOp();
    });
  }
  return success();
}

} // namespace dsc::session
