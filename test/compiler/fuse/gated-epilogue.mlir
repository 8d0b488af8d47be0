// dsc-fuse-gated-epilogue: a joined gate-up projection's gated activation moves into the
// linear (`gated`), whose result becomes the half-width activation; what it declines, with
// the reason (remarks). The pipeline joins gate and up first, then gates the joined linear.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-gated-epilogue=remarks --verify-diagnostics | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-fuse | FileCheck %s --check-prefix=PIPELINE

// CHECK-LABEL: func.func @packed
// CHECK: %[[Y:.*]] = tfm.linear %arg0, %{{[^ ]*}} bias %{{[^ ]*}} parallel column activation silu gated : (tensor<3x16xf32>, tensor<48x16xf32>, tensor<48xf32>) -> tensor<3x24xf32>
// CHECK-NEXT: return %[[Y]]
// CHECK-NOT: tfm.gated_act_packed
func.func @packed(%x: tensor<3x16xf32>) -> tensor<3x24xf32> {
  %w = tfm.weight "gate_up" : tensor<48x16xf32> -> tensor<48x16xf32>
  %b = tfm.weight "gate_up.bias" : tensor<48xf32> -> tensor<48xf32>
  %y = tfm.linear %x, %w bias %b parallel column : (tensor<3x16xf32>, tensor<48x16xf32>, tensor<48xf32>) -> tensor<3x48xf32>
  %a = tfm.gated_act_packed silu %y : tensor<3x48xf32> -> tensor<3x24xf32>
  return %a : tensor<3x24xf32>
}

// -----

// The joined product is also returned: it must exist unfused.
// CHECK-LABEL: func.func @product_used_twice
// CHECK: tfm.gated_act_packed
func.func @product_used_twice(%x: tensor<3x16xf32>) -> (tensor<3x24xf32>, tensor<3x48xf32>) {
  %w = tfm.weight "gate_up" : tensor<48x16xf32> -> tensor<48x16xf32>
  %y = tfm.linear %x, %w : (tensor<3x16xf32>, tensor<48x16xf32>) -> tensor<3x48xf32>
  // expected-remark @below {{not fused into the linear's epilogue: the linear's result has another user, which needs the joined product}}
  %a = tfm.gated_act_packed gelu_tanh %y : tensor<3x48xf32> -> tensor<3x24xf32>
  return %a, %y : tensor<3x24xf32>, tensor<3x48xf32>
}

// -----

// An activation already in the epilogue would have to come before the gating.
// CHECK-LABEL: func.func @already_activated
// CHECK: tfm.gated_act_packed
func.func @already_activated(%x: tensor<3x16xf32>) -> tensor<3x24xf32> {
  %w = tfm.weight "gate_up" : tensor<48x16xf32> -> tensor<48x16xf32>
  %y = tfm.linear %x, %w activation relu : (tensor<3x16xf32>, tensor<48x16xf32>) -> tensor<3x48xf32>
  // expected-remark @below {{not fused into the linear's epilogue: the linear already applies an activation}}
  %a = tfm.gated_act_packed silu %y : tensor<3x48xf32> -> tensor<3x24xf32>
  return %a : tensor<3x24xf32>
}

// -----

// Gate and up as two linears of one input (Llama's MLP): the pipeline joins them
// (dsc-fuse-projections), then gates the joined linear; the gate's rows come first.
// PIPELINE-LABEL: func.func @gate_and_up
// PIPELINE: %[[W:.*]] = tfm.concat_weights %{{[^ ,]*}}, %{{[^ ]*}} : (tensor<24x16xf32>, tensor<24x16xf32>) -> tensor<48x16xf32>
// PIPELINE-NEXT: %[[Y:.*]] = tfm.linear %arg0, %[[W]] activation silu gated : (tensor<3x16xf32>, tensor<48x16xf32>) -> tensor<3x24xf32>
// PIPELINE-NEXT: %[[D:.*]] = tfm.linear %[[Y]], %{{[^ ]*}} residual %arg0 :
// PIPELINE-NEXT: return %[[D]]
// PIPELINE-NOT: tfm.gated_act
func.func @gate_and_up(%x: tensor<3x16xf32>) -> tensor<3x16xf32> {
  %wg = tfm.weight "gate" : tensor<24x16xf32> -> tensor<24x16xf32>
  %wu = tfm.weight "up" : tensor<24x16xf32> -> tensor<24x16xf32>
  %wd = tfm.weight "down" : tensor<16x24xf32> -> tensor<16x24xf32>
  %g = tfm.linear %x, %wg : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  %u = tfm.linear %x, %wu : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  %a = tfm.gated_act silu %g, %u : tensor<3x24xf32>
  %d = tfm.linear %a, %wd : (tensor<3x24xf32>, tensor<16x24xf32>) -> tensor<3x16xf32>
  %r = tfm.residual_add %d, %x : tensor<3x16xf32>
  return %r : tensor<3x16xf32>
}
