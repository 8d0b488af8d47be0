// Unary elementwise ops of the generic path over a contiguous tensor, matching the host
// reference (runtime/src/ops/Elementwise.cpp): floats compute in f32 with the correctly
// rounded or few-ulp CUDA math functions, integers wrap, Not and IsNaN produce bool bytes.
//
// Constants (GenericRules.cpp sets them): OP, one of the GENERIC_UNARY_* codes below; DT,
// the input's plan dtype (1 f32, 5 i64, 6 i32, 10 bool). The output has the input's dtype,
// except IsNaN's (bool).
#define GENERIC_UNARY_NEG 1
#define GENERIC_UNARY_ABS 2
#define GENERIC_UNARY_EXP 3
#define GENERIC_UNARY_LOG 4
#define GENERIC_UNARY_SQRT 5
#define GENERIC_UNARY_RECIPROCAL 6
#define GENERIC_UNARY_TANH 7
#define GENERIC_UNARY_ERF 8
#define GENERIC_UNARY_SIGMOID 9
#define GENERIC_UNARY_RELU 10
#define GENERIC_UNARY_SIN 11
#define GENERIC_UNARY_COS 12
#define GENERIC_UNARY_FLOOR 13
#define GENERIC_UNARY_NOT 14
#define GENERIC_UNARY_ISNAN 15
#define GENERIC_UNARY_GELU_ERF 16
#define GENERIC_UNARY_GELU_TANH 17

#if DT == 1
typedef float generic_unary_t;
#elif DT == 5
typedef long long generic_unary_t;
typedef unsigned long long generic_unary_unsigned_t;
#elif DT == 6
typedef int generic_unary_t;
typedef unsigned int generic_unary_unsigned_t;
#elif DT == 10
typedef unsigned char generic_unary_t;
#else
#error "generic_unary: unsupported DT"
#endif

#if OP == GENERIC_UNARY_ISNAN
typedef unsigned char generic_unary_out_t;
#else
typedef generic_unary_t generic_unary_out_t;
#endif

static __device__ __forceinline__ generic_unary_out_t generic_unary_apply(generic_unary_t v) {
#if DT == 10
#if OP == GENERIC_UNARY_NOT
  return v != 0 ? 0 : 1;
#else
#error "generic_unary: bool supports Not only"
#endif
#elif DT == 5 || DT == 6
  // Two's complement negation through the unsigned type: INT_MIN stays INT_MIN, as the
  // host's wrapSub(0, v) does, without signed overflow.
#if OP == GENERIC_UNARY_NEG
  return (generic_unary_t)((generic_unary_unsigned_t)0 - (generic_unary_unsigned_t)v);
#elif OP == GENERIC_UNARY_ABS
  return v < 0 ? (generic_unary_t)((generic_unary_unsigned_t)0 - (generic_unary_unsigned_t)v)
               : v;
#elif OP == GENERIC_UNARY_RELU
  return v < 0 ? 0 : v;
#else
#error "generic_unary: integers support Neg, Abs and Relu only"
#endif
#else  // f32
#if OP == GENERIC_UNARY_NEG
  // 0 - v, as the host computes it: -(+0) is +0 there, not -0.
  return 0.0f - v;
#elif OP == GENERIC_UNARY_ABS
  return fabsf(v);
#elif OP == GENERIC_UNARY_EXP
  return expf(v);
#elif OP == GENERIC_UNARY_LOG
  return logf(v);
#elif OP == GENERIC_UNARY_SQRT
  return sqrtf(v);
#elif OP == GENERIC_UNARY_RECIPROCAL
  return 1.0f / v;
#elif OP == GENERIC_UNARY_TANH
  return tanhf(v);
#elif OP == GENERIC_UNARY_ERF
  return erff(v);
#elif OP == GENERIC_UNARY_SIGMOID
  // Split by sign as the host does, so that exp never overflows into inf / inf.
  if (v >= 0.0f)
    return 1.0f / (1.0f + expf(-v));
  float e = expf(v);
  return e / (1.0f + e);
#elif OP == GENERIC_UNARY_RELU
  // NaN < 0 is false: NaN passes through, as on the host.
  return v < 0.0f ? 0.0f : v;
#elif OP == GENERIC_UNARY_SIN
  return sinf(v);
#elif OP == GENERIC_UNARY_COS
  return cosf(v);
#elif OP == GENERIC_UNARY_FLOOR
  return floorf(v);
#elif OP == GENERIC_UNARY_ISNAN
  return v != v ? 1 : 0;
#elif OP == GENERIC_UNARY_GELU_ERF
  return 0.5f * v * (1.0f + erff(v / 1.4142135623730951f));
#elif OP == GENERIC_UNARY_GELU_TANH
  float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
  return 0.5f * v * (1.0f + tanhf(inner));
#else
#error "generic_unary: unknown OP for f32"
#endif
#endif
}

extern "C" __global__ void generic_unary(const generic_unary_t *input,
                                         generic_unary_out_t *output, long long count) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
    output[i] = generic_unary_apply(input[i]);
}
