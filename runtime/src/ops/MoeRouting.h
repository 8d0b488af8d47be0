// Internal to dsrt_ops and what recognition proves against it: how tfm.moe's router turns one
// token's logits into its chosen experts, and GPT-OSS's clamped SwiGLU (docs/transformer-ops.md,
// "Mixture of experts").
// dsc-recognize-moe runs this to prove what an export's routing ops compute, so the kernel
// and the proof cannot disagree.
#ifndef DSRT_OPS_MOEROUTING_H
#define DSRT_OPS_MOEROUTING_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace dsrt::ops {

// The `topK` experts of one token, (expert, weight), highest score first (the lower expert
// first among equal scores): scores are the softmax of the `experts` logits, or the sigmoid
// of each with `sigmoid`; the chosen ones divided by their sum with `normalize`. `scores`
// and `order` are scratch of `experts` elements.
void routeToken(const float *logits, int64_t experts, int64_t topK, bool sigmoid,
                bool normalize, std::vector<float> &scores, std::vector<int64_t> &order,
                std::vector<std::pair<int64_t, float>> &chosen);

// GPT-OSS's clamped SwiGLU (tfm.moe with swiglu_limit): one intermediate feature of an
// expert's act(gate) * up. Recognition proves an export's ops against this same function.
inline float clampedSwiglu(float gate, float up, float alpha, float limit) {
  const float g = std::min(gate, limit), u = std::clamp(up, -limit, limit);
  return (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
}

} // namespace dsrt::ops

#endif
