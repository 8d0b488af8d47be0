// A recognised decoder lowers to three programs: forward (the export's interface) and the
// derived prefill and decode, each bounded on its own: decode takes exactly one new token
// (after up to max-seq-len - 1 cached ones), so its arena slots are the smallest; the
// session programs' padding mask spans cached and new tokens even where the export (without
// a cache) named its width like the new tokens'.
// RUN: dsc-opt %s --dsc-derive-cache-programs --dsc-lower-onnx-to-plan="max-batch=2 max-seq-len=8" | FileCheck %s

// CHECK-LABEL: plan.program @forward
// CHECK: plan.input 0 "q" {{.*}}max_shape = array<i64: 2, 8, 8>
// CHECK: plan.input 1 "attention_mask" {dims = ["batch", "sequence"], max_shape = array<i64: 2, 8>}
// CHECK: plan.exec "tfm.attention"
// CHECK-SAME: cache_layer = -1
// CHECK-SAME: max_shapes = [array<i64: 2, 8, 8>]
// CHECK-LABEL: plan.program @prefill
// CHECK: plan.input 0 "q" {{.*}}max_shape = array<i64: 2, 8, 8>
// CHECK: plan.input 1 "attention_mask" {dims = ["batch", "past_sequence + sequence"], max_shape = array<i64: 2, 8>}
// CHECK: plan.exec "tfm.attention"
// CHECK-SAME: cache_layer = 0
// CHECK-SAME: max_shapes = [array<i64: 2, 8, 8>]
// CHECK-LABEL: plan.program @decode
// CHECK: plan.input 0 "q" {{.*}}max_shape = array<i64: 2, 1, 8>
// CHECK: plan.input 1 "attention_mask" {dims = ["batch", "past_sequence + sequence"], max_shape = array<i64: 2, 8>}
// CHECK: plan.exec "tfm.attention"
// CHECK-SAME: cache_layer = 0
// CHECK-SAME: max_shapes = [array<i64: 2, 1, 8>]
func.func @main(%q: tensor<?x?x8xf32> {onnx.name = "q", onnx.dims = ["batch", "sequence", ""]},
                %mask: tensor<?x?xi64> {onnx.name = "attention_mask", onnx.dims = ["batch", "sequence"]})
    -> (tensor<?x?x8xf32> {onnx.name = "logits", onnx.dims = ["batch", "sequence", ""]}) {
  %out = tfm.attention %q, %q, %q mask %mask heads 2 kv_heads 2 head_dim 4 scale 0.5 causal cache_layer 0 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?x8xf32>, tensor<?x?xi64>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}
