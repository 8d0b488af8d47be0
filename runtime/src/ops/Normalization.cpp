// Softmax, LogSoftmax and LayerNormalization; fp32 arithmetic for the 16-bit floats.
#include "ops/Kernel.h"
#include "ops/Strided.h"
#include "ops/TypeDispatch.h"

#include <cmath>
#include <limits>

namespace dsrt::ops {
namespace {

Status inferSoftmax(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "input", kFloatTypes));
  const TensorRef &x = *ctx.input(0);
  int64_t axis;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", -1, axis));
  // A scalar has no axis to normalise over; ONNX's reference treats it as one element.
  if (!x.shape.empty())
    DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, x.shape.size(), "axis", axis));
  outputs.push_back({x.dtype, x.shape});
  return Status::ok();
}

template <typename T> void softmaxTyped(const KernelContext &ctx, const TensorRef &x,
                                        const TensorRef &y, int64_t axis) {
  using C = ComputeType<T>;
  bool logarithm = ctx.op == "LogSoftmax";
  int64_t outer = product(x.shape, 0, axis);
  int64_t n = x.shape.empty() ? 1 : x.shape[axis];
  int64_t inner = product(x.shape, axis + 1, x.shape.size());
  const T *src = x.as<T>();
  T *dst = y.as<T>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t base = o * n * inner + i;
      C maximum = -std::numeric_limits<C>::infinity();
      for (int64_t k = 0; k < n; ++k)
        maximum = std::max(maximum, load(src[base + k * inner]));
      C sum = 0;
      for (int64_t k = 0; k < n; ++k)
        sum += std::exp(load(src[base + k * inner]) - maximum);
      C logSum = std::log(sum);
      for (int64_t k = 0; k < n; ++k) {
        C shifted = load(src[base + k * inner]) - maximum;
        dst[base + k * inner] = store<T>(logarithm ? shifted - logSum : std::exp(shifted) / sum);
      }
    }
  }
}

Status computeSoftmax(const KernelContext &ctx, const Outputs &outputs) {
  const TensorRef &x = *ctx.input(0);
  int64_t axis = 0;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", -1, axis));
  if (!x.shape.empty())
    DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, x.shape.size(), "axis", axis));
  else
    axis = 0;
  return visitDType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      softmaxTyped<T>(ctx, x, *outputs[0], axis);
      return Status::ok();
    } else {
      return ctx.error("no kernel for dtype ", dtypeName(x.dtype));
    }
  });
}

// ONNX's stash_type is a TensorProto data type: the dtype of Mean and InvStdDev.
Status stashDType(const KernelContext &ctx, DType &out) {
  int64_t stash;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "stash_type", 1, stash));
  switch (stash) {
  case 1: out = DType::F32; return Status::ok();
  case 10: out = DType::F16; return Status::ok();
  case 11: out = DType::F64; return Status::ok();
  case 16: out = DType::BF16; return Status::ok();
  default: return ctx.error("stash_type ", stash, " is not a float type");
  }
}

Status layerNormAxis(const KernelContext &ctx, int64_t &axis) {
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", -1, axis));
  return normalizeAxis(ctx, axis, ctx.input(0)->shape.size(), "axis", axis);
}

Status inferLayerNorm(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "X", kFloatTypes));
  DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, 1));
  const TensorRef &x = *ctx.input(0);
  int64_t axis;
  DSRT_RETURN_IF_ERROR(layerNormAxis(ctx, axis));
  Shape normalized(x.shape.begin() + axis, x.shape.end());
  for (size_t i = 1; i < 3; ++i) {
    const TensorRef *param = ctx.input(i);
    if (!param)
      continue;
    DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, i));
    if (!broadcastsTo(param->shape, normalized))
      return ctx.error(i == 1 ? "Scale" : "B", " of shape ", shapeString(param->shape),
                       " does not broadcast to the normalised shape ", shapeString(normalized));
  }
  DType stash = DType::F32;
  DSRT_RETURN_IF_ERROR(stashDType(ctx, stash));
  outputs.push_back({x.dtype, x.shape});
  Shape statsShape = x.shape;
  for (size_t d = axis; d < statsShape.size(); ++d)
    statsShape[d] = 1;
  for (size_t i = 1; i < ctx.numOutputs; ++i)
    outputs.push_back({stash, statsShape});
  return Status::ok();
}

