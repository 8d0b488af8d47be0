#ifndef DSC_DIALECTS_PLAN_OPS_TD
#define DSC_DIALECTS_PLAN_OPS_TD

include "dialects/plan/IR/PlanBase.td"
include "dialects/plan/IR/PlanAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

//===----------------------------------------------------------------------===//
// Module-level declarations.
//===----------------------------------------------------------------------===//

def Plan_ProgramOp : Plan_Op<"program", [Symbol, IsolatedFromAbove, SingleBlock,
                                          HasParent<"::mlir::ModuleOp">]> {
  let summary = "a program of the plan: its ops run in order, once per call";
  let description = [{
    `@prefill` and `@decode` for decoders (the runtime keeps the KV cache between calls),
    `@forward` for encoders. The body is one block that ends with `plan.return`.

    ```mlir
    plan.program @decode {
      %ids = plan.input 0 "input_ids" {dims = ["batch", "sequence"], max_shape = array<i64: 4, 1>} : tensor<?x?xi64>
      ...
      plan.return {names = ["logits"]} %logits : tensor<?x?x?xf32>
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$region);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $region";
  let hasVerifier = 1;
  let builders = [
    // A program named `name` with an empty body block (no plan.return yet).
    OpBuilder<(ins "::llvm::StringRef":$name)>
  ];
}

def Plan_ReturnOp : Plan_Op<"return", [Pure, Terminator, ReturnLike, HasParent<"ProgramOp">]> {
  let summary = "the end of a program, with the tensors the caller reads (the generic path)";
  let arguments = (ins Variadic<AnyTensor>:$outputs, OptionalAttr<StrArrayAttr>:$names);
  let builders = [OpBuilder<(ins), [{ /* no outputs */ }]>];
  let assemblyFormat = "attr-dict ($outputs^ `:` type($outputs))?";
  let hasVerifier = 1;
}

def Plan_ArenaOp : Plan_Op<"arena", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "the activation arena: one allocation that activations are ranges of";
  let description = [{
    Sized by memory planning (dsc-plan-memory) for the compile-time limits (batch,
    sequence, total length). Every `plan.exec` result's `arena_offsets` entry is a multiple
    of `alignment`.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, ConfinedAttr<I64Attr, [IntPositive]>:$size,
                   ConfinedAttr<I64Attr, [IntPositivePowerOf2]>:$alignment);
  let assemblyFormat = "$sym_name `size` $size `align` $alignment attr-dict";
  let hasVerifier = 1;
}

include "dialects/plan/IR/PlanTensorOps.td"

#endif
