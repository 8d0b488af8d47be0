#ifndef DSC_DIALECTS_PLAN_BASE_TD
#define DSC_DIALECTS_PLAN_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Plan_Dialect : Dialect {
  let name = "plan";
  let cppNamespace = "::dsc::plan";
  let summary = "What the runtime executes: programs of steps over tensors in one arena";
  let description = [{
    A module holds the activation arena (`plan.arena`, sized by dsc-plan-memory) and the
    programs the runtime runs (`@prefill`, `@decode`, `@forward`, an encoder-decoder's
    `@encode`, and under tensor parallelism `@prefill_greedy` / `@decode_greedy`). A
    program's ops run in order: `plan.input`s, constants and weights
    (`plan.weight_tensor`, `plan.weight_concat`), and one `plan.exec` per step, which names
    the op the runtime's kernels implement (an ONNX op, or a recognised `tfm.*` op with its
    attributes) and its results' arena offsets. Kernel selection happens after: the plan
    writer attaches each step's generated kernels (codegen/AttachKernels.cpp), and
    `dsp-dump` and `dsp-roofline` show them. The plan writer serialises the module as the
    plan file (DESIGN §4).
  }];
}

class Plan_Op<string mnemonic, list<Trait> traits = []>
    : Op<Plan_Dialect, mnemonic, traits>;

#endif
