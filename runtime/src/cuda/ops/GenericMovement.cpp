// Launchers of the generic path's data movement (codegen/kernels/GenericRules.cpp): Reshape
// and its kin, Transpose, Expand, Slice and Concat as strided copies (generic_copy.cuh, once
// per Concat input), Split in one launch (generic_split.cuh) and Gather (generic_gather.cuh).
// Everything comes from shapes, attributes and values the host knows (Slice's starts), so
// every launch may be captured into a graph.
#include "cuda/ops/GenericLaunch.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dsrt::cuda {
namespace {

struct CopyShape {  // generic_copy.cuh GenericCopyShape
  long long dims[6];
  long long srcStrides[6];
  long long dstStrides[6];
  long long srcBase;
  long long dstBase;
};
struct SplitShape {  // generic_split.cuh GenericSplitShape
  unsigned long long outputs[8];
  long long ends[8];
  long long axis;
  long long inner;
};
static_assert(sizeof(SplitShape) == 18 * 8, "generic_split.cuh's layout");
static_assert(sizeof(CopyShape) == 20 * 8, "generic_copy.cuh's layout");

// ---- the strided copy ------------------------------------------------------------------------

// One launch of generic_copy over `dims` (rank <= the kernel's RANK), padded on the left.
Status launchCopy(StepContext &context, DevicePtr destination, DevicePtr source,
                  const Shape &dims, const std::vector<int64_t> &srcStrides,
                  const std::vector<int64_t> &dstStrides, int64_t srcBase, int64_t dstBase) {
  int64_t rank = 0;
  DSRT_RETURN_IF_ERROR(rankOf(context, dims.size(), rank));
  long long count = elementCount(dims);
  if (count < 0)
    return context.error("invalid copy shape ", shapeString(dims));
  if (count == 0)
    return Status::ok();
  CopyShape shape{};
  placeRightAligned(dims, rank, 1, shape.dims);
  placeRightAligned(srcStrides, rank, 0, shape.srcStrides);
  placeRightAligned(dstStrides, rank, 0, shape.dstStrides);
  shape.srcBase = srcBase;
  shape.dstBase = dstBase;
  void *args[] = {&destination, &source, &shape, &count};
  return launchElements(context, count, args);
}

Status runTranspose(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (in->dtype != out.dtype)
    return context.error("the output's dtype differs from the input's");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  size_t rank = in->shape.size();
  std::vector<int64_t> perm;
  bool present = false;
  DSRT_RETURN_IF_ERROR(ops::getInts(context.attrs(), "perm", perm, present));
  if (!present) {
    perm.resize(rank);
    for (size_t d = 0; d < rank; ++d)
      perm[d] = static_cast<int64_t>(rank - 1 - d);
  }
  if (perm.size() != rank || out.shape.size() != rank)
    return context.error("perm has ", perm.size(), " entries for rank ", rank);
  std::vector<int64_t> own = contiguousStrides(in->shape), strides(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t axis = 0;
    DSRT_RETURN_IF_ERROR(normalizeAxis(context, perm[d], rank, "perm entry", axis));
    if (out.shape[d] != in->shape[axis])
      return context.error("the output's shape ", shapeString(out.shape),
                           " is not the permuted input's");
    strides[d] = own[axis];
  }
  return launchCopy(context, out.data, in->data, out.shape, strides,
                    contiguousStrides(out.shape), 0, 0);
}

Status runExpand(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (in->dtype != out.dtype)
    return context.error("the output's dtype differs from the input's");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  std::vector<int64_t> strides;
  DSRT_RETURN_IF_ERROR(broadcastStrides(context, in->shape, out.shape, strides));
  return launchCopy(context, out.data, in->data, out.shape, strides,
                    contiguousStrides(out.shape), 0, 0);
}

// Slice with the host's normalisation (runtime/src/ops/Movement.cpp planSlice): negative
// starts and ends count from the end, then clamp; the output's shape must be what the
// session inferred.
Status runSlice(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (in->dtype != out.dtype)
    return context.error("the output's dtype differs from the input's");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  const Shape &shape = in->shape;
  size_t rank = shape.size();
  std::vector<int64_t> starts, ends, axes, steps;
  DSRT_RETURN_IF_ERROR(hostIndexValues(context, 1, "starts", starts));
  DSRT_RETURN_IF_ERROR(hostIndexValues(context, 2, "ends", ends));
  if (context.inputCount() > 3 && context.input(3)) {
    DSRT_RETURN_IF_ERROR(hostIndexValues(context, 3, "axes", axes));
  } else {
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  }
  if (context.inputCount() > 4 && context.input(4))
    DSRT_RETURN_IF_ERROR(hostIndexValues(context, 4, "steps", steps));
  else
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return context.error("starts, ends, axes and steps must have the same length");
  std::vector<int64_t> first(rank, 0), stride(rank, 1);
  Shape sliced = shape;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = 0;
    DSRT_RETURN_IF_ERROR(normalizeAxis(context, axes[i], rank, "axis", axis));
    if (seen[axis])
      return context.error("axis ", axis, " is sliced twice");
    seen[axis] = true;
    int64_t dim = shape[axis], step = steps[i];
    if (step == 0)
      return context.error("step of axis ", axis, " is zero");
    int64_t start = 0, count = 0;
    ops::sliceAxis(dim, starts[i], ends[i], step, start, count);
    first[axis] = start;
    stride[axis] = step;
    sliced[axis] = static_cast<int64_t>(count);
  }
  if (sliced != out.shape)
    return context.error("the slice has shape ", shapeString(sliced), ", the output ",
                         shapeString(out.shape));
  std::vector<int64_t> own = contiguousStrides(shape), srcStrides(rank);
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    base += first[d] * own[d];
    srcStrides[d] = stride[d] * own[d];
  }
  return launchCopy(context, out.data, in->data, out.shape, srcStrides,
                    contiguousStrides(out.shape), base, 0);
}

