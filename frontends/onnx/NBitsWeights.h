// ONNX Runtime's MatMulNBits weights (docs/ortgenai.md): B holds each output row's `bits`-bit
// codes in blocks of `blockSize` inputs, packed low bits first, with a scale per block and
// an optional zero point per block (2^(bits-1) when absent); g_idx, when given, names each
// input's block instead of k / blockSize. The importer gives the node's product a float
// weight [k, n] whose bytes are these codes: readers that need values dequantize them, and
// the plan writer keeps the 4-bit codes as they are where the plan's int4 layout is the same
// (docs/int4.md), so that a model quantized by its publisher is not quantized again.
#ifndef DSC_FRONTENDS_ONNX_NBITSWEIGHTS_H
#define DSC_FRONTENDS_ONNX_NBITSWEIGHTS_H

#include <cstdint>
#include <string>
#include <vector>

namespace dsc::onnx_frontend {

struct WeightRecord;

struct NBitsCoding {
  int64_t bits = 4, blockSize = 32, k = 0, n = 0;
  const WeightRecord *codes = nullptr;       // uint8 [n, blocks, blockSize * bits / 8]
  const WeightRecord *scales = nullptr;      // [n * blocks] or [n, blocks], f32, f16 or bf16
  const WeightRecord *zeroPoints = nullptr;  // uint8 packed [n, ceil(blocks * bits / 8)], or
                                             // the scales' type [n, blocks]; null: default
  const WeightRecord *groupIndex = nullptr;  // int32 [k]; null: k / blockSize
  // The weight is [n, k] (a table of n rows: GatherBlockQuantized's), not MatMul's [k, n].
  bool rows = false;

  int64_t blocks() const { return (k + blockSize - 1) / blockSize; }
  // The blocks are groups of the plan's layouts as they are: in order, and filling every row.
  bool blocksAreGroups() const { return !groupIndex && k % blockSize == 0; }
  // The plan's int4 layout holds these codes byte for byte: 4 bits, the default zero point,
  // blocks in order and filling every row.
  bool keepsCodes() const {
    return bits == 4 && !zeroPoints && blocksAreGroups();
  }
  // 4-bit codes with their own (packed, integer) zero points: code - zero point lies in
  // [-15, 15], so the plan's int8 layout holds each value exactly at the same scales
  // (int8 codes, groups of blockSize). 8-bit codes likewise where every code - zero point
  // lies in [-128, 127] (the default zero point, symmetric ones).
  bool keepsInt8Codes() const;

private:
  mutable int int8CodesFit = -1;  // 8-bit codes: whether they fit, once read (-1: not yet)
};

// Why the tensors do not fit the attributes (sizes, types), or "" when they do.
std::string checkNBitsCoding(const NBitsCoding &coding);

// The weight's values, (code - zero point) * scale, as f32 [k, n] (MatMul's layout), or
// [n, k] for `rows`.
void dequantizeNBits(const NBitsCoding &coding, float *out);

// For keepsCodes(): the codes one per byte, [n, k], and the scales as f32 [n, blocks].
void unpackNBitsCodes(const NBitsCoding &coding, uint8_t *out);
void nbitsScales(const NBitsCoding &coding, float *out);
// For keepsInt8Codes(): code - zero point, one per byte, [n, k].
void nbitsInt8Codes(const NBitsCoding &coding, int8_t *out);

// A default zero point everywhere, or g_idx that says k / blockSize: the coding is the same
// without them (the builder writes neither; other quantizers write both).
bool zeroPointsAreDefault(const NBitsCoding &coding);

// Codes as stored in initializers of ONNX's integer types (INT4, UINT4, INT8, UINT8): their
// bits (0 for another type), whether they are signed, and element `index` as the unsigned
// code MatMulNBits stores (a signed code plus 2^(bits - 1), an unsigned one as it is).
int codeBits(int32_t onnxType);
bool isSignedCodeType(int32_t onnxType);
unsigned storedCode(const WeightRecord &record, int64_t index);
bool groupIndexIsDefault(const NBitsCoding &coding);

} // namespace dsc::onnx_frontend

#endif
