// Which MatMulNBits codings the plan's int8 layout keeps byte for byte (code - zero point),
// as NBitsCoding::keepsInt8Codes decides from the codes themselves for 8 bits.
#include "frontends/onnx/NBitsWeights.h"
#include "frontends/onnx/WeightStore.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

using dsc::onnx_frontend::NBitsCoding;
using dsc::onnx_frontend::WeightRecord;
// onnx::TensorProto::DataType's values (the onnx headers are the frontend's own).
namespace TensorProto {
constexpr int32_t FLOAT = 1, UINT8 = 2;
}

// An 8-bit coding of n rows of k inputs in blocks of `block`, over `codes` ([n, blocks,
// block]) and, when given, one uint8 zero point per (row, block).
struct EightBits {
  std::vector<uint8_t> codeBytes, zeroBytes;
  std::vector<float> scaleValues;
  WeightRecord codes, scales, zeros;
  NBitsCoding coding;

  EightBits(int64_t n, int64_t k, int64_t block, std::vector<uint8_t> codeValues,
            std::vector<uint8_t> zeroValues = {})
      : codeBytes(std::move(codeValues)), zeroBytes(std::move(zeroValues)) {
    coding.bits = 8;
    coding.blockSize = block;
    coding.k = k;
    coding.n = n;
    const int64_t blocks = coding.blocks();
    codes.onnxType = TensorProto::UINT8;
    codes.dims = {n, blocks, block};
    codes.bytes = codeBytes;
    scaleValues.assign(static_cast<size_t>(n * blocks), 0.5f);
    scales.onnxType = TensorProto::FLOAT;
    scales.dims = {n * blocks};
    scales.bytes = {reinterpret_cast<const uint8_t *>(scaleValues.data()),
                    scaleValues.size() * sizeof(float)};
    coding.codes = &codes;
    coding.scales = &scales;
    if (!zeroBytes.empty()) {
      zeros.onnxType = TensorProto::UINT8;
      zeros.dims = {n, blocks};
      zeros.bytes = zeroBytes;
      coding.zeroPoints = &zeros;
    }
    EXPECT_EQ(dsc::onnx_frontend::checkNBitsCoding(coding), "");
  }
};

TEST(NBitsCodingTest, EightBitsWithTheDefaultZeroPointAlwaysFit) {
  // code - 128 spans [-128, 127] exactly: 0 and 255 are the ends.
  EightBits w(2, 4, 4, {0, 255, 128, 1, 254, 127, 3, 200});
  EXPECT_TRUE(w.coding.keepsInt8Codes());
  std::vector<int8_t> kept(8);
  dsc::onnx_frontend::nbitsInt8Codes(w.coding, kept.data());
  EXPECT_EQ(kept, (std::vector<int8_t>{-128, 127, 0, -127, 126, -1, -125, 72}));
}

TEST(NBitsCodingTest, EightBitsFitOnlyWhereEveryBlockStaysInInt8) {
  // Row 1's block against zero point 100: 228 - 100 = 128, one past int8.
  EightBits beyond(2, 4, 4, {10, 20, 30, 40, 100, 228, 101, 99}, {20, 100});
  EXPECT_FALSE(beyond.coding.keepsInt8Codes());
  // The same with 227: every code - zero point in [-128, 127].
  EightBits inside(2, 4, 4, {10, 20, 30, 40, 100, 227, 101, 99}, {20, 100});
  EXPECT_TRUE(inside.coding.keepsInt8Codes());
  // The low end: 0 - 128 fits, 0 - 129 does not.
  EightBits low(1, 4, 4, {0, 1, 2, 3}, {128});
  EXPECT_TRUE(low.coding.keepsInt8Codes());
  EightBits below(1, 4, 4, {0, 1, 2, 3}, {129});
  EXPECT_FALSE(below.coding.keepsInt8Codes());
}

TEST(NBitsCodingTest, EightBitsInBlocksThatDoNotDivideTheInputsAreNotKept) {
  // k = 6 in blocks of 4: the last block is padded, which int8 groups cannot be.
  EightBits padded(1, 6, 4, {128, 128, 128, 128, 128, 128, 0, 0});
  EXPECT_FALSE(padded.coding.keepsInt8Codes());
}

TEST(NBitsCodingTest, FourBitsKeepInt8CodesOnlyWithTheirZeroPoints) {
  // 4-bit codes without zero points are int4's (keepsCodes), not int8's.
  std::vector<uint8_t> packed = {0x21, 0x43};
  std::vector<float> scale = {1.0f};
  WeightRecord codes, scales;
  codes.onnxType = TensorProto::UINT8;
  codes.dims = {1, 1, 2};
  codes.bytes = packed;
  scales.onnxType = TensorProto::FLOAT;
  scales.dims = {1};
  scales.bytes = {reinterpret_cast<const uint8_t *>(scale.data()), sizeof(float)};
  NBitsCoding coding;
  coding.bits = 4;
  coding.blockSize = 4;
  coding.k = 4;
  coding.n = 1;
  coding.codes = &codes;
  coding.scales = &scales;
  ASSERT_EQ(dsc::onnx_frontend::checkNBitsCoding(coding), "");
  EXPECT_TRUE(coding.keepsCodes());
  EXPECT_FALSE(coding.keepsInt8Codes());
}

} // namespace
