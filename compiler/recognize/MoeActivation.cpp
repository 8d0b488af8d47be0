// See MoeActivation.h.
#include "compiler/recognize/MoeActivation.h"

#include "compiler/recognize/LayerMatching.h"
#include "ops/MoeRouting.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <cmath>
#include <random>

using namespace mlir;

namespace dsc::moe {
namespace {

bool isRegionOp(Operation *op) {
  return layers::isElementwise(op) || isa<onnx::ClipOp, onnx::MinOp, onnx::MaxOp>(op) ||
         isa<tfm::ActivationOp>(op);
}

void addOnce(SmallVector<double> &list, double value) {
  if (!llvm::is_contained(list, value))
    list.push_back(value);
}

} // namespace

FailureOr<GluRegion> matchGluRegion(Value product, std::string &why) {
  GluRegion region;
  SmallVector<Value> stack = {product};
  SmallVector<tfm::LinearOp, 2> linears;
  bool clamps = false;
  while (!stack.empty()) {
    Value value = stack.pop_back_val();
    Operation *op = value.getDefiningOp();
    if (!op) {
      why = "an expert's activation reads a graph input";
      return failure();
    }
    if (isa<onnx::NoValueOp>(op))
      continue;
    if (std::optional<double> constant = layers::scalarConstant(value))
      continue;
    if (auto linear = dyn_cast<tfm::LinearOp>(op)) {
      if (!llvm::is_contained(linears, linear))
        linears.push_back(linear);
      continue;
    }
    if (!isRegionOp(op)) {
      why = "an expert's activation computes more than elementwise ops of its gate and up "
            "projections ('" +
            op->getName().getStringRef().str() + "')";
      return failure();
    }
    if (!region.ops.insert(op).second)
      continue;
    const bool clamp = isa<onnx::ClipOp, onnx::MinOp, onnx::MaxOp>(op);
    clamps |= clamp;
    if (auto activation = dyn_cast<tfm::ActivationOp>(op)) {
      if (activation.getKind() == tfm::ActivationKind::gelu_quick)
        addOnce(region.alphas, 1.702);
      else if (activation.getKind() == tfm::ActivationKind::silu)
        addOnce(region.alphas, 1.0);
    }
    for (Value operand : op->getOperands()) {
      if (std::optional<double> constant = layers::scalarConstant(operand)) {
        if (clamp && *constant != 0)
          addOnce(region.limits, std::abs(*constant));
        if (isa<onnx::MulOp, onnx::DivOp>(op) && *constant != 0)
          addOnce(region.alphas, isa<onnx::DivOp>(op) ? 1.0 / *constant : *constant);
      }
      stack.push_back(operand);
    }
  }
  if (linears.size() != 2 || linears[0].getInput() != linears[1].getInput()) {
    why = "an expert's activation does not read exactly two linear layers of one input";
    return failure();
  }
  if (!clamps || region.limits.empty() || region.alphas.empty()) {
    why = "an expert's activation is neither a tfm.gated_act nor clamped by constants";
    return failure();
  }
  // The region's values are the expert's own: read by the region or the down projection.
  Operation *down = product.hasOneUse() ? *product.getUsers().begin() : nullptr;
  llvm::SmallPtrSet<Operation *, 16> readers(region.ops.begin(), region.ops.end());
  if (down)
    readers.insert(down);
  for (Operation *op : region.ops)
    if (!down || !layers::usedOnlyBy(op->getResult(0), readers)) {
      why = "an expert's intermediate value has other readers";
      return failure();
    }
  for (tfm::LinearOp linear : linears)
    if (!layers::usedOnlyBy(linear.getOutput(), readers)) {
      why = "an expert's gate or up projection has other readers";
      return failure();
    }
  region.first = linears[0];
  region.second = linears[1];
  return region;
}

FailureOr<ClampedSwiglu> proveClampedSwiglu(const probe::ProbeEvaluator &probe,
                                            const GluRegion &region, Value product,
                                            std::string &why) {
  tfm::LinearOp firstLinear = region.first, secondLinear = region.second;
  const probe::Info *first = probe.lookup(firstLinear.getOutput());
  const probe::Info *second = probe.lookup(secondLinear.getOutput());
  if (!first || !second || first->shape != second->shape || first->shape.empty()) {
    why = "the probe does not know the shapes of an expert's gate and up projections";
    return failure();
  }
  const int64_t n = dsrt::elementCount(first->shape);
  if (n < 1) {
    why = "the probe runs no token through the experts";
    return failure();
  }
  // Wide draws cross every limit candidate on both sides; narrow ones show alpha.
  const double widest = *std::max_element(region.limits.begin(), region.limits.end());
  std::mt19937 random(44);
  SmallVector<ClampedSwiglu> candidates;
  for (bool gateIsFirst : {true, false})
    for (double alpha : region.alphas)
      for (double limit : region.limits)
        candidates.push_back({static_cast<float>(alpha), static_cast<float>(limit), gateIsFirst});
  for (double spread : {1.0, 3.0 * widest}) {
    auto draw = [&]() {
      auto seed = std::make_shared<dsrt::OwnedTensor>(dsrt::DType::F32, first->shape);
      std::uniform_real_distribution<float> uniform(-spread, spread);
      float *data = reinterpret_cast<float *>(seed->storage.data());
      for (int64_t i = 0; i < n; ++i)
        data[i] = uniform(random);
      return seed;
    };
    auto a = draw(), b = draw();
    llvm::SetVector<Operation *> evaluated;
    auto out = probe::evaluateSeeded(
        probe, {{firstLinear.getOutput(), a}, {secondLinear.getOutput(), b}}, product,
        evaluated, why);
    if (!out)
      return failure();
    if (out->dtype != dsrt::DType::F32 || dsrt::elementCount(out->shape) != n) {
      why = "an expert's activation is not f32 of its projections' shape";
      return failure();
    }
    const float *got = reinterpret_cast<const float *>(out->storage.data());
    const float *x = reinterpret_cast<const float *>(a->storage.data());
    const float *y = reinterpret_cast<const float *>(b->storage.data());
    llvm::erase_if(candidates, [&](const ClampedSwiglu &c) {
      for (int64_t i = 0; i < n; ++i) {
        const float gate = c.gateIsFirst ? x[i] : y[i], up = c.gateIsFirst ? y[i] : x[i];
        const float want = dsrt::ops::clampedSwiglu(gate, up, c.alpha, c.limit);
        if (!(std::abs(want - got[i]) <= 1e-5f + 1e-4f * std::abs(want)))
          return true;
      }
      return false;
    });
  }
  if (candidates.empty()) {
    why = "an expert's clamped activation is not the clamped SwiGLU (clamp(up, -l, l) + 1) * "
          "g * sigmoid(alpha * g), g = min(gate, l), for any alpha and l among its constants";
    return failure();
  }
  return candidates.front();
}

} // namespace dsc::moe
