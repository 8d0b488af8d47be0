// dsc-fuse-post-norm-residual: the residual stream plus the RMS norm of a sublayer's output
// (Gemma-2's and Gemma-3's sandwich norms, an onnx.Add or a tfm.residual_add) becomes the norm
// with a `post_residual`; what it declines, with the reason (remarks). In the pipeline the
// next norm of the sum then moves into the next linear's prologue.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-post-norm-residual=remarks --verify-diagnostics | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-fuse | FileCheck %s --check-prefix=PIPELINE

// CHECK-LABEL: func.func @gemma_sandwich
// CHECK: %[[S:.*]] = tfm.weight "post_attention_layernorm"
// CHECK: %[[O:.*]] = tfm.linear %arg1,
// CHECK-NEXT: %[[SUM:.*]] = tfm.rms_norm %[[O]], %[[S]] post_residual %arg0 eps 9.99999997E-7 : tensor<1x?x16xf32>, tensor<16xf32> post_residual tensor<1x?x16xf32>
// CHECK-NOT: onnx.Add
// CHECK: tfm.rms_norm %[[SUM]], %{{[^ ]*}} eps
// PIPELINE-LABEL: func.func @gemma_sandwich
// PIPELINE: %[[SUM:.*]] = tfm.rms_norm %{{[^ ]*}}, %{{[^ ]*}} post_residual %arg0 eps
// PIPELINE-NEXT: tfm.linear %[[SUM]], %{{[^ ]*}} norm rms(
func.func @gemma_sandwich(%stream: tensor<1x?x16xf32>, %attn: tensor<1x?x32xf32>) -> tensor<1x?x24xf32> {
  %wo = tfm.weight "o" : tensor<16x32xf32> -> tensor<16x32xf32>
  %post = tfm.weight "post_attention_layernorm" : tensor<16xf32> -> tensor<16xf32>
  %pre = tfm.weight "pre_feedforward_layernorm" : tensor<16xf32> -> tensor<16xf32>
  %wup = tfm.weight "up" : tensor<24x16xf32> -> tensor<24x16xf32>
  %o = tfm.linear %attn, %wo : (tensor<1x?x32xf32>, tensor<16x32xf32>) -> tensor<1x?x16xf32>
  %n = tfm.rms_norm %o, %post eps 1.0e-6 : tensor<1x?x16xf32>, tensor<16xf32>
  %sum = "onnx.Add"(%stream, %n) : (tensor<1x?x16xf32>, tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
  %m = tfm.rms_norm %sum, %pre eps 1.0e-6 : tensor<1x?x16xf32>, tensor<16xf32>
  %up = tfm.linear %m, %wup : (tensor<1x?x16xf32>, tensor<24x16xf32>) -> tensor<1x?x24xf32>
  return %up : tensor<1x?x24xf32>
}

// -----

// A tfm.residual_add, the norm its second operand.
// CHECK-LABEL: func.func @residual_add
// CHECK: tfm.rms_norm %arg1, %{{[^ ]*}} post_residual %arg0 eps
// CHECK-NOT: tfm.residual_add
func.func @residual_add(%stream: tensor<2x16xf32>, %x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %s = tfm.weight "s" : tensor<16xf32> -> tensor<16xf32>
  %n = tfm.rms_norm %x, %s eps 1.0e-6 : tensor<2x16xf32>, tensor<16xf32>
  %sum = tfm.residual_add %stream, %n : tensor<2x16xf32>
  return %sum : tensor<2x16xf32>
}

// -----

// The norm's result is also returned: it must exist without the residual.
// CHECK-LABEL: func.func @norm_read_twice
// CHECK: tfm.rms_norm %arg1, %{{[^ ]*}} eps
// CHECK: onnx.Add
func.func @norm_read_twice(%stream: tensor<2x16xf32>, %x: tensor<2x16xf32>) -> (tensor<2x16xf32>, tensor<2x16xf32>) {
  %s = tfm.weight "s" : tensor<16xf32> -> tensor<16xf32>
  %n = tfm.rms_norm %x, %s eps 1.0e-6 : tensor<2x16xf32>, tensor<16xf32>
  // expected-remark @below {{the residual is not added by the norm: the norm's result has other readers, which need it without the residual}}
  %sum = "onnx.Add"(%stream, %n) : (tensor<2x16xf32>, tensor<2x16xf32>) -> tensor<2x16xf32>
  return %sum, %n : tensor<2x16xf32>, tensor<2x16xf32>
}

// -----

// An add that broadcasts the norm over a batch of streams: declined.
// CHECK-LABEL: func.func @broadcast
// CHECK: onnx.Add
func.func @broadcast(%stream: tensor<3x2x16xf32>, %x: tensor<2x16xf32>) -> tensor<3x2x16xf32> {
  %s = tfm.weight "s" : tensor<16xf32> -> tensor<16xf32>
  %n = tfm.rms_norm %x, %s eps 1.0e-6 : tensor<2x16xf32>, tensor<16xf32>
  // expected-remark @below {{the residual is not added by the norm: the add broadcasts}}
  %sum = "onnx.Add"(%stream, %n) : (tensor<3x2x16xf32>, tensor<2x16xf32>) -> tensor<3x2x16xf32>
  return %sum : tensor<3x2x16xf32>
}
