#include "compiler/PublishedCodes.h"

#include "compiler/quantize/Passes.h"
#include "dialects/tfm/IR/TfmDialect.h"
#include "frontends/onnx/NBitsWeights.h"
#include "frontends/onnx/WeightStore.h"

#include "llvm/Support/raw_ostream.h"

#include <string>

namespace dsc {
namespace {

// Whether the recognised LM head multiplies by 4-bit MatMulNBits codes.
bool lmHeadIsNBits(mlir::ModuleOp module, const onnx_frontend::WeightStore &weights) {
  bool coded = false;
  module.walk([&](tfm::LmHeadOp head) {
    if (auto weight = head.getWeight().getDefiningOp<tfm::WeightOp>())
      if (const onnx_frontend::WeightRecord *record = weights.lookup(weight.getName()))
        coded |= record->coding && record->coding->bits == 4;
  });
  return coded;
}

enum class KeptAs { Int4, Int8, Float };

// How a plan whose groups are `groupSize` (0: one per output channel) holds a coded weight:
// its 4-bit codes as they are; codes with zero points as int8 codes (code - zero point,
// exact at the same scales); codes neither layout holds as they are float (dequantized,
// exact) rather than quantized a second time. A table's 8-bit codes (quantize_dynamic's
// tied head: DequantizeLinear of a transposed table) are rows the writer does not keep as
// they are: the head reads them dequantized.
KeptAs keptAs(const onnx_frontend::NBitsCoding &coding, int64_t groupSize) {
  const bool groupsDiffer =
      (coding.rows && coding.bits == 8) ||
      (groupSize == 0 ? coding.blockSize != coding.k : coding.blockSize != groupSize);
  return groupsDiffer              ? KeptAs::Float
         : coding.keepsCodes()     ? KeptAs::Int4
         : coding.keepsInt8Codes() ? KeptAs::Int8
                                   : KeptAs::Float;
}

} // namespace

PublishedCodes publishedCodes(const onnx_frontend::WeightStore &weights, int64_t tensorParallel,
                              llvm::raw_ostream &report) {
  const onnx_frontend::NBitsSummary coded = weights.nbitsSummary();
  // 4-bit codes make an int4 plan at their block size. ONNX Runtime GenAI's mixed precision
  // (matmul_mixed_precision, the k_quant_mixed and rtn_last recipes: the LM head and the
  // sensitive layers in 8 bits, as llama.cpp's Q4_K_M) mixes 8-bit codes in, which the plan
  // holds as it holds 4-bit codes with zero points (keptAs, as sortPublishedWeights sorts).
  int64_t fourBitBlock = -1;
  bool oneBlock = true, fourAndEightOnly = true;
  for (const onnx_frontend::WeightRecord *record : weights.nbitsWeights()) {
    const onnx_frontend::NBitsCoding &coding = *record->coding;
    fourAndEightOnly &= coding.bits == 4 || coding.bits == 8;
    if (coding.bits == 4) {
      oneBlock &= fourBitBlock < 0 || fourBitBlock == coding.blockSize;
      fourBitBlock = coding.blockSize;
    }
  }
  if (fourBitBlock > 0 && oneBlock && fourBitBlock % 2 == 0 && fourAndEightOnly) {
    int64_t fourBit = 0, withZeroPoints = 0, eightBit = 0, eightBitKept = 0;
    for (const onnx_frontend::WeightRecord *record : weights.nbitsWeights()) {
      const onnx_frontend::NBitsCoding &coding = *record->coding;
      const KeptAs kept = keptAs(coding, fourBitBlock);
      if (coding.bits == 4) {
        ++fourBit;
        withZeroPoints += kept == KeptAs::Int8;
      } else {
        ++eightBit;
        eightBitKept += kept == KeptAs::Int8;
      }
    }
    report << "dsc: " << fourBit << " weights are 4-bit MatMulNBits codes in blocks of "
           << fourBitBlock << ": the plan keeps them (int4";
    if (withZeroPoints > 0)
      report << "; " << withZeroPoints << " with zero points as int8 codes, code - zero point";
    if (eightBit > 0) {
      report << "; " << eightBit << " more are 8-bit codes (mixed precision): " << eightBitKept
             << " kept as int8 codes";
      if (eightBitKept < eightBit)
        report << ", " << eightBit - eightBitKept
               << " read dequantized, exact (asymmetric, other blocks or a table)";
    }
    report << "; --dtype says otherwise)\n";
    return {4, fourBitBlock};
  }
  if (coded.weights == 0 || coded.bits != 8)
    return {};
  // 8-bit codes (MatMulNBits' 8 bits; ONNX Runtime's quantize_dynamic, one block per output
  // channel): an int8 plan that keeps those whose code - zero point fits int8, at their block
  // size or per output channel, as 4-bit codes stay int4 (a float plan of them is the same
  // values in 4x the bytes). Tables (embeddings) are read dequantized either way. Asymmetric
  // uint8 codes mostly do not fit: such a model stays float.
  int64_t linears = 0, kept = 0, keptBlock = -1, otherBlocks = 0;
  bool perChannel = true;
  for (const onnx_frontend::WeightRecord *record : weights.nbitsWeights()) {
    const onnx_frontend::NBitsCoding &coding = *record->coding;
    if (coding.rows)
      continue;
    ++linears;
    if (coding.keepsInt8Codes()) {
      ++kept;
      perChannel &= coding.blockSize == coding.k;
      if (keptBlock < 0)
        keptBlock = coding.blockSize;
    } else if (!coding.blocksAreGroups()) {
      ++otherBlocks;
    }
  }
  // Why the others are not kept: code - zero point outside int8 (asymmetric uint8), or
  // blocks that do not divide the inputs (or a g_idx), which int8 groups cannot be.
  auto whyNot = [&](int64_t notKept) {
    const int64_t asymmetric = notKept - otherBlocks;
    if (asymmetric > 0)
      report << asymmetric << " asymmetric (code - zero point does not fit int8)";
    if (asymmetric > 0 && otherBlocks > 0)
      report << " and ";
    if (otherBlocks > 0)
      report << otherBlocks << " in blocks that do not divide their inputs or reordered by g_idx";
  };
  if (kept == 0 || 2 * kept < linears) {
    if (linears > 0) {
      report << "dsc: " << linears << " weights are 8-bit codes, ";
      whyNot(linears - kept);
      report << ": the plan reads them dequantized, exact (--dtype int8 quantizes them "
                "again)\n";
    }
    return {};
  }
  report << "dsc: " << linears << " weights are 8-bit codes "
         << (perChannel ? "with a scale per output channel"
                        : "in blocks of " + std::to_string(keptBlock))
         << ": the plan keeps them (int8";
  if (kept < linears) {
    report << "; ";
    whyNot(linears - kept);
    report << " stay float";
  }
  // One scale over a row's inputs, which a row-parallel layer's ranks split: that layer is
  // read float rather than quantized again per rank (QuantizeWeights.cpp).
  if (perChannel && tensorParallel > 1)
    report << "; the row-parallel layers stay float under --tp, their one scale a row spanning "
              "the ranks' inputs";
  report << "; --dtype says otherwise)\n";
  return {8, perChannel ? 0 : keptBlock};
}

void sortPublishedWeights(mlir::ModuleOp module, const onnx_frontend::WeightStore &weights,
                          int64_t groupSize, QuantizeWeightsOptions &quantize) {
  if (lmHeadIsNBits(module, weights))
    quantize.lmHeadBits = 4;
  quantize.publishedOnly = true;
  for (const onnx_frontend::WeightRecord *record : weights.nbitsWeights())
    switch (keptAs(*record->coding, groupSize)) {
    case KeptAs::Int4: quantize.publishedInt4.push_back(record->name); break;
    case KeptAs::Int8: quantize.publishedInt8.push_back(record->name); break;
    case KeptAs::Float: quantize.keepFloat.push_back(record->name); break;
    }
}

} // namespace dsc
