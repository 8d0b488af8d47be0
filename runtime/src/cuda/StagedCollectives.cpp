#include "cuda/StagedCollectives.h"

#include <numeric>

namespace dsrt::cuda {

Status StagedCollectives::check(CUresult result, const char *call) const {
  if (result == kCudaSuccess)
    return Status::ok();
  return Status::error("staged collective: " + driverErrorText(driver_, result, call));
}

Status StagedCollectives::allReduceSum(DevicePtr data, int64_t count, StreamHandle stream) {
  if (count < 0)
    return Status::error("staged all-reduce of " + std::to_string(count) + " elements");
  auto cuStream = static_cast<CUstream>(stream);
  size_t bytes = static_cast<size_t>(count) * sizeof(float);
  floats_.resize(static_cast<size_t>(count));
  if (bytes)
    DSRT_RETURN_IF_ERROR(check(driver_.cuMemcpyDtoHAsync(floats_.data(), data, bytes, cuStream),
                               "cuMemcpyDtoHAsync"));
  // Every rank must enter the host collective, even with nothing to sum.
  DSRT_RETURN_IF_ERROR(check(driver_.cuStreamSynchronize(cuStream), "cuStreamSynchronize"));
  DSRT_RETURN_IF_ERROR(group_.allReduceSum(floats_.data(), count));
  if (bytes)
    DSRT_RETURN_IF_ERROR(check(driver_.cuMemcpyHtoDAsync(data, floats_.data(), bytes, cuStream),
                               "cuMemcpyHtoDAsync"));
  // floats_ is reused by the next collective: the copy must have left it.
  return check(driver_.cuStreamSynchronize(cuStream), "cuStreamSynchronize");
}

Status StagedCollectives::allGather(DevicePtr mine, const std::vector<int64_t> &bytes,
                                    DevicePtr out, StreamHandle stream) {
  int rank = group_.rank();
  if (bytes.size() != static_cast<size_t>(group_.size()) || rank < 0 ||
      static_cast<size_t>(rank) >= bytes.size())
    return Status::error("staged all-gather: " + std::to_string(bytes.size()) +
                         " sizes for a group of " + std::to_string(group_.size()));
  for (int64_t size : bytes)
    if (size < 0)
      return Status::error("staged all-gather: a negative size");
  auto cuStream = static_cast<CUstream>(stream);
  int64_t total = std::accumulate(bytes.begin(), bytes.end(), int64_t(0));
  mine_.resize(static_cast<size_t>(std::max<int64_t>(bytes[rank], 1)));
  gathered_.resize(static_cast<size_t>(std::max<int64_t>(total, 1)));
  if (bytes[rank])
    DSRT_RETURN_IF_ERROR(check(driver_.cuMemcpyDtoHAsync(mine_.data(), mine, bytes[rank],
                                                         cuStream),
                               "cuMemcpyDtoHAsync"));
  DSRT_RETURN_IF_ERROR(check(driver_.cuStreamSynchronize(cuStream), "cuStreamSynchronize"));
  DSRT_RETURN_IF_ERROR(group_.allGather(mine_.data(), bytes, gathered_.data()));
  if (total)
    DSRT_RETURN_IF_ERROR(check(driver_.cuMemcpyHtoDAsync(out, gathered_.data(),
                                                         static_cast<size_t>(total), cuStream),
                               "cuMemcpyHtoDAsync"));
  return check(driver_.cuStreamSynchronize(cuStream), "cuStreamSynchronize");
}

} // namespace dsrt::cuda
