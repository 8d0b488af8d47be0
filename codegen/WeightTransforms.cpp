#include "codegen/WeightTransforms.h"

#include <algorithm>
#include <cmath>
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

WeightTransform WeightTransform::quantizeInt8(int64_t groupSize, DType scaleDtype) {
  WeightTransform t;
  t.kind = Kind::QuantizeInt8;
  t.groupSize = groupSize;
  t.scaleDtype = scaleDtype;
  return t;
}

WeightTransform WeightTransform::quantScales(int64_t groupSize) {
  WeightTransform t;
  t.kind = Kind::QuantScales;
  t.groupSize = groupSize;
  return t;
}

WeightTransform WeightTransform::quantizeInt4(int64_t groupSize, DType scaleDtype) {
  WeightTransform t = quantizeInt8(groupSize, scaleDtype);
  t.kind = Kind::QuantizeInt4;
  return t;
}

WeightTransform WeightTransform::quantScalesInt4(int64_t groupSize) {
  WeightTransform t = quantScales(groupSize);
  t.kind = Kind::QuantScalesInt4;
  return t;
}

WeightTransform WeightTransform::scale(double factor) {
  WeightTransform t;
  t.kind = Kind::Scale;
  t.factor = factor;
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
  case WeightTransform::Kind::Scale:
    if (!convertible(dtype) || !std::isfinite(t.factor) || t.factor == 0)
      return Status::error(where + "cannot scale " + dsrt::dtypeName(dtype) + " by " +
                           std::to_string(t.factor) +
                           " (f32, f16 and bf16 scale, by a finite nonzero factor)");
    return Status::ok();
  case WeightTransform::Kind::Convert:
    if (!convertible(dtype) || !convertible(t.to))
      return Status::error(where + "cannot convert " + dsrt::dtypeName(dtype) + " to " +
                           dsrt::dtypeName(t.to) + " (f32, f16 and bf16 convert)");
    outDtype = t.to;
    return Status::ok();
  case WeightTransform::Kind::QuantizeInt8:
  case WeightTransform::Kind::QuantScales: {
    const char *what = t.kind == WeightTransform::Kind::QuantizeInt8 ? "int8 quantization"
                                                                      : "int8 scales";
    if (rank != 2 || !convertible(dtype))
      return Status::error(where + what + " needs a float [out, in] weight, not " +
                           dsrt::dtypeName(dtype) + " " + dsrt::shapeString(shape));
    if (t.groupSize < 0 || (t.groupSize > 0 && shape[1] % t.groupSize != 0))
      return Status::error(where + what + ": group size " + std::to_string(t.groupSize) +
                           " does not divide the " + std::to_string(shape[1]) +
                           " input features");
    if (t.kind == WeightTransform::Kind::QuantizeInt8) {
      if (!convertible(t.scaleDtype))
        return Status::error(where + "int8 scales must be f32, f16 or bf16");
      outDtype = DType::I8;
    } else {
      outDtype = DType::F32;
      outShape[1] = t.groupSize == 0 ? 1 : shape[1] / t.groupSize;
    }
    return Status::ok();
  }
  case WeightTransform::Kind::QuantizeInt4:
  case WeightTransform::Kind::QuantScalesInt4: {
    const char *what = t.kind == WeightTransform::Kind::QuantizeInt4 ? "int4 quantization"
                                                                      : "int4 scales";
    if (rank != 2 || !convertible(dtype))
      return Status::error(where + what + " needs a float [out, in] weight, not " +
                           dsrt::dtypeName(dtype) + " " + dsrt::shapeString(shape));
    if (t.groupSize <= 0 || t.groupSize % 2 != 0 || shape[1] % t.groupSize != 0)
      return Status::error(where + what + ": group size " + std::to_string(t.groupSize) +
                           " is not a positive even divisor of the " +
                           std::to_string(shape[1]) + " input features");
    if (t.kind == WeightTransform::Kind::QuantizeInt4) {
      if (!convertible(t.scaleDtype))
        return Status::error(where + "int4 scales must be f32, f16 or bf16");
      outDtype = DType::U8;
      outShape[1] = shape[1] / 2;
    } else {
      outDtype = DType::F32;
      outShape[1] = shape[1] / t.groupSize;
    }
    return Status::ok();
  }
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

// f32 `value` as `dtype` stores it, back in f32.
float roundedTo(DType dtype, float value) {
  if (dtype == DType::F32)
    return value;
  uint8_t stored[4];
  float back = 0;
  dsrt::convertFloats(DType::F32, &value, dtype, stored, 1);
  dsrt::convertFloats(dtype, stored, DType::F32, &back, 1);
  return back;
}

// The int4 scale of one group: of the scales max|w| / d for d in [6, 9] by quarters (as
// `scaleDtype` stores them), the one whose codes in [-8, 7] lose the least squared error.
// d = 7 is plain max-abs scaling; d > 7 clips the largest values to resolve the rest more
// finely, and d = 8 uses code -8 for a negative extreme (llama.cpp's quantizers search the
// same way). The first of equal errors wins, so the choice is deterministic.
float searchInt4Scale(const float *values, int64_t count, float absMax, DType scaleDtype) {
  float best = roundedTo(scaleDtype, absMax / 7.0f);
  if (!(absMax > 0) || !std::isfinite(best))
    return best;
  // Adding 1.5 * 2^23 rounds a float below 2^22 in magnitude to an integer, ties to even as
  // std::nearbyint does, without a libm call: the search tries 13 scales per group and is
  // most of an int4 compile's quantization time.
  constexpr float kRounder = 12582912.0f;
  float bestError = -1;
  for (int step = 0; step <= 12; ++step) {
    const float scale = roundedTo(scaleDtype, absMax / (7.0f + 0.25f * (step - 4)));
    if (!(scale > 0) || !std::isfinite(scale))
      continue;
    float squared = 0;
    for (int64_t k = 0; k < count; ++k) {
      const float clamped = std::min(std::max(values[k] / scale, -8.0f), 7.0f);
      const float level = (clamped + kRounder) - kRounder;
      const float lost = values[k] - level * scale;
      squared += lost * lost;
    }
    if (bestError < 0 || squared < bestError) {
      bestError = squared;
      best = scale;
    }
  }
  return best;
}

// Symmetric quantization of a float [out, in] weight to `bits` (8 or 4): each group of
// `groupSize` inputs of a row is divided by its scale (int8: max|w| / 127; int4: the
// searched one above; as `scaleDtype` stores it) and rounded to nearest even, clamped to
// [-127, 127] (int8) or [-8, 7] (int4). Writes the values to `q` (int8 as they are, int4 as
// codes + 8 packed two to a byte, the even input low) and/or the f32 scales to `scales`.
Status quantizeRows(const uint8_t *in, DType dtype, const Shape &shape, int64_t groupSize,
                    int bits, DType scaleDtype, uint8_t *q, float *scales,
                    QuantizationError *error) {
  const char *what = bits == 4 ? "int4 quantization" : "int8 quantization";
  const float highest = bits == 4 ? 7.0f : 127.0f, lowest = bits == 4 ? -8.0f : -127.0f;
  const int64_t rows = shape[0], cols = shape[1];
  const int64_t group = groupSize == 0 ? cols : groupSize;
  const int64_t groupsPerRow = group == 0 ? 0 : cols / group;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  dsrt::convertFloats(dtype, in, DType::F32, w.data(), rows * cols);
  double maxRelative = 0, sumError = 0, sumMagnitude = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groupsPerRow; ++g) {
      const float *values = w.data() + r * cols + g * group;
      float absMax = 0;
      for (int64_t k = 0; k < group; ++k) {
        if (!std::isfinite(values[k]))
          return Status::error(std::string(what) + ": row " + std::to_string(r) +
                               " has a value that is not finite");
        absMax = std::max(absMax, std::fabs(values[k]));
      }
      const float scale = bits == 4 ? searchInt4Scale(values, group, absMax, scaleDtype)
                                    : roundedTo(scaleDtype, absMax / 127.0f);
      if (!std::isfinite(scale))
        return Status::error(std::string(what) + ": the scale of row " + std::to_string(r) +
                             " (max |w| " + std::to_string(absMax) + ") overflows " +
                             dsrt::dtypeName(scaleDtype) +
                             "; store scales in f32 or bf16 (--compute-dtype)");
      if (scales)
        scales[r * groupsPerRow + g] = scale;
      for (int64_t k = 0; k < group; ++k) {
        // A scale that underflowed to zero leaves only zeros to represent.
        const float quotient = scale > 0 ? values[k] / scale : 0.0f;
        const auto level =
            static_cast<int8_t>(std::clamp(std::nearbyint(quotient), lowest, highest));
        const int64_t index = r * cols + g * group + k;
        if (q && bits == 8) {
          q[index] = static_cast<uint8_t>(level);
        } else if (q) {
          const auto code = static_cast<uint8_t>(level + 8);
          uint8_t &pair = q[index / 2];
          pair = index % 2 == 0 ? static_cast<uint8_t>((pair & 0xF0) | code)
                                : static_cast<uint8_t>((pair & 0x0F) | (code << 4));
        }
        const double lost = std::fabs(static_cast<double>(values[k]) -
                                      static_cast<double>(level) * static_cast<double>(scale));
        if (absMax > 0)
          maxRelative = std::max(maxRelative, lost / absMax);
        sumError += lost;
        sumMagnitude += std::fabs(values[k]);
      }
    }
  if (error) {
    error->measured = true;
    error->maxRelative = maxRelative;
    error->meanRelative = sumMagnitude > 0 ? sumError / sumMagnitude : 0;
    error->groups = rows * groupsPerRow;
  }
  return Status::ok();
}

