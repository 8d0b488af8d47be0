#ifndef DSC_COMPILER_RECOGNIZE_PASSES_TD
#define DSC_COMPILER_RECOGNIZE_PASSES_TD

include "mlir/Pass/PassBase.td"

// Recognition (docs/design.md §3.3): onnx subgraphs of the HuggingFace exports become tfm ops.
// What no pattern claims stays in the onnx dialect for the generic path.

def RecognizeLayers : Pass<"dsc-recognize-layers", "mlir::ModuleOp"> {
  let summary = "Recognise embeddings, norms, linear layers, activations, residual adds and "
                "the LM head";
  let description = [{
    First refines the importer's unranked types from the graph's shapes at six probes
    (batch, cached and new tokens), evaluated with the runtime's kernels. Then, greedily:
    Gather on a 2-D weight -> tfm.embedding; LayerNormalization and the decomposed layer
    and RMS norms (with fp16 Cast round trips) -> tfm.layer_norm / tfm.rms_norm; MatMul on a
    weight (+ bias Add), Gemm and GPT-2's Reshape-Gemm-Reshape -> tfm.linear with the weight
    transposed to [out, in] by a #tfm.transpose transform, and tfm.lm_head where the result
    is the graph's output; the elementwise subgraph around Erf, Tanh or Sigmoid, checked
    numerically against each activation, Relu and Gelu -> tfm.activation; act(linear) *
    linear -> tfm.gated_act; the Add of a block's output and an equal-typed value ->
    tfm.residual_add. Everything else stays onnx.
  }];
  let options = [
    Option<"reportDeclines", "report-declines", "bool", "false",
           "Emit a remark with the reason for every anchor op that stays generic">,
    Option<"missingNormEpsilon", "missing-norm-epsilon", "double", "0.0",
           "The epsilon of a decomposed norm whose variance goes straight into its Sqrt "
           "(torch's dynamo exporter drops an Add of a constant of 1e-8 or less): the "
           "model's configured one. 0, the default, keeps the graph's meaning">,
  ];
  let dependentDialects = ["dsc::onnx::OnnxDialect", "dsc::tfm::TfmDialect"];
}

def RecognizeAttention : Pass<"dsc-recognize-attention", "mlir::ModuleOp"> {
  let summary = "Recognise attention (masks, ALiBi, windows, rotary, GQA, past/present KV)";
  let description = [{
    Anchors on each Softmax whose input is MatMul(Q, K^T) under scalar scales, additive
    masks and Where-masks, and whose output feeds MatMul(P, V). The Q, K and V paths are
    followed back to the projections ([b, s, heads * d], a per-head view [b, s, n, d] or
    [b, n, s, d] of a fused one, or a norm over each head) and the past inputs; the output
    path forward to [b, s, hidden] (or [b * s, hidden] rows). It runs after
    dsc-recognize-layers. sdpa's Where(IsNaN(P), 0, P) guard after the softmax is part of
    the attention. Without a position_ids input, a rotation at past + t (transformers'
    positions when none are given) is recognised with positions computed from the mask's
    width, marked `dsc.implied_positions`, and so are the indices of a learned position
    table (tfm.embedding) that are past + t on the probe. Everything the structure suggests is then proven on a
    probe (batch 2, 5 cached and 7 new tokens, a left-padded row): the graph's own ops are
    run with the runtime's kernels from random Q/K/V/past seeds and compared with what
    tfm.attention computes, which gives the scale, the rotary embedding (layout, dim, base),
    GQA grouping, present outputs, and classifies the additive bias as padding mask
    (attention_mask), causal triangle, window and ALiBi. A causal match is probed again
    with many more tokens (up to 2048 keys, or the longest the graph runs; in a graph with a
    cache, also `longest-sequence` keys, the plan's limit, when that is longer, up to
    2^17) so that a window longer than the first probe cannot pass for none. Rows with no key to attend
    (left padding) are classified too: where the export averages only the causally
    visible values (GPT-Neo), the op gets `tfm.unattended = "causal"` (the kernel's
    `unattended` step attribute). A candidate that does not match exactly, or whose
    intermediate values are used elsewhere, is left generic. Masks, rotary tables and
    weights of up to 2^20 elements are read from the importer's weights when the pass is
    created with them (createRecognizeAttentionWithWeights); without (dsc-opt), what
    depends on them is declined.
  }];
  let options = [
    Option<"reportDeclines", "report-declines", "bool", "false",
           "Emit a remark with the reason for every Softmax that is not recognised">,
    Option<"longestSequence", "longest-sequence", "int64_t", "2048",
           "The most keys (cached and new tokens) the plan will attend: a window up to "
           "this long is measured, none longer can apply">,
  ];
  let dependentDialects = ["dsc::onnx::OnnxDialect", "dsc::tfm::TfmDialect"];
}

