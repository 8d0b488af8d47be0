#include "frontends/onnx/NBitsWeights.h"

#include "frontends/onnx/WeightStore.h"

#include "core/Tensor.h"

#include "onnx/onnx_pb.h"

#include <algorithm>
#include <cstring>

namespace dsc::onnx_frontend {

using ::onnx::TensorProto;

namespace {

dsrt::DType floatDType(int32_t onnxType) {
  switch (onnxType) {
  case TensorProto::FLOAT: return dsrt::DType::F32;
  case TensorProto::FLOAT16: return dsrt::DType::F16;
  case TensorProto::BFLOAT16: return dsrt::DType::BF16;
  default: return dsrt::DType::Undefined;
  }
}

int64_t elements(const WeightRecord &record) {
  int64_t count = 1;
  for (int64_t dim : record.dims)
    count *= dim;
  return count;
}

std::vector<float> widened(const WeightRecord &record) {
  std::vector<float> values(static_cast<size_t>(elements(record)));
  dsrt::convertFloats(floatDType(record.onnxType), record.bytes.data(), dsrt::DType::F32,
                      values.data(), static_cast<int64_t>(values.size()));
  return values;
}

// The `bits`-bit field `index` of a little-endian packed run (bits divides 8).
unsigned field(const uint8_t *packed, int64_t index, int64_t bits) {
  const int64_t bit = index * bits;
  return (packed[bit / 8] >> (bit % 8)) & ((1u << bits) - 1);
}

int64_t blobBytes(const NBitsCoding &c) { return c.blockSize * c.bits / 8; }

// The zero point of row `row`, block `block`, as a float.
struct ZeroPoints {
  const NBitsCoding &c;
  std::vector<float> floats;
  int64_t packedRow = 0;
  explicit ZeroPoints(const NBitsCoding &coding) : c(coding) {
    if (c.zeroPoints && c.zeroPoints->onnxType != TensorProto::UINT8)
      floats = widened(*c.zeroPoints);
    packedRow = (c.blocks() * c.bits + 7) / 8;
  }
  float at(int64_t row, int64_t block) const {
    if (!c.zeroPoints)
      return static_cast<float>(1u << (c.bits - 1));
    if (!floats.empty())
      return floats[static_cast<size_t>(row * c.blocks() + block)];
    return static_cast<float>(field(c.zeroPoints->bytes.data() + row * packedRow, block, c.bits));
  }
};

} // namespace

std::string checkNBitsCoding(const NBitsCoding &c) {
  auto dims = [](const WeightRecord &record) {
    std::string text = "[";
    for (size_t i = 0; i < record.dims.size(); ++i)
      text += (i ? ", " : "") + std::to_string(record.dims[i]);
    return text + "]";
  };
  if (c.bits != 2 && c.bits != 4 && c.bits != 8)
    return "bits is " + std::to_string(c.bits) + "; dsc reads 2, 4 and 8";
  // Bounds that keep every count below (each at most 2^32 elements) far from overflowing.
  constexpr int64_t kLimit = int64_t(1) << 32;
  if (c.k <= 0 || c.n <= 0 || c.k > kLimit / c.n)
    return "K and N must be positive, with K x N at most 2^32, not " + std::to_string(c.k) +
           " and " + std::to_string(c.n);
  if (c.blockSize < 2 || c.blockSize > (int64_t(1) << 20))
    return "block_size " + std::to_string(c.blockSize) + " is not between 2 and 2^20";
  if (c.blockSize * c.bits % 8 != 0)
    return "block_size " + std::to_string(c.blockSize) + " does not fill whole bytes at " +
           std::to_string(c.bits) + " bits";
  if (!c.codes || !c.scales)
    return "B and scales must be initializers";
  const int64_t blocks = c.blocks();
  if (c.codes->onnxType != TensorProto::UINT8 ||
      elements(*c.codes) != c.n * blocks * blobBytes(c))
    return "B " + dims(*c.codes) + " does not hold N x ceil(K / block_size) x block bytes = " +
           std::to_string(c.n) + " x " + std::to_string(blocks) + " x " +
           std::to_string(blobBytes(c)) + " uint8";
  if (floatDType(c.scales->onnxType) == dsrt::DType::Undefined ||
      elements(*c.scales) != c.n * blocks)
    return "scales " + dims(*c.scales) + " are not N x ceil(K / block_size) = " +
           std::to_string(c.n * blocks) + " floats";
  if (c.zeroPoints) {
    const bool packed = c.zeroPoints->onnxType == TensorProto::UINT8;
    const int64_t expected = packed ? c.n * ((blocks * c.bits + 7) / 8) : c.n * blocks;
    if ((!packed && floatDType(c.zeroPoints->onnxType) == dsrt::DType::Undefined) ||
        elements(*c.zeroPoints) != expected)
      return "zero_points " + dims(*c.zeroPoints) + " are neither packed uint8 N x " +
             std::to_string((blocks * c.bits + 7) / 8) + " nor N x " + std::to_string(blocks) +
             " floats";
  }
  if (c.groupIndex) {
    // onnxruntime reads the default zero point wherever g_idx is given, whatever
    // zero_points holds; dsc refuses the pair rather than guess.
    if (c.zeroPoints)
      return "g_idx with zero_points is not supported (onnxruntime then ignores the zero "
             "points)";
    if (c.groupIndex->onnxType != TensorProto::INT32 || elements(*c.groupIndex) != c.k)
      return "g_idx " + dims(*c.groupIndex) + " is not K = " + std::to_string(c.k) + " int32";
    const auto *index = reinterpret_cast<const int32_t *>(c.groupIndex->bytes.data());
    for (int64_t i = 0; i < c.k; ++i) {
      int32_t value;
      std::memcpy(&value, index + i, sizeof value);
      if (value < 0 || value >= blocks)
        return "g_idx[" + std::to_string(i) + "] = " + std::to_string(value) +
               " names no block of " + std::to_string(blocks);
    }
  }
  return "";
}

bool zeroPointsAreDefault(const NBitsCoding &c) {
  if (!c.zeroPoints)
    return true;
  const ZeroPoints zero(c);
  const float standard = static_cast<float>(1u << (c.bits - 1));
  for (int64_t row = 0; row < c.n; ++row)
    for (int64_t block = 0; block < c.blocks(); ++block)
      if (zero.at(row, block) != standard)
        return false;
  return true;
}

bool groupIndexIsDefault(const NBitsCoding &c) {
  if (!c.groupIndex)
    return true;
  for (int64_t i = 0; i < c.k; ++i) {
    int32_t value;
    std::memcpy(&value, c.groupIndex->bytes.data() + i * sizeof value, sizeof value);
    if (value != i / c.blockSize)
      return false;
  }
  return true;
}

void dequantizeNBits(const NBitsCoding &c, float *out) {
  const std::vector<float> scales = widened(*c.scales);
  const ZeroPoints zero(c);
  std::vector<int32_t> group(static_cast<size_t>(c.k));
  for (int64_t i = 0; i < c.k; ++i) {
    group[i] = static_cast<int32_t>(i / c.blockSize);
    if (c.groupIndex)
      std::memcpy(&group[i], c.groupIndex->bytes.data() + i * sizeof(int32_t), sizeof(int32_t));
  }
  const int64_t rowBytes = c.blocks() * blobBytes(c);
  for (int64_t row = 0; row < c.n; ++row) {
    const uint8_t *codes = c.codes->bytes.data() + row * rowBytes;
    for (int64_t i = 0; i < c.k; ++i) {
      // Codes sit in block order whatever g_idx says; g_idx picks the scale.
      const int64_t block = i / c.blockSize;
      const unsigned code = field(codes + block * blobBytes(c), i % c.blockSize, c.bits);
      const int64_t g = group[i];
      out[c.rows ? row * c.k + i : i * c.n + row] =
          (static_cast<float>(code) - zero.at(row, g)) * scales[row * c.blocks() + g];
    }
  }
}

void unpackNBitsCodes(const NBitsCoding &c, uint8_t *out) {
  const int64_t rowBytes = c.blocks() * blobBytes(c);
  for (int64_t row = 0; row < c.n; ++row)
    for (int64_t i = 0; i < c.k; ++i)
      out[row * c.k + i] =
          static_cast<uint8_t>(field(c.codes->bytes.data() + row * rowBytes, i, c.bits));
}

bool NBitsCoding::keepsInt8Codes() const {
  if (!blocksAreGroups())
    return false;
  if (bits == 4)
    return zeroPoints && zeroPoints->onnxType == TensorProto::UINT8;
  if (bits != 8 || (zeroPoints && zeroPoints->onnxType != TensorProto::UINT8))
    return false;
  // 8-bit codes: code - zero point fits int8 with the default zero point (128) and with
  // symmetric ones, not with every asymmetric zero point: the codes are read once to tell.
  if (int8CodesFit < 0) {
    const ZeroPoints zero(*this);
    const int64_t rowBytes = blocks() * blockSize;
    bool fit = true;
    for (int64_t row = 0; row < n && fit; ++row)
      for (int64_t block = 0; block < blocks() && fit; ++block) {
        const int zeroPoint = static_cast<int>(zero.at(row, block));
        const uint8_t *run = codes->bytes.data() + row * rowBytes + block * blockSize;
        const auto [least, most] = std::minmax_element(run, run + blockSize);
        fit = *least - zeroPoint >= -128 && *most - zeroPoint <= 127;
      }
    int8CodesFit = fit ? 1 : 0;
  }
  return int8CodesFit == 1;
}

void nbitsInt8Codes(const NBitsCoding &c, int8_t *out) {
  const ZeroPoints zero(c);
  const int64_t rowBytes = c.blocks() * blobBytes(c);
  for (int64_t row = 0; row < c.n; ++row)
    for (int64_t i = 0; i < c.k; ++i)
      out[row * c.k + i] = static_cast<int8_t>(
          static_cast<int>(field(c.codes->bytes.data() + row * rowBytes, i, c.bits)) -
          static_cast<int>(zero.at(row, i / c.blockSize)));
}

void nbitsScales(const NBitsCoding &c, float *out) {
  const std::vector<float> scales = widened(*c.scales);
  std::memcpy(out, scales.data(), scales.size() * sizeof(float));
}

int codeBits(int32_t onnxType) {
  switch (onnxType) {
  case kOnnxInt4: case kOnnxUInt4: return 4;
  case ::onnx::TensorProto::INT8: case ::onnx::TensorProto::UINT8: return 8;
  default: return 0;
  }
}

bool isSignedCodeType(int32_t onnxType) {
  return onnxType == kOnnxInt4 || onnxType == ::onnx::TensorProto::INT8;
}

unsigned storedCode(const WeightRecord &record, int64_t index) {
  const int bits = codeBits(record.onnxType);
  unsigned value = bits == 4 ? (record.bytes[index / 2] >> (index % 2 ? 4 : 0)) & 0xFu
                             : record.bytes[index];
  if (isSignedCodeType(record.onnxType))
    value = (value + (1u << (bits - 1))) & ((1u << bits) - 1);  // two's complement + offset
  return value;
}

} // namespace dsc::onnx_frontend
