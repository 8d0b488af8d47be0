// Helpers shared by the kernel files (declared in Kernel.h).
#include "ops/Kernel.h"
#include "ops/TypeDispatch.h"

#include <algorithm>

namespace dsrt::ops {

Status checkDType(const KernelContext &ctx, size_t index, const char *name, DTypeMask mask) {
  const TensorRef *tensor = ctx.input(index);
  if (!tensor)
    return ctx.error("input '", name, "' is required");
  if (!inMask(tensor->dtype, mask))
    return ctx.error("input '", name, "' has dtype ", dtypeName(tensor->dtype),
                     ", which this op does not accept");
  return Status::ok();
}

Status checkSameDType(const KernelContext &ctx, size_t a, size_t b) {
  if (ctx.input(a)->dtype != ctx.input(b)->dtype)
    return ctx.error("inputs ", a, " and ", b, " must have the same dtype, not ",
                     dtypeName(ctx.input(a)->dtype), " and ", dtypeName(ctx.input(b)->dtype));
  return Status::ok();
}

Status normalizeAxis(const KernelContext &ctx, int64_t axis, int64_t rank, const char *what,
                     int64_t &out, bool inclusiveEnd) {
  // Negative axes count from the end either way: -1 is the last dimension.
  int64_t limit = inclusiveEnd ? rank + 1 : rank;
  int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= limit)
    return ctx.error(what, " ", axis, " is out of range for rank ", rank);
  out = normalized;
  return Status::ok();
}

Status normalizeAxes(const KernelContext &ctx, const std::vector<int64_t> &axes, int64_t rank,
                     const char *what, std::vector<int64_t> &out) {
  out.clear();
  for (int64_t axis : axes) {
    int64_t normalized;
    DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, rank, what, normalized));
    if (std::find(out.begin(), out.end(), normalized) != out.end())
      return ctx.error(what, " ", axis, " appears more than once");
    out.push_back(normalized);
  }
  return Status::ok();
}

Status readIndexValues(const KernelContext &ctx, size_t index, const char *name,
                       std::vector<int64_t> &out) {
  const TensorRef *tensor = ctx.input(index);
  if (!tensor)
    return ctx.error("input '", name, "' is required");
  if (!inMask(tensor->dtype, kIndexTypes))
    return ctx.error("input '", name, "' must be i32 or i64, not ", dtypeName(tensor->dtype));
  int64_t count = tensor->elements();
  if (count > 0 && !tensor->data)
    return ctx.error("the value of input '", name, "' ", kUnknownValue,
                     ", but the output shape depends on it");
  out.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    out[i] = tensor->dtype == DType::I64 ? tensor->as<int64_t>()[i] : tensor->as<int32_t>()[i];
  return Status::ok();
}

Status readIndexScalar(const KernelContext &ctx, size_t index, const char *name, int64_t &out) {
  std::vector<int64_t> values;
  DSRT_RETURN_IF_ERROR(readIndexValues(ctx, index, name, values));
  if (values.size() != 1 || ctx.input(index)->shape.size() > 1)
    return ctx.error("input '", name, "' must be a scalar, but has shape ",
                     shapeString(ctx.input(index)->shape));
  out = values[0];
  return Status::ok();
}

Status readScalarAsDouble(const KernelContext &ctx, size_t index, const char *name,
                          double &out) {
  const TensorRef *tensor = ctx.input(index);
  if (!tensor)
    return ctx.error("input '", name, "' is required");
  if (tensor->elements() != 1)
    return ctx.error("input '", name, "' must hold one element, but has shape ",
                     shapeString(tensor->shape));
  if (!tensor->data)
    return ctx.error("the value of input '", name, "' ", kUnknownValue);
  return visitDType(tensor->dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    out = static_cast<double>(load(*tensor->as<T>()));
    return Status::ok();
  });
}

int64_t product(const Shape &shape, size_t begin, size_t end) {
  int64_t result = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i)
    result *= shape[i];
  return result;
}

Status checkShape(const KernelContext &ctx, const Shape &shape, const char *what) {
  if (elementCount(shape) < 0)
    return ctx.error(what, " ", shapeString(shape),
                     " has a negative dimension or too many elements");
  return Status::ok();
}

Status intAttr(const KernelContext &ctx, std::string_view name, int64_t fallback,
               int64_t &out) {
  Status status = getInt(ctx.attrs, name, fallback, out);
  return status.isOk() ? status : ctx.error(status.message());
}

Status floatAttr(const KernelContext &ctx, std::string_view name, float fallback, float &out) {
  Status status = getFloat(ctx.attrs, name, fallback, out);
  return status.isOk() ? status : ctx.error(status.message());
}

Status stringAttr(const KernelContext &ctx, std::string_view name, std::string fallback,
                  std::string &out) {
  Status status = getString(ctx.attrs, name, std::move(fallback), out);
  return status.isOk() ? status : ctx.error(status.message());
}

} // namespace dsrt::ops
