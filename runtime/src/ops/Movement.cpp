// Data movement: Transpose, Expand, Tile, Concat, Split, Slice, Trilu. None of them looks at
// element values, so they work on element sizes, not dtypes.
#include "ops/Kernel.h"
#include "ops/Strided.h"
#include "ops/TypeDispatch.h"

#include <algorithm>
#include <cstring>

namespace dsrt::ops {
namespace {

// out[i] = in[base + sum index_d * strides[d]] over `shape`.
void stridedCopy(const TensorRef &in, const TensorRef &out, const Shape &shape,
                 const std::vector<int64_t> &strides, int64_t base) {
  visitElementSize(dtypeSize(in.dtype), [&](auto tag) {
    using E = decltype(tag);
    const E *src = in.as<E>();
    E *dst = out.as<E>();
    forEachStrided<1>(shape, {strides.data()}, {base},
                      [&](int64_t i, const std::array<int64_t, 1> &at) { dst[i] = src[at[0]]; });
  });
}

Status permutation(const KernelContext &ctx, std::vector<int64_t> &perm) {
  size_t rank = ctx.input(0)->shape.size();
  bool present;
  Status status = getInts(ctx.attrs, "perm", perm, present);
  if (!status.isOk())
    return ctx.error(status.message());
  if (!present) {
    perm.resize(rank);
    for (size_t d = 0; d < rank; ++d)
      perm[d] = static_cast<int64_t>(rank - 1 - d);
    return Status::ok();
  }
  std::vector<bool> seen(rank, false);
  if (perm.size() != rank)
    return ctx.error("perm has ", perm.size(), " entries for rank ", rank);
  for (int64_t &axis : perm) {
    DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, rank, "perm entry", axis));
    if (seen[axis])
      return ctx.error("perm repeats axis ", axis);
    seen[axis] = true;
  }
  return Status::ok();
}

Status inferTranspose(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  std::vector<int64_t> perm;
  DSRT_RETURN_IF_ERROR(permutation(ctx, perm));
  Shape out;
  for (int64_t axis : perm)
    out.push_back(ctx.input(0)->shape[axis]);
  outputs.push_back({ctx.input(0)->dtype, out});
  return Status::ok();
}

Status computeTranspose(const KernelContext &ctx, const Outputs &outputs) {
  std::vector<int64_t> perm;
  DSRT_RETURN_IF_ERROR(permutation(ctx, perm));
  std::vector<int64_t> own = contiguousStrides(ctx.input(0)->shape), strides;
  for (int64_t axis : perm)
    strides.push_back(own[axis]);
  stridedCopy(*ctx.input(0), *outputs[0], outputs[0]->shape, strides, 0);
  return Status::ok();
}

Status readDims(const KernelContext &ctx, size_t index, const char *name, Shape &dims) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, index, name, maskOf({DType::I64})));
  if (ctx.input(index)->shape.size() != 1)
    return ctx.error(name, " must be 1-D, not ", shapeString(ctx.input(index)->shape));
  std::vector<int64_t> values;
  DSRT_RETURN_IF_ERROR(readIndexValues(ctx, index, name, values));
  dims.assign(values.begin(), values.end());
  for (int64_t dim : dims)
    if (dim < 0)
      return ctx.error(name, " ", shapeString(dims), " has a negative entry");
  return Status::ok();
}

Status inferExpand(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  Shape shape, out;
  DSRT_RETURN_IF_ERROR(readDims(ctx, 1, "shape", shape));
  if (!broadcastShapes(ctx.input(0)->shape, shape, out))
    return ctx.error("cannot expand ", shapeString(ctx.input(0)->shape), " to ",
                     shapeString(shape));
  outputs.push_back({ctx.input(0)->dtype, out});
  return Status::ok();
}

Status computeExpand(const KernelContext &ctx, const Outputs &outputs) {
  const Shape &out = outputs[0]->shape;
  stridedCopy(*ctx.input(0), *outputs[0], out, broadcastStrides(ctx.input(0)->shape, out), 0);
  return Status::ok();
}

