// The dsc-fuse pipeline runs the linear epilogues first: a post-norm block's residual add of
// a linear's result (BERT) goes into the linear, and the norm then reads the linear; alone,
// dsc-fuse-residual-norm would take the add into the norm.
// RUN: dsc-opt %s --dsc-fuse | FileCheck %s --check-prefix=PIPELINE
// RUN: dsc-opt %s --dsc-fuse-residual-norm | FileCheck %s --check-prefix=NORM

// PIPELINE-LABEL: func.func @post_norm
// PIPELINE: %[[Y:.*]] = tfm.linear %arg0, %{{.*}} bias %{{.*}} residual %arg0 :
// PIPELINE-NEXT: %[[N:.*]] = tfm.layer_norm %[[Y]], %{{[^ ]*}}, %{{[^ ]*}} eps
// PIPELINE-NEXT: return %[[N]]
// NORM-LABEL: func.func @post_norm
// NORM: %[[Y:.*]] = tfm.linear %arg0, %{{.*}} bias %{{[^ ]*}} :
// NORM-NEXT: %[[N:.*]]:2 = tfm.layer_norm %[[Y]], %{{.*}}, %{{.*}} residual %arg0 eps
// NORM-NEXT: return %[[N]]#0
func.func @post_norm(%x: tensor<2x5x8xf32>) -> tensor<2x5x8xf32> {
  %w = tfm.weight "dense" : tensor<8x8xf32> -> tensor<8x8xf32>
  %b = tfm.weight "dense.bias" : tensor<8xf32> -> tensor<8xf32>
  %s = tfm.weight "ln.weight" : tensor<8xf32> -> tensor<8xf32>
  %c = tfm.weight "ln.bias" : tensor<8xf32> -> tensor<8xf32>
  %h = tfm.linear %x, %w bias %b : (tensor<2x5x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %y = tfm.residual_add %h, %x : tensor<2x5x8xf32>
  %n = tfm.layer_norm %y, %s, %c eps 1.0e-12 : tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>
  return %n : tensor<2x5x8xf32>
}
