#ifndef DSC_DIALECTS_PLAN_BASE_TD
#define DSC_DIALECTS_PLAN_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Plan_Dialect : Dialect {
  let name = "plan";
  let cppNamespace = "::dsc::plan";
  let summary = "What the runtime executes: programs of kernel launches, GEMMs, collectives";
  let description = [{
    A module holds module-level declarations (activation arenas, generated kernels) and
    programs (`@prefill`, `@decode`, `@forward`) whose ops the runtime runs in order. Data
    lives in byte ranges: `plan.buffer` ranges of an arena (placed by memory planning) and
    `plan.weight` tensors of the rank's weight section. Sizes that depend on the batch, the
    sequence or the past length are `index` values derived from `plan.dim`, each with the
    compile-time limit that bounds it; the plan writer serialises everything as the plan
    file (DESIGN §4).
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
    void registerTypes();
  }];
}

class Plan_Op<string mnemonic, list<Trait> traits = []>
    : Op<Plan_Dialect, mnemonic, traits>;

#endif
