// dsc-fuse-qk-norm: per-head RMS norms of the query and key (Qwen3's form, and Gemma-3's
// between transposes) move into the attention (`qk_norm(q scale, k scale) eps`), which then
// reads the projections' results; what it declines, with the reason (remarks). In the
// pipeline it runs first, so the three projections then join and the attention reads them
// packed.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-qk-norm=remarks --verify-diagnostics | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-fuse | FileCheck %s --check-prefix=PIPELINE

// CHECK-LABEL: func.func @qwen3
// CHECK-DAG: %[[QS:.*]] = tfm.weight "q_norm"
// CHECK-DAG: %[[KS:.*]] = tfm.weight "k_norm"
// CHECK: %[[Q:.*]] = tfm.linear %arg0, %{{[^ ]*}} parallel column :
// CHECK: %[[K:.*]] = tfm.linear %arg0, %{{[^ ]*}} parallel column :
// CHECK: %[[V:.*]] = tfm.linear %arg0, %{{[^ ]*}} parallel column :
// CHECK-NOT: tfm.rms_norm
// CHECK-NOT: onnx.Reshape
// CHECK: tfm.attention %[[Q]], %[[K]], %[[V]] mask %arg1 positions %arg2 qk_norm(%[[QS]], %[[KS]]) eps 9.99999997E-7 heads 4 kv_heads 2 head_dim 8
// PIPELINE-LABEL: func.func @qwen3
// PIPELINE: %[[QKV:.*]] = tfm.linear %arg0, %{{[^ ]*}} parallel column :
// PIPELINE-NOT: tfm.rms_norm
// PIPELINE: tfm.attention %[[QKV]], %[[QKV]], %[[QKV]] mask %arg1 positions %arg2 qk_norm(%{{[^ ]*}}, %{{[^ ]*}}) eps 9.99999997E-7 heads 4 kv_heads 2 head_dim 8 {{.*}} packed_qkv
func.func @qwen3(%x: tensor<1x?x32xf32>, %mask: tensor<1x?xi64>, %pos: tensor<1x?xi64>,
                 %heads4: tensor<4xi64>, %heads2: tensor<4xi64>) -> tensor<1x?x32xf32> {
  %wq = tfm.weight "q" : tensor<32x32xf32> -> tensor<32x32xf32>
  %wk = tfm.weight "k" : tensor<16x32xf32> -> tensor<16x32xf32>
  %wv = tfm.weight "v" : tensor<16x32xf32> -> tensor<16x32xf32>
  %qs = tfm.weight "q_norm" : tensor<8xf32> -> tensor<8xf32>
  %ks = tfm.weight "k_norm" : tensor<8xf32> -> tensor<8xf32>
  %flat = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %q = tfm.linear %x, %wq parallel column : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  %q4 = "onnx.Reshape"(%q, %heads4) : (tensor<1x?x32xf32>, tensor<4xi64>) -> tensor<1x?x4x8xf32>
  %qn = tfm.rms_norm %q4, %qs eps 1.0e-6 : tensor<1x?x4x8xf32>, tensor<8xf32>
  %q3 = "onnx.Reshape"(%qn, %flat) : (tensor<1x?x4x8xf32>, tensor<3xi64>) -> tensor<1x?x32xf32>
  %k = tfm.linear %x, %wk parallel column : (tensor<1x?x32xf32>, tensor<16x32xf32>) -> tensor<1x?x16xf32>
  %k4 = "onnx.Reshape"(%k, %heads2) : (tensor<1x?x16xf32>, tensor<4xi64>) -> tensor<1x?x2x8xf32>
  %kn = tfm.rms_norm %k4, %ks eps 1.0e-6 : tensor<1x?x2x8xf32>, tensor<8xf32>
  %k3 = "onnx.Reshape"(%kn, %flat) : (tensor<1x?x2x8xf32>, tensor<3xi64>) -> tensor<1x?x16xf32>
  %v = tfm.linear %x, %wv parallel column : (tensor<1x?x32xf32>, tensor<16x32xf32>) -> tensor<1x?x16xf32>
  %o = tfm.attention %q3, %k3, %v mask %mask positions %pos heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal rotary <dim = 8, base = 1.0e4, layout = half_split> cache_layer 0 : (tensor<1x?x32xf32>, tensor<1x?x16xf32>, tensor<1x?x16xf32>, tensor<1x?xi64>, tensor<1x?xi64>) -> tensor<1x?x32xf32>
  return %o : tensor<1x?x32xf32>
}

