// RUN: dsc-opt %s -split-input-file -verify-diagnostics
// One case per verifier error of the plan ops.

// expected-error @+1 {{@main is not a program the runtime runs (@prefill, @decode, @forward, an encoder-decoder's @encode, the serving engine's @step)}}
plan.program @main {
  plan.return
}

// -----

// expected-note @+1 {{see existing symbol definition here}}
plan.program @decode {
  plan.return
}
// expected-error @+1 {{redefinition of symbol named 'decode'}}
plan.program @decode {
  plan.return
}

// -----

plan.program @decode {
  // expected-error @+1 {{expects parent op 'builtin.module'}}
  plan.program @prefill {
    plan.return
  }
  plan.return
}

// -----

func.func @f() {
  // expected-error @+1 {{expects parent op 'plan.program'}}
  plan.return
}

// -----

// expected-error @+1 {{attribute 'alignment' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive and whose value is a power of two > 0}}
plan.arena @a size 1000 align 100

// -----

// expected-error @+1 {{attribute 'size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
plan.arena @a size 0 align 64

// -----

// expected-error @+1 {{size 1000 is not a multiple of the alignment 256}}
plan.arena @a size 1000 align 256

// -----

plan.program @forward {
  // expected-error @+1 {{names 1 dimensions of a rank-2 tensor}}
  %ids = plan.input 0 "ids" {dims = ["batch"]} : tensor<?x?xi64>
  plan.return
}

// -----

plan.program @forward {
  %w = plan.weight_tensor "w" : tensor<4x8xf32>
  // expected-error @+1 {{max_shapes[0] dimension 1 is 9 but the type says 8}}
  %e = plan.exec "Relu"(%w) {max_shapes = [array<i64: 4, 9>]} : (tensor<4x8xf32>) -> tensor<?x8xf32>
  plan.return
}

// -----

plan.program @forward {
  %w = plan.weight_tensor "w" : tensor<4x8xf32>
  // expected-error @+1 {{arena offset 8 is not a non-negative multiple of 64}}
  %e = plan.exec "Relu"(%w) {max_shapes = [array<i64: 4, 8>], arena_offsets = array<i64: 8>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  plan.return
}

// -----

plan.program @forward {
  %w = plan.weight_tensor "w" : tensor<4x8xf32>
  // expected-error @+1 {{has arena_offsets but no max_shapes to size the slots}}
  %e = plan.exec "Relu"(%w) {arena_offsets = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  plan.return
}

// -----

plan.program @forward {
  %w = plan.weight_tensor "w" : tensor<4x8xf32>
  // expected-error @+1 {{has 2 names for 1 outputs}}
  plan.return {names = ["a", "b"]} %w : tensor<4x8xf32>
}

// -----

plan.program @forward {
  // expected-error @+1 {{value has type 'tensor<2xi64>' but the result is 'tensor<3xi64>'}}
  %c = plan.constant {value = dense<[1, 2]> : tensor<2xi64>} : tensor<3xi64>
  plan.return
}

// -----

plan.program @forward {
  // expected-error @+1 {{has transforms but no source_type to apply them to}}
  %w = plan.weight_tensor "w" {transforms = [{kind = "transpose", perm = [1, 0]}]} : tensor<3x2xf32>
  plan.return
}

// -----

plan.program @forward {
  // expected-error @+1 {{transform 0 must be a transpose (perm), a slice (axis, offset, size, groups?), a shard (axis, offsets, sizes, groups), a convert (to), a scale (factor), a quantize_int8, quant_scales, quantize_int4 or quant_scales_int4 (group_size)}}
  %w = plan.weight_tensor "w" {source_type = tensor<2x3xf32>, transforms = [{kind = "slice", axis = 0 : i64}]} : tensor<3x2xf32>
  plan.return
}

// -----

plan.program @forward {
  %a = plan.weight_tensor "a" : tensor<4x8xf32>
  // expected-error @+1 {{needs two parts or more}}
  %w = plan.weight_concat %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  plan.return
}

// -----

plan.program @forward {
  %a = plan.weight_tensor "a" : tensor<4x8xf32>
  %b = plan.weight_tensor "b" : tensor<4x8xf16>
  // expected-error @+1 {{part 1 ('tensor<4x8xf16>') differs from the result 'tensor<8x8xf32>' in element type or in a dimension after the first}}
  %w = plan.weight_concat %a, %b : (tensor<4x8xf32>, tensor<4x8xf16>) -> tensor<8x8xf32>
  plan.return
}
