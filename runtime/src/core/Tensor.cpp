#include "core/Tensor.h"

#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dsrt {

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F64: case DType::I64: case DType::U64: return 8;
  case DType::F32: case DType::I32: case DType::U32: return 4;
  case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
  case DType::I8: case DType::U8: case DType::Bool: return 1;
  case DType::Undefined: return 0;
  }
  return 0;
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32: return "f32";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::F64: return "f64";
  case DType::I64: return "i64";
  case DType::I32: return "i32";
  case DType::I16: return "i16";
  case DType::I8: return "i8";
  case DType::U8: return "u8";
  case DType::Bool: return "bool";
  case DType::U16: return "u16";
  case DType::U32: return "u32";
  case DType::U64: return "u64";
  case DType::Undefined: return "undefined";
  }
  return "undefined";
}

bool isFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 ||
         dtype == DType::F64;
}

bool isInteger(DType dtype) {
  switch (dtype) {
  case DType::I64: case DType::I32: case DType::I16: case DType::I8:
  case DType::U64: case DType::U32: case DType::U16: case DType::U8:
    return true;
  default:
    return false;
  }
}

int64_t elementCount(const Shape &shape) {
  // A zero dimension makes the product 0 however large the others are.
  bool hasZero = false;
  for (int64_t dim : shape) {
    if (dim < 0)
      return -1;
    hasZero |= dim == 0;
  }
  if (hasZero)
    return 0;
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (count > std::numeric_limits<int64_t>::max() / dim)
      return -1;
    count *= dim;
  }
  return count;
}

std::string shapeString(const Shape &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

OwnedTensor::OwnedTensor(DType dtype, Shape shape) : dtype(dtype), shape(std::move(shape)) {
  int64_t count = elementCount(this->shape);
  storage.assign(count > 0 ? static_cast<size_t>(count) * dtypeSize(dtype) : 0, 0);
}

static uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

static float bitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

float halfToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float.
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f)
    return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Round to nearest even, overflow to infinity, NaN stays NaN (quiet). The subnormal path
// lets the FPU do the rounding: adding 0.5 places the half's subnormal mantissa at the
// bottom of the float's, rounded by the (default, nearest-even) rounding mode.
uint16_t floatToHalf(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits >= 0x47800000u)  // 65536 and above, infinities and NaNs
    return sign | (bits > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (bits < 0x38800000u) {  // below 2^-14: subnormal half or zero
    float shifted = bitsToFloat(bits) + 0.5f;
    return sign | static_cast<uint16_t>(floatBits(shifted) - 0x3f000000u);
  }
  uint32_t mantissaOdd = (bits >> 13) & 1u;
  bits += 0xc8000fffu + mantissaOdd;  // rebias the exponent (-112 << 23) and round
  return sign | static_cast<uint16_t>(bits >> 13);
}

float bfloat16ToFloat(uint16_t bits) { return bitsToFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t floatToBfloat16(float value) {
  uint32_t bits = floatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // keep NaN a (quiet) NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

namespace {

// bf16 <-> f32 as floatToBfloat16 and bfloat16ToFloat compute them, in loops without branches
// that the compiler vectorises: built for the baseline and for AVX-512, the widest chosen at
// run time. A bf16 plan converts every activation that meets an f32 kernel this way (a tenth
// of a 1024-token prefill went to the per-element loop below).
#define DSRT_BF16_LOOPS(SUFFIX, ATTRIBUTE)                                                      \
  ATTRIBUTE void bf16ToF32##SUFFIX(const uint16_t *in, float *out, int64_t count) {           \
    for (int64_t i = 0; i < count; ++i) {                                                      \
      const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;                                \
      std::memcpy(out + i, &bits, 4);                                                          \
    }                                                                                          \
  }                                                                                            \
  ATTRIBUTE void f32ToBf16##SUFFIX(const float *in, uint16_t *out, int64_t count) {            \
    for (int64_t i = 0; i < count; ++i) {                                                      \
      uint32_t bits;                                                                           \
      std::memcpy(&bits, in + i, 4);                                                           \
      const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;                   \
      const uint32_t quiet = (bits >> 16) | 0x40u;                                             \
      out[i] = static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);    \
    }                                                                                          \
  }
DSRT_BF16_LOOPS(Baseline, )
DSRT_BF16_LOOPS(Avx512, __attribute__((target("avx512f,avx512bw"))))
#undef DSRT_BF16_LOOPS

#if defined(__x86_64__)
// f16 <-> f32 with F16C, eight at a time: the serving engine writes every new key and value to
// an f16 cache and reads f16 logits through here, and halfToFloat / floatToHalf one element at
// a time cost a twentieth of an int8 GPT-2 engine's time. The instructions round to nearest
// even and keep subnormals, as the scalar functions do; a chunk holding a NaN takes the scalar
// path, so a NaN's bits are the scalar functions' too.
__attribute__((target("avx,f16c"))) void f16ToF32F16c(const uint16_t *in, float *out,
                                                      int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i *>(in + i));
    const __m256 values = _mm256_cvtph_ps(halves);
    if (_mm256_movemask_ps(_mm256_cmp_ps(values, values, _CMP_UNORD_Q)))
      for (int j = 0; j < 8; ++j)
        out[i + j] = halfToFloat(in[i + j]);
    else
      _mm256_storeu_ps(out + i, values);
  }
  for (; i < count; ++i)
    out[i] = halfToFloat(in[i]);
}

__attribute__((target("avx,f16c"))) void f32ToF16F16c(const float *in, uint16_t *out,
                                                      int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 values = _mm256_loadu_ps(in + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(values, values, _CMP_UNORD_Q)))
      for (int j = 0; j < 8; ++j)
        out[i + j] = floatToHalf(in[i + j]);
    else
      _mm_storeu_si128(reinterpret_cast<__m128i *>(out + i),
                       _mm256_cvtps_ph(values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < count; ++i)
    out[i] = floatToHalf(in[i]);
}

