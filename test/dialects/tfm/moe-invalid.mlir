// RUN: dsc-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// The verifier's errors of tfm.moe's clamped SwiGLU (GPT-OSS's experts) and of its
// once-added down bias under tensor parallelism; the first case is valid and round-trips.

// CHECK-LABEL: func.func @clamped_swiglu
// CHECK: tfm.moe {{.*}} bias({{.*}}) top_k 1 scoring softmax normalize activation silu swiglu alpha 1.702000e+00 limit 7.000000e+00 {down_bias_rank = 0 : i64}
func.func @clamped_swiglu(%x: tensor<3x8xf32>, %l: tensor<3x2xf32>, %gu: tensor<16x8xf32>,
                          %dn: tensor<16x4xf32>, %gb: tensor<16xf32>, %db: tensor<16xf32>) {
  %0 = tfm.moe %x, %l, %gu, %dn bias(%gb, %db) top_k 1 scoring softmax normalize activation silu
         swiglu alpha 1.702000e+00 limit 7.000000e+00 {down_bias_rank = 0 : i64}
         : (tensor<3x8xf32>, tensor<3x2xf32>, tensor<16x8xf32>, tensor<16x4xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<3x8xf32>
  return
}

// -----

func.func @swiglu_alpha_alone(%x: tensor<3x8xf32>, %l: tensor<3x2xf32>, %gu: tensor<16x8xf32>,
                              %dn: tensor<16x4xf32>) {
  // expected-error @+1 {{swiglu_alpha and swiglu_limit come together}}
  %0 = tfm.moe %x, %l, %gu, %dn top_k 1 scoring softmax activation silu {swiglu_alpha = 1.702 : f32}
         : (tensor<3x8xf32>, tensor<3x2xf32>, tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<3x8xf32>
  return
}

// -----

func.func @swiglu_not_silu(%x: tensor<3x8xf32>, %l: tensor<3x2xf32>, %gu: tensor<16x8xf32>,
                           %dn: tensor<16x4xf32>) {
  // expected-error @+1 {{the clamped SwiGLU's activation must be silu}}
  %0 = tfm.moe %x, %l, %gu, %dn top_k 1 scoring softmax activation gelu_quick
         swiglu alpha 1.702000e+00 limit 7.000000e+00
         : (tensor<3x8xf32>, tensor<3x2xf32>, tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<3x8xf32>
  return
}

// -----

func.func @swiglu_negative_limit(%x: tensor<3x8xf32>, %l: tensor<3x2xf32>, %gu: tensor<16x8xf32>,
                                 %dn: tensor<16x4xf32>) {
  // expected-error @+1 {{needs a finite alpha and a positive, finite limit, not 1.702000e+00 and -7.000000e+00}}
  %0 = tfm.moe %x, %l, %gu, %dn top_k 1 scoring softmax activation silu
         swiglu alpha 1.702000e+00 limit -7.000000e+00
         : (tensor<3x8xf32>, tensor<3x2xf32>, tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<3x8xf32>
  return
}

// -----

func.func @down_bias_rank_without_bias(%x: tensor<3x8xf32>, %l: tensor<3x2xf32>,
                                       %gu: tensor<16x8xf32>, %dn: tensor<16x4xf32>) {
  // expected-error @+1 {{down_bias_rank without a down bias}}
  %0 = tfm.moe %x, %l, %gu, %dn top_k 1 scoring softmax activation silu {down_bias_rank = 0 : i64}
         : (tensor<3x8xf32>, tensor<3x2xf32>, tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<3x8xf32>
  return
}
