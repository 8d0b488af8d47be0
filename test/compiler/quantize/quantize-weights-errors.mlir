// What dsc-quantize-weights refuses (errors) and leaves alone (remarks).
// RUN: dsc-opt %s --split-input-file --dsc-quantize-weights="group-size=8 remarks" --verify-diagnostics

// An uneven row-parallel split, 16 and 12 of 28 inputs: groups of 8 do not divide rank 1's.
func.func @uneven_shard(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %w = tfm.weight "o.weight" : tensor<16x28xf32> [#tfm.shard<axis = 1, offsets = [0, 16], sizes = [16, 12], groups = 1>] -> tensor<16x16xf32>
  // expected-error @below {{int8 group size 8 does not divide the 12 input features of this linear layer on rank 1 of 2; choose a group size that divides it, or 0 for one group per output channel}}
  %y = tfm.linear %x, %w parallel row : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @not_dividing(%x: tensor<2x12xf32>) -> tensor<2x16xf32> {
  %w = tfm.weight "w" : tensor<16x12xf32> -> tensor<16x12xf32>
  // expected-error @below {{int8 group size 8 does not divide the 12 input features of this linear layer; choose a group size that divides it, or 0 for one group per output channel}}
  %y = tfm.linear %x, %w : (tensor<2x12xf32>, tensor<16x12xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @left_alone(%x: tensor<2x16xf32>, %computed: tensor<16x16xf32>, %q: tensor<16x16xi8>, %s: tensor<16x1xf32>) -> (tensor<2x16xf32>, tensor<2x16xf32>) {
  // expected-remark @below {{not quantized: its weight is computed, not a model weight}}
  %y = tfm.linear %x, %computed : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  // expected-remark @below {{not quantized: it is already quantized}}
  %z = tfm.linear %x, %q scales %s : (tensor<2x16xf32>, tensor<16x16xi8>, tensor<16x1xf32>) -> tensor<2x16xf32>
  return %y, %z : tensor<2x16xf32>, tensor<2x16xf32>
}
// int4's groups must be even (two codes a byte), and there are no other widths.
// RUN: not dsc-opt %s --split-input-file --dsc-quantize-weights="bits=4 group-size=7" 2>&1 | FileCheck %s --check-prefix=ODD
// RUN: not dsc-opt %s --split-input-file --dsc-quantize-weights="bits=3 group-size=8" 2>&1 | FileCheck %s --check-prefix=BITS
// ODD: int4 weights need a positive, even group size (32, 64, 128: a scale per group of inputs), not 7
// BITS: weights are quantized to 8 or 4 bits, not 3
