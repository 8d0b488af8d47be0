// The onnx dialect's custom forms round-trip through the printer and parser.
// RUN: dsc-opt %s | dsc-opt | FileCheck %s

// CHECK-LABEL: func.func @values
func.func @values() -> (tensor<4x8xf16>, tensor<2xi64>, none) {
  // CHECK: onnx.Weight "h.0.attn.c_attn.weight" : tensor<4x8xf16>
  %w = onnx.Weight "h.0.attn.c_attn.weight" : tensor<4x8xf16>
  // CHECK: onnx.Constant {value = dense<[1, -1]> : tensor<2xi64>} : tensor<2xi64>
  %c = onnx.Constant {value = dense<[1, -1]> : tensor<2xi64>} : tensor<2xi64>
  // CHECK: onnx.NoValue
  %n = onnx.NoValue
  return %w, %c, %n : tensor<4x8xf16>, tensor<2xi64>, none
}

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<?x3xf32>, %b: tensor<3xf32>, %m: tensor<?x3xi1>) -> tensor<?x3xf32> {
  // CHECK: onnx.Add %{{.*}}, %{{.*}} : (tensor<?x3xf32>, tensor<3xf32>) -> tensor<?x3xf32>
  %0 = onnx.Add %a, %b : (tensor<?x3xf32>, tensor<3xf32>) -> tensor<?x3xf32>
  // CHECK: onnx.Where
  %1 = onnx.Where %m, %0, %a : (tensor<?x3xi1>, tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>
  // CHECK: onnx.Gelu %{{.*}} {approximate = "tanh"}
  %2 = onnx.Gelu %1 {approximate = "tanh"} : (tensor<?x3xf32>) -> tensor<?x3xf32>
  // CHECK: onnx.Max %{{.*}}, %{{.*}}, %{{.*}} :
  %3 = onnx.Max %2, %b, %a : (tensor<?x3xf32>, tensor<3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>
  return %3 : tensor<?x3xf32>
}

// CHECK-LABEL: func.func @unranked_and_optional
func.func @unranked_and_optional(%x: tensor<*xf32>, %s: tensor<4xf32>) -> tensor<*xf32> {
  %none = onnx.NoValue
  // CHECK: onnx.LayerNormalization %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 5.000000e-01 : f32} : (tensor<*xf32>, tensor<4xf32>, none) -> (tensor<*xf32>, tensor<*xf32>, tensor<*xf32>)
  %y, %mean, %inv = onnx.LayerNormalization %x, %s, %none {epsilon = 0.5 : f32} : (tensor<*xf32>, tensor<4xf32>, none) -> (tensor<*xf32>, tensor<*xf32>, tensor<*xf32>)
  return %y : tensor<*xf32>
}

// CHECK-LABEL: func.func @control_flow
func.func @control_flow(%c: tensor<1xi1>, %x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // CHECK: onnx.If %{{.*}} : tensor<1xi1> -> (tensor<2x3xf32>) then {
  // CHECK:   onnx.Yield %{{.*}} : tensor<2x3xf32>
  // CHECK: } else {
  %r = onnx.If %c : tensor<1xi1> -> (tensor<2x3xf32>) then {
    onnx.Yield %x : tensor<2x3xf32>
  } else {
    %n = onnx.Neg %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
    onnx.Yield %n : tensor<2x3xf32>
  }
  return %r : tensor<2x3xf32>
}
