// Indexed reads and writes: Gather, GatherElements, GatherND, ScatterND, ScatterElements. Every
// index is checked before it is used (a scatter checks them all before it writes anything);
// negative indices count from the end as in numpy.
#include "ops/Kernel.h"
#include "ops/Strided.h"
#include "ops/TypeDispatch.h"

#include <cstring>

namespace dsrt::ops {
namespace {

int64_t indexAt(const TensorRef &indices, int64_t i) {
  return indices.dtype == DType::I64 ? indices.as<int64_t>()[i] : indices.as<int32_t>()[i];
}

// `index` normalised into [0, dim), or an error naming it.
Status checkedIndex(const KernelContext &ctx, int64_t index, int64_t dim, int64_t &out) {
  int64_t normalized = index < 0 ? index + dim : index;
  if (normalized < 0 || normalized >= dim)
    return ctx.error("index ", index, " is out of range for a dimension of size ", dim);
  out = normalized;
  return Status::ok();
}

Status gatherAxis(const KernelContext &ctx, int64_t &axis) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "indices", kIndexTypes));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", 0, axis));
  return normalizeAxis(ctx, axis, ctx.input(0)->shape.size(), "axis", axis);
}

Status inferGather(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  int64_t axis;
  DSRT_RETURN_IF_ERROR(gatherAxis(ctx, axis));
  const Shape &data = ctx.input(0)->shape, &indices = ctx.input(1)->shape;
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  outputs.push_back({ctx.input(0)->dtype, out});
  return Status::ok();
}

