// dsc-recognize-layers: the graph's shapes at a few probes, and the types they prove.
#include "compiler/recognize/LayerMatching.h"

#include "compiler/lowering/ShapeBounds.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <functional>
#include <map>
#include <optional>

using namespace mlir;

namespace dsc::layers {

// Batch, cached and new tokens of each probe: distinct numbers, so that a dimension equal
// at every probe does not depend on them. Optimum's merged decoder runs its cache branch
// only with one new token and its other branch only without cached tokens, so two probes
// have each.
using Probe = TokenSplit;
constexpr Probe kProbes[] = {{2, 3, 5}, {3, 4, 7}, {2, 6, 1}, {3, 5, 1}, {2, 0, 5}, {3, 0, 7}};


// Shapes of every value at each probe the function runs at (a probe it cannot run at, or a
// value whose shape depends on input values, contributes nothing).
ProbeShapes probeShapes(func::FuncOp func, ProbeCoverage &coverage) {
  ProbeShapes shapes;
  for (BlockArgument argument : func.getArguments())
    if (!isa<RankedTensorType>(argument.getType()))
      return shapes;
  InputDims inputDims = InputDims::of(func);
  for (const Probe &probe : kProbes) {
    SmallVector<SmallVector<int64_t>> inputs;
    for (unsigned index = 0; index < func.getNumArguments(); ++index)
      inputs.push_back(inputDims.shapeAt(index, probe));
    FailureOr<ShapeBounds> bounds;
    {
      ScopedDiagnosticHandler silence(func.getContext(), [](Diagnostic &) { return success(); });
      bounds = evaluateShapeBounds(func, inputs);
    }
    if (failed(bounds))
      continue;
    for (auto &[value, entry] : bounds->entries) {
      if (!entry.bounded)
        continue;
      shapes[value].push_back(entry.shape);
      if (probe.fresh > 1)
        coverage.multiToken.insert(value);
      if (probe.past > 0)
        coverage.withPast.insert(value);
    }
  }
  return shapes;
}

// The type the probes prove for `value`, or null when fewer than two probes saw it or they
// disagree on its rank.
RankedTensorType provenType(Value value, const ProbeShapes &shapes,
                            const ProbeCoverage &coverage) {
  auto it = shapes.find(value);
  if (it == shapes.end() || it->second.size() < 2)
    return {};
  const SmallVector<SmallVector<int64_t>, 6> &seen = it->second;
  SmallVector<int64_t> dims(seen.front().begin(), seen.front().end());
  for (const auto &shape : seen) {
    if (shape.size() != dims.size())
      return {};
    for (auto [d, size] : llvm::enumerate(shape))
      if (dims[d] != size)
        dims[d] = ShapedType::kDynamic;
  }
  for (int64_t &dim : dims)
    if ((dim == 1 && !coverage.multiToken.contains(value)) ||
        (dim == 0 && !coverage.withPast.contains(value)))
      dim = ShapedType::kDynamic;
  auto type = cast<TensorType>(value.getType());
  if (auto ranked = dyn_cast<RankedTensorType>(type)) {
    if (ranked.getRank() != static_cast<int64_t>(dims.size()))
      return {};
    for (auto [d, size] : llvm::enumerate(ranked.getShape()))
      if (!ShapedType::isDynamic(size))
        dims[d] = size;
  }
  return RankedTensorType::get(dims, type.getElementType());
}

// Refines the result types of the onnx ops (If branches included); the function's result
// types follow what it returns.
void refineTypes(func::FuncOp func, const ProbeShapes &shapes, const ProbeCoverage &coverage) {
  func.walk([&](Operation *op) {
    // An If's bound is the larger of its branches, not a type both branches have.
    if (!op->getDialect() || op->getDialect()->getNamespace() != "onnx" ||
        op->getNumRegions() != 0)
      return;
    for (Value result : op->getResults()) {
      if (!isa<TensorType>(result.getType()))
        continue;
      if (RankedTensorType type = provenType(result, shapes, coverage))
        result.setType(type);
    }
  });
}

void syncFunctionType(func::FuncOp func) {
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  auto type = FunctionType::get(func.getContext(), func.getArgumentTypes(),
                                ret.getOperandTypes());
  if (type != func.getFunctionType())
    func.setFunctionType(type);
}


} // namespace dsc::layers
