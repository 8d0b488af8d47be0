#ifndef DSC_COMPILER_PARALLEL_PASSES_TD
#define DSC_COMPILER_PARALLEL_PASSES_TD

include "mlir/Pass/PassBase.td"

def UnpackQkv : Pass<"dsc-unpack-qkv", "mlir::ModuleOp"> {
  let summary = "Give each part of a fused Q/K/V projection a projection of its own";
  let description = [{
    A `tfm.attention` whose query, key and value are parts of one fused projection that the
    export takes apart with reshapes, transposes, splits, slices and gathers (BLOOM's and
    GPT-NeoX's per-head [q, k, v] rows, GPTBigCode's [q | kv] split twice, Falcon's query
    heads followed by its key and value) reads three `tfm.linear`s instead, each over the
    rows of the weight and bias its part takes (a `#tfm.blocks` transform: what tp-shard
    selects for each part before sharding it). The plumbing and the fused projection go.
    Runs before tp-shard and quantization, and only with fusion: dsc-fuse-projections joins
    the parts again as [q; k; v] rows, which dsc-fuse-packed-qkv reads packed. Not for an
    attention already packed or whose operands are parts of one Split or Slices of one
    value (dsc-fuse-packed-qkv reads those as they are), a per-head fused projection with
    grouped KV heads, parts tp-shard cannot trace, and a fused result something else reads
    too (with the reason as remarks with `remarks`).
  }];
  let options = [
    Option<"remarks", "remarks", "bool", "false",
           "Emit a remark with the reason for every attention that is not unpacked">,
  ];
  let dependentDialects = ["dsc::onnx::OnnxDialect", "dsc::tfm::TfmDialect"];
}

def TpShard : Pass<"dsc-tp-shard", "mlir::ModuleOp"> {
  let summary = "Shard recognised transformer layers across tensor-parallel ranks";
  let description = [{
    docs/design.md §3.4, one program for every rank whose types are rank 0's shard (the
    largest: uneven splits give the remainder to the lowest ranks). In each function:

    * Attention: query heads are split in whole KV-head groups (when there are at least as
      many KV heads as ranks), else query heads are split and each rank keeps, replicated,
      the KV heads its query heads read. Q, K and V projections become column-parallel
      (a fused projection, GPT-2's [q|k|v] columns or BLOOM's per-head [q, k, v] rows, is
      unpacked into three); the attention gets each rank's heads (`tfm.rank_heads`,
      `tfm.rank_head_offsets`, `tfm.rank_kv_heads`, `tfm.rank_kv_head_offsets`) and the
      model's (`tfm.global_heads`, `tfm.global_kv_heads`); the output projection becomes
      row-parallel, then a tfm.all_reduce, then its bias (onnx.Add). Present key/values of
      the I/O cache are all-gathered along the head axis (only without replicated KV heads).
    * MLP: linear -> activation -> linear and the gated form: the first projections
      column-parallel, the last row-parallel with a tfm.all_reduce and its bias after.
    * LM head: split by vocabulary, logits all-gathered along the last axis.
    * Embeddings, norms, residuals and everything on the generic path stay replicated.

    A function with an attention that cannot be sharded (or none recognised) keeps every
    attention replicated, with a warning saying why; its MLPs and LM head are sharded all
    the same. The module gets `dsc.tp_ranks`, which gives the plan one weight section per
    rank.
  }];
  let options = [
    Option<"ranks", "ranks", "int64_t", "1", "The tensor-parallel degree">,
    Option<"expertParallel", "expert-parallel", "bool", "false",
           "Place each mixture of experts' whole experts on the ranks (dsc --ep) instead of "
           "splitting every expert">,
  ];
  let dependentDialects = ["dsc::onnx::OnnxDialect", "dsc::tfm::TfmDialect"];
}

#endif
