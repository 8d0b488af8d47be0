// The fp16 exports' norms: the input is cast to fp32, normalised, cast back, and scaled
// by an fp16 weight (RMS norm, Llama) or cast around the centred value and the quotient
// (layer norm, opsets < 17). Both become one norm on the fp16 input, whose type they keep.
// RUN: dsc-opt %s --dsc-recognize-layers | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK-DAG: %[[W:.*]] = tfm.weight "w" : tensor<4xf16> -> tensor<4xf16>
// CHECK-DAG: %[[B:.*]] = tfm.weight "b" : tensor<4xf16> -> tensor<4xf16>
// CHECK: %[[RMS:.*]] = tfm.rms_norm %arg0, %[[W]] eps 9.99999997E-7 : tensor<2x3x4xf16>, tensor<4xf16>
// CHECK: %[[LN:.*]] = tfm.layer_norm %arg1, %[[W]], %[[B]] eps 9.99999974E-6 : tensor<2x3x4xf16>, tensor<4xf16>, tensor<4xf16>
// CHECK: return %[[RMS]], %[[LN]]
func.func @main(%x: tensor<2x3x4xf16>, %y: tensor<2x3x4xf16>) -> (tensor<2x3x4xf16>, tensor<2x3x4xf16>) {
  %w = onnx.Weight "w" : tensor<4xf16>
  %b = onnx.Weight "b" : tensor<4xf16>
  %two = onnx.Constant {value = dense<2.0> : tensor<f32>} : tensor<f32>
  %one = onnx.Constant {value = dense<1.0> : tensor<f32>} : tensor<f32>
  %eps6 = onnx.Constant {value = dense<1.0e-6> : tensor<f32>} : tensor<f32>
  %eps5 = onnx.Constant {value = dense<1.0e-5> : tensor<f32>} : tensor<f32>
  %last = onnx.Constant {value = dense<-1> : tensor<1xi64>} : tensor<1xi64>
  %xc = onnx.Cast %x {to = f32} : (tensor<2x3x4xf16>) -> tensor<*xf32>
  %p = onnx.Pow %xc, %two : (tensor<*xf32>, tensor<f32>) -> tensor<*xf32>
  %v = onnx.ReduceMean %p, %last : (tensor<*xf32>, tensor<1xi64>) -> tensor<*xf32>
  %e = onnx.Add %v, %eps6 : (tensor<*xf32>, tensor<f32>) -> tensor<*xf32>
  %s = onnx.Sqrt %e : (tensor<*xf32>) -> tensor<*xf32>
  %r = onnx.Div %one, %s : (tensor<f32>, tensor<*xf32>) -> tensor<*xf32>
  %n = onnx.Mul %xc, %r : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  %h = onnx.Cast %n {to = f16} : (tensor<*xf32>) -> tensor<*xf16>
  %rms = onnx.Mul %w, %h : (tensor<4xf16>, tensor<*xf16>) -> tensor<2x3x4xf16>

  %m = onnx.ReduceMean %y, %last : (tensor<2x3x4xf16>, tensor<1xi64>) -> tensor<*xf16>
  %d = onnx.Sub %y, %m : (tensor<2x3x4xf16>, tensor<*xf16>) -> tensor<*xf16>
  %dc = onnx.Cast %d {to = f32} : (tensor<*xf16>) -> tensor<*xf32>
  %p2 = onnx.Pow %dc, %two : (tensor<*xf32>, tensor<f32>) -> tensor<*xf32>
  %v2 = onnx.ReduceMean %p2, %last : (tensor<*xf32>, tensor<1xi64>) -> tensor<*xf32>
  %e2 = onnx.Add %v2, %eps5 : (tensor<*xf32>, tensor<f32>) -> tensor<*xf32>
  %s2 = onnx.Sqrt %e2 : (tensor<*xf32>) -> tensor<*xf32>
  %q = onnx.Div %dc, %s2 : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  %qh = onnx.Cast %q {to = f16} : (tensor<*xf32>) -> tensor<*xf16>
  %sc = onnx.Mul %qh, %w : (tensor<*xf16>, tensor<4xf16>) -> tensor<*xf16>
  %ln = onnx.Add %sc, %b : (tensor<*xf16>, tensor<4xf16>) -> tensor<2x3x4xf16>
  return %rms, %ln : tensor<2x3x4xf16>, tensor<2x3x4xf16>
}
