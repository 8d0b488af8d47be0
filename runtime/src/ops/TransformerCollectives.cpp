// The collectives of tensor parallelism on the CPU (tfm.all_reduce, tfm.all_gather): the
// step's Collectives, or nothing for a single rank.
#include "ops/FloatAccess.h"
#include "ops/Kernel.h"
#include "ops/ThreadPool.h"
#include "ops/TypeDispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

namespace dsrt::ops {
namespace {

// ---- tfm.all_reduce, tfm.all_gather --------------------------------------------------

Status groupOf(const KernelContext &ctx, int64_t &ranks) {
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "ranks", 1, ranks));
  if (ranks < 1)
    return ctx.error("ranks must be positive, not ", ranks);
  if (ranks > 1 && !ctx.collectives)
    return ctx.error("the plan has ", ranks, " tensor-parallel ranks: run them together "
                     "(dsrun --ranks inprocess, or mpirun -np ", ranks, ")");
  if (ranks > 1 && ctx.collectives->size() != ranks)
    return ctx.error("the plan has ", ranks, " ranks but the group has ",
                     ctx.collectives->size());
  return Status::ok();
}

Status inferAllReduce(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "input", kFloatTypes));
  outputs.push_back({ctx.input(0)->dtype, ctx.input(0)->shape});
  return Status::ok();
}

Status computeAllReduce(const KernelContext &ctx, const Outputs &outputs) {
  int64_t ranks;
  DSRT_RETURN_IF_ERROR(groupOf(ctx, ranks));
  FloatView in(*ctx.input(0));
  std::vector<float> sum(in.data(), in.data() + ctx.input(0)->elements());
  if (ranks > 1)
    DSRT_RETURN_IF_ERROR(ctx.collectives->allReduceSum(sum.data(), sum.size()));
  storeFloats(sum, *outputs[0]);
  return Status::ok();
}

struct GatherLayout {
  int64_t axis = 0, outer = 1, inner = 1;
  std::vector<int64_t> sizes;  // per rank, along the axis
};

Status gatherLayout(const KernelContext &ctx, GatherLayout &layout) {
  const TensorRef &x = *ctx.input(0);
  int64_t ranks, axis;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "ranks", 1, ranks));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", 0, axis));
  if (ranks < 1)
    return ctx.error("ranks must be positive, not ", ranks);
  DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, x.shape.size(), "axis", layout.axis));
  bool present = false;
  DSRT_RETURN_IF_ERROR(getInts(ctx.attrs, "sizes", layout.sizes, present));
  if (!present)
    layout.sizes.assign(ranks, x.shape[layout.axis]);
  if (static_cast<int64_t>(layout.sizes.size()) != ranks)
    return ctx.error("sizes has ", layout.sizes.size(), " entries for ", ranks, " ranks");
  if (std::find(layout.sizes.begin(), layout.sizes.end(), x.shape[layout.axis]) ==
      layout.sizes.end())
    return ctx.error("the input's extent ", x.shape[layout.axis], " along axis ", layout.axis,
                     " is none of the ranks' sizes");
  layout.outer = product(x.shape, 0, layout.axis);
  layout.inner = product(x.shape, layout.axis + 1, x.shape.size());
  return Status::ok();
}

Status inferAllGather(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(requireRankAtLeast(ctx, 0, "input", 1));
  GatherLayout layout;
  DSRT_RETURN_IF_ERROR(gatherLayout(ctx, layout));
  Shape shape = ctx.input(0)->shape;
  shape[layout.axis] = std::accumulate(layout.sizes.begin(), layout.sizes.end(), int64_t(0));
  outputs.push_back({ctx.input(0)->dtype, shape});
  return Status::ok();
}

Status computeAllGather(const KernelContext &ctx, const Outputs &outputs) {
  int64_t ranks;
  DSRT_RETURN_IF_ERROR(groupOf(ctx, ranks));
  GatherLayout layout;
  DSRT_RETURN_IF_ERROR(gatherLayout(ctx, layout));
  const TensorRef &x = *ctx.input(0);
  size_t element = dtypeSize(x.dtype);
  int rank = ranks > 1 ? ctx.collectives->rank() : 0;
  if (x.shape[layout.axis] != layout.sizes[rank])
    return ctx.error("rank ", rank, " holds ", x.shape[layout.axis], " along axis ",
                     layout.axis, ", not its size ", layout.sizes[rank]);
  // Each rank's whole tensor arrives contiguously; the axis interleaves them.
  std::vector<int64_t> bytes;
  for (int64_t size : layout.sizes)
    bytes.push_back(layout.outer * size * layout.inner * static_cast<int64_t>(element));
  std::vector<uint8_t> gathered(std::accumulate(bytes.begin(), bytes.end(), int64_t(0)));
  if (ranks > 1)
    DSRT_RETURN_IF_ERROR(ctx.collectives->allGather(x.data, bytes, gathered.data()));
  else if (!gathered.empty())
    std::copy_n(static_cast<const uint8_t *>(x.data), gathered.size(), gathered.data());
  auto *out = static_cast<uint8_t *>(outputs[0]->data);
  int64_t total = outputs[0]->shape[layout.axis];
  int64_t rowBytes = layout.inner * static_cast<int64_t>(element);
  int64_t source = 0, offset = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    int64_t block = layout.sizes[r] * rowBytes;
    for (int64_t o = 0; o < layout.outer; ++o)
      std::copy_n(gathered.data() + source + o * block, block,
                  out + (o * total + offset) * rowBytes);
    source += bytes[r];
    offset += layout.sizes[r];
  }
  return Status::ok();
}

} // namespace

void addCollectiveKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"tfm.all_reduce", 1, 1, 1, 1, 1, inferAllReduce, computeAllReduce});
  kernels.push_back({"tfm.all_gather", 1, 1, 1, 1, 1, inferAllGather, computeAllGather});
}

} // namespace dsrt::ops
