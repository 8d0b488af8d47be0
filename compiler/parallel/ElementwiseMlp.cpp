// MLPs with an activation of elementwise onnx ops: ElementwiseMlp.h.
#include "compiler/parallel/ElementwiseMlp.h"
#include "compiler/parallel/ProjectionTrace.h"

#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace dsc::parallel {
namespace {

// Ops that compute each output element from the same element of each operand (or from a
// scalar): a rank's features need only its own features.
bool isElementwise(Operation *op) {
  static const llvm::StringSet<> names = {
      "onnx.Add",     "onnx.Sub",     "onnx.Mul",        "onnx.Div",          "onnx.Pow",
      "onnx.Min",     "onnx.Max",     "onnx.Exp",        "onnx.Log",          "onnx.Sqrt",
      "onnx.Neg",     "onnx.Abs",     "onnx.Tanh",       "onnx.Sigmoid",      "onnx.Erf",
      "onnx.Relu",    "onnx.Where",   "onnx.Greater",    "onnx.Less",         "onnx.Equal",
      "onnx.Not",     "onnx.And",     "onnx.Or",         "onnx.GreaterOrEqual",
      "onnx.LessOrEqual", "onnx.Cast", "onnx.Reciprocal", "onnx.Floor",       "onnx.Clip",
      "onnx.Sin",     "onnx.Cos",     "onnx.IsNaN"};
  return names.contains(op->getName().getStringRef()) && op->getNumResults() == 1;
}

bool shardable(tfm::LinearOp linear) {
  return !linear.getScales() && linear.getParallel() == tfm::Parallelism::replicated &&
         !linear.getActivation() && !linear.getResidual() && !linear.getNorm() &&
         !linear.getGated();
}

// The MLP that `up` starts, if its output reaches exactly one linear through elementwise
// ops alone.
std::optional<ElementwiseMlp> mlpFrom(tfm::LinearOp up) {
  auto features = cast<RankedTensorType>(up.getOutput().getType());
  if (features.getRank() < 1 || ShapedType::isDynamic(features.getShape().back()))
    return std::nullopt;
  llvm::SetVector<Operation *> ops;
  SmallVector<Value> worklist = {up.getOutput()};
  tfm::LinearOp down;
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      if (auto linear = dyn_cast<tfm::LinearOp>(user)) {
        if (linear.getInput() != value || (down && down != linear) || value == up.getOutput())
          return std::nullopt;
        down = linear;
        continue;
      }
      if (!isElementwise(user))
        return std::nullopt;
      if (!ops.insert(user))
        continue;
      auto type = dyn_cast<RankedTensorType>(user->getResult(0).getType());
      if (!type || type.getRank() != features.getRank() ||
          type.getShape().back() != features.getShape().back())
        return std::nullopt;
      worklist.push_back(user->getResult(0));
    }
  }
  if (!down || ops.empty() || !shardable(down))
    return std::nullopt;
  // Every operand is the projection, one of the ops, or a scalar.
  for (Operation *op : ops)
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (operand != up.getOutput() && !(def && ops.contains(def)) && !isScalarConstant(operand))
        return std::nullopt;
    }
  // The down projection reads the last of them; nothing else leaves.
  Operation *exit = down.getInput().getDefiningOp();
  if (!exit || !ops.contains(exit) || !down.getInput().hasOneUse())
    return std::nullopt;
  ElementwiseMlp mlp{up, down, {}};
  for (Operation &op : *up->getBlock())
    if (ops.contains(&op))
      mlp.ops.push_back(&op);
  return mlp;
}

} // namespace

std::vector<ElementwiseMlp> findElementwiseMlps(func::FuncOp func) {
  std::vector<ElementwiseMlp> mlps;
  func.walk([&](tfm::LinearOp up) {
    if (!shardable(up))
      return;
    if (std::optional<ElementwiseMlp> mlp = mlpFrom(up))
      mlps.push_back(std::move(*mlp));
  });
  return mlps;
}

} // namespace dsc::parallel