// -----

// Gemma-3's: the heads transposed to [b, heads, s, d] around the norm and back.
// CHECK-LABEL: func.func @gemma3
// CHECK-NOT: onnx.Transpose
// CHECK-NOT: tfm.rms_norm
// CHECK: tfm.attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} mask %arg1 positions %arg2 qk_norm(
func.func @gemma3(%x: tensor<1x?x32xf32>, %mask: tensor<1x?xi64>, %pos: tensor<1x?xi64>,
                  %heads4: tensor<4xi64>, %heads2: tensor<4xi64>) -> tensor<1x?x32xf32> {
  %wq = tfm.weight "q" : tensor<32x32xf32> -> tensor<32x32xf32>
  %wk = tfm.weight "k" : tensor<16x32xf32> -> tensor<16x32xf32>
  %wv = tfm.weight "v" : tensor<16x32xf32> -> tensor<16x32xf32>
  %qs = tfm.weight "q_norm" : tensor<8xf32> -> tensor<8xf32>
  %ks = tfm.weight "k_norm" : tensor<8xf32> -> tensor<8xf32>
  %flat = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %q = tfm.linear %x, %wq : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  %q4 = "onnx.Reshape"(%q, %heads4) : (tensor<1x?x32xf32>, tensor<4xi64>) -> tensor<1x?x4x8xf32>
  %qt = "onnx.Transpose"(%q4) {perm = [0, 2, 1, 3]} : (tensor<1x?x4x8xf32>) -> tensor<1x4x?x8xf32>
  %qn = tfm.rms_norm %qt, %qs eps 1.0e-6 : tensor<1x4x?x8xf32>, tensor<8xf32>
  %qb = "onnx.Transpose"(%qn) {perm = [0, 2, 1, 3]} : (tensor<1x4x?x8xf32>) -> tensor<1x?x4x8xf32>
  %q3 = "onnx.Reshape"(%qb, %flat) : (tensor<1x?x4x8xf32>, tensor<3xi64>) -> tensor<1x?x32xf32>
  %k = tfm.linear %x, %wk : (tensor<1x?x32xf32>, tensor<16x32xf32>) -> tensor<1x?x16xf32>
  %k4 = "onnx.Reshape"(%k, %heads2) : (tensor<1x?x16xf32>, tensor<4xi64>) -> tensor<1x?x2x8xf32>
  %kt = "onnx.Transpose"(%k4) {perm = [0, 2, 1, 3]} : (tensor<1x?x2x8xf32>) -> tensor<1x2x?x8xf32>
  %kn = tfm.rms_norm %kt, %ks eps 1.0e-6 : tensor<1x2x?x8xf32>, tensor<8xf32>
  %kb = "onnx.Transpose"(%kn) {perm = [0, 2, 1, 3]} : (tensor<1x2x?x8xf32>) -> tensor<1x?x2x8xf32>
  %k3 = "onnx.Reshape"(%kb, %flat) : (tensor<1x?x2x8xf32>, tensor<3xi64>) -> tensor<1x?x16xf32>
  %v = tfm.linear %x, %wv : (tensor<1x?x32xf32>, tensor<16x32xf32>) -> tensor<1x?x16xf32>
  %o = tfm.attention %q3, %k3, %v mask %mask positions %pos heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal rotary <dim = 8, base = 1.0e4, layout = half_split> cache_layer 0 : (tensor<1x?x32xf32>, tensor<1x?x16xf32>, tensor<1x?x16xf32>, tensor<1x?xi64>, tensor<1x?xi64>) -> tensor<1x?x32xf32>
  return %o : tensor<1x?x32xf32>
}

// -----

