// dsc-kv-cache-dtype: the session's attentions (cache_layer, no past) get the cache's type;
// the export's interface (past operands, presents) keeps f32; f32 leaves everything alone.
// RUN: dsc-opt %s --dsc-kv-cache-dtype="dtype=f16" | FileCheck %s --check-prefix=F16
// RUN: dsc-opt %s --dsc-kv-cache-dtype="dtype=bf16" | FileCheck %s --check-prefix=BF16
// RUN: dsc-opt %s --dsc-kv-cache-dtype="dtype=f32" | FileCheck %s --check-prefix=F32
// RUN: not dsc-opt %s --dsc-kv-cache-dtype="dtype=f8" 2>&1 | FileCheck %s --check-prefix=BAD

// F16-LABEL: func.func @session
// F16: tfm.attention {{.*}} cache_layer 0 cache_dtype f16 :
// BF16-LABEL: func.func @session
// BF16: tfm.attention {{.*}} cache_layer 0 cache_dtype bf16 :
// F32-LABEL: func.func @session
// F32-NOT: cache_dtype
// BAD: error: the KV cache's dtype must be f16, bf16 or f32, not 'f8'
func.func @session(%q: tensor<1x?x32xf32>, %k: tensor<1x?x16xf32>, %v: tensor<1x?x16xf32>, %mask: tensor<1x?xi64>, %pos: tensor<1x?xi64>) -> tensor<1x?x32xf32> {
  %o = tfm.attention %q, %k, %v mask %mask positions %pos heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal rotary <dim = 8, base = 1.0e4, layout = half_split> cache_layer 0 : (tensor<1x?x32xf32>, tensor<1x?x16xf32>, tensor<1x?x16xf32>, tensor<1x?xi64>, tensor<1x?xi64>) -> tensor<1x?x32xf32>
  return %o : tensor<1x?x32xf32>
}

// F16-LABEL: func.func @io
// F16-NOT: cache_dtype
// F16: return
func.func @io(%q: tensor<1x?x32xf32>, %k: tensor<1x?x16xf32>, %v: tensor<1x?x16xf32>, %mask: tensor<1x?xi64>, %pk: tensor<1x2x?x8xf32>, %pv: tensor<1x2x?x8xf32>) -> (tensor<1x?x32xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) {
  %o, %pk2, %pv2 = tfm.attention %q, %k, %v mask %mask past(%pk, %pv) heads 4 kv_heads 2 head_dim 8 scale 0.35355339 causal : (tensor<1x?x32xf32>, tensor<1x?x16xf32>, tensor<1x?x16xf32>, tensor<1x?xi64>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x?x32xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
  return %o, %pk2, %pv2 : tensor<1x?x32xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>
}