Status computeGather(const KernelContext &ctx, const Outputs &outputs) {
  int64_t axis;
  DSRT_RETURN_IF_ERROR(gatherAxis(ctx, axis));
  const TensorRef &data = *ctx.input(0), &indices = *ctx.input(1);
  int64_t dim = data.shape[axis];
  int64_t count = indices.elements();
  std::vector<int64_t> rows(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    DSRT_RETURN_IF_ERROR(checkedIndex(ctx, indexAt(indices, i), dim, rows[i]));
  int64_t outer = product(data.shape, 0, axis);
  size_t inner = static_cast<size_t>(product(data.shape, axis + 1, data.shape.size())) *
                 dtypeSize(data.dtype);
  if (inner == 0)
    return Status::ok();
  const uint8_t *src = data.as<uint8_t>();
  uint8_t *dst = outputs[0]->as<uint8_t>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(dst + (o * count + i) * inner, src + (o * dim + rows[i]) * inner, inner);
  return Status::ok();
}

// GatherElements' and ScatterElements' indices: of data's rank and, off the axis, no wider
// than data (the index's position is the coordinate there).
Status checkElementIndices(const KernelContext &ctx, const Shape &data, const Shape &indices,
                           int64_t axis) {
  if (indices.size() != data.size())
    return ctx.error("indices of shape ", shapeString(indices),
                     " must have the rank of data ", shapeString(data));
  for (size_t d = 0; d < data.size(); ++d)
    if (static_cast<int64_t>(d) != axis && indices[d] > data[d])
      return ctx.error("indices of shape ", shapeString(indices),
                       " exceed data of shape ", shapeString(data), " in dimension ", d);
  return Status::ok();
}

// The element of data (row-major offset) each index names: its own coordinates with the
// axis' replaced by the index. Every index is checked.
Status elementOffsets(const KernelContext &ctx, const Shape &data, const TensorRef &indices,
                      int64_t axis, std::vector<int64_t> &offsets) {
  int64_t dim = data[axis];
  std::vector<int64_t> strides = contiguousStrides(data);
  int64_t axisStride = strides[axis];
  strides[axis] = 0;  // the index supplies this coordinate
  offsets.resize(static_cast<size_t>(indices.elements()));
  Status status = Status::ok();
  forEachStrided<1>(indices.shape, {strides.data()}, {0},
                    [&](int64_t i, const std::array<int64_t, 1> &at) {
                      int64_t index = 0;
                      if (!status.isOk())
                        return;
                      status = checkedIndex(ctx, indexAt(indices, i), dim, index);
                      offsets[i] = at[0] + index * axisStride;
                    });
  return status;
}

Status inferGatherElements(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  int64_t axis;
  DSRT_RETURN_IF_ERROR(gatherAxis(ctx, axis));
  const Shape &data = ctx.input(0)->shape, &indices = ctx.input(1)->shape;
  DSRT_RETURN_IF_ERROR(checkElementIndices(ctx, data, indices, axis));
  outputs.push_back({ctx.input(0)->dtype, indices});
  return Status::ok();
}

Status computeGatherElements(const KernelContext &ctx, const Outputs &outputs) {
  int64_t axis;
  DSRT_RETURN_IF_ERROR(gatherAxis(ctx, axis));
  const TensorRef &data = *ctx.input(0), &indices = *ctx.input(1);
  std::vector<int64_t> offsets;
  DSRT_RETURN_IF_ERROR(elementOffsets(ctx, data.shape, indices, axis, offsets));
  visitElementSize(dtypeSize(data.dtype), [&](auto tag) {
    using E = decltype(tag);
    const E *src = data.as<E>();
    E *dst = outputs[0]->as<E>();
    for (size_t i = 0; i < offsets.size(); ++i)
      dst[i] = src[offsets[i]];
  });
  return Status::ok();
}

// GatherND's shapes: data [batch..., rest...], indices [batch..., tuples..., k]; each tuple
// picks a slice data[batch..., i_1, ..., i_k, :...].
struct GatherNDShapes {
  int64_t batchDims, k;
};

Status gatherNDShapes(const KernelContext &ctx, GatherNDShapes &out) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "indices", maskOf({DType::I64})));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "batch_dims", 0, out.batchDims));
  const Shape &data = ctx.input(0)->shape, &indices = ctx.input(1)->shape;
  int64_t b = out.batchDims;
  if (b < 0 || b >= static_cast<int64_t>(data.size()) ||
      b >= static_cast<int64_t>(indices.size()))
    return ctx.error("batch_dims ", b, " must be less than the ranks of data ",
                     shapeString(data), " and indices ", shapeString(indices));
  for (int64_t d = 0; d < b; ++d)
    if (data[d] != indices[d])
      return ctx.error("batch dimension ", d, " of indices ", shapeString(indices),
                       " differs from data ", shapeString(data));
  out.k = indices.back();
  if (out.k < 1 || out.k > static_cast<int64_t>(data.size()) - b)
    return ctx.error("index tuples of length ", out.k, " do not fit data ", shapeString(data),
                     " after ", b, " batch dimensions");
  return Status::ok();
}

Status inferGatherND(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  GatherNDShapes g;
  DSRT_RETURN_IF_ERROR(gatherNDShapes(ctx, g));
  const Shape &data = ctx.input(0)->shape, &indices = ctx.input(1)->shape;
  Shape out(indices.begin(), indices.end() - 1);
  out.insert(out.end(), data.begin() + g.batchDims + g.k, data.end());
  outputs.push_back({ctx.input(0)->dtype, out});
  return Status::ok();
}

Status computeGatherND(const KernelContext &ctx, const Outputs &outputs) {
  GatherNDShapes g;
  DSRT_RETURN_IF_ERROR(gatherNDShapes(ctx, g));
  const TensorRef &data = *ctx.input(0), &indices = *ctx.input(1);
  size_t first = static_cast<size_t>(g.batchDims), k = static_cast<size_t>(g.k);
  int64_t batches = product(data.shape, 0, first);
  int64_t tuples = product(indices.shape, first, indices.shape.size() - 1);
  int64_t slice = product(data.shape, first + k, data.shape.size());
  int64_t batchStride = product(data.shape, first, data.shape.size());
  size_t sliceBytes = static_cast<size_t>(slice) * dtypeSize(data.dtype);
  const int64_t *tuple = indices.as<int64_t>();
  const uint8_t *src = data.as<uint8_t>();
  uint8_t *dst = outputs[0]->as<uint8_t>();
  for (int64_t batch = 0; batch < batches; ++batch)
    for (int64_t t = 0; t < tuples; ++t, tuple += k, dst += sliceBytes) {
      int64_t offset = 0;  // in slices, within the batch
      for (size_t j = 0; j < k; ++j) {
        int64_t index = 0;
        DSRT_RETURN_IF_ERROR(checkedIndex(ctx, tuple[j], data.shape[first + j], index));
        offset = offset * data.shape[first + j] + index;
      }
      if (sliceBytes > 0)
        std::memcpy(dst, src + (batch * batchStride + offset * slice) * dtypeSize(data.dtype),
                    sliceBytes);
    }
  return Status::ok();
}

