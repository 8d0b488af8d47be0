// RUN: dsc-opt %s | dsc-opt | FileCheck %s
// The module-level plan ops, printed and parsed back: the arena and every program the
// runtime runs (the tensor ops are tensor-ops.mlir's). dsc-plan-memory and dsc-lower-to-plan
// produce every op the dialect declares (test/compiler/lower-to-plan.onnxtxt,
// plan-memory.mlir); there is none that nothing produces.

// CHECK-LABEL: module
module {
  // CHECK: plan.arena @arena size 1048576 align 256
  plan.arena @arena size 1048576 align 256
  // CHECK: plan.program @prefill {
  // CHECK-NEXT: plan.return
  plan.program @prefill {
    plan.return
  }
  // CHECK: plan.program @decode {
  // CHECK: plan.return {names = ["ids"]} %{{.*}} : tensor<?x?xi64>
  plan.program @decode {
    %ids = plan.input 0 "input_ids" {dims = ["batch", "sequence"], max_shape = array<i64: 4, 1>} : tensor<?x?xi64>
    plan.return {names = ["ids"]} %ids : tensor<?x?xi64>
  }
  // CHECK: plan.program @forward
  plan.program @forward {
    plan.return
  }
  // CHECK: plan.program @encode
  plan.program @encode {
    plan.return
  }
  // CHECK: plan.program @prefill_greedy
  plan.program @prefill_greedy {
    plan.return
  }
  // CHECK: plan.program @decode_greedy
  plan.program @decode_greedy {
    plan.return
  }
}
