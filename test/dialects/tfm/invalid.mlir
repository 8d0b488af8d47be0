// RUN: dsc-opt %s -split-input-file -verify-diagnostics
// One case per verifier error of the tfm ops and attributes.

func.func @weight_no_name() {
  // expected-error @+1 {{needs the name of an initializer}}
  %0 = tfm.weight "" : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @weight_dynamic_source() {
  // expected-error @+1 {{'source_type' failed to satisfy constraint}}
  %0 = tfm.weight "w" : tensor<?x4xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @weight_result_mismatch() {
  // expected-error @+1 {{transforms make 'tensor<8x4xf32>' of the source, but the result is 'tensor<4x8xf32>'}}
  %0 = tfm.weight "w" : tensor<4x8xf32> [#tfm.transpose<[1, 0]>] -> tensor<4x8xf32>
  return
}

// -----

func.func @weight_transpose_rank() {
  // expected-error @+1 {{transform #0: transpose has 3 entries for rank 2}}
  %0 = tfm.weight "w" : tensor<4x8xf32> [#tfm.transpose<[2, 0, 1]>] -> tensor<4x8xf32>
  return
}

// -----

func.func @weight_transpose_not_permutation() {
  // expected-error @+1 {{transform #0: transpose perm is not a permutation}}
  %0 = tfm.weight "w" : tensor<4x8xf32> [#tfm.transpose<[1, 1]>] -> tensor<8x8xf32>
  return
}

// -----

func.func @weight_slice_too_far() {
  // expected-error @+1 {{transform #1: slice [6, 10) exceeds dimension 0 of size 8}}
  %0 = tfm.weight "w" : tensor<4x8xf32> [#tfm.transpose<[1, 0]>, #tfm.slice<axis = 0, offset = 6, size = 4>] -> tensor<4x4xf32>
  return
}

// -----

func.func @weight_slice_axis() {
  // expected-error @+1 {{transform #0: slice axis 2 is out of range for rank 2}}
  %0 = tfm.weight "w" : tensor<4x8xf32> [#tfm.slice<axis = 2, offset = 0, size = 4>] -> tensor<4x4xf32>
  return
}

// -----

func.func @weight_slice_size() {
  // expected-error @+1 {{slice size must be positive}}
  %0 = tfm.weight "w" : tensor<4x8xf32> [#tfm.slice<axis = 0, offset = 0, size = 0>] -> tensor<4x8xf32>
  return
}

// -----

func.func @weight_convert_to_int() {
  // expected-error @+1 {{convert needs a floating-point type, not 'i32'}}
  %0 = tfm.weight "w" : tensor<4xf32> [#tfm.convert<i32>] -> tensor<4xi32>
  return
}

// -----

func.func @weight_convert_int8() {
  // expected-error @+1 {{transform #1: convert needs a floating-point weight, not 'i8'}}
  %0 = tfm.weight "w" : tensor<4x8xf32> [#tfm.quantize_int8<group_size = 0>, #tfm.convert<f16>] -> tensor<4x8xf16>
  return
}

// -----

func.func @weight_quantize_rank() {
  // expected-error @+1 {{transform #0: quantize_int8 needs a 2-D [out, in] weight, not rank 1}}
  %0 = tfm.weight "w" : tensor<8xf32> [#tfm.quantize_int8<group_size = 0>] -> tensor<8xi8>
  return
}

// -----

func.func @weight_quantize_group() {
  // expected-error @+1 {{transform #0: quant_scales group_size 3 does not divide the input dimension 8}}
  %0 = tfm.weight "w" : tensor<4x8xf32> [#tfm.quant_scales<group_size = 3, dtype = f16>] -> tensor<4x2xf16>
  return
}

// -----

func.func @weight_quantize_negative_group() {
  // expected-error @+1 {{group_size must be positive, or 0 for one group per row}}
  %0 = tfm.weight "w" : tensor<4x8xf32> [#tfm.quantize_int8<group_size = -1>] -> tensor<4x8xi8>
  return
}

// -----

func.func @weight_not_a_transform() {
  // expected-error @+1 {{transform #0: 42 : i64 is not a weight transform}}
  %0 = tfm.weight "w" : tensor<4x8xf32> [42] -> tensor<4x8xf32>
  return
}

// -----

func.func @embedding_ids_rank(%ids: tensor<?xi64>, %t: tensor<100x16xf32>) {
  // expected-error @+1 {{ids must be 2-D [batch, seq], not rank 1}}
  %0 = tfm.embedding %ids, %t : (tensor<?xi64>, tensor<100x16xf32>) -> tensor<?x?x16xf32>
  return
}

// -----

func.func @embedding_float_ids(%ids: tensor<?x?xf32>, %t: tensor<100x16xf32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = tfm.embedding %ids, %t : (tensor<?x?xf32>, tensor<100x16xf32>) -> tensor<?x?x16xf32>
  return
}

// -----

func.func @embedding_hidden(%ids: tensor<?x?xi64>, %t: tensor<100x16xf32>) {
  // expected-error @+1 {{result hidden size is 32, expected 16}}
  %0 = tfm.embedding %ids, %t : (tensor<?x?xi64>, tensor<100x16xf32>) -> tensor<?x?x32xf32>
  return
}

// -----

func.func @embedding_batch(%ids: tensor<2x?xi64>, %t: tensor<100x16xf32>) {
  // expected-error @+1 {{result dimension 0 is 3, expected 2}}
  %0 = tfm.embedding %ids, %t : (tensor<2x?xi64>, tensor<100x16xf32>) -> tensor<3x?x16xf32>
  return
}

// -----

func.func @embedding_offset_without_size(%ids: tensor<?x?xi64>, %t: tensor<100x16xf32>) {
  // expected-error @+1 {{vocab_offset needs vocab_size (the full vocabulary)}}
  %0 = tfm.embedding %ids, %t {vocab_offset = 100} : (tensor<?x?xi64>, tensor<100x16xf32>) -> tensor<?x?x16xf32>
  return
}

// -----

func.func @embedding_shard(%ids: tensor<?x?xi64>, %t: tensor<100x16xf32>) {
  // expected-error @+1 {{the shard [150, 250) exceeds the vocabulary of 200 tokens}}
  %0 = tfm.embedding %ids, %t {vocab_offset = 150, vocab_size = 200} : (tensor<?x?xi64>, tensor<100x16xf32>) -> tensor<?x?x16xf32>
  return
}

// -----

func.func @layer_norm_scale_size(%x: tensor<?x?x768xf16>, %s: tensor<512xf16>) {
  // expected-error @+1 {{scale has 512 elements but the normalised dimension is 768}}
  %0 = tfm.layer_norm %x, %s eps 1.0e-5 : tensor<?x?x768xf16>, tensor<512xf16>
  return
}

// -----

func.func @layer_norm_bias_rank(%x: tensor<?x?x768xf16>, %s: tensor<768xf16>, %b: tensor<1x768xf16>) {
  // expected-error @+1 {{bias must be 1-D, not rank 2}}
  %0 = tfm.layer_norm %x, %s, %b eps 1.0e-5 : tensor<?x?x768xf16>, tensor<768xf16>, tensor<1x768xf16>
  return
}

// -----

func.func @layer_norm_scale_type(%x: tensor<?x?x768xf16>, %s: tensor<768xf32>) {
  // expected-error @+1 {{scale must have the element type of the input}}
  %0 = tfm.layer_norm %x, %s eps 1.0e-5 : tensor<?x?x768xf16>, tensor<768xf32>
  return
}

// -----

func.func @layer_norm_epsilon(%x: tensor<?x?x768xf16>, %s: tensor<768xf16>) {
  // expected-error @+1 {{epsilon must be finite and not negative}}
  %0 = tfm.layer_norm %x, %s eps -1.0e-5 : tensor<?x?x768xf16>, tensor<768xf16>
  return
}

// -----

func.func @rms_norm_scale_size(%x: tensor<?x?x4096xbf16>, %s: tensor<4095xbf16>) {
  // expected-error @+1 {{scale has 4095 elements but the normalised dimension is 4096}}
  %0 = tfm.rms_norm %x, %s eps 1.0e-6 : tensor<?x?x4096xbf16>, tensor<4095xbf16>
  return
}

// -----

func.func @linear_in_features(%x: tensor<?x?x768xf16>, %w: tensor<3072x1024xf16>) {
  // expected-error @+1 {{input has 768 features but the weight [out, in] takes 1024}}
  %0 = tfm.linear %x, %w : (tensor<?x?x768xf16>, tensor<3072x1024xf16>) -> tensor<?x?x3072xf16>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<?x?x768xf16>, %w: tensor<2x3072x768xf16>) {
  // expected-error @+1 {{weight must be 2-D [out, in], not rank 3}}
  %0 = tfm.linear %x, %w : (tensor<?x?x768xf16>, tensor<2x3072x768xf16>) -> tensor<?x?x3072xf16>
  return
}

// -----

func.func @linear_out_features(%x: tensor<?x?x768xf16>, %w: tensor<3072x768xf16>) {
  // expected-error @+1 {{result feature count is 768, expected 3072}}
  %0 = tfm.linear %x, %w : (tensor<?x?x768xf16>, tensor<3072x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @linear_result_rank(%x: tensor<?x?x768xf16>, %w: tensor<3072x768xf16>) {
  // expected-error @+1 {{result has rank 2, expected 3}}
  %0 = tfm.linear %x, %w : (tensor<?x?x768xf16>, tensor<3072x768xf16>) -> tensor<?x3072xf16>
  return
}

// -----

func.func @linear_weight_type(%x: tensor<?x?x768xf16>, %w: tensor<3072x768xf32>) {
  // expected-error @+1 {{weight element type 'f32' differs from the input's 'f16'}}
  %0 = tfm.linear %x, %w : (tensor<?x?x768xf16>, tensor<3072x768xf32>) -> tensor<?x?x3072xf16>
  return
}

// -----

func.func @linear_bias_size(%x: tensor<?x?x768xf16>, %w: tensor<3072x768xf16>, %b: tensor<768xf16>) {
  // expected-error @+1 {{bias size is 768, expected 3072}}
  %0 = tfm.linear %x, %w bias %b : (tensor<?x?x768xf16>, tensor<3072x768xf16>, tensor<768xf16>) -> tensor<?x?x3072xf16>
  return
}

// -----

func.func @linear_row_parallel_bias(%x: tensor<?x?x768xf16>, %w: tensor<768x768xf16>, %b: tensor<768xf16>) {
  // expected-error @+1 {{a row-parallel linear takes no bias: it is added once, after the all-reduce}}
  %0 = tfm.linear %x, %w bias %b parallel row : (tensor<?x?x768xf16>, tensor<768x768xf16>, tensor<768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @linear_int8_without_scales(%x: tensor<?x?x768xf16>, %w: tensor<3072x768xi8>) {
  // expected-error @+1 {{an int8 or int4 weight needs scales}}
  %0 = tfm.linear %x, %w : (tensor<?x?x768xf16>, tensor<3072x768xi8>) -> tensor<?x?x3072xf16>
  return
}

// -----

func.func @linear_scales_float_weight(%x: tensor<?x?x768xf16>, %w: tensor<3072x768xf16>, %s: tensor<3072x1xf16>) {
  // expected-error @+1 {{scales go with an int8 or int4 weight only}}
  %0 = tfm.linear %x, %w scales %s : (tensor<?x?x768xf16>, tensor<3072x768xf16>, tensor<3072x1xf16>) -> tensor<?x?x3072xf16>
  return
}

// -----

func.func @linear_scale_groups(%x: tensor<?x?x768xf16>, %w: tensor<3072x768xi8>, %s: tensor<3072x5xf16>) {
  // expected-error @+1 {{5 scale groups do not divide the 768 input features}}
  %0 = tfm.linear %x, %w scales %s : (tensor<?x?x768xf16>, tensor<3072x768xi8>, tensor<3072x5xf16>) -> tensor<?x?x3072xf16>
  return
}

// -----

func.func @lm_head_int8_without_scales(%x: tensor<?x768xf16>, %w: tensor<500x768xi8>) {
  // expected-error @+1 {{an int8 or int4 weight needs scales}}
  %0 = tfm.lm_head %x, %w : (tensor<?x768xf16>, tensor<500x768xi8>) -> tensor<?x500xf16>
  return
}

// -----

func.func @lm_head_scale_rows(%x: tensor<?x768xf16>, %w: tensor<500x768xi8>, %s: tensor<499x1xf16>) {
  // expected-error @+1 {{scales dimension 0 is 499, expected 500}}
  %0 = tfm.lm_head %x, %w scales %s : (tensor<?x768xf16>, tensor<500x768xi8>, tensor<499x1xf16>) -> tensor<?x500xf16>
  return
}

// -----

func.func @activation_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of floating-point values}}
  %0 = tfm.activation relu %x : tensor<4xi32>
  return
}

// -----

func.func @activation_unknown(%x: tensor<4xf32>) {
  // expected-error @+2 {{expected ::dsc::tfm::ActivationKind to be one of: gelu_erf, gelu_tanh, gelu_quick, silu, relu}}
  // expected-error @+1 {{failed to parse Tfm_ActivationKindAttr parameter}}
  %0 = tfm.activation swish %x : tensor<4xf32>
  return
}

// -----

func.func @activation_result_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "tfm.activation"(%x) <{kind = #tfm<activation silu>}> : (tensor<4xf32>) -> tensor<4xf16>
  return
}

// -----

func.func @gated_act_types(%g: tensor<4x8xf32>, %u: tensor<4x4xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "tfm.gated_act"(%g, %u) <{kind = #tfm<activation silu>}> : (tensor<4x8xf32>, tensor<4x4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @residual_add_types(%a: tensor<?x?x768xf16>, %b: tensor<?x?x768xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "tfm.residual_add"(%a, %b) : (tensor<?x?x768xf16>, tensor<?x?x768xf32>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_head_groups(%q: tensor<?x?x768xf16>, %kv: tensor<?x?x320xf16>) {
  // expected-error @+1 {{num_heads 12 is not a multiple of num_kv_heads 5}}
  %0 = tfm.attention %q, %kv, %kv heads 12 kv_heads 5 head_dim 64 scale 0.125 causal
         : (tensor<?x?x768xf16>, tensor<?x?x320xf16>, tensor<?x?x320xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_sinks_size(%q: tensor<?x?x768xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{sinks must be a float [12] (one logit per head), not 'tensor<8xf32>'}}
  %0 = tfm.attention %q, %q, %q sinks %s heads 12 kv_heads 12 head_dim 64 scale 0.125 causal
         : (tensor<?x?x768xf32>, tensor<?x?x768xf32>, tensor<?x?x768xf32>, tensor<8xf32>) -> tensor<?x?x768xf32>
  return
}

// -----

func.func @attention_sinks_rank(%q: tensor<?x?x768xf32>, %s: tensor<1x12xf32>) {
  // expected-error @+1 {{sinks must be a float [12] (one logit per head), not 'tensor<1x12xf32>'}}
  %0 = tfm.attention %q, %q, %q sinks %s heads 12 kv_heads 12 head_dim 64 scale 0.125 causal
         : (tensor<?x?x768xf32>, tensor<?x?x768xf32>, tensor<?x?x768xf32>, tensor<1x12xf32>) -> tensor<?x?x768xf32>
  return
}

// -----

// A rank of tensor parallelism may hold the model's 12 sinks for its 6 heads; not 8.
func.func @attention_sinks_global(%q: tensor<?x?x384xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{sinks must be a float [6] (one logit per head), not 'tensor<8xf32>'}}
  %0 = tfm.attention %q, %q, %q sinks %s heads 6 kv_heads 6 head_dim 64 scale 0.125 causal
         {tfm.global_heads = 12 : i64}
         : (tensor<?x?x384xf32>, tensor<?x?x384xf32>, tensor<?x?x384xf32>, tensor<8xf32>) -> tensor<?x?x384xf32>
  return
}

// -----

func.func @attention_zero_heads(%q: tensor<?x?x768xf16>) {
  // expected-error @+1 {{attribute 'num_heads' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = tfm.attention %q, %q, %q heads 0 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_query_width(%q: tensor<?x?x768xf16>) {
  // expected-error @+1 {{query dimension 2 (heads * head_dim) is 768, expected 1024}}
  %0 = tfm.attention %q, %q, %q heads 16 kv_heads 16 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_kv_width(%q: tensor<?x?x768xf16>, %kv: tensor<?x?x768xf16>) {
  // expected-error @+1 {{key/value dimension 2 (kv_heads * head_dim) is 768, expected 256}}
  %0 = tfm.attention %q, %kv, %kv heads 12 kv_heads 4 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_rank(%q: tensor<?x768xf16>) {
  // expected-error @+1 {{query must be 3-D [batch, seq, heads * head_dim], not rank 2}}
  %0 = tfm.attention %q, %q, %q heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<?x768xf16>, tensor<?x768xf16>, tensor<?x768xf16>) -> tensor<?x768xf16>
  return
}

// -----

func.func @attention_key_value(%q: tensor<?x?x768xf16>, %k: tensor<?x?x768xf16>, %v: tensor<?x7x768xf16>) {
  // expected-error @+1 {{key 'tensor<?x?x768xf16>' and value 'tensor<?x7x768xf16>' must have the same type}}
  %0 = tfm.attention %q, %k, %v heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x7x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_element_types(%q: tensor<?x?x768xf16>, %kv: tensor<?x?x768xf32>) {
  // expected-error @+1 {{query, key, value and result must have the same element type}}
  %0 = tfm.attention %q, %kv, %kv heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf32>, tensor<?x?x768xf32>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_batch(%q: tensor<2x?x768xf16>, %kv: tensor<3x?x768xf16>) {
  // expected-error @+1 {{key batch 3 differs from query batch 2}}
  %0 = tfm.attention %q, %kv, %kv heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<2x?x768xf16>, tensor<3x?x768xf16>, tensor<3x?x768xf16>) -> tensor<2x?x768xf16>
  return
}

// -----

func.func @attention_result(%q: tensor<2x5x768xf16>) {
  // expected-error @+1 {{result 'tensor<2x6x768xf16>' must be [2, 5, 768]}}
  %0 = tfm.attention %q, %q, %q heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<2x5x768xf16>, tensor<2x5x768xf16>, tensor<2x5x768xf16>) -> tensor<2x6x768xf16>
  return
}

// -----

func.func @attention_scale(%q: tensor<?x?x768xf16>) {
  // expected-error @+1 {{scale must be positive and finite}}
  %0 = tfm.attention %q, %q, %q heads 12 kv_heads 12 head_dim 64 scale 0.0
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_cache_dtype_without_cache(%q: tensor<?x?x768xf16>) {
  // expected-error @+1 {{cache_dtype needs cache_layer and no past: it is the type of the session's KV cache}}
  %0 = tfm.attention %q, %q, %q heads 12 kv_heads 12 head_dim 64 scale 0.125 cache_dtype f16
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_cache_dtype_integer(%q: tensor<?x?x768xf16>) {
  // expected-error @+1 {{cache_dtype must be f16 or bf16 (absent: f32), not 'i8'}}
  %0 = tfm.attention %q, %q, %q heads 12 kv_heads 12 head_dim 64 scale 0.125 cache_layer 0
         cache_dtype i8
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_softcap_zero(%q: tensor<?x?x768xf16>) {
  // expected-error @+1 {{softcap must be positive and finite (absent = off), not 0.000000e+00}}
  %0 = tfm.attention %q, %q, %q heads 12 kv_heads 12 head_dim 64 scale 0.125 softcap 0.0
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_softcap_negative(%q: tensor<?x?x768xf16>) {
  // expected-error @+1 {{softcap must be positive and finite (absent = off), not -5.000000e+01}}
  %0 = tfm.attention %q, %q, %q heads 12 kv_heads 12 head_dim 64 scale 0.125 causal
         softcap -50.0
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_softcap_infinite(%q: tensor<?x?x768xf16>) {
  // expected-error @+1 {{softcap must be positive and finite (absent = off), not INF}}
  %0 = tfm.attention %q, %q, %q heads 12 kv_heads 12 head_dim 64 scale 0.125
         softcap 0x7F800000
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_window(%q: tensor<?x?x768xf16>) {
  // expected-error @+1 {{attribute 'window' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = tfm.attention %q, %q, %q heads 12 kv_heads 12 head_dim 64 scale 0.125 window 0
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_rotary_dim(%q: tensor<?x?x768xf16>, %pos: tensor<?x?xi64>) {
  // expected-error @+1 {{rotary dim 128 exceeds head_dim 64}}
  %0 = tfm.attention %q, %q, %q positions %pos heads 12 kv_heads 12 head_dim 64 scale 0.125
         rotary <dim = 128, base = 10000.0, layout = half_split>
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?xi64>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_rotary_odd(%q: tensor<?x?x768xf16>, %pos: tensor<?x?xi64>) {
  // expected-error @+2 {{rotary dim must be positive and even, not 31}}
  %0 = tfm.attention %q, %q, %q positions %pos heads 12 kv_heads 12 head_dim 64 scale 0.125
         rotary <dim = 31, base = 10000.0, layout = half_split>
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?xi64>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_rotary_base(%q: tensor<?x?x768xf16>, %pos: tensor<?x?xi64>) {
  // expected-error @+2 {{rotary base must be greater than 1}}
  %0 = tfm.attention %q, %q, %q positions %pos heads 12 kv_heads 12 head_dim 64 scale 0.125
         rotary <dim = 64, base = 0.5, layout = interleaved>
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?xi64>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_rotary_alibi(%q: tensor<?x?x768xf16>, %pos: tensor<?x?xi64>) {
  // expected-error @+1 {{rotary embeddings and ALiBi exclude each other}}
  %0 = tfm.attention %q, %q, %q positions %pos heads 12 kv_heads 12 head_dim 64 scale 0.125 alibi
         rotary <dim = 64, base = 10000.0, layout = half_split>
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?xi64>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_rotary_positions(%q: tensor<?x?x768xf16>) {
  // expected-error @+1 {{rotary embeddings need the positions operand}}
  %0 = tfm.attention %q, %q, %q heads 12 kv_heads 12 head_dim 64 scale 0.125
         rotary <dim = 64, base = 10000.0, layout = half_split>
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_positions_shape(%q: tensor<?x?x768xf16>, %pos: tensor<?xi64>) {
  // expected-error @+1 {{positions 'tensor<?xi64>' must be [?, ?]}}
  %0 = tfm.attention %q, %q, %q positions %pos heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?xi64>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_past_pair(%q: tensor<?x?x768xf16>, %p: tensor<?x12x?x64xf16>) {
  // expected-error @+1 {{past must be a (key, value) pair, not 1 tensors}}
  %0 = tfm.attention %q, %q, %q past(%p) heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x12x?x64xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_past_heads(%q: tensor<?x?x768xf16>, %p: tensor<?x4x?x64xf16>) {
  // expected-error @+1 {{past 'tensor<?x4x?x64xf16>' must be [?, 12, len, 64]}}
  %0 = tfm.attention %q, %q, %q past(%p, %p) heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_present_length(%q: tensor<1x1x768xf16>, %p: tensor<1x12x9x64xf16>) {
  // expected-error @+1 {{present length 9 must be past + new = 10}}
  %0:3 = tfm.attention %q, %q, %q past(%p, %p) heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<1x1x768xf16>, tensor<1x1x768xf16>, tensor<1x1x768xf16>, tensor<1x12x9x64xf16>, tensor<1x12x9x64xf16>)
         -> (tensor<1x1x768xf16>, tensor<1x12x9x64xf16>, tensor<1x12x9x64xf16>)
  return
}

// -----

func.func @attention_padding_mask(%q: tensor<?x?x768xf16>, %m: tensor<?x1x?xi64>) {
  // expected-error @+1 {{a padding mask must be 2-D [batch, total]}}
  %0 = tfm.attention %q, %q, %q mask %m heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x1x?xi64>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_padding_mask_length(%q: tensor<1x5x768xf16>, %p: tensor<1x12x3x64xf16>, %m: tensor<1x5xi64>) {
  // expected-error @+1 {{padding mask 'tensor<1x5xi64>' must be [1, 8]}}
  %0 = tfm.attention %q, %q, %q mask %m past(%p, %p) heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<1x5x768xf16>, tensor<1x5x768xf16>, tensor<1x5x768xf16>, tensor<1x5xi64>, tensor<1x12x3x64xf16>, tensor<1x12x3x64xf16>) -> tensor<1x5x768xf16>
  return
}

// -----

func.func @attention_additive_mask(%q: tensor<?x?x768xf16>, %m: tensor<?x4x?x?xf16>) {
  // expected-error @+1 {{mask dimension 1 is 4, expected 12 or 1}}
  %0 = tfm.attention %q, %q, %q mask %m heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x4x?x?xf16>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @attention_mask_type(%q: tensor<?x?x768xf16>, %m: tensor<?x?xcomplex<f32>>) {
  // expected-error @+1 {{mask must be an integer padding mask or a float additive mask}}
  %0 = tfm.attention %q, %q, %q mask %m heads 12 kv_heads 12 head_dim 64 scale 0.125
         : (tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?x768xf16>, tensor<?x?xcomplex<f32>>) -> tensor<?x?x768xf16>
  return
}

// -----

func.func @all_reduce_ranks(%x: tensor<?x768xf16>) {
  // expected-error @+1 {{attribute 'ranks' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = tfm.all_reduce %x ranks 0 : tensor<?x768xf16>
  return
}

// -----

func.func @all_gather_axis(%x: tensor<?x768xf16>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = tfm.all_gather %x axis 2 ranks 2 : tensor<?x768xf16> -> tensor<?x768xf16>
  return
}

// -----

func.func @all_gather_extent(%x: tensor<?x768xf16>) {
  // expected-error @+1 {{result extent 768 along axis 1 must be ranks * 768 = 1536}}
  %0 = tfm.all_gather %x axis 1 ranks 2 : tensor<?x768xf16> -> tensor<?x768xf16>
  return
}

// -----

func.func @all_gather_other_dim(%x: tensor<4x768xf16>) {
  // expected-error @+1 {{result dimension 0 is 5, expected 4}}
  %0 = tfm.all_gather %x axis 1 ranks 2 : tensor<4x768xf16> -> tensor<5x1536xf16>
  return
}

// -----

func.func @all_gather_sizes_count(%x: tensor<?x5xf16>) {
  // expected-error @+1 {{sizes has 2 entries for 3 ranks}}
  %0 = tfm.all_gather %x axis 1 ranks 3 sizes [5, 4] : tensor<?x5xf16> -> tensor<?x9xf16>
  return
}

// -----

func.func @all_gather_sizes_sum(%x: tensor<?x5xf16>) {
  // expected-error @+1 {{result extent 10 along axis 1 must be the sum of sizes, 9}}
  %0 = tfm.all_gather %x axis 1 ranks 2 sizes [5, 4] : tensor<?x5xf16> -> tensor<?x10xf16>
  return
}

// -----

func.func @all_gather_sizes_member(%x: tensor<?x6xf16>) {
  // expected-error @+1 {{the operand's extent 6 along axis 1 is none of the ranks' sizes}}
  %0 = tfm.all_gather %x axis 1 ranks 2 sizes [5, 4] : tensor<?x6xf16> -> tensor<?x9xf16>
  return
}

// -----

func.func @lm_head_hidden(%h: tensor<?x?x768xf16>, %w: tensor<50257x1024xf16>) {
  // expected-error @+1 {{hidden size 768 differs from the weight's 1024}}
  %0 = tfm.lm_head %h, %w : (tensor<?x?x768xf16>, tensor<50257x1024xf16>) -> tensor<?x?x50257xf16>
  return
}

// -----

func.func @lm_head_vocab(%h: tensor<?x?x768xf16>, %w: tensor<50257x768xf16>) {
  // expected-error @+1 {{logits vocabulary size is 50000, expected 50257}}
  %0 = tfm.lm_head %h, %w : (tensor<?x?x768xf16>, tensor<50257x768xf16>) -> tensor<?x?x50000xf16>
  return
}

// -----

func.func @lm_head_shard(%h: tensor<?x?x768xf16>, %w: tensor<25129x768xf16>) {
  // expected-error @+1 {{the shard [25129, 50258) exceeds the vocabulary of 50257 tokens}}
  %0 = tfm.lm_head %h, %w {vocab_offset = 25129, vocab_size = 50257} : (tensor<?x?x768xf16>, tensor<25129x768xf16>) -> tensor<?x?x25129xf16>
  return
}

// -----

func.func @concat_weights_not_a_weight(%a: tensor<4x8xf32>) {
  %w = tfm.weight "w" : tensor<4x8xf32> -> tensor<4x8xf32>
  // expected-error @+1 {{part 1 is not a tfm.weight}}
  %0 = tfm.concat_weights %w, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  return
}

// -----

func.func @concat_weights_columns() {
  %a = tfm.weight "a" : tensor<4x8xf32> -> tensor<4x8xf32>
  %b = tfm.weight "b" : tensor<4x6xf32> -> tensor<4x6xf32>
  // expected-error @+1 {{part 1 ('tensor<4x6xf32>') differs from the result 'tensor<8x8xf32>' in element type or in a dimension after the first}}
  %0 = tfm.concat_weights %a, %b : (tensor<4x8xf32>, tensor<4x6xf32>) -> tensor<8x8xf32>
  return
}

// -----

func.func @concat_weights_rows() {
  %a = tfm.weight "a" : tensor<4x8xf32> -> tensor<4x8xf32>
  %b = tfm.weight "b" : tensor<2x8xf32> -> tensor<2x8xf32>
  // expected-error @+1 {{the parts have 6 rows, the result 'tensor<8x8xf32>'}}
  %0 = tfm.concat_weights %a, %b : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<8x8xf32>
  return
}

// -----

func.func @gated_act_packed_odd(%x: tensor<3x7xf32>) {
  // expected-error @+1 {{the input's last dimension 7 must be twice the result's 3}}
  %0 = tfm.gated_act_packed silu %x : tensor<3x7xf32> -> tensor<3x3xf32>
  return
}

// -----

func.func @attention_bias_shape(%q: tensor<2x7x768xf32>, %bias: tensor<1x12x7x5xf32>) {
  // expected-error @+1 {{bias dimension 3 is 5, expected 7}}
  %0 = tfm.attention %q, %q, %q bias %bias heads 12 kv_heads 12 head_dim 64 scale 1.0
         : (tensor<2x7x768xf32>, tensor<2x7x768xf32>, tensor<2x7x768xf32>, tensor<1x12x7x5xf32>)
         -> tensor<2x7x768xf32>
  return
}

// -----

func.func @attention_bias_heads(%q: tensor<2x7x768xf32>, %bias: tensor<1x3x7x7xf32>) {
  // expected-error @+1 {{bias dimension 1 is 3, expected 12 or 1}}
  %0 = tfm.attention %q, %q, %q bias %bias heads 12 kv_heads 12 head_dim 64 scale 1.0
         : (tensor<2x7x768xf32>, tensor<2x7x768xf32>, tensor<2x7x768xf32>, tensor<1x3x7x7xf32>)
         -> tensor<2x7x768xf32>
  return
}

// -----

func.func @attention_causal_cross(%q: tensor<2x7x768xf32>, %enc: tensor<2x11x768xf32>) {
  // expected-error @+1 {{keys of another sequence (11 against 7 queries) have no past, causal mask, window or rotary}}
  %0 = tfm.attention %q, %enc, %enc heads 12 kv_heads 12 head_dim 64 scale 1.0 causal
         : (tensor<2x7x768xf32>, tensor<2x11x768xf32>, tensor<2x11x768xf32>) -> tensor<2x7x768xf32>
  return
}

// -----

func.func @linear_int8_activations_of_a_float_weight(%x: tensor<?x768xf32>, %w: tensor<500x768xf32>) {
  // expected-error @+1 {{int8_activations needs an int8 weight}}
  %0 = tfm.linear %x, %w {int8_activations} : (tensor<?x768xf32>, tensor<500x768xf32>) -> tensor<?x500xf32>
  return
}

// -----

func.func @lm_head_int8_activations_of_a_float_weight(%x: tensor<?x768xf16>, %w: tensor<500x768xf16>) {
  // expected-error @+1 {{int8_activations needs an int8 weight}}
  %0 = tfm.lm_head %x, %w {int8_activations} : (tensor<?x768xf16>, tensor<500x768xf16>) -> tensor<?x500xf16>
  return
}
