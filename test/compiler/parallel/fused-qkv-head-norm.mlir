// A fused projection whose query and key parts the export normalises per head (Persimmon's
// q/k layer norm over head_dim, on [q, k, v] rows per head): dsc-unpack-qkv and tp-shard
// take the parts apart and normalise each part's projection per head again (a view
// [.., -1, head_dim], the norm's clone, a view back). Before, tp-shard dropped the norms.
// RUN: dsc-opt %s --split-input-file --dsc-unpack-qkv | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-tp-shard=ranks=2 2>&1 | FileCheck %s --check-prefix=TP

// CHECK-LABEL: func.func @persimmon
// CHECK-DAG: %[[QN:.*]] = tfm.weight "q_ln.weight"
// CHECK-DAG: %[[KN:.*]] = tfm.weight "k_ln.weight"
// CHECK-DAG: %[[VIEW:.*]] = onnx.Constant {value = dense<[0, 0, -1, 16]> : tensor<4xi64>}
// CHECK-DAG: %[[FLAT:.*]] = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>}
// CHECK-DAG: %[[Q:.*]] = tfm.linear %arg0, %{{.*}} : (tensor<1x4x32xf32>, tensor<32x32xf32>) -> tensor<1x4x32xf32>
// CHECK-DAG: %[[K:.*]] = tfm.linear %arg0, %{{.*}} : (tensor<1x4x32xf32>, tensor<32x32xf32>) -> tensor<1x4x32xf32>
// CHECK-DAG: %[[V:.*]] = tfm.linear %arg0, %{{.*}} : (tensor<1x4x32xf32>, tensor<32x32xf32>) -> tensor<1x4x32xf32>
// CHECK-DAG: %[[QH:.*]] = onnx.Reshape %[[Q]], %[[VIEW]]{{.*}} -> tensor<1x4x2x16xf32>
// CHECK-DAG: %[[QL:.*]] = tfm.layer_norm %[[QH]], %[[QN]], %{{.*}} eps 9.99999974E-6 : tensor<1x4x2x16xf32>
// CHECK-DAG: %[[QF:.*]] = onnx.Reshape %[[QL]], %[[FLAT]]{{.*}} -> tensor<1x4x32xf32>
// CHECK-DAG: %[[KH:.*]] = onnx.Reshape %[[K]], %{{.*}} -> tensor<1x4x2x16xf32>
// CHECK-DAG: %[[KL:.*]] = tfm.layer_norm %[[KH]], %[[KN]]
// CHECK-DAG: %[[KF:.*]] = onnx.Reshape %[[KL]], %{{.*}} -> tensor<1x4x32xf32>
// CHECK: tfm.attention %[[QF]], %[[KF]], %[[V]] mask %arg1
// CHECK-NOT: onnx.Gather

