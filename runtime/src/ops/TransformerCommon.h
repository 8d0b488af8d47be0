// What Transformer.cpp's norms and activations share with TransformerLinear.cpp's linear
// layers (their norm prologue and epilogue): one implementation, so that a fused step
// computes what the unfused ones do.
#ifndef DSRT_OPS_TRANSFORMERCOMMON_H
#define DSRT_OPS_TRANSFORMERCOMMON_H

#include "ops/FloatAccess.h"
#include "ops/Kernel.h"
#include "ops/fast/FastKernels.h"

#include <optional>
#include <string>

namespace dsrt::ops {

using fast::Activation;

// y = norm(row) * scale (+ bias) for each of `rows` rows of n values: RMS (rms) or layer
// normalisation, as tfm.rms_norm / tfm.layer_norm and a linear's norm prologue compute it.
void normalizeRows(const float *source, int64_t rows, int64_t n, const FloatView &scale,
                   const FloatView *bias, bool rms, float epsilon, bool fastKernels, float *y);

// An activation kind by name (tfm.activation's `kind`, a linear's `activation`).
Status parseActivation(const KernelContext &ctx, const std::string &kind, Activation &out);
// The `kind` of tfm.activation and tfm.gated_act.
Status activationKind(const KernelContext &ctx, Activation &out);
// A fused linear's epilogue activation: the `activation` attribute, absent or "none" for
// none.
Status epilogueActivation(const KernelContext &ctx, std::optional<Activation> &out);
// The reference kernels' activation of one value.
float activate(Activation kind, float x);

} // namespace dsrt::ops

#endif
