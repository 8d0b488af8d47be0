#ifndef DSC_DIALECTS_ONNX_OPS_TD
#define DSC_DIALECTS_ONNX_OPS_TD

include "dialects/onnx/IR/OnnxBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/IR/OpAsmInterface.td"

defvar Onnx_GenericFormat = "operands attr-dict `:` functional-type(operands, results)";

//===----------------------------------------------------------------------===//
// Values that come from the model rather than from a node.
//===----------------------------------------------------------------------===//

def Onnx_WeightOp : Onnx_Op<"Weight", [Pure]> {
  let summary = "a handle to an initializer whose bytes stay in the model file";
  let description = [{
    Names an initializer of the model. The compiler reads its bytes through the weight store
    of the import (mmapped external data or the model file), never through the IR.
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs AnyStaticShapeTensor:$output);
  let assemblyFormat = "$name attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Onnx_ConstantOp : Onnx_Op<"Constant", [Pure, ConstantLike]> {
  let summary = "a small constant (shape arithmetic, scalars), stored inline";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs AnyStaticShapeTensor:$output);
  let assemblyFormat = "attr-dict `:` type($output)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Onnx_NoValueOp : Onnx_Op<"NoValue", [Pure]> {
  let summary = "stands for an absent optional input";
  let results = (outs NoneType:$none);
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Elementwise ops.
//===----------------------------------------------------------------------===//

// Multidirectional (numpy) broadcasting; static dimensions are checked by the verifier.
class Onnx_BroadcastOp<string mnemonic, list<Trait> traits = []>
    : Onnx_Op<mnemonic, !listconcat([Pure], traits)> {
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() { return verifyBroadcast(getOperation()); }
  }];
}

class Onnx_ArithOp<string mnemonic, list<Trait> traits = []>
    : Onnx_BroadcastOp<mnemonic, !listconcat([AllElementTypesMatch<["A", "B", "C"]>], traits)> {
  let arguments = (ins AnyTensor:$A, AnyTensor:$B);
  let results = (outs AnyTensor:$C);
}

def Onnx_AddOp : Onnx_ArithOp<"Add", [Commutative]> { let summary = "A + B"; }
def Onnx_SubOp : Onnx_ArithOp<"Sub"> { let summary = "A - B"; }
def Onnx_MulOp : Onnx_ArithOp<"Mul", [Commutative]> { let summary = "A * B"; }
def Onnx_DivOp : Onnx_ArithOp<"Div"> { let summary = "A / B"; }

def Onnx_ModOp : Onnx_ArithOp<"Mod"> {
  let summary = "remainder; fmod = 1 takes the sign of the dividend";
  let arguments = (ins AnyTensor:$A, AnyTensor:$B, DefaultValuedAttr<I64Attr, "0">:$fmod);
}

def Onnx_PowOp : Onnx_BroadcastOp<"Pow", [AllElementTypesMatch<["X", "Z"]>]> {
  let summary = "X ^ Y (the exponent may have another element type)";
  let arguments = (ins AnyTensor:$X, AnyTensor:$Y);
  let results = (outs AnyTensor:$Z);
}

class Onnx_VariadicArithOp<string mnemonic>
    : Onnx_BroadcastOp<mnemonic, [SameOperandsAndResultElementType]> {
  let arguments = (ins Variadic<AnyTensor>:$data_0);
  let results = (outs AnyTensor:$output);
}
def Onnx_MaxOp : Onnx_VariadicArithOp<"Max"> { let summary = "elementwise maximum"; }
def Onnx_MinOp : Onnx_VariadicArithOp<"Min"> { let summary = "elementwise minimum"; }

class Onnx_CompareOp<string mnemonic>
    : Onnx_BroadcastOp<mnemonic, [AllElementTypesMatch<["A", "B"]>]> {
  let arguments = (ins AnyTensor:$A, AnyTensor:$B);
  let results = (outs Onnx_BoolTensor:$C);
}
def Onnx_EqualOp : Onnx_CompareOp<"Equal"> { let summary = "A == B"; }
def Onnx_LessOp : Onnx_CompareOp<"Less"> { let summary = "A < B"; }
def Onnx_GreaterOp : Onnx_CompareOp<"Greater"> { let summary = "A > B"; }
def Onnx_LessOrEqualOp : Onnx_CompareOp<"LessOrEqual"> { let summary = "A <= B"; }
def Onnx_GreaterOrEqualOp : Onnx_CompareOp<"GreaterOrEqual"> { let summary = "A >= B"; }

