// ONNX GatherND and GatherElements on the generic path (codegen/kernels/generic_gather_nd.cuh
// and generic_gather_elements.cuh): what dynamo exports write for a lookup over two axes
// (BART's and Falcon's position and mask lookups) and RoBERTa's position ids; and TopK and
// OneHot (generic_topk.cuh, generic_onehot.cuh), a mixture-of-experts router's. Their rules
// are in codegen/kernels/GenericIndexingRules.cpp. Everything comes from the shapes and
// attributes (K and the depth from the outputs' shapes), so the launches may be captured
// into a graph.
#include "cuda/ops/GenericLaunch.h"

#include <cstdint>

namespace dsrt::cuda {
namespace {

struct GatherNDShape {  // generic_gather_nd.cuh GenericGatherNDShape
  long long indexedDims[6];
  long long k, tuples, slice, batchStride;
};
struct GatherElementsShape {  // generic_gather_elements.cuh GenericGatherElementsShape
  long long indexDims[6];
  long long dataStrides[6];
  long long axisStride, axisDim;
};
static_assert(sizeof(GatherNDShape) == 10 * 8 && sizeof(GatherElementsShape) == 14 * 8,
              "the templates' layouts: long longs, no padding");

} // namespace

Status runGenericGatherND(StepContext &context) {
  const DeviceTensor *data = nullptr, *indices = nullptr;
  DSRT_RETURN_IF_ERROR(gatherOperands(context, data, indices));
  const DeviceTensor &out = context.output(0);
  if (indices->dtype != DType::I64)
    return context.error("indices must be i64");
  DSRT_RETURN_IF_ERROR(checkConstant(context, "ES", static_cast<int64_t>(dtypeSize(out.dtype))));
  int64_t batchDims = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "batch_dims", 0, batchDims));
  const Shape &dataShape = data->shape, &indexShape = indices->shape;
  if (batchDims < 0 || batchDims >= static_cast<int64_t>(dataShape.size()) ||
      batchDims >= static_cast<int64_t>(indexShape.size()))
    return context.error("batch_dims ", batchDims, " must be less than the ranks of data ",
                         shapeString(dataShape), " and indices ", shapeString(indexShape));
  size_t first = static_cast<size_t>(batchDims);
  int64_t k = indexShape.back();
  if (k < 1 || k > static_cast<int64_t>(dataShape.size() - first) || k > 6)
    return context.error("index tuples of length ", k, " do not fit data ",
                         shapeString(dataShape), " after ", batchDims, " batch dimensions");
  GatherNDShape shape{};
  for (int64_t j = 0; j < k; ++j)
    shape.indexedDims[j] = dataShape[first + j];
  shape.k = k;
  shape.tuples = product(indexShape, first, indexShape.size() - 1);
  shape.slice = product(dataShape, first + k, dataShape.size());
  shape.batchStride = product(dataShape, first, dataShape.size());
  long long total = product(dataShape, 0, first) * shape.tuples * shape.slice;
  if (out.elements() != total)
    return context.error("the output ", shapeString(out.shape), " does not hold ", total,
                         " gathered elements");
  if (total == 0)
    return Status::ok();
  DevicePtr outData = out.data, dataData = data->data, indexData = indices->data;
  void *args[] = {&outData, &dataData, &indexData, &shape, &total};
  return launchElements(context, total, args);
}

Status runGenericGatherElements(StepContext &context) {
  const DeviceTensor *data = nullptr, *indices = nullptr;
  DSRT_RETURN_IF_ERROR(gatherOperands(context, data, indices));
  const DeviceTensor &out = context.output(0);
  DSRT_RETURN_IF_ERROR(checkConstant(context, "ES", static_cast<int64_t>(dtypeSize(out.dtype))));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "IDX", static_cast<int64_t>(indices->dtype)));
  const Shape &dataShape = data->shape, &indexShape = indices->shape;
  size_t rank = dataShape.size();
  DSRT_RETURN_IF_ERROR(checkConstant(context, "RANK", static_cast<int64_t>(rank)));
  if (indexShape.size() != rank || out.shape != indexShape)
    return context.error("indices ", shapeString(indexShape), " and the output ",
                         shapeString(out.shape), " must have the shape and rank of data ",
                         shapeString(dataShape));
  int64_t axis = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", 0, axis));
  if (axis < 0)
    axis += static_cast<int64_t>(rank);
  if (axis < 0 || axis >= static_cast<int64_t>(rank))
    return context.error("axis ", axis, " is outside rank ", rank);
  GatherElementsShape shape{};
  long long stride = 1;
  for (size_t d = rank; d-- > 0;) {
    if (static_cast<int64_t>(d) != axis && indexShape[d] > dataShape[d])
      return context.error("indices ", shapeString(indexShape), " exceed data ",
                           shapeString(dataShape), " in dimension ", d);
    shape.indexDims[d] = indexShape[d];
    shape.dataStrides[d] = static_cast<int64_t>(d) == axis ? 0 : stride;
    if (static_cast<int64_t>(d) == axis)
      shape.axisStride = stride;
    stride *= dataShape[d];
  }
  shape.axisDim = dataShape[axis];
  long long total = out.elements();
  if (total == 0)
    return Status::ok();
  DevicePtr outData = out.data, dataData = data->data, indexData = indices->data;
  void *args[] = {&outData, &dataData, &indexData, &shape, &total};
  return launchElements(context, total, args);
}

Status runGenericTopK(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *x = context.input(0);
  if (!x || context.outputCount() != 2)
    return context.error("needs X, and values and indices to write");
  const DeviceTensor &values = context.output(0), &indices = context.output(1);
  DSRT_RETURN_IF_ERROR(checkConstant(context, "DT", static_cast<int64_t>(x->dtype)));
  int64_t largest = 1, axis = -1;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "largest", 1, largest));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "LARGEST", largest != 0 ? 1 : 0));
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", -1, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(context, axis, x->shape.size(), "axis", axis));
  Shape expected = x->shape;
  long long k = values.shape.size() == x->shape.size() ? values.shape[axis] : -1;
  expected[axis] = k;
  if (k < 0 || k > x->shape[axis] || values.dtype != x->dtype || values.shape != expected ||
      indices.dtype != DType::I64 || indices.shape != expected)
    return context.error("values ", shapeString(values.shape), " and i64 indices ",
                         shapeString(indices.shape), " must be X ", shapeString(x->shape),
                         " with at most its ", x->shape[axis], " elements along axis ", axis);
  Lines lines = linesAlong(x->shape, axis);
  if (lines.count() == 0 || k == 0)
    return Status::ok();
  DevicePtr xData = x->data, valueData = values.data, indexData = indices.data;
  void *args[] = {&xData, &valueData, &indexData, &lines.outer, &lines.length, &lines.inner, &k};
  return launchElements(context, lines.count(), args);
}

Status runGenericOneHot(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *indices = context.input(0);
  const DeviceTensor *values = context.inputCount() > 2 ? context.input(2) : nullptr;
  if (!indices || !values)
    return context.error("needs indices and values");
  const DeviceTensor &out = context.output(0);
  DSRT_RETURN_IF_ERROR(checkConstant(context, "ES", static_cast<int64_t>(dtypeSize(out.dtype))));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "IDX", static_cast<int64_t>(indices->dtype)));
  if (values->dtype != out.dtype || values->shape != Shape{2})
    return context.error("values must be two elements of the output's dtype");
  int64_t axis = -1;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", -1, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(context, axis, out.shape.size(), "axis", axis));
  // The output is indices' shape with the depth inserted at the axis.
  Shape withoutDepth = out.shape;
  withoutDepth.erase(withoutDepth.begin() + axis);
  if (withoutDepth != indices->shape)
    return context.error("the output ", shapeString(out.shape), " is not indices ",
                         shapeString(indices->shape), " with a depth at axis ", axis);
  long long depth = out.shape[axis];
  long long inner = product(out.shape, axis + 1, out.shape.size());
  long long total = out.elements();
  if (total == 0)
    return Status::ok();
  DevicePtr indexData = indices->data, valueData = values->data, outData = out.data;
  void *args[] = {&indexData, &valueData, &outData, &depth, &inner, &total};
  return launchElements(context, total, args);
}

} // namespace dsrt::cuda