Status inferTile(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  Shape repeats;
  DSRT_RETURN_IF_ERROR(readDims(ctx, 1, "repeats", repeats));
  const Shape &in = ctx.input(0)->shape;
  if (repeats.size() != in.size())
    return ctx.error("repeats has ", repeats.size(), " entries for rank ", in.size());
  Shape out(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] != 0 && repeats[d] > (int64_t(1) << 62) / in[d])
      return ctx.error("repeats ", shapeString(repeats), " make the output too large");
    out[d] = in[d] * repeats[d];
  }
  outputs.push_back({ctx.input(0)->dtype, out});
  return Status::ok();
}

Status computeTile(const KernelContext &ctx, const Outputs &outputs) {
  // Output dimension d, of size repeats_d * in_d, is the pair (repeat, index) in row-major
  // order, so tiling is a strided copy over [r0, d0, r1, d1, ...] with stride 0 on repeats.
  const Shape &in = ctx.input(0)->shape, &out = outputs[0]->shape;
  std::vector<int64_t> own = contiguousStrides(in), strides;
  Shape split;
  for (size_t d = 0; d < in.size(); ++d) {
    split.push_back(in[d] == 0 ? 0 : out[d] / in[d]);
    split.push_back(in[d]);
    strides.push_back(0);
    strides.push_back(own[d]);
  }
  stridedCopy(*ctx.input(0), *outputs[0], split, strides, 0);
  return Status::ok();
}

Status concatAxis(const KernelContext &ctx, int64_t &axis) {
  if (!ctx.attrs.count("axis"))
    return ctx.error("attribute 'axis' is required");
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", 0, axis));
  return normalizeAxis(ctx, axis, ctx.input(0)->shape.size(), "axis", axis);
}

Status inferConcat(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  int64_t axis;
  DSRT_RETURN_IF_ERROR(concatAxis(ctx, axis));
  Shape out = ctx.input(0)->shape;
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, i));
    const Shape &shape = ctx.input(i)->shape;
    bool compatible = shape.size() == out.size();
    for (size_t d = 0; compatible && d < out.size(); ++d)
      compatible = static_cast<int64_t>(d) == axis || shape[d] == out[d];
    if (!compatible)
      return ctx.error("input ", i, " of shape ", shapeString(shape),
                       " does not match input 0 of shape ", shapeString(ctx.input(0)->shape),
                       " outside axis ", axis);
    out[axis] += shape[axis];
  }
  outputs.push_back({ctx.input(0)->dtype, out});
  return Status::ok();
}

Status computeConcat(const KernelContext &ctx, const Outputs &outputs) {
  int64_t axis;
  DSRT_RETURN_IF_ERROR(concatAxis(ctx, axis));
  const TensorRef &out = *outputs[0];
  size_t size = dtypeSize(out.dtype);
  int64_t outer = product(out.shape, 0, axis);
  int64_t inner = product(out.shape, axis + 1, out.shape.size()) * static_cast<int64_t>(size);
  int64_t outBlock = out.shape[axis] * inner;
  int64_t offset = 0;
  for (const TensorRef *in : ctx.inputs) {
    int64_t block = in->shape[axis] * inner;
    if (block > 0)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(out.as<uint8_t>() + o * outBlock + offset, in->as<uint8_t>() + o * block,
                    static_cast<size_t>(block));
    offset += block;
  }
  return Status::ok();
}

