// dsc-derive-cache-programs: a decoder whose attention is all recognised gets @prefill and
// @decode with the session cache (no past inputs, no present outputs, cache_layer kept,
// logits only); @main keeps the export's I/O interface. Encoders and graphs with an
// unrecognised softmax keep @main only, and say why.
// RUN: dsc-opt %s --split-input-file --dsc-derive-cache-programs=report --verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @main(
// CHECK-SAME: "past.0.key"
// CHECK: tfm.attention {{.*}} past({{.*}}) {{.*}} cache_layer 0
// CHECK: return
// CHECK-LABEL: func.func @prefill(
// CHECK-SAME: %[[Q:[^:]*]]: tensor<?x?x8xf32> {onnx.name = "q"}, %[[K:[^:]*]]: tensor<?x?x8xf32> {onnx.name = "k"}, %[[V:[^:]*]]: tensor<?x?x8xf32> {onnx.name = "v"}, %[[MASK:[^:]*]]: tensor<?x?xi64> {onnx.name = "attention_mask"})
// CHECK-SAME: -> (tensor<?x?x8xf32> {onnx.name = "logits"})
// CHECK-NEXT: %[[OUT:.*]] = tfm.attention %[[Q]], %[[K]], %[[V]] mask %[[MASK]] heads 2 kv_heads 2 head_dim 4 scale 5.000000e-01 causal cache_layer 0 :
// CHECK-NEXT: %[[LOGITS:.*]] = onnx.Neg %[[OUT]]
// CHECK-NEXT: return %[[LOGITS]]
// CHECK-LABEL: func.func @decode(
// CHECK-NOT: past
// CHECK: tfm.attention {{.*}} cache_layer 0 :
func.func @main(%q: tensor<?x?x8xf32> {onnx.name = "q"}, %k: tensor<?x?x8xf32> {onnx.name = "k"},
                %v: tensor<?x?x8xf32> {onnx.name = "v"},
                %mask: tensor<?x?xi64> {onnx.name = "attention_mask"},
                %pk: tensor<?x2x?x4xf32> {onnx.name = "past.0.key"},
                %pv: tensor<?x2x?x4xf32> {onnx.name = "past.0.value"})
    -> (tensor<?x?x8xf32> {onnx.name = "logits"}, tensor<?x2x?x4xf32> {onnx.name = "present.0.key"},
        tensor<?x2x?x4xf32> {onnx.name = "present.0.value"}) {
  %out, %present:2 = tfm.attention %q, %k, %v mask %mask past(%pk, %pv) heads 2 kv_heads 2 head_dim 4 scale 0.5 causal cache_layer 0 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?xi64>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>) -> (tensor<?x?x8xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>)
  %logits = onnx.Neg %out : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %logits, %present#0, %present#1 : tensor<?x?x8xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>
}

// -----

// Without past inputs, the export's forward attends only to the tokens it is given: it
// loses cache_layer (I/O mode), while the derived programs keep it (session mode).
// CHECK-LABEL: func.func @main(
// CHECK: tfm.attention
// CHECK-NOT: cache_layer
// CHECK-SAME: :
// CHECK-LABEL: func.func @prefill(
// CHECK: tfm.attention {{.*}} cache_layer 0 :
// CHECK-LABEL: func.func @decode(
func.func @main(%q: tensor<?x?x8xf32> {onnx.name = "q"}, %k: tensor<?x?x8xf32> {onnx.name = "k"},
                %v: tensor<?x?x8xf32> {onnx.name = "v"},
                %mask: tensor<?x?xi64> {onnx.name = "attention_mask"})
    -> (tensor<?x?x8xf32> {onnx.name = "logits"}) {
  %out = tfm.attention %q, %k, %v mask %mask heads 2 kv_heads 2 head_dim 4 scale 0.5 causal cache_layer 0 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?xi64>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// An encoder: no cache programs.
// CHECK-LABEL: func.func @main(
// CHECK-NOT: func.func @prefill
// expected-remark @below {{no prefill/decode programs: an attention is not causal}}
func.func @main(%q: tensor<?x?x8xf32> {onnx.name = "q"}, %mask: tensor<?x?xi64> {onnx.name = "attention_mask"})
    -> (tensor<?x?x8xf32> {onnx.name = "logits"}) {
  %out = tfm.attention %q, %q, %q mask %mask heads 2 kv_heads 2 head_dim 4 scale 0.5 cache_layer 0 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?xi64>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// A layer whose attention stayed generic: no cache programs (its keys would not reach the
// session cache).
// CHECK-LABEL: func.func @main(
// CHECK-NOT: func.func @prefill
// expected-remark @below {{no prefill/decode programs: a softmax was not recognised as attention}}
func.func @main(%q: tensor<?x?x8xf32> {onnx.name = "q"}, %mask: tensor<?x?xi64> {onnx.name = "attention_mask"})
    -> (tensor<?x?x8xf32> {onnx.name = "logits"}) {
  %out = tfm.attention %q, %q, %q mask %mask heads 2 kv_heads 2 head_dim 4 scale 0.5 causal cache_layer 0 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?xi64>) -> tensor<?x?x8xf32>
  %p = onnx.Softmax %out : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %p : tensor<?x?x8xf32>
}

// -----

// A mask read outside the attention for something other than positions: no cache programs.
// CHECK-LABEL: func.func @main(
// CHECK-NOT: func.func @prefill
// expected-remark @below {{no prefill/decode programs: attention_mask is also read outside the attention, for more than positions (which would need a past length the session cache does not give)}}
func.func @main(%q: tensor<?x?x8xf32> {onnx.name = "q"}, %mask: tensor<?x?xi64> {onnx.name = "attention_mask"})
    -> (tensor<?x?x8xf32> {onnx.name = "logits"}, tensor<?x?xf32> {onnx.name = "m"}) {
  %out = tfm.attention %q, %q, %q mask %mask heads 2 kv_heads 2 head_dim 4 scale 0.5 causal cache_layer 0 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?xi64>) -> tensor<?x?x8xf32>
  %m = onnx.Cast %mask {to = f32} : (tensor<?x?xi64>) -> tensor<?x?xf32>
  return %out, %m : tensor<?x?x8xf32>, tensor<?x?xf32>
}

