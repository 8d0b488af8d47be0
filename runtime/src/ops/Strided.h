// Internal to dsrt_ops: numpy broadcasting and iteration over a shape with per-operand
// strides, the loop that elementwise ops, Expand, Transpose, Slice and Tile share.
#ifndef DSRT_OPS_STRIDED_H
#define DSRT_OPS_STRIDED_H

#include "core/Tensor.h"

#include <array>
#include <cstdint>
#include <vector>

namespace dsrt::ops {

// Multidirectional (numpy) broadcasting of two shapes; false when they do not broadcast.
bool broadcastShapes(const Shape &a, const Shape &b, Shape &out);

// True when `from` broadcasts to `to` without changing `to` (unidirectional).
bool broadcastsTo(const Shape &from, const Shape &to);

// Row-major strides (in elements) of `shape`.
std::vector<int64_t> contiguousStrides(const Shape &shape);

// The strides of a tensor of shape `in` read as if it had shape `out` (to which it
// broadcasts): right-aligned, 0 along broadcast dimensions.
std::vector<int64_t> broadcastStrides(const Shape &in, const Shape &out);

// Visits every element of `shape` in row-major order, calling
// body(linearIndex, offsets) where offsets[k] = base[k] + sum_d index_d * strides[k][d].
template <size_t N, typename Body>
void forEachStrided(const Shape &shape, const std::array<const int64_t *, N> &strides,
                    const std::array<int64_t, N> &base, Body &&body) {
  int64_t total = elementCount(shape);
  if (total <= 0)
    return;
  size_t rank = shape.size();
  if (rank == 0) {
    body(int64_t(0), base);
    return;
  }
  int64_t inner = shape[rank - 1];
  std::array<int64_t, N> innerStride;
  for (size_t k = 0; k < N; ++k)
    innerStride[k] = strides[k][rank - 1];
  std::vector<int64_t> counter(rank, 0);
  std::array<int64_t, N> rowBase = base;
  int64_t linear = 0;
  for (int64_t row = 0, rows = total / inner; row < rows; ++row) {
    std::array<int64_t, N> offsets = rowBase;
    for (int64_t j = 0; j < inner; ++j, ++linear) {
      body(linear, offsets);
      for (size_t k = 0; k < N; ++k)
        offsets[k] += innerStride[k];
    }
    // Advance the row counter (every dimension but the last).
    for (size_t d = rank - 1; d-- > 0;) {
      if (++counter[d] < shape[d]) {
        for (size_t k = 0; k < N; ++k)
          rowBase[k] += strides[k][d];
        break;
      }
      counter[d] = 0;
      for (size_t k = 0; k < N; ++k)
        rowBase[k] -= strides[k][d] * (shape[d] - 1);
    }
  }
}

// forEachStrided over the output shape `out` with each input broadcast to it.
template <size_t N, typename Body>
void forEachBroadcast(const Shape &out, const std::array<const Shape *, N> &inputs,
                      Body &&body) {
  std::array<std::vector<int64_t>, N> strides;
  std::array<const int64_t *, N> stridePointers;
  for (size_t k = 0; k < N; ++k) {
    strides[k] = broadcastStrides(*inputs[k], out);
    stridePointers[k] = strides[k].data();
  }
  forEachStrided<N>(out, stridePointers, std::array<int64_t, N>{}, body);
}

} // namespace dsrt::ops

#endif
