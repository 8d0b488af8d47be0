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
    attributes) and its results' arena offsets. Kernel selection (dsc-select-kernels) then
    records on each step the generated GPU kernels it launches (`kernels`, a list of
    `#plan.kernel`) or why it has none (`kernel_decline`), and on the module the
    architectures to build them for (`plan.kernel_archs`) and the sampling kernel
    (`plan.sampling_kernel`). The plan writer serialises the module as the plan file
    (docs/design.md §4), compiling the kernels the attributes name.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
    // Module attributes that dsc-select-kernels sets.
    static constexpr ::llvm::StringLiteral kKernelArchsAttr = "plan.kernel_archs";
    static constexpr ::llvm::StringLiteral kSamplingKernelAttr = "plan.sampling_kernel";
  }];
}

class Plan_Op<string mnemonic, list<Trait> traits = []>
    : Op<Plan_Dialect, mnemonic, traits>;

class Plan_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Plan_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif
