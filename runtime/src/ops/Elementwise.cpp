// Unary elementwise ops: math functions, activations, Clip, IsNaN, Not, Identity.
#include "ops/Kernel.h"
#include "ops/TypeDispatch.h"

#include <cmath>
#include <cstring>

namespace dsrt::ops {
namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kSqrt2OverPi = 0.7978845608028654;

// The dtypes each unary op accepts (ONNX's type constraints at opsets 13 to 20).
DTypeMask unaryTypes(std::string_view op) {
  if (op == "Neg" || op == "Relu")
    return kFloatTypes | kSignedIntTypes;
  if (op == "Abs")
    return kNumericTypes;
  if (op == "Not")
    return maskOf({DType::Bool});
  if (op == "Identity")
    return kAllTypes;
  return kFloatTypes;
}

Status inferUnary(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "X", unaryTypes(ctx.op)));
  if (ctx.op == "Gelu") {
    std::string approximate;
    DSRT_RETURN_IF_ERROR(stringAttr(ctx, "approximate", "none", approximate));
    if (approximate != "none" && approximate != "tanh")
      return ctx.error("approximate must be 'none' or 'tanh', not '", approximate, "'");
  }
  const TensorRef &x = *ctx.input(0);
  outputs.push_back({ctx.op == "IsNaN" ? DType::Bool : x.dtype, x.shape});
  return Status::ok();
}

template <typename In, typename Out, typename Fn>
void mapElements(const TensorRef &in, const TensorRef &out, Fn fn) {
  const In *src = in.as<In>();
  Out *dst = out.as<Out>();
  for (int64_t i = 0, n = in.elements(); i < n; ++i)
    dst[i] = fn(src[i]);
}

template <typename T, typename Fn> Status mapCompute(const TensorRef &in, const TensorRef &out,
                                                     Fn fn) {
  mapElements<T, T>(in, out, [&](T v) { return store<T>(fn(load(v))); });
  return Status::ok();
}

template <typename T>
Status computeFloatUnary(const KernelContext &ctx, const TensorRef &x, const TensorRef &y) {
  using C = ComputeType<T>;
  std::string_view op = ctx.op;
  if (op == "Sqrt") return mapCompute<T>(x, y, [](C v) { return std::sqrt(v); });
  if (op == "Reciprocal") return mapCompute<T>(x, y, [](C v) { return C(1) / v; });
  if (op == "Exp") return mapCompute<T>(x, y, [](C v) { return std::exp(v); });
  if (op == "Log") return mapCompute<T>(x, y, [](C v) { return std::log(v); });
  if (op == "Erf") return mapCompute<T>(x, y, [](C v) { return std::erf(v); });
  if (op == "Tanh") return mapCompute<T>(x, y, [](C v) { return std::tanh(v); });
  if (op == "Cos") return mapCompute<T>(x, y, [](C v) { return std::cos(v); });
  if (op == "Sin") return mapCompute<T>(x, y, [](C v) { return std::sin(v); });
  if (op == "Floor") return mapCompute<T>(x, y, [](C v) { return std::floor(v); });
  if (op == "Sigmoid")
    // Split by sign so that exp never overflows into inf / inf.
    return mapCompute<T>(x, y, [](C v) {
      if (v >= 0)
        return C(1) / (C(1) + std::exp(-v));
      C e = std::exp(v);
      return e / (C(1) + e);
    });
  if (op == "IsNaN") {
    mapElements<T, BoolByte>(x, y, [](T v) { return BoolByte{std::isnan(load(v)) ? uint8_t(1)
                                                                                 : uint8_t(0)}; });
    return Status::ok();
  }
  if (op == "Gelu") {
    std::string approximate;
    DSRT_RETURN_IF_ERROR(stringAttr(ctx, "approximate", "none", approximate));
    if (approximate == "tanh")
      return mapCompute<T>(x, y, [](C v) {
        C inner = C(kSqrt2OverPi) * (v + C(0.044715) * v * v * v);
        return C(0.5) * v * (C(1) + std::tanh(inner));
      });
    return mapCompute<T>(x, y,
                         [](C v) { return C(0.5) * v * (C(1) + std::erf(v / C(kSqrt2))); });
  }
  return ctx.error("no float kernel");
}

