#ifndef DSC_COMPILER_LOWERING_PASSES_TD
#define DSC_COMPILER_LOWERING_PASSES_TD

include "mlir/Pass/PassBase.td"

def FoldConstants : Pass<"dsc-fold-constants", "mlir::ModuleOp"> {
  let summary = "Evaluate onnx ops whose inputs are all constants (shape arithmetic)";
  let description = [{
    Exporters compute shapes with Shape/Gather/Unsqueeze/Concat/Range chains. Where every
    input is a constant (or a Shape of a static shape), the op is evaluated with the
    runtime's reference kernels and replaced by an onnx.Constant, up to a size limit.
    No-ops go first: an Identity, or a Cast to the type its input already has, is replaced
    by its input (TorchScript shares equal initializers through Identity nodes, and casts
    f32 to f32 around norms), so that a recogniser sees the weight or value itself.
  }];
  let options = [
    Option<"maxElements", "max-elements", "int64_t", "1024",
           "Largest result (in elements) that is folded into an inline constant">,
  ];
  let dependentDialects = ["dsc::onnx::OnnxDialect"];
}

def LowerOnnxToPlan : Pass<"dsc-lower-onnx-to-plan", "mlir::ModuleOp"> {
  let summary = "Lower the onnx dialect's @main to a plan program of generic steps";
  let description = [{
    Every onnx op becomes a plan.exec of the same name (the runtime's op set), onnx.If a
    plan.if, weights plan.weight_tensor, constants plan.constant, graph inputs plan.input.
    Each tensor gets an upper-bound shape under the limits: symbolic dimensions named like
    a batch are bounded by max-batch, every other symbolic dimension by max-seq-len, and the
    bounds of all other tensors follow by evaluating the shapes of the graph at those bounds.
  }];
  let options = [
    Option<"maxBatch", "max-batch", "int64_t", "1", "Largest batch the plan accepts">,
    Option<"maxSeqLen", "max-seq-len", "int64_t", "128",
           "Largest sequence (and total, past + new) length the plan accepts">,
    Option<"maxTokensPerStep", "max-tokens-per-step", "int64_t", "0",
           "The rows of @step (the serving engine's tokens per step); 0: max-batch">,
    Option<"programName", "program", "std::string", "\"forward\"",
           "The name of the program (forward, prefill, decode)">,
    Option<"fitSeqLen", "fit-seq-len", "bool", "false",
           "max-seq-len was not asked for: lower it to what a graph without a cache runs "
           "(a learned position table), with a warning, instead of refusing">,
  ];
  let dependentDialects = ["dsc::plan::PlanDialect"];
}

def PlanMemory : Pass<"dsc-plan-memory", "mlir::ModuleOp"> {
  let summary = "Static memory plan: liveness-based arena offsets for every step result";
  let description = [{
    Each result of plan.exec and plan.if needs a slot of its upper-bound size (aligned to
    64 bytes) from its definition to its last use (uses inside plan.if branches extend a
    value's life to the end of the plan.if; program outputs live to the end). Slots are
    placed first-fit among those whose lives overlap, and the module gets one plan.arena
    @arena of the resulting size. A view (Reshape, Flatten, Squeeze, Unsqueeze, Identity, a
    Cast to the same element type) of another step's result in the same block shares that
    result's slot, live as long as either: the runtime then copies nothing for it, and the
    CUDA backend launches nothing.
  }];
  let dependentDialects = ["dsc::plan::PlanDialect"];
}

def SelectKernels : Pass<"dsc-select-kernels", "mlir::ModuleOp"> {
  let summary = "Choose each plan step's generated GPU kernels, by its op's rule";
  let description = [{
    For every plan.exec whose op has a kernel rule (codegen/kernels/*Rules.cpp, one rule per
    op of the onnx or tfm dialect), records the kernels the step launches as `kernels`, a
    list of `#plan.kernel<"template", CONSTANT = value, ...>` in its CUDA launcher's slot
    order, or why the rule chose none as `kernel_decline` (the step then runs on the CUDA
    backend's host fallback). A decoder with logits also gets the module's
    `plan.sampling_kernel`, and the module records `plan.kernel_archs`. The rules read the
    plan header that the plan writer would store (what the runtime sees: dtypes, static
    sizes, attributes, each weight's stored dtype), so the plan writer only compiles what
    the attributes say. With `arch=none` the plan is CPU-only: every kernel attribute is
    removed.
  }];
  let options = [
    Option<"arch", "arch", "std::string", "\"sm_80,sm_90\"",
           "GPU architectures the kernels are built for (comma list), or none">,
    Option<"weightDtype", "weight-dtype", "std::string", "\"fp32\"",
           "How float weights are stored (dsc --dtype, or int8's compute dtype): fp32, fp16 "
           "or bf16; the kernels read them so">,
  ];
  let dependentDialects = ["dsc::plan::PlanDialect", "dsc::onnx::OnnxDialect",
                           "dsc::tfm::TfmDialect"];
}

#endif