def RecognizeMoe : Pass<"dsc-recognize-moe", "mlir::ModuleOp"> {
  let summary = "Recognise mixture-of-experts MLPs computed over every expert";
  let description = [{
    Anchors on the products down_e(act(gate_e(x)) * up_e(x)) * routing[..., e:e+1] (after
    dsc-recognize-layers: the experts' gated MLPs are tfm ops, each over the same input),
    the column a Slice of width one or a Gather and Unsqueeze of the routing weights' last
    axis. Grouped by input and routing weights, the products must be summed by Adds that
    read nothing else, every expert once, the experts' weights of one shape and their
    activations one kind. The routing weights must come from one router, a tfm.linear of
    the same input with one feature per expert; what the ops between them compute is proven
    on a probe (random logits, two spreads): softmax or sigmoid, top-k, renormalised or not,
    whatever ops spell it. The block becomes one tfm.moe over the stacked experts' weights;
    the router stays a tfm.linear. Anything else is declined with its reason and stays
    generic (correct: it computes every expert).
  }];
  let options = [
    Option<"reportDeclines", "report-declines", "bool", "false",
           "Emit a remark with the reason for every expert sum that is not recognised">,
  ];
  let dependentDialects = ["dsc::onnx::OnnxDialect", "dsc::tfm::TfmDialect"];
}

def DeriveCachePrograms : Pass<"dsc-derive-cache-programs", "mlir::ModuleOp"> {
  let summary = "Derive the prefill and decode programs of a recognised decoder";
  let description = [{
    When every attention of @main is a causal tfm.attention with the padding mask of its
    tokens (found by role: the graph argument the self-attentions read; an export of the
    ids alone gets one) (a decoder whose attention was recognised in every layer), @main is
    cloned into @prefill and @decode: there every tfm.attention loses its past operands and
    present results and keeps its cache_layer (the session's KV cache, in place), the past
    inputs and present outputs leave the interface, and only the logits stay as output.
    @main keeps the export's interface (past/present in I/O mode) and loses cache_layer
    where it has no past.

    An encoder-decoder's decoder (an argument marked dsc.cross_states) qualifies too: its
    own padding mask is `decoder_attention_mask` where `attention_mask` is the encoder's;
    each cross-attention (keys computed from the encoder's output, not through another
    attention) keeps a cache layer of its own (`tfm.cross_keys`, the step's `cross`):
    prefill writes the encoder's keys there once, and in @decode its keys and values are
    an empty [batch, 0, features], so that decode neither takes the encoder's output nor
    reads the cross-attention's key and value weights. A bias computed from the token
    count alone (T5's relative positions) is computed, in @decode, for the mask's width
    and its last `new` query rows kept. Optimum's merged decoder (an onnx.If on
    use_cache_branch) gives @prefill from its branch without a cache and @decode from
    that branch, or where it cannot, from the branch with the cache. See
    docs/transformer-ops.md, "Programs".
  }];
  let options = [
    Option<"report", "report", "bool", "false",
           "Emit a remark saying why no prefill/decode programs were derived">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect", "mlir::func::FuncDialect"];
}

def DeriveStepProgram : Pass<"dsc-derive-step-program", "mlir::ModuleOp"> {
  let summary = "Derive the serving engine's step program from @decode";
  let description = [{
    The serving engine (docs/serving.md) runs a step as @decode with one token per row, from
    any mix of sequences. Only the rows that end a sequence's chunk are sampled, so @step is
    @decode whose LM head reads just those rows: a new input `logits_rows` (i64 [rows], row
    indices, each < the batch) gathers them before the final norm when the head reads a
    norm used by nothing else, else before the head, and the logits are [rows, 1, vocab].
    A prompt chunk then skips the vocabulary projection of all its rows but the last. Does
    nothing without @decode or a single tfm.lm_head, or when @step exists (dsc --serving).
  }];
  let dependentDialects = ["dsc::onnx::OnnxDialect", "dsc::tfm::TfmDialect",
                           "mlir::func::FuncDialect"];
}

def NarrowRepeatedKv : Pass<"dsc-narrow-repeated-kv", "mlir::ModuleOp"> {
  let summary = "Keys and values repeated across a group's query heads become one KV head "
                "per group";
  let description = [{
    An attention without past operands whose key and value are, through reshapes that keep
    each [batch, sequence] row's features in order, Expand(x) from x = [b, s, G, 1, d] to
    [b, s, G, R, d] (Falcon's new decoder architecture broadcasts each KV group's key and
    value to the group's query heads) reads x as its keys and values instead, with
    num_kv_heads divided by R: head h of the expanded keys is x's group h / R, which is the
    grouped-query attention's sharing. The session's cache then holds each group once (a
    factor R fewer bytes), tp-shard splits whole groups and dsc-unpack-qkv takes the fused
    projection apart. The session programs' attentions of one cache layer narrow together
    or not at all. An attention with past operands (the export's interface, whose past and
    presents hold each group's key R times, as its presents write them) reads the past's
    first copy of each group (a Slice of step R over the heads) and writes its presents as
    R copies again (Unsqueeze, Tile, Reshape), so that it shards as well. Runs after
    dsc-derive-cache-programs.
  }];
  let dependentDialects = ["dsc::onnx::OnnxDialect", "dsc::tfm::TfmDialect",
                           "mlir::func::FuncDialect"];
}

def WidenHalfPrecision : Pass<"dsc-widen-half-precision", "mlir::ModuleOp"> {
  let summary = "A graph exported in f16 or bf16 computes in f32 inside its interface";
  let description = [{
    Users export models in their own dtype (`model.half()` or a bf16 checkpoint before
    torch.onnx.export): every tensor, constant and Cast of the graph is then f16 or bf16,
    which the recognisers' probes, written for f32 graphs, cannot run. Every f16/bf16 result
    type, constant (`value` attributes) and Cast target becomes f32; graph inputs of a half
    type are cast to f32 where they enter and outputs back to their declared type where
    they leave, so the interface is the export's. Weights keep their stored bytes: the
    evaluator, the probes and the plan writer read a half weight declared f32 widened (the
    plan stores it in its own dtype unless --dtype says otherwise). The result computes what
    the graph does with less rounding, as the f32 model would. Nothing changes when a half
    constant's values cannot be read (a resource): the graph stays generic. Runs first.
  }];
  let dependentDialects = ["dsc::onnx::OnnxDialect", "mlir::func::FuncDialect"];
}

#endif
