// RUN: dsc-opt %s | dsc-opt | FileCheck %s
// Every tfm op, printed and parsed back.

// CHECK-LABEL: func.func @weights
func.func @weights() {
  // CHECK: tfm.weight "wte.weight" : tensor<50257x768xf32> -> tensor<50257x768xf32>
  %0 = tfm.weight "wte.weight" : tensor<50257x768xf32> -> tensor<50257x768xf32>
  // CHECK: %[[Q:.*]] = tfm.weight "q" : tensor<64x32xf32> -> tensor<64x32xf32>
  // CHECK: %[[K:.*]] = tfm.weight "k" : tensor<16x32xf32> -> tensor<16x32xf32>
  // CHECK: tfm.concat_weights %[[Q]], %[[K]] : (tensor<64x32xf32>, tensor<16x32xf32>) -> tensor<80x32xf32>
  %q = tfm.weight "q" : tensor<64x32xf32> -> tensor<64x32xf32>
  %k = tfm.weight "k" : tensor<16x32xf32> -> tensor<16x32xf32>
  %qk = tfm.concat_weights %q, %k : (tensor<64x32xf32>, tensor<16x32xf32>) -> tensor<80x32xf32>
  // CHECK: tfm.weight "h.0.mlp.c_fc.weight" : tensor<768x3072xf32> [#tfm.transpose<[1, 0]>, #tfm.slice<axis = 0, offset = 1536, size = 1536>, #tfm.convert<f16>] -> tensor<1536x768xf16>
  %1 = tfm.weight "h.0.mlp.c_fc.weight" : tensor<768x3072xf32>
         [#tfm.transpose<[1, 0]>, #tfm.slice<axis = 0, offset = 1536, size = 1536>,
          #tfm.convert<f16>] -> tensor<1536x768xf16>
  // CHECK: tfm.weight "q.weight" : tensor<4096x4096xbf16> [#tfm.quantize_int8<group_size = 128>] -> tensor<4096x4096xi8>
  %2 = tfm.weight "q.weight" : tensor<4096x4096xbf16> [#tfm.quantize_int8<group_size = 128>] -> tensor<4096x4096xi8>
  // CHECK: tfm.weight "q.weight" : tensor<4096x4096xbf16> [#tfm.quant_scales<group_size = 128, dtype = bf16>] -> tensor<4096x32xbf16>
  %3 = tfm.weight "q.weight" : tensor<4096x4096xbf16> [#tfm.quant_scales<group_size = 128, dtype = bf16>] -> tensor<4096x32xbf16>
  // CHECK: tfm.weight "o.weight" : tensor<64x256xf32> [#tfm.quant_scales<group_size = 0, dtype = f16>] -> tensor<64x1xf16>
  %4 = tfm.weight "o.weight" : tensor<64x256xf32> [#tfm.quant_scales<group_size = 0, dtype = f16>] -> tensor<64x1xf16>
  return
}

// CHECK-LABEL: func.func @embedding_and_norms
func.func @embedding_and_norms(%ids: tensor<?x?xi64>, %ids32: tensor<2x?xi32>,
                               %table: tensor<50257x768xf16>, %shard: tensor<12565x768xf16>,
                               %x: tensor<?x?x768xf16>, %s: tensor<768xf16>) {
  // CHECK: tfm.embedding %{{.*}}, %{{.*}} : (tensor<?x?xi64>, tensor<50257x768xf16>) -> tensor<?x?x768xf16>
  %0 = tfm.embedding %ids, %table : (tensor<?x?xi64>, tensor<50257x768xf16>) -> tensor<?x?x768xf16>
  // CHECK: tfm.embedding %{{.*}}, %{{.*}} {vocab_offset = 37692 : i64, vocab_size = 50257 : i64} : (tensor<2x?xi32>, tensor<12565x768xf16>) -> tensor<2x?x768xf16>
  %1 = tfm.embedding %ids32, %shard {vocab_offset = 37692, vocab_size = 50257}
         : (tensor<2x?xi32>, tensor<12565x768xf16>) -> tensor<2x?x768xf16>
  // CHECK: tfm.layer_norm %{{.*}}, %{{.*}}, %{{.*}} eps 9.99999974E-6 : tensor<?x?x768xf16>, tensor<768xf16>, tensor<768xf16>
  %2 = tfm.layer_norm %x, %s, %s eps 1.0e-5 : tensor<?x?x768xf16>, tensor<768xf16>, tensor<768xf16>
  // CHECK: tfm.layer_norm %{{.*}}, %{{.*}} eps 9.99999996E-13 : tensor<?x?x768xf16>, tensor<768xf16>
  %3 = tfm.layer_norm %x, %s eps 1.0e-12 : tensor<?x?x768xf16>, tensor<768xf16>
  // CHECK: tfm.rms_norm %{{.*}}, %{{.*}} eps 9.99999997E-7 : tensor<?x?x768xf16>, tensor<768xf16>
  %4 = tfm.rms_norm %x, %s eps 1.0e-6 : tensor<?x?x768xf16>, tensor<768xf16>
  return
}

// CHECK-LABEL: func.func @linear_and_activations
func.func @linear_and_activations(%x: tensor<?x?x768xf16>, %w: tensor<3072x768xf16>,
                                  %b: tensor<3072xf16>, %h: tensor<?x?x3072xf16>,
                                  %w2: tensor<768x3072xf16>, %q: tensor<3072x768xi8>,
                                  %qs: tensor<3072x6xf16>) {
  // CHECK: tfm.linear %{{.*}}, %{{.*}} bias %{{.*}} : (tensor<?x?x768xf16>, tensor<3072x768xf16>, tensor<3072xf16>) -> tensor<?x?x3072xf16>
  %0 = tfm.linear %x, %w bias %b : (tensor<?x?x768xf16>, tensor<3072x768xf16>, tensor<3072xf16>) -> tensor<?x?x3072xf16>
  // CHECK: tfm.linear %{{.*}}, %{{.*}} bias %{{.*}} parallel column : (tensor<?x?x768xf16>, tensor<3072x768xf16>, tensor<3072xf16>) -> tensor<?x?x3072xf16>
  %1 = tfm.linear %x, %w bias %b parallel column : (tensor<?x?x768xf16>, tensor<3072x768xf16>, tensor<3072xf16>) -> tensor<?x?x3072xf16>
  // CHECK: tfm.linear %{{.*}}, %{{.*}} parallel row : (tensor<?x?x3072xf16>, tensor<768x3072xf16>) -> tensor<?x?x768xf16>
  %2 = tfm.linear %h, %w2 parallel row : (tensor<?x?x3072xf16>, tensor<768x3072xf16>) -> tensor<?x?x768xf16>
  // CHECK: tfm.linear %{{.*}}, %{{.*}} bias %{{.*}} scales %{{.*}} : (tensor<?x?x768xf16>, tensor<3072x768xi8>, tensor<3072xf16>, tensor<3072x6xf16>) -> tensor<?x?x3072xf16>
  %3 = tfm.linear %x, %q bias %b scales %qs : (tensor<?x?x768xf16>, tensor<3072x768xi8>, tensor<3072xf16>, tensor<3072x6xf16>) -> tensor<?x?x3072xf16>
  // CHECK: tfm.activation gelu_erf %{{.*}} : tensor<?x?x3072xf16>
  %4 = tfm.activation gelu_erf %0 : tensor<?x?x3072xf16>
  // CHECK: tfm.activation gelu_tanh %{{.*}} : tensor<?x?x3072xf16>
  %5 = tfm.activation gelu_tanh %0 : tensor<?x?x3072xf16>
  // CHECK: tfm.activation gelu_quick %{{.*}} : tensor<?x?x3072xf16>
  %6 = tfm.activation gelu_quick %0 : tensor<?x?x3072xf16>
  // CHECK: tfm.activation relu %{{.*}} : tensor<?x?x3072xf16>
  %7 = tfm.activation relu %0 : tensor<?x?x3072xf16>
  // CHECK: tfm.gated_act silu %{{.*}}, %{{.*}} : tensor<?x?x3072xf16>
  %8 = tfm.gated_act silu %0, %1 : tensor<?x?x3072xf16>
  // CHECK: tfm.residual_add %{{.*}}, %{{.*}} : tensor<?x?x768xf16>
  %9 = tfm.residual_add %x, %2 : tensor<?x?x768xf16>
  return
}

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<?x?x768xf16>, %kv: tensor<?x?x256xf16>,
                     %past: tensor<?x4x?x64xf16>, %pad: tensor<?x?xi64>,
                     %add: tensor<?x1x?x?xf16>, %pos: tensor<?x?xi64>,
                     %q2: tensor<1x7x768xf32>, %kv2: tensor<1x7x768xf32>,
                     %sinks: tensor<12xf32>) {
  // CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} heads 12 kv_heads 12 head_dim 64 scale 1.250000e-01 causal : (tensor<1x7x768xf32>, tensor<1x7x768xf32>, tensor<1x7x768xf32>) -> tensor<1x7x768xf32>
  %0 = tfm.attention %q2, %kv2, %kv2 heads 12 kv_heads 12 head_dim 64 scale 0.125 causal
         : (tensor<1x7x768xf32>, tensor<1x7x768xf32>, tensor<1x7x768xf32>) -> tensor<1x7x768xf32>
  // Grouped-query attention with a padding mask, a KV cache and rotary embeddings.
  // CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} past(%{{.*}}, %{{.*}}) positions %{{.*}} heads 12 kv_heads 4 head_dim 64 scale 1.250000e-01 causal rotary <dim = 32, base = 1.000000e+04, layout = half_split> cache_layer 3 : (tensor<?x?x768xf16>, tensor<?x?x256xf16>, tensor<?x?x256xf16>, tensor<?x?xi64>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x?xi64>) -> (tensor<?x?x768xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>)
  %1:3 = tfm.attention %q, %kv, %kv mask %pad past(%past, %past) positions %pos
           heads 12 kv_heads 4 head_dim 64 scale 0.125 causal
           rotary <dim = 32, base = 10000.0, layout = half_split> cache_layer 3
           : (tensor<?x?x768xf16>, tensor<?x?x256xf16>, tensor<?x?x256xf16>, tensor<?x?xi64>,
              tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x?xi64>)
           -> (tensor<?x?x768xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>)
  // ALiBi, a local window and an additive mask; presents without a past (the first step).
  // CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} heads 12 kv_heads 4 head_dim 64 scale 1.250000e-01 alibi window 256 : (tensor<?x?x768xf16>, tensor<?x?x256xf16>, tensor<?x?x256xf16>, tensor<?x1x?x?xf16>) -> (tensor<?x?x768xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>)
  %2:3 = tfm.attention %q, %kv, %kv mask %add heads 12 kv_heads 4 head_dim 64 scale 0.125
           alibi window 256
           : (tensor<?x?x768xf16>, tensor<?x?x256xf16>, tensor<?x?x256xf16>, tensor<?x1x?x?xf16>)
           -> (tensor<?x?x768xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>)
  // GPT-OSS's sinks, one logit per head, after the q/k norms.
  // CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} sinks %{{.*}} heads 12 kv_heads 12 head_dim 64 scale 1.250000e-01 causal window 128 : (tensor<1x7x768xf32>, tensor<1x7x768xf32>, tensor<1x7x768xf32>, tensor<?x?xi64>, tensor<12xf32>) -> tensor<1x7x768xf32>
  %s = tfm.attention %q2, %kv2, %kv2 mask %pad sinks %sinks heads 12 kv_heads 12 head_dim 64
         scale 0.125 causal window 128
         : (tensor<1x7x768xf32>, tensor<1x7x768xf32>, tensor<1x7x768xf32>, tensor<?x?xi64>,
            tensor<12xf32>) -> tensor<1x7x768xf32>
  // CHECK: rotary <dim = 64, base = 1.000000e+04, layout = interleaved>
  %3 = tfm.attention %q, %kv, %kv positions %pos heads 12 kv_heads 4 head_dim 64 scale 0.125
         causal rotary <dim = 64, base = 10000.0, layout = interleaved>
         : (tensor<?x?x768xf16>, tensor<?x?x256xf16>, tensor<?x?x256xf16>, tensor<?x?xi64>)
         -> tensor<?x?x768xf16>
  // Gemma-2's logit soft-capping, after every other attribute.
  // CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} positions %{{.*}} heads 12 kv_heads 4 head_dim 64 scale 1.250000e-01 causal window 4096 rotary <dim = 64, base = 1.000000e+04, layout = half_split> cache_layer 1 softcap 5.000000e+01 : (tensor<?x?x768xf16>, tensor<?x?x256xf16>, tensor<?x?x256xf16>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?x768xf16>
  %4 = tfm.attention %q, %kv, %kv mask %pad positions %pos heads 12 kv_heads 4 head_dim 64
         scale 0.125 causal window 4096 rotary <dim = 64, base = 10000.0, layout = half_split>
         cache_layer 1 softcap 50.0
         : (tensor<?x?x768xf16>, tensor<?x?x256xf16>, tensor<?x?x256xf16>, tensor<?x?xi64>,
            tensor<?x?xi64>) -> tensor<?x?x768xf16>
  // CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} heads 12 kv_heads 12 head_dim 64 scale 1.250000e-01 softcap 3.000000e+01 : (tensor<1x7x768xf32>
  %5 = tfm.attention %q2, %kv2, %kv2 heads 12 kv_heads 12 head_dim 64 scale 0.125 softcap 30.0
         : (tensor<1x7x768xf32>, tensor<1x7x768xf32>, tensor<1x7x768xf32>) -> tensor<1x7x768xf32>
  return
}

// T5: a relative position bias computed in the graph beside the padding mask, and a
// cross-attention over 11 encoder tokens for 7 queries.
// CHECK-LABEL: func.func @attention_encoder_decoder
func.func @attention_encoder_decoder(%q: tensor<2x7x768xf32>, %kv: tensor<2x7x768xf32>,
                                     %pad: tensor<2x7xi64>, %bias: tensor<1x12x7x7xf32>,
                                     %enc: tensor<2x11x768xf32>, %encPad: tensor<2x11xi64>) {
  // CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} bias %{{.*}} heads 12 kv_heads 12 head_dim 64 scale 1.000000e+00 :
  %0 = tfm.attention %q, %kv, %kv mask %pad bias %bias heads 12 kv_heads 12 head_dim 64
         scale 1.0
         : (tensor<2x7x768xf32>, tensor<2x7x768xf32>, tensor<2x7x768xf32>, tensor<2x7xi64>,
            tensor<1x12x7x7xf32>) -> tensor<2x7x768xf32>
  // CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} heads 12 kv_heads 12 head_dim 64 scale 1.000000e+00 : (tensor<2x7x768xf32>, tensor<2x11x768xf32>, tensor<2x11x768xf32>, tensor<2x11xi64>)
  %1 = tfm.attention %q, %enc, %enc mask %encPad heads 12 kv_heads 12 head_dim 64 scale 1.0
         : (tensor<2x7x768xf32>, tensor<2x11x768xf32>, tensor<2x11x768xf32>, tensor<2x11xi64>)
         -> tensor<2x7x768xf32>
  return
}

// CHECK-LABEL: func.func @int8_lm_head
// CHECK: tfm.lm_head %{{.*}}, %{{.*}} scales %{{.*}} : (tensor<?x768xf16>, tensor<500x768xi8>, tensor<500x6xf16>) -> tensor<?x500xf16>
func.func @int8_lm_head(%x: tensor<?x768xf16>, %w: tensor<500x768xi8>, %s: tensor<500x6xf16>) -> tensor<?x500xf16> {
  %0 = tfm.lm_head %x, %w scales %s : (tensor<?x768xf16>, tensor<500x768xi8>, tensor<500x6xf16>) -> tensor<?x500xf16>
  return %0 : tensor<?x500xf16>
}

// CHECK-LABEL: func.func @collectives_and_lm_head
func.func @collectives_and_lm_head(%x: tensor<?x?x768xf16>, %w: tensor<12565x768xf16>,
                                   %l: tensor<?x?x12565xf16>, %l2: tensor<?x?x12564xf16>) {
  // CHECK: tfm.all_reduce %{{.*}} ranks 4 : tensor<?x?x768xf16>
  %0 = tfm.all_reduce %x ranks 4 : tensor<?x?x768xf16>
  // CHECK: tfm.all_gather %{{.*}} axis 2 ranks 4 : tensor<?x?x768xf16> -> tensor<?x?x3072xf16>
  %1 = tfm.all_gather %x axis 2 ranks 4 : tensor<?x?x768xf16> -> tensor<?x?x3072xf16>
  // CHECK: tfm.all_gather %{{.*}} axis 2 ranks 4 sizes [12565, 12564, 12564, 12564] : tensor<?x?x12565xf16> -> tensor<?x?x50257xf16>
  %2 = tfm.all_gather %l axis 2 ranks 4 sizes [12565, 12564, 12564, 12564]
         : tensor<?x?x12565xf16> -> tensor<?x?x50257xf16>
  // CHECK: tfm.lm_head %{{.*}}, %{{.*}} : (tensor<?x?x768xf16>, tensor<12565x768xf16>) -> tensor<?x?x12565xf16>
  %3 = tfm.lm_head %x, %w : (tensor<?x?x768xf16>, tensor<12565x768xf16>) -> tensor<?x?x12565xf16>
  // CHECK: tfm.lm_head %{{.*}}, %{{.*}} {vocab_offset = 12565 : i64, vocab_size = 50257 : i64} : (tensor<?x?x768xf16>, tensor<12565x768xf16>) -> tensor<?x?x12565xf16>
  %4 = tfm.lm_head %x, %w {vocab_offset = 12565, vocab_size = 50257}
         : (tensor<?x?x768xf16>, tensor<12565x768xf16>) -> tensor<?x?x12565xf16>
  return
}

// CHECK-LABEL: func.func @gated_act_packed
func.func @gated_act_packed(%x: tensor<?x?x48xf32>) {
  // CHECK: tfm.gated_act_packed silu %{{.*}} : tensor<?x?x48xf32> -> tensor<?x?x24xf32>
  %0 = tfm.gated_act_packed silu %x : tensor<?x?x48xf32> -> tensor<?x?x24xf32>
  return
}
