// The QDQ form of a quantized weight: DequantizeLinear(codes, scale, zero point) of an
// initializer before a plain MatMul, with 4-bit codes (ONNX's INT4 and UINT4, opset 21) or
// 8-bit ones, in blocks along the inputs (block_size, opset 21). ONNX Runtime GenAI's builder
// writes it with `use_qdq` (INT4, blocks of 32, no zero point), as do onnxruntime's own
// MatMulNBitsQuantizer in its QDQ format and the NPU toolchains.
//
// It is MatMulNBits' coding written out: the same codes, scales and zero points, blocks along
// K. dsc reads it as such (NBitsWeights.h): the node becomes a float weight [K, N] whose bytes
// are those codes, laid out as MatMulNBits lays them out, so every later reader (probes, a
// float plan, the int4 plan that keeps the codes as they are) treats both forms alike.
// docs/ortgenai.md, "The builder's other options".
#include "frontends/onnx/GraphImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "frontends/onnx/NBitsWeights.h"
#include "frontends/onnx/TensorConversion.h"
#include "llvm/Support/MathExtras.h"

#include <cstring>

using namespace mlir;

namespace dsc::onnx_frontend {

namespace {

using TensorProto = ::onnx::TensorProto;

int64_t countOf(const WeightRecord &record) { return checkedElementCount(record.dims); }

size_t floatBytes(int32_t onnxType) {
  switch (onnxType) {
  case TensorProto::FLOAT: return 4;
  case TensorProto::FLOAT16: case TensorProto::BFLOAT16: return 2;
  default: return 0;
  }
}

// How a DequantizeLinear of codes [K, N] spreads its scales: blocks of `blockSize` inputs
// (opset 21's block_size along axis 0), or one block of all K per output (per axis 1, or per
// tensor). "" when it fits, else why not.
struct Blocks {
  int64_t blockSize = 0, blocks = 0;
  bool perTensor = false;
};

std::string blocksOf(const NodeProto &node, const WeightRecord &codes, const WeightRecord &scale,
                     Blocks &out) {
  const int64_t k = codes.dims[0], n = codes.dims[1];
  const int64_t blockSize = intAttribute(node, "block_size", 0);
  const int64_t axis = intAttribute(node, "axis", 1);
  const int64_t scales = countOf(scale);
  if (blockSize < 0)
    return "block_size " + std::to_string(blockSize) + " is negative";
  if (blockSize > 0) {
    if (axis != 0 && axis != -2)
      return "blocks along axis " + std::to_string(axis) +
             " (the outputs); dsc reads blocks along the inputs, axis 0";
    const int64_t blocks = llvm::divideCeilSigned(k, blockSize);
    if (scale.dims.size() != 2 || scale.dims[0] != blocks || scale.dims[1] != n)
      return "its scale is not [ceil(K / block_size), N] = [" + std::to_string(blocks) + ", " +
             std::to_string(n) + "]";
    out = {blockSize, blocks, false};
    return "";
  }
  if (scales == 1) {
    out = {k, 1, true};
    return "";
  }
  if ((axis == 1 || axis == -1) && scales == n) {
    out = {k, 1, false};
    return "";
  }
  return "its scale is neither one per tensor, one per output (axis 1) nor blocks along the "
         "inputs";
}

} // namespace

void GraphImporter::planBlockedDequantization(const GraphProto &graph) {
  auto initializer = [&](const std::string &name) -> const WeightRecord * {
    return name.empty() ? nullptr : store_.lookup(weightKey(name));
  };
  for (int q = 0; q < graph.node_size(); ++q) {
    const NodeProto &node = graph.node(q);
    if (node.op_type() != "DequantizeLinear" || node.output_size() < 1 || node.input_size() < 2)
      continue;
    const WeightRecord *codes = initializer(node.input(0));
    const int bits = codes ? codeBits(codes->onnxType) : 0;
    // 8-bit codes per tensor or per axis are quantize_dynamic's (DynamicQuantization.cpp).
    if (bits == 0 || (bits == 8 && intAttribute(node, "block_size", 0) == 0))
      continue;
    auto refuse = [&](const std::string &why) {
      quantizedNodes_[node.output(0)] = {
          QuantizedNode::Refuse, 0, "", -1,
          "DequantizeLinear of the " + onnxTypeName(codes->onnxType) + " initializer '" +
              node.input(0) + "': " + why};
    };
    const WeightRecord *scale = initializer(node.input(1));
    const WeightRecord *zero = node.input_size() > 2 ? initializer(node.input(2)) : nullptr;
    Blocks blocks;
    std::string why;
    if (codes->dims.size() != 2)
      why = "dsc reads 2-D codes [K, N], a MatMul's weight";
    else if (!scale || floatBytes(scale->onnxType) == 0)
      why = "its scale is not a float, float16 or bfloat16 initializer";
    else if (node.input_size() > 2 && !node.input(2).empty() &&
             (!zero || zero->onnxType != codes->onnxType || countOf(*zero) != countOf(*scale)))
      why = "its zero point is not an initializer of the codes' type and the scale's shape";
    else if (intAttribute(node, "output_dtype", 0) != 0 &&
             intAttribute(node, "output_dtype", 0) != scale->onnxType)
      why = "its output_dtype is not its scale's type";
    else
      why = blocksOf(node, *codes, *scale, blocks);
    // MatMulNBits' blocks fill whole bytes; one block (of all K) takes a padding code.
    if (why.empty() && bits == 4 && blocks.blockSize % 2 != 0 && blocks.blocks > 1)
      why = "4-bit codes in blocks of an odd size (" + std::to_string(blocks.blockSize) +
            ") do not fill whole bytes";
    if (!why.empty()) {
      refuse(why);
      continue;
    }
    quantizedNodes_[node.output(0)] = {QuantizedNode::DequantizedBlocked, 0, "", -1, ""};
  }
  // The codes mean nothing to any other reader: say so there, rather than fail later on a
  // tensor of 4-bit integers.
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeProto &node = graph.node(i);
    if (node.output_size() < 1 || quantizedNodes_.count(node.output(0)))
      continue;
    // GatherBlockQuantized reads them as ONNX Runtime does (MicrosoftOps.cpp).
    if (node.op_type() == "GatherBlockQuantized" && node.domain() == "com.microsoft")
      continue;
    for (const std::string &input : node.input()) {
      const WeightRecord *record = initializer(input);
      if (record && isFourBitIntegerType(record->onnxType)) {
        quantizedNodes_[node.output(0)] = {
            QuantizedNode::Refuse, 0, "", -1,
            node.op_type() + " reads the " + onnxTypeName(record->onnxType) +
                " initializer '" + input +
                "'; dsc reads 4-bit codes only as a DequantizeLinear's x"};
        break;
      }
    }
  }
}

