// dsc-fuse-projections: the linears of one input become one linear over their weights
// (tfm.concat_weights), then a Split into the old results.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-projections | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-fuse-projections=remarks --verify-diagnostics -o /dev/null

// Grouped-query Q, K, V with biases (Qwen2): 32 + 16 + 16 features. The weights move up to
// the first projection; the split sizes are the old results' feature counts.
// CHECK-LABEL: func.func @qkv
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x5x32xf32>)
// CHECK-DAG: %[[WQ:.*]] = tfm.weight "q"
// CHECK-DAG: %[[WK:.*]] = tfm.weight "k"
// CHECK-DAG: %[[WV:.*]] = tfm.weight "v"
// CHECK-DAG: %[[BQ:.*]] = tfm.weight "q.bias"
// CHECK-DAG: %[[BK:.*]] = tfm.weight "k.bias"
// CHECK-DAG: %[[BV:.*]] = tfm.weight "v.bias"
// CHECK: %[[W:.*]] = tfm.concat_weights %[[WQ]], %[[WK]], %[[WV]] : (tensor<32x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<64x32xf32>
// CHECK-NEXT: %[[B:.*]] = tfm.concat_weights %[[BQ]], %[[BK]], %[[BV]] : (tensor<32xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<64xf32>
// CHECK-NEXT: %[[Y:.*]] = tfm.linear %[[X]], %[[W]] bias %[[B]] : (tensor<2x5x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<2x5x64xf32>
// CHECK-NEXT: %[[SIZES:.*]] = onnx.Constant {value = dense<[32, 16, 16]> : tensor<3xi64>}
// CHECK-NEXT: %[[P:.*]]:3 = onnx.Split %[[Y]], %[[SIZES]] {axis = 2 : i64} : (tensor<2x5x64xf32>, tensor<3xi64>) -> (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>)
// CHECK-NOT: tfm.linear
// CHECK: tfm.attention %[[P]]#0, %[[P]]#1, %[[P]]#2
func.func @qkv(%x: tensor<2x5x32xf32>) -> tensor<2x5x32xf32> {
  %wq = tfm.weight "q" : tensor<32x32xf32> -> tensor<32x32xf32>
  %bq = tfm.weight "q.bias" : tensor<32xf32> -> tensor<32xf32>
  %q = tfm.linear %x, %wq bias %bq : (tensor<2x5x32xf32>, tensor<32x32xf32>, tensor<32xf32>) -> tensor<2x5x32xf32>
  %wk = tfm.weight "k" : tensor<16x32xf32> -> tensor<16x32xf32>
  %bk = tfm.weight "k.bias" : tensor<16xf32> -> tensor<16xf32>
  %k = tfm.linear %x, %wk bias %bk : (tensor<2x5x32xf32>, tensor<16x32xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %wv = tfm.weight "v" : tensor<16x32xf32> -> tensor<16x32xf32>
  %bv = tfm.weight "v.bias" : tensor<16xf32> -> tensor<16xf32>
  %v = tfm.linear %x, %wv bias %bv : (tensor<2x5x32xf32>, tensor<16x32xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %o = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal : (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x32xf32>
  return %o : tensor<2x5x32xf32>
}

// -----

// int8 gate and up of a TP rank: the int8 weights and their scales are joined alike, each
// keeping its even column-parallel shard; the projection stays column-parallel. The gated
// activation reads the joined result: no Split. Up comes first in the block here; the
// gate's rows still come first in the joined weight.
// CHECK-LABEL: func.func @gate_up_int8
// CHECK-DAG: %[[WG:.*]] = tfm.weight "gate" {{.*}}quantize_int8
// CHECK-DAG: %[[WU:.*]] = tfm.weight "up" {{.*}}quantize_int8
// CHECK-DAG: %[[SG:.*]] = tfm.weight "gate" {{.*}}quant_scales
// CHECK-DAG: %[[SU:.*]] = tfm.weight "up" {{.*}}quant_scales
// CHECK: %[[W:.*]] = tfm.concat_weights %[[WG]], %[[WU]] : (tensor<24x16xi8>, tensor<24x16xi8>) -> tensor<48x16xi8>
// CHECK-NEXT: %[[S:.*]] = tfm.concat_weights %[[SG]], %[[SU]] : (tensor<24x1xf32>, tensor<24x1xf32>) -> tensor<48x1xf32>
// CHECK-NEXT: %[[Y:.*]] = tfm.linear %arg0, %[[W]] scales %[[S]] parallel column : (tensor<3x16xf32>, tensor<48x16xi8>, tensor<48x1xf32>) -> tensor<3x48xf32>
// CHECK-NEXT: %[[A:.*]] = tfm.gated_act_packed silu %[[Y]] : tensor<3x48xf32> -> tensor<3x24xf32>
// CHECK-NEXT: return %[[A]]
// CHECK-NOT: onnx.Split
func.func @gate_up_int8(%x: tensor<3x16xf32>) -> tensor<3x24xf32> {
  %wg = tfm.weight "gate" : tensor<48x16xf32> [#tfm.shard<axis = 0, offsets = [0, 24], sizes = [24, 24], groups = 1>, #tfm.quantize_int8<group_size = 0>] -> tensor<24x16xi8>
  %sg = tfm.weight "gate" : tensor<48x16xf32> [#tfm.shard<axis = 0, offsets = [0, 24], sizes = [24, 24], groups = 1>, #tfm.quant_scales<group_size = 0, dtype = f32>] -> tensor<24x1xf32>
  %wu = tfm.weight "up" : tensor<48x16xf32> [#tfm.shard<axis = 0, offsets = [0, 24], sizes = [24, 24], groups = 1>, #tfm.quantize_int8<group_size = 0>] -> tensor<24x16xi8>
  %su = tfm.weight "up" : tensor<48x16xf32> [#tfm.shard<axis = 0, offsets = [0, 24], sizes = [24, 24], groups = 1>, #tfm.quant_scales<group_size = 0, dtype = f32>] -> tensor<24x1xf32>
  %u = tfm.linear %x, %wu scales %su parallel column : (tensor<3x16xf32>, tensor<24x16xi8>, tensor<24x1xf32>) -> tensor<3x24xf32>
  %g = tfm.linear %x, %wg scales %sg parallel column : (tensor<3x16xf32>, tensor<24x16xi8>, tensor<24x1xf32>) -> tensor<3x24xf32>
  %a = tfm.gated_act silu %g, %u : tensor<3x24xf32>
  return %a : tensor<3x24xf32>
}

// -----

// What stays apart, each with its reason: a row-parallel linear, one with an epilogue, an
// uneven TP shard (ranks would split the joined result at different offsets), and a linear
// whose in-features or bias differ from its siblings'. The two that agree are joined.
// CHECK-LABEL: func.func @declines
// CHECK-COUNT-1: tfm.concat_weights
// CHECK-NOT: tfm.concat_weights
// CHECK: onnx.Split
func.func @declines(%x: tensor<3x8xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x3xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>) {
  %w0 = tfm.weight "row" : tensor<8x8xf32> -> tensor<8x8xf32>
  // expected-remark @below {{not joined with the other projections of its input: it is row-parallel}}
  %r = tfm.linear %x, %w0 parallel row : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  %w1 = tfm.weight "act" : tensor<8x8xf32> -> tensor<8x8xf32>
  // expected-remark @below {{not joined with the other projections of its input: it has an epilogue already}}
  %a = tfm.linear %x, %w1 activation gelu_tanh : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  %w2 = tfm.weight "uneven" : tensor<5x8xf32> [#tfm.shard<axis = 0, offsets = [0, 3], sizes = [3, 2], groups = 1>] -> tensor<3x8xf32>
  // expected-remark @below {{its weight's tensor-parallel shard differs in size between ranks}}
  %u = tfm.linear %x, %w2 parallel column : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x3xf32>
  %w3 = tfm.weight "biased" : tensor<4x8xf32> -> tensor<4x8xf32>
  %b3 = tfm.weight "biased.bias" : tensor<4xf32> -> tensor<4xf32>
  // expected-remark @below {{they differ in weight, scale or bias types, in-features, parallelism or result shape}}
  %b = tfm.linear %x, %w3 bias %b3 : (tensor<3x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %w4 = tfm.weight "plain1" : tensor<4x8xf32> -> tensor<4x8xf32>
  %p1 = tfm.linear %x, %w4 : (tensor<3x8xf32>, tensor<4x8xf32>) -> tensor<3x4xf32>
  %w5 = tfm.weight "plain2" : tensor<4x8xf32> -> tensor<4x8xf32>
  %p2 = tfm.linear %x, %w5 : (tensor<3x8xf32>, tensor<4x8xf32>) -> tensor<3x4xf32>
  return %r, %a, %u, %b, %p1, %p2 : tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x3xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>
}

// -----

// One linear per input: nothing to join, nothing changes, no remark.
// CHECK-LABEL: func.func @alone
// CHECK-NOT: tfm.concat_weights
// CHECK-NOT: onnx.Split
func.func @alone(%x: tensor<3x8xf32>, %y: tensor<3x8xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>) {
  %w = tfm.weight "w" : tensor<4x8xf32> -> tensor<4x8xf32>
  %a = tfm.linear %x, %w : (tensor<3x8xf32>, tensor<4x8xf32>) -> tensor<3x4xf32>
  %b = tfm.linear %y, %w : (tensor<3x8xf32>, tensor<4x8xf32>) -> tensor<3x4xf32>
  return %a, %b : tensor<3x4xf32>, tensor<3x4xf32>
}

// -----

// Gate and up whose up projection has another reader: the gated activation cannot take the
// joined result alone, so a Split gives both halves.
// CHECK-LABEL: func.func @gate_up_shared
// CHECK: %[[P:.*]]:2 = onnx.Split
// CHECK-NEXT: tfm.gated_act gelu_tanh %[[P]]#0, %[[P]]#1
// CHECK-NOT: tfm.gated_act_packed
func.func @gate_up_shared(%x: tensor<3x16xf32>) -> (tensor<3x24xf32>, tensor<3x24xf32>) {
  %wg = tfm.weight "gate" : tensor<24x16xf32> -> tensor<24x16xf32>
  %wu = tfm.weight "up" : tensor<24x16xf32> -> tensor<24x16xf32>
  %g = tfm.linear %x, %wg : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  %u = tfm.linear %x, %wu : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  %a = tfm.gated_act gelu_tanh %g, %u : tensor<3x24xf32>
  return %a, %u : tensor<3x24xf32>, tensor<3x24xf32>
}
