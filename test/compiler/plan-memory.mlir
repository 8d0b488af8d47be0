// Memory planning: slots are 64-byte aligned, reused once their value is dead, kept alive
// through plan.if branches that read them, and the arena is as large as the peak.
// RUN: dsc-opt %s --dsc-plan-memory --split-input-file --verify-diagnostics | FileCheck %s

// CHECK: plan.arena @arena size 320 align 64
// CHECK: plan.program @forward
plan.program @forward {
  %x = plan.input 0 "x" {max_shape = array<i64: 16>} : tensor<?xf32>
  // 16 f32 = 64 bytes each. a and b are live together; c reuses a's slot once a is dead;
  // d needs a third slot while b and c are live.
  // CHECK: plan.exec "Relu"{{.*}}arena_offsets = array<i64: 0>
  %a = plan.exec "Relu"(%x) {max_shapes = [array<i64: 16>]} : (tensor<?xf32>) -> tensor<?xf32>
  // CHECK: plan.exec "Neg"{{.*}}arena_offsets = array<i64: 64>
  %b = plan.exec "Neg"(%a) {max_shapes = [array<i64: 16>]} : (tensor<?xf32>) -> tensor<?xf32>
  // CHECK: plan.exec "Add"{{.*}}arena_offsets = array<i64: 0>
  %c = plan.exec "Add"(%b, %b) {max_shapes = [array<i64: 16>]} : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  // 16 i64 = 128 bytes, after b and c; e then goes after d: the peak is 320 bytes.
  // CHECK: plan.exec "Cast"{{.*}}arena_offsets = array<i64: 128>
  %d = plan.exec "Cast"(%c) {attrs = {to = i64}, max_shapes = [array<i64: 16>]} : (tensor<?xf32>) -> tensor<?xi64>
  // CHECK: plan.exec "Mul"{{.*}}arena_offsets = array<i64: 256>
  %e = plan.exec "Mul"(%b, %c) {max_shapes = [array<i64: 16>]} : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  plan.return %d, %e : tensor<?xi64>, tensor<?xf32>
}

// -----

// A value read inside a branch lives until the reader runs; the if's own result has a slot
// that is live while the branches run.
// CHECK: plan.arena @arena size 192 align 64
// CHECK: plan.program @forward
plan.program @forward {
  %c = plan.input 0 "c" {max_shape = array<i64: 1>} : tensor<1xi1>
  %x = plan.input 1 "x" {max_shape = array<i64: 16>} : tensor<16xf32>
  // CHECK: plan.exec "Relu"{{.*}}arena_offsets = array<i64: 0>
  %a = plan.exec "Relu"(%x) {max_shapes = [array<i64: 16>]} : (tensor<16xf32>) -> tensor<16xf32>
  // CHECK: plan.if
  %r = plan.if %c : tensor<1xi1> -> (tensor<16xf32>) then {
    // CHECK: plan.exec "Neg"{{.*}}arena_offsets = array<i64: 128>
    %n = plan.exec "Neg"(%a) {max_shapes = [array<i64: 16>]} : (tensor<16xf32>) -> tensor<16xf32>
    plan.yield %n : tensor<16xf32>
  } else {
    plan.yield %a : tensor<16xf32>
  // CHECK: } {arena_offsets = array<i64: 64>
  } {max_shapes = [array<i64: 16>]}
  plan.return %r : tensor<16xf32>
}

// -----

plan.program @forward {
  %x = plan.input 0 "x" : tensor<16xf32>
  // expected-error @+1 {{has no max_shapes; run dsc-lower-onnx-to-plan first}}
  %a = plan.exec "Relu"(%x) : (tensor<16xf32>) -> tensor<16xf32>
  plan.return %a : tensor<16xf32>
}
