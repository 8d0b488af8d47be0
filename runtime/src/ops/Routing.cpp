// What mixture-of-experts routing uses: TopK (the experts each token picks), OneHot (their
// masks) and NonZero (the tokens each expert takes). NonZero's output shape, and TopK's and
// OneHot's where K or depth is computed, depend on values: without them inference says
// kUnknownValue, and the compiler makes the outputs dynamic tensors.
#include "ops/Kernel.h"
#include "ops/TypeDispatch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace dsrt::ops {
namespace {

// ---- TopK -----------------------------------------------------------------------------------

struct TopKShape {
  int64_t axis, k;
  bool largest;
};

Status topKShape(const KernelContext &ctx, TopKShape &out) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "X", kNumericTypes));
  const Shape &x = ctx.input(0)->shape;
  if (x.empty())
    return ctx.error("X must have rank 1 or more");
  int64_t axis, largest;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", -1, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, x.size(), "axis", out.axis));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "largest", 1, largest));
  out.largest = largest != 0;
  DSRT_RETURN_IF_ERROR(readIndexScalar(ctx, 1, "K", out.k));
  if (out.k < 0 || out.k > x[out.axis])
    return ctx.error("K ", out.k, " is outside [0, ", x[out.axis], "], the size of axis ",
                     out.axis, " of X ", shapeString(x));
  return Status::ok();
}

Status inferTopK(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  TopKShape s;
  DSRT_RETURN_IF_ERROR(topKShape(ctx, s));
  Shape shape = ctx.input(0)->shape;
  shape[s.axis] = s.k;
  outputs.push_back({ctx.input(0)->dtype, shape});
  outputs.push_back({DType::I64, shape});
  return Status::ok();
}

// Whether a ranks before b: the larger (smaller) value first, NaN above every number as in
// PyTorch's topk, and of equal values the lower index first, as ONNX specifies. A strict
// total order, so the selection is deterministic.
template <typename V> bool ranksBefore(V a, V b, int64_t ia, int64_t ib, bool largest) {
  if constexpr (std::is_floating_point_v<V>) {
    bool nanA = std::isnan(a), nanB = std::isnan(b);
    if (nanA || nanB) {
      if (nanA && nanB)
        return ia < ib;
      return largest ? nanA : nanB;
    }
  }
  if (a != b)
    return largest ? a > b : a < b;
  return ia < ib;
}

// `sorted` = 0 leaves the order unspecified; the sorted order is one such order.
Status computeTopK(const KernelContext &ctx, const Outputs &outputs) {
  TopKShape s;
  DSRT_RETURN_IF_ERROR(topKShape(ctx, s));
  const TensorRef &x = *ctx.input(0);
  int64_t dim = x.shape[s.axis];
  int64_t outer = product(x.shape, 0, s.axis);
  int64_t inner = product(x.shape, s.axis + 1, x.shape.size());
  int64_t *indicesOut = outputs[1]->as<int64_t>();
  return visitDType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (kIsBool<T>) {
      return ctx.error("X must be numbers, not bool");  // topKShape's dtype check refused it
    } else {
      const T *src = x.as<T>();
      T *values = outputs[0]->as<T>();
      std::vector<int64_t> order(static_cast<size_t>(dim));
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T *line = src + o * dim * inner + i;
          std::iota(order.begin(), order.end(), int64_t(0));
          std::partial_sort(order.begin(), order.begin() + s.k, order.end(),
                            [&](int64_t a, int64_t b) {
                              return ranksBefore(load(line[a * inner]), load(line[b * inner]),
                                                 a, b, s.largest);
                            });
          int64_t base = o * s.k * inner + i;
          for (int64_t r = 0; r < s.k; ++r) {
            values[base + r * inner] = line[order[r] * inner];
            indicesOut[base + r * inner] = order[r];
          }
        }
      return Status::ok();
    }
  });
}

// ---- OneHot ---------------------------------------------------------------------------------

struct OneHotShape {
  int64_t axis, depth;
};

Status oneHotShape(const KernelContext &ctx, OneHotShape &out) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "indices", kNumericTypes));
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "depth", kNumericTypes));
  const Shape &indices = ctx.input(0)->shape, &values = ctx.input(2)->shape;
  if (values.size() != 1 || values[0] != 2)
    return ctx.error("values must be [off_value, on_value], not of shape ",
                     shapeString(values));
  int64_t axis;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", -1, axis));
  // The new axis counts in the output's rank, one more than the indices'.
  DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, static_cast<int64_t>(indices.size()) + 1,
                                     "axis", out.axis));
  // ONNX casts a non-integer depth to int64.
  double depth;
  DSRT_RETURN_IF_ERROR(readScalarAsDouble(ctx, 1, "depth", depth));
  if (!(depth >= 1) || depth > 9.0e18)
    return ctx.error("depth ", depth, " is not a positive number of classes");
  out.depth = static_cast<int64_t>(depth);
  return Status::ok();
}

