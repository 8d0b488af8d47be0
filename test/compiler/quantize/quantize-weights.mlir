// dsc-quantize-weights: each linear's weight handle gains #tfm.quantize_int8 and a second
// handle of the same weight gives its scales; the plan writer quantizes the bytes.
// RUN: dsc-opt %s --split-input-file --dsc-quantize-weights | FileCheck %s --check-prefix=CHANNEL
// RUN: dsc-opt %s --split-input-file --dsc-quantize-weights=group-size=8 | FileCheck %s --check-prefix=GROUP8
// RUN: dsc-opt %s --split-input-file --dsc-quantize-weights="group-size=8 mlp-extra-grouping" | FileCheck %s --check-prefix=EXTRA
// RUN: dsc-opt %s --split-input-file --dsc-quantize-weights="mlp-extra-grouping" | FileCheck %s --check-prefix=EXTRA-CHANNEL
// RUN: dsc-opt %s --split-input-file --dsc-quantize-weights=group-size=64 | FileCheck %s --check-prefix=CHANNEL
// RUN: dsc-opt %s --split-input-file --dsc-quantize-weights=lm-head=false | FileCheck %s --check-prefix=KEEP-HEAD
// int8-activations (dsc's default for --dtype int8): every int8 layer and the head say so.
// RUN: dsc-opt %s --split-input-file --dsc-quantize-weights=int8-activations | FileCheck %s --check-prefix=ACT
// int4 (docs/int4.md): the linears get ui4 codes [out, in] and a scale per group; the LM head
// stays int8 in groups of the same size.
// RUN: dsc-opt %s --split-input-file --dsc-quantize-weights="bits=4 group-size=8" | FileCheck %s --check-prefix=INT4
// A default int4 group size (dsc --dtype int4 without a size) bends to a layer it does not
// divide: 32 for the 32 inputs of proj, 16 for the 16 of fc.
// RUN: dsc-opt %s --split-input-file --dsc-quantize-weights="bits=4 group-size=32 default-group-size" | FileCheck %s --check-prefix=INT4-DEFAULT