// OLMo-2's q_norm and k_norm, each over all of its projection's heads (scales [32] and
// [16]): the attention takes them too, and the projections then join and pack.
// CHECK-LABEL: func.func @olmo2
// CHECK-DAG: %[[QS:.*]] = tfm.weight "q_norm"
// CHECK-DAG: %[[KS:.*]] = tfm.weight "k_norm"
// CHECK: %[[Q:.*]] = tfm.linear %arg0, %{{[^ ]*}} :
// CHECK: %[[K:.*]] = tfm.linear %arg0, %{{[^ ]*}} :
// CHECK-NOT: tfm.rms_norm
// CHECK: tfm.attention %[[Q]], %[[K]], %{{[^ ]*}} mask %arg1 qk_norm(%[[QS]], %[[KS]]) eps 9.99999997E-7 heads 4 kv_heads 2 head_dim 8
// PIPELINE-LABEL: func.func @olmo2
// PIPELINE-NOT: tfm.rms_norm
// PIPELINE: tfm.attention {{.*}} qk_norm({{.*}}) eps 9.99999997E-7 heads 4 kv_heads 2 head_dim 8 {{.*}} packed_qkv
func.func @olmo2(%x: tensor<1x?x32xf32>, %mask: tensor<1x?xi64>) -> tensor<1x?x32xf32> {
  %wq = tfm.weight "q" : tensor<32x32xf32> -> tensor<32x32xf32>
  %wk = tfm.weight "k" : tensor<16x32xf32> -> tensor<16x32xf32>
  %wv = tfm.weight "v" : tensor<16x32xf32> -> tensor<16x32xf32>
  %qs = tfm.weight "q_norm" : tensor<32xf32> -> tensor<32xf32>
  %ks = tfm.weight "k_norm" : tensor<16xf32> -> tensor<16xf32>
  %q = tfm.linear %x, %wq : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  %qn = tfm.rms_norm %q, %qs eps 1.0e-6 : tensor<1x?x32xf32>, tensor<32xf32>
  %k = tfm.linear %x, %wk : (tensor<1x?x32xf32>, tensor<16x32xf32>) -> tensor<1x?x16xf32>
  %kn = tfm.rms_norm %k, %ks eps 1.0e-6 : tensor<1x?x16xf32>, tensor<16xf32>
  %v = tfm.linear %x, %wv : (tensor<1x?x32xf32>, tensor<16x32xf32>) -> tensor<1x?x16xf32>
  %o = tfm.attention %qn, %kn, %v mask %mask heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal : (tensor<1x?x32xf32>, tensor<1x?x16xf32>, tensor<1x?x16xf32>, tensor<1x?xi64>) -> tensor<1x?x32xf32>
  return %o : tensor<1x?x32xf32>
}

// -----

// A norm over the whole query but per head on the key: the kernels do one kind or the
// other, declined.
// CHECK-LABEL: func.func @mixed_kinds
// CHECK: tfm.rms_norm
// CHECK: tfm.attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} mask %arg1 heads
func.func @mixed_kinds(%x: tensor<1x?x32xf32>, %mask: tensor<1x?xi64>, %heads4: tensor<4xi64>) -> tensor<1x?x32xf32> {
  %wq = tfm.weight "q" : tensor<32x32xf32> -> tensor<32x32xf32>
  %wk = tfm.weight "k" : tensor<32x32xf32> -> tensor<32x32xf32>
  %qs = tfm.weight "q_norm" : tensor<32xf32> -> tensor<32xf32>
  %ks = tfm.weight "k_norm" : tensor<8xf32> -> tensor<8xf32>
  %flat = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %q = tfm.linear %x, %wq : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  %qn = tfm.rms_norm %q, %qs eps 1.0e-6 : tensor<1x?x32xf32>, tensor<32xf32>
  %k = tfm.linear %x, %wk : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  %k4 = "onnx.Reshape"(%k, %heads4) : (tensor<1x?x32xf32>, tensor<4xi64>) -> tensor<1x?x4x8xf32>
  %kn = tfm.rms_norm %k4, %ks eps 1.0e-6 : tensor<1x?x4x8xf32>, tensor<8xf32>
  %k3 = "onnx.Reshape"(%kn, %flat) : (tensor<1x?x4x8xf32>, tensor<3xi64>) -> tensor<1x?x32xf32>
  // expected-remark @below {{q/k norms not fused: its query is normalised per head and its key over all heads, or the other way}}
  %o = tfm.attention %qn, %k3, %x mask %mask heads 4 kv_heads 4 head_dim 8 scale 0.35355339 causal : (tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?xi64>) -> tensor<1x?x32xf32>
  return %o : tensor<1x?x32xf32>
}

// -----

