// RUN: dsc-opt %s -split-input-file -verify-diagnostics
// One case per verifier error of the plan ops.

// expected-error @+1 {{@main is not a program the runtime runs (@prefill, @decode, @forward, an encoder-decoder's @encode)}}
plan.program @main {
  plan.return
}

// -----

// expected-error @+1 {{body must end with plan.return}}
plan.program @forward {
  %t = plan.dim tokens max 4
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

// expected-error @+1 {{entry "layer-norm" is not a C identifier}}
plan.kernel @k entry "layer-norm" template "layer_norm.cu" : (!plan.buffer) -> ()

// -----

// expected-error @+1 {{needs the name of its kernel template}}
plan.kernel @k entry "layer_norm" template "" : (!plan.buffer) -> ()

// -----

// expected-error @+1 {{a kernel returns nothing}}
plan.kernel @k entry "layer_norm" template "layer_norm.cu" : (!plan.buffer) -> index

// -----

// expected-error @+1 {{kernel parameters are !plan.buffer or index, not 'f32'}}
plan.kernel @k entry "layer_norm" template "layer_norm.cu" : (!plan.buffer, f32) -> ()

// -----

// expected-error @+1 {{constant 'dims' must be an integer, float, type or string, not [1, 2]}}
plan.kernel @k entry "layer_norm" template "layer_norm.cu" : (!plan.buffer) -> () constants {dims = [1, 2]}

// -----

plan.program @decode {
  // expected-error @+1 {{attribute 'max' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %t = plan.dim tokens max 0
  plan.return
}

// -----

plan.program @decode {
  // expected-error @+2 {{expected ::dsc::plan::RuntimeDim to be one of: batch, seq, past, total, tokens}}
  // expected-error @+1 {{failed to parse Plan_RuntimeDimAttr parameter}}
  %t = plan.dim heads max 12
  plan.return
}

// -----

func.func @f() {
  // expected-error @+1 {{expects parent op 'plan.program'}}
  %t = plan.dim tokens max 4
  return
}

// -----

plan.program @decode {
  %t = plan.dim tokens max 64
  // expected-error @+1 {{map must take symbols only, no dimensions}}
  %g = plan.apply affine_map<(d0) -> (d0)>[%t]
  plan.return
}

// -----

plan.program @decode {
  %t = plan.dim tokens max 64
  // expected-error @+1 {{map must have one result, not 2}}
  %g = plan.apply affine_map<()[s0] -> (s0, s0)>[%t]
  plan.return
}

// -----

plan.program @decode {
  %t = plan.dim tokens max 64
  // expected-error @+1 {{map takes 2 symbols but 1 operands are given}}
  %g = plan.apply affine_map<()[s0, s1] -> (s0 * s1)>[%t]
  plan.return
}

// -----

plan.program @decode {
  // expected-error @+1 {{@nowhere does not name a plan.arena}}
  %b = plan.buffer @nowhere size 64
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  // expected-error @+1 {{@k does not name a plan.arena}}
  %b = plan.buffer @k size 64
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  // expected-error @+1 {{offset 64 is not aligned to 256 bytes}}
  %b = plan.buffer @a offset 64 size 64
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  // expected-error @+1 {{range [3840, 4352) exceeds the arena's 4096 bytes}}
  %b = plan.buffer @a offset 3840 size 512
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  // expected-error @+1 {{size 8192 exceeds the arena's 4096 bytes}}
  %b = plan.buffer @a size 8192
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  // expected-error @+1 {{attribute 'size' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %b = plan.buffer @a offset 0 size 0
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  // expected-error @+1 {{attribute 'offset' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %b = plan.buffer @a offset -256 size 256
  plan.return
}

// -----

plan.program @decode {
  // expected-error @+1 {{needs the name of a weight tensor}}
  %w = plan.weight "" : tensor<768xf16>
  plan.return
}

// -----

plan.program @decode {
  // expected-error @+1 {{element type 'i1' is not a whole number of bytes}}
  %w = plan.weight "mask" : tensor<768xi1>
  plan.return
}

// -----

plan.program @decode {
  // expected-error @+1 {{attribute 'tensor_type' failed to satisfy constraint}}
  %w = plan.weight "w" : tensor<?x768xf16>
  plan.return
}

// -----

plan.program @decode {
  // expected-error @+1 {{@missing does not name a plan.kernel}}
  plan.launch @missing grid [1, 1, 1] block [32, 1, 1]
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  // expected-error @+1 {{@a does not name a plan.kernel}}
  plan.launch @a grid [1, 1, 1] block [32, 1, 1]
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.kernel @k entry "k" template "k.cu" : (!plan.buffer, index) -> ()
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{kernel @k takes 2 arguments, 1 given}}
  plan.launch @k grid [1, 1, 1] block [32, 1, 1] args(%b : !plan.buffer)
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.kernel @k entry "k" template "k.cu" : (!plan.buffer, index) -> ()
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{argument 1 is '!plan.buffer' but kernel @k takes 'index'}}
  plan.launch @k grid [1, 1, 1] block [32, 1, 1] args(%b, %b : !plan.buffer, !plan.buffer)
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  // expected-error @+1 {{grid must have 3 entries, not 2}}
  plan.launch @k grid [1, 1] block [32, 1, 1]
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  // expected-error @+1 {{grid entries must be positive, not 0}}
  plan.launch @k grid [0, 1, 1] block [32, 1, 1]
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  %t = plan.dim tokens max 4
  // expected-error @+1 {{grid has 0 dynamic entries for 1 operands}}
  "plan.launch"(%t) <{kernel = @k, static_grid = array<i64: 1, 1, 1>, block = array<i64: 32, 1, 1>, shared_mem = 0 : i64, operandSegmentSizes = array<i32: 1, 0>}> : (index) -> ()
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  // expected-error @+1 {{grid dimension 1 may be 70000, more than CUDA's 65535}}
  plan.launch @k grid [1, 70000, 1] block [32, 1, 1]
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  %t = plan.dim tokens max 65536
  %g = plan.apply affine_map<()[s0] -> (s0 + 1)>[%t]
  // expected-error @+1 {{grid dimension 2 may be 65537, more than CUDA's 65535}}
  plan.launch @k grid [1, 1, %g] block [32, 1, 1]
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  // expected-error @+1 {{block must have 3 entries, not 1}}
  plan.launch @k grid [1, 1, 1] block [32]
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  // expected-error @+1 {{block dimension 0 is 0, not in [1, 1024]}}
  plan.launch @k grid [1, 1, 1] block [0, 1, 1]
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  // expected-error @+1 {{block dimension 2 is 128, not in [1, 64]}}
  plan.launch @k grid [1, 1, 1] block [1, 1, 128]
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  // expected-error @+1 {{block has 2048 threads, more than 1024}}
  plan.launch @k grid [1, 1, 1] block [64, 32, 1]
  plan.return
}

