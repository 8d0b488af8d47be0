#ifndef DSC_COMPILER_QUANTIZE_PASSES_TD
#define DSC_COMPILER_QUANTIZE_PASSES_TD

include "mlir/Pass/PassBase.td"

def QuantizeWeights : Pass<"dsc-quantize-weights", "mlir::ModuleOp"> {
  let summary = "int8 or int4 weight-only quantization of the linear layers and the LM head (dsc --dtype int8|int4)";
  let description = [{
    docs/design.md §3.5 and docs/int8.md. Every `tfm.linear` (and `tfm.lm_head`) whose weight is a float
    `tfm.weight` gets an int8 weight (the same handle with `#tfm.quantize_int8` appended)
    and its scales (the same handle with `#tfm.quant_scales`), so the plan writer
    quantizes while it streams the weights, after any tensor-parallel shard: a group never
    straddles two ranks. Groups run along the input dimension: `group-size` inputs each, 0
    (or a size no smaller than a layer's input count) for one group per output channel.
    With `mlp-extra-grouping` the MLP's layers (a linear feeding a tfm.activation or
    tfm.gated_act, or reading one) use half the group size, DeepSpeed's
    mlp_extra_grouping. With `lm-head` (the default) the LM head is quantized the same
    way (its vocabulary rows are the output channels); the embeddings never are.

    A group size that does not divide some rank's share of a layer's inputs is an error
    naming the layer. Layers that are not quantized are listed as remarks with `remarks`.

    With `bits=4` (docs/int4.md) the linear layers get 4-bit weights instead
    (`#tfm.quantize_int4`, `#tfm.quant_scales_int4`: ui4 codes, a scale per group of
    `group-size` inputs, which must then be positive and even), and the LM head, where it is
    quantized, int8 weights in groups of the same size: it alone decides each token, and
    llama.cpp's 4-bit formats keep it wider too. `lm-head-bits=4` makes it int4 as well: on
    a large vocabulary it is a big share of what a decode step reads.

    Weights a publisher already quantized (ONNX Runtime's MatMulNBits, docs/ortgenai.md)
    are not quantized a second time. The driver names those whose 4-bit codes the plan
    keeps as they are in `published-int4`: each gets int4 at `group-size` (their block
    size), or stays float (dequantized, exact) where that size does not divide some rank's
    inputs. Those named in `published-int8` (4-bit codes with zero points) get int8 at
    `group-size`: the writer stores code - zero point, exact at the publisher's scales.
    Those named in `keep-float` (codes neither layout holds: blocks that do not divide the
    inputs, g_idx) stay float. With `published-only`
    (the driver's default for such a model) every other weight stays float too: what the
    publisher left float is not quantized.
  }];
  let options = [
    ListOption<"keepFloat", "keep-float", "std::string",
               "Weights (by name) that stay float">,
    Option<"publishedOnly", "published-only", "bool", "false",
           "Quantize only the weights named in published-int4: the model's own float "
           "weights stay float (a model its publisher quantized)">,
    ListOption<"publishedInt4", "published-int4", "std::string",
               "Weights (by name) already in 4-bit codes of group-size inputs: int4 at that "
               "size, else float">,
    Option<"groupSize", "group-size", "int64_t", "0",
           "Inputs per scale group along the input dimension; 0: one group per output row">,
    Option<"mlpExtraGrouping", "mlp-extra-grouping", "bool", "false",
           "Halve the group size of the MLP's linear layers">,
    Option<"lmHead", "lm-head", "bool", "true",
           "Quantize the LM head (tfm.lm_head) too">,
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark for every linear layer that is not quantized, with the reason">,
    Option<"bits", "bits", "int64_t", "8",
           "The linear layers' weights: 8 (int8) or 4 (int4 in groups; the LM head int8)">,
    Option<"lmHeadBits", "lm-head-bits", "int64_t", "8",
           "With bits=4: the LM head's weights, 8 (the default) or 4">,
    ListOption<"publishedInt8", "published-int8", "std::string",
               "Weights (by name) in 4-bit codes of group-size inputs with zero points: int8 "
               "at that size (code - zero point, exact), else float">,
    Option<"int8Activations", "int8-activations", "bool", "false",
           "Let the CPU kernels quantize the inputs of int8 layers (and of the LM head) to "
           "int8 (`int8_activations`; dsc sets it unless --int8-weight-only). An int4 plan's "
           "int8 layers take them regardless, as its int4 layers do">,
    Option<"defaultGroupSize", "default-group-size", "bool", "false",
           "With bits=4: group-size is a default, not asked for; a layer it does not divide "
           "takes the largest even size below it that does (int8 per channel where its "
           "inputs are odd)">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect"];
}

def KvCacheDtype : Pass<"dsc-kv-cache-dtype", "mlir::ModuleOp"> {
  let summary = "The type of the session's KV cache (dsc --kv-cache-dtype)";
  let description = [{
    docs/design.md §3.5. Every `tfm.attention` that keeps its keys and values in the session's
    KV cache (`cache_layer`, no past operands: the prefill and decode programs) gets
    `cache_dtype` `dtype` (f16 or bf16): the runtime allocates that layer in that type,
    the keys and values are rounded to it when they are written, and attention reads them
    as stored, on the GPU and in the CPU reference alike. Half the bytes of an f32 cache:
    twice the tokens in the same memory, and half the cache traffic of a decode step.
    `f32` leaves every attention as it is. The export's own interface (`forward`, whose
    past and present keys are graph inputs and outputs) keeps f32.
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", "\"f16\"",
           "The cache's element type: f16, bf16 or f32">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect"];
}

def ActivationDtype : Pass<"dsc-activation-dtype", "mlir::ModuleOp"> {
  let summary = "Half activations where a half GEMM reads them (dsc --activation-dtype)";
  let description = [{
    docs/design.md §3.5. In the session programs (those whose attention keeps its keys and
    values in the session's KV cache), the values that only `tfm.linear` layers read as
    their input, and that an attention or a gated linear writes, get the element type
    `dtype` (f16 or bf16): the attention's output (o_proj's input) and the gated
    activation's (down_proj's input). The producer rounds its f32 result into it where it
    writes it, and the linear reads it widened, on the CPU as on the GPU, so the CPU
    reference rounds at the same points. On the GPU, a linear whose weights are of that
    dtype multiplies it as it is, with no conversion launch before its GEMM, and the
    tensor takes half the bytes. Everything else stays f32: the residual stream, the
    norms' inputs, the logits. `f32` changes nothing.
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", "\"f16\"",
           "The activations' element type: f16, bf16 or f32">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect"];
}

#endif
