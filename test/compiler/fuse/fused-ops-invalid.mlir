// The verifiers of the fused forms.
// RUN: dsc-opt %s --split-input-file --verify-diagnostics

func.func @residual_type(%x: tensor<3x8xf32>, %r: tensor<3x4xf32>) -> tensor<3x8xf32> {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  // expected-error @below {{residual 'tensor<3x4xf32>' must have the result's type 'tensor<3x8xf32>'}}
  %y = tfm.linear %x, %w residual %r : (tensor<3x8xf32>, tensor<8x8xf32>, tensor<3x4xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

func.func @row_residual(%x: tensor<3x8xf32>) -> tensor<3x8xf32> {
  %w = tfm.weight "w" : tensor<8x8xf32> -> tensor<8x8xf32>
  // expected-error @below {{a row-parallel linear takes no residual}}
  %y = tfm.linear %x, %w parallel row residual %x : (tensor<3x8xf32>, tensor<8x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

func.func @norm_residual_type(%x: tensor<3x8xf32>, %r: tensor<1x8xf32>) -> tensor<3x8xf32> {
  %s = tfm.weight "s" : tensor<8xf32> -> tensor<8xf32>
  // expected-error @below {{residual 'tensor<1x8xf32>' must have the input's type 'tensor<3x8xf32>'}}
  %n:2 = tfm.rms_norm %x, %s residual %r eps 1.0e-6 : tensor<3x8xf32>, tensor<8xf32> residual tensor<1x8xf32> -> tensor<3x8xf32>
  return %n#0 : tensor<3x8xf32>
}

// -----

func.func @gated_without_activation(%x: tensor<3x16xf32>, %w: tensor<48x16xf32>) -> tensor<3x24xf32> {
  // expected-error @below {{a gated linear needs the activation of its gate}}
  %y = tfm.linear %x, %w gated : (tensor<3x16xf32>, tensor<48x16xf32>) -> tensor<3x24xf32>
  return %y : tensor<3x24xf32>
}

// -----

func.func @gated_full_width(%x: tensor<3x16xf32>, %w: tensor<48x16xf32>) -> tensor<3x48xf32> {
  // expected-error @below {{result feature count is 48, expected 24}}
  %y = tfm.linear %x, %w activation silu gated : (tensor<3x16xf32>, tensor<48x16xf32>) -> tensor<3x48xf32>
  return %y : tensor<3x48xf32>
}

// -----

func.func @gated_odd_rows(%x: tensor<3x16xf32>, %w: tensor<47x16xf32>) -> tensor<3x23xf32> {
  // expected-error @below {{a gated linear's weight has 47 rows, not a [gate; up] pair of equal halves}}
  %y = tfm.linear %x, %w activation silu gated : (tensor<3x16xf32>, tensor<47x16xf32>) -> tensor<3x23xf32>
  return %y : tensor<3x23xf32>
}

// -----

func.func @qk_norm_scale_size(%x: tensor<1x?x32xf32>, %mask: tensor<1x?xi64>) -> tensor<1x?x32xf32> {
  %s = tfm.weight "s" : tensor<16xf32> -> tensor<16xf32>
  // expected-error @below {{q/k norm scales must be [8] each, or [32] and [32] (over all heads), not 'tensor<16xf32>' and 'tensor<16xf32>'}}
  %o = tfm.attention %x, %x, %x mask %mask qk_norm(%s, %s) eps 1.0e-6 heads 4 kv_heads 4 head_dim 8 scale 0.35 causal : (tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?xi64>, tensor<16xf32>, tensor<16xf32>) -> tensor<1x?x32xf32>
  return %o : tensor<1x?x32xf32>
}

// -----

func.func @qk_norm_scales_of_two_kinds(%x: tensor<1x?x32xf32>, %mask: tensor<1x?xi64>) -> tensor<1x?x32xf32> {
  %s = tfm.weight "s" : tensor<8xf32> -> tensor<8xf32>
  %w = tfm.weight "w" : tensor<32xf32> -> tensor<32xf32>
  // expected-error @below {{q/k norm scales must be [8] each, or [32] and [32] (over all heads), not 'tensor<32xf32>' and 'tensor<8xf32>'}}
  %o = tfm.attention %x, %x, %x mask %mask qk_norm(%w, %s) eps 1.0e-6 heads 4 kv_heads 4 head_dim 8 scale 0.35 causal : (tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?xi64>, tensor<32xf32>, tensor<8xf32>) -> tensor<1x?x32xf32>
  return %o : tensor<1x?x32xf32>
}

// -----

func.func @qk_norm_without_epsilon(%x: tensor<1x?x32xf32>, %mask: tensor<1x?xi64>) -> tensor<1x?x32xf32> {
  %s = tfm.weight "s" : tensor<8xf32> -> tensor<8xf32>
  // expected-error @below {{query_norm_scale, key_norm_scale and qk_norm_epsilon come together}}
  %o = "tfm.attention"(%x, %x, %x, %mask, %s, %s) {num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 8 : i64, scale = 0.35 : f32, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 1, 1, 0>} : (tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?x32xf32>, tensor<1x?xi64>, tensor<8xf32>, tensor<8xf32>) -> tensor<1x?x32xf32>
  return %o : tensor<1x?x32xf32>
}
