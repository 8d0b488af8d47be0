// dsc-recognize-attention: RMS norms over each head after the rotary embedding (NanoChat's
// and HunYuan-Dense's q and k norms; Candidate::queryNorm): which norms those are, and what
// they compute on the probe. The rotation keeps each head's mean square, so such a norm is
// the same norm before it when every feature has one scale (NanoChat's have none); a scale
// per feature multiplies the rotated features instead (tfm.attention's
// qk_norm_after_rotary).
#include "compiler/recognize/AttentionMatch.h"

#include "llvm/ADT/StringSet.h"

#include <cmath>

namespace dsc::attention {

std::vector<float> Matcher::headNormScale(tfm::RmsNormOp norm) const {
  const Info *scale = probe_.lookup(norm.getScale());
  if (!scale || !scale->value)
    return {};
  return floats(*scale->value);
}

bool Matcher::isMovableHeadNorm(tfm::RmsNormOp norm) const {
  if (norm.getResidual() || norm.getPostResidual() || norm.getSum())
    return false;
  auto type = dyn_cast<RankedTensorType>(norm.getScale().getType());
  if (!type || type.getRank() != 1 || int64_t(headNormScale(norm).size()) != headDim_)
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

bool Matcher::hasUniformScale(tfm::RmsNormOp norm) const {
  std::vector<float> scale = headNormScale(norm);
  return llvm::all_of(scale, [&](float w) { return w == scale.front(); });
}

void Matcher::applyHeadNorm(const Candidate &c, tfm::RmsNormOp norm, std::vector<float> &x,
                            int64_t d) const {
  // After the rotation the scale comes later (scaleRotatedHeads).
  std::vector<float> scale = c.normsAfterRotary ? std::vector<float>() : headNormScale(norm);
  const double epsilon = norm.getEpsilonAttr().getValueAsDouble();
  for (size_t first = 0; first + d <= x.size(); first += d) {
    double sum = 0;
    for (int64_t e = 0; e < d; ++e)
      sum += double(x[first + e]) * x[first + e];
    const double gain = 1 / std::sqrt(sum / double(d) + epsilon);
    for (int64_t e = 0; e < d; ++e)
      x[first + e] = float(x[first + e] * gain * (scale.empty() ? 1.0f : scale[e]));
  }
}

void Matcher::scaleRotatedHeads(const Candidate &c, tfm::RmsNormOp norm, float *x, size_t count,
                                int64_t d, bool divide) const {
  if (!c.normsAfterRotary || !norm)
    return;
  std::vector<float> scale = headNormScale(norm);
  for (size_t i = 0; i < count; ++i)
    x[i] = divide ? x[i] / scale[i % d] : x[i] * scale[i % d];
}

} // namespace dsc::attention
