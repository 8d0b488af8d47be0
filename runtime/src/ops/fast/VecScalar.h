// Internal to the fast kernels: the portable vector operations for DotKernels.h (4 lanes of
// plain floats, no intrinsics): what a CPU without AVX2 runs, and what the tests compare the
// vector kernels with (dotRowsPortable). IsaKernels.cpp includes it.
#ifndef DSRT_OPS_FAST_VECSCALAR_H
#define DSRT_OPS_FAST_VECSCALAR_H

#include "ops/fast/DotKernels.h"

#include <cstdint>
#include <cstring>

namespace dsrt::ops::fast {
namespace {

struct Scalar {
  static constexpr int kWidth = 4;
  static constexpr int kBlockRows = 3;
  struct V {
    float lane[4];
  };
  static V zero() { return {{0, 0, 0, 0}}; }
  static V broadcast(float v) { return {{v, v, v, v}}; }
  template <typename P, typename... Tag> static V loadWith(const P *p, Tag... tag) {
    V v;
    for (int i = 0; i < 4; ++i)
      v.lane[i] = detail::scalarLoad(p + i, tag...);
    return v;
  }
  static V load(const float *p) { return loadWith(p); }
  static V load(const uint16_t *p, detail::F16Tag tag) { return loadWith(p, tag); }
  static V load(const uint16_t *p, detail::BF16Tag tag) { return loadWith(p, tag); }
  static V load(const int8_t *p) { return loadWith(p); }
  static V lowNibbles(const uint8_t *p) {
    V v;
    for (int i = 0; i < 4; ++i)
      v.lane[i] = static_cast<float>(p[i] & 0xF);
    return v;
  }
  static V highNibbles(const uint8_t *p) {
    V v;
    for (int i = 0; i < 4; ++i)
      v.lane[i] = static_cast<float>(p[i] >> 4);
    return v;
  }
  static V loadInt4(const uint8_t *p) {
    V v;
    for (int i = 0; i < 4; ++i)
      v.lane[i] = detail::scalarLoadInt4(p, i);
    return v;
  }
  static V fma(V a, V b, V acc) {
    for (int i = 0; i < 4; ++i)
      acc.lane[i] += a.lane[i] * b.lane[i];
    return acc;
  }
  static V mul(V a, V b) {
    for (int i = 0; i < 4; ++i)
      a.lane[i] *= b.lane[i];
    return a;
  }
  static V add(V a, V b) {
    for (int i = 0; i < 4; ++i)
      a.lane[i] += b.lane[i];
    return a;
  }
  static V div(V a, V b) {
    for (int i = 0; i < 4; ++i)
      a.lane[i] /= b.lane[i];
    return a;
  }
  // Halving, as the vector ISAs' sums: the prompt tiles' scores rely on the pairs.
  static float sum(V v) { return (v.lane[0] + v.lane[2]) + (v.lane[1] + v.lane[3]); }
  template <typename F> static V each(V a, F f) {
    for (int i = 0; i < 4; ++i)
      a.lane[i] = f(a.lane[i]);
    return a;
  }
  // min and max return b where a lane is NaN, as the vector instructions do.
  static V min(V a, V b) {
    for (int i = 0; i < 4; ++i)
      a.lane[i] = a.lane[i] < b.lane[i] ? a.lane[i] : b.lane[i];
    return a;
  }
  static V max(V a, V b) {
    for (int i = 0; i < 4; ++i)
      a.lane[i] = a.lane[i] > b.lane[i] ? a.lane[i] : b.lane[i];
    return a;
  }
  static V floor(V a) { return each(a, [](float x) { return __builtin_floorf(x); }); }
  static V powerOfTwo(V n) {
    return each(n, [](float x) {
      int32_t bits = (static_cast<int32_t>(x) + 127) << 23;
      float value;
      std::memcpy(&value, &bits, sizeof value);
      return value;
    });
  }
  static void store(float *p, V v) {
    for (int i = 0; i < 4; ++i)
      p[i] = v.lane[i];
  }
};

} // namespace
} // namespace dsrt::ops::fast

#endif
