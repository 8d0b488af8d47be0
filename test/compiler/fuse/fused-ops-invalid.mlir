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
