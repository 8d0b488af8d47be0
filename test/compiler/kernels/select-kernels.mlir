// dsc-select-kernels on hand-made plan programs: each step's kernels and their constants
// come from its op's rule, a step the rule turns down says why, and arch=none leaves a
// CPU-only plan. Memory planning first: the rules read the plan as the writer stores it.
// RUN: dsc-opt %s --dsc-plan-memory --dsc-select-kernels | FileCheck %s
// RUN: dsc-opt %s --dsc-plan-memory --dsc-select-kernels="weight-dtype=fp16" | FileCheck %s --check-prefix=F16
// RUN: dsc-opt %s --dsc-plan-memory --dsc-select-kernels --dsc-select-kernels="arch=none" | FileCheck %s --check-prefix=NONE
// RUN: not dsc-opt %s --dsc-plan-memory --dsc-select-kernels="arch=sm80" 2>&1 | FileCheck %s --check-prefix=BADARCH

// CHECK: module attributes {plan.kernel_archs = ["sm_80", "sm_90"]}
// NONE-NOT: kernel
// BADARCH: --arch takes a comma list of GPU architectures like sm_80,sm_90, or none; 'sm80' is not one

plan.program @forward {
  %x = plan.input 0 "hidden" {dims = ["batch", ""], max_shape = array<i64: 4, 96>} : tensor<?x96xf32>
  %xd = plan.input 1 "wide" {dims = ["batch", "width"], max_shape = array<i64: 4, 96>} : tensor<?x?xf32>
  %scale = plan.weight_tensor "norm.weight" : tensor<96xf32>
  %bias = plan.weight_tensor "norm.bias" : tensor<96xf32>
  // The norm's block is a multiple of 32 threads, each keeping at most eight values; the
  // scale is stored as the plan stores float weights (f32, or f16 with weight-dtype=fp16).
  // CHECK: plan.exec "tfm.rms_norm"(%{{.*}}, %{{.*}}) {{{.*}}kernels = [#plan.kernel<"rms_norm", HIDDEN = 96, SCALE_DT = 1, RESIDUAL = 0, BLOCK = 32>]
  // F16: plan.exec "tfm.rms_norm"(%{{.*}}, %{{.*}}) {{{.*}}kernels = [#plan.kernel<"rms_norm", HIDDEN = 96, SCALE_DT = 2, RESIDUAL = 0, BLOCK = 32>]
  %n = plan.exec "tfm.rms_norm"(%x, %scale) {attrs = {epsilon = 1.0e-6 : f32}, max_shapes = [array<i64: 4, 96>]} : (tensor<?x96xf32>, tensor<96xf32>) -> tensor<?x96xf32>
  // CHECK: plan.exec "tfm.layer_norm"(%{{.*}}, %{{.*}}, %{{.*}}) {{{.*}}kernels = [#plan.kernel<"layer_norm", HIDDEN = 96, SCALE_DT = 1, BIAS_DT = 1, RESIDUAL = 0, BLOCK = 32>]
  %l = plan.exec "tfm.layer_norm"(%n, %scale, %bias) {attrs = {epsilon = 1.0e-5 : f32}, max_shapes = [array<i64: 4, 96>]} : (tensor<?x96xf32>, tensor<96xf32>, tensor<96xf32>) -> tensor<?x96xf32>
  // A norm over a dimension the plan does not fix has no kernel: its rule says why.
  // CHECK: plan.exec "tfm.rms_norm"(%{{.*}}, %{{.*}}) {{{.*}}kernel_decline = "the hidden size is dynamic"
  // CHECK-NOT: kernels =
  // CHECK-SAME: -> tensor<?x?xf32>
  %d = plan.exec "tfm.rms_norm"(%xd, %scale) {attrs = {epsilon = 1.0e-6 : f32}, max_shapes = [array<i64: 4, 96>]} : (tensor<?x?xf32>, tensor<96xf32>) -> tensor<?x?xf32>
  // An op without a rule gets neither attribute.
  // CHECK: plan.exec "Shape"(%{{.*}}) {arena_offsets = array<i64: {{[0-9]+}}>, max_shapes = [array<i64: 2>]} : (tensor<?x?xf32>) -> tensor<2xi64>
  %s = plan.exec "Shape"(%d) {max_shapes = [array<i64: 2>]} : (tensor<?x?xf32>) -> tensor<2xi64>
  plan.return {names = ["normed", "shape"]} %l, %s : tensor<?x96xf32>, tensor<2xi64>
}
