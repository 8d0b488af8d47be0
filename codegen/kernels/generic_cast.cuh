// Cast between f32, f16, bf16, i64, i32, u8 and bool over a contiguous tensor, with the host
// reference's rules (runtime/src/ops/TypeDispatch.h, convertElement): integers wrap,
// floats to integers truncate and saturate (NaN to 0), anything to bool is "not zero",
// f32 to f16/bf16 rounds to nearest even, and integers to f16/bf16 round through a
// round-to-odd float so that the result is the directly rounded one.
//
// Constants: FROM and TO, plan dtypes (1 f32, 2 f16, 3 bf16, 5 i64, 6 i32, 9 u8, 10 bool).
// The f16/bf16 conversions are written out bit by bit, as on the host, so that NaN
// payloads and subnormals come out identical.

static __device__ __forceinline__ float generic_cast_half_to_float(unsigned short bits) {
  unsigned sign = (unsigned)(bits & 0x8000u) << 16;
  unsigned exponent = (bits >> 10) & 0x1fu;
  unsigned mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float.
    float magnitude = (float)mantissa * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f)
    return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  return __uint_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

static __device__ __forceinline__ unsigned short generic_cast_float_to_half(float value) {
  unsigned bits = __float_as_uint(value);
  unsigned short sign = (unsigned short)((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits >= 0x47800000u)  // 65536 and above, infinities and NaNs
    return sign | (bits > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (bits < 0x38800000u) {  // below 2^-14: subnormal half or zero
    // Adding 0.5 places the half's subnormal mantissa at the bottom of the float's,
    // rounded to nearest even by the addition (__fadd_rn: never contracted or flushed).
    float shifted = __fadd_rn(__uint_as_float(bits), 0.5f);
    return sign | (unsigned short)(__float_as_uint(shifted) - 0x3f000000u);
  }
  unsigned mantissaOdd = (bits >> 13) & 1u;
  bits += 0xc8000fffu + mantissaOdd;  // rebias the exponent (-112 << 23) and round
  return sign | (unsigned short)(bits >> 13);
}

static __device__ __forceinline__ float generic_cast_bf16_to_float(unsigned short bits) {
  return __uint_as_float((unsigned)bits << 16);
}

static __device__ __forceinline__ unsigned short generic_cast_float_to_bf16(float value) {
  unsigned bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return (unsigned short)((bits >> 16) | 0x40u);  // keep NaN a (quiet) NaN
  unsigned rounding = 0x7fffu + ((bits >> 16) & 1u);
  return (unsigned short)((bits + rounding) >> 16);
}

// double to float rounding to odd: rounding that to f16/bf16 (nearest even) then gives the
// directly rounded result, which two nearest-even roundings do not always.
static __device__ __forceinline__ float generic_cast_round_to_odd(double value) {
  float rounded = __double2float_rn(value);
  if (value != value || (double)rounded == value)
    return rounded;
  if (fabs((double)rounded) > fabs(value))
    rounded = nextafterf(rounded, 0.0f);
  return __uint_as_float(__float_as_uint(rounded) | 1u);
}

#if FROM == 1
typedef float generic_cast_from_t;
typedef float generic_cast_value_t;
#define GENERIC_CAST_LOAD(x) (x)
#elif FROM == 2
typedef unsigned short generic_cast_from_t;
typedef float generic_cast_value_t;
#define GENERIC_CAST_LOAD(x) generic_cast_half_to_float(x)
#elif FROM == 3
typedef unsigned short generic_cast_from_t;
typedef float generic_cast_value_t;
#define GENERIC_CAST_LOAD(x) generic_cast_bf16_to_float(x)
#elif FROM == 5
typedef long long generic_cast_from_t;
typedef long long generic_cast_value_t;
#define GENERIC_CAST_LOAD(x) (x)
#elif FROM == 6
typedef int generic_cast_from_t;
typedef int generic_cast_value_t;
#define GENERIC_CAST_LOAD(x) (x)
#elif FROM == 9
typedef unsigned char generic_cast_from_t;
typedef unsigned char generic_cast_value_t;
#define GENERIC_CAST_LOAD(x) (x)
#elif FROM == 10
typedef unsigned char generic_cast_from_t;
typedef unsigned char generic_cast_value_t;
#define GENERIC_CAST_LOAD(x) ((unsigned char)((x) != 0 ? 1 : 0))
#else
#error "generic_cast: unsupported FROM"
#endif

#define GENERIC_CAST_FROM_FLOAT (FROM == 1 || FROM == 2 || FROM == 3)

#if TO == 1
typedef float generic_cast_to_t;
#elif TO == 2 || TO == 3
typedef unsigned short generic_cast_to_t;
#elif TO == 5
typedef long long generic_cast_to_t;
#elif TO == 6
typedef int generic_cast_to_t;
#elif TO == 9 || TO == 10
typedef unsigned char generic_cast_to_t;
#else
#error "generic_cast: unsupported TO"
#endif

#if (TO == 5 || TO == 6 || TO == 9) && GENERIC_CAST_FROM_FLOAT
// Truncation toward zero, NaN to 0, saturating at the limits; 2^bits (or 2^(bits-1)) is
// exact in double, unlike the maxima.
static __device__ __forceinline__ generic_cast_to_t generic_cast_saturate(double value) {
#if TO == 5
  const double lowest = -9223372036854775808.0, limit = 9223372036854775808.0;
  const generic_cast_to_t lowestValue = (-9223372036854775807LL - 1),
                          maxValue = 9223372036854775807LL;
#elif TO == 6
  const double lowest = -2147483648.0, limit = 2147483648.0;
  const generic_cast_to_t lowestValue = (-2147483647 - 1), maxValue = 2147483647;
#else
  const double lowest = 0.0, limit = 256.0;
  const generic_cast_to_t lowestValue = 0, maxValue = 255;
#endif
  if (value != value)
    return 0;
  if (value <= lowest)
    return lowestValue;
  if (value >= limit)
    return maxValue;
  return (generic_cast_to_t)value;
}
#endif

static __device__ __forceinline__ generic_cast_to_t generic_cast_convert(generic_cast_from_t raw) {
  generic_cast_value_t value = GENERIC_CAST_LOAD(raw);
#if TO == 10
  return value != 0 ? 1 : 0;
#elif TO == 1
#if FROM == 5
  return __ll2float_rn(value);
#else
  return (float)value;
#endif
#elif TO == 2 || TO == 3
#if GENERIC_CAST_FROM_FLOAT
  float narrow = value;
#elif FROM == 5
  float narrow = generic_cast_round_to_odd(__ll2double_rn(value));
#else
  float narrow = generic_cast_round_to_odd((double)value);
#endif
#if TO == 2
  return generic_cast_float_to_half(narrow);
#else
  return generic_cast_float_to_bf16(narrow);
#endif
#elif GENERIC_CAST_FROM_FLOAT
  return generic_cast_saturate((double)value);
#else
  // Integer or bool to integer: modular, as a C++ conversion to an unsigned type and the
  // two's complement narrowing the host relies on.
  return (generic_cast_to_t)value;
#endif
}

extern "C" __global__ void generic_cast(const generic_cast_from_t *input,
                                        generic_cast_to_t *output, long long count) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
    output[i] = generic_cast_convert(input[i]);
}