// The scatters' reduction, which must be one ONNX names and, but for none, needs numbers.
Status reductionAttr(const KernelContext &ctx, std::string &reduction) {
  DSRT_RETURN_IF_ERROR(stringAttr(ctx, "reduction", "none", reduction));
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" &&
      reduction != "min")
    return ctx.error("unknown reduction '", reduction, "'");
  if (reduction != "none" && ctx.input(0)->dtype == DType::Bool)
    return ctx.error("reduction '", reduction, "' needs numbers, not bool");
  return Status::ok();
}

Status inferScatterND(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "indices", maskOf({DType::I64})));
  DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, 2));
  std::string reduction;
  DSRT_RETURN_IF_ERROR(reductionAttr(ctx, reduction));
  const Shape &data = ctx.input(0)->shape, &indices = ctx.input(1)->shape,
              &updates = ctx.input(2)->shape;
  if (data.empty() || indices.empty())
    return ctx.error("data and indices must have rank 1 or more");
  int64_t k = indices.back();
  if (k < 1 || k > static_cast<int64_t>(data.size()))
    return ctx.error("the last dimension of indices (", k, ") must be in [1, ",
                     data.size(), "]");
  Shape expected(indices.begin(), indices.end() - 1);
  expected.insert(expected.end(), data.begin() + k, data.end());
  if (updates != expected)
    return ctx.error("updates have shape ", shapeString(updates), ", expected ",
                     shapeString(expected));
  outputs.push_back({ctx.input(0)->dtype, data});
  return Status::ok();
}

enum class Reduction { None, Add, Mul, Max, Min };

Reduction reductionOf(const std::string &name) {
  if (name == "add") return Reduction::Add;
  if (name == "mul") return Reduction::Mul;
  if (name == "max") return Reduction::Max;
  if (name == "min") return Reduction::Min;
  return Reduction::None;
}

template <typename T> void combine(T *dst, const T *src, int64_t count, Reduction reduction) {
  for (int64_t i = 0; i < count; ++i) {
    auto a = load(dst[i]), b = load(src[i]);
    switch (reduction) {
    case Reduction::Add: a = wrapAdd(a, b); break;
    case Reduction::Mul: a = wrapMul(a, b); break;
    case Reduction::Max: a = a < b ? b : a; break;
    case Reduction::Min: a = b < a ? b : a; break;
    case Reduction::None: a = b; break;
    }
    dst[i] = store<T>(a);
  }
}

