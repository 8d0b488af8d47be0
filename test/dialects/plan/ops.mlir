// RUN: dsc-opt %s | dsc-opt | FileCheck %s
// Every plan op, printed and parsed back.

// CHECK: #[[MAP:.*]] = affine_map<()[s0] -> ((s0 * 3) ceildiv 256)>
// CHECK-LABEL: module
module {
  // CHECK: plan.arena @activations size 1048576 align 256
  plan.arena @activations size 1048576 align 256
  // CHECK: plan.kernel @layer_norm_768 entry "dsc_layer_norm" template "layer_norm.cu" : (!plan.buffer, !plan.buffer, !plan.buffer, !plan.buffer, index) -> () constants {dtype = f16, epsilon = 9.99999974E-6 : f32, hidden = 768 : i64}
  plan.kernel @layer_norm_768 entry "dsc_layer_norm" template "layer_norm.cu"
      : (!plan.buffer, !plan.buffer, !plan.buffer, !plan.buffer, index) -> ()
      constants {hidden = 768 : i64, dtype = f16, epsilon = 1.0e-5 : f32}
  // CHECK: plan.kernel @embed entry "dsc_embedding" template "embedding.cu" : (!plan.buffer, !plan.buffer, !plan.buffer) -> (){{$}}
  plan.kernel @embed entry "dsc_embedding" template "embedding.cu" : (!plan.buffer, !plan.buffer, !plan.buffer) -> ()

  // CHECK: plan.program @decode {
  plan.program @decode {
    // CHECK: %[[T:.*]] = plan.dim tokens max 64
    %tokens = plan.dim tokens max 64
    // CHECK: plan.dim batch max 8
    %batch = plan.dim batch max 8
    // CHECK: plan.dim seq max 1
    %seq = plan.dim seq max 1
    // CHECK: plan.dim past max 1024
    %past = plan.dim past max 1024
    // CHECK: plan.dim total max 1025
    %total = plan.dim total max 1025
    // CHECK: %[[G:.*]] = plan.apply #[[MAP]][%[[T]]]
    %blocks = plan.apply affine_map<()[s0] -> (s0 * 3 ceildiv 256)>[%tokens]

    // CHECK: %[[IDS:.*]] = plan.buffer @activations offset 0 size 256
    %ids = plan.buffer @activations offset 0 size 256
    // CHECK: %[[X:.*]] = plan.buffer @activations offset 256 size 98304
    %x = plan.buffer @activations offset 256 size 98304
    // CHECK: %[[Y:.*]] = plan.buffer @activations offset 98560 size 98304
    %y = plan.buffer @activations offset 98560 size 98304
    // CHECK: %[[H:.*]] = plan.buffer @activations size 393216
    %h = plan.buffer @activations size 393216

    // CHECK: %[[WTE:.*]] = plan.weight "transformer.wte.weight" : tensor<50257x768xf16>
    %wte = plan.weight "transformer.wte.weight" : tensor<50257x768xf16>
    // CHECK: %[[LNW:.*]] = plan.weight "h.0.ln_1.weight" : tensor<768xf16>
    %lnw = plan.weight "h.0.ln_1.weight" : tensor<768xf16>
    // CHECK: %[[LNB:.*]] = plan.weight "h.0.ln_1.bias" : tensor<768xf16>
    %lnb = plan.weight "h.0.ln_1.bias" : tensor<768xf16>
    // CHECK: %[[FC:.*]] = plan.weight "h.0.mlp.c_fc.weight" : tensor<3072x768xf16>
    %fc = plan.weight "h.0.mlp.c_fc.weight" : tensor<3072x768xf16>
    // CHECK: %[[FCB:.*]] = plan.weight "h.0.mlp.c_fc.bias" : tensor<3072xf16>
    %fcb = plan.weight "h.0.mlp.c_fc.bias" : tensor<3072xf16>
    // CHECK: %[[PROJ:.*]] = plan.weight "h.0.mlp.c_proj.weight" : tensor<768x3072xf16>
    %proj = plan.weight "h.0.mlp.c_proj.weight" : tensor<768x3072xf16>

    // CHECK: plan.launch @embed grid [%[[T]], 1, 1] block [128, 1, 1] args(%[[IDS]], %[[WTE]], %[[X]] : !plan.buffer, !plan.buffer, !plan.buffer)
    plan.launch @embed grid [%tokens, 1, 1] block [128, 1, 1]
        args(%ids, %wte, %x : !plan.buffer, !plan.buffer, !plan.buffer)
    // CHECK: plan.launch @layer_norm_768 grid [%[[G]], 1, 1] block [256, 1, 1] shared_mem 1024 args(%[[X]], %[[LNW]], %[[LNB]], %[[Y]], %[[T]] : !plan.buffer, !plan.buffer, !plan.buffer, !plan.buffer, index)
    plan.launch @layer_norm_768 grid [%blocks, 1, 1] block [256, 1, 1] shared_mem 1024
        args(%x, %lnw, %lnb, %y, %tokens : !plan.buffer, !plan.buffer, !plan.buffer, !plan.buffer, index)
    // CHECK: plan.gemm f16 %[[Y]], %[[FC]] -> %[[H]] dims [%[[T]], 3072, 768] trans_b epilogue bias|gelu_tanh bias %[[FCB]]
    plan.gemm f16 %y, %fc -> %h dims [%tokens, 3072, 768] trans_b epilogue bias|gelu_tanh bias %fcb
    // CHECK: plan.gemm f16 %[[H]], %[[PROJ]] -> %[[Y]] dims [%[[T]], 768, 3072] trans_b epilogue residual residual %[[X]]
    plan.gemm f16 %h, %proj -> %y dims [%tokens, 768, 3072] trans_b epilogue residual residual %x
    // CHECK: plan.gemm f32 %[[X]], %[[Y]] -> %[[H]] dims [16, 16, 16] trans_a alpha 5.000000e-01 beta 1.000000e+00{{$}}
    plan.gemm f32 %x, %y -> %h dims [16, 16, 16] trans_a alpha 0.5 beta 1.0
    // CHECK: plan.all_reduce f16 %[[Y]] count %[[T]]
    plan.all_reduce f16 %y count %tokens
    // CHECK: plan.all_reduce bf16 %[[Y]] count 768
    plan.all_reduce bf16 %y count 768
    // CHECK: plan.all_gather f16 %[[Y]] -> %[[H]] count 768 ranks 4
    plan.all_gather f16 %y -> %h count 768 ranks 4
    // CHECK: plan.return
    plan.return
  }

  // CHECK: plan.program @prefill {
  plan.program @prefill {
    // CHECK-NEXT: plan.return
    plan.return
  }
}
