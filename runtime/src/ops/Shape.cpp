// Ops about shapes: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, ConstantOfShape,
// Range, and Dropout (an identity at inference). Reshape-like ops copy the bytes unchanged.
#include "ops/Kernel.h"
#include "ops/TypeDispatch.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dsrt::ops {
namespace {

// Element counts beyond this are refused before anything is allocated (Range, values
// read from a model): no real tensor is that large, and it keeps the arithmetic in range.
constexpr int64_t kMaxElements = int64_t(1) << 48;

Status copyInput(const KernelContext &ctx, const Outputs &outputs) {
  const TensorRef &in = *ctx.input(0);
  // dsc-plan-memory gives a view its input's arena slot: nothing to copy.
  if (in.bytes() > 0 && outputs[0]->data != in.data)
    std::memcpy(outputs[0]->data, in.data, in.bytes());
  return Status::ok();
}

void shapeRange(const KernelContext &ctx, int64_t &start, int64_t &end) {
  int64_t rank = static_cast<int64_t>(ctx.input(0)->shape.size());
  auto clampIndex = [rank](int64_t index) {
    if (index < 0)
      index += rank;
    return std::clamp<int64_t>(index, 0, rank);
  };
  start = clampIndex(start);
  end = clampIndex(end);
}

Status inferShape(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  int64_t rank = static_cast<int64_t>(ctx.input(0)->shape.size());
  int64_t start, end;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "start", 0, start));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "end", rank, end));
  shapeRange(ctx, start, end);
  outputs.push_back({DType::I64, {std::max<int64_t>(end - start, 0)}});
  return Status::ok();
}

Status computeShape(const KernelContext &ctx, const Outputs &outputs) {
  const Shape &shape = ctx.input(0)->shape;
  int64_t start, end;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "start", 0, start));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "end", static_cast<int64_t>(shape.size()), end));
  shapeRange(ctx, start, end);
  for (int64_t d = start; d < end; ++d)
    outputs[0]->as<int64_t>()[d - start] = shape[d];
  return Status::ok();
}

Status inferSize(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  outputs.push_back({DType::I64, {}});
  return Status::ok();
}

Status computeSize(const KernelContext &ctx, const Outputs &outputs) {
  *outputs[0]->as<int64_t>() = ctx.input(0)->elements();
  return Status::ok();
}

Status inferReshape(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  const TensorRef &data = *ctx.input(0);
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "shape", maskOf({DType::I64})));
  if (ctx.input(1)->shape.size() != 1)
    return ctx.error("shape must be 1-D, not ", shapeString(ctx.input(1)->shape));
  std::vector<int64_t> requested;
  DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 1, "shape", requested));
  int64_t allowZero;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "allowzero", 0, allowZero));
  Shape out(requested.begin(), requested.end());
  int inferred = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (inferred >= 0)
        return ctx.error("shape ", shapeString(requested), " has more than one -1");
      inferred = static_cast<int>(i);
    } else if (out[i] == 0 && !allowZero) {
      if (i >= data.shape.size())
        return ctx.error("shape ", shapeString(requested), " copies dimension ", i,
                         " (0), which data of shape ", shapeString(data.shape), " lacks");
      out[i] = data.shape[i];
    } else if (out[i] < 0) {
      return ctx.error("shape ", shapeString(requested), " has a negative dimension");
    }
  }
  int64_t total = data.elements();
  if (inferred >= 0) {
    if (allowZero && std::find(out.begin(), out.end(), 0) != out.end())
      return ctx.error("shape ", shapeString(requested),
                       " has both -1 and 0 with allowzero = 1");
    out[inferred] = 1;
    int64_t known = elementCount(out);
    if (known < 0 || known == 0 || total % known != 0)
      return ctx.error("cannot reshape ", shapeString(data.shape), " to ",
                       shapeString(requested));
    out[inferred] = total / known;
  }
  if (elementCount(out) != total)
    return ctx.error("cannot reshape ", shapeString(data.shape), " (", total,
                     " elements) to ", shapeString(requested));
  outputs.push_back({data.dtype, out});
  return Status::ok();
}

Status inferFlatten(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  const Shape &in = ctx.input(0)->shape;
  int64_t axis;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", 1, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, in.size(), "axis", axis, true));
  outputs.push_back({ctx.input(0)->dtype, {product(in, 0, axis), product(in, axis, in.size())}});
  return Status::ok();
}