// -----

plan.kernel @k entry "k" template "k.cu" : () -> ()
plan.program @decode {
  // expected-error @+1 {{shared_mem 262144 exceeds 232448 bytes}}
  plan.launch @k grid [1, 1, 1] block [256, 1, 1] shared_mem 262144
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{dims must have 3 entries, not 2}}
  plan.gemm f16 %b, %b -> %b dims [4, 4]
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{dims entries must be positive, not 0}}
  plan.gemm f16 %b, %b -> %b dims [4, 0, 4]
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{attribute 'dtype' failed to satisfy constraint}}
  plan.gemm i8 %b, %b -> %b dims [4, 4, 4]
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{the epilogue applies at most one activation}}
  plan.gemm f16 %b, %b -> %b dims [4, 4, 4] epilogue gelu_tanh|silu
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{a bias operand goes with a bias epilogue, and only with one}}
  plan.gemm f16 %b, %b -> %b dims [4, 4, 4] epilogue bias
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{a bias operand goes with a bias epilogue, and only with one}}
  plan.gemm f16 %b, %b -> %b dims [4, 4, 4] bias %b
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{a residual operand goes with a residual epilogue, and only with one}}
  plan.gemm f16 %b, %b -> %b dims [4, 4, 4] epilogue bias|relu bias %b residual %b
  plan.return
}

// -----

plan.arena @a size 65536 align 256
plan.program @decode {
  %small = plan.buffer @a size 256
  %big = plan.buffer @a size 8192
  // expected-error @+1 {{A holds 256 bytes but needs 8192}}
  plan.gemm f16 %small, %big -> %big dims [64, 64, 64]
  plan.return
}

// -----

plan.arena @a size 1048576 align 256
plan.program @decode {
  %t = plan.dim tokens max 128
  %x = plan.buffer @a size 196608
  %w = plan.weight "fc.weight" : tensor<3072x768xf16>
  %h = plan.buffer @a size 393216
  // expected-error @+1 {{C holds 393216 bytes but needs 786432}}
  plan.gemm f16 %x, %w -> %h dims [%t, 3072, 768] trans_b
  plan.return
}

// -----

plan.arena @a size 1048576 align 256
plan.program @decode {
  %t = plan.dim tokens max 64
  %x = plan.buffer @a size 98304
  %w = plan.weight "fc.weight" : tensor<3072x768xf16>
  %b = plan.weight "fc.bias" : tensor<768xf16>
  %h = plan.buffer @a size 393216
  // expected-error @+1 {{bias holds 1536 bytes but needs 6144}}
  plan.gemm f16 %x, %w -> %h dims [%t, 3072, 768] trans_b epilogue bias bias %b
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{count must be positive, not 0}}
  plan.all_reduce f16 %b count 0
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{buffer holds 256 bytes but needs 1536}}
  plan.all_reduce f16 %b count 768
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %t = plan.dim tokens max 64
  %g = plan.apply affine_map<()[s0] -> (s0 * 768)>[%t]
  %b = plan.buffer @a size 4096
  // expected-error @+1 {{buffer holds 4096 bytes but needs 98304}}
  plan.all_reduce f16 %b count %g
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %b = plan.buffer @a size 256
  // expected-error @+1 {{attribute 'dtype' failed to satisfy constraint}}
  plan.all_reduce f64 %b count 4
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %t = plan.dim tokens max 4
  %b = plan.buffer @a size 256
  // expected-error @+1 {{a dynamic count has static_count = kDynamic}}
  "plan.all_reduce"(%b, %t) <{dtype = f16, static_count = 4 : i64}> : (!plan.buffer, index) -> ()
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %src = plan.buffer @a size 256
  %dst = plan.buffer @a size 512
  // expected-error @+1 {{dst holds 512 bytes but needs 1024}}
  plan.all_gather f32 %src -> %dst count 64 ranks 4
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %src = plan.buffer @a size 256
  %dst = plan.buffer @a size 2048
  // expected-error @+1 {{src holds 256 bytes but needs 512}}
  plan.all_gather f32 %src -> %dst count 128 ranks 4
  plan.return
}

// -----

plan.arena @a size 4096 align 256
plan.program @decode {
  %src = plan.buffer @a size 256
  // expected-error @+1 {{attribute 'ranks' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  plan.all_gather f32 %src -> %src count 4 ranks 0
  plan.return
}

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
  // expected-error @+1 {{transform 0 must be a transpose (perm), a slice (axis, offset, size, groups?), a shard (axis, offsets, sizes, groups), a convert (to), a quantize_int8 or a quant_scales (group_size)}}
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
