// ONNX MatMul of f32 on the generic path (codegen/kernels/generic_matmul.cuh, its rule in
// codegen/kernels/GenericRules.cpp): the batch dimensions broadcast as numpy does, a 1-D
// operand taken as a row (A) or a column (B). Everything comes from the shapes, so the
// launch may be captured into a graph.
#include "cuda/ops/GenericLaunch.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dsrt::cuda {
namespace {

struct MatMulShape {  // generic_matmul.cuh GenericMatMulShape
  long long batchDims[4];
  long long batchStridesA[4];
  long long batchStridesB[4];
  long long m, n, k;
};
static_assert(sizeof(MatMulShape) == 15 * 8, "the template's layout: long longs, no padding");

constexpr int64_t kTile = 16;
constexpr unsigned kThreads = 256;

// The batch strides of an operand of shape `shape` (matrix dims last) against the output's
// batch dims `batch`, right-aligned; 0 where the operand is broadcast.
std::vector<long long> batchStrides(const Shape &shape, const std::vector<int64_t> &batch,
                                    int64_t matrixElements) {
  size_t own = shape.size() - 2;
  std::vector<long long> strides(batch.size(), 0);
  long long stride = matrixElements;
  for (size_t i = 0; i < own; ++i) {
    size_t d = own - 1 - i, out = batch.size() - 1 - i;
    strides[out] = shape[d] == 1 ? 0 : stride;
    stride *= shape[d];
  }
  return strides;
}

} // namespace

Status runGenericMatMul(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *a = context.input(0);
  const DeviceTensor *b = context.inputCount() > 1 ? context.input(1) : nullptr;
  if (!a || !b)
    return context.error("needs two inputs");
  const DeviceTensor &c = context.output(0);
  if (a->dtype != DType::F32 || b->dtype != DType::F32 || c.dtype != DType::F32)
    return context.error("the kernel takes f32");
  if (a->shape.empty() || b->shape.empty())
    return context.error("MatMul takes no scalars");
  Shape shapeA = a->shape, shapeB = b->shape;
  if (shapeA.size() == 1)
    shapeA.insert(shapeA.begin(), 1);
  if (shapeB.size() == 1)
    shapeB.push_back(1);
  long long m = shapeA[shapeA.size() - 2], k = shapeA.back(), n = shapeB.back();
  if (shapeB[shapeB.size() - 2] != k)
    return context.error("the inner dimensions differ: ", shapeString(a->shape), " and ",
                         shapeString(b->shape));
  size_t batchRank = std::max(shapeA.size(), shapeB.size()) - 2;
  DSRT_RETURN_IF_ERROR(checkConstant(context, "BATCH_RANK", static_cast<int64_t>(batchRank)));
  std::vector<int64_t> batch(batchRank, 1);
  for (const Shape *operand : {&shapeA, &shapeB}) {
    size_t own = operand->size() - 2;
    for (size_t i = 0; i < own; ++i) {
      int64_t extent = (*operand)[own - 1 - i];
      int64_t &out = batch[batchRank - 1 - i];
      if (extent != 1 && out != 1 && extent != out)
        return context.error("the batch dimensions do not broadcast: ",
                             shapeString(a->shape), " and ", shapeString(b->shape));
      if (extent != 1)
        out = extent;
    }
  }
  long long batchCount = 1;
  for (int64_t extent : batch)
    batchCount *= extent;
  if (c.elements() != batchCount * m * n)
    return context.error("the output ", shapeString(c.shape), " does not hold the product");
  if (c.elements() == 0)
    return Status::ok();
  MatMulShape shape{};
  std::vector<long long> stridesA = batchStrides(shapeA, batch, m * k);
  std::vector<long long> stridesB = batchStrides(shapeB, batch, k * n);
  for (size_t d = 0; d < batchRank; ++d) {
    shape.batchDims[d] = batch[d];
    shape.batchStridesA[d] = stridesA[d];
    shape.batchStridesB[d] = stridesB[d];
  }
  shape.m = m;
  shape.n = n;
  shape.k = k;
  long long tiles = batchCount * ((m + kTile - 1) / kTile) * ((n + kTile - 1) / kTile);
  DevicePtr aData = a->data, bData = b->data, cData = c.data;
  void *args[] = {&aData, &bData, &cData, &shape, &tiles};
  Dim3 grid;
  grid.x = static_cast<unsigned>(std::min<long long>(tiles, kMaxGridX));
  Dim3 threads;
  threads.x = kThreads;
  return context.launch(0, grid, threads, 0, args);
}

} // namespace dsrt::cuda
