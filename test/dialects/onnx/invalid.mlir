// Verifier errors of the onnx dialect.
// RUN: dsc-opt %s -split-input-file -verify-diagnostics

func.func @weight_without_name() {
  // expected-error @+1 {{needs the name of an initializer}}
  %w = onnx.Weight "" : tensor<4xf32>
  return
}

// -----

func.func @weight_dynamic(%x: tensor<4xf32>) {
  // expected-error @+1 {{must be statically shaped tensor}}
  %w = onnx.Weight "w" : tensor<?xf32>
  return
}

// -----

func.func @constant_type() {
  // expected-error @+1 {{value has type 'tensor<2xi64>' but the result is 'tensor<3xi64>'}}
  %c = onnx.Constant {value = dense<[1, 2]> : tensor<2xi64>} : tensor<3xi64>
  return
}

// -----

func.func @broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{operands are not broadcast-compatible: dimension 1 is 3 in one operand and 4 in another}}
  %0 = onnx.Add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @broadcast_result(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{result dimension 0 is 5 but the operands broadcast to 2}}
  %0 = onnx.Add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<5x3xf32>
  return
}

// -----

func.func @element_types(%a: tensor<3xf32>, %b: tensor<3xi64>) {
  // expected-error @+1 {{all of {A, B, C} have same element type}}
  %0 = onnx.Mul %a, %b : (tensor<3xf32>, tensor<3xi64>) -> tensor<3xf32>
  return
}

// -----

func.func @compare_result(%a: tensor<3xf32>) {
  // expected-error @+1 {{result #0 must be tensor of 1-bit signless integer values}}
  %0 = onnx.Less %a, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @gelu(%a: tensor<3xf32>) {
  // expected-error @+1 {{approximate must be "none" or "tanh", not "erf"}}
  %0 = onnx.Gelu %a {approximate = "erf"} : (tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @clip_bounds(%a: tensor<3xf32>, %lo: tensor<2xf32>) {
  %n = onnx.NoValue
  // expected-error @+1 {{bounds must be scalars}}
  %0 = onnx.Clip %a, %lo, %n : (tensor<3xf32>, tensor<2xf32>, none) -> tensor<3xf32>
  return
}

// -----

func.func @cast(%a: tensor<3xf32>) {
  // expected-error @+1 {{result element type 'f16' differs from to = 'i64'}}
  %0 = onnx.Cast %a {to = i64} : (tensor<3xf32>) -> tensor<3xf16>
  return
}

// -----

func.func @matmul(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{contracted dimensions differ: 3 and 4}}
  %0 = onnx.MatMul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @gemm_rank(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>) {
  %n = onnx.NoValue
  // expected-error @+1 {{A and B must be 2-D}}
  %0 = onnx.Gemm %a, %b, %n : (tensor<2x3x4xf32>, tensor<4x5xf32>, none) -> tensor<*xf32>
  return
}

// -----

func.func @gemm_trans(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) {
  %n = onnx.NoValue
  // expected-error @+1 {{contracted dimensions differ: 3 and 4}}
  %0 = onnx.Gemm %a, %b, %n : (tensor<2x3xf32>, tensor<4x3xf32>, none) -> tensor<*xf32>
  return
}

// -----

func.func @softmax_axis(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = onnx.Softmax %a {axis = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @layer_norm_scale(%x: tensor<2x4xf16>, %s: tensor<4xf32>) {
  %n = onnx.NoValue
  // expected-error @+1 {{Scale must have the element type of X}}
  %y, %m, %i = onnx.LayerNormalization %x, %s, %n : (tensor<2x4xf16>, tensor<4xf32>, none) -> (tensor<2x4xf16>, tensor<*xf32>, tensor<*xf32>)
  return
}

// -----

func.func @transpose_perm(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{perm has 3 entries for rank 2}}
  %0 = onnx.Transpose %a {perm = [0, 1, 2]} : (tensor<2x3xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @transpose_result(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{result dimension 0 is 2, expected 3}}
  %0 = onnx.Transpose %a {perm = [1, 0]} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @concat_dims(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{inputs differ in dimension 1 (3 and 4)}}
  %0 = onnx.Concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @split_sizes(%a: tensor<6xf32>, %s: tensor<3xi64>) {
  // expected-error @+1 {{split has 3 sizes for 2 outputs}}
  %0:2 = onnx.Split %a, %s : (tensor<6xf32>, tensor<3xi64>) -> (tensor<*xf32>, tensor<*xf32>)
  return
}

// -----

func.func @gather_axis(%a: tensor<10x4xf32>, %i: tensor<3xi64>) {
  // expected-error @+1 {{axis -3 is out of range for rank 2}}
  %0 = onnx.Gather %a, %i {axis = -3 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<*xf32>
  return
}

// -----

func.func @gather_indices(%a: tensor<10x4xf32>, %i: tensor<3xf32>) {
  // expected-error @+1 {{operand #1 must be tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = onnx.Gather %a, %i : (tensor<10x4xf32>, tensor<3xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @gathernd_tuple_too_long(%a: tensor<2x3xf32>, %i: tensor<1x3xi64>) {
  // expected-error @+1 {{index tuples of length 3 do not fit data of rank 2 after 0 batch dimensions}}
  %0 = onnx.GatherND %a, %i : (tensor<2x3xf32>, tensor<1x3xi64>) -> tensor<1xf32>
  return
}

// -----

func.func @scatter_reduction(%a: tensor<4xf32>, %i: tensor<1x1xi64>, %u: tensor<1xf32>) {
  // expected-error @+1 {{unknown reduction "sum"}}
  %0 = onnx.ScatterND %a, %i, %u {reduction = "sum"} : (tensor<4xf32>, tensor<1x1xi64>, tensor<1xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @range_scalars(%a: tensor<2xi64>, %b: tensor<i64>) {
  // expected-error @+1 {{start, limit and delta must be scalars}}
  %0 = onnx.Range %a, %b, %b : (tensor<2xi64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  return
}

// -----

func.func @constant_of_shape(%s: tensor<2xi64>) {
  // expected-error @+1 {{result element type must be 'f32'}}
  %0 = onnx.ConstantOfShape %s : (tensor<2xi64>) -> tensor<*xi64>
  return
}

// -----

func.func @if_count(%c: tensor<1xi1>, %x: tensor<2xf32>) {
  // expected-error @+1 {{a branch yields 0 values for 1 results}}
  %r = onnx.If %c : tensor<1xi1> -> (tensor<2xf32>) then {
    onnx.Yield
  } else {
    onnx.Yield %x : tensor<2xf32>
  }
  return
}

// -----

func.func @if_cond(%c: tensor<2xi1>, %x: tensor<2xf32>) {
  // expected-error @+1 {{cond must hold a single element}}
  %r = onnx.If %c : tensor<2xi1> -> (tensor<2xf32>) then {
    onnx.Yield %x : tensor<2xf32>
  } else {
    onnx.Yield %x : tensor<2xf32>
  }
  return
}
