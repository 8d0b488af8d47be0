// Internal to dsrt_ops: C++ types for the runtime dtypes, and dispatch from a DType to
// templated code. f16 and bf16 are stored as bit patterns and computed in float; bool is a
// byte where any non-zero value reads as true.
#ifndef DSRT_OPS_TYPEDISPATCH_H
#define DSRT_OPS_TYPEDISPATCH_H

#include "core/Status.h"
#include "core/Tensor.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace dsrt::ops {

struct Float16 { uint16_t bits; };
struct BFloat16 { uint16_t bits; };
struct BoolByte { uint8_t byte; };

template <typename T> struct ComputeTypeOf { using type = T; };
template <> struct ComputeTypeOf<Float16> { using type = float; };
template <> struct ComputeTypeOf<BFloat16> { using type = float; };
template <> struct ComputeTypeOf<BoolByte> { using type = bool; };
// The type arithmetic happens in: float for the 16-bit floats, bool for bool, else T.
template <typename T> using ComputeType = typename ComputeTypeOf<T>::type;

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, Float16> ||
                          std::is_same_v<T, BFloat16>;
template <typename T> constexpr bool kIsBool = std::is_same_v<T, BoolByte>;
template <typename T> constexpr bool kIsInt = std::is_integral_v<T>;
template <typename T> constexpr bool kIsSigned = kIsFloat<T> || std::is_signed_v<T>;

template <typename T> inline ComputeType<T> load(T value) {
  if constexpr (std::is_same_v<T, Float16>)
    return halfToFloat(value.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bfloat16ToFloat(value.bits);
  else if constexpr (kIsBool<T>)
    return value.byte != 0;
  else
    return value;
}

template <typename T> inline T store(ComputeType<T> value) {
  if constexpr (std::is_same_v<T, Float16>)
    return Float16{floatToHalf(value)};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16{floatToBfloat16(value)};
  else if constexpr (kIsBool<T>)
    return BoolByte{static_cast<uint8_t>(value ? 1 : 0)};
  else
    return value;
}

// Float to integer: truncation toward zero, NaN to 0, saturating at the type's limits
// (C++ leaves out-of-range conversions undefined; ONNX leaves them unspecified).
template <typename I> inline I saturatingFloatToInt(double value) {
  if (std::isnan(value))
    return 0;
  constexpr double lowest = static_cast<double>(std::numeric_limits<I>::lowest());
  // 2^bits (or 2^(bits-1)) is exact in double, unlike the maximum itself.
  constexpr double limit = static_cast<double>(std::numeric_limits<I>::max() / 2 + 1) * 2.0;
  if (value <= lowest)
    return std::numeric_limits<I>::lowest();
  if (value >= limit)
    return std::numeric_limits<I>::max();
  return static_cast<I>(value);
}

// double to float rounding to odd: converting the result to f16 or bf16 (round to nearest
// even) then rounds exactly as a direct conversion would, which double -> float -> f16
// (two nearest-even roundings) does not always.
inline float roundToOddFloat(double value) {
  float rounded = static_cast<float>(value);
  if (std::isnan(value) || static_cast<double>(rounded) == value)
    return rounded;
  if (std::fabs(static_cast<double>(rounded)) > std::fabs(value))
    rounded = std::nextafter(rounded, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &rounded, sizeof bits);
  bits |= 1u;
  std::memcpy(&rounded, &bits, sizeof bits);
  return rounded;
}

// Converts one element between any two dtypes (Cast's semantics): integers wrap,
// floats to integers saturate, anything to bool is "not zero".
template <typename To, typename From> inline To convertElement(From from) {
  auto value = load(from);
  using V = decltype(value);
  if constexpr (kIsBool<To>) {
    return BoolByte{static_cast<uint8_t>(value != V(0) ? 1 : 0)};
  } else if constexpr (kIsFloat<To> && !std::is_floating_point_v<To> &&
                       !std::is_same_v<V, float>) {
    return store<To>(roundToOddFloat(static_cast<double>(value)));
  } else if constexpr (kIsFloat<To>) {
    return store<To>(static_cast<ComputeType<To>>(value));
  } else if constexpr (std::is_floating_point_v<V>) {
    return saturatingFloatToInt<To>(static_cast<double>(value));
  } else {
    return static_cast<To>(value);  // integer or bool to integer: modular
  }
}

// Calls `fn(T{})` with the storage type of `dtype`.
template <typename Fn> Status visitDType(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::F32: return fn(float{});
  case DType::F16: return fn(Float16{});
  case DType::BF16: return fn(BFloat16{});
  case DType::F64: return fn(double{});
  case DType::I64: return fn(int64_t{});
  case DType::I32: return fn(int32_t{});
  case DType::I16: return fn(int16_t{});
  case DType::I8: return fn(int8_t{});
  case DType::U8: return fn(uint8_t{});
  case DType::Bool: return fn(BoolByte{});
  case DType::U16: return fn(uint16_t{});
  case DType::U32: return fn(uint32_t{});
  case DType::U64: return fn(uint64_t{});
  case DType::Undefined: break;
  }
  return Status::error(std::string("no kernel for dtype ") + dtypeName(dtype));
}

// Calls `fn(T{})` with an unsigned integer type of `size` bytes: for kernels that only
// move elements around and need not know what they are.
template <typename Fn> void visitElementSize(size_t size, Fn &&fn) {
  switch (size) {
  case 1: fn(uint8_t{}); break;
  case 2: fn(uint16_t{}); break;
  case 4: fn(uint32_t{}); break;
  default: fn(uint64_t{}); break;
  }
}

// Wrapping integer arithmetic: signed overflow is undefined in C++, modular in ONNX
// runtimes.
template <typename T> inline T wrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <typename T> inline T wrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return a - b;
  }
}
template <typename T> inline T wrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Promote to at least unsigned int so that 16-bit operands do not multiply as int.
    using U = std::common_type_t<std::make_unsigned_t<T>, unsigned>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

} // namespace dsrt::ops

#endif
