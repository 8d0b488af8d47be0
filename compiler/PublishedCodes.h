// Models their publishers quantized (MatMulNBits' 4- and 8-bit codes, ONNX Runtime's
// quantize_dynamic: docs/ortgenai.md): what such a model compiles to without --dtype, and
// which of its weights the plan keeps as the file's codes.
#ifndef DSC_COMPILER_PUBLISHEDCODES_H
#define DSC_COMPILER_PUBLISHEDCODES_H

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>

namespace llvm {
class raw_ostream;
}

namespace dsc {
namespace onnx_frontend {
class WeightStore;
}
struct QuantizeWeightsOptions;

struct PublishedCodes {
  int bits = 0;           // 4 or 8: the plan the codes make by default; 0: a float plan
  int64_t groupSize = 0;  // the codes' blocks; 0: one group per output channel (8 bits)
};

// The default plan of the model's codes, said in a line to `report`: int4 at their block size
// for 4-bit codes (8-bit ones among them kept as int8 codes where they fit: mixed precision),
// int8 for 8-bit ones alone whose code - zero point fits int8 (most of them).
// `tensorParallel` ranks: the line says what stays float because the ranks split a row.
PublishedCodes publishedCodes(const onnx_frontend::WeightStore &weights, int64_t tensorParallel,
                              llvm::raw_ostream &report);

// Under a plan `publishedCodes` chose (`groupSize` its groups, perhaps the user's): the coded
// weights the quantizer keeps as int4 or int8 codes, and those that stay float (dequantized,
// exact) rather than be quantized a second time; the LM head 4-bit where its codes are.
void sortPublishedWeights(mlir::ModuleOp module, const onnx_frontend::WeightStore &weights,
                          int64_t groupSize, QuantizeWeightsOptions &quantize);

} // namespace dsc

#endif
