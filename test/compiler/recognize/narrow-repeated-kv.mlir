// dsc-narrow-repeated-kv: keys and values that the export broadcasts from each KV group to
// the group's query heads (Falcon's new architecture: Expand [b, s, G, 1, d] ->
// [b, s, G, R, d], then reshapes) are read once per group, with kv_heads / R. The export's
// interface (past operands, presents) keeps its every-copy tensors: the attention reads
// each group's first copy of the past and its presents are written R times again. Left
// alone: a layer whose other program does not narrow, an Expand that repeats along another
// axis, and keys repeated but values not.
// RUN: dsc-opt %s --dsc-narrow-repeated-kv | FileCheck %s

// CHECK-LABEL: func.func @session
// CHECK-NOT: onnx.Expand
// CHECK: %[[K:.*]] = onnx.Reshape %arg1, %{{.*}} : (tensor<?x?x2x1x8xf32>, tensor<3xi64>) -> tensor<?x?x16xf32>
// CHECK: %[[V:.*]] = onnx.Reshape %arg2, %{{.*}} : (tensor<?x?x2x1x8xf32>, tensor<3xi64>) -> tensor<?x?x16xf32>
// CHECK: tfm.attention %arg0, %[[K]], %[[V]] mask %arg3 heads 4 kv_heads 2 head_dim 8 {{.*}} cache_layer 0 :
func.func @session(%q: tensor<?x?x32xf32>, %k: tensor<?x?x2x1x8xf32>, %v: tensor<?x?x2x1x8xf32>, %mask: tensor<?x?xi64>, %shape: tensor<5xi64>) -> tensor<?x?x32xf32> {
  %heads = onnx.Constant {value = dense<[0, 0, 4, 8]> : tensor<4xi64>} : tensor<4xi64>
  %rows = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %ke = onnx.Expand %k, %shape : (tensor<?x?x2x1x8xf32>, tensor<5xi64>) -> tensor<?x?x2x2x8xf32>
  %ve = onnx.Expand %v, %shape : (tensor<?x?x2x1x8xf32>, tensor<5xi64>) -> tensor<?x?x2x2x8xf32>
  %kh = onnx.Reshape %ke, %heads : (tensor<?x?x2x2x8xf32>, tensor<4xi64>) -> tensor<?x?x4x8xf32>
  %vh = onnx.Reshape %ve, %heads : (tensor<?x?x2x2x8xf32>, tensor<4xi64>) -> tensor<?x?x4x8xf32>
  %k3 = onnx.Reshape %kh, %rows : (tensor<?x?x4x8xf32>, tensor<3xi64>) -> tensor<?x?x32xf32>
  %v3 = onnx.Reshape %vh, %rows : (tensor<?x?x4x8xf32>, tensor<3xi64>) -> tensor<?x?x32xf32>
  %o = tfm.attention %q, %k3, %v3 mask %mask heads 4 kv_heads 4 head_dim 8 scale 0.35355339 causal cache_layer 0 : (tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?xi64>) -> tensor<?x?x32xf32>
  return %o : tensor<?x?x32xf32>
}

// The export's interface: the past's heads 0 and 2 (a Slice of step 2 over the 4), the
// presents tiled back to 4 heads, group-major. An attention with past operands reads the
// export's cache, not the session's layer 1, which @layer1 narrows on its own. Layer 2 is
// read by @mixed, whose values are not repeated: neither of its attentions narrows.
// CHECK-LABEL: func.func @io
// CHECK-NOT: onnx.Expand
// CHECK-DAG: %[[START:.*]] = onnx.Constant {value = dense<0> : tensor<1xi64>}
// CHECK-DAG: %[[STEP:.*]] = onnx.Constant {value = dense<2> : tensor<1xi64>}
// CHECK: %[[PK:.*]] = onnx.Slice %arg4, %[[START]], %{{.*}}, %{{.*}}, %[[STEP]] : ({{.*}}) -> tensor<?x2x?x8xf32>
// CHECK: %[[PV:.*]] = onnx.Slice %arg5, {{.*}} -> tensor<?x2x?x8xf32>
// CHECK: %{{.*}}, %[[PRESENT:.*]]:2 = tfm.attention {{.*}} past(%[[PK]], %[[PV]]) heads 4 kv_heads 2 head_dim 8 {{.*}} -> (tensor<?x?x32xf32>, tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>)
// CHECK: %[[U:.*]] = onnx.Unsqueeze %[[PRESENT]]#0, %{{.*}} -> tensor<?x2x1x?x8xf32>
// CHECK: %[[REPEATS:.*]] = onnx.Constant {value = dense<[1, 1, 2, 1, 1]> : tensor<5xi64>}
// CHECK: %[[T:.*]] = onnx.Tile %[[U]], %[[REPEATS]] : {{.*}} -> tensor<?x2x2x?x8xf32>
// CHECK: %[[KEYS:.*]] = onnx.Reshape %[[T]], %{{.*}} : {{.*}} -> tensor<?x4x?x8xf32>
// CHECK: return %{{.*}}, %[[KEYS]], %{{.*}} : tensor<?x?x32xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>
func.func @io(%q: tensor<?x?x32xf32>, %k: tensor<?x?x2x1x8xf32>, %mask: tensor<?x?xi64>, %shape: tensor<5xi64>, %pk: tensor<?x4x?x8xf32>, %pv: tensor<?x4x?x8xf32>) -> (tensor<?x?x32xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>) {
  %rows = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %ke = onnx.Expand %k, %shape : (tensor<?x?x2x1x8xf32>, tensor<5xi64>) -> tensor<?x?x2x2x8xf32>
  %k3 = onnx.Reshape %ke, %rows : (tensor<?x?x2x2x8xf32>, tensor<3xi64>) -> tensor<?x?x32xf32>
  %o, %pk2, %pv2 = tfm.attention %q, %k3, %k3 mask %mask past(%pk, %pv) heads 4 kv_heads 4 head_dim 8 scale 0.35355339 causal cache_layer 1 : (tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?xi64>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>) -> (tensor<?x?x32xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>)
  return %o, %pk2, %pv2 : tensor<?x?x32xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>
}

