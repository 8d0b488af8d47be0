#ifndef DSC_DIALECTS_PLAN_ATTRS_TD
#define DSC_DIALECTS_PLAN_ATTRS_TD

include "dialects/plan/IR/PlanBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Types.
//===----------------------------------------------------------------------===//

def Plan_BufferType : TypeDef<Plan_Dialect, "Buffer"> {
  let mnemonic = "buffer";
  let summary = "a byte range of device memory (an arena range or a weight tensor)";
}

//===----------------------------------------------------------------------===//
// Enums.
//===----------------------------------------------------------------------===//

def Plan_RuntimeDimEnum : I32EnumAttr<"RuntimeDim",
    "a size that the runtime knows only when it runs a program", [
      I32EnumAttrCase<"batch", 0>,   // sequences in the batch
      I32EnumAttrCase<"seq", 1>,     // new tokens per sequence in this step
      I32EnumAttrCase<"past", 2>,    // tokens already in the KV cache
      I32EnumAttrCase<"total", 3>,   // past + seq
      I32EnumAttrCase<"tokens", 4>]> { // batch * seq
  let cppNamespace = "::dsc::plan";
  let genSpecializedAttr = 0;
}
def Plan_RuntimeDimAttr : EnumAttr<Plan_Dialect, Plan_RuntimeDimEnum, "dim">;

def Plan_EpilogueEnum : I32BitEnumAttr<"Epilogue",
    "what a GEMM applies to its result before storing it", [
      I32BitEnumAttrCaseNone<"none">,
      I32BitEnumAttrCaseBit<"bias", 0>,       // + bias[n]
      I32BitEnumAttrCaseBit<"gelu_erf", 1>,   // then an activation, at most one
      I32BitEnumAttrCaseBit<"gelu_tanh", 2>,
      I32BitEnumAttrCaseBit<"silu", 3>,
      I32BitEnumAttrCaseBit<"relu", 4>,
      I32BitEnumAttrCaseBit<"residual", 5>]> { // then + residual[m, n]
  let cppNamespace = "::dsc::plan";
  let genSpecializedAttr = 0;
  let separator = "|";
}
def Plan_EpilogueAttr : EnumAttr<Plan_Dialect, Plan_EpilogueEnum, "epilogue">;

#endif