Status computeUnary(const KernelContext &ctx, const Outputs &outputs) {
  const TensorRef &x = *ctx.input(0);
  const TensorRef &y = *outputs[0];
  std::string_view op = ctx.op;
  if (op == "Identity") {
    // dsc-plan-memory gives an Identity its input's arena slot: nothing to copy.
    if (x.bytes() > 0 && y.data != x.data)
      std::memcpy(y.data, x.data, x.bytes());
    return Status::ok();
  }
  return visitDType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    using C = ComputeType<T>;
    if constexpr (kIsBool<T>) {
      if (op == "Not")
        return mapCompute<T>(x, y, [](bool v) { return !v; });
    } else {
      if (op == "Abs")
        return mapCompute<T>(x, y, [](C v) -> C {
          if constexpr (std::is_floating_point_v<C>)
            return std::fabs(v);
          else if constexpr (std::is_unsigned_v<C>)
            return v;
          else
            return v < 0 ? wrapSub(C(0), v) : v;
        });
      if constexpr (kIsSigned<T>) {
        if (op == "Neg")
          return mapCompute<T>(x, y, [](C v) { return wrapSub(C(0), v); });
        // NaN < 0 is false, so NaN passes through as numpy's maximum(x, 0) does.
        if (op == "Relu")
          return mapCompute<T>(x, y, [](C v) { return v < C(0) ? C(0) : v; });
      }
      if constexpr (kIsFloat<T>)
        return computeFloatUnary<T>(ctx, x, y);
    }
    return ctx.error("no kernel for dtype ", dtypeName(x.dtype));
  });
}

Status inferClip(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "input", kNumericTypes));
  for (size_t i : {size_t(1), size_t(2)}) {
    const TensorRef *bound = ctx.input(i);
    if (!bound)
      continue;
    DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, i));
    if (bound->elements() != 1 || bound->shape.size() > 1)
      return ctx.error(i == 1 ? "min" : "max", " must be a scalar, but has shape ",
                       shapeString(bound->shape));
  }
  outputs.push_back({ctx.input(0)->dtype, ctx.input(0)->shape});
  return Status::ok();
}

Status computeClip(const KernelContext &ctx, const Outputs &outputs) {
  const TensorRef &x = *ctx.input(0);
  return visitDType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    using C = ComputeType<T>;
    if constexpr (kIsBool<T>) {
      return ctx.error("no kernel for bool");
    } else {
      const TensorRef *low = ctx.input(1), *high = ctx.input(2);
      C lowValue = low ? load(*low->as<T>()) : C(0);
      C highValue = high ? load(*high->as<T>()) : C(0);
      // max then min, as numpy.clip: with min > max every element becomes max.
      return mapCompute<T>(x, *outputs[0], [&](C v) {
        if (low && v < lowValue)
          v = lowValue;
        if (high && v > highValue)
          v = highValue;
        return v;
      });
    }
  });
}

} // namespace

void addElementwiseKernels(std::vector<KernelInfo> &kernels) {
  for (const char *name : {"Sqrt", "Reciprocal", "Neg", "Abs", "Exp", "Log", "Erf", "Tanh",
                           "Sigmoid", "Relu", "Cos", "Sin", "Floor", "IsNaN", "Not", "Identity",
                           "Gelu"})
    kernels.push_back({name, 1, 1, 1, 1, 1, inferUnary, computeUnary});
  kernels.push_back({"Clip", 1, 3, 1, 1, 1, inferClip, computeClip});
}

} // namespace dsrt::ops