// CHECK-LABEL: func.func @layer1
// CHECK: tfm.attention {{.*}} heads 4 kv_heads 2 head_dim 8 {{.*}} cache_layer 1 :
func.func @layer1(%q: tensor<?x?x32xf32>, %k: tensor<?x?x2x1x8xf32>, %mask: tensor<?x?xi64>, %shape: tensor<5xi64>) -> tensor<?x?x32xf32> {
  %rows = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %ke = onnx.Expand %k, %shape : (tensor<?x?x2x1x8xf32>, tensor<5xi64>) -> tensor<?x?x2x2x8xf32>
  %k3 = onnx.Reshape %ke, %rows : (tensor<?x?x2x2x8xf32>, tensor<3xi64>) -> tensor<?x?x32xf32>
  %o = tfm.attention %q, %k3, %k3 mask %mask heads 4 kv_heads 4 head_dim 8 scale 0.35355339 causal cache_layer 1 : (tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?xi64>) -> tensor<?x?x32xf32>
  return %o : tensor<?x?x32xf32>
}

// CHECK-LABEL: func.func @layer2_narrowable
// CHECK: tfm.attention {{.*}} heads 4 kv_heads 4 head_dim 8 {{.*}} cache_layer 2 :
func.func @layer2_narrowable(%q: tensor<?x?x32xf32>, %k: tensor<?x?x2x1x8xf32>, %mask: tensor<?x?xi64>, %shape: tensor<5xi64>) -> tensor<?x?x32xf32> {
  %rows = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %ke = onnx.Expand %k, %shape : (tensor<?x?x2x1x8xf32>, tensor<5xi64>) -> tensor<?x?x2x2x8xf32>
  %k3 = onnx.Reshape %ke, %rows : (tensor<?x?x2x2x8xf32>, tensor<3xi64>) -> tensor<?x?x32xf32>
  %o = tfm.attention %q, %k3, %k3 mask %mask heads 4 kv_heads 4 head_dim 8 scale 0.35355339 causal cache_layer 2 : (tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?xi64>) -> tensor<?x?x32xf32>
  return %o : tensor<?x?x32xf32>
}

// CHECK-LABEL: func.func @mixed
// CHECK: tfm.attention {{.*}} heads 4 kv_heads 4 head_dim 8 {{.*}} cache_layer 2 :
func.func @mixed(%q: tensor<?x?x32xf32>, %k: tensor<?x?x2x1x8xf32>, %v: tensor<?x?x32xf32>, %mask: tensor<?x?xi64>, %shape: tensor<5xi64>) -> tensor<?x?x32xf32> {
  %rows = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %ke = onnx.Expand %k, %shape : (tensor<?x?x2x1x8xf32>, tensor<5xi64>) -> tensor<?x?x2x2x8xf32>
  %k3 = onnx.Reshape %ke, %rows : (tensor<?x?x2x2x8xf32>, tensor<3xi64>) -> tensor<?x?x32xf32>
  %o = tfm.attention %q, %k3, %v mask %mask heads 4 kv_heads 4 head_dim 8 scale 0.35355339 causal cache_layer 2 : (tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?xi64>) -> tensor<?x?x32xf32>
  return %o : tensor<?x?x32xf32>
}

// Repeated along the head_dim's neighbour the other way round ([b, s, 1, G, d] -> [b, s, R,
// G, d]: head h is group h % G, not h / R): not GQA's sharing.
// CHECK-LABEL: func.func @interleaved
// CHECK: onnx.Expand
// CHECK: tfm.attention {{.*}} heads 4 kv_heads 4 head_dim 8
func.func @interleaved(%q: tensor<?x?x32xf32>, %k: tensor<?x?x1x2x8xf32>, %mask: tensor<?x?xi64>, %shape: tensor<5xi64>) -> tensor<?x?x32xf32> {
  %rows = onnx.Constant {value = dense<[0, 0, -1]> : tensor<3xi64>} : tensor<3xi64>
  %ke = onnx.Expand %k, %shape : (tensor<?x?x1x2x8xf32>, tensor<5xi64>) -> tensor<?x?x2x2x8xf32>
  %k3 = onnx.Reshape %ke, %rows : (tensor<?x?x2x2x8xf32>, tensor<3xi64>) -> tensor<?x?x32xf32>
  %o = tfm.attention %q, %k3, %k3 mask %mask heads 4 kv_heads 4 head_dim 8 scale 0.35355339 causal : (tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?x32xf32>, tensor<?x?xi64>) -> tensor<?x?x32xf32>
  return %o : tensor<?x?x32xf32>
}
