// #plan.kernel round-trips with its constants in order (the order names the kernel), and
// its verifier refuses what no template could be specialised with.
// RUN: dsc-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// CHECK: plan.sampling_kernel = #plan.kernel<"sample_topk", BLOCK = 1024>
// CHECK: kernels = [#plan.kernel<"gemv", K = 64, WT = 1, ACT = -1>, #plan.kernel<"linear_epilogue">]
module attributes {plan.kernel_archs = ["sm_80"], plan.sampling_kernel = #plan.kernel<"sample_topk", BLOCK = 1024>} {
  plan.program @forward {
    %x = plan.input 0 "x" : tensor<2x64xf32>
    %y = plan.exec "Relu"(%x) {kernels = [#plan.kernel<"gemv", K = 64, WT = 1, ACT = -1>, #plan.kernel<"linear_epilogue">]} : (tensor<2x64xf32>) -> tensor<2x64xf32>
    plan.return %y : tensor<2x64xf32>
  }
}

// -----

plan.program @forward {
  %x = plan.input 0 "x" : tensor<2x64xf32>
  // expected-error @+1 {{kernel constant K is given twice}}
  %y = plan.exec "Relu"(%x) {kernels = [#plan.kernel<"gemv", K = 64, K = 32>]} : (tensor<2x64xf32>) -> tensor<2x64xf32>
  plan.return %y : tensor<2x64xf32>
}

// -----

plan.program @forward {
  %x = plan.input 0 "x" : tensor<2x64xf32>
  // expected-error @+1 {{a kernel needs a template kind}}
  %y = plan.exec "Relu"(%x) {kernels = [#plan.kernel<"">]} : (tensor<2x64xf32>) -> tensor<2x64xf32>
  plan.return %y : tensor<2x64xf32>
}

// -----

plan.program @forward {
  %x = plan.input 0 "x" : tensor<2x64xf32>
  // expected-error @+1 {{has kernels and a kernel decline; a step has one or the other}}
  %y = plan.exec "Relu"(%x) {kernels = [#plan.kernel<"generic_unary", OP = 4>], kernel_decline = "no"} : (tensor<2x64xf32>) -> tensor<2x64xf32>
  plan.return %y : tensor<2x64xf32>
}

// -----

// expected-error @+1 {{plan.sampling_kernel is a module's #plan.kernel}}
module attributes {plan.sampling_kernel = "sample_topk"} {
}