// `param` broadcast to `normalized`, as C values.
template <typename T, typename C>
std::vector<C> expandParameter(const TensorRef *param, const Shape &normalized, C fallback) {
  std::vector<C> values(static_cast<size_t>(elementCount(normalized)), fallback);
  if (!param)
    return values;
  const T *src = param->as<T>();
  forEachBroadcast<1>(normalized, {&param->shape},
                      [&](int64_t i, const std::array<int64_t, 1> &at) {
                        values[i] = static_cast<C>(load(src[at[0]]));
                      });
  return values;
}

template <typename S, typename C> void storeStat(const TensorRef *out, int64_t i, C value) {
  if (out)
    out->as<S>()[i] = store<S>(static_cast<ComputeType<S>>(value));
}

template <typename T>
Status layerNormTyped(const KernelContext &ctx, const Outputs &outputs, int64_t axis) {
  // f64 inputs or stash keep f64; everything else computes in fp32.
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const TensorRef &x = *ctx.input(0);
  Shape normalized(x.shape.begin() + axis, x.shape.end());
  int64_t n = elementCount(normalized);
  int64_t rows = product(x.shape, 0, axis);
  float epsilon;
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "epsilon", 1e-5f, epsilon));
  std::vector<C> scale = expandParameter<T, C>(ctx.input(1), normalized, C(1));
  std::vector<C> bias = expandParameter<T, C>(ctx.input(2), normalized, C(0));
  const TensorRef *meanOut = outputs.size() > 1 ? outputs[1] : nullptr;
  const TensorRef *invStdOut = outputs.size() > 2 ? outputs[2] : nullptr;
  DType stash = meanOut ? meanOut->dtype : DType::F32;
  const T *src = x.as<T>();
  T *dst = outputs[0]->as<T>();
  for (int64_t r = 0; r < rows; ++r) {
    const T *row = src + r * n;
    C sum = 0;
    for (int64_t i = 0; i < n; ++i)
      sum += static_cast<C>(load(row[i]));
    C mean = n > 0 ? sum / C(n) : C(0);
    C squares = 0;
    for (int64_t i = 0; i < n; ++i) {
      C centred = static_cast<C>(load(row[i])) - mean;
      squares += centred * centred;
    }
    C variance = n > 0 ? squares / C(n) : C(0);
    C invStd = C(1) / std::sqrt(variance + C(epsilon));
    for (int64_t i = 0; i < n; ++i) {
      C normalizedValue = (static_cast<C>(load(row[i])) - mean) * invStd;
      dst[r * n + i] = store<T>(static_cast<ComputeType<T>>(normalizedValue * scale[i] + bias[i]));
    }
    Status status = visitDType(stash, [&](auto stashTag) -> Status {
      using S = decltype(stashTag);
      if constexpr (kIsFloat<S>) {
        storeStat<S>(meanOut, r, mean);
        storeStat<S>(invStdOut, r, invStd);
      }
      return Status::ok();
    });
    DSRT_RETURN_IF_ERROR(status);
  }
  return Status::ok();
}

Status computeLayerNorm(const KernelContext &ctx, const Outputs &outputs) {
  int64_t axis;
  DSRT_RETURN_IF_ERROR(layerNormAxis(ctx, axis));
  return visitDType(ctx.input(0)->dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>)
      return layerNormTyped<T>(ctx, outputs, axis);
    else
      return ctx.error("no kernel for dtype ", dtypeName(ctx.input(0)->dtype));
  });
}

} // namespace

void addNormalizationKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"Softmax", 1, 1, 1, 1, 1, inferSoftmax, computeSoftmax});
  kernels.push_back({"LogSoftmax", 1, 1, 1, 1, 1, inferSoftmax, computeSoftmax});
  kernels.push_back(
      {"LayerNormalization", 2, 3, 2, 1, 3, inferLayerNorm, computeLayerNorm});
}

} // namespace dsrt::ops