// One launch per input, each into its slice of the output along `axis`.
Status runConcat(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor &out = context.output(0);
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  if (out.shape.empty())
    return context.error("a scalar has no axis");
  if (!context.attrs().count("axis"))
    return context.error("attribute 'axis' is required");
  int64_t axis = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", 0, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(context, axis, out.shape.size(), "axis", axis));
  std::vector<int64_t> outStrides = contiguousStrides(out.shape);
  int64_t offset = 0;
  for (size_t k = 0; k < context.inputCount(); ++k) {
    const DeviceTensor *in = context.input(k);
    if (!in)
      return context.error("input ", k, " is absent");
    if (in->dtype != out.dtype || in->shape.size() != out.shape.size())
      return context.error("input ", k, " (", dtypeName(in->dtype), " ",
                           shapeString(in->shape), ") does not match the output");
    for (size_t d = 0; d < out.shape.size(); ++d)
      if (static_cast<int64_t>(d) != axis && in->shape[d] != out.shape[d])
        return context.error("input ", k, " of shape ", shapeString(in->shape),
                             " does not match the output ", shapeString(out.shape));
    if (offset + in->shape[axis] > out.shape[axis])
      return context.error("the inputs exceed the output along axis ", axis);
    DSRT_RETURN_IF_ERROR(launchCopy(context, out.data, in->data, in->shape,
                                    contiguousStrides(in->shape), outStrides, 0,
                                    offset * outStrides[axis]));
    offset += in->shape[axis];
  }
  if (offset != out.shape[axis])
    return context.error("the inputs fill ", offset, " of the output's ", out.shape[axis],
                         " along axis ", axis);
  return Status::ok();
}

// One launch per output, each from its slice of the input along `axis`; the sizes are the
// outputs' (the session inferred them from the split input or the equal parts).
// Split's parts in one launch of generic_split (`parts`, its PARTS constant).
Status launchSplit(StepContext &context, const DeviceTensor &in, int64_t axis, int64_t parts) {
  if (parts != static_cast<int64_t>(context.outputCount()) || parts > 8)
    return context.error("the kernel was generated for ", parts, " parts, the step has ",
                         context.outputCount());
  SplitShape shape{};
  int64_t end = 0;
  for (int64_t k = 0; k < parts; ++k) {
    const DeviceTensor &out = context.output(k);
    if (out.dtype != in.dtype || out.shape.size() != in.shape.size())
      return context.error("output ", k, " (", dtypeName(out.dtype), " ",
                           shapeString(out.shape), ") does not match the input");
    for (size_t d = 0; d < in.shape.size(); ++d)
      if (static_cast<int64_t>(d) != axis && out.shape[d] != in.shape[d])
        return context.error("output ", k, " of shape ", shapeString(out.shape),
                             " does not match the input ", shapeString(in.shape));
    end += out.shape[axis];
    shape.outputs[k] = static_cast<unsigned long long>(out.data);
    shape.ends[k] = end;
  }
  if (end != in.shape[axis])
    return context.error("the outputs take ", end, " of the input's ", in.shape[axis],
                         " along axis ", axis);
  shape.axis = in.shape[axis];
  shape.inner = product(in.shape, axis + 1, in.shape.size());
  long long count = in.elements();
  if (count == 0)
    return Status::ok();
  DevicePtr input = in.data;
  void *args[] = {&input, &shape, &count};
  return launchElements(context, count, args);
}

