#include "codegen/WeightTransforms.h"

#include <cstring>
#include <numeric>

namespace dsc {

using dsrt::DType;
using dsrt::Shape;
using dsrt::Status;

WeightTransform WeightTransform::transpose(std::vector<int64_t> perm) {
  WeightTransform t;
  t.kind = Kind::Transpose;
  t.perm = std::move(perm);
  return t;
}

WeightTransform WeightTransform::slice(int64_t axis, int64_t offset, int64_t size,
                                       int64_t groups) {
  WeightTransform t;
  t.groups = groups;
  t.kind = Kind::Slice;
  t.axis = axis;
  t.offset = offset;
  t.size = size;
  return t;
}

WeightTransform WeightTransform::convert(DType to) {
  WeightTransform t;
  t.kind = Kind::Convert;
  t.to = to;
  return t;
}

namespace {

bool convertible(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

Status step(DType dtype, const Shape &shape, const WeightTransform &t, size_t index,
            DType &outDtype, Shape &outShape) {
  std::string where = "weight transform " + std::to_string(index) + ": ";
  outDtype = dtype;
  outShape = shape;
  int64_t rank = static_cast<int64_t>(shape.size());
  switch (t.kind) {
  case WeightTransform::Kind::Transpose: {
    if (static_cast<int64_t>(t.perm.size()) != rank)
      return Status::error(where + "transpose has " + std::to_string(t.perm.size()) +
                           " entries for rank " + std::to_string(rank));
    std::vector<bool> seen(rank, false);
    for (size_t i = 0; i < t.perm.size(); ++i) {
      int64_t p = t.perm[i];
      if (p < 0 || p >= rank || seen[p])
        return Status::error(where + "transpose is not a permutation");
      seen[p] = true;
      outShape[i] = shape[p];
    }
    return Status::ok();
  }
  case WeightTransform::Kind::Slice:
    if (t.axis < 0 || t.axis >= rank || t.offset < 0 || t.size < 0 || t.groups < 1 ||
        shape[t.axis] % t.groups != 0 || t.offset + t.size > shape[t.axis] / t.groups)
      return Status::error(where + "slice [" + std::to_string(t.offset) + ", +" +
                           std::to_string(t.size) + ")" +
                           (t.groups == 1 ? std::string()
                                          : " of each of " + std::to_string(t.groups) +
                                                " blocks") +
                           " along axis " + std::to_string(t.axis) + " does not fit " +
                           dsrt::shapeString(shape));
    outShape[t.axis] = t.size * t.groups;
    return Status::ok();
  case WeightTransform::Kind::Convert:
    if (!convertible(dtype) || !convertible(t.to))
      return Status::error(where + "cannot convert " + dsrt::dtypeName(dtype) + " to " +
                           dsrt::dtypeName(t.to) + " (f32, f16 and bf16 convert)");
    outDtype = t.to;
    return Status::ok();
  }
  return Status::error(where + "unknown kind");
}

// Row-major strides in elements.
std::vector<int64_t> stridesOf(const Shape &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

void applyOne(const uint8_t *in, DType dtype, const Shape &shape, const WeightTransform &t,
              DType outDtype, const Shape &outShape, uint8_t *out) {
  size_t width = dsrt::dtypeSize(dtype);
  int64_t count = dsrt::elementCount(outShape);
  if (t.kind == WeightTransform::Kind::Convert) {
    dsrt::convertFloats(dtype, in, outDtype, out, count);  // step() checked the dtypes
    return;
  }
  // Transpose and slice: walk the output in order and gather from the input.
  std::vector<int64_t> inStrides = stridesOf(shape);
  std::vector<int64_t> index(outShape.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t source = 0;
    for (size_t d = 0; d < outShape.size(); ++d) {
      if (t.kind == WeightTransform::Kind::Transpose)
        source += index[d] * inStrides[t.perm[d]];
      else if (static_cast<int64_t>(d) == t.axis)
        source += ((index[d] / t.size) * (shape[d] / t.groups) + t.offset + index[d] % t.size) *
                  inStrides[d];
      else
        source += index[d] * inStrides[d];
    }
    std::memcpy(out + i * width, in + source * width, width);
    for (int64_t d = static_cast<int64_t>(outShape.size()) - 1; d >= 0; --d) {
      if (++index[d] < outShape[d])
        break;
      index[d] = 0;
    }
  }
}

} // namespace

Status transformedType(DType dtype, const Shape &shape,
                       const std::vector<WeightTransform> &transforms, DType &outDtype,
                       Shape &outShape) {
  outDtype = dtype;
  outShape = shape;
  for (size_t i = 0; i < transforms.size(); ++i) {
    DType nextDtype;
    Shape nextShape;
    DSRT_RETURN_IF_ERROR(step(outDtype, outShape, transforms[i], i, nextDtype, nextShape));
    outDtype = nextDtype;
    outShape = std::move(nextShape);
  }
  return Status::ok();
}

Status applyWeightTransforms(const uint8_t *source, DType dtype, const Shape &shape,
                             const std::vector<WeightTransform> &transforms,
                             uint8_t *destination) {
  DType finalDtype;
  Shape finalShape;
  DSRT_RETURN_IF_ERROR(transformedType(dtype, shape, transforms, finalDtype, finalShape));
  if (transforms.empty()) {
    std::memcpy(destination, source,
                static_cast<size_t>(dsrt::elementCount(shape)) * dsrt::dtypeSize(dtype));
    return Status::ok();
  }
  std::vector<uint8_t> current, next;
  const uint8_t *in = source;
  DType inDtype = dtype;
  Shape inShape = shape;
  for (size_t i = 0; i < transforms.size(); ++i) {
    DType outDtype;
    Shape outShape;
    DSRT_RETURN_IF_ERROR(step(inDtype, inShape, transforms[i], i, outDtype, outShape));
    uint8_t *out = destination;
    if (i + 1 < transforms.size()) {
      next.resize(static_cast<size_t>(dsrt::elementCount(outShape)) * dsrt::dtypeSize(outDtype));
      out = next.data();
    }
    applyOne(in, inDtype, inShape, transforms[i], outDtype, outShape, out);
    current.swap(next);
    in = current.data();
    inDtype = outDtype;
    inShape = std::move(outShape);
  }
  return Status::ok();
}

} // namespace dsc
