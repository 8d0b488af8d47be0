// dsc-unpack-qkv: a fused projection whose per-head [q, k, v] rows (GPT-NeoX's) or [q | k | v]
// columns split twice (GPTBigCode's) the export takes apart becomes one projection per part,
// each over its rows of the weight and bias (#tfm.blocks); the plumbing goes. What it
// declines, with the reason (remarks). In the whole pipeline the parts join again and the
// attention reads them packed.
// RUN: dsc-opt %s --split-input-file --dsc-unpack-qkv=remarks --verify-diagnostics | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-unpack-qkv --dsc-fuse | FileCheck %s --check-prefix=PIPELINE

// CHECK-LABEL: func.func @neox
// CHECK-DAG: %[[WQ:.*]] = tfm.weight "qkv" : tensor<96x32xf32> [#tfm.blocks<axis = 0, groups = 2, offset = 0, size = 16>] -> tensor<32x32xf32>
// CHECK-DAG: %[[WK:.*]] = tfm.weight "qkv" : tensor<96x32xf32> [#tfm.blocks<axis = 0, groups = 2, offset = 16, size = 16>] -> tensor<32x32xf32>
// CHECK-DAG: %[[WV:.*]] = tfm.weight "qkv" : tensor<96x32xf32> [#tfm.blocks<axis = 0, groups = 2, offset = 32, size = 16>] -> tensor<32x32xf32>
// CHECK-DAG: %[[BQ:.*]] = tfm.weight "qkv.bias" : tensor<96xf32> [#tfm.blocks<axis = 0, groups = 2, offset = 0, size = 16>] -> tensor<32xf32>
// CHECK-DAG: %[[Q:.*]] = tfm.linear %arg0, %[[WQ]] bias %[[BQ]] :
// CHECK-DAG: %[[K:.*]] = tfm.linear %arg0, %[[WK]] bias
// CHECK-DAG: %[[V:.*]] = tfm.linear %arg0, %[[WV]] bias
// CHECK-NOT: onnx.Split
// CHECK-NOT: onnx.Transpose
// CHECK: tfm.attention %[[Q]], %[[K]], %[[V]] mask %arg1
// PIPELINE-LABEL: func.func @neox
// PIPELINE: %[[QKV:.*]] = tfm.linear %arg0, %{{[^ ]*}} bias %{{[^ ]*}} :
// PIPELINE-NOT: onnx.Split
// PIPELINE: tfm.attention %[[QKV]], %[[QKV]], %[[QKV]] mask %arg1 {{.*}}packed_qkv
func.func @neox(%x: tensor<1x4x32xf32>, %mask: tensor<1x4xi64>) -> tensor<1x4x32xf32> {
  %w = tfm.weight "qkv" : tensor<96x32xf32> -> tensor<96x32xf32>
  %b = tfm.weight "qkv.bias" : tensor<96xf32> -> tensor<96xf32>
  %heads = onnx.Constant {value = dense<[1, 4, 2, 48]> : tensor<4xi64>} : tensor<4xi64>
  %flat = onnx.Constant {value = dense<[1, 4, 32]> : tensor<3xi64>} : tensor<3xi64>
  %none = onnx.NoValue
  %qkv = tfm.linear %x, %w bias %b : (tensor<1x4x32xf32>, tensor<96x32xf32>, tensor<96xf32>) -> tensor<1x4x96xf32>
  %r = "onnx.Reshape"(%qkv, %heads) : (tensor<1x4x96xf32>, tensor<4xi64>) -> tensor<1x4x2x48xf32>
  %t = "onnx.Transpose"(%r) {perm = [0, 2, 1, 3]} : (tensor<1x4x2x48xf32>) -> tensor<1x2x4x48xf32>
  %parts:3 = "onnx.Split"(%t, %none) {axis = 3 : i64} : (tensor<1x2x4x48xf32>, none) -> (tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>)
  %q4 = "onnx.Transpose"(%parts#0) {perm = [0, 2, 1, 3]} : (tensor<1x2x4x16xf32>) -> tensor<1x4x2x16xf32>
  %q = "onnx.Reshape"(%q4, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %k4 = "onnx.Transpose"(%parts#1) {perm = [0, 2, 1, 3]} : (tensor<1x2x4x16xf32>) -> tensor<1x4x2x16xf32>
  %k = "onnx.Reshape"(%k4, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %v4 = "onnx.Transpose"(%parts#2) {perm = [0, 2, 1, 3]} : (tensor<1x2x4x16xf32>) -> tensor<1x4x2x16xf32>
  %v = "onnx.Reshape"(%v4, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %o = tfm.attention %q, %k, %v mask %mask heads 2 kv_heads 2 head_dim 16 scale 0.25 causal : (tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4xi64>) -> tensor<1x4x32xf32>
  return %o : tensor<1x4x32xf32>
}

// -----

// Something else reads the fused result: the parts would be computed twice. Left alone.
// CHECK-LABEL: func.func @fused_result_read_twice
// CHECK: onnx.Split
func.func @fused_result_read_twice(%x: tensor<1x4x32xf32>, %mask: tensor<1x4xi64>) -> (tensor<1x4x32xf32>, tensor<1x4x96xf32>) {
  %w = tfm.weight "qkv" : tensor<96x32xf32> -> tensor<96x32xf32>
  %heads = onnx.Constant {value = dense<[1, 4, 2, 48]> : tensor<4xi64>} : tensor<4xi64>
  %flat = onnx.Constant {value = dense<[1, 4, 32]> : tensor<3xi64>} : tensor<3xi64>
  %none = onnx.NoValue
  %qkv = tfm.linear %x, %w : (tensor<1x4x32xf32>, tensor<96x32xf32>) -> tensor<1x4x96xf32>
  %r = "onnx.Reshape"(%qkv, %heads) : (tensor<1x4x96xf32>, tensor<4xi64>) -> tensor<1x4x2x48xf32>
  %parts:3 = "onnx.Split"(%r, %none) {axis = 3 : i64} : (tensor<1x4x2x48xf32>, none) -> (tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>)
  %q = "onnx.Reshape"(%parts#0, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %k = "onnx.Reshape"(%parts#1, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %v = "onnx.Reshape"(%parts#2, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  // expected-remark @below {{Q, K and V not unpacked: the fused projection's result has other readers}}
  %o = tfm.attention %q, %k, %v mask %mask heads 2 kv_heads 2 head_dim 16 scale 0.25 causal : (tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4xi64>) -> tensor<1x4x32xf32>
  return %o, %qkv : tensor<1x4x32xf32>, tensor<1x4x96xf32>
}

// -----

// BLOOM-style gathers of the parts in another order than the attention's: not understood.
// CHECK-LABEL: func.func @gathers_out_of_order
// CHECK: onnx.Gather
func.func @gathers_out_of_order(%x: tensor<1x4x32xf32>, %mask: tensor<1x4xi64>) -> tensor<1x4x32xf32> {
  %w = tfm.weight "qkv" : tensor<96x32xf32> -> tensor<96x32xf32>
  %heads = onnx.Constant {value = dense<[1, 4, 2, 3, 16]> : tensor<5xi64>} : tensor<5xi64>
  %flat = onnx.Constant {value = dense<[1, 4, 32]> : tensor<3xi64>} : tensor<3xi64>
  %i0 = onnx.Constant {value = dense<0> : tensor<i64>} : tensor<i64>
  %i1 = onnx.Constant {value = dense<1> : tensor<i64>} : tensor<i64>
  %i2 = onnx.Constant {value = dense<2> : tensor<i64>} : tensor<i64>
  %qkv = tfm.linear %x, %w : (tensor<1x4x32xf32>, tensor<96x32xf32>) -> tensor<1x4x96xf32>
  %r = "onnx.Reshape"(%qkv, %heads) : (tensor<1x4x96xf32>, tensor<5xi64>) -> tensor<1x4x2x3x16xf32>
  %g1 = "onnx.Gather"(%r, %i1) {axis = 3 : i64} : (tensor<1x4x2x3x16xf32>, tensor<i64>) -> tensor<1x4x2x16xf32>
  %g0 = "onnx.Gather"(%r, %i0) {axis = 3 : i64} : (tensor<1x4x2x3x16xf32>, tensor<i64>) -> tensor<1x4x2x16xf32>
  %g2 = "onnx.Gather"(%r, %i2) {axis = 3 : i64} : (tensor<1x4x2x3x16xf32>, tensor<i64>) -> tensor<1x4x2x16xf32>
  %q = "onnx.Reshape"(%g1, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %k = "onnx.Reshape"(%g0, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  %v = "onnx.Reshape"(%g2, %flat) : (tensor<1x4x2x16xf32>, tensor<3xi64>) -> tensor<1x4x32xf32>
  // expected-remark @below {{Q, K and V not unpacked: a fused projection's slices or gathers do not give q, k and v in that order}}
  %o = tfm.attention %q, %k, %v mask %mask heads 2 kv_heads 2 head_dim 16 scale 0.25 causal : (tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4x32xf32>, tensor<1x4xi64>) -> tensor<1x4x32xf32>
  return %o : tensor<1x4x32xf32>
}
