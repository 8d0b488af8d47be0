// Gemma-2's logit soft-capping (`softcap` on tfm.attention) survives tensor-parallel sharding
// and fusion and reaches the plan step as the float attribute `softcap`
// (docs/transformer-ops.md); an attention without it (the second layer) gets no such
// attribute.
// RUN: dsc-opt %s --dsc-tp-shard=ranks=2 --dsc-fuse | FileCheck %s --check-prefix=TFM
// RUN: dsc-opt %s --dsc-tp-shard=ranks=2 --dsc-fuse --dsc-lower-onnx-to-plan="max-batch=2 max-seq-len=8" | FileCheck %s --check-prefix=PLAN
// RUN: dsc-opt %s --dsc-lower-onnx-to-plan="max-batch=2 max-seq-len=8" | FileCheck %s --check-prefix=PLAN

// TFM: tfm.attention {{.*}} heads 1 kv_heads 1 head_dim 4 scale 5.000000e-01 causal softcap 5.000000e+01 packed_qkv {{{.*}}tfm.rank_heads = [1, 1]
// TFM: tfm.attention {{.*}} heads 1 kv_heads 1 head_dim 4 scale 5.000000e-01 causal packed_qkv {{{.*}}tfm.rank_heads = [1, 1]
// TFM-NOT: softcap

// PLAN: plan.exec "tfm.attention"
// PLAN-SAME: softcap = 5.000000e+01 : f32
// PLAN: plan.exec "tfm.attention"
// PLAN-NOT: softcap
func.func @main(%x: tensor<2x5x8xf32> {onnx.name = "x"})
    -> (tensor<2x5x8xf32> {onnx.name = "y"}) {
  %wq = tfm.weight "q" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wk = tfm.weight "k" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wv = tfm.weight "v" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wo = tfm.weight "o" : tensor<8x8xf32> -> tensor<8x8xf32>
  %q = tfm.linear %x, %wq : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %k = tfm.linear %x, %wk : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %v = tfm.linear %x, %wv : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %a = tfm.attention %q, %k, %v heads 2 kv_heads 2 head_dim 4 scale 0.5 causal softcap 50.0
         : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %o = tfm.linear %a, %wo : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %h = tfm.residual_add %x, %o : tensor<2x5x8xf32>

  %wq2 = tfm.weight "q2" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wk2 = tfm.weight "k2" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wv2 = tfm.weight "v2" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wo2 = tfm.weight "o2" : tensor<8x8xf32> -> tensor<8x8xf32>
  %q2 = tfm.linear %h, %wq2 : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %k2 = tfm.linear %h, %wk2 : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %v2 = tfm.linear %h, %wv2 : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %a2 = tfm.attention %q2, %k2, %v2 heads 2 kv_heads 2 head_dim 4 scale 0.5 causal
         : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %o2 = tfm.linear %a2, %wo2 : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %y = tfm.residual_add %h, %o2 : tensor<2x5x8xf32>
  return %y : tensor<2x5x8xf32>
}
