// dsc-fuse-norm-prologue: a norm read only by a linear moves into the linear's prologue
// (`norm rms|layer (scale[, bias])`, with the norm's epsilon); through GPT-2's
// row-keeping reshape, whose shape reads then read the norm's input; what it declines, with
// the reason (remarks). In the pipeline it runs last: a norm that took a residual add stays.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-norm-prologue=remarks --verify-diagnostics | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-fuse | FileCheck %s --check-prefix=PIPELINE

// CHECK-LABEL: func.func @rms_into_linear
// CHECK: %[[S:.*]] = tfm.weight "ln.weight"
// CHECK: %[[Y:.*]] = tfm.linear %arg0, %{{[^ ]*}} parallel column norm rms(%[[S]]) {norm_epsilon = 9.99999997E-7 : f32} : (tensor<3x16xf32>, tensor<24x16xf32>, tensor<16xf32>) -> tensor<3x24xf32>
// CHECK-NEXT: return %[[Y]]
// CHECK-NOT: tfm.rms_norm
func.func @rms_into_linear(%x: tensor<3x16xf32>) -> tensor<3x24xf32> {
  %s = tfm.weight "ln.weight" : tensor<16xf32> -> tensor<16xf32>
  %w = tfm.weight "qkv" : tensor<24x16xf32> -> tensor<24x16xf32>
  %n = tfm.rms_norm %x, %s eps 1.0e-6 : tensor<3x16xf32>, tensor<16xf32>
  %y = tfm.linear %n, %w parallel column : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  return %y : tensor<3x24xf32>
}

// -----

// A layer norm with a bias, through a reshape of the rows (GPT-2's Conv1D); the Shape the
// export reads of the norm's result reads its input instead.
// CHECK-LABEL: func.func @layer_through_reshape
// CHECK: %[[S:.*]] = tfm.weight "ln.weight"
// CHECK: %[[B:.*]] = tfm.weight "ln.bias"
// CHECK: %[[SHAPE:.*]] = onnx.Shape %arg0 :
// CHECK: %[[R:.*]] = onnx.Reshape %arg0, %arg1 :
// CHECK: tfm.linear %[[R]], %{{[^ ]*}} norm layer(%[[S]], %[[B]]) {norm_epsilon = 9.99999974E-6 : f32}
// CHECK: return %{{[^ ]*}}, %[[SHAPE]]
// CHECK-NOT: tfm.layer_norm
func.func @layer_through_reshape(%x: tensor<2x3x16xf32>, %shape: tensor<2xi64>) -> (tensor<6x24xf32>, tensor<3xi64>) {
  %s = tfm.weight "ln.weight" : tensor<16xf32> -> tensor<16xf32>
  %b = tfm.weight "ln.bias" : tensor<16xf32> -> tensor<16xf32>
  %w = tfm.weight "fc" : tensor<24x16xf32> -> tensor<24x16xf32>
  %n = tfm.layer_norm %x, %s, %b eps 1.0e-5 : tensor<2x3x16xf32>, tensor<16xf32>, tensor<16xf32>
  %dims = "onnx.Shape"(%n) : (tensor<2x3x16xf32>) -> tensor<3xi64>
  %r = "onnx.Reshape"(%n, %shape) : (tensor<2x3x16xf32>, tensor<2xi64>) -> tensor<6x16xf32>
  %y = tfm.linear %r, %w : (tensor<6x16xf32>, tensor<24x16xf32>) -> tensor<6x24xf32>
  return %y, %dims : tensor<6x24xf32>, tensor<3xi64>
}

// -----

// The normalised value is also returned: it must exist.
// CHECK-LABEL: func.func @norm_read_twice
// CHECK: tfm.rms_norm
func.func @norm_read_twice(%x: tensor<3x16xf32>) -> (tensor<3x24xf32>, tensor<3x16xf32>) {
  %s = tfm.weight "ln.weight" : tensor<16xf32> -> tensor<16xf32>
  %w = tfm.weight "qkv" : tensor<24x16xf32> -> tensor<24x16xf32>
  %n = tfm.rms_norm %x, %s eps 1.0e-6 : tensor<3x16xf32>, tensor<16xf32>
  // expected-remark @below {{the norm of its input is not fused into its prologue: the norm's result has a reader that is not a linear layer, which would normalise again}}
  %y = tfm.linear %n, %w : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  return %y, %n : tensor<3x24xf32>, tensor<3x16xf32>
}

// -----

// A norm that adds a residual stores the sum, the block's residual stream: it stays.
// CHECK-LABEL: func.func @norm_with_residual
// CHECK: tfm.rms_norm
func.func @norm_with_residual(%x: tensor<3x16xf32>, %h: tensor<3x16xf32>) -> (tensor<3x24xf32>, tensor<3x16xf32>) {
  %s = tfm.weight "ln.weight" : tensor<16xf32> -> tensor<16xf32>
  %w = tfm.weight "qkv" : tensor<24x16xf32> -> tensor<24x16xf32>
  %n, %sum = tfm.rms_norm %x, %s residual %h eps 1.0e-6 : tensor<3x16xf32>, tensor<16xf32> residual tensor<3x16xf32> -> tensor<3x16xf32>
  // expected-remark @below {{the norm of its input is not fused into its prologue: the norm adds a residual and stores the sum (the block's residual stream), which the linear would have to write}}
  %y = tfm.linear %n, %w : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  return %y, %sum : tensor<3x24xf32>, tensor<3x16xf32>
}

