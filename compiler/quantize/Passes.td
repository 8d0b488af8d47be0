#ifndef DSC_COMPILER_QUANTIZE_PASSES_TD
#define DSC_COMPILER_QUANTIZE_PASSES_TD

include "mlir/Pass/PassBase.td"

def QuantizeWeights : Pass<"dsc-quantize-weights", "mlir::ModuleOp"> {
  let summary = "int8 weight-only quantization of the linear layers and the LM head (dsc --dtype int8)";
  let description = [{
    DESIGN.md §3.5 and docs/int8.md. Every `tfm.linear` (and `tfm.lm_head`) whose weight is a float
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
  }];
  let options = [
    Option<"groupSize", "group-size", "int64_t", "0",
           "Inputs per scale group along the input dimension; 0: one group per output row">,
    Option<"mlpExtraGrouping", "mlp-extra-grouping", "bool", "false",
           "Halve the group size of the MLP's linear layers">,
    Option<"lmHead", "lm-head", "bool", "true",
           "Quantize the LM head (tfm.lm_head) too">,
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark for every linear layer that is not quantized, with the reason">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect"];
}

#endif
