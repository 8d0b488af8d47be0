// tp-shard on a tfm.moe whose experts have biases (GPT-OSS's): every expert split as a dense
// MLP, its gate and up biases with their rows, its down bias whole on every rank and added
// by rank 0 only (down_bias_rank), since it is weighted by the token's score and the ranks'
// partial sums are all-reduced. Under --ep each expert's biases go to its rank with it.
// RUN: dsc-opt %s --dsc-tp-shard=ranks=2 2>&1 | FileCheck %s --check-prefix=TP
// RUN: dsc-opt %s --dsc-tp-shard="ranks=2 expert-parallel=true" 2>&1 | FileCheck %s --check-prefix=EP

// TP-LABEL: func.func @gptoss_experts
// TP: %[[GU:.*]] = tfm.concat_weights {{.*}} : (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<8x8xf32>
// TP: %[[DN:.*]] = tfm.concat_weights {{.*}} : (tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<16x2xf32>
// TP: %[[GUB:.*]] = tfm.concat_weights {{.*}} : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<8xf32>
// TP: %[[MOE:.*]] = tfm.moe %arg0, %arg1, %[[GU]], %[[DN]] bias(%[[GUB]], %{{.*}}) {{.*}} swiglu alpha 1.702000e+00 limit 7.000000e+00 {down_bias_rank = 0 : i64} : (tensor<3x8xf32>, tensor<3x2xf32>, tensor<8x8xf32>, tensor<16x2xf32>, tensor<8xf32>, tensor<16xf32>) -> tensor<3x8xf32>
// TP: tfm.all_reduce %[[MOE]]
// TP-NOT: mixture of experts stays replicated

// EP-LABEL: func.func @gptoss_experts
// EP: %[[GUB:.*]] = tfm.concat_weights {{.*}} {rank_parts = array<i64: 0, 2, 2, 4>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
// EP: %[[DB:.*]] = tfm.concat_weights {{.*}} {rank_parts = array<i64: 0, 1, 1, 2>} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// EP: tfm.moe {{.*}} bias(%[[GUB]], %[[DB]]) {{.*}} {rank_expert_offsets = array<i64: 0, 1>, rank_experts = array<i64: 1, 1>}
// EP-NOT: down_bias_rank
func.func @gptoss_experts(%x: tensor<3x8xf32>, %logits: tensor<3x2xf32>) -> tensor<3x8xf32> {
  %g0 = tfm.weight "g0" : tensor<4x8xf32> -> tensor<4x8xf32>
  %u0 = tfm.weight "u0" : tensor<4x8xf32> -> tensor<4x8xf32>
  %g1 = tfm.weight "g1" : tensor<4x8xf32> -> tensor<4x8xf32>
  %u1 = tfm.weight "u1" : tensor<4x8xf32> -> tensor<4x8xf32>
  %d0 = tfm.weight "d0" : tensor<8x4xf32> -> tensor<8x4xf32>
  %d1 = tfm.weight "d1" : tensor<8x4xf32> -> tensor<8x4xf32>
  %gb0 = tfm.weight "gb0" : tensor<4xf32> -> tensor<4xf32>
  %ub0 = tfm.weight "ub0" : tensor<4xf32> -> tensor<4xf32>
  %gb1 = tfm.weight "gb1" : tensor<4xf32> -> tensor<4xf32>
  %ub1 = tfm.weight "ub1" : tensor<4xf32> -> tensor<4xf32>
  %db0 = tfm.weight "db0" : tensor<8xf32> -> tensor<8xf32>
  %db1 = tfm.weight "db1" : tensor<8xf32> -> tensor<8xf32>
  %gu = tfm.concat_weights %g0, %u0, %g1, %u1 : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
  %dn = tfm.concat_weights %d0, %d1 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
  %gub = tfm.concat_weights %gb0, %ub0, %gb1, %ub1 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<16xf32>
  %db = tfm.concat_weights %db0, %db1 : (tensor<8xf32>, tensor<8xf32>) -> tensor<16xf32>
  %y = tfm.moe %x, %logits, %gu, %dn bias(%gub, %db) top_k 1 scoring softmax normalize activation silu swiglu alpha 1.702000e+00 limit 7.000000e+00 : (tensor<3x8xf32>, tensor<3x2xf32>, tensor<16x8xf32>, tensor<16x4xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
