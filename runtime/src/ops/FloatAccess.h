// The helpers the CPU kernels of the recognised transformer ops share
// (runtime/src/ops/Transformer*.cpp): float tensors of any float dtype read and written
// as fp32.
#ifndef DSRT_OPS_FLOATACCESS_H
#define DSRT_OPS_FLOATACCESS_H

#include "ops/Kernel.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

namespace dsrt::ops {

inline constexpr int64_t kParallelGrainWork = 1 << 15;

// An fp32 buffer from a pool of the calling thread's, returned to it when destroyed: a
// prompt's activations are megabytes per step, and a fresh vector each call paid the
// kernel's page zeroing (page faults) and the value-initialisation every time: a quarter of
// a bf16 plan's 1024-token prefill on a Xeon (perf). Its contents start undefined.
class PooledFloats {
public:
  PooledFloats() = default;
  explicit PooledFloats(size_t count) { resize(count); }
  PooledFloats(const PooledFloats &) = delete;
  PooledFloats &operator=(const PooledFloats &) = delete;
  ~PooledFloats() {
    if (!buffer_)
      return;
    auto &free = pool();
    free.push_back({std::move(buffer_), capacity_});
    // The thread keeps its few largest buffers.
    constexpr size_t kKept = 8;
    if (free.size() > kKept) {
      auto smallest = std::min_element(free.begin(), free.end(), [](const auto &a, const auto &b) {
        return a.second < b.second;
      });
      free.erase(smallest);
    }
  }
  void resize(size_t count) {
    size_ = count;
    if (count <= capacity_)
      return;
    // The smallest free buffer that holds `count`, else a new one.
    auto &free = pool();
    auto best = free.end();
    for (auto it = free.begin(); it != free.end(); ++it)
      if (it->second >= count && (best == free.end() || it->second < best->second))
        best = it;
    Entry taken{nullptr, 0};
    if (best != free.end()) {
      taken = std::move(*best);
      free.erase(best);
    } else {
      taken = {std::unique_ptr<float[]>(new float[count]), count};
    }
    if (buffer_)
      free.push_back({std::move(buffer_), capacity_});
    buffer_ = std::move(taken.first);
    capacity_ = taken.second;
  }
  float *data() { return buffer_.get(); }
  const float *data() const { return buffer_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

private:
  using Entry = std::pair<std::unique_ptr<float[]>, size_t>;
  static std::vector<Entry> &pool() {
    thread_local std::vector<Entry> free;
    return free;
  }
  std::unique_ptr<float[]> buffer_;
  size_t capacity_ = 0, size_ = 0;
};

// The elements of a float tensor as fp32: the tensor's own storage when it is fp32.
class FloatView {
public:
  explicit FloatView(const TensorRef &t) {
    if (t.dtype == DType::F32) {
      data_ = t.as<float>();
      return;
    }
    copy_.resize(static_cast<size_t>(t.elements()));
    convertFloats(t.dtype, t.data, DType::F32, copy_.data(), t.elements());
    data_ = copy_.data();
  }
  const float *data() const { return data_; }
  float operator[](int64_t i) const { return data_[i]; }

private:
  const float *data_ = nullptr;
  PooledFloats copy_;
};

// Writes fp32 values into a float tensor of any float dtype.
inline void storeFloats(const std::vector<float> &values, const TensorRef &out) {
  convertFloats(DType::F32, values.data(), out.dtype, out.data, out.elements());
}

// An output computed in an fp32 buffer, or directly in the tensor when it is fp32.
class FloatOutput {
public:
  // The buffer starts zeroed, as the tensor's own storage may not be, unless the kernel
  // says it writes every element (`writesEveryElement`).
  explicit FloatOutput(const TensorRef &t, bool writesEveryElement = false) : tensor_(t) {
    if (t.dtype != DType::F32) {
      copy_.resize(static_cast<size_t>(t.elements()));
      if (!writesEveryElement)
        std::fill(copy_.data(), copy_.data() + copy_.size(), 0.0f);
    }
  }
  float *data() { return copy_.empty() ? tensor_.as<float>() : copy_.data(); }
  void finish() {
    if (!copy_.empty())
      convertFloats(DType::F32, copy_.data(), tensor_.dtype, tensor_.data, tensor_.elements());
  }

private:
  const TensorRef &tensor_;
  PooledFloats copy_;
};

inline Status requireRankAtLeast(const KernelContext &ctx, size_t index, const char *name, size_t rank) {
  if (ctx.input(index)->shape.size() < rank)
    return ctx.error(name, " must have rank ", rank, " or more, not ",
                     shapeString(ctx.input(index)->shape));
  return Status::ok();
}

inline int64_t lastDim(const TensorRef &t) { return t.shape.empty() ? 1 : t.shape.back(); }

} // namespace dsrt::ops

#endif
