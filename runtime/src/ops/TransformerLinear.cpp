// tfm.linear (with the fuse passes' epilogue and norm prologue) and tfm.lm_head on the CPU
// (docs/transformer-ops.md): float, int8 or int4 weights, the reference kernel and the fast one
// (ops/fast). Every float dtype computes in fp32; outputs are stored in the dtype of the
// input.
#include "ops/FloatAccess.h"
#include "ops/Kernel.h"
#include "ops/ThreadPool.h"
#include "ops/TransformerCommon.h"
#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace dsrt::ops {
namespace {

using fast::Activation;

// ---- tfm.linear, tfm.lm_head ---------------------------------------------------------

// A linear's norm prologue (tfm.linear `norm`, dsc-fuse-norm-prologue): `norm` is "rms" or
// "layer", the scale [in] is input 5 and a layer norm's optional bias [in] input 6.
constexpr size_t kNormScaleInput = 5, kNormBiasInput = 6;

Status normPrologueKind(const KernelContext &ctx, std::string &kind) {
  DSRT_RETURN_IF_ERROR(stringAttr(ctx, "norm", "", kind));
  if (!kind.empty() && kind != "rms" && kind != "layer")
    return ctx.error("norm must be rms or layer, not '", kind, "'");
  return Status::ok();
}

Status checkNormPrologue(const KernelContext &ctx) {
  std::string kind;
  DSRT_RETURN_IF_ERROR(normPrologueKind(ctx, kind));
  const TensorRef *scale = ctx.inputs.size() > kNormScaleInput ? ctx.input(kNormScaleInput) : nullptr;
  const TensorRef *bias = ctx.inputs.size() > kNormBiasInput ? ctx.input(kNormBiasInput) : nullptr;
  if (kind.empty()) {
    if (scale || bias)
      return ctx.error("has a norm scale or bias (inputs 5 and 6) but no norm prologue");
    return Status::ok();
  }
  const int64_t in = lastDim(*ctx.input(0));
  if (!scale)
    return ctx.error("a norm prologue needs its scale (input 5)");
  if (bias && kind != "layer")
    return ctx.error("only a layer norm prologue takes a bias (input 6)");
  for (size_t index : {kNormScaleInput, kNormBiasInput}) {
    const TensorRef *param = ctx.input(index);
    if (!param)
      continue;
    const char *name = index == kNormScaleInput ? "norm scale" : "norm bias";
    DSRT_RETURN_IF_ERROR(checkDType(ctx, index, name, kFloatTypes));
    if (param->shape != Shape{in})
      return ctx.error(name, " must be [", in, "], not ", shapeString(param->shape));
  }
  float epsilon = 0;
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "norm_epsilon", -1.0f, epsilon));
  if (!(epsilon >= 0) || !std::isfinite(epsilon))
    return ctx.error("a norm prologue needs a finite, non-negative norm_epsilon");
  return Status::ok();
}

// The linear's input: with a norm prologue its rows normalised as the unfused norm computes
// and stores them (in the input's dtype), in `storage`; otherwise input 0 itself.
Status linearInput(const KernelContext &ctx, std::vector<uint8_t> &storage, TensorRef &x) {
  x = *ctx.input(0);
  std::string kind;
  DSRT_RETURN_IF_ERROR(normPrologueKind(ctx, kind));
  if (kind.empty())
    return Status::ok();
  const bool rms = kind == "rms";
  float epsilon = 0;
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "norm_epsilon", -1.0f, epsilon));
  const int64_t n = lastDim(x), rows = n == 0 ? 0 : x.elements() / n;
  FloatView source(x), scale(*ctx.input(kNormScaleInput));
  std::optional<FloatView> bias;
  if (ctx.inputs.size() > kNormBiasInput && ctx.input(kNormBiasInput))
    bias.emplace(*ctx.input(kNormBiasInput));
  storage.resize(static_cast<size_t>(x.elements()) * dtypeSize(x.dtype));
  x.data = storage.data();
  FloatOutput out(x, /*writesEveryElement=*/true);
  normalizeRows(source.data(), rows, n, scale, bias ? &*bias : nullptr, rms, epsilon,
                ctx.fastKernels, out.data());
  out.finish();
  return Status::ok();
}

// An int4 weight (docs/int4.md): u8 codes, two to a byte, beside its scales.
bool isInt4Weight(const KernelContext &ctx) {
  return ctx.inputs.size() > 3 && ctx.input(3) && ctx.input(1)->dtype == DType::U8;
}

// The weight's input features: int4 packs two to a byte.
int64_t weightInputs(const KernelContext &ctx) {
  const TensorRef &w = *ctx.input(1);
  return isInt4Weight(ctx) ? 2 * w.shape[1] : w.shape[1];
}