// Each rank: one head of each part, the same per-head norm.
// TP-LABEL: func.func @persimmon
// TP-NOT: stays replicated
// TP-DAG: %[[Q:.*]] = tfm.linear %arg0, %{{.*}} parallel  column : (tensor<1x4x32xf32>, tensor<16x32xf32>) -> tensor<1x4x16xf32>
// TP-DAG: %[[QH:.*]] = onnx.Reshape %[[Q]], %{{.*}} -> tensor<1x4x1x16xf32>
// TP-DAG: %[[QL:.*]] = tfm.layer_norm %[[QH]], %{{.*}} : tensor<1x4x1x16xf32>
// TP-DAG: %[[QF:.*]] = onnx.Reshape %[[QL]], %{{.*}} -> tensor<1x4x16xf32>
// TP-DAG: %[[K:.*]] = tfm.linear %arg0, %{{.*}} parallel  column
// TP-DAG: %[[KH:.*]] = onnx.Reshape %[[K]]
// TP-DAG: %[[KL:.*]] = tfm.layer_norm %[[KH]]
// TP-DAG: %[[KF:.*]] = onnx.Reshape %[[KL]]
// TP: tfm.attention %[[QF]], %[[KF]], %{{.*}} mask %arg1 heads 1 kv_heads 1
func.func @persimmon(%x: tensor<1x4x32xf32>, %mask: tensor<1x4xi64>) -> tensor<1x4x32xf32> {
  %w = tfm.weight "qkv" : tensor<96x32xf32> -> tensor<96x32xf32>
  %wo = tfm.weight "o" : tensor<32x32xf32> -> tensor<32x32xf32>
  %qs = tfm.weight "q_ln.weight" : tensor<16xf32> -> tensor<16xf32>
  %qb = tfm.weight "q_ln.bias" : tensor<16xf32> -> tensor<16xf32>
  %ks = tfm.weight "k_ln.weight" : tensor<16xf32> -> tensor<16xf32>
  %kb = tfm.weight "k_ln.bias" : tensor<16xf32> -> tensor<16xf32>
  %heads = onnx.Constant {value = dense<[1, 4, 2, 3, 16]> : tensor<5xi64>} : tensor<5xi64>
  %flat = onnx.Constant {value = dense<[1, 4, 32]> : tensor<3xi64>} : tensor<3xi64>
  %i0 = onnx.Constant {value = dense<0> : tensor<i64>} : tensor<i64>
  %i1 = onnx.Constant {value = dense<1> : tensor<i64>} : tensor<i64>
  %i2 = onnx.Constant {value = dense<2> : tensor<i64>} : tensor<i64>
  %qkv = tfm.linear %x, %w : (tensor<1x4x32xf32>, tensor<96x32xf32>) -> tensor<1x4x96xf32>
  %r = "onnx.Reshape"(%qkv, %heads) : (tensor<1x4x96xf32>, tensor<5xi64>) -> tensor<1x4x2x3x16xf32>
  %g0 = "onnx.Gather"(%r, %i0) {axis = 3 : i64} : (tensor<1x4x2x3x16xf32>, tensor<i64>) -> tensor<1x4x2x16xf32>
  %g1 = "onnx.Gather"(%r, %i1) {axis = 3 : i64} : (tensor<1x4x2x3x16xf32>, tensor<i64>) -> tensor<1x4x2x16xf32>
  %g2 = "onnx.Gather"(%r, %i2) {axis = 3 : i64} : (tensor<1x4x2x3x16xf32>, tensor<i64>) -> tensor<1x4x2x16xf32>
  %qn = tfm.layer_norm %g0, %qs, %qb eps 1.0e-5 : tensor<1x4x2x16xf32>, tensor<16xf32>, tensor<16xf32>
  %kn = tfm.layer_norm %g1, %ks, %kb eps 1.0e-5 : tensor<1x4x2x16xf32>, tensor<16xf32>, tensor<16xf32>
  %q = "onnx.Reshape"(%qn, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %k = "onnx.Reshape"(%kn, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %v = "onnx.Reshape"(%g2, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %a = tfm.attention %q, %k, %v mask %mask heads 2 kv_heads 2 head_dim 16 scale 0.25 causal : (tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4xi64>) -> tensor<1x4x32xf32>
  %o = tfm.linear %a, %wo : (tensor<1x4x32xf32>, tensor<32x32xf32>) -> tensor<1x4x32xf32>
  %y = tfm.residual_add %x, %o : tensor<1x4x32xf32>
  return %y : tensor<1x4x32xf32>
}

// -----

// A layer norm per head without a bias (two operands), on the query only.
// CHECK-LABEL: func.func @layer_norm_without_bias
// CHECK: %[[Q:.*]] = tfm.linear %arg0, %{{.*}} : (tensor<1x4x32xf32>, tensor<32x32xf32>) -> tensor<1x4x32xf32>
// CHECK: %[[QH:.*]] = onnx.Reshape %[[Q]], %{{.*}} -> tensor<1x4x2x16xf32>
// CHECK: %[[QN:.*]] = tfm.layer_norm %[[QH]], %{{.*}} eps 9.99999997E-7 : tensor<1x4x2x16xf32>, tensor<16xf32>{{$}}
// CHECK: %[[QF:.*]] = onnx.Reshape %[[QN]], %{{.*}} -> tensor<1x4x32xf32>
// CHECK: tfm.attention %[[QF]], %{{.*}}, %{{.*}} mask %arg1
// TP-LABEL: func.func @layer_norm_without_bias
// TP: %[[Q:.*]] = tfm.linear %arg0, %{{.*}} parallel  column : (tensor<1x4x32xf32>, tensor<16x32xf32>) -> tensor<1x4x16xf32>
// TP: %[[QH:.*]] = onnx.Reshape %[[Q]], %{{.*}} -> tensor<1x4x1x16xf32>
// TP: tfm.layer_norm %[[QH]]
// TP: tfm.attention {{.*}} heads 1 kv_heads 1
func.func @layer_norm_without_bias(%x: tensor<1x4x32xf32>, %mask: tensor<1x4xi64>) -> tensor<1x4x32xf32> {
  %w = tfm.weight "qkv" : tensor<96x32xf32> -> tensor<96x32xf32>
  %wo = tfm.weight "o" : tensor<32x32xf32> -> tensor<32x32xf32>
  %qs = tfm.weight "q_norm.weight" : tensor<16xf32> -> tensor<16xf32>
  %heads = onnx.Constant {value = dense<[1, 4, 2, 3, 16]> : tensor<5xi64>} : tensor<5xi64>
  %flat = onnx.Constant {value = dense<[1, 4, 32]> : tensor<3xi64>} : tensor<3xi64>
  %i0 = onnx.Constant {value = dense<0> : tensor<i64>} : tensor<i64>
  %i1 = onnx.Constant {value = dense<1> : tensor<i64>} : tensor<i64>
  %i2 = onnx.Constant {value = dense<2> : tensor<i64>} : tensor<i64>
  %qkv = tfm.linear %x, %w : (tensor<1x4x32xf32>, tensor<96x32xf32>) -> tensor<1x4x96xf32>
  %r = "onnx.Reshape"(%qkv, %heads) : (tensor<1x4x96xf32>, tensor<5xi64>) -> tensor<1x4x2x3x16xf32>
  %g0 = "onnx.Gather"(%r, %i0) {axis = 3 : i64} : (tensor<1x4x2x3x16xf32>, tensor<i64>) -> tensor<1x4x2x16xf32>
  %g1 = "onnx.Gather"(%r, %i1) {axis = 3 : i64} : (tensor<1x4x2x3x16xf32>, tensor<i64>) -> tensor<1x4x2x16xf32>
  %g2 = "onnx.Gather"(%r, %i2) {axis = 3 : i64} : (tensor<1x4x2x3x16xf32>, tensor<i64>) -> tensor<1x4x2x16xf32>
  %qn = tfm.layer_norm %g0, %qs eps 1.0e-6 : tensor<1x4x2x16xf32>, tensor<16xf32>
  %q = "onnx.Reshape"(%qn, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %k = "onnx.Reshape"(%g1, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %v = "onnx.Reshape"(%g2, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %a = tfm.attention %q, %k, %v mask %mask heads 2 kv_heads 2 head_dim 16 scale 0.25 causal : (tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4xi64>) -> tensor<1x4x32xf32>
  %o = tfm.linear %a, %wo : (tensor<1x4x32xf32>, tensor<32x32xf32>) -> tensor<1x4x32xf32>
  %y = tfm.residual_add %x, %o : tensor<1x4x32xf32>
  return %y : tensor<1x4x32xf32>
}