Status runSplit(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, in->dtype));
  if (in->shape.empty())
    return context.error("a scalar has no axis");
  int64_t axis = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", 0, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(context, axis, in->shape.size(), "axis", axis));
  std::vector<int64_t> inStrides = contiguousStrides(in->shape);
  const int64_t parts = context.kernelConstant(0, "PARTS", -1);
  if (parts > 0)
    return launchSplit(context, *in, axis, parts);
  int64_t offset = 0;
  for (size_t k = 0; k < context.outputCount(); ++k) {
    const DeviceTensor &out = context.output(k);
    if (out.dtype != in->dtype || out.shape.size() != in->shape.size())
      return context.error("output ", k, " (", dtypeName(out.dtype), " ",
                           shapeString(out.shape), ") does not match the input");
    for (size_t d = 0; d < in->shape.size(); ++d)
      if (static_cast<int64_t>(d) != axis && out.shape[d] != in->shape[d])
        return context.error("output ", k, " of shape ", shapeString(out.shape),
                             " does not match the input ", shapeString(in->shape));
    if (offset + out.shape[axis] > in->shape[axis])
      return context.error("the outputs exceed the input along axis ", axis);
    DSRT_RETURN_IF_ERROR(launchCopy(context, out.data, in->data, out.shape, inStrides,
                                    contiguousStrides(out.shape), offset * inStrides[axis],
                                    0));
    offset += out.shape[axis];
  }
  if (offset != in->shape[axis])
    return context.error("the outputs take ", offset, " of the input's ", in->shape[axis],
                         " along axis ", axis);
  return Status::ok();
}

Status runGather(StepContext &context) {
  const DeviceTensor *data = nullptr, *indices = nullptr;
  DSRT_RETURN_IF_ERROR(gatherOperands(context, data, indices));
  const DeviceTensor &out = context.output(0);
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "IDX", static_cast<int64_t>(indices->dtype)));
  if (data->shape.empty())
    return context.error("data is a scalar");
  int64_t axis = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", 0, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(context, axis, data->shape.size(), "axis", axis));
  long long outer = product(data->shape, 0, axis);
  long long axisDim = data->shape[axis];
  long long count = indices->elements();
  long long inner = product(data->shape, axis + 1, data->shape.size());
  if (out.elements() != outer * count * inner)
    return context.error("the output has ", out.elements(), " elements, not ",
                         outer * count * inner);
  if (out.elements() == 0)
    return Status::ok();
  DevicePtr outData = out.data, dataData = data->data, indexData = indices->data;
  void *args[] = {&outData, &dataData, &indexData, &outer, &axisDim, &count, &inner};
  return launchElements(context, out.elements(), args);
}

} // namespace

// The output's bytes are the input's: Reshape, Flatten, Squeeze, Unsqueeze, Identity,
// Dropout, a Cast to the same dtype, Max/Min of one input.
Status runContiguousCopy(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (in->dtype != out.dtype || in->elements() != out.elements())
    return context.error("the output (", dtypeName(out.dtype), " ", shapeString(out.shape),
                         ") does not hold the input's bytes (", dtypeName(in->dtype), " ",
                         shapeString(in->shape), ")");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  // dsc-plan-memory gives a view (Reshape, Squeeze, an identity Cast...) its input's arena
  // slot: no launch at all.
  if (out.data == in->data)
    return Status::ok();
  Shape flat{in->elements()};
  return launchCopy(context, out.data, in->data, flat, {1}, {1}, 0, 0);
}

void addGenericMovementGpuOps(std::vector<GpuOpInfo> &ops) {
  for (const char *op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
    ops.push_back({op, runContiguousCopy});
  ops.push_back({"Transpose", runTranspose});
  ops.push_back({"Expand", runExpand});
  ops.push_back({"Slice", runSlice});
  ops.push_back({"Concat", runConcat});
  ops.push_back({"Split", runSplit});
  ops.push_back({"Gather", runGather});
}

} // namespace dsrt::cuda
