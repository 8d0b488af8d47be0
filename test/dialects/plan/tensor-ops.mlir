// The generic path's tensor ops round-trip.
// RUN: dsc-opt %s | dsc-opt | FileCheck %s

// CHECK-LABEL: plan.program @forward
plan.program @forward {
  // CHECK: %[[IDS:.*]] = plan.input 0 "input_ids" {dims = ["batch", "sequence"], max_shape = array<i64: 4, 128>} : tensor<?x?xi64>
  %ids = plan.input 0 "input_ids" {dims = ["batch", "sequence"], max_shape = array<i64: 4, 128>} : tensor<?x?xi64>
  // CHECK: %[[W:.*]] = plan.weight_tensor "wte" : tensor<300x64xf32>
  %w = plan.weight_tensor "wte" : tensor<300x64xf32>
  // CHECK: %[[Q:.*]] = plan.weight_tensor "q" : tensor<64x32xf32>
  // CHECK: %[[K:.*]] = plan.weight_tensor "k" : tensor<16x32xf32>
  // CHECK: plan.weight_concat %[[Q]], %[[K]] : (tensor<64x32xf32>, tensor<16x32xf32>) -> tensor<80x32xf32>
  %q = plan.weight_tensor "q" : tensor<64x32xf32>
  %k = plan.weight_tensor "k" : tensor<16x32xf32>
  %qk = plan.weight_concat %q, %k : (tensor<64x32xf32>, tensor<16x32xf32>) -> tensor<80x32xf32>
  // CHECK: plan.constant {value = dense<0> : tensor<i64>} : tensor<i64>
  %c = plan.constant {value = dense<0> : tensor<i64>} : tensor<i64>
  // CHECK: plan.none
  %n = plan.none
  // CHECK: %[[E:.*]] = plan.exec "Gather"(%[[W]], %[[IDS]]) {arena_offsets = array<i64: 0>, attrs = {axis = 0 : i64}, max_shapes = [array<i64: 4, 128, 64>]} : (tensor<300x64xf32>, tensor<?x?xi64>) -> tensor<?x?x64xf32>
  %e = plan.exec "Gather"(%w, %ids) {attrs = {axis = 0 : i64}, max_shapes = [array<i64: 4, 128, 64>], arena_offsets = array<i64: 0>} : (tensor<300x64xf32>, tensor<?x?xi64>) -> tensor<?x?x64xf32>
  // CHECK: plan.exec "Clip"(%[[E]], %{{.*}}, %{{.*}}) : (tensor<?x?x64xf32>, none, none) -> tensor<?x?x64xf32>
  %clipped = plan.exec "Clip"(%e, %n, %n) : (tensor<?x?x64xf32>, none, none) -> tensor<?x?x64xf32>
  // CHECK: plan.return {names = ["hidden"]} %{{.*}} : tensor<?x?x64xf32>
  plan.return {names = ["hidden"]} %clipped : tensor<?x?x64xf32>
}