// An MLP (linear -> activation -> linear) after a transposed (Conv1D) weight.
// CHANNEL-LABEL: func.func @mlp
// CHANNEL: %[[W1:.*]] = tfm.weight "fc.weight" : tensor<16x32xf32> [#tfm.transpose<[1, 0]>, #tfm.quantize_int8<group_size = 0>] -> tensor<32x16xi8>
// CHANNEL: %[[S1:.*]] = tfm.weight "fc.weight" : tensor<16x32xf32> [#tfm.transpose<[1, 0]>, #tfm.quant_scales<group_size = 0, dtype = f32>] -> tensor<32x1xf32>
// CHANNEL: "proj.weight" {{.*}}#tfm.quant_scales<group_size = 0, dtype = f32>] -> tensor<16x1xf32>
// CHANNEL: tfm.linear %{{.*}}, %[[W1]] bias %{{.*}} scales %[[S1]]
// CHANNEL-NOT: -> tensor<32x16xf32>
// CHANNEL-NOT: int8_activations
// ACT-LABEL: func.func @mlp
// ACT: tfm.linear {{.*}} {int8_activations}
// ACT: tfm.linear {{.*}} {int8_activations}
// GROUP8-LABEL: func.func @mlp
// GROUP8: tfm.weight "fc.weight" {{.*}}#tfm.quant_scales<group_size = 8, dtype = f32>] -> tensor<32x2xf32>
// GROUP8: tfm.weight "proj.weight" {{.*}}#tfm.quant_scales<group_size = 8, dtype = f32>] -> tensor<16x4xf32>
// The MLP's layers get half the group size.
// EXTRA-LABEL: func.func @mlp
// EXTRA: tfm.weight "fc.weight" {{.*}}#tfm.quant_scales<group_size = 4, dtype = f32>] -> tensor<32x4xf32>
// EXTRA: tfm.weight "proj.weight" {{.*}}#tfm.quant_scales<group_size = 4, dtype = f32>] -> tensor<16x8xf32>
// Per channel, extra grouping means two groups per row.
// EXTRA-CHANNEL-LABEL: func.func @mlp
// EXTRA-CHANNEL: tfm.weight "fc.weight" {{.*}}#tfm.quant_scales<group_size = 8, dtype = f32>] -> tensor<32x2xf32>
// EXTRA-CHANNEL: tfm.weight "proj.weight" {{.*}}#tfm.quant_scales<group_size = 16, dtype = f32>] -> tensor<16x2xf32>
// INT4-DEFAULT-LABEL: func.func @mlp
// INT4-DEFAULT: tfm.weight "fc.weight" {{.*}}#tfm.quantize_int4<group_size = 16>] -> tensor<32x16xui4>
// INT4-DEFAULT: tfm.weight "proj.weight" {{.*}}#tfm.quantize_int4<group_size = 32>] -> tensor<16x32xui4>
// INT4-LABEL: func.func @mlp
// INT4: %[[W1:.*]] = tfm.weight "fc.weight" : tensor<16x32xf32> [#tfm.transpose<[1, 0]>, #tfm.quantize_int4<group_size = 8>] -> tensor<32x16xui4>
// INT4: %[[S1:.*]] = tfm.weight "fc.weight" : tensor<16x32xf32> [#tfm.transpose<[1, 0]>, #tfm.quant_scales_int4<group_size = 8, dtype = f32>] -> tensor<32x2xf32>
// INT4: tfm.linear %{{.*}}, %[[W1]] bias %{{.*}} scales %[[S1]]
func.func @mlp(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %w1 = tfm.weight "fc.weight" : tensor<16x32xf32> [#tfm.transpose<[1, 0]>] -> tensor<32x16xf32>
  %b1 = tfm.weight "fc.bias" : tensor<32xf32> -> tensor<32xf32>
  %w2 = tfm.weight "proj.weight" : tensor<16x32xf32> -> tensor<16x32xf32>
  %h = tfm.linear %x, %w1 bias %b1 : (tensor<2x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<2x32xf32>
  %a = tfm.activation gelu_tanh %h : tensor<2x32xf32>
  %y = tfm.linear %a, %w2 : (tensor<2x32xf32>, tensor<16x32xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

// A layer that is not in the MLP keeps the group size under extra grouping; a weight used
// by two layers is quantized once per layer (each gets its own handles).
// EXTRA-LABEL: func.func @attention_projection
// EXTRA-COUNT-2: #tfm.quant_scales<group_size = 8, dtype = f32>] -> tensor<16x2xf32>
// CHANNEL-LABEL: func.func @attention_projection
// CHANNEL-NOT: -> tensor<16x16xf32>
func.func @attention_projection(%x: tensor<2x16xf32>) -> (tensor<2x16xf32>, tensor<2x16xf32>) {
  %w = tfm.weight "o.weight" : tensor<16x16xf32> -> tensor<16x16xf32>
  %y = tfm.linear %x, %w : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  %z = tfm.linear %y, %w : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  return %y, %z : tensor<2x16xf32>, tensor<2x16xf32>
}

// -----

// A row-parallel shard: each rank's 16 of the 32 inputs are grouped on their own, after the
// shard, so no group straddles two ranks.
// GROUP8-LABEL: func.func @row_parallel
// GROUP8: #tfm.shard<axis = 1, offsets = [0, 16], sizes = [16, 16], groups = 1>, #tfm.quantize_int8<group_size = 8>] -> tensor<16x16xi8>
// GROUP8: #tfm.shard<axis = 1, offsets = [0, 16], sizes = [16, 16], groups = 1>, #tfm.quant_scales<group_size = 8, dtype = f32>] -> tensor<16x2xf32>
func.func @row_parallel(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %w = tfm.weight "o.weight" : tensor<16x32xf32> [#tfm.shard<axis = 1, offsets = [0, 16], sizes = [16, 16], groups = 1>] -> tensor<16x16xf32>
  %y = tfm.linear %x, %w parallel row : (tensor<2x16xf32>, tensor<16x16xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

// The LM head's vocabulary rows are its output channels, a vocabulary shard's too; with
// lm-head=false it keeps its float weight.
// CHANNEL-LABEL: func.func @lm_head
// CHANNEL: %[[Q:.*]] = tfm.weight "head" : tensor<100x16xf32> [#tfm.shard<axis = 0, offsets = [0, 50], sizes = [50, 50], groups = 1>, #tfm.quantize_int8<group_size = 0>] -> tensor<50x16xi8>
// CHANNEL: %[[S:.*]] = tfm.weight "head" : tensor<100x16xf32> [#tfm.shard<axis = 0, offsets = [0, 50], sizes = [50, 50], groups = 1>, #tfm.quant_scales<group_size = 0, dtype = f32>] -> tensor<50x1xf32>
// CHANNEL: tfm.lm_head %{{.*}}, %[[Q]] scales %[[S]] {vocab_size = 100 : i64}
// An int4 plan's head is int8, and takes int8 activations as its int4 layers do; an int8
// plan's keeps f32 ones (CHANNEL's exact attributes above).
// INT4-LABEL: func.func @lm_head
// INT4: tfm.weight "head" {{.*}}#tfm.quantize_int8<group_size = 8>] -> tensor<50x16xi8>
// INT4: tfm.lm_head {{.*}} {int8_activations, vocab_size = 100 : i64}
// ACT-LABEL: func.func @lm_head
// ACT: tfm.lm_head {{.*}} {int8_activations, vocab_size = 100 : i64}
// KEEP-HEAD-LABEL: func.func @lm_head
// KEEP-HEAD: tfm.lm_head %{{.*}}, %{{.*}} {vocab_size = 100 : i64} : (tensor<2x16xf32>, tensor<50x16xf32>) -> tensor<2x50xf32>
func.func @lm_head(%x: tensor<2x16xf32>) -> tensor<2x50xf32> {
  %w = tfm.weight "head" : tensor<100x16xf32> [#tfm.shard<axis = 0, offsets = [0, 50], sizes = [50, 50], groups = 1>] -> tensor<50x16xf32>
  %y = tfm.lm_head %x, %w {vocab_size = 100 : i64} : (tensor<2x16xf32>, tensor<50x16xf32>) -> tensor<2x50xf32>
  return %y : tensor<2x50xf32>
}