Status inferLinear(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "input", kFloatTypes));
  const bool hasScales = ctx.inputs.size() > 3 && ctx.input(3);
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "weight",
                                  hasScales ? maskOf({DType::I8, DType::U8}) : kFloatTypes));
  DSRT_RETURN_IF_ERROR(requireRankAtLeast(ctx, 0, "input", 1));
  const TensorRef &x = *ctx.input(0), &w = *ctx.input(1);
  const bool int4 = isInt4Weight(ctx);
  if (w.shape.size() != 2 || (int4 ? 2 * w.shape[1] : w.shape[1]) != lastDim(x))
    return int4 ? ctx.error("an int4 weight must be [out, ", lastDim(x), " / 2] bytes, not ",
                            shapeString(w.shape))
                : ctx.error("weight must be [out, ", lastDim(x), "], not ", shapeString(w.shape));
  // int8 and int4 weights (docs/int8.md, docs/int4.md): scales [out, groups], each group a
  // run of in / groups input features (an even number for int4: a byte holds two).
  if (hasScales) {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 3, "scales", kFloatTypes));
    const Shape &scales = ctx.input(3)->shape;
    const int64_t in = weightInputs(ctx);
    if (scales.size() != 2 || scales[0] != w.shape[0] || scales[1] <= 0 || in % scales[1] != 0 ||
        (int4 && (in / scales[1]) % 2 != 0))
      return ctx.error("scales must be [", w.shape[0], ", groups] with groups dividing ", in,
                       int4 ? " into even groups" : "", ", not ", shapeString(scales));
  }
  if (ctx.inputs.size() > 2 && ctx.input(2)) {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 2, "bias", kFloatTypes));
    if (ctx.input(2)->shape != Shape{w.shape[0]})
      return ctx.error("bias must be [", w.shape[0], "], not ", shapeString(ctx.input(2)->shape));
  }
  Shape shape = x.shape;
  shape.back() = w.shape[0];
  // The gated epilogue (dsc-fuse-gated-epilogue): the weight is [gate; up], the result
  // act(gate) * up, half as wide, and there is no residual.
  int64_t gated = 0;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "gated", 0, gated));
  if (gated) {
    std::string kind;
    DSRT_RETURN_IF_ERROR(stringAttr(ctx, "activation", "none", kind));
    if (kind == "none" || w.shape[0] % 2 != 0 || (ctx.inputs.size() > 4 && ctx.input(4)))
      return ctx.error("a gated linear needs an activation, an even number of weight rows "
                       "(gate then up) and no residual");
    shape.back() = w.shape[0] / 2;
  }
  // The fused epilogue: act(x . w^T + bias) + residual, the residual of the result's shape.
  if (ctx.inputs.size() > 4 && ctx.input(4)) {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 4, "residual", kFloatTypes));
    if (ctx.input(4)->shape != shape)
      return ctx.error("residual must have the result's shape ", shapeString(shape), ", not ",
                       shapeString(ctx.input(4)->shape));
  }
  std::optional<Activation> activation;
  DSRT_RETURN_IF_ERROR(epilogueActivation(ctx, activation));
  DSRT_RETURN_IF_ERROR(checkNormPrologue(ctx));
  // The plan's activation dtype where the input or the result has it and the other not
  // (dsc-activation-dtype): o_proj's f16 input, a gated linear's f16 result.
  DType dtype = x.dtype;
  if (Status status = floatOutputDType(ctx.attrs, x.dtype, dtype); !status)
    return ctx.error(status.message());
  outputs.push_back({dtype, shape});
  return Status::ok();
}

// An int8 or int4 weight as f32 [out, in]: q[o, k] * scales[o, k / (in / groups)], q the
// int8 value or the int4 code at nibble k of the row (the even k low) minus 8
// (docs/int8.md, docs/int4.md).
std::vector<float> dequantizeWeight(const TensorRef &w, const TensorRef &scales, int64_t in) {
  const int64_t out = w.shape[0], groups = scales.shape[1];
  const int64_t groupSize = in / groups;
  FloatView scale(scales);
  const bool int4 = w.dtype == DType::U8;
  std::vector<float> values(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) {
      float q;
      if (int4) {
        const uint8_t pair = w.as<uint8_t>()[o * (in / 2) + k / 2];
        q = static_cast<float>(((pair >> (4 * (k % 2))) & 0xF) - 8);
      } else {
        q = static_cast<float>(w.as<int8_t>()[o * in + k]);
      }
      values[o * in + k] = q * scale[o * groups + k / groupSize];
    }
  return values;
}

