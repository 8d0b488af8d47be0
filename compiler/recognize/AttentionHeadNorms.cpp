// dsc-recognize-attention: RMS norms over each head after the rotary embedding (NanoChat's
// q and k norms; Candidate::queryNorm), which the rotation commutes with when every feature
// has one scale: which norms those are, and what they compute on the probe.
#include "compiler/recognize/AttentionMatch.h"

#include "llvm/ADT/StringSet.h"

#include <cmath>

namespace dsc::attention {

bool Matcher::isMovableHeadNorm(tfm::RmsNormOp norm) const {
  if (norm.getResidual() || norm.getPostResidual() || norm.getSum())
    return false;
  const Info *scale = probe_.lookup(norm.getScale());
  if (!scale || !scale->value)
    return false;
  std::vector<float> weights = floats(*scale->value);
  if (int64_t(weights.size()) != headDim_ ||
      !llvm::all_of(weights, [&](float w) { return w == weights.front(); }))
    return false;
  // Back through views alone: reaching the projection (or a graph input) means the norm
  // reads the heads as they enter.
  static const llvm::StringSet<> views = {"onnx.Reshape",   "onnx.Transpose", "onnx.Identity",
                                          "onnx.Cast",      "onnx.Squeeze",   "onnx.Unsqueeze",
                                          "onnx.Split",     "onnx.Slice",     "onnx.Gather",
                                          "onnx.Flatten"};
  Value value = norm.getInput();
  for (int depth = 0; depth < 16; ++depth) {
    const dsrt::Shape *shape = shapeOf(value);
    Operation *def = value.getDefiningOp();
    if (!def || !shape || (shape->size() == 3 && (*shape)[0] == batch_))
      return false;
    if (!views.contains(def->getName().getStringRef()))
      return true;
    Value next;
    for (Value operand : def->getOperands())
      if (isTainted(operand)) {
        if (next)
          return true;
        next = operand;
      }
    if (!next)
      return false;
    value = next;
  }
  return false;
}

void Matcher::applyHeadNorm(tfm::RmsNormOp norm, std::vector<float> &x, int64_t d) const {
  const Info *scale = probe_.lookup(norm.getScale());
  const float weight = scale && scale->value ? floats(*scale->value).front() : 1.0f;
  const double epsilon = norm.getEpsilonAttr().getValueAsDouble();
  for (size_t first = 0; first + d <= x.size(); first += d) {
    double sum = 0;
    for (int64_t e = 0; e < d; ++e)
      sum += double(x[first + e]) * x[first + e];
    const double gain = weight / std::sqrt(sum / double(d) + epsilon);
    for (int64_t e = 0; e < d; ++e)
      x[first + e] = float(x[first + e] * gain);
  }
}

} // namespace dsc::attention
