// dsc-fuse-residual-norm: a norm of a residual add's result becomes the norm's residual
// form; its second result (the sum) replaces every other use of the add.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-residual-norm | FileCheck %s

// A pre-norm block after a tensor-parallel projection (the add cannot go into the linear's
// epilogue: it comes after the all-reduce): residual add + layer norm, the sum also feeding
// the next residual add.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x5x8xf32>, %[[P:[^:]*]]: tensor<2x5x8xf32>)
// CHECK: %[[N:.*]]:2 = tfm.layer_norm %[[X]], %{{.*}}, %{{.*}} residual %[[P]] eps 9.99999974E-6 : tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32> residual tensor<2x5x8xf32> -> tensor<2x5x8xf32>
// CHECK-NEXT: %[[Y:.*]] = tfm.residual_add %[[N]]#1, %[[N]]#0
// CHECK-NEXT: return %[[Y]], %[[N]]#1
// CHECK-NOT: tfm.layer_norm
func.func @layer_norm(%x: tensor<2x5x8xf32>, %p: tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>) {
  %s = tfm.weight "ln.weight" : tensor<8xf32> -> tensor<8xf32>
  %b = tfm.weight "ln.bias" : tensor<8xf32> -> tensor<8xf32>
  %h = tfm.residual_add %x, %p : tensor<2x5x8xf32>
  %n = tfm.layer_norm %h, %s, %b eps 1.0e-5 : tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>
  %y = tfm.residual_add %h, %n : tensor<2x5x8xf32>
  return %y, %h : tensor<2x5x8xf32>, tensor<2x5x8xf32>
}

// -----

// RMS norm, and a layer norm without bias.
// CHECK-LABEL: func.func @rms_norm
// CHECK: %[[N:.*]]:2 = tfm.rms_norm %arg0, %{{.*}} residual %arg1 eps 9.99999997E-7 : tensor<3x8xf16>, tensor<8xf16> residual tensor<3x8xf16> -> tensor<3x8xf16>
// CHECK-NEXT: %[[M:.*]]:2 = tfm.layer_norm %[[N]]#0, %{{.*}} residual %arg1 eps
// CHECK-NEXT: return %[[M]]#0, %[[N]]#1
func.func @rms_norm(%x: tensor<3x8xf16>, %r: tensor<3x8xf16>) -> (tensor<3x8xf16>, tensor<3x8xf16>) {
  %s = tfm.weight "norm.weight" : tensor<8xf16> -> tensor<8xf16>
  %h = tfm.residual_add %x, %r : tensor<3x8xf16>
  %n = tfm.rms_norm %h, %s eps 1.0e-6 : tensor<3x8xf16>, tensor<8xf16>
  %g = tfm.residual_add %n, %r : tensor<3x8xf16>
  %m = tfm.layer_norm %g, %s eps 1.0e-5 : tensor<3x8xf16>, tensor<8xf16>
  return %m, %h : tensor<3x8xf16>, tensor<3x8xf16>
}

// -----

// A user of the sum before the norm: the fused norm goes where the add was, its scale being
// defined before the add.
// CHECK-LABEL: func.func @user_before_norm
// CHECK: %[[N:.*]]:2 = tfm.rms_norm %arg0, %{{.*}} residual %arg1
// CHECK-NEXT: %[[E:.*]] = onnx.Neg %[[N]]#1
// CHECK-NEXT: return %[[N]]#0, %[[E]]
func.func @user_before_norm(%x: tensor<3x8xf32>, %r: tensor<3x8xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>) {
  %s = tfm.weight "norm.weight" : tensor<8xf32> -> tensor<8xf32>
  %h = tfm.residual_add %x, %r : tensor<3x8xf32>
  %e = onnx.Neg %h : (tensor<3x8xf32>) -> tensor<3x8xf32>
  %n = tfm.rms_norm %h, %s eps 1.0e-6 : tensor<3x8xf32>, tensor<8xf32>
  return %n, %e : tensor<3x8xf32>, tensor<3x8xf32>
}
