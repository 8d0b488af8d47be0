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
