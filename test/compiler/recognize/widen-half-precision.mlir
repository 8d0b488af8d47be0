// dsc-widen-half-precision: an f16/bf16 graph computes in f32 inside its interface. Inputs
// of a half type are cast to f32 where they enter (their shape reads stay on them), every
// half result, constant and Cast target becomes f32 (a Cast that then converts nothing
// goes), and outputs are cast back to the type the interface declares. An f32 graph is
// left as it is.
// RUN: dsc-opt %s --split-input-file --dsc-widen-half-precision | FileCheck %s

// CHECK-LABEL: func.func @half(%arg0: tensor<2x4xf16>, %arg1: tensor<4xbf16>) -> (tensor<2x4xf16>, tensor<2xi64>)
// CHECK-DAG: %[[X:.*]] = onnx.Cast %arg0 {to = f32} : (tensor<2x4xf16>) -> tensor<2x4xf32>
// CHECK-DAG: %[[W:.*]] = onnx.Cast %arg1 {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
// CHECK-DAG: %[[C:.*]] = onnx.Constant {value = dense<1.500000e+00> : tensor<f32>} : tensor<f32>
// CHECK-DAG: onnx.Shape %arg0 {{.*}}: (tensor<2x4xf16>) -> tensor<2xi64>
// The graph's own casts (f16 -> bf16 -> f16) are f32 -> f32 now, and go.
// CHECK: %[[M:.*]] = onnx.Mul %[[X]], %[[C]] : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[S:.*]] = onnx.Add %[[M]], %[[W]] : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[OUT:.*]] = onnx.Cast %[[S]] {to = f16} : (tensor<2x4xf32>) -> tensor<2x4xf16>
// CHECK: return %[[OUT]], %{{.*}} : tensor<2x4xf16>, tensor<2xi64>
func.func @half(%x: tensor<2x4xf16>, %w: tensor<4xbf16>) -> (tensor<2x4xf16>, tensor<2xi64>) {
  %c = onnx.Constant {value = dense<1.5> : tensor<f16>} : tensor<f16>
  %shape = onnx.Shape %x : (tensor<2x4xf16>) -> tensor<2xi64>
  %m = onnx.Mul %x, %c : (tensor<2x4xf16>, tensor<f16>) -> tensor<2x4xf16>
  %y = onnx.Cast %m {to = bf16} : (tensor<2x4xf16>) -> tensor<2x4xbf16>
  %s = onnx.Add %y, %w : (tensor<2x4xbf16>, tensor<4xbf16>) -> tensor<2x4xbf16>
  %out = onnx.Cast %s {to = f16} : (tensor<2x4xbf16>) -> tensor<2x4xf16>
  return %out, %shape : tensor<2x4xf16>, tensor<2xi64>
}

// -----

// CHECK-LABEL: func.func @single
// CHECK-NOT: onnx.Cast
// CHECK: onnx.Mul %arg0, %arg0 : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
func.func @single(%x: tensor<2xf32>) -> tensor<2xf32> {
  %m = onnx.Mul %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %m : tensor<2xf32>
}