Status splitSizes(const KernelContext &ctx, int64_t &axis, std::vector<int64_t> &sizes) {
  const Shape &in = ctx.input(0)->shape;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", 0, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, in.size(), "axis", axis));
  int64_t dim = in[axis];
  int64_t parts = static_cast<int64_t>(ctx.numOutputs);
  if (ctx.input(1)) {
    DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 1, "split", sizes));
    if (static_cast<int64_t>(sizes.size()) != parts)
      return ctx.error("split has ", sizes.size(), " sizes for ", parts, " outputs");
    int64_t total = 0;
    for (int64_t size : sizes) {
      if (size < 0 || size > dim)
        return ctx.error("split size ", size, " is out of range");
      total += size;
    }
    if (total != dim)
      return ctx.error("split sizes add up to ", total, ", not to dimension ", axis, " (",
                       dim, ")");
    return Status::ok();
  }
  // Equal parts, the last one smaller when the dimension does not divide (opset 18).
  int64_t chunk = (dim + parts - 1) / parts;
  int64_t last = dim - chunk * (parts - 1);
  if (last < 0)
    return ctx.error("cannot split dimension ", dim, " into ", parts, " parts");
  sizes.assign(static_cast<size_t>(parts), chunk);
  sizes.back() = last;
  return Status::ok();
}

Status inferSplit(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  int64_t axis;
  std::vector<int64_t> sizes;
  DSRT_RETURN_IF_ERROR(splitSizes(ctx, axis, sizes));
  for (int64_t size : sizes) {
    Shape shape = ctx.input(0)->shape;
    shape[axis] = size;
    outputs.push_back({ctx.input(0)->dtype, shape});
  }
  return Status::ok();
}

Status computeSplit(const KernelContext &ctx, const Outputs &outputs) {
  int64_t axis;
  std::vector<int64_t> sizes;
  DSRT_RETURN_IF_ERROR(splitSizes(ctx, axis, sizes));
  const TensorRef &in = *ctx.input(0);
  int64_t outer = product(in.shape, 0, axis);
  int64_t inner =
      product(in.shape, axis + 1, in.shape.size()) * static_cast<int64_t>(dtypeSize(in.dtype));
  int64_t inBlock = in.shape[axis] * inner;
  int64_t offset = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    int64_t block = sizes[k] * inner;
    if (block > 0)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(outputs[k]->as<uint8_t>() + o * block,
                    in.as<uint8_t>() + o * inBlock + offset, static_cast<size_t>(block));
    offset += block;
  }
  return Status::ok();
}

} // namespace

void sliceAxis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t &first,
               int64_t &count) {
  if (start < 0)
    start += dim;
  if (end < 0)
    end += dim;
  uint64_t read = 0;
  if (dim == 0) {
    read = 0;
  } else if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    uint64_t span = end > start ? uint64_t(end - start) : 0;
    read = (span + uint64_t(step) - 1) / uint64_t(step);
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    uint64_t span = start > end ? uint64_t(start - end) : 0;
    uint64_t magnitude = uint64_t(0) - uint64_t(step);
    read = (span + magnitude - 1) / magnitude;
  }
  first = read > 0 ? start : 0;
  count = static_cast<int64_t>(read);
}

namespace {

// Per dimension of the data: the first index read and the step (0 and 1 when not sliced).
struct SlicePlan {
  std::vector<int64_t> starts, steps;
  Shape shape;
};

Status planSlice(const KernelContext &ctx, SlicePlan &plan) {
  const Shape &in = ctx.input(0)->shape;
  size_t rank = in.size();
  std::vector<int64_t> starts, ends, axes, steps;
  DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 1, "starts", starts));
  DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 2, "ends", ends));
  if (ends.size() != starts.size())
    return ctx.error("starts and ends have different lengths");
  if (ctx.input(3)) {
    DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 3, "axes", axes));
  } else {
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  }
  if (ctx.input(4))
    DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 4, "steps", steps));
  else
    steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return ctx.error("starts, ends, axes and steps must have the same length");
  std::vector<int64_t> normalized;
  DSRT_RETURN_IF_ERROR(normalizeAxes(ctx, axes, rank, "axis", normalized));
  plan.starts.assign(rank, 0);
  plan.steps.assign(rank, 1);
  plan.shape = in;
  for (size_t i = 0; i < normalized.size(); ++i) {
    int64_t axis = normalized[i], dim = in[axis], step = steps[i];
    if (step == 0)
      return ctx.error("step of axis ", axis, " is zero");
    int64_t start = 0, count = 0;
    sliceAxis(dim, starts[i], ends[i], step, start, count);
    plan.starts[axis] = start;
    plan.steps[axis] = step;
    plan.shape[axis] = static_cast<int64_t>(count);
  }
  return Status::ok();
}

