#ifndef DSC_DIALECTS_TFM_ATTRS_TD
#define DSC_DIALECTS_TFM_ATTRS_TD

include "dialects/tfm/IR/TfmBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums.
//===----------------------------------------------------------------------===//

def Tfm_ParallelismEnum : I32EnumAttr<"Parallelism",
    "how a linear layer is split across tensor-parallel ranks", [
      I32EnumAttrCase<"replicated", 0>,
      // The weight holds a slice of the output features; the result is a shard.
      I32EnumAttrCase<"column", 1>,
      // The weight holds a slice of the input features; the result is a partial sum
      // that a tfm.all_reduce completes.
      I32EnumAttrCase<"row", 2>]> {
  let cppNamespace = "::dsc::tfm";
  let genSpecializedAttr = 0;
}
def Tfm_ParallelismAttr : EnumAttr<Tfm_Dialect, Tfm_ParallelismEnum, "parallel">;

def Tfm_ActivationKindEnum : I32EnumAttr<"ActivationKind", "an activation function", [
      I32EnumAttrCase<"gelu_erf", 0>,   // x * Phi(x), the exact GELU
      I32EnumAttrCase<"gelu_tanh", 1>,  // GELU, tanh approximation (GPT-2 "gelu_new")
      I32EnumAttrCase<"gelu_quick", 2>, // x * sigmoid(1.702 x)
      I32EnumAttrCase<"silu", 3>,       // x * sigmoid(x)
      I32EnumAttrCase<"relu", 4>,
      I32EnumAttrCase<"relu2", 5>]> {  // relu(x)^2 (Nemotron's and Primer's "relu2")
  let cppNamespace = "::dsc::tfm";
  let genSpecializedAttr = 0;
}
def Tfm_ActivationKindAttr : EnumAttr<Tfm_Dialect, Tfm_ActivationKindEnum, "activation">;

def Tfm_NormKindEnum : I32EnumAttr<"NormKind",
    "the normalisation a linear layer applies to its input rows first", [
      I32EnumAttrCase<"rms", 0>,    // tfm.rms_norm's
      I32EnumAttrCase<"layer", 1>]> {  // tfm.layer_norm's
  let cppNamespace = "::dsc::tfm";
  let genSpecializedAttr = 0;
}
def Tfm_NormKindAttr : EnumAttr<Tfm_Dialect, Tfm_NormKindEnum, "norm">;

def Tfm_RouterScoringEnum : I32EnumAttr<"RouterScoring",
    "how a mixture-of-experts router turns its logits into expert scores", [
      I32EnumAttrCase<"softmax", 0>,   // over all experts (Mixtral, Qwen-MoE, OLMoE, GPT-OSS)
      I32EnumAttrCase<"sigmoid", 1>]> { // each expert on its own (DeepSeek-V3, GLM-4.5)
  let cppNamespace = "::dsc::tfm";
  let genSpecializedAttr = 0;
}
def Tfm_RouterScoringAttr : EnumAttr<Tfm_Dialect, Tfm_RouterScoringEnum, "scoring">;

