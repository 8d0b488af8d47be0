#ifndef DSC_DIALECTS_TFM_OPS_TD
#define DSC_DIALECTS_TFM_OPS_TD

include "dialects/tfm/IR/TfmBase.td"
include "dialects/tfm/IR/TfmAttrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/OpAsmInterface.td"

//===----------------------------------------------------------------------===//
// Weights.
//===----------------------------------------------------------------------===//

def Tfm_WeightOp : Tfm_Op<"weight", [Pure]> {
  let summary = "a model tensor, named, with the transforms the plan writer applies";
  let description = [{
    Names an initializer of the model (`name`), gives its shape and element type in the
    model (`source_type`), and lists transforms applied in order when the plan writer
    streams its bytes: `#tfm.transpose`, `#tfm.slice`, `#tfm.blocks` (a part of a fused
    projection), `#tfm.shard` (a tensor-parallel shard: the result type is rank 0's),
    `#tfm.scale` (a constant product folded into a linear), `#tfm.convert`,
    `#tfm.quantize_int8` and `#tfm.quant_scales`. The result type is what
    the transforms make of the source type.

    ```mlir
    %w = tfm.weight "h.0.mlp.c_fc.weight" : tensor<768x3072xf32>
           [#tfm.transpose<[1, 0]>, #tfm.slice<axis = 0, offset = 0, size = 1536>,
            #tfm.convert<f16>] -> tensor<1536x768xf16>
    ```
  }];
  let arguments = (ins StrAttr:$name, TypeAttrOf<AnyStaticShapeTensor>:$source_type,
                   OptionalAttr<ArrayAttr>:$transforms);
  let results = (outs AnyStaticShapeTensor:$output);
  let assemblyFormat = "$name `:` $source_type ($transforms^)? attr-dict `->` type($output)";
  let hasVerifier = 1;
  let builders = [
    // The result type is what the transforms make of `source` (the source type when they do
    // not apply; the verifier then says why).
    OpBuilder<(ins "::llvm::StringRef":$name, "::mlir::RankedTensorType":$source,
                   CArg<"::llvm::ArrayRef<::mlir::Attribute>", "{}">:$transforms)>
  ];
  let extraClassDeclaration = [{
    // This tensor with `extra` transforms after this op's own: the handle right after this
    // op that already says so, or a new one there; failure when a transform does not apply
    // (a part of a fused projection, a TP shard, a quantization). `builder` (a pattern's
    // rewriter, say) creates it; its insertion point is kept.
    ::mlir::FailureOr<::mlir::Value> withTransforms(::mlir::OpBuilder &builder,
                                                    ::llvm::ArrayRef<::mlir::Attribute> extra);
  }];
}

def Tfm_ConcatWeightsOp : Tfm_Op<"concat_weights", [Pure]> {
  let summary = "weights concatenated along their first dimension: one plan weight";
  let description = [{
    Each part is a `tfm.weight` (with its transforms: a TP shard, int8 quantization...).
    The plan writer streams the parts one after the other into one weight, each rank its own
    parts: the projections that dsc-fuse-projections fuses (Q, K and V; gate and up) become
    one matrix per rank, [q_r; k_r; v_r].

    With `rank_parts` [first_0, end_0, first_1, end_1, ...], rank r joins only parts
    [first_r, end_r): expert parallelism places whole experts on ranks (dsc-tp-shard with
    expert-parallel). The type is rank 0's.

    ```mlir
    %qkv = tfm.concat_weights %q, %k, %v
             : (tensor<64x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<96x64xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyStaticShapeTensor>:$parts,
                   OptionalAttr<DenseI64ArrayAttr>:$rank_parts);
  let results = (outs AnyStaticShapeTensor:$output);
  let assemblyFormat = "$parts attr-dict `:` functional-type($parts, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Embedding, normalisation, linear layers, activations.
//===----------------------------------------------------------------------===//

def Tfm_EmbeddingOp : Tfm_Op<"embedding", [Pure]> {
  let summary = "token embedding lookup: [b, s] ids x [vocab, hidden] -> [b, s, hidden]";
  let description = [{
    With `vocab_size`, the table is a vocabulary-parallel shard: it holds the rows of token
    ids [vocab_offset, vocab_offset + rows) of a vocabulary of `vocab_size` tokens. Ids
    outside that range give zero rows; a tfm.all_reduce sums the shards.

    With `scale` (dsc-fuse-embedding-scale: Gemma's sqrt(hidden_size), Granite's
    embedding_multiplier), each row is multiplied by it as it is gathered.
  }];
  let arguments = (ins Tfm_IdsTensor:$ids, Tfm_FloatTensor:$table,
                   DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$vocab_offset,
                   OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$vocab_size,
                   OptionalAttr<F32Attr>:$scale);
  let results = (outs Tfm_FloatTensor:$output);
  let assemblyFormat = [{
    $ids `,` $table attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

// The norms keep numbered results (ODS would name them after their results, `%output`,
// which the attention's result already takes in printed IR and tests).
def Tfm_LayerNormOp : Tfm_Op<"layer_norm", [Pure, AttrSizedOperandSegments,
    AllTypesMatch<["input", "output"]>,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "layer normalisation of the last dimension, scale and optional bias";
  let description = [{
    With `residual` (the fuse pass's residual add + norm): the normalised value is
    input + residual, and the second result `sum` is input + residual itself, the block's
    residual stream for the layers after it.
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$scale,
                   Optional<Tfm_FloatTensor>:$bias, Optional<Tfm_FloatTensor>:$residual,
                   DefaultValuedAttr<F32Attr, "1e-05">:$epsilon);
  let results = (outs Tfm_FloatTensor:$output, Optional<Tfm_FloatTensor>:$sum);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? (`residual` $residual^)? `eps` $epsilon attr-dict `:`
    type($input) `,` type($scale) (`,` type($bias)^)? (`residual` type($residual)^ `->`
    type($sum))?
  }];
  let hasVerifier = 1;
  let builders = [
    // The unfused norm: no residual, one result.
    OpBuilder<(ins "::mlir::Type":$output, "::mlir::Value":$input, "::mlir::Value":$scale,
                   "::mlir::Value":$bias, "::mlir::FloatAttr":$epsilon), [{
      build($_builder, $_state, output, ::mlir::Type(), input, scale, bias, ::mlir::Value(),
            epsilon);
    }]>
  ];
}

def Tfm_RmsNormOp : Tfm_Op<"rms_norm", [Pure, AllTypesMatch<["input", "output"]>,
    AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "RMS normalisation of the last dimension: x / sqrt(mean(x^2) + eps) * scale";
  let description = [{
    With `residual`, as tfm.layer_norm: the norm of input + residual, and `sum` =
    input + residual.

    With `post_residual` (produced by dsc-fuse-post-norm-residual: Gemma-2's and Gemma-3's
    sandwich norms), the output is post_residual + the norm of input: the residual stream
    after a sublayer whose output is normalised before it is added. Not with `residual`.
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$scale,
                   Optional<Tfm_FloatTensor>:$residual,
                   Optional<Tfm_FloatTensor>:$post_residual,
                   DefaultValuedAttr<F32Attr, "1e-06">:$epsilon);
  let results = (outs Tfm_FloatTensor:$output, Optional<Tfm_FloatTensor>:$sum);
  let assemblyFormat = [{
    $input `,` $scale (`residual` $residual^)? (`post_residual` $post_residual^)? `eps`
    $epsilon attr-dict `:` type($input) `,` type($scale)
    (`residual` type($residual)^ `->` type($sum))?
    (`post_residual` type($post_residual)^)?
  }];
  let hasVerifier = 1;
  let builders = [
    // The unfused norm: no residual, one result.
    OpBuilder<(ins "::mlir::Type":$output, "::mlir::Value":$input, "::mlir::Value":$scale,
                   "::mlir::FloatAttr":$epsilon), [{
      build($_builder, $_state, output, ::mlir::Type(), input, scale, ::mlir::Value(),
            ::mlir::Value(), epsilon);
    }]>
  ];
}

def Tfm_LinearOp : Tfm_Op<"linear", [Pure, AttrSizedOperandSegments]> {
  let summary = "x [..., in] times weight^T ([out, in], torch layout) plus optional bias [out]";
  let description = [{
    The input or the result (not both) may be f16 or bf16 beside f32 weights: the plan's
    activation dtype (dsc-activation-dtype), read widened or written rounded; the layer
    computes in f32. An int8 weight (after quantization) comes with `scales` [out, groups]
    in the compute type; groups divides `in`. `parallel` is set by the TP pass: a column-parallel layer
    produces a shard of the output features, a row-parallel one a partial sum that a
    tfm.all_reduce completes. A row-parallel layer has no bias: the bias is added once,
    after the reduction.

    The fuse pass moves what follows the product into its epilogue: `activation` (a
    tfm.activation kind) and then `residual` (a tensor of the result's type). The result
    is act(x . weight^T + bias) + residual.

    `gated` (with `activation`, without `residual`): the weight is a joined [gate; up]
    projection of 2n rows, and the result [..., n] is act(gate) * up, what
    tfm.gated_act_packed computes from the joined product (dsc-fuse-gated-epilogue).

    `norm` (with `norm_scale` [in], `norm_epsilon`, and for `layer` an optional
    `norm_bias` [in]): the layer first normalises each row of `input` as tfm.rms_norm or
    tfm.layer_norm with that scale, bias and epsilon would, and multiplies the result
    (dsc-fuse-norm-prologue): a decode step's norm runs inside the linear's kernel.

    `int8_activations` (an int8 weight only; dsc-quantize-weights sets it unless dsc's
    --int8-weight-only): the CPU kernels may quantize each row of x to int8 per block of 32
    inputs and multiply integers (VNNI, AMX-INT8), as llama.cpp's q8_0 and ONNX Runtime's
    accuracy_level 4 do (docs/int8.md). GPUs read the weight alone.
  }];
  let arguments = (ins Tfm_FloatTensor:$input, RankedTensorOf<[AnyFloat, I8, UI<4>]>:$weight,
                   Optional<Tfm_FloatTensor>:$bias, Optional<Tfm_FloatTensor>:$scales,
                   Optional<Tfm_FloatTensor>:$residual,
                   Optional<Tfm_FloatTensor>:$norm_scale,
                   Optional<Tfm_FloatTensor>:$norm_bias,
                   DefaultValuedAttr<Tfm_ParallelismAttr,
                                     "::dsc::tfm::Parallelism::replicated">:$parallel,
                   OptionalAttr<Tfm_ActivationKindAttr>:$activation,
                   UnitAttr:$gated,
                   OptionalAttr<Tfm_NormKindAttr>:$norm,
                   OptionalAttr<F32Attr>:$norm_epsilon,
                   UnitAttr:$int8_activations);
  let results = (outs Tfm_FloatTensor:$output);
  let assemblyFormat = [{
    $input `,` $weight (`bias` $bias^)? (`scales` $scales^)? (`parallel` $parallel^)?
    (`activation` $activation^)? (`gated` $gated^)? (`residual` $residual^)?
    (`norm` $norm^ `(` $norm_scale (`,` $norm_bias^)? `)`)? attr-dict
    `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let builders = [
    // The unfused layer: no activation, no residual, no norm.
    OpBuilder<(ins "::mlir::Type":$output, "::mlir::Value":$input, "::mlir::Value":$weight,
                   "::mlir::Value":$bias, "::mlir::Value":$scales,
                   "::dsc::tfm::ParallelismAttr":$parallel), [{
      build($_builder, $_state, output, input, weight, bias, scales, ::mlir::Value(),
            ::mlir::Value(), ::mlir::Value(), parallel, ::dsc::tfm::ActivationKindAttr(),
            ::mlir::UnitAttr(), ::dsc::tfm::NormKindAttr(), ::mlir::FloatAttr(),
            ::mlir::UnitAttr());
    }]>,
    OpBuilder<(ins "::mlir::Type":$output, "::mlir::Value":$input, "::mlir::Value":$weight,
                   "::mlir::Value":$bias, "::mlir::Value":$scales,
                   "::dsc::tfm::Parallelism":$parallel), [{
      build($_builder, $_state, output, input, weight, bias, scales, ::mlir::Value(),
            ::mlir::Value(), ::mlir::Value(),
            ::dsc::tfm::ParallelismAttr::get($_builder.getContext(), parallel),
            ::dsc::tfm::ActivationKindAttr(), ::mlir::UnitAttr(), ::dsc::tfm::NormKindAttr(),
            ::mlir::FloatAttr(), ::mlir::UnitAttr());
    }]>
  ];
}

def Tfm_ActivationOp : Tfm_Op<"activation", [Pure, SameOperandsAndResultType]> {
  let summary = "an elementwise activation function";
  let arguments = (ins Tfm_ActivationKindAttr:$kind, Tfm_FloatTensor:$input);
  let results = (outs Tfm_FloatTensor:$output);
  let assemblyFormat = "$kind $input attr-dict `:` type($input)";
}

def Tfm_GatedActOp : Tfm_Op<"gated_act", [Pure, SameOperandsAndResultType]> {
  let summary = "gated MLP activation: act(gate) * up (SwiGLU, GeGLU, ReGLU)";
  let arguments = (ins Tfm_ActivationKindAttr:$kind, Tfm_FloatTensor:$gate,
                   Tfm_FloatTensor:$up);
  let results = (outs Tfm_FloatTensor:$output);
  let assemblyFormat = "$kind $gate `,` $up attr-dict `:` type($gate)";
}

def Tfm_GatedActPackedOp : Tfm_Op<"gated_act_packed", [Pure]> {
  let summary = "gated activation of a joined gate-up projection: act(gate) * up";
  let description = [{
    `input` is [..., 2n]: each row's first n features are the gate, the last n the up
    projection (dsc-fuse-projections' joined [gate; up] linear). The result is [..., n],
    act(input[..., :n]) * input[..., n:], what `tfm.gated_act` computes from the two halves,
    without splitting them first.
  }];
  let arguments = (ins Tfm_ActivationKindAttr:$kind, Tfm_FloatTensor:$input);
  let results = (outs Tfm_FloatTensor:$output);
  let assemblyFormat = "$kind $input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

def Tfm_ResidualAddOp : Tfm_Op<"residual_add", [Pure, Commutative, SameOperandsAndResultType]> {
  let summary = "a + b, the residual connection of a block";
  let arguments = (ins Tfm_FloatTensor:$lhs, Tfm_FloatTensor:$rhs);
  let results = (outs Tfm_FloatTensor:$output);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs)";
}

//===----------------------------------------------------------------------===//
// Attention.
//===----------------------------------------------------------------------===//

def Tfm_AttentionOp : Tfm_Op<"attention", [Pure, AttrSizedOperandSegments]> {
  let summary = "multi-head (grouped-, multi-query) scaled dot-product attention";
  let description = [{
    `query` is [b, s, num_heads * head_dim]; `key` and `value` are the new keys and values,
    [b, s_kv, num_kv_heads * head_dim]. Query heads are split into num_kv_heads groups that
    share a key/value head (num_heads % num_kv_heads == 0).

    Optional operands:
    * `mask`: a padding mask [b, total] (integer or i1, nonzero = attend), or an additive
      float mask [b or 1, num_heads or 1, s, total], where total = past + s_kv.
    * `past(key, value)`: the cache of earlier steps, [b, num_kv_heads, past, head_dim] each.
    * `positions`: [b, s] integer positions of the query tokens, needed by rotary embeddings
      (explicit per sequence, so left-padded batches stay correct).
    * `bias`: an additive float bias [b or 1, num_heads or 1, s, total] computed in the
      graph, added to the scores beside the mask (T5's relative position bias). Under
      tensor parallelism it may hold every head of the model (`tfm.global_heads`), of which
      a rank reads its own.
    * `sinks`: GPT-OSS's attention sinks, [num_heads] f32, a learned logit per head that
      joins every row's softmax as one more key with no value: the denominator gains
      exp(sink_h - m), with m the maximum over the row's scores and the sink, and the
      weights of the keys sum to less than 1. A row with no key to attend is zero. Under
      tensor parallelism it may hold every head of the model (`tfm.global_heads`), of which
      a rank reads its own (as `bias`).

    The keys and values may come from another sequence than the queries (a cross-attention
    over an encoder's output): then s_kv differs from s, and there is no past, causal mask,
    window or rotary embedding. Under tensor parallelism, keys and values read from a graph
    input (a cross-attention's cache) may hold every KV head (`tfm.global_kv_heads`), of
    which a rank reads its own.

    With `packed_qkv`, query, key and value are one tensor, the output of a joined Q, K and
    V projection: [b, s, (num_heads + 2 * num_kv_heads) * head_dim], each row holding the
    queries, then the keys, then the values (under tensor parallelism, the rank's). No
    Split copies them apart.

    With `qk_norm` (Qwen3's and Gemma-3's q_norm and k_norm), every head of the query and
    of the new keys is RMS-normalised over its head_dim features with epsilon
    `qk_norm_epsilon` and multiplied by `query_norm_scale` / `key_norm_scale` ([head_dim]
    each), before the rotary embedding. The cache holds the normalised keys. With
    `qk_norm_after_rotary` as well (HunYuan-Dense's query_layernorm and key_layernorm,
    which follow its rotary embedding), the scales multiply the rotated features instead:
    each head is normalised, rotated (which keeps its mean square), then scaled; only with
    scales of [head_dim].

    Results: the output [b, s, num_heads * head_dim] and, optionally, the present key and
    value [b, num_kv_heads, past + s_kv, head_dim] (past and new, as the exporters return
    them). After lowering, the runtime's KV cache layer `cache_layer` holds them in place.
    With `cache_dtype` (f16 or bf16, only with `cache_layer`; absent: the cache is f32),
    that layer holds them rounded to that type, and the attention reads every key and
    value as stored, the new ones included. The result may be f16 or bf16 where the inputs
    are f32 (the plan's activation dtype, dsc-activation-dtype): computed in f32 and
    rounded once.

    Scores are scale * q.k, soft-capped to softcap * tanh(scores / softcap) when `softcap`
    is set (Gemma-2's attn_logit_softcapping), then (+ ALiBi bias, + bias, + mask), restricted to
    the causal triangle and to the keys less than `window` positions away when set (before
    the query under the causal mask, on either side without it: ModernBERT's local layers),
    softmax over the keys.
  }];
  let arguments = (ins Tfm_FloatTensor:$query, Tfm_FloatTensor:$key, Tfm_FloatTensor:$value,
                   Optional<AnyRankedTensor>:$mask, Variadic<Tfm_FloatTensor>:$past,
                   Optional<Tfm_IdsTensor>:$positions, Optional<Tfm_FloatTensor>:$bias,
                   Optional<Tfm_FloatTensor>:$query_norm_scale,
                   Optional<Tfm_FloatTensor>:$key_norm_scale,
                   Optional<Tfm_FloatTensor>:$sinks,
                   ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                   ConfinedAttr<I64Attr, [IntPositive]>:$num_kv_heads,
                   ConfinedAttr<I64Attr, [IntPositive]>:$head_dim,
                   F32Attr:$scale,
                   UnitAttr:$causal,
                   UnitAttr:$alibi,
                   OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$window,
                   OptionalAttr<Tfm_RotaryAttr>:$rotary,
                   OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$cache_layer,
                   OptionalAttr<F32Attr>:$softcap, UnitAttr:$packed_qkv,
                   OptionalAttr<F32Attr>:$qk_norm_epsilon,
                   OptionalAttr<TypeAttr>:$cache_dtype,
                   UnitAttr:$qk_norm_after_rotary);
  let results = (outs Tfm_FloatTensor:$output, Variadic<Tfm_FloatTensor>:$present);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` $mask^)? (`past` `(` $past^ `)`)?
    (`positions` $positions^)? (`bias` $bias^)?
    (`qk_norm` `(` $query_norm_scale^ `,` $key_norm_scale `)` `eps` $qk_norm_epsilon)?
    (`after_rotary` $qk_norm_after_rotary^)? (`sinks` $sinks^)?
    `heads` $num_heads `kv_heads` $num_kv_heads `head_dim` $head_dim `scale` $scale
    (`causal` $causal^)? (`alibi` $alibi^)? (`window` $window^)? (`rotary` $rotary^)?
    (`cache_layer` $cache_layer^)? (`cache_dtype` $cache_dtype^)? (`softcap` $softcap^)?
    (`packed_qkv` $packed_qkv^)?
    attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let builders = [
    // Without soft-capping, q/k norms and sinks (the form before they existed). A pass that
    // rebuilds an attention must carry `softcap`, `packed_qkv`, the q/k norm and the sinks
    // over itself.
    OpBuilder<(ins "::mlir::Type":$output, "::mlir::TypeRange":$present, "::mlir::Value":$query,
                   "::mlir::Value":$key, "::mlir::Value":$value, "::mlir::Value":$mask,
                   "::mlir::ValueRange":$past, "::mlir::Value":$positions,
                   "::mlir::Value":$bias, "::mlir::IntegerAttr":$num_heads, "::mlir::IntegerAttr":$num_kv_heads,
                   "::mlir::IntegerAttr":$head_dim, "::mlir::FloatAttr":$scale,
                   "::mlir::UnitAttr":$causal, "::mlir::UnitAttr":$alibi,
                   "::mlir::IntegerAttr":$window, "::dsc::tfm::RotaryAttr":$rotary,
                   "::mlir::IntegerAttr":$cache_layer), [{
      build($_builder, $_state, output, present, query, key, value, mask, past, positions,
            bias, ::mlir::Value(), ::mlir::Value(), ::mlir::Value(), num_heads, num_kv_heads, head_dim, scale,
            causal, alibi, window, rotary, cache_layer, ::mlir::FloatAttr(), ::mlir::UnitAttr(),
            ::mlir::FloatAttr(), ::mlir::TypeAttr());
    }]>
  ];
}

//===----------------------------------------------------------------------===//
// Collectives and the LM head.
//===----------------------------------------------------------------------===//

def Tfm_AllReduceOp : Tfm_Op<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "sum of the operand over `ranks` tensor-parallel ranks";
  let arguments = (ins Tfm_FloatTensor:$input, ConfinedAttr<I64Attr, [IntPositive]>:$ranks);
  let results = (outs Tfm_FloatTensor:$output);
  let assemblyFormat = "$input `ranks` $ranks attr-dict `:` type($input)";
}

def Tfm_AllGatherOp : Tfm_Op<"all_gather", [AllElementTypesMatch<["input", "output"]>]> {
  let summary = "concatenation of the ranks' operands along `axis`";
  let description = [{
    Without `sizes`, every rank contributes the same extent along `axis`. With `sizes` (one
    entry per rank, for uneven splits such as a vocabulary that does not divide the rank
    count), rank r contributes sizes[r] and the result has their sum.
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$axis,
                   ConfinedAttr<I64Attr, [IntPositive]>:$ranks,
                   OptionalAttr<DenseI64ArrayAttr>:$sizes);
  let results = (outs AnyRankedTensor:$output);
  let assemblyFormat = [{
    $input `axis` $axis `ranks` $ranks (`sizes` $sizes^)? attr-dict `:` type($input) `->`
    type($output)
  }];
  let hasVerifier = 1;
}

def Tfm_LmHeadOp : Tfm_Op<"lm_head", [Pure]> {
  let summary = "logits: hidden [..., hidden] times weight^T ([vocab, hidden])";
  let description = [{
    With `vocab_size`, the weight holds the rows [vocab_offset, vocab_offset + rows) of a
    vocabulary of `vocab_size` tokens (a TP shard), and so do the logits. An int8 weight
    comes with `scales` [vocab rows, groups], as tfm.linear's.

    The logit epilogue (dsc-fuse-logit-epilogue): each logit z becomes s = z · `logit_scale`
    (Granite's 1 / logits_scaling, Cohere's logit_scale), then, with `logit_cap`,
    cap · tanh(s / cap) (Gemma-2's and NanoChat's final soft-capping). Both absent: z.

    `int8_activations` (an int8 weight only; dsc-quantize-weights sets it on an int4 plan's
    int8 head): the kernels may quantize the hidden rows to int8, as the plan's int4 layers'
    inputs are (docs/int4.md), so that the head's products take VNNI dot products.
  }];
  let arguments = (ins Tfm_FloatTensor:$hidden, RankedTensorOf<[AnyFloat, I8, UI<4>]>:$weight,
                   Optional<Tfm_FloatTensor>:$scales,
                   DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$vocab_offset,
                   OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$vocab_size,
                   OptionalAttr<F32Attr>:$logit_scale, OptionalAttr<F32Attr>:$logit_cap,
                   UnitAttr:$int8_activations);
  let results = (outs Tfm_FloatTensor:$logits);
  let assemblyFormat = [{
    $hidden `,` $weight (`scales` $scales^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Mixture of experts.
//===----------------------------------------------------------------------===//

def Tfm_MoeOp : Tfm_Op<"moe", [Pure, AttrSizedOperandSegments]> {
  let summary = "a mixture-of-experts MLP: each token's top-k experts, weighted by its router";
  let description = [{
    `input` [..., hidden] and `router_logits` [..., experts] (the router's linear layer,
    which stays a tfm.linear). Per token: scores = `scoring`(logits) (softmax over the
    experts, or a sigmoid of each); the `top_k` highest scores choose the experts, and with
    `normalize` they are divided by their sum. The result is the sum over the chosen
    experts e of score_e * down_e(act(gate_e(x)) * up_e(x)), added in expert order.

    With `swiglu_limit` (GPT-OSS's clamped SwiGLU) the product act(gate) * up is, per
    intermediate feature, (clamp(up, -limit, limit) + 1) * g * sigmoid(`swiglu_alpha` * g)
    with g = min(gate, limit); `activation` is then `silu`, the sigmoid-weighted unit that
    alpha scales. Both attributes come together, read from the export's constants.

    The experts' weights are stacked in torch's [out, in] layout, expert after expert:
    `gate_up` [experts * 2 * inter, hidden], each expert's gate rows then its up rows (a
    gated linear's joined [gate; up] weight), and `down` [experts * hidden, inter]. The
    biases, where the experts have them, are stacked the same way: `gate_up_bias`
    [experts * 2 * inter] and `down_bias` [experts * hidden].

    A shared expert (Qwen2-MoE's), which every token runs, comes as `shared_gate_up`
    [2 * shared_inter, hidden] ([gate; up]), `shared_down` [hidden, shared_inter] and its
    gate's weight `shared_gate` [1, hidden]: the result adds
    sigmoid(x . shared_gate^T) * shared_down(act(gate(x)) * up(x)).

    int8 and int4 (ui4) experts (dsc-quantize-weights) come with `gate_up_scales` and
    `down_scales` [rows, groups] in the input's type, as tfm.linear's scales, stacked expert
    after expert.

    Under expert parallelism (dsc-tp-shard with expert-parallel) rank r holds experts
    [`rank_expert_offsets`[r], +`rank_experts`[r]) whole, and the weights (rank 0's in the
    IR) only those; each rank routes every token, runs the chosen experts it holds, and a
    tfm.all_reduce sums the ranks' results.

    Under tensor parallelism every expert is split as a dense MLP and the ranks' partial
    sums are all-reduced: the down bias (weighted by the token's score, so it cannot wait
    for the reduce) is then added by rank `down_bias_rank` only, so that the sum holds it
    once. Without the attribute every rank adds the down biases it holds.

    dsc-recognize-moe produces it from an export that computes every expert and weights
    it by its column of the routing weights (docs/transformer-ops.md, "Mixture of
    experts"). Kernels compute only the chosen experts: decode reads k of them.
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$router_logits,
                   RankedTensorOf<[AnyFloat, I8, UI<4>]>:$gate_up,
                   RankedTensorOf<[AnyFloat, I8, UI<4>]>:$down,
                   Optional<Tfm_FloatTensor>:$gate_up_bias,
                   Optional<Tfm_FloatTensor>:$down_bias,
                   Optional<RankedTensorOf<[AnyFloat]>>:$shared_gate_up,
                   Optional<RankedTensorOf<[AnyFloat]>>:$shared_down,
                   Optional<RankedTensorOf<[AnyFloat]>>:$shared_gate,
                   Optional<Tfm_FloatTensor>:$gate_up_scales,
                   Optional<Tfm_FloatTensor>:$down_scales,
                   ConfinedAttr<I64Attr, [IntPositive]>:$top_k,
                   Tfm_RouterScoringAttr:$scoring, UnitAttr:$normalize,
                   Tfm_ActivationKindAttr:$activation,
                   OptionalAttr<DenseI64ArrayAttr>:$rank_experts,
                   OptionalAttr<DenseI64ArrayAttr>:$rank_expert_offsets,
                   OptionalAttr<F32Attr>:$swiglu_alpha,
                   OptionalAttr<F32Attr>:$swiglu_limit,
                   OptionalAttr<I64Attr>:$down_bias_rank);
  let results = (outs Tfm_FloatTensor:$output);
  let assemblyFormat = [{
    $input `,` $router_logits `,` $gate_up `,` $down
    (`bias` `(` $gate_up_bias^ `,` $down_bias `)`)?
    (`shared` `(` $shared_gate_up^ `,` $shared_down `,` $shared_gate `)`)?
    (`scales` `(` $gate_up_scales^ `,` $down_scales `)`)?
    `top_k` $top_k `scoring` $scoring
    (`normalize` $normalize^)? `activation` $activation
    (`swiglu` `alpha` $swiglu_alpha^ `limit` $swiglu_limit)? attr-dict
    `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumExperts() {
      return ::llvm::cast<::mlir::RankedTensorType>(getRouterLogits().getType()).getShape().back();
    }
  }];
}

#endif