Status inferSqueeze(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  const Shape &in = ctx.input(0)->shape;
  std::vector<bool> drop(in.size(), false);
  if (ctx.input(1)) {
    std::vector<int64_t> axes, normalized;
    DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 1, "axes", axes));
    DSRT_RETURN_IF_ERROR(normalizeAxes(ctx, axes, in.size(), "axis", normalized));
    for (int64_t axis : normalized) {
      if (in[axis] != 1)
        return ctx.error("cannot squeeze dimension ", axis, " of shape ", shapeString(in),
                         ": it is not 1");
      drop[axis] = true;
    }
  } else {
    for (size_t d = 0; d < in.size(); ++d)
      drop[d] = in[d] == 1;
  }
  Shape out;
  for (size_t d = 0; d < in.size(); ++d)
    if (!drop[d])
      out.push_back(in[d]);
  outputs.push_back({ctx.input(0)->dtype, out});
  return Status::ok();
}

Status inferUnsqueeze(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  const Shape &in = ctx.input(0)->shape;
  std::vector<int64_t> axes, normalized;
  DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 1, "axes", axes));
  size_t rank = in.size() + axes.size();
  DSRT_RETURN_IF_ERROR(normalizeAxes(ctx, axes, rank, "axis", normalized));
  std::vector<bool> inserted(rank, false);
  for (int64_t axis : normalized)
    inserted[axis] = true;
  Shape out;
  size_t next = 0;
  for (size_t d = 0; d < rank; ++d)
    out.push_back(inserted[d] ? 1 : in[next++]);
  outputs.push_back({ctx.input(0)->dtype, out});
  return Status::ok();
}

Status fillValue(const KernelContext &ctx, const OwnedTensor *&value) {
  value = nullptr;
  auto it = ctx.attrs.find("value");
  if (it == ctx.attrs.end())
    return Status::ok();
  if (it->second.kind != Attr::Kind::Tensor)
    return ctx.error("attribute 'value' must be a tensor");
  value = &it->second.tensor;
  if (elementCount(value->shape) != 1 || dtypeSize(value->dtype) == 0 ||
      value->storage.size() != dtypeSize(value->dtype))
    return ctx.error("attribute 'value' must hold exactly one element");
  return Status::ok();
}

Status inferConstantOfShape(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "input", maskOf({DType::I64})));
  if (ctx.input(0)->shape.size() != 1)
    return ctx.error("input must be 1-D, not ", shapeString(ctx.input(0)->shape));
  std::vector<int64_t> dims;
  DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 0, "input", dims));
  const OwnedTensor *value;
  DSRT_RETURN_IF_ERROR(fillValue(ctx, value));
  Shape shape(dims.begin(), dims.end());
  if (elementCount(shape) < 0 || elementCount(shape) > kMaxElements)
    return ctx.error("invalid shape ", shapeString(shape));
  outputs.push_back({value ? value->dtype : DType::F32, shape});
  return Status::ok();
}

Status computeConstantOfShape(const KernelContext &ctx, const Outputs &outputs) {
  const OwnedTensor *value;
  DSRT_RETURN_IF_ERROR(fillValue(ctx, value));
  const TensorRef &out = *outputs[0];
  if (!value) {
    if (out.bytes() > 0)
      std::memset(out.data, 0, out.bytes());  // ONNX's default: float 0
    return Status::ok();
  }
  size_t size = dtypeSize(out.dtype);
  uint8_t *dst = out.as<uint8_t>();
  for (int64_t i = 0, n = out.elements(); i < n; ++i)
    std::memcpy(dst + i * size, value->storage.data(), size);
  return Status::ok();
}

// The value of a one-element tensor of a signed integer dtype (checked by the caller).
int64_t integerScalar(const TensorRef &t) {
  switch (t.dtype) {
  case DType::I8: return *t.as<int8_t>();
  case DType::I16: return *t.as<int16_t>();
  case DType::I32: return *t.as<int32_t>();
  default: return *t.as<int64_t>();
  }
}