Status inferOneHot(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  OneHotShape s;
  DSRT_RETURN_IF_ERROR(oneHotShape(ctx, s));
  Shape shape = ctx.input(0)->shape;
  shape.insert(shape.begin() + s.axis, s.depth);
  // As ConstantOfShape's: a depth read off the data must not ask for an allocation no
  // machine has (2^48 elements).
  if (elementCount(shape) < 0 || elementCount(shape) > (int64_t(1) << 48))
    return ctx.error("depth ", s.depth, " makes an output of shape ", shapeString(shape),
                     ", too many elements");
  outputs.push_back({ctx.input(2)->dtype, shape});
  return Status::ok();
}

// An index outside [-depth, depth) sets nothing: its row is all off_value, as ONNX says.
Status computeOneHot(const KernelContext &ctx, const Outputs &outputs) {
  OneHotShape s;
  DSRT_RETURN_IF_ERROR(oneHotShape(ctx, s));
  const TensorRef &indices = *ctx.input(0), &values = *ctx.input(2);
  int64_t outer = product(indices.shape, 0, s.axis);
  int64_t inner = product(indices.shape, s.axis, indices.shape.size());
  std::vector<int64_t> hot(static_cast<size_t>(indices.elements()));
  DSRT_RETURN_IF_ERROR(visitDType(indices.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T *src = indices.as<T>();
    for (size_t i = 0; i < hot.size(); ++i) {
      auto value = load(src[i]);
      if constexpr (kIsFloat<T>)
        hot[i] = std::isfinite(static_cast<double>(value))
                     ? saturatingFloatToInt<int64_t>(static_cast<double>(value))
                     : s.depth;  // outside any depth
      else if constexpr (std::is_unsigned_v<T>)
        hot[i] = value > static_cast<uint64_t>(s.depth) ? s.depth : static_cast<int64_t>(value);
      else
        hot[i] = static_cast<int64_t>(value);
    }
    return Status::ok();
  }));
  size_t size = dtypeSize(values.dtype);
  const uint8_t *off = values.as<uint8_t>(), *on = off + size;
  uint8_t *dst = outputs[0]->as<uint8_t>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t d = 0; d < s.depth; ++d)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t index = hot[o * inner + i];
        bool isHot = index == d || (index < 0 && index + s.depth == d);
        std::memcpy(dst + ((o * s.depth + d) * inner + i) * size, isHot ? on : off, size);
      }
  return Status::ok();
}

// ---- NonZero --------------------------------------------------------------------------------

// Whether each element of `x` is non-zero (NaN is; -0.0 is not).
Status nonZeroMask(const TensorRef &x, std::vector<bool> &mask) {
  mask.assign(static_cast<size_t>(x.elements()), false);
  return visitDType(x.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T *src = x.as<T>();
    for (size_t i = 0; i < mask.size(); ++i) {
      auto value = load(src[i]);
      mask[i] = !(value == decltype(value)(0));
    }
    return Status::ok();
  });
}

Status countNonZero(const KernelContext &ctx, std::vector<bool> &mask, int64_t &count) {
  const TensorRef &x = *ctx.input(0);
  if (x.elements() > 0 && !x.data)
    return ctx.error("the value of input 'X' ", kUnknownValue,
                     ", but the output shape depends on it");
  DSRT_RETURN_IF_ERROR(nonZeroMask(x, mask));
  count = std::count(mask.begin(), mask.end(), true);
  return Status::ok();
}

// A scalar reads as a vector of one element, as numpy's nonzero and onnxruntime read it.
int64_t nonZeroRows(const Shape &x) { return std::max<int64_t>(x.size(), 1); }

Status inferNonZero(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  std::vector<bool> mask;
  int64_t count;
  DSRT_RETURN_IF_ERROR(countNonZero(ctx, mask, count));
  outputs.push_back({DType::I64, {nonZeroRows(ctx.input(0)->shape), count}});
  return Status::ok();
}

// Row d holds the d-th coordinate of each non-zero element, in row-major order.
Status computeNonZero(const KernelContext &ctx, const Outputs &outputs) {
  std::vector<bool> mask;
  int64_t count;
  DSRT_RETURN_IF_ERROR(countNonZero(ctx, mask, count));
  Shape shape = ctx.input(0)->shape;
  if (shape.empty())
    shape = {1};
  int64_t *dst = outputs[0]->as<int64_t>();
  int64_t n = 0;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (!mask[i])
      continue;
    int64_t rest = static_cast<int64_t>(i);
    for (size_t d = shape.size(); d-- > 0;) {
      dst[d * count + n] = rest % shape[d];
      rest /= shape[d];
    }
    ++n;
  }
  return Status::ok();
}

} // namespace

void addRoutingKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"TopK", 2, 2, 2, 2, 2, inferTopK, computeTopK});
  kernels.push_back({"OneHot", 3, 3, 3, 1, 1, inferOneHot, computeOneHot});
  kernels.push_back({"NonZero", 1, 1, 1, 1, 1, inferNonZero, computeNonZero});
}

} // namespace dsrt::ops
