// What dsc-fuse-linear-epilogue refuses, and the reason it gives (remarks).
// RUN: dsc-opt %s --split-input-file --dsc-fuse-linear-epilogue=remarks --verify-diagnostics | FileCheck %s

// The linear's result is read by the activation and by something else: the other reader
// needs it without the activation.
// CHECK-LABEL: func.func @linear_used_twice
// CHECK: tfm.linear %{{[^ ]*}}, %{{[^ ]*}} :
// CHECK: tfm.activation gelu_erf
func.func @linear_used_twice(%x: tensor<3x8xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>) {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  %h = tfm.linear %x, %w : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  // expected-remark @below {{not fused into the linear's epilogue: the linear's result has another user, which needs it without the activation}}
  %a = tfm.activation gelu_erf %h : tensor<3x8xf32>
  return %a, %h : tensor<3x8xf32>, tensor<3x8xf32>
}

// -----

// The same for a residual: the linear's result is also returned.
// CHECK-LABEL: func.func @residual_linear_used_twice
// CHECK: tfm.residual_add
func.func @residual_linear_used_twice(%x: tensor<3x8xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>) {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  %h = tfm.linear %x, %w : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  // expected-remark @below {{not fused into the linear's epilogue: rhs: the linear's result has another user, which needs it without the residual}}
  %y = tfm.residual_add %x, %h : tensor<3x8xf32>
  return %y, %h : tensor<3x8xf32>, tensor<3x8xf32>
}

// -----