// -----

// Without past inputs, OPT computes its positions from the mask (cumsum(mask) * mask - 1
// + 2) over every column. In the session programs the mask also covers the cached tokens,
// so the position embedding takes the last width(input_ids) columns; @main is unchanged.
// CHECK-LABEL: func.func @main(
// CHECK-NOT: onnx.Slice
// CHECK-LABEL: func.func @prefill(
// CHECK-SAME: %[[IDS:[^:]*]]: tensor<?x?xi64> {onnx.name = "input_ids"}
// CHECK: %[[IDSSHAPE:.*]] = onnx.Shape %[[IDS]]
// CHECK: %[[FRESH:.*]] = onnx.Gather %[[IDSSHAPE]]
// CHECK: %[[START:.*]] = onnx.Neg %[[FRESH]]
// CHECK: %[[POSITIONS:.*]] = onnx.Add
// CHECK: %[[LAST:.*]] = onnx.Slice %[[POSITIONS]], %[[START]]
// CHECK: tfm.embedding %[[LAST]]
// CHECK-LABEL: func.func @decode(
// CHECK: onnx.Slice
func.func @main(%ids: tensor<?x?xi64> {onnx.name = "input_ids"}, %mask: tensor<?x?xi64> {onnx.name = "attention_mask"})
    -> (tensor<?x?x8xf32> {onnx.name = "logits"}) {
  %table = tfm.weight "positions" : tensor<16x8xf32> -> tensor<16x8xf32>
  %axis = onnx.Constant {value = dense<1> : tensor<i64>} : tensor<i64>
  %sum = onnx.CumSum %mask, %axis : (tensor<?x?xi64>, tensor<i64>) -> tensor<?x?xi64>
  %two = onnx.Constant {value = dense<2> : tensor<i64>} : tensor<i64>
  %positions = onnx.Add %sum, %two : (tensor<?x?xi64>, tensor<i64>) -> tensor<?x?xi64>
  %q = tfm.embedding %positions, %table : (tensor<?x?xi64>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  %out = tfm.attention %q, %q, %q mask %mask heads 2 kv_heads 2 head_dim 4 scale 0.5 causal cache_layer 0 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?xi64>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// With past inputs, the export may read the past's shape outside the attention (OPT: the
// past length its positions start from): in the session programs that shape is
// [batch, kv_heads, width(attention_mask) - width(input_ids), head_dim].
// CHECK-LABEL: func.func @main(
// CHECK-LABEL: func.func @prefill(
// CHECK-SAME: %[[IDS:[^:]*]]: tensor<?x?xi64> {onnx.name = "input_ids"}, %[[Q:[^:]*]]: {{.*}}, %[[MASK:[^:]*]]: tensor<?x?xi64> {onnx.name = "attention_mask"})
// CHECK-DAG: %[[MASKSHAPE:.*]] = onnx.Shape %[[MASK]]
// CHECK-DAG: %[[IDSSHAPE:.*]] = onnx.Shape %[[IDS]]
// CHECK-DAG: %[[BATCH:.*]] = onnx.Gather %[[MASKSHAPE]]
// CHECK-DAG: %[[TOTAL:.*]] = onnx.Gather %[[MASKSHAPE]]
// CHECK-DAG: %[[FRESH:.*]] = onnx.Gather %[[IDSSHAPE]]
// CHECK-DAG: %[[CACHED:.*]] = onnx.Sub %[[TOTAL]], %[[FRESH]]
// CHECK: %[[SHAPE:.*]] = onnx.Concat %[[BATCH]], %{{.*}}, %[[CACHED]], %{{.*}} {axis = 0 : i64}
// CHECK: onnx.Gather %[[SHAPE]]
// CHECK-NOT: past
// CHECK: return
func.func @main(%ids: tensor<?x?xi64> {onnx.name = "input_ids"}, %q: tensor<?x?x8xf32> {onnx.name = "q"},
                %mask: tensor<?x?xi64> {onnx.name = "attention_mask"},
                %pk: tensor<?x2x?x4xf32> {onnx.name = "past.0.key"},
                %pv: tensor<?x2x?x4xf32> {onnx.name = "past.0.value"})
    -> (tensor<?x?x8xf32> {onnx.name = "logits"},
        tensor<?x2x?x4xf32> {onnx.name = "present.0.key"}, tensor<?x2x?x4xf32> {onnx.name = "present.0.value"}) {
  %out, %present:2 = tfm.attention %q, %q, %q mask %mask past(%pk, %pv) heads 2 kv_heads 2 head_dim 4 scale 0.5 causal cache_layer 0 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?xi64>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>) -> (tensor<?x?x8xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>)
  %shape = onnx.Shape %pk : (tensor<?x2x?x4xf32>) -> tensor<4xi64>
  %two = onnx.Constant {value = dense<2> : tensor<i64>} : tensor<i64>
  %cached = onnx.Gather %shape, %two {axis = 0 : i64} : (tensor<4xi64>, tensor<i64>) -> tensor<i64>
  %offset = onnx.Cast %cached {to = f32} : (tensor<i64>) -> tensor<f32>
  %logits = onnx.Add %out, %offset : (tensor<?x?x8xf32>, tensor<f32>) -> tensor<?x?x8xf32>
  return %logits, %present#0, %present#1 : tensor<?x?x8xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>
}