// -----

// A Llama block's projections: alone, the pass gives each norm to the linears that read it
// (each normalises the rows itself); the pipeline joins q and k, and gate and up, then
// moves each norm into the joined linear that reads it (and the residual add into down).
// CHECK-LABEL: func.func @llama_projections
// CHECK-NOT: tfm.rms_norm
// CHECK-COUNT-4: tfm.linear %arg0, %{{[^ ]*}} norm rms(
// CHECK-NOT: tfm.rms_norm
// PIPELINE-LABEL: func.func @llama_projections
// PIPELINE-NOT: tfm.rms_norm
// PIPELINE: tfm.linear %arg0, %{{[^ ]*}} norm rms(%{{[^ ]*}}) {norm_epsilon
// PIPELINE: onnx.Split
// PIPELINE: tfm.linear %arg0, %{{[^ ]*}} activation silu gated norm rms(%{{[^ ]*}}) {norm_epsilon
// PIPELINE: tfm.linear %{{[^ ]*}}, %{{[^ ]*}} residual %arg0
// PIPELINE-NOT: tfm.rms_norm
func.func @llama_projections(%x: tensor<3x16xf32>) -> (tensor<3x16xf32>, tensor<3x16xf32>, tensor<3x16xf32>) {
  %s1 = tfm.weight "ln1" : tensor<16xf32> -> tensor<16xf32>
  %s2 = tfm.weight "ln2" : tensor<16xf32> -> tensor<16xf32>
  %wq = tfm.weight "q" : tensor<16x16xf32> -> tensor<16x16xf32>
  %wk = tfm.weight "k" : tensor<16x16xf32> -> tensor<16x16xf32>
  %wg = tfm.weight "gate" : tensor<24x16xf32> -> tensor<24x16xf32>
  %wu = tfm.weight "up" : tensor<24x16xf32> -> tensor<24x16xf32>
  %wd = tfm.weight "down" : tensor<16x24xf32> -> tensor<16x24xf32>
  %n1 = tfm.rms_norm %x, %s1 eps 1.0e-6 : tensor<3x16xf32>, tensor<16xf32>
  %q = tfm.linear %n1, %wq : (tensor<3x16xf32>, tensor<16x16xf32>) -> tensor<3x16xf32>
  %k = tfm.linear %n1, %wk : (tensor<3x16xf32>, tensor<16x16xf32>) -> tensor<3x16xf32>
  %n2 = tfm.rms_norm %x, %s2 eps 1.0e-6 : tensor<3x16xf32>, tensor<16xf32>
  %g = tfm.linear %n2, %wg : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  %u = tfm.linear %n2, %wu : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  %a = tfm.gated_act silu %g, %u : tensor<3x24xf32>
  %d = tfm.linear %a, %wd : (tensor<3x24xf32>, tensor<16x24xf32>) -> tensor<3x16xf32>
  %r = tfm.residual_add %d, %x : tensor<3x16xf32>
  return %q, %k, %r : tensor<3x16xf32>, tensor<3x16xf32>, tensor<3x16xf32>
}

// -----

// A parallel block (Cohere's): one norm feeds the attention's Q, K and V and the MLP's gate
// and up. The pipeline joins Q, K and V apart from gate and up, which become one gated
// linear (no Split, no activation step), and both joined linears normalise their input
// themselves: the norm is gone.
// PIPELINE-LABEL: func.func @parallel_block
// PIPELINE-NOT: tfm.layer_norm
// PIPELINE: %[[QKV:.*]] = tfm.linear %arg0, %{{[^ ]*}} norm layer(
// PIPELINE: onnx.Split %[[QKV]]
// PIPELINE: tfm.linear %arg0, %{{[^ ]*}} activation silu gated norm layer(
// PIPELINE-NOT: tfm.gated_act
// PIPELINE-NOT: tfm.layer_norm
func.func @parallel_block(%x: tensor<3x16xf32>) -> (tensor<3x16xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x24xf32>) {
  %s = tfm.weight "ln" : tensor<16xf32> -> tensor<16xf32>
  %b = tfm.weight "ln.bias" : tensor<16xf32> -> tensor<16xf32>
  %wq = tfm.weight "q" : tensor<16x16xf32> -> tensor<16x16xf32>
  %wk = tfm.weight "k" : tensor<8x16xf32> -> tensor<8x16xf32>
  %wv = tfm.weight "v" : tensor<8x16xf32> -> tensor<8x16xf32>
  %wg = tfm.weight "gate" : tensor<24x16xf32> -> tensor<24x16xf32>
  %wu = tfm.weight "up" : tensor<24x16xf32> -> tensor<24x16xf32>
  %n = tfm.layer_norm %x, %s, %b eps 1.0e-5 : tensor<3x16xf32>, tensor<16xf32>, tensor<16xf32>
  %q = tfm.linear %n, %wq : (tensor<3x16xf32>, tensor<16x16xf32>) -> tensor<3x16xf32>
  %k = tfm.linear %n, %wk : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  %v = tfm.linear %n, %wv : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  %g = tfm.linear %n, %wg : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  %u = tfm.linear %n, %wu : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  %a = tfm.gated_act silu %g, %u : tensor<3x24xf32>
  return %q, %k, %v, %a : tensor<3x16xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x24xf32>
}
