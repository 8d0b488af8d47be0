// dsc-activation-dtype: in a session program (its attention caches its keys), an
// attention's result and a gated linear's become the plan's half activation dtype where only
// linear layers read them as their input; the residual stream, a result something else
// reads, a norm prologue's input and the export's interface keep f32; f32 changes nothing.
// RUN: dsc-opt %s --dsc-activation-dtype="dtype=f16" | FileCheck %s --check-prefix=F16
// RUN: dsc-opt %s --dsc-activation-dtype="dtype=bf16" | FileCheck %s --check-prefix=BF16
// RUN: dsc-opt %s --dsc-activation-dtype="dtype=f32" | FileCheck %s --check-prefix=F32
// RUN: not dsc-opt %s --dsc-activation-dtype="dtype=f8" 2>&1 | FileCheck %s --check-prefix=BAD

// F16-LABEL: func.func @session
// F16: %[[O:.*]] = tfm.attention {{.*}} -> tensor<1x?x32xf16>
// F16: %[[P:.*]] = tfm.linear %[[O]], %{{.*}} residual %arg5 : (tensor<1x?x32xf16>, tensor<32x32xf32>, tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
// F16: %[[G:.*]] = tfm.linear %[[P]], %{{.*}} silu gated : (tensor<1x?x32xf32>, tensor<128x32xf32>) -> tensor<1x?x64xf16>
// F16: tfm.linear %[[G]], %{{.*}} residual %[[P]] : (tensor<1x?x64xf16>, tensor<32x64xf32>, tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
// BF16-LABEL: func.func @session
// BF16: tfm.attention {{.*}} -> tensor<1x?x32xbf16>
// BF16: tfm.linear {{.*}} gated : (tensor<1x?x32xf32>, tensor<128x32xf32>) -> tensor<1x?x64xbf16>
// F32-NOT: f16
// BAD: error: the activation dtype must be f16, bf16 or f32, not 'f8'
func.func @session(%q: tensor<1x?x32xf32>, %k: tensor<1x?x16xf32>, %v: tensor<1x?x16xf32>, %mask: tensor<1x?xi64>, %pos: tensor<1x?xi64>, %residual: tensor<1x?x32xf32>) -> tensor<1x?x32xf32> {
  %wo = "onnx.Constant"() {value = dense<0.5> : tensor<32x32xf32>} : () -> tensor<32x32xf32>
  %wgu = "onnx.Constant"() {value = dense<0.25> : tensor<128x32xf32>} : () -> tensor<128x32xf32>
  %wd = "onnx.Constant"() {value = dense<0.125> : tensor<32x64xf32>} : () -> tensor<32x64xf32>
  %o = tfm.attention %q, %k, %v mask %mask positions %pos heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal rotary <dim = 8, base = 1.0e4, layout = half_split> cache_layer 0 : (tensor<1x?x32xf32>, tensor<1x?x16xf32>, tensor<1x?x16xf32>, tensor<1x?xi64>, tensor<1x?xi64>) -> tensor<1x?x32xf32>
  %p = tfm.linear %o, %wo residual %residual : (tensor<1x?x32xf32>, tensor<32x32xf32>, tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
  %g = tfm.linear %p, %wgu activation silu gated : (tensor<1x?x32xf32>, tensor<128x32xf32>) -> tensor<1x?x64xf32>
  %d = tfm.linear %g, %wd residual %p : (tensor<1x?x64xf32>, tensor<32x64xf32>, tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
  return %d : tensor<1x?x32xf32>
}

// A result the program also returns, and one a norm prologue reads, stay f32.
// F16-LABEL: func.func @other_readers
// F16: tfm.attention {{.*}} -> tensor<1x?x32xf32>
// F16: tfm.linear {{.*}} gated : (tensor<1x?x32xf32>, tensor<128x32xf32>) -> tensor<1x?x64xf32>
// F16: tfm.linear {{.*}} gated norm {{.*}} -> tensor<1x?x64xf32>
func.func @other_readers(%q: tensor<1x?x32xf32>, %k: tensor<1x?x16xf32>, %v: tensor<1x?x16xf32>, %mask: tensor<1x?xi64>, %pos: tensor<1x?xi64>, %scale: tensor<64xf32>) -> (tensor<1x?x32xf32>, tensor<1x?x64xf32>) {
  %wgu = "onnx.Constant"() {value = dense<0.25> : tensor<128x32xf32>} : () -> tensor<128x32xf32>
  %wgu2 = "onnx.Constant"() {value = dense<0.25> : tensor<128x64xf32>} : () -> tensor<128x64xf32>
  %o = tfm.attention %q, %k, %v mask %mask positions %pos heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal cache_layer 0 : (tensor<1x?x32xf32>, tensor<1x?x16xf32>, tensor<1x?x16xf32>, tensor<1x?xi64>, tensor<1x?xi64>) -> tensor<1x?x32xf32>
  %g = tfm.linear %o, %wgu activation silu gated : (tensor<1x?x32xf32>, tensor<128x32xf32>) -> tensor<1x?x64xf32>
  %h = tfm.linear %g, %wgu2 activation silu gated norm rms(%scale) {norm_epsilon = 1.0e-6 : f32} : (tensor<1x?x64xf32>, tensor<128x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32>
  return %o, %h : tensor<1x?x32xf32>, tensor<1x?x64xf32>
}

// The export's interface (past operands, presents): no session cache, so nothing changes.
// F16-LABEL: func.func @io
// F16-NOT: f16
// F16: return
func.func @io(%q: tensor<1x?x32xf32>, %k: tensor<1x?x16xf32>, %v: tensor<1x?x16xf32>, %mask: tensor<1x?xi64>, %pk: tensor<1x2x?x8xf32>, %pv: tensor<1x2x?x8xf32>) -> (tensor<1x?x32xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) {
  %wo = "onnx.Constant"() {value = dense<0.5> : tensor<32x32xf32>} : () -> tensor<32x32xf32>
  %o, %pk2, %pv2 = tfm.attention %q, %k, %v mask %mask past(%pk, %pv) heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal : (tensor<1x?x32xf32>, tensor<1x?x16xf32>, tensor<1x?x16xf32>, tensor<1x?xi64>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x?x32xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
  %p = tfm.linear %o, %wo : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  return %p, %pk2, %pv2 : tensor<1x?x32xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>
}

// A cross-attention over the encoder's cached keys and one with a bias (T5's relative
// positions) keep f32: their decode steps run the prefill kernel, which writes f32.
// F16-LABEL: func.func @cross_and_bias
// F16-NOT: f16
// F16: return
func.func @cross_and_bias(%q: tensor<1x?x32xf32>, %k: tensor<1x?x32xf32>, %v: tensor<1x?x32xf32>, %mask: tensor<1x?xi64>, %bias: tensor<1x4x?x?xf32>) -> (tensor<1x?x32xf32>, tensor<1x?x32xf32>) {
  %wo = "onnx.Constant"() {value = dense<0.5> : tensor<32x32xf32>} : () -> tensor<32x32xf32>
  %c = tfm.attention %q, %k, %v mask %mask heads 4 kv_heads 4 head_dim 8 scale 1.0 cache_layer 1 {tfm.cross_keys} : (tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?xi64>) -> tensor<1x?x32xf32>
  %pc = tfm.linear %c, %wo : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  %b = tfm.attention %q, %k, %v mask %mask bias %bias heads 4 kv_heads 4 head_dim 8 scale 1.0 causal cache_layer 0 : (tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?xi64>, tensor<1x4x?x?xf32>) -> tensor<1x?x32xf32>
  %pb = tfm.linear %b, %wo : (tensor<1x?x32xf32>, tensor<32x32xf32>) -> tensor<1x?x32xf32>
  return %pc, %pb : tensor<1x?x32xf32>, tensor<1x?x32xf32>
}
