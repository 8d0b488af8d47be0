// dsc-fuse-packed-qkv: an attention whose query, key and value are the three parts of one
// Split of a joined projection reads the joined value itself (packed_qkv); the Split goes.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-packed-qkv | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-fuse-packed-qkv=remarks --verify-diagnostics -o /dev/null

// Grouped-query heads (4 of 8 and 2 KV heads): 32 + 16 + 16 features.
// CHECK-LABEL: func.func @packed
// CHECK-SAME: (%[[Y:[^:]*]]: tensor<2x5x64xf32>
// CHECK-NOT: onnx.Split
// CHECK: tfm.attention %[[Y]], %[[Y]], %[[Y]] mask %{{.*}} heads 4 kv_heads 2 head_dim 8 scale {{.*}} causal cache_layer 0 packed_qkv : (tensor<2x5x64xf32>, tensor<2x5x64xf32>, tensor<2x5x64xf32>, tensor<2x?xi64>) -> tensor<2x5x32xf32>
func.func @packed(%y: tensor<2x5x64xf32>, %mask: tensor<2x?xi64>) -> tensor<2x5x32xf32> {
  %sizes = onnx.Constant {value = dense<[32, 16, 16]> : tensor<3xi64>} : tensor<3xi64>
  %p:3 = onnx.Split %y, %sizes {axis = 2 : i64} : (tensor<2x5x64xf32>, tensor<3xi64>) -> (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>)
  %o = tfm.attention %p#0, %p#1, %p#2 mask %mask heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal cache_layer 0 : (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x?xi64>) -> tensor<2x5x32xf32>
  return %o : tensor<2x5x32xf32>
}

// -----

// The keys of the Split are also read by something else: the Split stays.
// CHECK-LABEL: func.func @shared_part
// CHECK: onnx.Split
// CHECK: tfm.attention %{{.*}}#0, %{{.*}}#1, %{{.*}}#2
// CHECK-NOT: packed_qkv
func.func @shared_part(%y: tensor<2x5x64xf32>) -> (tensor<2x5x32xf32>, tensor<2x5x16xf32>) {
  %sizes = onnx.Constant {value = dense<[32, 16, 16]> : tensor<3xi64>} : tensor<3xi64>
  %p:3 = onnx.Split %y, %sizes {axis = 2 : i64} : (tensor<2x5x64xf32>, tensor<3xi64>) -> (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>)
  // expected-remark @+1 {{Q, K and V not packed: a part of the Split has another user}}
  %o = tfm.attention %p#0, %p#1, %p#2 heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal : (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x32xf32>
  return %o, %p#1 : tensor<2x5x32xf32>, tensor<2x5x16xf32>
}

// -----

// An attention with past inputs (the export's I/O cache) keeps its Split.
// CHECK-LABEL: func.func @with_past
// CHECK: onnx.Split
// CHECK-NOT: packed_qkv
func.func @with_past(%y: tensor<2x5x64xf32>, %past: tensor<2x2x?x8xf32>) -> tensor<2x5x32xf32> {
  %sizes = onnx.Constant {value = dense<[32, 16, 16]> : tensor<3xi64>} : tensor<3xi64>
  %p:3 = onnx.Split %y, %sizes {axis = 2 : i64} : (tensor<2x5x64xf32>, tensor<3xi64>) -> (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>)
  // expected-remark @+1 {{Q, K and V not packed: it has past inputs or a bias}}
  %o, %k, %v = tfm.attention %p#0, %p#1, %p#2 past(%past, %past) heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal : (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x2x?x8xf32>, tensor<2x2x?x8xf32>) -> (tensor<2x5x32xf32>, tensor<2x2x?x8xf32>, tensor<2x2x?x8xf32>)
  return %o : tensor<2x5x32xf32>
}

// -----

// Parts in another order than query, key, value: not packed.
// CHECK-LABEL: func.func @reordered
// CHECK: onnx.Split
// CHECK-NOT: packed_qkv
func.func @reordered(%y: tensor<2x5x64xf32>) -> tensor<2x5x32xf32> {
  %sizes = onnx.Constant {value = dense<[16, 16, 32]> : tensor<3xi64>} : tensor<3xi64>
  %p:3 = onnx.Split %y, %sizes {axis = 2 : i64} : (tensor<2x5x64xf32>, tensor<3xi64>) -> (tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x5x32xf32>)
  // expected-remark @+1 {{Q, K and V not packed: its query, key and value are not the three parts of one Split, in that order}}
  %o = tfm.attention %p#2, %p#0, %p#1 heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal : (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x32xf32>
  return %o : tensor<2x5x32xf32>
}

// -----

