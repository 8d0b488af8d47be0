// dsrt_core: element counts, shape strings, and the half/bfloat16 conversions.
#include "core/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace dsrt {
namespace {

TEST(Tensor, ElementCount) {
  EXPECT_EQ(elementCount({}), 1);
  EXPECT_EQ(elementCount({2, 3, 4}), 24);
  EXPECT_EQ(elementCount({2, -1}), -1);
  EXPECT_EQ(elementCount({int64_t(1) << 40, int64_t(1) << 40}), -1);  // overflows
  // A zero dimension makes the product 0 even when the others would overflow.
  EXPECT_EQ(elementCount({int64_t(1) << 40, int64_t(1) << 40, 0}), 0);
  EXPECT_EQ(shapeString({2, 3}), "[2, 3]");
  EXPECT_EQ(shapeString({}), "[]");
}

TEST(Tensor, DTypes) {
  EXPECT_EQ(dtypeSize(DType::BF16), 2u);
  EXPECT_EQ(dtypeSize(DType::Bool), 1u);
  EXPECT_EQ(dtypeSize(DType::Undefined), 0u);
  EXPECT_STREQ(dtypeName(DType::U64), "u64");
  EXPECT_TRUE(isFloat(DType::BF16));
  EXPECT_FALSE(isFloat(DType::I8));
  EXPECT_TRUE(isInteger(DType::U16));
  EXPECT_FALSE(isInteger(DType::Bool));
  OwnedTensor t(DType::F16, {2, 3});
  EXPECT_EQ(t.storage.size(), 12u);
}

TEST(Half, RoundTripsEveryFiniteValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    uint16_t h = static_cast<uint16_t>(bits);
    float f = halfToFloat(h);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(f))));
    else
      EXPECT_EQ(floatToHalf(f), h) << bits;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties go to even (1).
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between odd 1+2^-10 and even 1+2^-9: rounds up.
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // tie to even (2)
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  uint16_t nan = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(halfToFloat(0xc000), -2.0f);
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  float tie;  // 1 + 2^-8: halfway between 1 and 1 + 2^-7
  uint32_t bits = 0x3f808000;
  std::memcpy(&tie, &bits, 4);
  EXPECT_EQ(floatToBfloat16(tie), 0x3f80);
  bits = 0x3f818000;  // halfway between odd 0x3f81 and even 0x3f82
  std::memcpy(&tie, &bits, 4);
  EXPECT_EQ(floatToBfloat16(tie), 0x3f82);
  EXPECT_EQ(bfloat16ToFloat(0x4040), 3.0f);
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(std::nanf("")))));
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::max()), 0x7f80);  // to infinity
}

// convertFloats' bf16 loops (vectorised, AVX-512 where the CPU has it) equal the scalar
// conversions on every bf16 value and on f32 patterns around each rounding case: ties, NaNs
// (signalling ones too), infinities, the largest finite floats, subnormals. 1031 elements:
// the vector loops' tails run too.
TEST(BFloat16, ConvertFloatsEqualsTheScalarConversions) {
  std::vector<uint16_t> every(65536);
  for (uint32_t b = 0; b < 65536; ++b)
    every[b] = static_cast<uint16_t>(b);
  std::vector<float> wide(every.size());
  ASSERT_TRUE(convertFloats(DType::BF16, every.data(), DType::F32, wide.data(), 65536));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float want = bfloat16ToFloat(static_cast<uint16_t>(b));
    ASSERT_EQ(std::memcmp(&wide[b], &want, 4), 0) << "bf16 bits " << b;
  }
  std::vector<float> values;
  for (uint32_t high : {0x0000u, 0x0001u, 0x3f80u, 0x3f81u, 0x7f7fu, 0x7f80u, 0x7fc0u, 0x8000u,
                        0xbf80u, 0xff7fu, 0xff80u, 0xffc0u})
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      for (uint32_t nudge = 0; nudge < 14; ++nudge) {
        const uint32_t bits = (high << 16 | low) ^ (nudge << 4);
        float value;
        std::memcpy(&value, &bits, 4);
        values.push_back(value);
      }
  values.resize(1031, 0.5f);
  std::vector<uint16_t> narrow(values.size());
  ASSERT_TRUE(convertFloats(DType::F32, values.data(), DType::BF16, narrow.data(),
                            static_cast<int64_t>(values.size())));
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(narrow[i], floatToBfloat16(values[i])) << "element " << i;
}

// convertFloats' f16 loops (F16C, eight at a time, where the CPU has it) equal the scalar
// conversions bit for bit: every f16 value widened, and f32 values around every f16 rounding
// case narrowed (ties to even at each exponent, the subnormal range, overflow to infinity,
// NaNs, which take the scalar path). 4099 elements, so the tails run too.
TEST(Half, ConvertFloatsEqualsTheScalarConversions) {
  std::vector<uint16_t> every(65536);
  for (uint32_t b = 0; b < 65536; ++b)
    every[b] = static_cast<uint16_t>(b);
  std::vector<float> wide(every.size());
  ASSERT_TRUE(convertFloats(DType::F16, every.data(), DType::F32, wide.data(), 65536));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float want = halfToFloat(static_cast<uint16_t>(b));
    ASSERT_EQ(std::memcmp(&wide[b], &want, 4), 0) << "f16 bits " << b;
  }
  std::vector<float> values;
  // Each f32 exponent from below the f16 subnormals to above 65504, with mantissas at, just
  // below and just above the halfway points of f16's 10-bit mantissa.
  for (uint32_t exponent = 95; exponent <= 145; ++exponent)
    for (uint32_t mantissa : {0x000000u, 0x000fffu, 0x001000u, 0x001001u, 0x002000u, 0x003000u,
                              0x7fefffu, 0x7ff000u, 0x7fffffu, 0x400000u, 0x401000u})
      for (uint32_t sign : {0u, 0x80000000u}) {
        const uint32_t bits = sign | exponent << 23 | mantissa;
        float value;
        std::memcpy(&value, &bits, 4);
        values.push_back(value);
      }
  for (uint32_t bits : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc12345u,
                        0x477fe000u, 0x477ff000u, 0x47800000u, 0x00000001u})
    values.push_back([bits] {
      float value;
      std::memcpy(&value, &bits, 4);
      return value;
    }());
  values.resize(4099, -0.75f);
  std::vector<uint16_t> narrow(values.size());
  ASSERT_TRUE(convertFloats(DType::F32, values.data(), DType::F16, narrow.data(),
                            static_cast<int64_t>(values.size())));
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(narrow[i], floatToHalf(values[i])) << "element " << i;
}

} // namespace
} // namespace dsrt
