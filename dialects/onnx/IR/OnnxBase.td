#ifndef DSC_DIALECTS_ONNX_BASE_TD
#define DSC_DIALECTS_ONNX_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Onnx_Dialect : Dialect {
  let name = "onnx";
  let cppNamespace = "::dsc::onnx";
  let summary = "The typed subset of ONNX that transformer exports use";
  let description = [{
    One op per ONNX operator, in one normalised form whatever the model's opset (13 to 20):
    axes, split sizes and similar lists are operands, never attributes; absent optional
    inputs are `onnx.NoValue`. Initializers are `onnx.Weight` handles that name the tensor;
    its bytes stay in the model file (or its external data) and are never copied into the IR.
    Ops carry the ONNX node name as their location.
  }];
}

class Onnx_Op<string mnemonic, list<Trait> traits = []>
    : Op<Onnx_Dialect, mnemonic, traits>;

// An optional input: a tensor, or the `none` produced by onnx.NoValue.
def Onnx_OptTensor : AnyTypeOf<[AnyTensor, NoneType], "tensor or none">;
def Onnx_IndexTensor : TensorOf<[I32, I64]>;
def Onnx_I64Tensor : TensorOf<[I64]>;
def Onnx_OptI64Tensor : AnyTypeOf<[TensorOf<[I64]>, NoneType], "i64 tensor or none">;
def Onnx_BoolTensor : TensorOf<[I1]>;
def Onnx_FloatTensor : TensorOf<[AnyFloat]>;

#endif
