// Binary elementwise ops of the generic path with numpy broadcasting, matching the host
// reference (runtime/src/ops/Binary.cpp): integers wrap, Max and Min let NaN win, Mod
// follows the sign of the divisor unless FMOD, comparisons and logic produce bool bytes.
//
// Constants (GenericRules.cpp sets them): OP, one of the GENERIC_BINARY_* codes below; DT,
// the plan dtype of A (and of B, except for Pow); DT_B, the plan dtype of B; RANK (0..6),
// the output's rank; FMOD, Mod's attribute. Dtypes: 1 f32, 5 i64, 6 i32, 10 bool.
//
// The launcher passes the output's dims and each input's strides in elements, right
// aligned to the output (0 along broadcast dimensions); entries [0, RANK) are used, and
// `count` must be the product of dims[0, RANK).
#define GENERIC_BINARY_ADD 1
#define GENERIC_BINARY_SUB 2
#define GENERIC_BINARY_MUL 3
#define GENERIC_BINARY_DIV 4
#define GENERIC_BINARY_POW 5
#define GENERIC_BINARY_MOD 6
#define GENERIC_BINARY_MAX 7
#define GENERIC_BINARY_MIN 8
#define GENERIC_BINARY_EQUAL 9
#define GENERIC_BINARY_LESS 10
#define GENERIC_BINARY_LESS_OR_EQUAL 11
#define GENERIC_BINARY_GREATER 12
#define GENERIC_BINARY_GREATER_OR_EQUAL 13
#define GENERIC_BINARY_AND 14
#define GENERIC_BINARY_OR 15

#if RANK < 0 || RANK > 6
#error "generic_binary: RANK must be in [0, 6]"
#endif

#if DT == 1
typedef float generic_binary_a_t;
#elif DT == 5
typedef long long generic_binary_a_t;
typedef unsigned long long generic_binary_unsigned_t;
#elif DT == 6
typedef int generic_binary_a_t;
typedef unsigned int generic_binary_unsigned_t;
#elif DT == 10
typedef unsigned char generic_binary_a_t;
#else
#error "generic_binary: unsupported DT"
#endif

#if DT_B == 1
typedef float generic_binary_b_t;
#elif DT_B == 5
typedef long long generic_binary_b_t;
#elif DT_B == 6
typedef int generic_binary_b_t;
#elif DT_B == 10
typedef unsigned char generic_binary_b_t;
#else
#error "generic_binary: unsupported DT_B"
#endif

#if OP != GENERIC_BINARY_POW && DT != DT_B
#error "generic_binary: only Pow takes two dtypes"
#endif

#if OP >= GENERIC_BINARY_EQUAL
typedef unsigned char generic_binary_out_t;
#else
typedef generic_binary_a_t generic_binary_out_t;
#endif

struct GenericBinaryShape {
  long long dims[6];
  long long stridesA[6];
  long long stridesB[6];
};

#if OP == GENERIC_BINARY_POW
#if (DT == 5 || DT == 6) && (DT_B == 5 || DT_B == 6)
// Repeated squaring with wrapping products, as the host's integerPower.
static __device__ generic_binary_out_t generic_binary_integer_power(generic_binary_a_t base,
                                                                    long long exponent) {
  if (exponent < 0) {
    // Only 1 and -1 have integral reciprocal powers; the rest truncate to 0.
    if (base == 1)
      return 1;
    if (base == -1)
      return (exponent & 1) ? -1 : 1;
    return 0;
  }
  generic_binary_unsigned_t result = 1, factor = (generic_binary_unsigned_t)base;
  for (; exponent; exponent >>= 1) {
    if (exponent & 1)
      result *= factor;
    factor *= factor;
  }
  return (generic_binary_out_t)result;
}
#elif DT == 5 || DT == 6
// Truncation toward zero saturating at the limits, NaN to 0 (the host's
// saturatingFloatToInt); 2^31 and 2^63 are exact in double, the maxima are not.
static __device__ generic_binary_out_t generic_binary_saturate(double value) {
#if DT == 5
  const double lowest = -9223372036854775808.0, limit = 9223372036854775808.0;
  const long long lowestValue = (-9223372036854775807LL - 1), maxValue = 9223372036854775807LL;
#else
  const double lowest = -2147483648.0, limit = 2147483648.0;
  const int lowestValue = (-2147483647 - 1), maxValue = 2147483647;
#endif
  if (value != value)
    return 0;
  if (value <= lowest)
    return lowestValue;
  if (value >= limit)
    return maxValue;
  return (generic_binary_out_t)value;
}
#endif
#endif

