#include "frontends/onnx/OpTable.h"

namespace dsc::onnx_frontend {

static constexpr OpSpec kOps[] = {
    // Elementwise.
    {"", "Add", "Add", 13, 2, 1},
    {"", "Sub", "Sub", 13, 2, 1},
    {"", "Mul", "Mul", 13, 2, 1},
    {"", "Div", "Div", 13, 2, 1},
    {"", "Pow", "Pow", 13, 2, 1},
    {"", "Mod", "Mod", 13, 2, 1},
    {"", "Max", "Max", 13, kVariadic, 1},
    {"", "Min", "Min", 13, kVariadic, 1},
    {"", "Equal", "Equal", 13, 2, 1},
    {"", "Less", "Less", 13, 2, 1},
    {"", "Greater", "Greater", 13, 2, 1},
    {"", "LessOrEqual", "LessOrEqual", 13, 2, 1},
    {"", "GreaterOrEqual", "GreaterOrEqual", 13, 2, 1},
    {"", "And", "And", 13, 2, 1},
    {"", "Or", "Or", 13, 2, 1},
    {"", "Not", "Not", 13, 1, 1},
    {"", "Where", "Where", 13, 3, 1},
    {"", "Sqrt", "Sqrt", 13, 1, 1},
    {"", "Reciprocal", "Reciprocal", 13, 1, 1},
    {"", "Neg", "Neg", 13, 1, 1},
    {"", "Abs", "Abs", 13, 1, 1},
    {"", "Exp", "Exp", 13, 1, 1},
    {"", "Log", "Log", 13, 1, 1},
    {"", "Erf", "Erf", 13, 1, 1},
    {"", "Tanh", "Tanh", 13, 1, 1},
    {"", "Sigmoid", "Sigmoid", 13, 1, 1},
    {"", "Relu", "Relu", 13, 1, 1},
    {"", "Cos", "Cos", 13, 1, 1},
    {"", "Sin", "Sin", 13, 1, 1},
    {"", "Floor", "Floor", 13, 1, 1},
    {"", "IsNaN", "IsNaN", 13, 1, 1},
    {"", "Identity", "Identity", 13, 1, 1},
    {"", "Gelu", "Gelu", 20, 1, 1},
    {"", "Clip", "Clip", 13, 3, 1},
    {"", "Cast", "Cast", 13, 1, 1},
    {"", "CastLike", "CastLike", 15, 2, 1},
    // Linear algebra, normalisation, reductions.
    {"", "MatMul", "MatMul", 13, 2, 1},
    // ONNX Runtime's quantize_dynamic: only in its pattern (DynamicQuantization.cpp).
    {"", "DynamicQuantizeLinear", "", 13, 1, 3},
    {"", "MatMulInteger", "", 13, 4, 1},
    {"", "DequantizeLinear", "", 13, 3, 1},
    {"", "Gemm", "Gemm", 13, 3, 1},
    {"", "Softmax", "Softmax", 13, 1, 1},
    {"", "LogSoftmax", "LogSoftmax", 13, 1, 1},
    {"", "LayerNormalization", "LayerNormalization", 17, 3, 3},
    {"", "ReduceMean", "ReduceMean", 13, 2, 1},
    {"", "ReduceSum", "ReduceSum", 13, 2, 1},
    {"", "ReduceMax", "ReduceMax", 13, 2, 1},
    {"", "CumSum", "CumSum", 13, 2, 1},
    {"", "Trilu", "Trilu", 14, 2, 1},
    {"", "Dropout", "Dropout", 13, 3, 2},
    // Shapes and data movement.
    {"", "Constant", "Constant", 13, 0, 1},
    {"", "ConstantOfShape", "ConstantOfShape", 13, 1, 1},
    {"", "Shape", "Shape", 13, 1, 1},
    {"", "Size", "Size", 13, 1, 1},
    {"", "Reshape", "Reshape", 13, 2, 1},
    {"", "Flatten", "Flatten", 13, 1, 1},
    {"", "Transpose", "Transpose", 13, 1, 1},
    {"", "Squeeze", "Squeeze", 13, 2, 1},
    {"", "Unsqueeze", "Unsqueeze", 13, 2, 1},
    {"", "Expand", "Expand", 13, 2, 1},
    {"", "Tile", "Tile", 13, 2, 1},
    {"", "Concat", "Concat", 13, kVariadic, 1},
    {"", "Split", "Split", 13, 2, kVariadic},
    {"", "Slice", "Slice", 13, 5, 1},
    {"", "Gather", "Gather", 13, 2, 1},
    {"", "GatherElements", "GatherElements", 13, 2, 1},
    {"", "GatherND", "GatherND", 13, 2, 1},
    {"", "ScatterND", "ScatterND", 13, 3, 1},
    {"", "ScatterElements", "ScatterElements", 13, 3, 1},
    {"", "Range", "Range", 13, 3, 1},
    // Mixture-of-experts routing.
    {"", "TopK", "TopK", 13, 2, 2},
    {"", "OneHot", "OneHot", 13, 3, 1},
    {"", "NonZero", "NonZero", 13, 1, 1},
    // Opset 23's function ops, written out in the primitive ops of their definitions.
    {"", "Attention", "", 23, 6, 4},
    {"", "RotaryEmbedding", "", 23, 4, 1},
    {"", "RMSNormalization", "", 23, 2, 1},
    // ONNX Runtime registers its RMS norm in the default domain; the GenAI builder writes it.
    {"", "SimplifiedLayerNormalization", "", 1, 2, 2},
    // ReduceLogSumExp, written out in ReduceMax, Exp, ReduceSum and Log.
    {"", "ReduceLogSumExp", "", 13, 2, 1},
    // Control flow.
    {"", "If", "If", 13, 1, kVariadic},
    // ONNX Runtime's contrib ops that exporters emit for GELU before opset 20.
    {"com.microsoft", "Gelu", "Gelu", 1, 1, 1},
    {"com.microsoft", "FastGelu", "Gelu", 1, 1, 1},  // its bias becomes an Add
    // What ONNX Runtime GenAI's model builder and transformer optimizer write, written out
    // in primitive ops (MicrosoftOps.cpp).
    {"com.microsoft", "MatMulNBits", "", 1, 6, 1},
    {"com.microsoft", "GatherBlockQuantized", "", 1, 4, 1},
    {"com.microsoft", "GroupQueryAttention", "", 1, 16, 3},
    {"com.microsoft", "SkipSimplifiedLayerNormalization", "", 1, 4, 4},
    {"com.microsoft", "SkipLayerNormalization", "", 1, 5, 4},
    {"com.microsoft", "RotaryEmbedding", "", 1, 4, 1},
    {"com.microsoft", "MoE", "", 1, 8, 1},
    {"com.microsoft", "QMoE", "", 1, 21, 1},
    // ... and what its transformer optimizer writes (BERT, GPT-2).
    {"com.microsoft", "Attention", "", 1, 7, 2},
    {"com.microsoft", "MultiHeadAttention", "", 1, 10, 3},
    {"com.microsoft", "EmbedLayerNormalization", "", 1, 9, 3},
    {"com.microsoft", "BiasGelu", "", 1, 2, 1},
};

const OpSpec *lookupOp(llvm::StringRef domain, llvm::StringRef opType, int64_t opsetVersion) {
  if (domain == "ai.onnx")
    domain = "";
  for (const OpSpec &spec : kOps)
    if (spec.domain == domain && spec.opType == opType)
      return opsetVersion >= spec.sinceVersion ? &spec : nullptr;
  return nullptr;
}

llvm::ArrayRef<OpSpec> supportedOps() { return kOps; }

} // namespace dsc::onnx_frontend