Status rangeCount(const KernelContext &ctx, int64_t &count) {
  DType dtype = ctx.input(0)->dtype;
  double start, limit, delta;
  DSRT_RETURN_IF_ERROR(readScalarAsDouble(ctx, 0, "start", start));
  DSRT_RETURN_IF_ERROR(readScalarAsDouble(ctx, 1, "limit", limit));
  DSRT_RETURN_IF_ERROR(readScalarAsDouble(ctx, 2, "delta", delta));
  if (delta == 0)
    return ctx.error("delta is zero");
  double steps;
  if (isInteger(dtype)) {
    // Exact integer arithmetic: int64 limits are not exact in double.
    int64_t s = integerScalar(*ctx.input(0)), l = integerScalar(*ctx.input(1)),
            d = integerScalar(*ctx.input(2));
    uint64_t span = d > 0 ? (l > s ? uint64_t(l) - uint64_t(s) : 0)
                          : (s > l ? uint64_t(s) - uint64_t(l) : 0);
    uint64_t step = d > 0 ? uint64_t(d) : uint64_t(0) - uint64_t(d);
    steps = static_cast<double>(span / step + (span % step != 0));
  } else {
    steps = std::ceil((limit - start) / delta);
    if (std::isnan(steps))
      return ctx.error("start, limit and delta give no count (NaN)");
    steps = std::max(steps, 0.0);
  }
  if (steps > static_cast<double>(kMaxElements))
    return ctx.error("the range has ", steps, " elements, too many");
  count = static_cast<int64_t>(steps);
  return Status::ok();
}

Status inferRange(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(
      ctx, 0, "start",
      maskOf({DType::F32, DType::F64, DType::I16, DType::I32, DType::I64, DType::F16,
              DType::BF16})));
  DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, 1));
  DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, 2));
  int64_t count = 0;
  DSRT_RETURN_IF_ERROR(rangeCount(ctx, count));
  outputs.push_back({ctx.input(0)->dtype, {count}});
  return Status::ok();
}

Status computeRange(const KernelContext &ctx, const Outputs &outputs) {
  const TensorRef &out = *outputs[0];
  return visitDType(out.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    using C = ComputeType<T>;
    if constexpr (kIsBool<T>) {
      return ctx.error("no kernel for bool");
    } else {
      C start = load(*ctx.input(0)->as<T>()), delta = load(*ctx.input(2)->as<T>());
      T *dst = out.as<T>();
      for (int64_t i = 0, n = out.elements(); i < n; ++i)
        dst[i] = store<T>(wrapAdd(start, wrapMul(static_cast<C>(i), delta)));
      return Status::ok();
    }
  });
}

Status inferDropout(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  const TensorRef &data = *ctx.input(0);
  // The output shape does not depend on training_mode; it is checked whenever it is known
  // (always, when computing).
  if (ctx.input(2) && ctx.input(2)->data && (!ctx.input(1) || ctx.input(1)->data)) {
    double training, ratio = 0.5;
    DSRT_RETURN_IF_ERROR(readScalarAsDouble(ctx, 2, "training_mode", training));
    if (ctx.input(1))
      DSRT_RETURN_IF_ERROR(readScalarAsDouble(ctx, 1, "ratio", ratio));
    // Training with a zero ratio drops nothing; any other training run would be random.
    if (training != 0 && ratio != 0)
      return ctx.error("training_mode is true: random dropout is not supported");
  }
  outputs.push_back({data.dtype, data.shape});
  if (ctx.numOutputs > 1)
    outputs.push_back({DType::Bool, data.shape});
  return Status::ok();
}

Status computeDropout(const KernelContext &ctx, const Outputs &outputs) {
  DSRT_RETURN_IF_ERROR(copyInput(ctx, outputs));
  if (outputs.size() > 1 && outputs[1]->elements() > 0)
    std::memset(outputs[1]->data, 1, static_cast<size_t>(outputs[1]->elements()));
  return Status::ok();
}

} // namespace

void addShapeKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"Shape", 1, 1, 1, 1, 1, inferShape, computeShape});
  kernels.push_back({"Size", 1, 1, 1, 1, 1, inferSize, computeSize});
  kernels.push_back({"Reshape", 2, 2, 2, 1, 1, inferReshape, copyInput});
  kernels.push_back({"Flatten", 1, 1, 1, 1, 1, inferFlatten, copyInput});
  kernels.push_back({"Squeeze", 1, 2, 1, 1, 1, inferSqueeze, copyInput});
  kernels.push_back({"Unsqueeze", 2, 2, 2, 1, 1, inferUnsqueeze, copyInput});
  kernels.push_back(
      {"ConstantOfShape", 1, 1, 1, 1, 1, inferConstantOfShape, computeConstantOfShape});
  kernels.push_back({"Range", 3, 3, 3, 1, 1, inferRange, computeRange});
  kernels.push_back({"Dropout", 1, 3, 1, 1, 2, inferDropout, computeDropout});
}

} // namespace dsrt::ops