def Tfm_RotaryLayoutEnum : I32EnumAttr<"RotaryLayout",
    "which elements of a head a rotary embedding pairs", [
      // (x[i], x[i + dim/2]): GPT-NeoX, LLaMA ("rotate_half").
      I32EnumAttrCase<"half_split", 0>,
      // (x[2i], x[2i + 1]): GPT-J, CodeGen.
      I32EnumAttrCase<"interleaved", 1>]> {
  let cppNamespace = "::dsc::tfm";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Weight transforms, applied in order by the plan writer while it streams a weight.
//===----------------------------------------------------------------------===//

def Tfm_TransposeAttr : Tfm_Attr<"Transpose", "transpose"> {
  let summary = "permute dimensions: result dimension i is source dimension perm[i]";
  let parameters = (ins ArrayRefParameter<"int64_t">:$perm);
  let assemblyFormat = "`<` `[` $perm `]` `>`";
}

def Tfm_SliceAttr : Tfm_Attr<"Slice", "slice"> {
  let summary = "keep indices [offset, offset + size) of one dimension (a TP shard)";
  let parameters = (ins "int64_t":$axis, "int64_t":$offset, "int64_t":$size);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Tfm_BlocksAttr : Tfm_Attr<"Blocks", "blocks"> {
  let summary = "keep [offset, offset + size) of each of `groups` equal blocks of one dimension";
  let description = [{
    Selects one part of a fused projection: GPT-2's [q|k|v] columns are 3 blocks, BLOOM's
    per-head [heads, 3, head_dim] rows are `heads` blocks of 3 * head_dim. The result's
    dimension is groups * size.
  }];
  let parameters = (ins "int64_t":$axis, "int64_t":$groups, "int64_t":$offset, "int64_t":$size);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Tfm_ShardAttr : Tfm_Attr<"Shard", "shard"> {
  let summary = "a tensor-parallel shard: rank r keeps [offsets[r], +sizes[r]) of each block";
  let description = [{
    The dimension `axis` is `groups` equal blocks; rank r keeps the elements
    [offsets[r], offsets[r] + sizes[r]) of every block, concatenated. Parts usually
    partition the block (uneven splits give the remainder to the lowest ranks); they
    overlap where KV heads are replicated because there are fewer than ranks. The IR's
    type is rank 0's shard, the largest; the plan writer writes rank r's part into the
    weight section of rank r.
  }];
  let parameters = (ins "int64_t":$axis, ArrayRefParameter<"int64_t">:$offsets,
                    ArrayRefParameter<"int64_t">:$sizes, "int64_t":$groups);
  let assemblyFormat = [{
    `<` `axis` `=` $axis `,` `offsets` `=` `[` $offsets `]` `,` `sizes` `=` `[` $sizes `]`
    `,` `groups` `=` $groups `>`
  }];
  let genVerifyDecl = 1;
}

def Tfm_ScaleAttr : Tfm_Attr<"Scale", "scale"> {
  let summary = "multiply every element by a constant factor";
  let description = [{
    A linear whose output the export multiplies (or divides) by a constant, as Granite's
    residual_multiplier does, computes that product itself with its weight and bias scaled
    (dsc-recognize-layers): no launch for the product, and the residual add behind it fuses.
  }];
  let parameters = (ins "::mlir::FloatAttr":$factor);
  let assemblyFormat = "`<` $factor `>`";
  let genVerifyDecl = 1;
}

def Tfm_ConvertAttr : Tfm_Attr<"Convert", "convert"> {
  let summary = "convert the elements to another floating-point type";
  let parameters = (ins "::mlir::Type":$dtype);
  let assemblyFormat = "`<` $dtype `>`";
  let genVerifyDecl = 1;
}

def Tfm_QuantizeInt8Attr : Tfm_Attr<"QuantizeInt8", "quantize_int8"> {
  let summary = "symmetric int8 quantization of a 2-D [out, in] weight";
  let description = [{
    Each output row is split into groups of `group_size` input elements (0: one group per
    row, i.e. per output channel) and divided by max|x| / 127 of its group. The scales are
    another weight: the same source with `#tfm.quant_scales` as the last transform.
  }];
  let parameters = (ins "int64_t":$group_size);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Tfm_QuantScalesAttr : Tfm_Attr<"QuantScales", "quant_scales"> {
  let summary = "the scales of #tfm.quantize_int8: [out, in / group_size] (or [out, 1])";
  let parameters = (ins "int64_t":$group_size, "::mlir::Type":$dtype);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Tfm_QuantizeInt4Attr : Tfm_Attr<"QuantizeInt4", "quantize_int4"> {
  let summary = "symmetric 4-bit quantization of a 2-D [out, in] weight, in groups";
  let description = [{
    docs/int4.md. Each output row is split into groups of `group_size` input elements (a
    positive even number) and divided by max|x| / 7 of its group; each value becomes a code
    q + 8 in [0, 15] (`ui4`; the value is (code - 8) * scale, ONNX Runtime's MatMulNBits
    with its default zero point). The result keeps the logical shape [out, in]; the plan
    stores it packed two codes to a byte, the even input first in the low nibble. The
    scales are another weight: the same source with `#tfm.quant_scales_int4` last.
  }];
  let parameters = (ins "int64_t":$group_size);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Tfm_QuantScalesInt4Attr : Tfm_Attr<"QuantScalesInt4", "quant_scales_int4"> {
  let summary = "the scales of #tfm.quantize_int4: [out, in / group_size]";
  let parameters = (ins "int64_t":$group_size, "::mlir::Type":$dtype);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Attention.
//===----------------------------------------------------------------------===//

def Tfm_F64Parameter : AttrOrTypeParameter<"::llvm::APFloat", "a 64-bit float"> {
  let comparator = "$_lhs.bitwiseIsEqual($_rhs)";
  let parser = "::dsc::tfm::parseF64Parameter($_parser)";
  let printer = "::dsc::tfm::printF64Parameter($_printer, $_self)";
}

def Tfm_RotaryAttr : Tfm_Attr<"Rotary", "rotary"> {
  let summary = "rotary position embedding of the first `dim` elements of each head";
  let description = [{
    The inverse frequencies are base^(-2i/dim) for i < dim/2, or, when `inv_freq` lists
    them, those dim/2 values: the scaled RoPE of real checkpoints (Llama-3.x's "llama3",
    Gemma-3's "linear", "yarn", "longrope"), which no single base gives. Recognition
    measures them on the graph and lists them only where the base formula does not
    reproduce them; `base` is then the one the second frequency implies, for reading only.
    `attention_factor` (yarn's and longrope's) scales the cosines and sines, so the rotated
    elements of queries and keys (and the cached keys); absent, 1. A `dim` below the head
    size is a partial rotary (GPT-J, GPT-NeoX, Phi); the remaining elements pass through.
  }];
  let parameters = (ins "int64_t":$dim, Tfm_F64Parameter:$base,
                    EnumParameter<Tfm_RotaryLayoutEnum>:$layout,
                    OptionalParameter<"::mlir::DenseF32ArrayAttr">:$inv_freq,
                    OptionalParameter<"::mlir::FloatAttr">:$attention_factor);
  let builders = [
    AttrBuilder<(ins "int64_t":$dim, "::llvm::APFloat":$base, "RotaryLayout":$layout), [{
      return $_get($_ctxt, dim, base, layout, ::mlir::DenseF32ArrayAttr(), ::mlir::FloatAttr());
    }]>
  ];
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif
