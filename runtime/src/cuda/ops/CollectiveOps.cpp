// tfm.all_reduce and tfm.all_gather on the device: the session's DeviceCollectives (NCCL,
// or the host group staged through host memory), with the same attributes and checks as
// the reference kernels (runtime/src/ops/Transformer.cpp).
#include "cuda/GpuOps.h"

#include <numeric>

namespace dsrt::cuda {
namespace {

Status groupOf(StepContext &context, int64_t &ranks) {
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "ranks", 1, ranks));
  if (ranks < 1)
    return context.error("ranks must be positive, not ", ranks);
  if (ranks > 1 && !context.collectives())
    return context.error("the plan has ", ranks, " tensor-parallel ranks: run them together "
                         "(dsrun --ranks inprocess, or mpirun -np ", ranks, ")");
  if (ranks > 1 && context.collectives()->size() != ranks)
    return context.error("the plan has ", ranks, " ranks but the group has ",
                         context.collectives()->size());
  return Status::ok();
}

Status allReduce(StepContext &context) {
  int64_t ranks;
  DSRT_RETURN_IF_ERROR(groupOf(context, ranks));
  const DeviceTensor *input = context.input(0);
  const DeviceTensor &output = context.output(0);
  if (!input || input->dtype != DType::F32 || output.dtype != DType::F32 ||
      output.elements() != input->elements())
    return context.error("sums f32 activations in place of the same shape");
  // In place on the output: the input may be read again by a later step.
  DSRT_RETURN_IF_ERROR(context.copy(output.data, input->bytes(), input->data, input->bytes(),
                                    input->bytes(), 1));
  if (ranks > 1)
    DSRT_RETURN_IF_ERROR(
        context.collectives()->allReduceSum(output.data, output.elements(), context.stream()));
  return Status::ok();
}

Status allGather(StepContext &context) {
  int64_t ranks, axis;
  DSRT_RETURN_IF_ERROR(groupOf(context, ranks));
  const DeviceTensor *input = context.input(0);
  const DeviceTensor &output = context.output(0);
  if (!input || input->shape.empty() || input->dtype != output.dtype)
    return context.error("gathers a tensor of rank 1 or more into one of its dtype");
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", 0, axis));
  int64_t rank = static_cast<int64_t>(input->shape.size());
  if (axis < -rank || axis >= rank)
    return context.error("axis ", axis, " is out of range for rank ", rank);
  if (axis < 0)
    axis += rank;
  std::vector<int64_t> sizes;
  bool present = false;
  DSRT_RETURN_IF_ERROR(ops::getInts(context.attrs(), "sizes", sizes, present));
  if (!present)
    sizes.assign(ranks, input->shape[axis]);
  if (static_cast<int64_t>(sizes.size()) != ranks)
    return context.error("sizes has ", sizes.size(), " entries for ", ranks, " ranks");
  int me = ranks > 1 ? context.collectives()->rank() : 0;
  if (input->shape[axis] != sizes[me])
    return context.error("rank ", me, " holds ", input->shape[axis], " along axis ", axis,
                         ", not its size ", sizes[me]);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= input->shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= input->shape[d];
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  if (output.shape.size() != input->shape.size() || output.shape[axis] != total)
    return context.error("the output's extent along axis ", axis, " is not ", total);
  int64_t rowBytes = inner * static_cast<int64_t>(dtypeSize(input->dtype));
  // Each rank's whole tensor arrives contiguously; the axis interleaves them.
  std::vector<int64_t> bytes;
  for (int64_t size : sizes)
    bytes.push_back(outer * size * rowBytes);
  int64_t gatheredBytes = std::accumulate(bytes.begin(), bytes.end(), int64_t(0));
  DevicePtr gathered = 0;
  DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(gatheredBytes), gathered));
  if (ranks > 1)
    DSRT_RETURN_IF_ERROR(
        context.collectives()->allGather(input->data, bytes, gathered, context.stream()));
  else
    DSRT_RETURN_IF_ERROR(context.copy(gathered, input->bytes(), input->data, input->bytes(),
                                      input->bytes(), 1));
  int64_t source = 0, offset = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    int64_t block = sizes[r] * rowBytes;
    // Rank r's rows land at columns [offset, offset + sizes[r]) of every outer row.
    DSRT_RETURN_IF_ERROR(context.copy(output.data + static_cast<DevicePtr>(offset * rowBytes),
                                      static_cast<size_t>(total * rowBytes),
                                      gathered + static_cast<DevicePtr>(source),
                                      static_cast<size_t>(block), static_cast<size_t>(block),
                                      static_cast<size_t>(outer)));
    source += bytes[r];
    offset += sizes[r];
  }
  return Status::ok();
}

} // namespace

void addCollectiveGpuOps(std::vector<GpuOpInfo> &ops) {
  ops.push_back({"tfm.all_reduce", allReduce});
  ops.push_back({"tfm.all_gather", allGather});
}

} // namespace dsrt::cuda