Status applyOne(const uint8_t *in, DType dtype, const Shape &shape, const WeightTransform &t,
                DType outDtype, const Shape &outShape, uint8_t *out,
                QuantizationError *error) {
  size_t width = dsrt::dtypeSize(dtype);
  int64_t count = dsrt::elementCount(outShape);
  if (t.kind == WeightTransform::Kind::Convert) {
    dsrt::convertFloats(dtype, in, outDtype, out, count);  // step() checked the dtypes
    return Status::ok();
  }
  if (t.kind == WeightTransform::Kind::Scale) {
    std::vector<float> values(static_cast<size_t>(count));
    dsrt::convertFloats(dtype, in, DType::F32, values.data(), count);
    for (float &value : values)
      value = static_cast<float>(value * t.factor);
    dsrt::convertFloats(DType::F32, values.data(), dtype, out, count);
    return Status::ok();
  }
  if (t.kind == WeightTransform::Kind::QuantizeInt8)
    return quantizeRows(in, dtype, shape, t.groupSize, 8, t.scaleDtype, out, nullptr, error);
  if (t.kind == WeightTransform::Kind::QuantScales)
    return quantizeRows(in, dtype, shape, t.groupSize, 8, DType::F32, nullptr,
                        reinterpret_cast<float *>(out), nullptr);
  if (t.kind == WeightTransform::Kind::QuantizeInt4)
    return quantizeRows(in, dtype, shape, t.groupSize, 4, t.scaleDtype, out, nullptr, error);
  if (t.kind == WeightTransform::Kind::QuantScalesInt4)
    return quantizeRows(in, dtype, shape, t.groupSize, 4, DType::F32, nullptr,
                        reinterpret_cast<float *>(out), nullptr);
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
  return Status::ok();
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
                             uint8_t *destination, QuantizationError *error) {
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
    DSRT_RETURN_IF_ERROR(
        applyOne(in, inDtype, inShape, transforms[i], outDtype, outShape, out, error));
    current.swap(next);
    in = current.data();
    inDtype = outDtype;
    inShape = std::move(outShape);
  }
  return Status::ok();
}

} // namespace dsc