class Onnx_LogicalOp<string mnemonic> : Onnx_BroadcastOp<mnemonic> {
  let arguments = (ins Onnx_BoolTensor:$A, Onnx_BoolTensor:$B);
  let results = (outs Onnx_BoolTensor:$C);
}
def Onnx_AndOp : Onnx_LogicalOp<"And"> { let summary = "A and B"; }
def Onnx_OrOp : Onnx_LogicalOp<"Or"> { let summary = "A or B"; }

def Onnx_WhereOp : Onnx_BroadcastOp<"Where", [AllElementTypesMatch<["X", "Y", "output"]>]> {
  let summary = "condition ? X : Y";
  let arguments = (ins Onnx_BoolTensor:$condition, AnyTensor:$X, AnyTensor:$Y);
  let results = (outs AnyTensor:$output);
}

class Onnx_UnaryOp<string mnemonic, Type type = AnyTensor>
    : Onnx_Op<mnemonic, [Pure, SameOperandsAndResultElementType, SameOperandsAndResultShape]> {
  let arguments = (ins type:$X);
  let results = (outs type:$Y);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_SqrtOp : Onnx_UnaryOp<"Sqrt", Onnx_FloatTensor> { let summary = "square root"; }
def Onnx_ReciprocalOp : Onnx_UnaryOp<"Reciprocal", Onnx_FloatTensor> { let summary = "1 / X"; }
def Onnx_NegOp : Onnx_UnaryOp<"Neg"> { let summary = "-X"; }
def Onnx_AbsOp : Onnx_UnaryOp<"Abs"> { let summary = "|X|"; }
def Onnx_ExpOp : Onnx_UnaryOp<"Exp", Onnx_FloatTensor> { let summary = "e ^ X"; }
def Onnx_LogOp : Onnx_UnaryOp<"Log", Onnx_FloatTensor> { let summary = "natural logarithm"; }
def Onnx_ErfOp : Onnx_UnaryOp<"Erf", Onnx_FloatTensor> { let summary = "error function"; }
def Onnx_TanhOp : Onnx_UnaryOp<"Tanh", Onnx_FloatTensor> { let summary = "hyperbolic tangent"; }
def Onnx_SigmoidOp : Onnx_UnaryOp<"Sigmoid", Onnx_FloatTensor> { let summary = "1 / (1 + e^-X)"; }
def Onnx_ReluOp : Onnx_UnaryOp<"Relu"> { let summary = "max(X, 0)"; }
def Onnx_CosOp : Onnx_UnaryOp<"Cos", Onnx_FloatTensor> { let summary = "cosine"; }
def Onnx_SinOp : Onnx_UnaryOp<"Sin", Onnx_FloatTensor> { let summary = "sine"; }
def Onnx_FloorOp : Onnx_UnaryOp<"Floor", Onnx_FloatTensor> { let summary = "round down"; }
def Onnx_NotOp : Onnx_UnaryOp<"Not", Onnx_BoolTensor> { let summary = "logical not"; }
def Onnx_IdentityOp : Onnx_UnaryOp<"Identity"> { let summary = "X"; }

def Onnx_GeluOp : Onnx_UnaryOp<"Gelu", Onnx_FloatTensor> {
  let summary = "GELU, exact (erf) or with the tanh approximation";
  let arguments = (ins Onnx_FloatTensor:$X, DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let hasVerifier = 1;
}

def Onnx_IsNaNOp : Onnx_Op<"IsNaN", [Pure, SameOperandsAndResultShape]> {
  let summary = "X != X";
  let arguments = (ins Onnx_FloatTensor:$X);
  let results = (outs Onnx_BoolTensor:$Y);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_ClipOp : Onnx_Op<"Clip", [Pure]> {
  let summary = "min(max(input, min), max); absent bounds are open";
  let arguments = (ins AnyTensor:$input, Onnx_OptTensor:$min, Onnx_OptTensor:$max);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_CastOp : Onnx_Op<"Cast", [Pure, SameOperandsAndResultShape]> {
  let summary = "element type conversion";
  let arguments = (ins AnyTensor:$input, TypeAttr:$to, OptionalAttr<I64Attr>:$saturate);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_CastLikeOp : Onnx_Op<"CastLike", [Pure, AllElementTypesMatch<["target_type", "output"]>]> {
  let summary = "cast to the element type of target_type";
  let arguments = (ins AnyTensor:$input, AnyTensor:$target_type, OptionalAttr<I64Attr>:$saturate);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
}

//===----------------------------------------------------------------------===//
// Linear algebra, normalisation, reductions.
//===----------------------------------------------------------------------===//

def Onnx_MatMulOp : Onnx_Op<"MatMul", [Pure, AllElementTypesMatch<["A", "B", "Y"]>]> {
  let summary = "numpy matmul (batched, broadcasting batch dimensions)";
  let arguments = (ins AnyTensor:$A, AnyTensor:$B);
  let results = (outs AnyTensor:$Y);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_GemmOp : Onnx_Op<"Gemm", [Pure, AllElementTypesMatch<["A", "B", "Y"]>]> {
  let summary = "alpha * op(A) * op(B) + beta * C on 2-D tensors";
  let arguments = (ins AnyTensor:$A, AnyTensor:$B, Onnx_OptTensor:$C,
                   DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.0">:$beta,
                   DefaultValuedAttr<I64Attr, "0">:$transA,
                   DefaultValuedAttr<I64Attr, "0">:$transB);
  let results = (outs AnyTensor:$Y);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

class Onnx_SoftmaxLikeOp<string mnemonic>
    : Onnx_Op<mnemonic, [Pure, SameOperandsAndResultElementType, SameOperandsAndResultShape]> {
  let arguments = (ins Onnx_FloatTensor:$input, DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs Onnx_FloatTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return verifyAxis(getOperation(), getInput().getType(), getAxis(), "axis");
    }
  }];
}
def Onnx_SoftmaxOp : Onnx_SoftmaxLikeOp<"Softmax"> { let summary = "softmax along axis"; }
def Onnx_LogSoftmaxOp : Onnx_SoftmaxLikeOp<"LogSoftmax"> { let summary = "log of softmax along axis"; }

def Onnx_LayerNormalizationOp : Onnx_Op<"LayerNormalization", [Pure]> {
  let summary = "layer normalisation over the dimensions from axis on";
  let arguments = (ins Onnx_FloatTensor:$X, Onnx_FloatTensor:$Scale, Onnx_OptTensor:$B,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1e-05">:$epsilon,
                   DefaultValuedAttr<I64Attr, "1">:$stash_type);
  let results = (outs Onnx_FloatTensor:$Y, Onnx_FloatTensor:$Mean, Onnx_FloatTensor:$InvStdDev);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

class Onnx_ReduceOp<string mnemonic> : Onnx_Op<mnemonic, [Pure, AllElementTypesMatch<["data", "reduced"]>]> {
  let arguments = (ins AnyTensor:$data, Onnx_OptI64Tensor:$axes,
                   DefaultValuedAttr<I64Attr, "1">:$keepdims,
                   DefaultValuedAttr<I64Attr, "0">:$noop_with_empty_axes);
  let results = (outs AnyTensor:$reduced);
  let assemblyFormat = Onnx_GenericFormat;
}
def Onnx_ReduceMeanOp : Onnx_ReduceOp<"ReduceMean"> { let summary = "mean over axes"; }
def Onnx_ReduceSumOp : Onnx_ReduceOp<"ReduceSum"> { let summary = "sum over axes"; }
def Onnx_ReduceMaxOp : Onnx_ReduceOp<"ReduceMax"> { let summary = "maximum over axes"; }

def Onnx_CumSumOp : Onnx_Op<"CumSum", [Pure, AllElementTypesMatch<["x", "y"]>]> {
  let summary = "cumulative sum along a dimension";
  let arguments = (ins AnyTensor:$x, Onnx_IndexTensor:$axis,
                   DefaultValuedAttr<I64Attr, "0">:$exclusive,
                   DefaultValuedAttr<I64Attr, "0">:$reverse);
  let results = (outs AnyTensor:$y);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_TriluOp : Onnx_Op<"Trilu", [Pure, AllElementTypesMatch<["input", "output"]>]> {
  let summary = "upper or lower triangle of the last two dimensions";
  let arguments = (ins AnyTensor:$input, Onnx_OptI64Tensor:$k,
                   DefaultValuedAttr<I64Attr, "1">:$upper);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_DropoutOp : Onnx_Op<"Dropout", [Pure, AllElementTypesMatch<["data", "output"]>]> {
  let summary = "identity at inference (training_mode must be absent or false)";
  let arguments = (ins AnyTensor:$data, Onnx_OptTensor:$ratio, Onnx_OptTensor:$training_mode,
                   OptionalAttr<I64Attr>:$seed);
  let results = (outs AnyTensor:$output, Onnx_BoolTensor:$mask);
  let assemblyFormat = Onnx_GenericFormat;
}

//===----------------------------------------------------------------------===//
// Shapes and data movement.
//===----------------------------------------------------------------------===//

def Onnx_ShapeOp : Onnx_Op<"Shape", [Pure]> {
  let summary = "the shape of data (dimensions start to end)";
  let arguments = (ins AnyTensor:$data, OptionalAttr<I64Attr>:$start, OptionalAttr<I64Attr>:$end);
  let results = (outs Onnx_I64Tensor:$shape);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_SizeOp : Onnx_Op<"Size", [Pure]> {
  let summary = "the number of elements of data";
  let arguments = (ins AnyTensor:$data);
  let results = (outs Onnx_I64Tensor:$size);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_ConstantOfShapeOp : Onnx_Op<"ConstantOfShape", [Pure]> {
  let summary = "a tensor of the given shape filled with value (default 0.0f)";
  let arguments = (ins Onnx_I64Tensor:$input, OptionalAttr<ElementsAttr>:$value);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_ReshapeOp : Onnx_Op<"Reshape", [Pure, AllElementTypesMatch<["data", "reshaped"]>]> {
  let summary = "reshape (0 copies a dimension unless allowzero, -1 is inferred)";
  let arguments = (ins AnyTensor:$data, Onnx_I64Tensor:$shape,
                   DefaultValuedAttr<I64Attr, "0">:$allowzero);
  let results = (outs AnyTensor:$reshaped);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_FlattenOp : Onnx_Op<"Flatten", [Pure, AllElementTypesMatch<["input", "output"]>]> {
  let summary = "reshape into 2-D at axis";
  let arguments = (ins AnyTensor:$input, DefaultValuedAttr<I64Attr, "1">:$axis);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_TransposeOp : Onnx_Op<"Transpose", [Pure, AllElementTypesMatch<["data", "transposed"]>]> {
  let summary = "permute dimensions (reversed when perm is absent)";
  let arguments = (ins AnyTensor:$data, OptionalAttr<I64ArrayAttr>:$perm);
  let results = (outs AnyTensor:$transposed);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_SqueezeOp : Onnx_Op<"Squeeze", [Pure, AllElementTypesMatch<["data", "squeezed"]>]> {
  let summary = "drop dimensions of size 1 (all of them when axes is absent)";
  let arguments = (ins AnyTensor:$data, Onnx_OptI64Tensor:$axes);
  let results = (outs AnyTensor:$squeezed);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_UnsqueezeOp : Onnx_Op<"Unsqueeze", [Pure, AllElementTypesMatch<["data", "expanded"]>]> {
  let summary = "insert dimensions of size 1";
  let arguments = (ins AnyTensor:$data, Onnx_I64Tensor:$axes);
  let results = (outs AnyTensor:$expanded);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_ExpandOp : Onnx_Op<"Expand", [Pure, AllElementTypesMatch<["input", "output"]>]> {
  let summary = "broadcast input to shape";
  let arguments = (ins AnyTensor:$input, Onnx_I64Tensor:$shape);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_TileOp : Onnx_Op<"Tile", [Pure, AllElementTypesMatch<["input", "output"]>]> {
  let summary = "repeat input along each dimension (GPT-J's rotary tables)";
  let arguments = (ins AnyTensor:$input, Onnx_I64Tensor:$repeats);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_ConcatOp : Onnx_Op<"Concat", [Pure, SameOperandsAndResultElementType]> {
  let summary = "concatenate along axis";
  let arguments = (ins Variadic<AnyTensor>:$inputs, I64Attr:$axis);
  let results = (outs AnyTensor:$concat_result);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_SplitOp : Onnx_Op<"Split", [Pure]> {
  let summary = "split along axis into the given sizes, or into equal parts (the last smaller)";
  let arguments = (ins AnyTensor:$input, Onnx_OptI64Tensor:$split,
                   DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs Variadic<AnyTensor>:$outputs);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_SliceOp : Onnx_Op<"Slice", [Pure, AllElementTypesMatch<["data", "output"]>]> {
  let summary = "strided slice";
  let arguments = (ins AnyTensor:$data, Onnx_IndexTensor:$starts, Onnx_IndexTensor:$ends,
                   Onnx_OptTensor:$axes, Onnx_OptTensor:$steps);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
}

def Onnx_GatherOp : Onnx_Op<"Gather", [Pure, AllElementTypesMatch<["data", "output"]>]> {
  let summary = "take slices of data along axis at indices";
  let arguments = (ins AnyTensor:$data, Onnx_IndexTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_GatherElementsOp : Onnx_Op<"GatherElements", [Pure, AllElementTypesMatch<["data", "output"]>]> {
  let summary = "take elements of data along axis at indices of the same rank";
  let arguments = (ins AnyTensor:$data, Onnx_IndexTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_GatherNDOp : Onnx_Op<"GatherND", [Pure, AllElementTypesMatch<["data", "output"]>]> {
  let summary = "take slices of data at index tuples (the last dimension of indices)";
  let arguments = (ins AnyTensor:$data, Onnx_I64Tensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$batch_dims);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_ScatterNDOp : Onnx_Op<"ScatterND", [Pure, AllElementTypesMatch<["data", "updates", "output"]>]> {
  let summary = "copy of data with updates written at indices";
  let arguments = (ins AnyTensor:$data, Onnx_I64Tensor:$indices, AnyTensor:$updates,
                   DefaultValuedStrAttr<StrAttr, "none">:$reduction);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_ScatterElementsOp : Onnx_Op<"ScatterElements", [Pure, AllElementTypesMatch<["data", "updates", "output"]>]> {
  let summary = "copy of data with each update written where its index says along axis";
  let arguments = (ins AnyTensor:$data, Onnx_IndexTensor:$indices, AnyTensor:$updates,
                   DefaultValuedAttr<I64Attr, "0">:$axis,
                   DefaultValuedStrAttr<StrAttr, "none">:$reduction);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_RangeOp : Onnx_Op<"Range", [Pure, AllElementTypesMatch<["start", "limit", "delta", "output"]>]> {
  let summary = "start, start + delta, ... up to limit (exclusive)";
  let arguments = (ins AnyTensor:$start, AnyTensor:$limit, AnyTensor:$delta);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// What mixture-of-experts routing uses: the top experts, their one-hot masks, the tokens
// each expert takes.
//===----------------------------------------------------------------------===//

def Onnx_TopKOp : Onnx_Op<"TopK", [Pure, AllElementTypesMatch<["X", "values"]>]> {
  let summary = "the K largest (or smallest) elements along axis and their indices";
  let description = [{
    Equal elements keep their order: the lower index comes first.
  }];
  let arguments = (ins AnyTensor:$X, Onnx_I64Tensor:$K,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<I64Attr, "1">:$largest,
                   DefaultValuedAttr<I64Attr, "1">:$sorted);
  let results = (outs AnyTensor:$values, Onnx_I64Tensor:$indices);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_OneHotOp : Onnx_Op<"OneHot", [Pure, AllElementTypesMatch<["values", "output"]>]> {
  let summary = "values[1] where an index names the position along the new axis, else values[0]";
  let arguments = (ins AnyTensor:$indices, AnyTensor:$depth, AnyTensor:$values,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

def Onnx_NonZeroOp : Onnx_Op<"NonZero", [Pure]> {
  let summary = "the coordinates of the non-zero elements, one row per dimension";
  let description = [{
    The result's second dimension is the count of non-zero elements, known only when the
    op runs: the lowering makes it a dynamic tensor.
  }];
  let arguments = (ins AnyTensor:$X);
  let results = (outs Onnx_I64Tensor:$Y);
  let assemblyFormat = Onnx_GenericFormat;
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Control flow.
//===----------------------------------------------------------------------===//

def Onnx_IfOp : Onnx_Op<"If", [RecursiveMemoryEffects, NoRegionArguments,
                                SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "runs then_branch or else_branch (Optimum's use_cache_branch)";
  let description = [{
    The branches are ONNX subgraphs: they take no arguments and may use any value of the
    enclosing graph.
  }];
  let arguments = (ins Onnx_BoolTensor:$cond);
  let results = (outs Variadic<AnyTensor>:$outputs);
  let regions = (region SizedRegion<1>:$then_branch, SizedRegion<1>:$else_branch);
  let assemblyFormat = [{
    $cond `:` type($cond) (`->` `(` type($outputs)^ `)`)? `then` $then_branch `else` $else_branch attr-dict
  }];
  let hasVerifier = 1;
}

def Onnx_YieldOp : Onnx_Op<"Yield", [Pure, Terminator, ReturnLike, HasParent<"IfOp">]> {
  let summary = "the outputs of an If branch";
  let arguments = (ins Variadic<AnyTensor>:$outputs);
  let builders = [OpBuilder<(ins), [{ /* empty yield */ }]>];
  let assemblyFormat = "attr-dict ($outputs^ `:` type($outputs))?";
}

#endif
