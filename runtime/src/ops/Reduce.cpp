// ReduceMean, ReduceSum, ReduceMax and CumSum. Floats accumulate in fp32 (f64 in f64),
// signed integers in int64 and unsigned ones in uint64, wrapping.
#include "ops/Kernel.h"
#include "ops/Strided.h"
#include "ops/TypeDispatch.h"

#include <cmath>
#include <limits>

namespace dsrt::ops {
namespace {

template <typename T> struct SumTypeOf {
  using type = std::conditional_t<kIsFloat<T>, ComputeType<T>,
                                  std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
};
template <> struct SumTypeOf<BoolByte> { using type = int64_t; };
template <typename T> using SumType = typename SumTypeOf<T>::type;

DTypeMask reduceTypes(std::string_view op) {
  if (op == "ReduceMax")
    return kFloatTypes | kWideIntTypes | maskOf({DType::I8, DType::U8, DType::Bool});
  return kFloatTypes | kWideIntTypes;
}

// Which dimensions are reduced; `identity` when noop_with_empty_axes leaves the data as is.
Status reducedAxes(const KernelContext &ctx, std::vector<bool> &reduced, bool &identity) {
  const TensorRef &data = *ctx.input(0);
  size_t rank = data.shape.size();
  std::vector<int64_t> axes;
  if (ctx.input(1))
    DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 1, "axes", axes));
  int64_t noop;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "noop_with_empty_axes", 0, noop));
  identity = axes.empty() && noop != 0;
  reduced.assign(rank, axes.empty() && !identity);
  std::vector<int64_t> normalized;
  DSRT_RETURN_IF_ERROR(normalizeAxes(ctx, axes, rank, "axis", normalized));
  for (int64_t axis : normalized)
    reduced[axis] = true;
  return Status::ok();
}

Status inferReduce(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "data", reduceTypes(ctx.op)));
  std::vector<bool> reduced;
  bool identity;
  DSRT_RETURN_IF_ERROR(reducedAxes(ctx, reduced, identity));
  int64_t keepdims;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "keepdims", 1, keepdims));
  const Shape &in = ctx.input(0)->shape;
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!reduced[d])
      out.push_back(in[d]);
    else if (keepdims)
      out.push_back(1);
  }
  outputs.push_back({ctx.input(0)->dtype, out});
  return Status::ok();
}

template <typename T>
Status reduceTyped(const KernelContext &ctx, const TensorRef &out) {
  using S = SumType<T>;
  const TensorRef &data = *ctx.input(0);
  std::vector<bool> reduced;
  bool identity;
  DSRT_RETURN_IF_ERROR(reducedAxes(ctx, reduced, identity));
  const T *src = data.as<T>();
  T *dst = out.as<T>();
  if (identity) {
    for (int64_t i = 0, n = data.elements(); i < n; ++i)
      dst[i] = src[i];
    return Status::ok();
  }
  // The output viewed with the input's rank: 1 along reduced dimensions.
  Shape kept = data.shape;
  int64_t count = 1;
  for (size_t d = 0; d < kept.size(); ++d)
    if (reduced[d]) {
      count *= kept[d];
      kept[d] = 1;
    }
  bool isMax = ctx.op == "ReduceMax";
  S initial = S(0);
  if (isMax)
    initial = std::numeric_limits<S>::has_infinity ? -std::numeric_limits<S>::infinity()
                                                   : std::numeric_limits<S>::lowest();
  std::vector<S> acc(static_cast<size_t>(out.elements()), initial);
  forEachBroadcast<1>(data.shape, {&kept}, [&](int64_t i, const std::array<int64_t, 1> &at) {
    S value = static_cast<S>(load(src[i]));
    S &slot = acc[at[0]];
    if (!isMax)
      slot = wrapAdd(slot, value);
    else if (value != value || value > slot)  // NaN propagates, as numpy's max
      slot = slot != slot ? slot : value;
  });
  bool isMean = ctx.op == "ReduceMean";
  for (size_t i = 0; i < acc.size(); ++i) {
    S value = acc[i];
    if (isMean) {
      if constexpr (std::is_floating_point_v<S>)
        value = value / S(count);
      else
        value = count > 0 ? value / S(count) : S(0);
    }
    if constexpr (kIsBool<T>)
      dst[i] = BoolByte{static_cast<uint8_t>(value != 0 && value != initial ? 1 : 0)};
    else
      dst[i] = store<T>(static_cast<ComputeType<T>>(value));
  }
  return Status::ok();
}

Status computeReduce(const KernelContext &ctx, const Outputs &outputs) {
  return visitDType(ctx.input(0)->dtype, [&](auto tag) -> Status {
    return reduceTyped<decltype(tag)>(ctx, *outputs[0]);
  });
}

Status cumSumAxis(const KernelContext &ctx, int64_t &axis) {
  DSRT_RETURN_IF_ERROR(readIndexScalar(ctx, 1, "axis", axis));
  return normalizeAxis(ctx, axis, ctx.input(0)->shape.size(), "axis", axis);
}

Status inferCumSum(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "x", kFloatTypes | kWideIntTypes));
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "axis", kIndexTypes));
  // The axis only matters for the values, but it must be valid whenever it is known.
  if (ctx.input(1)->data) {
    int64_t axis;
    DSRT_RETURN_IF_ERROR(cumSumAxis(ctx, axis));
  }
  outputs.push_back({ctx.input(0)->dtype, ctx.input(0)->shape});
  return Status::ok();
}

template <typename T>
Status cumSumTyped(const KernelContext &ctx, const TensorRef &out, int64_t axis) {
  using S = SumType<T>;
  const TensorRef &x = *ctx.input(0);
  int64_t exclusive, reverse;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "exclusive", 0, exclusive));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "reverse", 0, reverse));
  int64_t outer = product(x.shape, 0, axis);
  int64_t n = x.shape[axis];
  int64_t inner = product(x.shape, axis + 1, x.shape.size());
  const T *src = x.as<T>();
  T *dst = out.as<T>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      S sum = 0;
      for (int64_t step = 0; step < n; ++step) {
        int64_t k = reverse ? n - 1 - step : step;
        int64_t at = (o * n + k) * inner + i;
        S value = static_cast<S>(load(src[at]));
        if (!exclusive)
          sum = wrapAdd(sum, value);
        dst[at] = store<T>(static_cast<ComputeType<T>>(sum));
        if (exclusive)
          sum = wrapAdd(sum, value);
      }
    }
  }
  return Status::ok();
}

Status computeCumSum(const KernelContext &ctx, const Outputs &outputs) {
  int64_t axis;
  DSRT_RETURN_IF_ERROR(cumSumAxis(ctx, axis));
  return visitDType(ctx.input(0)->dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (kIsBool<T>)
      return ctx.error("no kernel for bool");
    else
      return cumSumTyped<T>(ctx, *outputs[0], axis);
  });
}

} // namespace

void addReduceKernels(std::vector<KernelInfo> &kernels) {
  for (const char *name : {"ReduceMean", "ReduceSum", "ReduceMax"})
    kernels.push_back({name, 1, 2, 1, 1, 1, inferReduce, computeReduce});
  kernels.push_back({"CumSum", 2, 2, 2, 1, 1, inferCumSum, computeCumSum});
}

} // namespace dsrt::ops