static __device__ __forceinline__ generic_binary_out_t
generic_binary_apply(generic_binary_a_t x, generic_binary_b_t y) {
#if OP == GENERIC_BINARY_POW
#if DT == 10 || DT_B == 10
#error "generic_binary: Pow has no bool kernel"
#elif (DT == 5 || DT == 6) && (DT_B == 5 || DT_B == 6)
  return generic_binary_integer_power(x, (long long)y);
#elif DT == 5 || DT == 6
  return generic_binary_saturate(pow((double)x, (double)y));
#else
  return (float)pow((double)x, (double)y);
#endif
#elif OP == GENERIC_BINARY_EQUAL
#if DT == 10
  return (x != 0) == (y != 0) ? 1 : 0;
#else
  return x == y ? 1 : 0;
#endif
#elif OP == GENERIC_BINARY_AND || OP == GENERIC_BINARY_OR
#if DT != 10
#error "generic_binary: And and Or take bool"
#endif
#if OP == GENERIC_BINARY_AND
  return (x != 0 && y != 0) ? 1 : 0;
#else
  return (x != 0 || y != 0) ? 1 : 0;
#endif
#elif DT == 10
#error "generic_binary: bool supports Equal, And and Or only"
#elif OP == GENERIC_BINARY_LESS
  return x < y ? 1 : 0;
#elif OP == GENERIC_BINARY_LESS_OR_EQUAL
  return x <= y ? 1 : 0;
#elif OP == GENERIC_BINARY_GREATER
  return x > y ? 1 : 0;
#elif OP == GENERIC_BINARY_GREATER_OR_EQUAL
  return x >= y ? 1 : 0;
#elif OP == GENERIC_BINARY_MAX || OP == GENERIC_BINARY_MIN
#if DT == 1
  // numpy's maximum/minimum: a NaN operand wins (x first).
  if (x != x)
    return x;
  if (y != y)
    return y;
#endif
#if OP == GENERIC_BINARY_MAX
  return x < y ? y : x;
#else
  return y < x ? y : x;
#endif
#elif DT == 5 || DT == 6
#if OP == GENERIC_BINARY_ADD
  return (generic_binary_out_t)((generic_binary_unsigned_t)x + (generic_binary_unsigned_t)y);
#elif OP == GENERIC_BINARY_SUB
  return (generic_binary_out_t)((generic_binary_unsigned_t)x - (generic_binary_unsigned_t)y);
#elif OP == GENERIC_BINARY_MUL
  return (generic_binary_out_t)((generic_binary_unsigned_t)x * (generic_binary_unsigned_t)y);
#else
  // Integer Div and Mod must report a zero divisor; the host reference runs them.
#error "generic_binary: integer Div and Mod are not generated"
#endif
#else  // f32
#if OP == GENERIC_BINARY_ADD
  return x + y;
#elif OP == GENERIC_BINARY_SUB
  return x - y;
#elif OP == GENERIC_BINARY_MUL
  return x * y;
#elif OP == GENERIC_BINARY_DIV
  return x / y;
#elif OP == GENERIC_BINARY_MOD
  float r = fmodf(x, y);
#if !FMOD
  // Python's %: the sign of the divisor, and a zero takes the divisor's sign.
  if (r != 0.0f && ((r < 0.0f) != (y < 0.0f)))
    r += y;
  else if (r == 0.0f)
    r = copysignf(0.0f, y);
#endif
  return r;
#else
#error "generic_binary: unknown OP"
#endif
#endif
}

extern "C" __global__ void generic_binary(const generic_binary_a_t *a,
                                          const generic_binary_b_t *b,
                                          generic_binary_out_t *output,
                                          GenericBinaryShape shape, long long count) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    long long rest = i, offsetA = 0, offsetB = 0;
#pragma unroll
    for (int d = RANK - 1; d > 0; --d) {
      long long coordinate = rest % shape.dims[d];
      rest /= shape.dims[d];
      offsetA += coordinate * shape.stridesA[d];
      offsetB += coordinate * shape.stridesB[d];
    }
#if RANK > 0
    // i < count = the product of the dims, so what is left is the outermost coordinate.
    offsetA += rest * shape.stridesA[0];
    offsetB += rest * shape.stridesB[0];
#endif
    output[i] = generic_binary_apply(a[offsetA], b[offsetB]);
  }
}
