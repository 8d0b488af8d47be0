// Internal to the fast kernels: the elementwise math of DotKernels.h (exponentials, erf, the
// activations, the attention's softmax), written once over the same `Vec` operations and
// compiled once per instruction set with it. Include it only through DotKernels.h.
#ifndef DSRT_OPS_FAST_VECMATH_H
#define DSRT_OPS_FAST_VECMATH_H

#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dsrt::ops::fast::detail {
// Internal linkage, as DotKernels.h: each instruction set's translation unit keeps its copy.
namespace {

// e^x within 2 ulp where it is a normal float (Cephes' expf: 2^n times a degree-6 polynomial
// of the remainder), and exactly 0 from -88 down (-inf included: n = -127 makes 2^n's bits 0),
// which the softmax's masked scores rely on. GCC did not vectorise its loop
// (branches for the clamps): exponentiateWith runs expVector below.
inline float expApprox(float x) {
  x = std::min(88.3762626647949f, std::max(-88.0f, x));
  float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// erf(x) within 1.2e-7 absolute (Abramowitz and Stegun 7.1.26 is too coarse: this is the
// rational form of W. J. Cody's erf for |x| < 0.5 and 1 - erfc's exponential form beyond,
// blended without branches).
inline float erfApprox(float x) {
  float a = std::fabs(x);
  // Numerical Recipes' erfc(t) = t exp(-a^2 - 1.26551223 + t P(t)), t = 1 / (1 + a / 2):
  // relative error below 1.2e-7 everywhere.
  float t = 1.0f / (1.0f + 0.5f * a);
  float poly = -1.26551223f +
               t * (1.00002368f +
                    t * (0.37409196f +
                         t * (0.09678418f +
                              t * (-0.18628806f +
                                   t * (0.27886807f +
                                        t * (-1.13520398f +
                                             t * (1.48851587f +
                                                  t * (-0.82215223f + t * 0.17087277f))))))));
  float erfc = t * expApprox(-a * a + poly);
  float value = 1.0f - erfc;
  return x < 0 ? -value : value;
}

template <Activation Kind> void activateTyped(float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x = y[i];
    if constexpr (Kind == Activation::GeluErf)
      y[i] = 0.5f * x * (1.0f + erfApprox(x * 0.70710678118654752f));
    else if constexpr (Kind == Activation::GeluTanh)  // 0.5 x (1 + tanh(u)) = x sigmoid(2u)
      y[i] = x / (1.0f + expApprox(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
    else if constexpr (Kind == Activation::GeluQuick)
      y[i] = x / (1.0f + expApprox(-1.702f * x));
    else if constexpr (Kind == Activation::Silu)
      y[i] = x / (1.0f + expApprox(-x));
    else if constexpr (Kind == Activation::Relu2)
      y[i] = x > 0 ? x * x : 0.0f;
    else
      y[i] = x > 0 ? x : 0.0f;
  }
}

inline void activateWith(Activation kind, float *y, int64_t n) {
  switch (kind) {
  case Activation::GeluErf: return activateTyped<Activation::GeluErf>(y, n);
  case Activation::GeluTanh: return activateTyped<Activation::GeluTanh>(y, n);
  case Activation::GeluQuick: return activateTyped<Activation::GeluQuick>(y, n);
  case Activation::Silu: return activateTyped<Activation::Silu>(y, n);
  case Activation::Relu: return activateTyped<Activation::Relu>(y, n);
  case Activation::Relu2: return activateTyped<Activation::Relu2>(y, n);
  }
}

// expApprox on a vector, the same steps (the compiler contracts the scalar's p * r + c into
// the FMAs written here).
template <class Vec> typename Vec::V expVector(typename Vec::V x) {
  using V = typename Vec::V;
  x = Vec::min(Vec::max(x, Vec::broadcast(-88.0f)),
               Vec::broadcast(88.3762626647949f));
  const V n = Vec::floor(Vec::fma(x, Vec::broadcast(1.44269504088896341f), Vec::broadcast(0.5f)));
  V r = Vec::fma(n, Vec::broadcast(-0.693359375f), x);
  r = Vec::fma(n, Vec::broadcast(2.12194440e-4f), r);
  V p = Vec::broadcast(1.9875691500e-4f);
  p = Vec::fma(p, r, Vec::broadcast(1.3981999507e-3f));
  p = Vec::fma(p, r, Vec::broadcast(8.3334519073e-3f));
  p = Vec::fma(p, r, Vec::broadcast(4.1665795894e-2f));
  p = Vec::fma(p, r, Vec::broadcast(1.6666665459e-1f));
  p = Vec::fma(p, r, Vec::broadcast(5.0000001201e-1f));
  p = Vec::add(Vec::fma(Vec::mul(p, r), r, r), Vec::broadcast(1.0f));
  return Vec::mul(p, Vec::powerOfTwo(n));
}

// The attention's softmax over scores [keys, ld] (key j, row r at j * ld + r; ld a multiple
// of the vector width), in the decode rows' arithmetic (TransformerPagedAttention.cpp): first
// each row's maximum over its scores (from maximum[r]: a sink's, or -inf), then each score
// replaced by e^(s - maximum) (0 for -inf, masked), added onto sum[r] in key order, and
// divided by the sum. A row with no finite score subtracts -FLT_MAX instead of -inf: its
// weights stay 0.
template <class Vec>
void columnMaximaWith(const float *scores, int64_t keys, int64_t ld, float *maximum) {
  for (int64_t r = 0; r + Vec::kWidth <= ld; r += Vec::kWidth) {
    typename Vec::V top = Vec::load(maximum + r);
    for (int64_t j = 0; j < keys; ++j)
      top = Vec::max(Vec::load(scores + j * ld + r), top);  // std::max(top, score)'s pick
    Vec::store(maximum + r, top);
  }
}

template <class Vec>
void softmaxColumnsWith(float *scores, int64_t keys, int64_t ld, const float *maximum,
                        float *sum) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth;
  for (int64_t r = 0; r + W <= ld; r += W) {
    const V negatedTop = Vec::mul(Vec::max(Vec::load(maximum + r), Vec::broadcast(-3.40282347e38f)),
                                  Vec::broadcast(-1.0f));
    V total = Vec::load(sum + r);
    for (int64_t j = 0; j < keys; ++j) {
      const V weight = expVector<Vec>(Vec::add(Vec::load(scores + j * ld + r), negatedTop));
      Vec::store(scores + j * ld + r, weight);
      total = Vec::add(total, weight);
    }
    Vec::store(sum + r, total);
    for (int64_t j = 0; j < keys; ++j)
      Vec::store(scores + j * ld + r, Vec::div(Vec::load(scores + j * ld + r), total));
  }
}

// The tail too through expVector, so that a value's exponential does not depend on where it
// falls in the range (a decode row's scores and a prompt tile's must agree bit for bit).
template <class Vec> void exponentiateWith(float *y, int64_t n) {
  constexpr int W = Vec::kWidth;
  int64_t i = 0;
  for (; i + W <= n; i += W)
    Vec::store(y + i, expVector<Vec>(Vec::load(y + i)));
  if (i < n) {
    float tail[W] = {};
    std::copy(y + i, y + n, tail);
    Vec::store(tail, expVector<Vec>(Vec::load(tail)));
    std::copy(tail, tail + (n - i), y + i);
  }
}

// The activations of the form x / (1 + e^(c f(x))) (SiLU, the GELUs' sigmoid forms) a vector
// at a time, with expVector (expApprox's steps), then activateTyped for the tail and the rest.
template <class Vec, Activation Kind> void activateVectorTyped(float *y, int64_t n) {
  using V = typename Vec::V;
  constexpr int W = Vec::kWidth;
  int64_t i = 0;
  if constexpr (Kind == Activation::Silu || Kind == Activation::GeluQuick ||
                Kind == Activation::GeluTanh) {
    const V one = Vec::broadcast(1.0f);
    for (; i + W <= n; i += W) {
      const V x = Vec::load(y + i);
      V argument;
      if constexpr (Kind == Activation::Silu)
        argument = Vec::mul(x, Vec::broadcast(-1.0f));
      else if constexpr (Kind == Activation::GeluQuick)
        argument = Vec::mul(x, Vec::broadcast(-1.702f));
      else  // -1.5957691216057308 (x + 0.044715 x^3), as activateTyped rounds it
        argument = Vec::mul(Vec::broadcast(-1.5957691216057308f),
                            Vec::add(x, Vec::mul(Vec::mul(Vec::mul(Vec::broadcast(0.044715f), x),
                                                          x),
                                                 x)));
      Vec::store(y + i, Vec::div(x, Vec::add(one, expVector<Vec>(argument))));
    }
  }
  activateTyped<Kind>(y + i, n - i);
}

template <class Vec> void activateVectorWith(Activation kind, float *y, int64_t n) {
  switch (kind) {
  case Activation::GeluTanh: return activateVectorTyped<Vec, Activation::GeluTanh>(y, n);
  case Activation::GeluQuick: return activateVectorTyped<Vec, Activation::GeluQuick>(y, n);
  case Activation::Silu: return activateVectorTyped<Vec, Activation::Silu>(y, n);
  default: return activateWith(kind, y, n);
  }
}

} // namespace
} // namespace dsrt::ops::fast::detail

#endif