bool f16cConversions() {
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  }();
  return available;
}
#else
bool f16cConversions() { return false; }
void f16ToF32F16c(const uint16_t *, float *, int64_t) {}
void f32ToF16F16c(const float *, uint16_t *, int64_t) {}
#endif

bool avx512Conversions() {
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }();
  return available;
}

} // namespace

bool convertFloats(DType from, const void *source, DType to, void *destination, int64_t count) {
  auto narrowOrSingle = [](DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; };
  if (!narrowOrSingle(from) || !narrowOrSingle(to))
    return false;
  // A copy: the loop below converted each value on its own (the serving engine reads every
  // sampled row of f32 logits through here: 4% of a decode-heavy GPT-2 run's samples).
  if (from == to) {
    if (count > 0)
      std::memmove(destination, source, static_cast<size_t>(count) * dtypeSize(from));
    return true;
  }
  if (from == DType::BF16 && to == DType::F32) {
    (avx512Conversions() ? bf16ToF32Avx512 : bf16ToF32Baseline)(
        static_cast<const uint16_t *>(source), static_cast<float *>(destination), count);
    return true;
  }
  if (from == DType::F32 && to == DType::BF16) {
    (avx512Conversions() ? f32ToBf16Avx512 : f32ToBf16Baseline)(
        static_cast<const float *>(source), static_cast<uint16_t *>(destination), count);
    return true;
  }
  if (from == DType::F16 && to == DType::F32 && f16cConversions()) {
    f16ToF32F16c(static_cast<const uint16_t *>(source), static_cast<float *>(destination), count);
    return true;
  }
  if (from == DType::F32 && to == DType::F16 && f16cConversions()) {
    f32ToF16F16c(static_cast<const float *>(source), static_cast<uint16_t *>(destination), count);
    return true;
  }
  const uint8_t *in = static_cast<const uint8_t *>(source);
  uint8_t *out = static_cast<uint8_t *>(destination);
  size_t inWidth = dtypeSize(from), outWidth = dtypeSize(to);
  for (int64_t i = 0; i < count; ++i) {
    float value;
    uint16_t bits;
    if (from == DType::F32) {
      std::memcpy(&value, in + i * inWidth, 4);
    } else {
      std::memcpy(&bits, in + i * inWidth, 2);
      value = from == DType::F16 ? halfToFloat(bits) : bfloat16ToFloat(bits);
    }
    if (to == DType::F32) {
      std::memcpy(out + i * outWidth, &value, 4);
    } else {
      bits = to == DType::F16 ? floatToHalf(value) : floatToBfloat16(value);
      std::memcpy(out + i * outWidth, &bits, 2);
    }
  }
  return true;
}

uint64_t exactIntegerLimit(DType dtype) {
  switch (dtype) {
  case DType::Bool: return 1;
  case DType::I8: return INT8_MAX;
  case DType::U8: return UINT8_MAX;
  case DType::I16: return INT16_MAX;
  case DType::U16: return UINT16_MAX;
  case DType::I32: return INT32_MAX;
  case DType::U32: return UINT32_MAX;
  case DType::I64: return INT64_MAX;
  case DType::U64: return UINT64_MAX;
  // Their significands' widths, the implicit bit included.
  case DType::BF16: return uint64_t(1) << 8;
  case DType::F16: return uint64_t(1) << 11;
  case DType::F32: return uint64_t(1) << 24;
  case DType::F64: return uint64_t(1) << 53;
  default: return 0;
  }
}

size_t encodeExactIntegers(const int64_t *values, size_t count, DType dtype, void *destination) {
  const uint64_t limit = exactIntegerLimit(dtype);
  if (limit == 0)
    return 0;
  const bool unsignedOrBool = dtype == DType::Bool || dtype == DType::U8 ||
                              dtype == DType::U16 || dtype == DType::U32 || dtype == DType::U64;
  for (size_t i = 0; i < count; ++i) {
    int64_t value = values[i];
    uint64_t magnitude = value < 0 ? uint64_t(0) - static_cast<uint64_t>(value)
                                   : static_cast<uint64_t>(value);
    // Signed integers reach one further below zero than above it.
    const uint64_t bound = value < 0 && isInteger(dtype) ? limit + 1 : limit;
    if ((value < 0 && unsignedOrBool) || magnitude > bound)
      return i;
  }
  uint8_t *out = static_cast<uint8_t *>(destination);
  const size_t width = dtypeSize(dtype);
  for (size_t i = 0; i < count; ++i) {
    int64_t value = values[i];
    uint8_t *at = out + i * width;
    auto put = [&](auto typed) { std::memcpy(at, &typed, sizeof typed); };
    switch (dtype) {
    case DType::Bool: case DType::U8: put(static_cast<uint8_t>(value)); break;
    case DType::I8: put(static_cast<int8_t>(value)); break;
    case DType::I16: put(static_cast<int16_t>(value)); break;
    case DType::U16: put(static_cast<uint16_t>(value)); break;
    case DType::I32: put(static_cast<int32_t>(value)); break;
    case DType::U32: put(static_cast<uint32_t>(value)); break;
    case DType::I64: put(value); break;
    case DType::U64: put(static_cast<uint64_t>(value)); break;
    case DType::F64: put(static_cast<double>(value)); break;
    case DType::F32: put(static_cast<float>(value)); break;
    case DType::F16: put(floatToHalf(static_cast<float>(value))); break;
    case DType::BF16: put(floatToBfloat16(static_cast<float>(value))); break;
    default: break;
    }
  }
  return count;
}

} // namespace dsrt