// act(value + bias[o]) + residual[index]: the epilogue both kernels apply. A gated
// linear's product (bias added) is gated afterwards (gate), so its epilogue stops at the
// bias.
struct LinearEpilogue {
  std::optional<FloatView> bias, residual;
  std::optional<Activation> activation;
  bool gated = false;
  // tfm.lm_head's logit epilogue: z * logitScale, then cap * tanh(. / cap) with a cap.
  float logitScale = 1.0f, logitCap = 0.0f;

  Status read(const KernelContext &ctx) {
    if (ctx.inputs.size() > 2 && ctx.input(2))
      bias.emplace(*ctx.input(2));
    if (ctx.inputs.size() > 4 && ctx.input(4))
      residual.emplace(*ctx.input(4));
    int64_t gatedAttr = 0;
    DSRT_RETURN_IF_ERROR(intAttr(ctx, "gated", 0, gatedAttr));
    gated = gatedAttr != 0;
    DSRT_RETURN_IF_ERROR(floatAttr(ctx, "logit_scale", 1.0f, logitScale));
    DSRT_RETURN_IF_ERROR(floatAttr(ctx, "logit_cap", 0.0f, logitCap));
    if (!std::isfinite(logitScale) || !(logitCap >= 0.0f) || !std::isfinite(logitCap))
      return ctx.error("logit_scale must be finite and logit_cap finite and positive, not ",
                       logitScale, " and ", logitCap);
    return epilogueActivation(ctx, activation);
  }
  bool hasLogitEpilogue() const { return logitScale != 1.0f || logitCap != 0.0f; }
  float logit(float value) const {
    value *= logitScale;
    return logitCap != 0.0f ? logitCap * std::tanh(value / logitCap) : value;
  }
  float apply(float sum, int64_t o, int64_t index) const {
    float value = bias ? sum + (*bias)[o] : sum;
    if (gated)
      return value;
    if (activation)
      value = activate(*activation, value);
    if (residual)
      value += (*residual)[index];
    return hasLogitEpilogue() ? logit(value) : value;
  }
  // y[r, i] = act(product[r, i]) * product[r, half + i], as tfm.gated_act_packed of the
  // unfused product (f32 here as in an f32 plan's arena), with the activation of the
  // kernels that computed the product (`vectorised`: the fast ones).
  void gate(const float *product, int64_t rows, int64_t half, float *y, bool vectorised) const {
    int64_t grain = std::max<int64_t>(1, kParallelGrainWork / std::max<int64_t>(1, half));
    parallelFor(rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float *gates = product + r * 2 * half, *ups = gates + half;
        float *row = y + r * half;
        if (vectorised) {
          std::copy(gates, gates + half, row);
          fast::activate(*activation, row, half);
        } else {
          for (int64_t i = 0; i < half; ++i)
            row[i] = activate(*activation, gates[i]);
        }
        for (int64_t i = 0; i < half; ++i)
          row[i] *= ups[i];
      }
    });
  }
};

