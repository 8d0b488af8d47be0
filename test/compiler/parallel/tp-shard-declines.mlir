// The tp-shard pass on hand-written tfm IR (dsc-opt): a layer it shards, and what it
// leaves replicated, with the reason.
// RUN: dsc-opt %s --dsc-tp-shard=ranks=2 2>&1 | FileCheck %s

// What stays replicated is said first, as warnings:
// CHECK: warning: tp-shard: @two_readers: every attention stays replicated: this attention cannot be sharded: the attention output has more than one user
// CHECK: warning: tp-shard: @mlp_without_attention: attention stays replicated: it has no recognised attention
// CHECK: warning: tp-shard: @no_attention: attention stays replicated: it has no recognised attention
// CHECK: warning: tp-shard: @one_head: every attention stays replicated: this attention cannot be sharded: 2 ranks are more than its 1 query heads

// Two heads of 4 over 2 ranks, a 6-wide MLP split 3 + 3, biases after the all-reduces.
// CHECK: module attributes {dsc.tp_ranks = 2 : i64}
// CHECK-LABEL: func.func @layer
// CHECK-DAG: tfm.weight "q" : tensor<8x8xf32> [#tfm.shard<axis = 0, offsets = [0, 4], sizes = [4, 4], groups = 1>] -> tensor<4x8xf32>
// CHECK-DAG: tfm.weight "o" : tensor<8x8xf32> [#tfm.shard<axis = 1, offsets = [0, 4], sizes = [4, 4], groups = 1>] -> tensor<8x4xf32>
// CHECK-DAG: tfm.weight "up" : tensor<6x8xf32> [#tfm.shard<axis = 0, offsets = [0, 3], sizes = [3, 3], groups = 1>] -> tensor<3x8xf32>
// CHECK-DAG: tfm.weight "down" : tensor<8x6xf32> [#tfm.shard<axis = 1, offsets = [0, 3], sizes = [3, 3], groups = 1>] -> tensor<8x3xf32>
// CHECK: tfm.attention {{.*}} heads 1 kv_heads 1 head_dim 4 {{.*}}tfm.rank_heads = [1, 1]
// CHECK: %[[O:.*]] = tfm.linear {{.*}} parallel  row : (tensor<2x5x4xf32>, tensor<8x4xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: %[[R:.*]] = tfm.all_reduce %[[O]] ranks 2
// CHECK-NEXT: onnx.Add %[[R]], {{.*}} : (tensor<2x5x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
// CHECK: tfm.activation relu {{.*}} : tensor<2x5x3xf32>
// CHECK: tfm.all_reduce
// CHECK-NOT: "up" : tensor<6x8xf32> -> tensor<6x8xf32>
func.func @layer(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  %wq = tfm.weight "q" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wk = tfm.weight "k" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wv = tfm.weight "v" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wo = tfm.weight "o" : tensor<8x8xf32> -> tensor<8x8xf32>
  %bo = tfm.weight "o.bias" : tensor<8xf32> -> tensor<8xf32>
  %wu = tfm.weight "up" : tensor<6x8xf32> -> tensor<6x8xf32>
  %wd = tfm.weight "down" : tensor<8x6xf32> -> tensor<8x6xf32>
  %q = tfm.linear %x, %wq : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %k = tfm.linear %x, %wk : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %v = tfm.linear %x, %wv : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %a = tfm.attention %q, %k, %v heads 2 kv_heads 2 head_dim 4 scale 5.000000e-01 causal : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %o = tfm.linear %a, %wo bias %bo : (tensor<2x5x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %h = tfm.residual_add %x, %o : tensor<2x5x8xf32>
  %u = tfm.linear %h, %wu : (tensor<2x5x8xf32>, tensor<6x8xf32>) -> tensor<2x5x6xf32>
  %r = tfm.activation relu %u : tensor<2x5x6xf32>
  %d = tfm.linear %r, %wd : (tensor<2x5x6xf32>, tensor<8x6xf32>) -> tensor<2x5x8xf32>
  %y = tfm.residual_add %h, %d : tensor<2x5x8xf32>
  return %y : tensor<2x5x8xf32>
}

// The attention output is read twice: no single output projection to make row-parallel,
// so the attention stays replicated; the MLP after it is sharded all the same.
// CHECK-LABEL: func.func @two_readers
// CHECK-NOT: parallel  column : (tensor<2x5x8xf32>, tensor<8x8xf32>)
// CHECK: tfm.linear {{.*}} : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
// CHECK: tfm.linear {{.*}} parallel  column : (tensor<2x5x8xf32>, tensor<3x8xf32>) -> tensor<2x5x3xf32>
// CHECK: tfm.activation relu {{.*}} : tensor<2x5x3xf32>
// CHECK: tfm.linear {{.*}} parallel  row : (tensor<2x5x3xf32>, tensor<8x3xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: tfm.all_reduce
func.func @two_readers(%x: tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>) {
  %wq = tfm.weight "q" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wk = tfm.weight "k" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wv = tfm.weight "v" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wo = tfm.weight "o" : tensor<8x8xf32> -> tensor<8x8xf32>
  %q = tfm.linear %x, %wq : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %k = tfm.linear %x, %wk : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %v = tfm.linear %x, %wv : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %a = tfm.attention %q, %k, %v heads 2 kv_heads 2 head_dim 4 scale 5.000000e-01 causal : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %o = tfm.linear %a, %wo : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %h = tfm.residual_add %x, %o : tensor<2x5x8xf32>
  %wu = tfm.weight "up" : tensor<6x8xf32> -> tensor<6x8xf32>
  %wd = tfm.weight "down" : tensor<8x6xf32> -> tensor<8x6xf32>
  %u = tfm.linear %h, %wu : (tensor<2x5x8xf32>, tensor<6x8xf32>) -> tensor<2x5x6xf32>
  %r = tfm.activation relu %u : tensor<2x5x6xf32>
  %d = tfm.linear %r, %wd : (tensor<2x5x6xf32>, tensor<8x6xf32>) -> tensor<2x5x8xf32>
  %y = tfm.residual_add %h, %d : tensor<2x5x8xf32>
  return %y, %a : tensor<2x5x8xf32>, tensor<2x5x8xf32>
}

// No recognised attention (a model whose attention runs generic): its MLP is sharded.
// CHECK-LABEL: func.func @mlp_without_attention
// CHECK: tfm.linear {{.*}} parallel  column
// CHECK: tfm.linear {{.*}} parallel  row
// CHECK-NEXT: tfm.all_reduce
func.func @mlp_without_attention(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  %wu = tfm.weight "up" : tensor<6x8xf32> -> tensor<6x8xf32>
  %wd = tfm.weight "down" : tensor<8x6xf32> -> tensor<8x6xf32>
  %u = tfm.linear %x, %wu : (tensor<2x5x8xf32>, tensor<6x8xf32>) -> tensor<2x5x6xf32>
  %r = tfm.activation relu %u : tensor<2x5x6xf32>
  %d = tfm.linear %r, %wd : (tensor<2x5x6xf32>, tensor<8x6xf32>) -> tensor<2x5x8xf32>
  %y = tfm.residual_add %x, %d : tensor<2x5x8xf32>
  return %y : tensor<2x5x8xf32>
}

// No recognised attention and no MLP: nothing is sharded.
// CHECK-LABEL: func.func @no_attention
// CHECK-NOT: parallel
func.func @no_attention(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  return %x : tensor<2x5x8xf32>
}

// One query head over 2 ranks (a held-out Qwen3 draw): no rank can take a head, so the
// attention is computed whole on each; the MLP after it is sharded all the same. It was
// refused ("--tp 2 is more than the 1 query heads").
// CHECK-LABEL: func.func @one_head
// CHECK: tfm.attention {{.*}} heads 1 kv_heads 1 head_dim 8
// CHECK-NOT: tfm.rank_heads
// CHECK: tfm.linear {{.*}} parallel  column : (tensor<2x5x8xf32>, tensor<3x8xf32>) -> tensor<2x5x3xf32>
// CHECK: tfm.linear {{.*}} parallel  row : (tensor<2x5x3xf32>, tensor<8x3xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: tfm.all_reduce
func.func @one_head(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  %wq = tfm.weight "q" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wk = tfm.weight "k" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wv = tfm.weight "v" : tensor<8x8xf32> -> tensor<8x8xf32>
  %wo = tfm.weight "o" : tensor<8x8xf32> -> tensor<8x8xf32>
  %q = tfm.linear %x, %wq : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %k = tfm.linear %x, %wk : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %v = tfm.linear %x, %wv : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %a = tfm.attention %q, %k, %v heads 1 kv_heads 1 head_dim 8 scale 5.000000e-01 causal : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %o = tfm.linear %a, %wo : (tensor<2x5x8xf32>, tensor<8x8xf32>) -> tensor<2x5x8xf32>
  %h = tfm.residual_add %x, %o : tensor<2x5x8xf32>
  %wu = tfm.weight "up" : tensor<6x8xf32> -> tensor<6x8xf32>
  %wd = tfm.weight "down" : tensor<8x6xf32> -> tensor<8x6xf32>
  %u = tfm.linear %h, %wu : (tensor<2x5x8xf32>, tensor<6x8xf32>) -> tensor<2x5x6xf32>
  %r = tfm.activation relu %u : tensor<2x5x6xf32>
  %d = tfm.linear %r, %wd : (tensor<2x5x6xf32>, tensor<8x6xf32>) -> tensor<2x5x8xf32>
  %y = tfm.residual_add %h, %d : tensor<2x5x8xf32>
  return %y : tensor<2x5x8xf32>
}
