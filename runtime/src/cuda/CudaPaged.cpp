// The CUDA session's paged KV cache (docs/serving.md, docs/cuda-backend.md "The engine on
// the GPU"): the serving engine's block pool on the device, and each step's rows, which the
// paged attention kernels read through GpuOps.h's DevicePagedRows. The pool itself is
// allocated with the dense cache's code (CudaResources.cpp), its layers reshaped to blocks.
#include "cuda/CudaSession.h"

#include <algorithm>
#include <cstddef>
#include <string>

namespace dsrt::cuda {

// A table reaches every position a sequence of the plan may have: max_seq_len.
Status CudaSession::initPagedCache() {
  const dsp::Limits *limits = plan_->plan().limits();
  const int64_t maxSeq = limits ? limits->max_seq_len() : 0;
  if (maxSeq < 1)
    return Status::error(plan_->path() + ": the plan states no max_seq_len, which a paged KV "
                                         "cache's block tables need");
  pagedRows_ = {};
  pagedRows_.blockSize = options_.kvBlockSize;
  pagedRows_.blocks = options_.kvBlocks;
  pagedRows_.tableWidth = (maxSeq + options_.kvBlockSize - 1) / options_.kvBlockSize;
  if (pagedRows_.tableWidth * options_.kvBlockSize > INT32_MAX)
    return Status::error("a table of " + std::to_string(pagedRows_.tableWidth) + " blocks of " +
                         std::to_string(options_.kvBlockSize) +
                         " positions exceeds the kernels' int range");
  // The rows of the largest step, in one buffer for the session's life: a captured step
  // reads it at the address it was captured with. Then its prompt chunks, two ints for
  // each run of two rows or more: at most one int per row.
  pagedRowsCapacity_ = static_cast<size_t>(
      std::max<int64_t>(limits->max_tokens_per_step() > 0 ? limits->max_tokens_per_step()
                                                          : limits->max_batch(),
                        1));
  const size_t bytes = pagedRowsCapacity_ * static_cast<size_t>(pagedRows_.tableWidth + 2) *
                       sizeof(int32_t);
  DSRT_RETURN_IF_ERROR(allocate(bytes, pagedRows_.data, "the paged rows"));
  memory_.other += bytes;
  return Status::ok();
}

// Every row is checked here, where a message can name it: the kernels trust the tables.
Status CudaSession::setPagedRows(const std::vector<ops::KvPagedRow> &rows) {
  if (hostKvMirror_.blockSize == 0)
    return Status::error(plan_->path() + ": this session was created without a paged KV "
                                         "cache");
  const int64_t width = pagedRows_.tableWidth, blockSize = pagedRows_.blockSize;
  const size_t stride = static_cast<size_t>(width + 1);
  if (rows.size() > pagedRowsCapacity_)
    return Status::error(std::to_string(rows.size()) + " rows exceed the plan's " +
                         std::to_string(pagedRowsCapacity_) + " tokens per step");
  hostPagedRows_.assign(rows.size() * stride, -1);
  for (size_t r = 0; r < rows.size(); ++r) {
    const ops::KvPagedRow &row = rows[r];
    if (row.position < 0 || row.position >= width * blockSize)
      return Status::error("row " + std::to_string(r) + " is at position " +
                           std::to_string(row.position) + ", outside the plan's " +
                           std::to_string(width * blockSize) + " positions");
    const int64_t needed = row.position / blockSize + 1;
    if (row.blockCount < needed || !row.blocks)
      return Status::error("row " + std::to_string(r) + " at position " +
                           std::to_string(row.position) + " has " +
                           std::to_string(row.blockCount) + " blocks of " +
                           std::to_string(blockSize) + "; it needs " + std::to_string(needed));
    int32_t *out = &hostPagedRows_[r * stride];
    out[0] = static_cast<int32_t>(row.position);
    for (int64_t i = 0; i < std::min(row.blockCount, width); ++i) {
      // Blocks past the row's position are never read, but a table names only real ones.
      if (row.blocks[i] < 0 || row.blocks[i] >= pagedRows_.blocks)
        return Status::error("row " + std::to_string(r) + " names block " +
                             std::to_string(row.blocks[i]) + " of " +
                             std::to_string(pagedRows_.blocks));
      out[1 + i] = row.blocks[i];
    }
  }
  // The prompt chunks after the rows, in the same copy (the paged prefill kernel's).
  const size_t rowInts = hostPagedRows_.size();
  std::vector<int32_t> chunks;
  findPagedChunks(hostPagedRows_.data(), static_cast<int64_t>(rows.size()), width, chunks);
  hostPagedRows_.insert(hostPagedRows_.end(), chunks.begin(), chunks.end());
  // One copy per step; staged from pageable memory, so the vector may change after it.
  if (!hostPagedRows_.empty())
    DSRT_RETURN_IF_ERROR(copyToDevice(pagedRows_.data, hostPagedRows_.data(),
                                      hostPagedRows_.size() * sizeof(int32_t)));
  pagedRows_.rows = static_cast<int64_t>(rows.size());
  pagedRows_.host = hostPagedRows_.data();
  pagedRows_.chunks = static_cast<int64_t>(chunks.size() / 2);
  pagedRows_.chunkData = pagedRows_.data + rowInts * sizeof(int32_t);
  pagedRows_.hostChunks = hostPagedRows_.data() + rowInts;
  // The host fallback runs the CPU paged attention over a downloaded pool.
  hostKvMirror_.pagedRows = rows;
  pagedRowsSet_ = true;
  return Status::ok();
}

// A step captured for a bucket of `batch` rows runs its padding rows as copies of row 0
// (uploadInputs repeats row 0's inputs): the same token at the same position, so they write
// row 0's key and value into row 0's slot again and attend as it does; their results are
// dropped.
Status CudaSession::padPagedRows(int64_t batch) {
  const size_t stride = static_cast<size_t>(pagedRows_.tableWidth + 1);
  const int64_t rows = pagedRows_.rows;
  if (batch <= rows)
    return Status::ok();
  if (rows < 1 || static_cast<size_t>(batch) > pagedRowsCapacity_)
    return Status::error("cannot pad " + std::to_string(rows) + " paged rows to " +
                         std::to_string(batch));
  // Padding rows follow the rows where the chunks were: a padded step attends every row
  // with the decode kernel, whose grid does not depend on the step's chunks.
  hostPagedRows_.resize(static_cast<size_t>(rows) * stride);
  pagedRows_.chunks = 0;
  pagedRows_.chunkData = 0;
  pagedRows_.hostChunks = nullptr;
  for (int64_t r = rows; r < batch; ++r)
    hostPagedRows_.insert(hostPagedRows_.end(), hostPagedRows_.begin(),
                          hostPagedRows_.begin() + static_cast<std::ptrdiff_t>(stride));
  DSRT_RETURN_IF_ERROR(copyToDevice(pagedRows_.data, hostPagedRows_.data(),
                                    hostPagedRows_.size() * sizeof(int32_t)));
  pagedRows_.rows = batch;
  pagedRows_.host = hostPagedRows_.data();
  return Status::ok();
}

} // namespace dsrt::cuda
