// dsc-fuse-embedding-scale: an embedding's rows times (or divided by) a constant are
// gathered already scaled (`scale`; Gemma's sqrt(hidden), Granite's embedding_multiplier),
// the factors composing; under tensor parallelism through the all-reduce of a
// vocabulary-parallel embedding. Declined (remarks): rows with other readers, a factor that
// is not one constant.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-embedding-scale=remarks --verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @gemma
// CHECK: %[[E:.*]] = tfm.embedding %arg0, %{{.*}} {scale = 2.000000e+00 : f32}
// CHECK-NOT: onnx.Mul
// CHECK-NOT: onnx.Div
// CHECK: return %[[E]]
func.func @gemma(%ids: tensor<1x?xi64>, %table: tensor<16x8xf32>) -> tensor<1x?x8xf32> {
  %c = onnx.Constant {value = dense<8.0> : tensor<f32>} : tensor<f32>
  %d = onnx.Constant {value = dense<4.0> : tensor<1xf32>} : tensor<1xf32>
  %e = tfm.embedding %ids, %table : (tensor<1x?xi64>, tensor<16x8xf32>) -> tensor<1x?x8xf32>
  %m = onnx.Mul %c, %e : (tensor<f32>, tensor<1x?x8xf32>) -> tensor<1x?x8xf32>
  %q = onnx.Div %m, %d : (tensor<1x?x8xf32>, tensor<1xf32>) -> tensor<1x?x8xf32>
  return %q : tensor<1x?x8xf32>
}

// -----

// CHECK-LABEL: func.func @vocabulary_parallel
// CHECK: %[[E:.*]] = tfm.embedding %arg0, %{{.*}} {scale = 3.000000e+00 : f32, vocab_size = 32 : i64}
// CHECK: %[[R:.*]] = tfm.all_reduce %[[E]] ranks 2
// CHECK-NOT: onnx.Mul
// CHECK: return %[[R]]
func.func @vocabulary_parallel(%ids: tensor<1x?xi64>, %table: tensor<16x8xf32>) -> tensor<1x?x8xf32> {
  %c = onnx.Constant {value = dense<3.0> : tensor<f32>} : tensor<f32>
  %e = tfm.embedding %ids, %table {vocab_offset = 0 : i64, vocab_size = 32 : i64} : (tensor<1x?xi64>, tensor<16x8xf32>) -> tensor<1x?x8xf32>
  %r = tfm.all_reduce %e ranks 2 : tensor<1x?x8xf32>
  %m = onnx.Mul %r, %c : (tensor<1x?x8xf32>, tensor<f32>) -> tensor<1x?x8xf32>
  return %m : tensor<1x?x8xf32>
}

// -----

// The unscaled rows are returned too: the Mul stays.
// CHECK-LABEL: func.func @rows_read_twice
// CHECK: tfm.embedding %arg0, %arg1 :
// CHECK: onnx.Mul
func.func @rows_read_twice(%ids: tensor<1x?xi64>, %table: tensor<16x8xf32>) -> (tensor<1x?x8xf32>, tensor<1x?x8xf32>) {
  %c = onnx.Constant {value = dense<3.0> : tensor<f32>} : tensor<f32>
  %e = tfm.embedding %ids, %table : (tensor<1x?xi64>, tensor<16x8xf32>) -> tensor<1x?x8xf32>
  // expected-remark @below {{embedding scale not fused: the factor is not one finite nonzero constant, or the rows have other readers}}
  %m = onnx.Mul %e, %c : (tensor<1x?x8xf32>, tensor<f32>) -> tensor<1x?x8xf32>
  return %m, %e : tensor<1x?x8xf32>, tensor<1x?x8xf32>
}

// -----

// A factor per feature is not one constant.
// CHECK-LABEL: func.func @per_feature
// CHECK: onnx.Mul
func.func @per_feature(%ids: tensor<1x?xi64>, %table: tensor<16x8xf32>, %w: tensor<8xf32>) -> tensor<1x?x8xf32> {
  %e = tfm.embedding %ids, %table : (tensor<1x?xi64>, tensor<16x8xf32>) -> tensor<1x?x8xf32>
  // expected-remark @below {{embedding scale not fused: the factor is not one finite nonzero constant, or the rows have other readers}}
  %m = onnx.Mul %e, %w : (tensor<1x?x8xf32>, tensor<8xf32>) -> tensor<1x?x8xf32>
  return %m : tensor<1x?x8xf32>
}
