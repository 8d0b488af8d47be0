// tp-shard on projections clamped before the attention (OLMo's clip_qkv: Clip of q, k and
// v between two scalar constants): the clamp acts on each feature alone, so each rank
// clamps its own heads' features (the Clip keeps the bounds, with the rank's type). A fused
// projection whose part is clamped is declined, with the reason.
// RUN: dsc-opt %s --split-input-file --dsc-tp-shard=ranks=2 2>&1 | FileCheck %s

// The second function's warning comes first (stderr).
// CHECK: warning: tp-shard: @fused_clipped: every attention stays replicated: this attention cannot be sharded: a part of a fused projection is computed by 'onnx.Clip'
// CHECK-NOT: @olmo: every attention stays replicated
// CHECK-LABEL: func.func @olmo
// CHECK: %[[Q:.*]] = tfm.linear %arg0, %{{.*}} parallel  column : (tensor<2x5x16xf32>, tensor<8x16xf32>) -> tensor<2x5x8xf32>
// CHECK: %[[QC:.*]] = onnx.Clip %[[Q]], %{{.*}}, %{{.*}} : (tensor<2x5x8xf32>, tensor<f32>, tensor<f32>) -> tensor<2x5x8xf32>
// CHECK: %[[K:.*]] = tfm.linear %arg0, %{{.*}} parallel  column
// CHECK: %[[KC:.*]] = onnx.Clip %[[K]]
// CHECK: %[[V:.*]] = tfm.linear %arg0, %{{.*}} parallel  column
// CHECK: %[[VC:.*]] = onnx.Clip %[[V]]
// CHECK: tfm.attention %[[QC]], %[[KC]], %[[VC]] heads 2 kv_heads 2 head_dim 4
// CHECK: tfm.linear {{.*}} parallel  row
func.func @olmo(%x: tensor<2x5x16xf32>) -> tensor<2x5x16xf32> {
  %wq = tfm.weight "q" : tensor<16x16xf32> -> tensor<16x16xf32>
  %wk = tfm.weight "k" : tensor<16x16xf32> -> tensor<16x16xf32>
  %wv = tfm.weight "v" : tensor<16x16xf32> -> tensor<16x16xf32>
  %wo = tfm.weight "o" : tensor<16x16xf32> -> tensor<16x16xf32>
  %lo = onnx.Constant {value = dense<-8.0> : tensor<f32>} : tensor<f32>
  %hi = onnx.Constant {value = dense<8.0> : tensor<f32>} : tensor<f32>
  %q = tfm.linear %x, %wq : (tensor<2x5x16xf32>, tensor<16x16xf32>) -> tensor<2x5x16xf32>
  %qc = "onnx.Clip"(%q, %lo, %hi) : (tensor<2x5x16xf32>, tensor<f32>, tensor<f32>) -> tensor<2x5x16xf32>
  %k = tfm.linear %x, %wk : (tensor<2x5x16xf32>, tensor<16x16xf32>) -> tensor<2x5x16xf32>
  %kc = "onnx.Clip"(%k, %lo, %hi) : (tensor<2x5x16xf32>, tensor<f32>, tensor<f32>) -> tensor<2x5x16xf32>
  %v = tfm.linear %x, %wv : (tensor<2x5x16xf32>, tensor<16x16xf32>) -> tensor<2x5x16xf32>
  %vc = "onnx.Clip"(%v, %lo, %hi) : (tensor<2x5x16xf32>, tensor<f32>, tensor<f32>) -> tensor<2x5x16xf32>
  %a = tfm.attention %qc, %kc, %vc heads 4 kv_heads 4 head_dim 4 scale 5.000000e-01 causal : (tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x16xf32>
  %o = tfm.linear %a, %wo : (tensor<2x5x16xf32>, tensor<16x16xf32>) -> tensor<2x5x16xf32>
  %y = tfm.residual_add %x, %o : tensor<2x5x16xf32>
  return %y : tensor<2x5x16xf32>
}

// -----

func.func @fused_clipped(%x: tensor<1x4x32xf32>, %mask: tensor<1x4xi64>) -> tensor<1x4x32xf32> {
  %w = tfm.weight "qkv" : tensor<96x32xf32> -> tensor<96x32xf32>
  %wo = tfm.weight "o" : tensor<32x32xf32> -> tensor<32x32xf32>
  %lo = onnx.Constant {value = dense<-8.0> : tensor<f32>} : tensor<f32>
  %hi = onnx.Constant {value = dense<8.0> : tensor<f32>} : tensor<f32>
  %none = onnx.NoValue
  %qkv = tfm.linear %x, %w : (tensor<1x4x32xf32>, tensor<96x32xf32>) -> tensor<1x4x96xf32>
  %c = "onnx.Clip"(%qkv, %lo, %hi) : (tensor<1x4x96xf32>, tensor<f32>, tensor<f32>) -> tensor<1x4x96xf32>
  %parts:3 = "onnx.Split"(%c, %none) {axis = 2 : i64} : (tensor<1x4x96xf32>, none) -> (tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4x32xf32>)
  %a = tfm.attention %parts#0, %parts#1, %parts#2 mask %mask heads 2 kv_heads 2 head_dim 16 scale 0.25 causal : (tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4xi64>) -> tensor<1x4x32xf32>
  %o = tfm.linear %a, %wo : (tensor<1x4x32xf32>, tensor<32x32xf32>) -> tensor<1x4x32xf32>
  %y = tfm.residual_add %x, %o : tensor<1x4x32xf32>
  return %y : tensor<1x4x32xf32>
}