// The fast kernels (ops/fast): the weight read in its stored dtype, the epilogue applied by
// the thread that computed each range of output features.
Status computeLinearFast(const KernelContext &ctx, const TensorRef &x, const Outputs &outputs) {
  const TensorRef &w = *ctx.input(1);
  fast::LinearWeights weights;
  weights.dtype = w.dtype;
  weights.data = w.data;
  weights.out = w.shape[0];
  weights.in = weightInputs(ctx);
  std::optional<FloatView> wideScales;
  if (ctx.inputs.size() > 3 && ctx.input(3)) {
    const TensorRef &scales = *ctx.input(3);
    // As stored where the kernels read that dtype (the session keeps them narrow for them:
    // cpu/Session.cpp); f64 ones as f32.
    if (scales.dtype == DType::F32 || scales.dtype == DType::F16 || scales.dtype == DType::BF16) {
      weights.scales = scales.data;
      weights.scaleType = scales.dtype;
    } else {
      weights.scales = wideScales.emplace(scales).data();
    }
    weights.groups = scales.shape[1];
  }
  int64_t int8Activations = 0;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "int8_activations", 0, int8Activations));
  weights.int8Activations = int8Activations != 0;
  const int64_t out = weights.out;
  LinearEpilogue epilogue;
  DSRT_RETURN_IF_ERROR(epilogue.read(ctx));
  const int64_t width = epilogue.gated ? out / 2 : out;
  const int64_t rows = width == 0 ? 0 : outputs[0]->elements() / width;
  // A bf16 input that the bf16 GEMM takes goes to it as it is, not widened and rounded
  // again (the same values).
  const bool bf16Input = x.dtype == DType::BF16 && !ctx.exactFloatRows &&
                         fast::bf16PromptGemm(weights.dtype, rows, ctx.rowInvariant, true);
  std::optional<FloatView> a;
  if (!bf16Input)
    a.emplace(x);
  FloatOutput result(*outputs[0], /*writesEveryElement=*/true);
  // A gated linear's joined product lives only here, before its halves are multiplied
  // (every element written by fast::linear).
  PooledFloats product(epilogue.gated ? static_cast<size_t>(rows * out) : 0);
  float *y = epilogue.gated ? product.data() : result.data();
  fast::linear(a ? a->data() : nullptr, rows, weights, y, [&](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < rows; ++r) {
      float *row = y + r * out;
      const float *residual =
          epilogue.residual ? epilogue.residual->data() + r * out + begin : nullptr;
      // Bias and residual in one pass where nothing comes between them (o_proj, fc2).
      if (epilogue.bias && residual && !epilogue.activation && !epilogue.gated &&
          !epilogue.hasLogitEpilogue()) {
        fast::addTo(row + begin, epilogue.bias->data() + begin, residual, end - begin);
        continue;
      }
      if (epilogue.bias)
        fast::addTo(row + begin, epilogue.bias->data() + begin, end - begin);
      if (epilogue.gated)
        continue;
      if (epilogue.activation)
        fast::activate(*epilogue.activation, row + begin, end - begin);
      if (residual)
        fast::addTo(row + begin, residual, end - begin);
      if (epilogue.hasLogitEpilogue())
        for (int64_t o = begin; o < end; ++o)
          row[o] = epilogue.logit(row[o]);
    }
  }, bf16Input ? x.as<uint16_t>() : nullptr, ctx.rowInvariant, ctx.exactFloatRows);
  if (epilogue.gated)
    epilogue.gate(product.data(), rows, width, result.data(), true);
  result.finish();
  return Status::ok();
}

Status computeLinear(const KernelContext &ctx, const Outputs &outputs) {
  // Reused by the calls on this thread: a fresh vector zero-filled the normalized rows at
  // every call and, at a prompt chunk's size, took them from the OS (page faults) each time.
  thread_local std::vector<uint8_t> normalized;
  TensorRef x;
  DSRT_RETURN_IF_ERROR(linearInput(ctx, normalized, x));
  const TensorRef &w = *ctx.input(1);
  if (ctx.fastKernels && w.dtype != DType::F64)
    return computeLinearFast(ctx, x, outputs);
  int64_t in = weightInputs(ctx), out = w.shape[0];
  LinearEpilogue epilogue;
  DSRT_RETURN_IF_ERROR(epilogue.read(ctx));
  const int64_t width = epilogue.gated ? out / 2 : out;
  int64_t rows = width == 0 ? 0 : outputs[0]->elements() / width;
  std::vector<float> dequantized;
  TensorRef floatWeight = w;
  if (ctx.inputs.size() > 3 && ctx.input(3)) {
    dequantized = dequantizeWeight(w, *ctx.input(3), in);
    floatWeight = {DType::F32, {out, in}, dequantized.data()};
  }
  FloatView a(x), weight(floatWeight);
  FloatOutput result(*outputs[0]);
  std::vector<float> product(epilogue.gated ? static_cast<size_t>(rows * out) : 0);
  float *y = epilogue.gated ? product.data() : result.data();
  // Each output element is a dot product of two contiguous rows; the work splits over
  // (row, output feature) pairs, so a decode step with one row still uses every thread.
  int64_t grain = std::max<int64_t>(1, kParallelGrainWork / std::max<int64_t>(1, in));
  parallelFor(rows * out, grain, [&](int64_t begin, int64_t end) {
    for (int64_t index = begin; index < end; ++index) {
      int64_t r = index / out, o = index % out;
      const float *xr = a.data() + r * in;
      const float *wr = weight.data() + o * in;
      float sum = 0;
      for (int64_t k = 0; k < in; ++k)
        sum += xr[k] * wr[k];
      y[index] = epilogue.apply(sum, o, index);
    }
  });
  if (epilogue.gated)
    epilogue.gate(product.data(), rows, width, result.data(), false);
  result.finish();
  return Status::ok();
}

// ---- tfm.lm_head ---------------------------------------------------------------------

Status inferLmHead(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  return inferLinear(ctx, outputs);
}

} // namespace

void addLinearKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"tfm.linear", 2, 7, 2, 1, 1, inferLinear, computeLinear});
  // An int8 head has tfm.linear's positions: (hidden, weight, none, scales).
  kernels.push_back({"tfm.lm_head", 2, 4, 2, 1, 1, inferLmHead, computeLinear});
}

} // namespace dsrt::ops
