// dsc-fuse-logit-epilogue: an LM head's logits divided (or multiplied) by a constant become
// its `logit_scale` (Granite's logits_scaling, the factors composing); Gemma-2's
// 30 * tanh(logits / 30) becomes its `logit_cap` (the Div before the Tanh is the scale, and
// the cap multiplies it back to 1); under tensor parallelism through the all-gather of a
// vocabulary-parallel head. Declined (remarks): logits with other readers, a negative cap.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-logit-epilogue=remarks --verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @granite
// CHECK: %[[L:.*]] = tfm.lm_head %arg0, %arg1 {logit_scale = 1.250000e-01 : f32}
// CHECK-NOT: onnx.
// CHECK: return %[[L]]
func.func @granite(%h: tensor<1x?x8xf32>, %w: tensor<16x8xf32>) -> tensor<1x?x16xf32> {
  %c = onnx.Constant {value = dense<4.0> : tensor<f32>} : tensor<f32>
  %d = onnx.Constant {value = dense<0.5> : tensor<1xf32>} : tensor<1xf32>
  %l = tfm.lm_head %h, %w : (tensor<1x?x8xf32>, tensor<16x8xf32>) -> tensor<1x?x16xf32>
  %q = onnx.Div %l, %c : (tensor<1x?x16xf32>, tensor<f32>) -> tensor<1x?x16xf32>
  %m = onnx.Mul %d, %q : (tensor<1xf32>, tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
  return %m : tensor<1x?x16xf32>
}

// -----

// CHECK-LABEL: func.func @gemma2
// CHECK: %[[L:.*]] = tfm.lm_head %arg0, %arg1 {logit_cap = 3.000000e+01 : f32}
// CHECK-NOT: onnx.
// CHECK: return %[[L]]
func.func @gemma2(%h: tensor<1x?x8xf32>, %w: tensor<16x8xf32>) -> tensor<1x?x16xf32> {
  %c = onnx.Constant {value = dense<30.0> : tensor<f32>} : tensor<f32>
  %l = tfm.lm_head %h, %w : (tensor<1x?x8xf32>, tensor<16x8xf32>) -> tensor<1x?x16xf32>
  %q = onnx.Div %l, %c : (tensor<1x?x16xf32>, tensor<f32>) -> tensor<1x?x16xf32>
  %t = onnx.Tanh %q : (tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
  %m = onnx.Mul %t, %c : (tensor<1x?x16xf32>, tensor<f32>) -> tensor<1x?x16xf32>
  return %m : tensor<1x?x16xf32>
}

// -----

// A cap with no Div before it: c * tanh(z) is the cap c of z * c.
// CHECK-LABEL: func.func @cap_without_division
// CHECK: tfm.lm_head %arg0, %arg1 {logit_cap = 1.500000e+01 : f32, logit_scale = 1.500000e+01 : f32}
func.func @cap_without_division(%h: tensor<1x?x8xf32>, %w: tensor<16x8xf32>) -> tensor<1x?x16xf32> {
  %c = onnx.Constant {value = dense<15.0> : tensor<f32>} : tensor<f32>
  %l = tfm.lm_head %h, %w : (tensor<1x?x8xf32>, tensor<16x8xf32>) -> tensor<1x?x16xf32>
  %t = onnx.Tanh %l : (tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
  %m = onnx.Mul %c, %t : (tensor<f32>, tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
  return %m : tensor<1x?x16xf32>
}

// -----

// CHECK-LABEL: func.func @vocabulary_parallel
// CHECK: %[[L:.*]] = tfm.lm_head %arg0, %arg1 {logit_cap = 3.000000e+01 : f32, vocab_size = 32 : i64}
// CHECK: %[[G:.*]] = tfm.all_gather %[[L]] axis 2 ranks 2
// CHECK-NOT: onnx.
// CHECK: return %[[G]]
func.func @vocabulary_parallel(%h: tensor<1x?x8xf32>, %w: tensor<16x8xf32>) -> tensor<1x?x32xf32> {
  %c = onnx.Constant {value = dense<30.0> : tensor<f32>} : tensor<f32>
  %l = tfm.lm_head %h, %w {vocab_offset = 0 : i64, vocab_size = 32 : i64} : (tensor<1x?x8xf32>, tensor<16x8xf32>) -> tensor<1x?x16xf32>
  %g = tfm.all_gather %l axis 2 ranks 2 sizes [16, 16] : tensor<1x?x16xf32> -> tensor<1x?x32xf32>
  %q = onnx.Div %g, %c : (tensor<1x?x32xf32>, tensor<f32>) -> tensor<1x?x32xf32>
  %t = onnx.Tanh %q : (tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
  %m = onnx.Mul %t, %c : (tensor<1x?x32xf32>, tensor<f32>) -> tensor<1x?x32xf32>
  return %m : tensor<1x?x32xf32>
}

// -----

// The unscaled logits are returned too: the Div stays (no remark: the logits have two
// readers, so neither is the head's alone).
// CHECK-LABEL: func.func @logits_read_twice
// CHECK: tfm.lm_head %arg0, %arg1 :
// CHECK: onnx.Div
func.func @logits_read_twice(%h: tensor<1x?x8xf32>, %w: tensor<16x8xf32>) -> (tensor<1x?x16xf32>, tensor<1x?x16xf32>) {
  %c = onnx.Constant {value = dense<4.0> : tensor<f32>} : tensor<f32>
  %l = tfm.lm_head %h, %w : (tensor<1x?x8xf32>, tensor<16x8xf32>) -> tensor<1x?x16xf32>
  %q = onnx.Div %l, %c : (tensor<1x?x16xf32>, tensor<f32>) -> tensor<1x?x16xf32>
  return %q, %l : tensor<1x?x16xf32>, tensor<1x?x16xf32>
}

// -----

// A negative cap is no soft-capping: the Mul stays (the Div before it is the head's scale).
// CHECK-LABEL: func.func @negative_cap
// CHECK: tfm.lm_head %arg0, %arg1 {logit_scale = -2.000000e+00 : f32}
// CHECK: onnx.Tanh
// CHECK: onnx.Mul
func.func @negative_cap(%h: tensor<1x?x8xf32>, %w: tensor<16x8xf32>) -> tensor<1x?x16xf32> {
  %c = onnx.Constant {value = dense<-0.5> : tensor<f32>} : tensor<f32>
  %l = tfm.lm_head %h, %w : (tensor<1x?x8xf32>, tensor<16x8xf32>) -> tensor<1x?x16xf32>
  %q = onnx.Div %l, %c : (tensor<1x?x16xf32>, tensor<f32>) -> tensor<1x?x16xf32>
  %t = onnx.Tanh %q : (tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
  // expected-remark @below {{logit cap not fused: the cap is not one finite positive constant, or the LM head is capped already}}
  %m = onnx.Mul %t, %c : (tensor<1x?x16xf32>, tensor<f32>) -> tensor<1x?x16xf32>
  return %m : tensor<1x?x16xf32>
}
