// dsc-recognize-layers: the matching helpers its patterns share.
#include "compiler/recognize/LayerMatching.h"

#include "compiler/lowering/RuntimeTypes.h"
#include "ops/Ops.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"

#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <functional>
#include <map>
#include <optional>

using namespace mlir;

namespace dsc::layers {


// A one-element constant (any rank), as a double.
std::optional<double> scalarConstant(Value value) {
  auto constant = defining<onnx::ConstantOp>(value);
  if (!constant)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || dense.getNumElements() != 1)
    return std::nullopt;
  if (isa<FloatType>(dense.getElementType()))
    return (*dense.getValues<APFloat>().begin()).convertToDouble();
  if (isa<IntegerType>(dense.getElementType()))
    return static_cast<double>((*dense.getValues<APInt>().begin()).getSExtValue());
  return std::nullopt;
}

bool near(std::optional<double> value, double expected, double tolerance) {
  return value && std::fabs(*value - expected) <= tolerance * std::max(1.0, std::fabs(expected));
}

RankedTensorType rankedFloat(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType()) ? type : RankedTensorType();
}

// A float-to-float Cast (the fp32 round trips exporters put around norms) looked through.
Value throughCast(Value value) {
  if (auto cast = defining<onnx::CastOp>(value))
    if (isa<FloatType>(getElementTypeOrSelf(cast.getInput().getType())) &&
        isa<FloatType>(getElementTypeOrSelf(cast.getType())))
      return cast.getInput();
  return value;
}

// The users of `value`, which must all be in `group`.
bool usedOnlyBy(Value value, const llvm::SmallPtrSetImpl<Operation *> &group) {
  return llvm::all_of(value.getUsers(), [&](Operation *user) { return group.contains(user); });
}

// Axes of a Reduce op (operand or default), normalised against `rank`.
std::optional<SmallVector<int64_t>> reduceAxes(Value axes, int64_t rank) {
  if (!axes || isa<NoneType>(axes.getType()))
    return std::nullopt;
  auto constant = defining<onnx::ConstantOp>(axes);
  if (!constant)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense)
    return std::nullopt;
  SmallVector<int64_t> result;
  for (APInt axis : dense.getValues<APInt>()) {
    int64_t a = axis.getSExtValue();
    result.push_back(a < 0 ? a + rank : a);
  }
  return result;
}

// A ReduceMean over the last dimension only, keeping it.
bool isLastAxisMean(onnx::ReduceMeanOp mean) {
  auto type = dyn_cast<RankedTensorType>(mean.getData().getType());
  if (!type || mean.getKeepdims() != 1)
    return false;
  std::optional<SmallVector<int64_t>> axes = reduceAxes(mean.getAxes(), type.getRank());
  return axes && axes->size() == 1 && axes->front() == type.getRank() - 1;
}

// The other operand of a binary op, when one of them is `value`.
Value otherOperand(Operation *op, Value value) {
  if (op->getNumOperands() != 2)
    return {};
  if (op->getOperand(0) == value)
    return op->getOperand(1);
  if (op->getOperand(1) == value)
    return op->getOperand(0);
  return {};
}

Operation *singleUser(Value value) {
  if (!value.hasOneUse())
    return nullptr;
  return *value.getUsers().begin();
}

// A weight as a tfm.weight (optionally transposed [in, out] -> [out, in]), created next to
// the onnx.Weight so that it dominates every use.
Value tfmWeight(PatternRewriter &rewriter, onnx::WeightOp weight, bool transpose) {
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointAfter(weight);
  SmallVector<Attribute> transforms;
  if (transpose)
    transforms.push_back(tfm::TransposeAttr::get(rewriter.getContext(), {1, 0}));
  ArrayAttr transformList = transforms.empty() ? ArrayAttr() : rewriter.getArrayAttr(transforms);
  // One tfm.weight per weight and transforms: the earlier ones sit right after the onnx.Weight.
  for (Operation *op = weight->getNextNode(); op && isa<tfm::WeightOp>(op); op = op->getNextNode()) {
    auto existing = cast<tfm::WeightOp>(op);
    if (existing.getName() == weight.getName() && existing.getTransformsAttr() == transformList)
      return existing;
  }
  return tfm::WeightOp::create(rewriter, weight.getLoc(), weight.getName(),
                               cast<RankedTensorType>(weight.getType()), transforms);
}

// A 1-D weight of `size` elements (a norm's scale or bias, a linear bias).
onnx::WeightOp vectorWeight(Value value, int64_t size) {
  auto weight = defining<onnx::WeightOp>(value);
  if (!weight)
    return {};
  auto type = cast<RankedTensorType>(weight.getType());
  if (type.getRank() != 1 || (size >= 0 && type.getDimSize(0) != size) ||
      !isa<FloatType>(type.getElementType()))
    return {};
  return weight;
}

bool isScalarConstant(Value value) {
  auto constant = value.getDefiningOp<onnx::ConstantOp>();
  auto type = constant ? dyn_cast<RankedTensorType>(constant.getType()) : RankedTensorType();
  return type && type.getNumElements() == 1;
}

// The value is a graph output, possibly through a float Cast (GPT-J's logits) or a
// monotonic cap, cap * tanh(x / cap) (Gemma-2's final_logit_softcapping), which keeps
// every row's order of the vocabulary.
bool returnsValue(Value value) {
  return llvm::any_of(value.getUsers(), [&](Operation *user) {
    if (isa<func::ReturnOp, onnx::YieldOp>(user))
      return true;
    if (auto cast = dyn_cast<onnx::CastOp>(user))
      return throughCast(cast.getOutput()) == value && returnsValue(cast.getOutput());
    bool byPositiveScalar = isa<onnx::DivOp, onnx::MulOp>(user) &&
                            user->getOperand(0) == value &&
                            isScalarConstant(user->getOperand(1)) &&
                            scalarConstant(user->getOperand(1)).value_or(0) > 0;
    if ((byPositiveScalar || isa<onnx::TanhOp>(user)) && value.hasOneUse())
      return returnsValue(user->getResult(0));
    return false;
  });
}


