// The helpers the CPU kernels of the recognised transformer ops share
// (runtime/src/ops/Transformer*.cpp): float tensors of any float dtype read and written
// as fp32.
#ifndef DSRT_OPS_FLOATACCESS_H
#define DSRT_OPS_FLOATACCESS_H

#include "ops/Kernel.h"

#include <vector>

namespace dsrt::ops {

inline constexpr int64_t kParallelGrainWork = 1 << 15;

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
  std::vector<float> copy_;
};

// Writes fp32 values into a float tensor of any float dtype.
inline void storeFloats(const std::vector<float> &values, const TensorRef &out) {
  convertFloats(DType::F32, values.data(), out.dtype, out.data, out.elements());
}

// An output computed in an fp32 buffer, or directly in the tensor when it is fp32.
class FloatOutput {
public:
  explicit FloatOutput(const TensorRef &t) : tensor_(t) {
    if (t.dtype != DType::F32)
      copy_.resize(static_cast<size_t>(t.elements()));
  }
  float *data() { return copy_.empty() ? tensor_.as<float>() : copy_.data(); }
  void finish() {
    if (!copy_.empty())
      storeFloats(copy_, tensor_);
  }

private:
  const TensorRef &tensor_;
  std::vector<float> copy_;
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