LogicalResult GraphImporter::importBlockedDequantize(const NodeProto &node, Location loc) {
  const WeightRecord *codes = store_.lookup(weightKey(node.input(0)));
  const WeightRecord *scale = store_.lookup(weightKey(node.input(1)));
  const WeightRecord *zero = node.input_size() > 2 && !node.input(2).empty()
                                 ? store_.lookup(weightKey(node.input(2)))
                                 : nullptr;
  if (!codes || !scale)  // planned for another node that wrote this name (refused before)
    return emitError(loc) << "DequantizeLinear's codes and scale are not initializers";
  Blocks blocks;
  if (std::string why = blocksOf(node, *codes, *scale, blocks); !why.empty())
    return emitError(loc) << why;  // planned, so it fitted then
  const int64_t k = codes->dims[0], n = codes->dims[1];
  // One record per codes and scale: nodes that dequantize the same initializer share it.
  const std::string name = weightKey(node.input(0)) + ".dequantized." + node.input(1);
  if (!store_.lookup(name)) {
    const int bits = codeBits(codes->onnxType);
    // MatMulNBits' blocks fill whole bytes: one block of K odd 4-bit codes gets a padding code.
    int64_t blockSize = blocks.blockSize;
    if (blockSize * bits % 8 != 0 || blockSize < 2)
      blockSize += 1;
    const int64_t count = blocks.blocks, blob = blockSize * bits / 8;
    const unsigned defaultZero = 1u << (bits - 1);
    // Scale and zero point of (block, output): [blocks, N], [N] or one.
    auto scaleIndex = [&](int64_t block, int64_t o) {
      return blocks.perTensor ? 0 : block * n + o;
    };
    auto zeroAt = [&](int64_t block, int64_t o) {
      if (zero)
        return storedCode(*zero, scaleIndex(block, o));
      return isSignedCodeType(codes->onnxType) ? defaultZero : 0u;  // zero point 0 as stored
    };
    bool defaultZeros = true;
    for (int64_t o = 0; o < n && defaultZeros; ++o)
      for (int64_t b = 0; b < count && defaultZeros; ++b)
        defaultZeros = zeroAt(b, o) == defaultZero;

    // [N, blocks, blob] codes, [N, blocks] scales, [N, ceil(blocks * bits / 8)] zero points.
    std::vector<uint8_t> packed(static_cast<size_t>(n * count * blob), 0);
    auto put = [&](uint8_t *row, int64_t index, unsigned value) {
      if (bits == 8)
        row[index] = static_cast<uint8_t>(value);
      else
        row[index / 2] |= static_cast<uint8_t>(value << (index % 2 ? 4 : 0));
    };
    for (int64_t o = 0; o < n; ++o) {
      uint8_t *row = packed.data() + o * count * blob;
      for (int64_t b = 0; b < count; ++b)
        for (int64_t j = 0; j < blockSize; ++j) {
          const int64_t input = b * blocks.blockSize + j;
          // Padding past K (or past a block of all K) holds the zero point: a value of 0.
          const bool real = j < blocks.blockSize && input < k;
          put(row, b * blockSize + j, real ? storedCode(*codes, input * n + o) : zeroAt(b, o));
        }
    }
    const size_t scaleSize = floatBytes(scale->onnxType);
    std::vector<uint8_t> scales(static_cast<size_t>(n * count) * scaleSize);
    for (int64_t o = 0; o < n; ++o)
      for (int64_t b = 0; b < count; ++b)
        std::memcpy(scales.data() + (o * count + b) * scaleSize,
                    scale->bytes.data() + scaleIndex(b, o) * scaleSize, scaleSize);
    const int64_t zeroRow = (count * bits + 7) / 8;
    std::vector<uint8_t> zeros;
    if (!defaultZeros) {
      zeros.assign(static_cast<size_t>(n * zeroRow), 0);
      for (int64_t o = 0; o < n; ++o)
        for (int64_t b = 0; b < count; ++b)
          put(zeros.data() + o * zeroRow, b, zeroAt(b, o));
    }

    std::string error;
    NBitsCoding coding;
    coding.bits = bits;
    coding.blockSize = blockSize;
    coding.k = k;
    coding.n = n;
    coding.codes = store_.addOwned(name + ".codes", TensorProto::UINT8, {n, count, blob},
                                   std::move(packed), error);
    if (coding.codes)
      coding.scales = store_.addOwned(name + ".scales", scale->onnxType, {n, count},
                                      std::move(scales), error);
    if (coding.scales && !defaultZeros)
      coding.zeroPoints = store_.addOwned(name + ".zero_points", TensorProto::UINT8,
                                          {n, zeroRow}, std::move(zeros), error);
    if (error.empty())
      error = checkNBitsCoding(coding);
    if (!error.empty() || !store_.addNBitsWeight(name, coding, scale->onnxType, error))
      return emitError(loc) << "DequantizeLinear: " << error;
  }
  Type element = convertElementType(context_, scale->onnxType);
  Value weight = onnx::WeightOp::create(builder_, loc, RankedTensorType::get({k, n}, element),
                                        name);
  return bind(node.output(0), weight, loc);
}

} // namespace dsc::onnx_frontend