Status computeScatterND(const KernelContext &ctx, const Outputs &outputs) {
  const TensorRef &data = *ctx.input(0), &indices = *ctx.input(1), &updates = *ctx.input(2);
  const TensorRef &out = *outputs[0];
  std::string reductionName;
  DSRT_RETURN_IF_ERROR(stringAttr(ctx, "reduction", "none", reductionName));
  Reduction reduction = reductionOf(reductionName);
  if (data.bytes() > 0)
    std::memcpy(out.data, data.data, data.bytes());
  size_t k = static_cast<size_t>(indices.shape.back());
  int64_t slice = product(data.shape, k, data.shape.size());
  int64_t updatesCount = product(indices.shape, 0, indices.shape.size() - 1);
  size_t size = dtypeSize(data.dtype);
  // Offsets (in slices) of each update, all checked before anything is written.
  std::vector<int64_t> offsets(static_cast<size_t>(updatesCount));
  for (int64_t u = 0; u < updatesCount; ++u) {
    int64_t offset = 0;
    for (size_t j = 0; j < k; ++j) {
      int64_t index = 0;
      DSRT_RETURN_IF_ERROR(checkedIndex(ctx, indices.as<int64_t>()[u * k + j],
                                        data.shape[j], index));
      offset = offset * data.shape[j] + index;
    }
    offsets[u] = offset;
  }
  for (int64_t u = 0; u < updatesCount; ++u) {
    uint8_t *dst = out.as<uint8_t>() + offsets[u] * slice * size;
    const uint8_t *src = updates.as<uint8_t>() + u * slice * size;
    if (reduction == Reduction::None) {
      if (slice > 0)
        std::memcpy(dst, src, static_cast<size_t>(slice) * size);
      continue;
    }
    DSRT_RETURN_IF_ERROR(visitDType(data.dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      if constexpr (!kIsBool<T>)
        combine(reinterpret_cast<T *>(dst), reinterpret_cast<const T *>(src), slice, reduction);
      return Status::ok();
    }));
  }
  return Status::ok();
}

// ScatterElements' shapes: GatherElements' indices, and updates of the indices' shape.
Status scatterElementsShapes(const KernelContext &ctx, int64_t &axis, Reduction &reduction) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "indices", kIndexTypes));
  DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, 2));
  std::string name;
  DSRT_RETURN_IF_ERROR(reductionAttr(ctx, name));
  reduction = reductionOf(name);
  const Shape &data = ctx.input(0)->shape, &indices = ctx.input(1)->shape,
              &updates = ctx.input(2)->shape;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", 0, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, data.size(), "axis", axis));
  DSRT_RETURN_IF_ERROR(checkElementIndices(ctx, data, indices, axis));
  if (updates != indices)
    return ctx.error("updates have shape ", shapeString(updates), ", indices ",
                     shapeString(indices), "; they must be the same");
  return Status::ok();
}

Status inferScatterElements(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  int64_t axis;
  Reduction reduction;
  DSRT_RETURN_IF_ERROR(scatterElementsShapes(ctx, axis, reduction));
  outputs.push_back({ctx.input(0)->dtype, ctx.input(0)->shape});
  return Status::ok();
}

Status computeScatterElements(const KernelContext &ctx, const Outputs &outputs) {
  int64_t axis;
  Reduction reduction;
  DSRT_RETURN_IF_ERROR(scatterElementsShapes(ctx, axis, reduction));
  const TensorRef &data = *ctx.input(0), &indices = *ctx.input(1), &updates = *ctx.input(2);
  // Every target is checked before the first write: a bad index leaves nothing half done.
  std::vector<int64_t> targets;
  DSRT_RETURN_IF_ERROR(elementOffsets(ctx, data.shape, indices, axis, targets));
  const TensorRef &out = *outputs[0];
  if (data.bytes() > 0)
    std::memcpy(out.data, data.data, data.bytes());
  return visitDType(data.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    T *dst = out.as<T>();
    const T *src = updates.as<T>();
    // In index order: with duplicate indices and no reduction, the last update wins.
    for (size_t i = 0; i < targets.size(); ++i) {
      if constexpr (kIsBool<T>)
        dst[targets[i]] = src[i];  // reductionAttr refused reductions of bool
      else
        combine(dst + targets[i], src + i, 1, reduction);
    }
    return Status::ok();
  });
}

} // namespace

void addGatherKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"Gather", 2, 2, 2, 1, 1, inferGather, computeGather});
  kernels.push_back(
      {"GatherElements", 2, 2, 2, 1, 1, inferGatherElements, computeGatherElements});
  kernels.push_back({"GatherND", 2, 2, 2, 1, 1, inferGatherND, computeGatherND});
  kernels.push_back({"ScatterND", 3, 3, 3, 1, 1, inferScatterND, computeScatterND});
  kernels.push_back(
      {"ScatterElements", 3, 3, 3, 1, 1, inferScatterElements, computeScatterElements});
}

} // namespace dsrt::ops