Status inferSlice(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  for (size_t i = 1; i < 5; ++i)
    if (ctx.input(i))
      DSRT_RETURN_IF_ERROR(checkDType(ctx, i, "starts, ends, axes or steps", kIndexTypes));
  SlicePlan plan;
  DSRT_RETURN_IF_ERROR(planSlice(ctx, plan));
  outputs.push_back({ctx.input(0)->dtype, plan.shape});
  return Status::ok();
}

Status computeSlice(const KernelContext &ctx, const Outputs &outputs) {
  SlicePlan plan;
  DSRT_RETURN_IF_ERROR(planSlice(ctx, plan));
  std::vector<int64_t> own = contiguousStrides(ctx.input(0)->shape), strides;
  int64_t base = 0;
  for (size_t d = 0; d < own.size(); ++d) {
    base += plan.starts[d] * own[d];
    strides.push_back(plan.steps[d] * own[d]);
  }
  stridedCopy(*ctx.input(0), *outputs[0], plan.shape, strides, base);
  return Status::ok();
}

Status inferTrilu(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  const TensorRef &in = *ctx.input(0);
  if (in.shape.size() < 2)
    return ctx.error("input must have rank 2 or more, not ", shapeString(in.shape));
  if (ctx.input(1) && ctx.input(1)->data) {
    int64_t k;
    DSRT_RETURN_IF_ERROR(readIndexScalar(ctx, 1, "k", k));
  }
  outputs.push_back({in.dtype, in.shape});
  return Status::ok();
}

Status computeTrilu(const KernelContext &ctx, const Outputs &outputs) {
  const TensorRef &in = *ctx.input(0);
  int64_t k = 0, upper;
  if (ctx.input(1))
    DSRT_RETURN_IF_ERROR(readIndexScalar(ctx, 1, "k", k));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "upper", 1, upper));
  size_t size = dtypeSize(in.dtype);
  int64_t rows = in.shape[in.shape.size() - 2], cols = in.shape.back();
  int64_t matrices = rows * cols == 0 ? 0 : in.elements() / (rows * cols);
  const uint8_t *src = in.as<uint8_t>();
  uint8_t *dst = outputs[0]->as<uint8_t>();
  for (int64_t m = 0; m < matrices; ++m)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        // j - i is small, so comparing it with k (which may be any int64) cannot overflow.
        bool keep = upper ? j - i >= k : j - i <= k;
        size_t at = static_cast<size_t>((m * rows + i) * cols + j) * size;
        if (keep)
          std::memcpy(dst + at, src + at, size);
        else
          std::memset(dst + at, 0, size);
      }
  return Status::ok();
}

} // namespace

void addMovementKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"Transpose", 1, 1, 1, 1, 1, inferTranspose, computeTranspose});
  kernels.push_back({"Expand", 2, 2, 2, 1, 1, inferExpand, computeExpand});
  kernels.push_back({"Tile", 2, 2, 2, 1, 1, inferTile, computeTile});
  kernels.push_back({"Concat", 1, kAnyCount, kAnyCount, 1, 1, inferConcat, computeConcat});
  kernels.push_back({"Split", 1, 2, 1, 1, kAnyCount, inferSplit, computeSplit});
  kernels.push_back({"Slice", 3, 5, 3, 1, 1, inferSlice, computeSlice});
  kernels.push_back({"Trilu", 1, 2, 1, 1, 1, inferTrilu, computeTrilu});
}

} // namespace dsrt::ops
