#ifndef DSC_COMPILER_FUSE_PASSES_TD
#define DSC_COMPILER_FUSE_PASSES_TD

include "mlir/Pass/PassBase.td"

// Fusion (docs/design.md §3.6): ops that follow a tfm op elementwise move into it, so that one
// plan step (one kernel on the GPU) does the work of several. The fused forms are in
// docs/transformer-ops.md ("Fusion"); the CPU backend runs them with its reference kernels.

def FuseEmbeddingScale : Pass<"dsc-fuse-embedding-scale", "mlir::ModuleOp"> {
  let summary = "Gather an embedding's rows already multiplied by a constant";
  let description = [{
    An `onnx.Mul` of a `tfm.embedding`'s result and a constant (a scalar or a splat: Gemma's
    sqrt(hidden_size), Granite's embedding_multiplier), or an `onnx.Div` of it by one,
    becomes the embedding's `scale` (factors compose): its rows are gathered and
    multiplied in one step, and the table keeps its values (it is often the tied LM head).
    Under tensor parallelism the product of the vocabulary-parallel embedding's
    `tfm.all_reduce` folds the same way (the factor scales each rank's rows before the
    sum). Declined for a factor that is not one finite nonzero constant, and for rows (or
    the all-reduce's) that something else reads too (remarks with `remarks`).
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every candidate that is not fused">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect"];
}

def FuseLogitEpilogue : Pass<"dsc-fuse-logit-epilogue", "mlir::ModuleOp"> {
  let summary = "Scale and soft-cap the logits in the LM head that computes them";
  let description = [{
    An `onnx.Mul` of a `tfm.lm_head`'s logits and a constant (a scalar or a splat: Cohere's
    logit_scale), or an `onnx.Div` of them by one (Granite's logits_scaling), becomes the
    head's `logit_scale` (factors compose); then `Mul(Tanh(logits), c)` (Gemma-2's and
    NanoChat's final soft-capping, whose Div by c is the scale before it) becomes its
    `logit_cap` c, the scale multiplied by c. Under tensor parallelism the logits may be
    the `tfm.all_gather` of a vocabulary-parallel head's (each rank's part is scaled and
    capped alike). The weight keeps its values (it is often the tied embedding). Declined
    for factors that are not one finite nonzero constant (a cap: positive), for logits that
    something else reads too, and after a cap (remarks with `remarks`).
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every candidate that is not fused">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect"];
}

def FuseQkNorm : Pass<"dsc-fuse-qk-norm", "mlir::ModuleOp"> {
  let summary = "Move q/k norms (per head or over all heads) into the attention that reads them";
  let description = [{
    A `tfm.attention` whose query and key are each a projection's [batch, seq, heads * d]
    result reshaped to heads of d features, `tfm.rms_norm`ed over them (between a
    Transpose that keeps the features last and its inverse, Gemma-3's [b, heads, s, d]
    form, or without one, Qwen3's) and reshaped back, reads the projections' results
    themselves with the norms' scales as `query_norm_scale` and `key_norm_scale` and their
    epsilon as `qk_norm_epsilon`: the attention normalises each head before its rotary
    embedding. So does one whose query and key are each a `tfm.rms_norm` over all of the
    projection's heads (OLMo-2's, scales [heads * d] and [kv_heads * d]): the attention
    normalises each token's heads together. The reshapes, transposes and norms go. Runs
    first, so that the projections then join and the attention reads them packed.
    Declined, with the reason (as remarks with `remarks`), for an attention that is packed,
    a cross-attention, a norm with a residual or other readers, a norm not over head_dim
    features or all heads, transposes that move the features or do not undo each other,
    reshapes that do not split whole heads, a query normalised per head and a key over all
    heads (or the other way), and query and key norms of different epsilons.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every attention with a norm that is not fused">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect", "dsc::onnx::OnnxDialect"];
}

def FusePostNormResidual : Pass<"dsc-fuse-post-norm-residual", "mlir::ModuleOp"> {
  let summary = "Let a sandwich norm add the residual to its result";
  let description = [{
    A `tfm.residual_add` or `onnx.Add` of a `tfm.rms_norm`'s result and another value of
    the same type (Gemma-2's and Gemma-3's post-attention and post-feedforward norms, whose
    result is added to the residual stream) becomes the norm with that value as its
    `post_residual`: one step (one kernel on the GPU) instead of two. Runs before
    dsc-fuse-residual-norm and dsc-fuse-norm-prologue, which leave such a norm alone.
    Declined, with the reason (as remarks with `remarks`), for a norm that adds a residual
    already, a norm whose result has other readers, an add that broadcasts, and a norm
    and an add in different blocks.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every add of a norm that is not fused">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect", "dsc::onnx::OnnxDialect"];
}

def FuseProjections : Pass<"dsc-fuse-projections", "mlir::ModuleOp"> {
  let summary = "Fuse the linear layers that read the same input into one";
  let description = [{
    `tfm.linear`s of one input (Q, K and V; gate and up; a parallel block's QKV and first
    MLP projection) become one linear over their weights joined by `tfm.concat_weights`
    (scales and biases alike), then an `onnx.Split` of its result into the old results:
    one weight read per step and one launch instead of several. When the two joined
    linears are a `tfm.gated_act`'s gate and up and nothing else reads them, the gated
    activation reads the joined result directly (`tfm.gated_act_packed`), without a
    Split; among more linears of one input (a parallel block's Q, K, V, gate and up:
    Cohere's), that pair is joined apart from the others, so that it becomes the gated
    linear and the attention reads its Q, K and V packed. Under TP each rank joins its
    own shards, so a column-parallel set stays column-parallel. Declined, with the reason
    (as remarks with `remarks`), for a row-parallel linear, one with an epilogue already,
    one whose weight, scales or bias is not a `tfm.weight`, one whose TP shard differs in
    size between ranks (the split would differ by rank), and between linears that differ
    in weight, scale or bias types, in-features, parallelism or result shape.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every candidate that is not fused">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect", "dsc::onnx::OnnxDialect"];
}

def FusePackedQkv : Pass<"dsc-fuse-packed-qkv", "mlir::ModuleOp"> {
  let summary = "Let an attention read its joined Q, K and V projection without a Split";
  let description = [{
    A `tfm.attention` whose query, key and value are results 0, 1 and 2 of one `onnx.Split`
    along the features of a [batch, seq, (heads + 2 kv_heads) * head_dim] value (the joined
    projection of dsc-fuse-projections, or GPT-2's c_attn), or three `onnx.Slice`s of it
    that take its features in order from the first (Phi-3's qkv_proj), reads that value as
    all three (`packed_qkv`), and the Split or the Slices go. A query multiplied by a
    positive constant first (OPT's) is read unscaled, the constant folded into `scale`. Runs after dsc-fuse-projections. Declined, with the
    reason (as remarks with `remarks`), for an attention with past inputs or a bias, parts
    of the Split with other users, parts not in the attention's widths and order, and
    tensor-parallel ranks whose head counts differ.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every attention that is not packed">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect", "dsc::onnx::OnnxDialect"];
}

def FuseLinearEpilogue : Pass<"dsc-fuse-linear-epilogue", "mlir::ModuleOp"> {
  let summary = "Move a linear layer's activation and residual add into its epilogue";
  let description = [{
    `tfm.activation` of a `tfm.linear`'s result becomes the linear's `activation`; then a
    `tfm.residual_add` of a linear's result (either operand) and another value becomes the
    linear's `residual` operand: act(x . W^T + b) + residual in one step. Declined, with
    the reason (as remarks with `remarks`): when the linear's result has another user (it
    would then need the value without the epilogue), for a row-parallel linear (its result is a partial sum; bias and residual come after the
    tfm.all_reduce, and nothing is fused across a collective), when the linear already has
    an activation or a residual that would have to come first, and when the residual does
    not have the result's shape (an `onnx.Add` that broadcasts).
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every candidate that is not fused">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect"];
}

def FuseGatedEpilogue : Pass<"dsc-fuse-gated-epilogue", "mlir::ModuleOp"> {
  let summary = "Move a gated activation into the joined gate-up linear that feeds it";
  let description = [{
    `tfm.gated_act_packed` of a `tfm.linear`'s result (the joined [gate; up] projection of
    dsc-fuse-projections) becomes that linear's `gated` epilogue: the linear computes
    act(gate) * up itself and its result is the half-width activation, one step (one
    kernel on the GPU) instead of two, and the [.., 2n] product is never stored. Runs after
    dsc-fuse-projections. Declined, with the reason (as remarks with `remarks`), when the
    linear's result has another user, when the linear already has an activation or a
    residual, and for a row-parallel linear.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every candidate that is not fused">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect"];
}

def FuseResidualNorm : Pass<"dsc-fuse-residual-norm", "mlir::ModuleOp"> {
  let summary = "Fold a residual add into the layer or RMS norm that reads it";
  let description = [{
    `tfm.layer_norm` / `tfm.rms_norm` of a `tfm.residual_add`'s result becomes the norm's
    residual form: the norm of lhs + rhs, with lhs + rhs as its second result, which also
    replaces every other use of the add (the block's residual stream). Runs after
    dsc-fuse-linear-epilogue, which claims the adds of a linear's result first. Declined,
    with the reason (as remarks with `remarks`), when the add and the norm are in different
    blocks, or when a user of the sum precedes the norm and the norm's parameters are
    defined after the add.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every candidate that is not fused">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect"];
}

def FuseNormPrologue : Pass<"dsc-fuse-norm-prologue", "mlir::ModuleOp"> {
  let summary = "Move a layer or RMS norm into the linear layer that reads it";
  let description = [{
    `tfm.rms_norm` / `tfm.layer_norm` whose only reader is a `tfm.linear`'s input (or an
    `onnx.Reshape` that keeps the rows' length and feeds only the linear: GPT-2's flattened
    Conv1D, which then reshapes the norm's input) becomes that linear's `norm` prologue (with the norm's scale, bias and epsilon): the linear
    normalises its input rows itself, and on the GPU a decode step's gemv does it in the
    rows it stages, so the norm launches nothing. Runs last, after dsc-fuse-residual-norm
    (a norm that adds a residual stays a norm: it stores the sum) and after the joined
    projections (one linear reads each norm, or, in a parallel block, the joined QKV and
    gate-up linears: each normalises the rows itself). Declined, with the reason (as
    remarks with `remarks`), for a norm with a residual, a norm read by anything but
    linears, and a linear that already normalises.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every candidate that is not fused">,
  ];
  let dependentDialects = ["dsc::tfm::TfmDialect"];
}

#endif
