#ifndef DSC_DIALECTS_PLAN_TENSOR_OPS_TD
#define DSC_DIALECTS_PLAN_TENSOR_OPS_TD

//===----------------------------------------------------------------------===//
// The generic path: steps on tensors that the runtime's reference kernels run.
//
// A tensor value is an arena slot sized for the upper bound of its shape under the plan's
// limits (`max_shapes`, set when lowering); its actual shape is known only when the program
// runs. Memory planning gives each step result an `arena_offsets` entry.
//===----------------------------------------------------------------------===//

defvar Plan_TensorParents = ParentOneOf<["ProgramOp", "IfOp"]>;

def Plan_InputOp : Plan_Op<"input", [Pure, HasParent<"ProgramOp">]> {
  let summary = "a tensor the caller binds before running the program";
  let description = [{
    `dims` names the symbolic dimensions ("batch", "sequence", "" where static or unnamed);
    `max_shape` bounds each dimension under the plan's limits.
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$index, StrAttr:$name,
                   OptionalAttr<StrArrayAttr>:$dims, OptionalAttr<DenseI64ArrayAttr>:$max_shape);
  let results = (outs AnyRankedTensor:$value);
  let assemblyFormat = "$index $name attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Plan_ConstantOp : Plan_Op<"constant", [Pure, ConstantLike, Plan_TensorParents]> {
  let summary = "a small constant stored in the plan header";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs AnyStaticShapeTensor:$output);
  let assemblyFormat = "attr-dict `:` type($output)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Plan_WeightTensorOp : Plan_Op<"weight_tensor", [Pure, Plan_TensorParents]> {
  let summary = "a tensor of the rank's weight section, as a tensor value";
  let description = [{
    `name` is the model's initializer. With `transforms` (applied in order while the plan
    streams the weight: `{kind = "transpose", perm = [1, 0]}`, `{kind = "slice", axis = 0,
    offset = 0, size = 64}` (with `groups = g`: that part of each of g equal blocks),
    `{kind = "shard", axis = 0, offsets = [0, 64], sizes = [64, 32], groups = 1}` (rank r keeps its part;
    the result type is rank 0's), `{kind = "convert", to = f16}`), `source_type` gives the
    initializer's type and the result type is what the transforms make of it.
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<TypeAttrOf<AnyStaticShapeTensor>>:$source_type,
                   OptionalAttr<TypedArrayAttrBase<DictionaryAttr, "weight transforms">>:$transforms);
  let results = (outs AnyStaticShapeTensor:$output);
  let assemblyFormat = "$name attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Plan_WeightConcatOp : Plan_Op<"weight_concat", [Pure, Plan_TensorParents]> {
  let summary = "weights joined along their first dimension: one tensor of the weight section";
  let description = [{
    Each part is a `plan.weight_tensor`; the plan writer streams each rank's parts one after
    the other into one weight of that rank's section (tfm.concat_weights). A part that only
    weight_concat ops read is not a weight of the plan by itself. With `rank_parts`, rank r
    joins parts [rank_parts[2r], rank_parts[2r + 1]) only (expert parallelism).
  }];
  let arguments = (ins Variadic<AnyStaticShapeTensor>:$parts,
                   OptionalAttr<DenseI64ArrayAttr>:$rank_parts);
  let results = (outs AnyStaticShapeTensor:$output);
  let assemblyFormat = "$parts attr-dict `:` functional-type($parts, results)";
  let hasVerifier = 1;
}

def Plan_NoneOp : Plan_Op<"none", [Pure, Plan_TensorParents]> {
  let summary = "an absent optional input of a step";
  let results = (outs NoneType:$none);
  let assemblyFormat = "attr-dict";
}

def Plan_ExecOp : Plan_Op<"exec", [Pure, Plan_TensorParents]> {
  let summary = "one op of the runtime's reference op set, on tensors";
  let description = [{
    `op` names a kernel of libdsrt's op set (runtime/src/ops/Ops.h), in the onnx dialect's
    normalised form; `attrs` are its attributes. Each result has an upper-bound shape in
    `max_shapes` and, after memory planning, an arena byte offset in `arena_offsets`.
    After kernel selection, `kernels` lists the generated GPU kernels the step launches, in
    its CUDA launcher's slot order, or `kernel_decline` says why the op's rule chose none
    (the step then runs on the CUDA backend's host fallback).

    ```mlir
    %y = plan.exec "Add"(%a, %b) {max_shapes = [array<i64: 4, 128>]}
           : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
    ```
  }];
  let arguments = (ins StrAttr:$op, Variadic<AnyType>:$inputs,
                   DefaultValuedAttr<DictionaryAttr, "{}">:$attrs,
                   OptionalAttr<TypedArrayAttrBase<DenseI64ArrayAttr, "upper-bound shapes">>:$max_shapes,
                   OptionalAttr<DenseI64ArrayAttr>:$arena_offsets,
                   OptionalAttr<StrAttr>:$source,
                   OptionalAttr<Plan_KernelArrayAttr>:$kernels,
                   OptionalAttr<StrAttr>:$kernel_decline);
  let results = (outs Variadic<AnyTensor>:$outputs);
  let assemblyFormat = "$op `(` $inputs `)` attr-dict `:` functional-type($inputs, results)";
  let hasVerifier = 1;
}

def Plan_IfOp : Plan_Op<"if", [RecursiveMemoryEffects, NoRegionArguments, Plan_TensorParents,
                                SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "runs one of two step lists on a one-element boolean tensor";
  let arguments = (ins TensorOf<[I1]>:$cond,
                   OptionalAttr<TypedArrayAttrBase<DenseI64ArrayAttr, "upper-bound shapes">>:$max_shapes,
                   OptionalAttr<DenseI64ArrayAttr>:$arena_offsets);
  let results = (outs Variadic<AnyTensor>:$outputs);
  let regions = (region SizedRegion<1>:$then_branch, SizedRegion<1>:$else_branch);
  let assemblyFormat = [{
    $cond `:` type($cond) (`->` `(` type($outputs)^ `)`)? `then` $then_branch `else` $else_branch attr-dict
  }];
  let hasVerifier = 1;
}

def Plan_YieldOp : Plan_Op<"yield", [Pure, Terminator, ReturnLike, HasParent<"IfOp">]> {
  let summary = "the tensors a branch of plan.if gives";
  let arguments = (ins Variadic<AnyTensor>:$outputs);
  let builders = [OpBuilder<(ins), [{ /* empty */ }]>];
  let assemblyFormat = "attr-dict ($outputs^ `:` type($outputs))?";
}

#endif