// A float elementwise op of one tensor and scalars (activation subgraphs, residual
// branches).
bool isElementwise(Operation *op) {
  return isa<onnx::AddOp, onnx::SubOp, onnx::MulOp, onnx::DivOp, onnx::PowOp, onnx::NegOp,
             onnx::SqrtOp, onnx::ErfOp, onnx::TanhOp, onnx::SigmoidOp>(op) ||
         (isa<onnx::CastOp>(op) && isa<FloatType>(getElementTypeOrSelf(op->getResult(0))) &&
          isa<FloatType>(getElementTypeOrSelf(op->getOperand(0))));
}

// staticIntegers, on tensors: every op of the chain is run with the runtime's kernel, as
// dsc-fold-constants does, with a Shape known where the dimensions it reads are static.
static std::optional<dsrt::OwnedTensor> staticTensor(Value value, int depth) {
  constexpr int64_t kMaxElements = 64;
  Operation *op = value.getDefiningOp();
  if (!op || depth > 24 || !op->getDialect() || op->getDialect()->getNamespace() != "onnx" ||
      op->getNumResults() != 1)
    return std::nullopt;
  DenseElementsAttr dense;
  if (matchPattern(value, m_Constant(&dense))) {
    if (dense.getNumElements() > kMaxElements)
      return std::nullopt;
    return tensorFromAttr(dense);
  }
  // A Shape's dimensions [start, end), or those a Gather of constant indices picks of them.
  onnx::ShapeOp shape = dyn_cast<onnx::ShapeOp>(op);
  std::optional<llvm::SmallVector<int64_t>> picked;
  if (auto gather = dyn_cast<onnx::GatherOp>(op); gather && gather.getAxis() == 0) {
    shape = gather.getData().getDefiningOp<onnx::ShapeOp>();
    DenseIntElementsAttr indices;
    if (shape && matchPattern(gather.getIndices(), m_Constant(&indices)) &&
        cast<mlir::ShapedType>(gather.getIndices().getType()).getRank() <= 1) {
      picked.emplace();
      for (const llvm::APInt &index : indices.getValues<llvm::APInt>())
        picked->push_back(index.getSExtValue());
    } else {
      shape = nullptr;
    }
  }
  if (shape) {
    auto type = dyn_cast<mlir::RankedTensorType>(shape.getData().getType());
    if (!type)
      return std::nullopt;
    int64_t rank = type.getRank(), start = shape.getStart().value_or(0),
            end = shape.getEnd().value_or(rank);
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
    llvm::SmallVector<int64_t> range;
    for (int64_t d = start; d < end; ++d)
      range.push_back(d);
    if (picked) {
      llvm::SmallVector<int64_t> chosen;
      for (int64_t index : *picked) {
        int64_t at = index < 0 ? index + int64_t(range.size()) : index;
        if (at < 0 || at >= int64_t(range.size()))
          return std::nullopt;
        chosen.push_back(range[at]);
      }
      range = chosen;
    }
    llvm::SmallVector<int64_t> dims;
    for (int64_t d : range) {
      if (type.isDynamicDim(d))
        return std::nullopt;
      dims.push_back(type.getDimSize(d));
    }
    if (picked && cast<mlir::ShapedType>(op->getOperand(1).getType()).getRank() == 0) {
      dsrt::OwnedTensor scalar(dsrt::DType::I64, {});
      *reinterpret_cast<int64_t *>(scalar.storage.data()) = dims.front();
      return scalar;
    }
    dsrt::OwnedTensor out(dsrt::DType::I64, {static_cast<int64_t>(dims.size())});
    std::copy(dims.begin(), dims.end(), reinterpret_cast<int64_t *>(out.storage.data()));
    return out;
  }
  auto resultType = dyn_cast<mlir::RankedTensorType>(value.getType());
  if (!resultType || !resultType.getElementType().isInteger())
    return std::nullopt;
  std::vector<dsrt::OwnedTensor> operands(op->getNumOperands());
  std::vector<dsrt::TensorRef> refs(op->getNumOperands());
  dsrt::ops::Inputs inputs;
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    if (isa<mlir::NoneType>(operand.getType())) {
      inputs.push_back(nullptr);
      continue;
    }
    std::optional<dsrt::OwnedTensor> known = staticTensor(operand, depth + 1);
    if (!known)
      return std::nullopt;
    operands[i] = std::move(*known);
    refs[i] = operands[i].ref();
    inputs.push_back(&refs[i]);
  }
  mlir::FailureOr<std::vector<dsrt::OwnedTensor>> results =
      runKernelOnce(op, inputs, kMaxElements);
  if (failed(results))
    return std::nullopt;
  return std::move(results->front());
}

std::optional<llvm::SmallVector<int64_t>> staticIntegers(Value value) {
  std::optional<dsrt::OwnedTensor> tensor = staticTensor(value, 0);
  if (!tensor)
    return std::nullopt;
  llvm::SmallVector<int64_t> out;
  for (int64_t i = 0, n = dsrt::elementCount(tensor->shape); i < n; ++i) {
    switch (tensor->dtype) {
    case dsrt::DType::I64: out.push_back(reinterpret_cast<const int64_t *>(tensor->storage.data())[i]); break;
    case dsrt::DType::I32: out.push_back(reinterpret_cast<const int32_t *>(tensor->storage.data())[i]); break;
    default: return std::nullopt;
    }
  }
  return out;
}

} // namespace dsc::layers
