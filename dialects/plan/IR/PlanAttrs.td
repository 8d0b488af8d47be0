#ifndef DSC_DIALECTS_PLAN_ATTRS_TD
#define DSC_DIALECTS_PLAN_ATTRS_TD

include "dialects/plan/IR/PlanBase.td"

def Plan_KernelAttr : Plan_Attr<"Kernel", "kernel"> {
  let summary = "a generated GPU kernel: a template specialised by named integer constants";
  let description = [{
    `kind` names the template (codegen/kernels/<kind>.cuh); each constant becomes one
    `#define NAME value` line before it, in order, so the order is part of the kernel's
    identity (and of its name, `<kind>_<NAME><value>...`). dsc-select-kernels chooses them;
    the plan writer only specialises and compiles what they say.

    ```mlir
    #plan.kernel<"rms_norm", HIDDEN = 64, SCALE_DT = 1, RESIDUAL = 0, BLOCK = 32>
    ```
  }];
  let parameters = (ins StringRefParameter<"the template">:$kind,
                        ArrayRefParameter<"::mlir::StringAttr", "constant names">:$names,
                        ArrayRefParameter<"int64_t", "constant values">:$values);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Plan_KernelArrayAttr : TypedArrayAttrBase<Plan_KernelAttr, "generated kernels">;

#endif
