// ONNX GatherND and GatherElements on the generic path (codegen/kernels/generic_gather_nd.cuh
// and generic_gather_elements.cuh, their rules in codegen/kernels/GenericRules.cpp): what
// dynamo exports write for a lookup over two axes (BART's and Falcon's position and mask
// lookups) and RoBERTa's position ids. Everything comes from the shapes and attributes, so
// the launches may be captured into a graph.
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

} // namespace dsrt::cuda