// Phi-3's qkv_proj taken apart by three Slices of the features, in order from the first
// (the last one's end past the width, as the export writes it): packed, the Slices go.
// CHECK-LABEL: func.func @three_slices
// CHECK-SAME: (%[[Y:[^:]*]]: tensor<2x5x64xf32>
// CHECK-NOT: onnx.Slice
// CHECK: tfm.attention %[[Y]], %[[Y]], %[[Y]] mask %{{.*}} packed_qkv
func.func @three_slices(%y: tensor<2x5x64xf32>, %mask: tensor<2x?xi64>) -> tensor<2x5x32xf32> {
  %c0 = onnx.Constant {value = dense<0> : tensor<1xi64>} : tensor<1xi64>
  %c32 = onnx.Constant {value = dense<32> : tensor<1xi64>} : tensor<1xi64>
  %c48 = onnx.Constant {value = dense<48> : tensor<1xi64>} : tensor<1xi64>
  %big = onnx.Constant {value = dense<9223372036854775807> : tensor<1xi64>} : tensor<1xi64>
  %axis = onnx.Constant {value = dense<-1> : tensor<1xi64>} : tensor<1xi64>
  %one = onnx.Constant {value = dense<1> : tensor<1xi64>} : tensor<1xi64>
  %q = onnx.Slice %y, %c0, %c32, %axis, %one : (tensor<2x5x64xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x5x32xf32>
  %k = onnx.Slice %y, %c32, %c48, %axis, %one : (tensor<2x5x64xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x5x16xf32>
  %v = onnx.Slice %y, %c48, %big, %axis, %one : (tensor<2x5x64xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x5x16xf32>
  %o = tfm.attention %q, %k, %v mask %mask heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal cache_layer 0 : (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x?xi64>) -> tensor<2x5x32xf32>
  return %o : tensor<2x5x32xf32>
}

// -----

// Slices that skip features (the keys start at 40, not 32) are not the projection's parts.
// CHECK-LABEL: func.func @slices_with_a_gap
// CHECK-COUNT-3: onnx.Slice
// CHECK-NOT: packed_qkv
func.func @slices_with_a_gap(%y: tensor<2x5x72xf32>) -> tensor<2x5x32xf32> {
  %c0 = onnx.Constant {value = dense<0> : tensor<1xi64>} : tensor<1xi64>
  %c32 = onnx.Constant {value = dense<32> : tensor<1xi64>} : tensor<1xi64>
  %c40 = onnx.Constant {value = dense<40> : tensor<1xi64>} : tensor<1xi64>
  %c56 = onnx.Constant {value = dense<56> : tensor<1xi64>} : tensor<1xi64>
  %c72 = onnx.Constant {value = dense<72> : tensor<1xi64>} : tensor<1xi64>
  %axis = onnx.Constant {value = dense<2> : tensor<1xi64>} : tensor<1xi64>
  %none = onnx.NoValue
  %q = onnx.Slice %y, %c0, %c32, %axis, %none : (tensor<2x5x72xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, none) -> tensor<2x5x32xf32>
  %k = onnx.Slice %y, %c40, %c56, %axis, %none : (tensor<2x5x72xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, none) -> tensor<2x5x16xf32>
  %v = onnx.Slice %y, %c56, %c72, %axis, %none : (tensor<2x5x72xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, none) -> tensor<2x5x16xf32>
  // expected-remark @+1 {{Q, K and V not packed: the Slices are not the consecutive parts of one projection from its first feature}}
  %o = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal : (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x32xf32>
  return %o : tensor<2x5x32xf32>
}

// -----

// OPT's query is scaled by a constant before the attention: the constant moves into the
// attention's scale (0.5 x 0.35355339), and the query is the Split's part again: packed.
// CHECK-LABEL: func.func @scaled_query
// CHECK-SAME: (%[[Y:[^:]*]]: tensor<2x5x64xf32>
// CHECK-NOT: onnx.Mul
// CHECK: tfm.attention %[[Y]], %[[Y]], %[[Y]] mask %{{.*}} heads 4 kv_heads 2 head_dim 8 scale 0.176776{{[0-9]*}} causal cache_layer 0 packed_qkv
func.func @scaled_query(%y: tensor<2x5x64xf32>, %mask: tensor<2x?xi64>) -> tensor<2x5x32xf32> {
  %sizes = onnx.Constant {value = dense<[32, 16, 16]> : tensor<3xi64>} : tensor<3xi64>
  %half = onnx.Constant {value = dense<0.5> : tensor<f32>} : tensor<f32>
  %p:3 = onnx.Split %y, %sizes {axis = 2 : i64} : (tensor<2x5x64xf32>, tensor<3xi64>) -> (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>)
  %q = onnx.Mul %p#0, %half : (tensor<2x5x32xf32>, tensor<f32>) -> tensor<2x5x32xf32>
  %o = tfm.attention %q, %p#1, %p#2 mask %mask heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal cache_layer 0 : (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>, tensor<2x?xi64>) -> tensor<2x5x32xf32>
  return %o : tensor<2x5x32xf32>
}

// -----

// A negative constant is not a scale (the attention's must be positive): the Mul stays,
// and so does the Split.
// CHECK-LABEL: func.func @negated_query
// CHECK: onnx.Mul
// CHECK-NOT: packed_qkv
func.func @negated_query(%y: tensor<2x5x64xf32>) -> tensor<2x5x32xf32> {
  %sizes = onnx.Constant {value = dense<[32, 16, 16]> : tensor<3xi64>} : tensor<3xi64>
  %minus = onnx.Constant {value = dense<-1.0> : tensor<f32>} : tensor<f32>
  %p:3 = onnx.Split %y, %sizes {axis = 2 : i64} : (tensor<2x5x64xf32>, tensor<3xi64>) -> (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>)
  %q = onnx.Mul %minus, %p#0 : (tensor<f32>, tensor<2x5x32xf32>) -> tensor<2x5x32xf32>
  // expected-remark @+1 {{Q, K and V not packed: its query, key and value are not the three parts of one Split or of three Slices along the features}}
  %o = tfm.attention %q, %p#1, %p#2 heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal : (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x32xf32>
  return %o : tensor<2x5x32xf32>
}
