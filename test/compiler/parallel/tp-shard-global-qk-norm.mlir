// tp-shard on q/k norms over all heads (OLMo-2's q_norm and k_norm: an RMS norm over the
// whole projection, weight [heads * head_dim]): each rank keeps its heads' part of the
// scale, sums the squares of its own features, all-reduces the sums and divides by the
// root of their mean over every feature. With fewer KV heads than ranks the KV head's
// copies would each add their squares: that attention stays replicated, saying why.
// RUN: dsc-opt %s --dsc-tp-shard=ranks=2 2>&1 | FileCheck %s
// RUN: dsc-opt %s --dsc-tp-shard=ranks=4 2>&1 | FileCheck %s --check-prefix=FOUR

// At 4 ranks the 2 KV heads are replicated (each on 2 ranks): @olmo2 is still sharded
// (4 KV heads), @replicated_kv is not. At 2 ranks both are.
// FOUR: warning: tp-shard: @replicated_kv: every attention stays replicated: this attention cannot be sharded: its keys are normalised over all 2 KV heads, which are fewer than the ranks
// FOUR-NOT: stays replicated
// FOUR-LABEL: func.func @olmo2
// FOUR: tfm.all_reduce {{.*}} ranks 4
// CHECK-NOT: stays replicated

// CHECK-LABEL: func.func @olmo2
// CHECK-DAG: %[[QS:.*]] = tfm.weight "q_norm" : tensor<16xf32> [#tfm.shard<axis = 0, offsets = [0, 8], sizes = [8, 8], groups = 1>] -> tensor<8xf32>
// CHECK-DAG: %[[KS:.*]] = tfm.weight "k_norm" : tensor<16xf32> [#tfm.shard<axis = 0, offsets = [0, 8], sizes = [8, 8], groups = 1>] -> tensor<8xf32>
// CHECK: %[[Q:.*]] = tfm.linear {{.*}} parallel  column : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
// CHECK: %[[SQ:.*]] = onnx.Mul %[[Q]], %[[Q]]
// CHECK: %[[SUM:.*]] = onnx.ReduceSum %[[SQ]], %{{.*}} : (tensor<2x5x8xf32>, tensor<1xi64>) -> tensor<2x5x1xf32>
// CHECK: %[[ALL:.*]] = tfm.all_reduce %[[SUM]] ranks 2 : tensor<2x5x1xf32>
// CHECK: %[[MEAN:.*]] = onnx.Div %[[ALL]], %{{.*}} : (tensor<2x5x1xf32>, tensor<f32>)
// CHECK: %[[EPS:.*]] = onnx.Add %[[MEAN]], %{{.*}} : (tensor<2x5x1xf32>, tensor<f32>)
// CHECK: %[[ROOT:.*]] = onnx.Sqrt %[[EPS]]
// CHECK: %[[NORMED:.*]] = onnx.Div %[[Q]], %[[ROOT]]
// CHECK: %[[QN:.*]] = onnx.Mul %[[NORMED]], %[[QS]]
// CHECK: tfm.all_reduce
// CHECK: %[[KN:.*]] = onnx.Mul %{{.*}}, %[[KS]]
// CHECK: tfm.attention %[[QN]], %[[KN]], %{{.*}} heads 2 kv_heads 2 head_dim 4
// CHECK-NOT: tfm.rms_norm
// CHECK-LABEL: func.func @replicated_kv

