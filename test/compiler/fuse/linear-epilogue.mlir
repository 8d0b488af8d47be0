// dsc-fuse-linear-epilogue: a linear's activation, then a residual add of its result
// (either operand order), move into the linear; the add's other operand is the residual.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-linear-epilogue | FileCheck %s
// The dsc-fuse pipeline (both passes, dsc's order) does the same here: there is no norm.
// RUN: dsc-opt %s --split-input-file --dsc-fuse | FileCheck %s

// An MLP: fc1 -> gelu, fc2 + x. Both residual operand orders.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x5x8xf32>)
// CHECK: %[[H:.*]] = tfm.linear %[[X]], %{{.*}} bias %{{.*}} activation gelu_tanh : (tensor<2x5x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
// CHECK-NEXT: %[[Y:.*]] = tfm.linear %[[H]], %{{.*}} bias %{{.*}} residual %[[X]] : (tensor<2x5x16xf32>, tensor<8x16xf32>, tensor<8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: %[[Z:.*]] = tfm.linear %[[Y]], %{{.*}} residual %[[Y]] :
// CHECK-NEXT: return %[[Z]]
// CHECK-NOT: tfm.activation
// CHECK-NOT: tfm.residual_add
func.func @mlp(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  %w1 = tfm.weight "fc1" : tensor<16x8xf32> -> tensor<16x8xf32>
  %b1 = tfm.weight "fc1.bias" : tensor<16xf32> -> tensor<16xf32>
  %w2 = tfm.weight "fc2" : tensor<8x16xf32> -> tensor<8x16xf32>
  %b2 = tfm.weight "fc2.bias" : tensor<8xf32> -> tensor<8xf32>
  %w3 = tfm.weight "proj" : tensor<8x8xf32> -> tensor<8x8xf32>
  %h = tfm.linear %x, %w1 bias %b1 : (tensor<2x5x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %a = tfm.activation gelu_tanh %h : tensor<2x5x16xf32>
  %m = tfm.linear %a, %w2 bias %b2 : (tensor<2x5x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %y = tfm.residual_add %x, %m : tensor<2x5x8xf32>
  %p = tfm.linear %y, %w3 : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %z = tfm.residual_add %p, %y : tensor<2x5x8xf32>
  return %z : tensor<2x5x8xf32>
}

// -----

// Activation and residual together: act(x W^T) + r in one step. The residual is computed
// after the linear here; the linear moves down to the add so that it can read it.
// CHECK-LABEL: func.func @act_then_residual
// CHECK: %[[R:.*]] = onnx.Neg
// CHECK-NEXT: %[[Y:.*]] = tfm.linear %{{.*}}, %{{.*}} activation silu residual %[[R]] :
// CHECK-NEXT: return %[[Y]]
func.func @act_then_residual(%x: tensor<3x8xf32>, %s: tensor<3x8xf32>) -> tensor<3x8xf32> {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  %h = tfm.linear %x, %w : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  %a = tfm.activation silu %h : tensor<3x8xf32>
  %r = onnx.Neg %s : (tensor<3x8xf32>) -> tensor<3x8xf32>
  %y = tfm.residual_add %a, %r : tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// Every activation kind fuses, and a column-parallel linear (TP) takes its epilogue.
// CHECK-LABEL: func.func @kinds
// CHECK: activation gelu_erf
// CHECK: activation gelu_quick
// CHECK: activation relu
// CHECK: parallel column activation silu
// CHECK-NOT: tfm.activation
func.func @kinds(%x: tensor<3x8xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>) {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  %h1 = tfm.linear %x, %w : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  %a1 = tfm.activation gelu_erf %h1 : tensor<3x8xf32>
  %h2 = tfm.linear %x, %w : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  %a2 = tfm.activation gelu_quick %h2 : tensor<3x8xf32>
  %h3 = tfm.linear %x, %w : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  %a3 = tfm.activation relu %h3 : tensor<3x8xf32>
  %h4 = tfm.linear %x, %w parallel column : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  %a4 = tfm.activation silu %h4 : tensor<3x8xf32>
  return %a1, %a2, %a3, %a4 : tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>
}

// -----

// An activation read twice still fuses (the linear's only user was the activation); the
// residual add then declines, since the other reader needs the value without the residual.
// CHECK-LABEL: func.func @activation_used_twice
// CHECK: %[[H:.*]] = tfm.linear %{{.*}}, %{{.*}} activation relu :
// CHECK-NEXT: %[[Y:.*]] = tfm.residual_add %[[H]], %{{.*}}
// CHECK-NEXT: return %[[Y]], %[[H]]
func.func @activation_used_twice(%x: tensor<3x8xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>) {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  %h = tfm.linear %x, %w : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  %a = tfm.activation relu %h : tensor<3x8xf32>
  %y = tfm.residual_add %a, %x : tensor<3x8xf32>
  return %y, %a : tensor<3x8xf32>, tensor<3x8xf32>
}

// -----

// GPT-2's flattened projection: the activation of the reshaped result fuses (an elementwise
// function commutes with the reshape), the reshape stays.
// CHECK-LABEL: func.func @flattened
// CHECK: %[[H:.*]] = tfm.linear %{{.*}}, %{{.*}} activation gelu_tanh : (tensor<6x8xf32>, tensor<16x8xf32>) -> tensor<6x16xf32>
// CHECK-NEXT: %[[R:.*]] = onnx.Reshape %[[H]], %{{.*}} : (tensor<6x16xf32>, tensor<3xi64>) -> tensor<2x3x16xf32>
// CHECK-NEXT: return %[[R]]
func.func @flattened(%x: tensor<6x8xf32>, %shape: tensor<3xi64>) -> tensor<2x3x16xf32> {
  %w = tfm.weight "w" : tensor<16x8xf32> -> tensor<16x8xf32>
  %h = tfm.linear %x, %w : (tensor<6x8xf32>, tensor<16x8xf32>) -> tensor<6x16xf32>
  %r = onnx.Reshape %h, %shape : (tensor<6x16xf32>, tensor<3xi64>) -> tensor<2x3x16xf32>
  %a = tfm.activation gelu_tanh %r : tensor<2x3x16xf32>
  return %a : tensor<2x3x16xf32>
}

// -----

// An int8 linear (weight + scales) takes the activation, then the residual, like a float
// one: its kernels dequantize before the epilogue.
// CHECK-LABEL: func.func @int8
// CHECK: %[[Y:.*]] = tfm.linear %{{.*}}, %{{.*}} scales %{{.*}} activation silu residual %{{.*}} :
// CHECK-NOT: tfm.activation
// CHECK-NOT: tfm.residual_add
// CHECK: return %[[Y]]
func.func @int8(%x: tensor<3x8xf32>, %w: tensor<8x8xi8>, %scales: tensor<8x1xf32>) -> tensor<3x8xf32> {
  %h = tfm.linear %x, %w scales %scales : (tensor<3x8xf32>, tensor<8x8xi8>, tensor<8x1xf32>) -> tensor<3x8xf32>
  %a = tfm.activation silu %h : tensor<3x8xf32>
  %y = tfm.residual_add %a, %x : tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