// The normalised query is also returned: the norm must stay, so the attention keeps it.
// CHECK-LABEL: func.func @norm_read_twice
// CHECK-COUNT-2: tfm.rms_norm
// CHECK: tfm.attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} mask %arg1 heads
func.func @norm_read_twice(%x: tensor<1x?x32xf32>, %mask: tensor<1x?xi64>, %heads4: tensor<4xi64>) -> (tensor<1x?x32xf32>, tensor<1x?x4x8xf32>) {
  %wq = tfm.weight "q" : tensor<32x32xf32> -> tensor<32x32xf32>
  %wk = tfm.weight "k" : tensor<32x32xf32> -> tensor<32x32xf32>
  %qs = tfm.weight "q_norm" : tensor<8xf32> -> tensor<8xf32>
  %ks = tfm.weight "k_norm" : tensor<8xf32> -> tensor<8xf32>
  %flat = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %q = tfm.linear %x, %wq : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  %q4 = "onnx.Reshape"(%q, %heads4) : (tensor<1x?x32xf32>, tensor<4xi64>) -> tensor<1x?x4x8xf32>
  %qn = tfm.rms_norm %q4, %qs eps 1.0e-6 : tensor<1x?x4x8xf32>, tensor<8xf32>
  %q3 = "onnx.Reshape"(%qn, %flat) : (tensor<1x?x4x8xf32>, tensor<3xi64>) -> tensor<1x?x32xf32>
  %k = tfm.linear %x, %wk : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  %k4 = "onnx.Reshape"(%k, %heads4) : (tensor<1x?x32xf32>, tensor<4xi64>) -> tensor<1x?x4x8xf32>
  %kn = tfm.rms_norm %k4, %ks eps 1.0e-6 : tensor<1x?x4x8xf32>, tensor<8xf32>
  %k3 = "onnx.Reshape"(%kn, %flat) : (tensor<1x?x4x8xf32>, tensor<3xi64>) -> tensor<1x?x32xf32>
  // expected-remark @below {{q/k norms not fused: its query its norm's result has other readers}}
  %o = tfm.attention %q3, %k3, %x mask %mask heads 4 kv_heads 4 head_dim 8 scale 0.35355339 causal : (tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?xi64>) -> tensor<1x?x32xf32>
  return %o, %qn : tensor<1x?x32xf32>, tensor<1x?x4x8xf32>
}

// -----

// A transpose that moves the features (the reshape's last two axes swapped around the
// norm): the norm is then over strided features, not a head's. Declined.
// CHECK-LABEL: func.func @transpose_moves_features
// CHECK: tfm.rms_norm
func.func @transpose_moves_features(%x: tensor<1x?x32xf32>, %mask: tensor<1x?xi64>, %heads4: tensor<4xi64>) -> tensor<1x?x32xf32> {
  %wq = tfm.weight "q" : tensor<32x32xf32> -> tensor<32x32xf32>
  %qs = tfm.weight "q_norm" : tensor<8xf32> -> tensor<8xf32>
  %flat = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %q = tfm.linear %x, %wq : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  %q4 = "onnx.Reshape"(%q, %heads4) : (tensor<1x?x32xf32>, tensor<4xi64>) -> tensor<1x?x8x4xf32>
  %qt = "onnx.Transpose"(%q4) {perm = [0, 1, 3, 2]} : (tensor<1x?x8x4xf32>) -> tensor<1x?x4x8xf32>
  %qn = tfm.rms_norm %qt, %qs eps 1.0e-6 : tensor<1x?x4x8xf32>, tensor<8xf32>
  %qb = "onnx.Transpose"(%qn) {perm = [0, 1, 3, 2]} : (tensor<1x?x4x8xf32>) -> tensor<1x?x8x4xf32>
  %q3 = "onnx.Reshape"(%qb, %flat) : (tensor<1x?x8x4xf32>, tensor<3xi64>) -> tensor<1x?x32xf32>
  // expected-remark @below {{q/k norms not fused: its query the transposes around its norm move the features or do not undo each other}}
  %o = tfm.attention %q3, %x, %x mask %mask heads 4 kv_heads 4 head_dim 8 scale 0.5 causal : (tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?xi64>) -> tensor<1x?x32xf32>
  return %o : tensor<1x?x32xf32>
}