// OLMoE's clip_qkv: the clamp comes after the norms over all heads, and acts on each
// feature alone, so the rank's features take it as they are: sharded as @olmo2.
// CHECK-LABEL: func.func @olmoe_clipped
// CHECK: %[[Q:.*]] = tfm.linear {{.*}} parallel  column : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
// CHECK: tfm.all_reduce
// CHECK: %[[QN:.*]] = onnx.Mul %{{.*}}, %{{.*}} : (tensor<2x5x8xf32>, tensor<8xf32>)
// CHECK: %[[QC:.*]] = onnx.Clip %[[QN]], %{{.*}}, %{{.*}} : (tensor<2x5x8xf32>, tensor<f32>, tensor<f32>) -> tensor<2x5x8xf32>
// CHECK: tfm.attention %[[QC]], %{{.*}} heads 2 kv_heads 2 head_dim 4
func.func @olmo2(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  %wq = tfm.weight "q" : tensor<16x8xf32> -> tensor<16x8xf32>
  %wk = tfm.weight "k" : tensor<16x8xf32> -> tensor<16x8xf32>
  %wv = tfm.weight "v" : tensor<16x8xf32> -> tensor<16x8xf32>
  %wo = tfm.weight "o" : tensor<8x16xf32> -> tensor<8x16xf32>
  %sq = tfm.weight "q_norm" : tensor<16xf32> -> tensor<16xf32>
  %sk = tfm.weight "k_norm" : tensor<16xf32> -> tensor<16xf32>
  %q = tfm.linear %x, %wq : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %qn = tfm.rms_norm %q, %sq eps 1.0e-6 : tensor<2x5x16xf32>, tensor<16xf32>
  %k = tfm.linear %x, %wk : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %kn = tfm.rms_norm %k, %sk eps 1.0e-6 : tensor<2x5x16xf32>, tensor<16xf32>
  %v = tfm.linear %x, %wv : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %a = tfm.attention %qn, %kn, %v heads 4 kv_heads 4 head_dim 4 scale 5.000000e-01 causal : (tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x16xf32>
  %o = tfm.linear %a, %wo : (tensor<2x5x16xf32>, tensor<8x16xf32>) -> tensor<2x5x8xf32>
  %y = tfm.residual_add %x, %o : tensor<2x5x8xf32>
  return %y : tensor<2x5x8xf32>
}

func.func @replicated_kv(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  %wq = tfm.weight "q" : tensor<16x8xf32> -> tensor<16x8xf32>
  %wk = tfm.weight "k2" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wv = tfm.weight "v2" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wo = tfm.weight "o" : tensor<8x16xf32> -> tensor<8x16xf32>
  %sk = tfm.weight "k2_norm" : tensor<8xf32> -> tensor<8xf32>
  %q = tfm.linear %x, %wq : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %k = tfm.linear %x, %wk : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %kn = tfm.rms_norm %k, %sk eps 1.0e-6 : tensor<2x5x8xf32>, tensor<8xf32>
  %v = tfm.linear %x, %wv : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %a = tfm.attention %q, %kn, %v heads 4 kv_heads 2 head_dim 4 scale 5.000000e-01 causal : (tensor<2x5x16xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x16xf32>
  %o = tfm.linear %a, %wo : (tensor<2x5x16xf32>, tensor<8x16xf32>) -> tensor<2x5x8xf32>
  %y = tfm.residual_add %x, %o : tensor<2x5x8xf32>
  return %y : tensor<2x5x8xf32>
}

func.func @olmoe_clipped(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  %wq = tfm.weight "q" : tensor<16x8xf32> -> tensor<16x8xf32>
  %wk = tfm.weight "k" : tensor<16x8xf32> -> tensor<16x8xf32>
  %wv = tfm.weight "v" : tensor<16x8xf32> -> tensor<16x8xf32>
  %wo = tfm.weight "o" : tensor<8x16xf32> -> tensor<8x16xf32>
  %sq = tfm.weight "q_norm" : tensor<16xf32> -> tensor<16xf32>
  %sk = tfm.weight "k_norm" : tensor<16xf32> -> tensor<16xf32>
  %lo = onnx.Constant {value = dense<-6.0> : tensor<f32>} : tensor<f32>
  %hi = onnx.Constant {value = dense<6.0> : tensor<f32>} : tensor<f32>
  %q = tfm.linear %x, %wq : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %qn = tfm.rms_norm %q, %sq eps 1.0e-6 : tensor<2x5x16xf32>, tensor<16xf32>
  %qc = "onnx.Clip"(%qn, %lo, %hi) : (tensor<2x5x16xf32>, tensor<f32>, tensor<f32>) -> tensor<2x5x16xf32>
  %k = tfm.linear %x, %wk : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %kn = tfm.rms_norm %k, %sk eps 1.0e-6 : tensor<2x5x16xf32>, tensor<16xf32>
  %kc = "onnx.Clip"(%kn, %lo, %hi) : (tensor<2x5x16xf32>, tensor<f32>, tensor<f32>) -> tensor<2x5x16xf32>
  %v = tfm.linear %x, %wv : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %vc = "onnx.Clip"(%v, %lo, %hi) : (tensor<2x5x16xf32>, tensor<f32>, tensor<f32>) -> tensor<2x5x16xf32>
  %a = tfm.attention %qc, %kc, %vc heads 4 kv_heads 4 head_dim 4 scale 5.000000e-01 causal : (tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x16xf32>
  %o = tfm.linear %a, %wo : (tensor<2x5x16xf32>, tensor<8x16xf32>) -> tensor<2x5x8xf32>
  %y = tfm.residual_add %x, %o : tensor<2x5x8xf32>
  return %y : tensor<2x5x8xf32>
}
