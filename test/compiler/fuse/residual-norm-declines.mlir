// What dsc-fuse-residual-norm refuses, and the reason it gives (remarks).
// RUN: dsc-opt %s --split-input-file --dsc-fuse-residual-norm=remarks --verify-diagnostics | FileCheck %s

// The sum is read before the norm, and the norm's scale is defined after the add: neither
// place for the fused norm dominates every use.
// CHECK-LABEL: func.func @scale_after_user
// CHECK: tfm.residual_add
// CHECK: tfm.rms_norm %{{[^ ]*}}, %{{[^ ]*}} eps
func.func @scale_after_user(%x: tensor<3x8xf32>, %r: tensor<3x8xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>) {
  %h = tfm.residual_add %x, %r : tensor<3x8xf32>
  %e = onnx.Neg %h : (tensor<3x8xf32>) -> tensor<3x8xf32>
  %s = tfm.weight "norm.weight" : tensor<8xf32> -> tensor<8xf32>
  // expected-remark @below {{residual add not fused into the norm: a user of the sum precedes the norm, whose parameters are defined after the add}}
  %n = tfm.rms_norm %h, %s eps 1.0e-6 : tensor<3x8xf32>, tensor<8xf32>
  return %n, %e : tensor<3x8xf32>, tensor<3x8xf32>
}

// -----

// A norm of something that is no residual add is no candidate: nothing is said.
// CHECK-LABEL: func.func @no_add
// CHECK: tfm.layer_norm %arg0, %{{[^ ]*}} eps
func.func @no_add(%x: tensor<3x8xf32>) -> tensor<3x8xf32> {
  %s = tfm.weight "norm.weight" : tensor<8xf32> -> tensor<8xf32>
  %n = tfm.layer_norm %x, %s eps 1.0e-5 : tensor<3x8xf32>, tensor<8xf32>
  return %n : tensor<3x8xf32>
}