// Tensor parallelism: the row-parallel projection is a partial sum until its all-reduce;
// the residual (and the bias) come after the collective, which nothing is fused across.
// CHECK-LABEL: func.func @row_parallel
// CHECK: tfm.linear {{.*}} parallel row
// CHECK-NEXT: tfm.all_reduce
// CHECK-NEXT: tfm.residual_add
func.func @row_parallel(%x: tensor<3x8xf32>, %s: tensor<3x4xf32>) -> tensor<3x8xf32> {
  %w = tfm.weight "w" : tensor<8x8xf32> [#tfm.shard<axis = 1, offsets = [0, 4], sizes = [4, 4], groups = 1>] -> tensor<8x4xf32>
  %p = tfm.linear %s, %w parallel row : (tensor<3x4xf32>, tensor<8x4xf32>) -> tensor<3x8xf32>
  %r = tfm.all_reduce %p ranks 2 : tensor<3x8xf32>
  // expected-remark @below {{not fused into the linear's epilogue: lhs: the linear is row-parallel: the residual is added after its tfm.all_reduce (nothing is fused across a collective)}}
  %y = tfm.residual_add %r, %x : tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// A row-parallel linear followed directly by an activation (no all-reduce between: not
// what tp-shard makes, but the partial sum must not be activated either).
// CHECK-LABEL: func.func @row_parallel_activation
// CHECK: tfm.activation relu
func.func @row_parallel_activation(%s: tensor<3x4xf32>) -> tensor<3x8xf32> {
  %w = tfm.weight "w" : tensor<8x8xf32> [#tfm.shard<axis = 1, offsets = [0, 4], sizes = [4, 4], groups = 1>] -> tensor<8x4xf32>
  %p = tfm.linear %s, %w parallel row : (tensor<3x4xf32>, tensor<8x4xf32>) -> tensor<3x8xf32>
  // expected-remark @below {{not fused into the linear's epilogue: the linear is row-parallel: its result is a partial sum until the tfm.all_reduce, and the activation must come after it (nothing is fused across a collective)}}
  %a = tfm.activation relu %p : tensor<3x8xf32>
  return %a : tensor<3x8xf32>
}

// -----

// A broadcasting add of a linear's result stays a generic onnx.Add: the epilogue's residual
// has the result's shape.
// CHECK-LABEL: func.func @broadcast
// CHECK: onnx.Add
func.func @broadcast(%x: tensor<2x3x8xf32>, %bias: tensor<1x1x8xf32>) -> tensor<2x3x8xf32> {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  %h = tfm.linear %x, %w : (tensor<2x3x8xf32>, tensor<8x8xf32>) -> tensor<2x3x8xf32>
  // expected-remark @below {{not fused into the linear's epilogue: the add broadcasts (its operands' shapes differ from the linear's result); the epilogue adds a residual of the result's shape only}}
  %y = onnx.Add %h, %bias : (tensor<2x3x8xf32>, tensor<1x1x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// An activation after a linear that already adds a residual would have to come before it.
// CHECK-LABEL: func.func @activation_after_residual
// CHECK: tfm.activation relu
func.func @activation_after_residual(%x: tensor<3x8xf32>) -> tensor<3x8xf32> {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  %h = tfm.linear %x, %w residual %x : (tensor<3x8xf32>, tensor<8x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  // expected-remark @below {{not fused into the linear's epilogue: the linear already adds a residual, which the activation would have to precede}}
  %a = tfm.activation relu %h : tensor<3x8xf32>
  return %a : tensor<3x8xf32>
}

// -----

// GPT-2's flattened projection (Reshape -> linear -> Reshape back) adds its residual in the
// 3-D shape: the residual is flattened to the linear's [rows, features] (a view) and added
// in the epilogue, and the reshape back, now of the sum, is the add's result.
// CHECK-LABEL: func.func @flattened_residual
// CHECK: %[[G:.*]] = tfm.linear %arg0
// CHECK: %[[SHAPE:.*]] = onnx.Constant {value = dense<[-1, 8]> : tensor<2xi64>}
// CHECK: %[[FLAT:.*]] = onnx.Reshape %[[G]], %[[SHAPE]] : (tensor<2x3x8xf32>, tensor<2xi64>) -> tensor<6x8xf32>
// CHECK: %[[H:.*]] = tfm.linear %arg1, %{{[^ ]*}} residual %[[FLAT]] :
// CHECK: %[[Y:.*]] = onnx.Reshape %[[H]], %arg2
// CHECK-NOT: tfm.residual_add
// CHECK: return %[[Y]], %[[G]]
func.func @flattened_residual(%x: tensor<2x3x8xf32>, %flat: tensor<6x8xf32>, %shape: tensor<3xi64>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>) {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  %h = tfm.linear %flat, %w : (tensor<6x8xf32>, tensor<8x8xf32>) -> tensor<6x8xf32>
  %r = onnx.Reshape %h, %shape : (tensor<6x8xf32>, tensor<3xi64>) -> tensor<2x3x8xf32>
  %g = tfm.linear %x, %w : (tensor<2x3x8xf32>, tensor<8x8xf32>) -> tensor<2x3x8xf32>
  %y = tfm.residual_add %r, %g : tensor<2x3x8xf32>
  return %y, %g : tensor<2x3x8xf32>, tensor<2x3x8xf32>
}

// -----

// A reshape that regroups the features (rows of 8 into rows of 24) cannot take a residual
// of the linear's rows. Both operands' reasons are given.
// CHECK-LABEL: func.func @regrouped_residual
// CHECK: tfm.residual_add
func.func @regrouped_residual(%x: tensor<2x24xf32>, %flat: tensor<6x8xf32>, %shape: tensor<2xi64>) -> (tensor<2x24xf32>, tensor<2x24xf32>) {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  %w24 = tfm.weight "w24" : tensor<24x24xf32> -> tensor<24x24xf32>
  %h = tfm.linear %flat, %w : (tensor<6x8xf32>, tensor<8x8xf32>) -> tensor<6x8xf32>
  %r = onnx.Reshape %h, %shape : (tensor<6x8xf32>, tensor<2xi64>) -> tensor<2x24xf32>
  %g = tfm.linear %x, %w24 : (tensor<2x24xf32>, tensor<24x24xf32>) -> tensor<2x24xf32>
  // expected-remark @below {{not fused into the linear's epilogue: lhs: the linear's result is reshaped before the add into other rows than [.., its features]; rhs: the linear's result has another user, which needs it without the residual}}
  %y = tfm.residual_add %r, %g : tensor<2x24xf32>
  return %y, %g : tensor<2x24xf32>, tensor<2x24xf32>
}
