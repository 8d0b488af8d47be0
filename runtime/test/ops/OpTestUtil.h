// Helpers of the dsrt_ops unit tests: tensors from literals, running an op end to end.
#ifndef DSRT_TEST_OPS_OPTESTUTIL_H
#define DSRT_TEST_OPS_OPTESTUTIL_H

#include "ops/Ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace dsrt::test {

template <typename T> OwnedTensor tensor(DType dtype, Shape shape, std::vector<T> values) {
  OwnedTensor t(dtype, std::move(shape));
  EXPECT_EQ(values.size() * sizeof(T), t.storage.size()) << "literal does not fit the shape";
  if (values.size() * sizeof(T) == t.storage.size() && !values.empty())
    std::memcpy(t.storage.data(), values.data(), t.storage.size());
  return t;
}
inline OwnedTensor f32(Shape shape, std::vector<float> v) { return tensor(DType::F32, shape, v); }
inline OwnedTensor i64(Shape shape, std::vector<int64_t> v) {
  return tensor(DType::I64, shape, v);
}
inline OwnedTensor i32(Shape shape, std::vector<int32_t> v) {
  return tensor(DType::I32, shape, v);
}
inline OwnedTensor boolean(Shape shape, std::vector<uint8_t> v) {
  return tensor(DType::Bool, shape, v);
}
inline OwnedTensor f16(Shape shape, std::vector<float> v) {
  std::vector<uint16_t> bits;
  for (float x : v)
    bits.push_back(floatToHalf(x));
  return tensor(DType::F16, shape, bits);
}

// Standard-normal f32 elements.
inline OwnedTensor randomF32(Shape shape, std::mt19937 &rng) {
  OwnedTensor t(DType::F32, std::move(shape));
  std::normal_distribution<float> normal;
  auto *data = reinterpret_cast<float *>(t.storage.data());
  for (int64_t i = 0; i < t.ref().elements(); ++i)
    data[i] = normal(rng);
  return t;
}

template <typename T> std::vector<T> values(const OwnedTensor &t) {
  std::vector<T> out(t.storage.size() / sizeof(T));
  if (!out.empty())
    std::memcpy(out.data(), t.storage.data(), t.storage.size());
  return out;
}
inline std::vector<float> halfValues(const OwnedTensor &t) {
  std::vector<float> out;
  for (uint16_t bits : values<uint16_t>(t))
    out.push_back(halfToFloat(bits));
  return out;
}

// Runs `op` (inferShapes, then compute into fresh tensors). An absent optional input is a
// null pointer in `inputs`.
inline Status run(std::string_view op, const std::vector<const OwnedTensor *> &inputs,
                  std::vector<OwnedTensor> &outputs, const ops::AttrMap &attrs = {},
                  size_t numOutputs = 1, ops::KvCache *cache = nullptr,
                  ops::Collectives *collectives = nullptr, bool fastKernels = false,
                  bool rowInvariant = false) {
  std::vector<TensorRef> refs;
  refs.reserve(inputs.size());
  ops::Inputs pointers;
  for (const OwnedTensor *input : inputs) {
    refs.push_back(input ? input->ref() : TensorRef{});
    pointers.push_back(input ? &refs.back() : nullptr);
  }
  std::vector<ops::OutputSpec> specs;
  ops::SessionState state;
  state.cache = cache;
  state.collectives = collectives;
  state.fastKernels = fastKernels;
  state.rowInvariant = rowInvariant;
  DSRT_RETURN_IF_ERROR(ops::inferShapes(op, attrs, pointers, numOutputs, specs, &state));
  outputs.clear();
  for (const ops::OutputSpec &spec : specs)
    outputs.emplace_back(spec.dtype, spec.shape);
  std::vector<TensorRef> outRefs;
  ops::Outputs outPointers;
  outRefs.reserve(outputs.size());
  for (OwnedTensor &output : outputs) {
    outRefs.push_back(output.ref());
    outPointers.push_back(&outRefs.back());
  }
  return ops::compute(op, attrs, pointers, outPointers, &state);
}

// One output; fails the test on error.
inline OwnedTensor run1(std::string_view op, const std::vector<const OwnedTensor *> &inputs,
                        const ops::AttrMap &attrs = {}) {
  std::vector<OwnedTensor> outputs;
  Status status = run(op, inputs, outputs, attrs);
  EXPECT_TRUE(status.isOk()) << status.message();
  return outputs.empty() ? OwnedTensor() : std::move(outputs[0]);
}

// The error message of running `op`, or "" when it succeeds.
inline std::string errorOf(std::string_view op, const std::vector<const OwnedTensor *> &inputs,
                           const ops::AttrMap &attrs = {}, size_t numOutputs = 1) {
  std::vector<OwnedTensor> outputs;
  Status status = run(op, inputs, outputs, attrs, numOutputs);
  return status.isOk() ? "" : status.message();
}

// A rank of a tensor-parallel group, for kernels that only read which rank they are.
class RankOnly : public ops::Collectives {
public:
  RankOnly(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allReduceSum(float *, int64_t) override { return Status::error("not a real group"); }
  Status allGather(const void *, const std::vector<int64_t> &, void *) override {
    return Status::error("not a real group");
  }

private:
  int rank_, size_;
};

// One step of the serving engine over its paged cache: sequences of `cached` tokens before
// `fresh` new ones, each new token a row of the step, their blocks of `blockSize` tokens
// drawn from a shuffled pool of as many as they need. `rows` point into `tables`.
struct PagedSequence {
  int64_t cached, fresh;
};
struct PagedStep {
  int64_t blocks = 0;
  std::vector<std::vector<int32_t>> tables;
  std::vector<ops::KvPagedRow> rows;
  std::vector<int64_t> positions;  // each row's
};
inline PagedStep pagedStep(const std::vector<PagedSequence> &sequences, int64_t blockSize,
                           std::mt19937 &rng) {
  PagedStep step;
  for (const PagedSequence &s : sequences)
    step.blocks += (s.cached + s.fresh + blockSize - 1) / blockSize;
  std::vector<int32_t> pool(static_cast<size_t>(step.blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  size_t next = 0;
  for (const PagedSequence &s : sequences) {
    const size_t count = static_cast<size_t>((s.cached + s.fresh + blockSize - 1) / blockSize);
    step.tables.emplace_back(pool.begin() + next, pool.begin() + next + count);
    next += count;
  }
  for (size_t i = 0; i < sequences.size(); ++i)
    for (int64_t j = 0; j < sequences[i].fresh; ++j) {
      step.rows.push_back({step.tables[i].data(), static_cast<int64_t>(step.tables[i].size()),
                           sequences[i].cached + j});
      step.positions.push_back(sequences[i].cached + j);
    }
  return step;
}

// Features [begin, end) of the last axis of a [b, s, f] tensor.
inline OwnedTensor features(const OwnedTensor &t, int64_t begin, int64_t end) {
  int64_t rows = t.shape[0] * t.shape[1], f = t.shape[2];
  OwnedTensor out(t.dtype, {t.shape[0], t.shape[1], end - begin});
  auto *src = reinterpret_cast<const float *>(t.storage.data());
  auto *dst = reinterpret_cast<float *>(out.storage.data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = begin; j < end; ++j)
      dst[i * (end - begin) + j - begin] = src[i * f + j];
  return out;
}

} // namespace dsrt::test

#endif
