#ifndef DSC_DIALECTS_PLAN_OPS_TD
#define DSC_DIALECTS_PLAN_OPS_TD

include "dialects/plan/IR/PlanBase.td"
include "dialects/plan/IR/PlanAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

def Plan_Buffer : Type<CPred<"::llvm::isa<::dsc::plan::BufferType>($_self)">, "!plan.buffer",
                       "::dsc::plan::BufferType">,
                  BuildableType<"$_builder.getType<::dsc::plan::BufferType>()">;
def Plan_KernelArg : AnyTypeOf<[Plan_Buffer, Index], "!plan.buffer or index">;
// The element types of activations and of collectives.
def Plan_ComputeType : AnyTypeOf<[F16, BF16, F32]>;
def Plan_CollectiveType : AnyTypeOf<[F16, BF16, F32, I32, I64]>;

//===----------------------------------------------------------------------===//
// Module-level declarations.
//===----------------------------------------------------------------------===//

def Plan_ProgramOp : Plan_Op<"program", [Symbol, IsolatedFromAbove, SingleBlock,
                                          HasParent<"::mlir::ModuleOp">]> {
  let summary = "a program of the plan: its ops run in order, once per call";
  let description = [{
    `@prefill` and `@decode` for decoders (the runtime keeps the KV cache between calls),
    `@forward` for encoders. The body is one block that ends with `plan.return`.

    ```mlir
    plan.program @decode {
      %t = plan.dim tokens max 64
      ...
      plan.return
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$region);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $region";
  let hasVerifier = 1;
  let builders = [
    // A program named `name` with an empty body block (no plan.return yet).
    OpBuilder<(ins "::llvm::StringRef":$name)>
  ];
}

def Plan_ReturnOp : Plan_Op<"return", [Pure, Terminator, ReturnLike, HasParent<"ProgramOp">]> {
  let summary = "the end of a program, with the tensors the caller reads (the generic path)";
  let arguments = (ins Variadic<AnyTensor>:$outputs, OptionalAttr<StrArrayAttr>:$names);
  let builders = [OpBuilder<(ins), [{ /* no outputs */ }]>];
  let assemblyFormat = "attr-dict ($outputs^ `:` type($outputs))?";
  let hasVerifier = 1;
}

def Plan_ArenaOp : Plan_Op<"arena", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "an activation arena: one device allocation that buffers are ranges of";
  let description = [{
    Sized by memory planning for the compile-time limits (batch, sequence, total length).
    Every planned buffer's offset is a multiple of `alignment`.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, ConfinedAttr<I64Attr, [IntPositive]>:$size,
                   ConfinedAttr<I64Attr, [IntPositivePowerOf2]>:$alignment);
  let assemblyFormat = "$sym_name `size` $size `align` $alignment attr-dict";
  let hasVerifier = 1;
}

def Plan_KernelOp : Plan_Op<"kernel", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "a generated kernel: a specialised template compiled to PTX/cubin";
  let description = [{
    `entry` is the kernel's `extern "C"` name, `template` the CUDA C++ template in
    `codegen/kernels/` it is specialised from, `constants` the compile-time constants of the
    specialisation (hidden size, head dim, dtype, epilogue ...). The function type lists
    the kernel parameters: `!plan.buffer` (a device pointer) and `index` (an int64).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$entry, StrAttr:$template_name,
                   TypeAttrOf<FunctionType>:$function_type,
                   OptionalAttr<DictionaryAttr>:$constants);
  let assemblyFormat = [{
    $sym_name `entry` $entry `template` $template_name `:` $function_type
    (`constants` $constants^)? attr-dict
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Values of a program: sizes, buffers, weights.
//===----------------------------------------------------------------------===//

def Plan_DimOp : Plan_Op<"dim", [Pure, HasParent<"ProgramOp">]> {
  let summary = "a runtime size (batch, seq, past, total, tokens), at most `max`";
  let arguments = (ins Plan_RuntimeDimAttr:$dim, ConfinedAttr<I64Attr, [IntPositive]>:$max);
  let results = (outs Index:$result);
  let assemblyFormat = "$dim `max` $max attr-dict";
  let builders = [
    OpBuilder<(ins "::dsc::plan::RuntimeDim":$dim, "int64_t":$max), [{
      build($_builder, $_state, $_builder.getIndexType(), dim, max);
    }]>
  ];
}

def Plan_ApplyOp : Plan_Op<"apply", [Pure, HasParent<"ProgramOp">]> {
  let summary = "a size computed from runtime sizes: an affine map of symbols, one result";
  let description = [{
    ```mlir
    %blocks = plan.apply affine_map<()[s0] -> (s0 * 3 ceildiv 256)>[%tokens]
    ```
    A map without `mod` and with non-negative coefficients is monotonic, so its bound is
    the map of the operands' bounds (getUpperBound).
  }];
  let arguments = (ins AffineMapAttr:$map, Variadic<Index>:$operands);
  let results = (outs Index:$result);
  let assemblyFormat = "$map `[` $operands `]` attr-dict";
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::AffineMap":$map, "::mlir::ValueRange":$operands), [{
      build($_builder, $_state, $_builder.getIndexType(), map, operands);
    }]>
  ];
}

def Plan_BufferOp : Plan_Op<"buffer", [HasParent<"ProgramOp">,
                                        DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "a byte range of an arena; `offset` is set by memory planning";
  let description = [{
    Before memory planning a buffer has only a size (each one is a distinct allocation);
    planning assigns the offset, a multiple of the arena's alignment, with
    offset + size <= the arena's size.
  }];
  let arguments = (ins FlatSymbolRefAttr:$arena,
                   OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$offset,
                   ConfinedAttr<I64Attr, [IntPositive]>:$size);
  let results = (outs Res<Plan_Buffer, "", [MemAlloc]>:$buffer);
  let assemblyFormat = "$arena (`offset` $offset^)? `size` $size attr-dict";
  let builders = [
    // An unplanned buffer (no offset yet).
    OpBuilder<(ins "::llvm::StringRef":$arena, "int64_t":$size), [{
      build($_builder, $_state, $_builder.getType<::dsc::plan::BufferType>(),
            ::mlir::SymbolRefAttr::get($_builder.getContext(), arena), ::mlir::IntegerAttr(),
            $_builder.getI64IntegerAttr(size));
    }]>,
    OpBuilder<(ins "::llvm::StringRef":$arena, "int64_t":$offset, "int64_t":$size), [{
      build($_builder, $_state, $_builder.getType<::dsc::plan::BufferType>(),
            ::mlir::SymbolRefAttr::get($_builder.getContext(), arena),
            $_builder.getI64IntegerAttr(offset), $_builder.getI64IntegerAttr(size));
    }]>
  ];
}

def Plan_WeightOp : Plan_Op<"weight", [Pure, HasParent<"ProgramOp">]> {
  let summary = "a tensor of the rank's weight section, by name";
  let arguments = (ins StrAttr:$name, TypeAttrOf<AnyStaticShapeTensor>:$tensor_type);
  let results = (outs Plan_Buffer:$buffer);
  let assemblyFormat = "$name `:` $tensor_type attr-dict";
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::llvm::StringRef":$name, "::mlir::RankedTensorType":$type), [{
      build($_builder, $_state, $_builder.getType<::dsc::plan::BufferType>(),
            $_builder.getStringAttr(name), ::mlir::TypeAttr::get(type));
    }]>
  ];
}

//===----------------------------------------------------------------------===//
// Work.
//===----------------------------------------------------------------------===//

def Plan_LaunchOp : Plan_Op<"launch", [HasParent<"ProgramOp">, AttrSizedOperandSegments,
                                        DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "launch a plan.kernel";
  let description = [{
    Grid sizes are constants or runtime sizes; the block size is a constant (at most 1024
    threads). `args` match the kernel's parameter types.

    ```mlir
    plan.launch @layer_norm grid [%tokens, 1, 1] block [256, 1, 1] args(%x, %y : !plan.buffer, !plan.buffer)
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$kernel, Variadic<Index>:$grid,
                   DenseI64ArrayAttr:$static_grid, DenseI64ArrayAttr:$block,
                   DefaultValuedAttr<ConfinedAttr<I64Attr, [IntNonNegative]>, "0">:$shared_mem,
                   Variadic<Plan_KernelArg>:$args);
  let assemblyFormat = [{
    $kernel `grid` custom<IndexList>($grid, $static_grid) `block` $block
    (`shared_mem` $shared_mem^)? (`args` `(` $args^ `:` type($args) `)`)? attr-dict
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::llvm::StringRef":$kernel, "::llvm::ArrayRef<::mlir::OpFoldResult>":$grid,
                   "::llvm::ArrayRef<int64_t>":$block, "::mlir::ValueRange":$args,
                   CArg<"int64_t", "0">:$sharedMem)>
  ];
  let extraClassDeclaration = [{
    // The grid as constants and index values.
    ::llvm::SmallVector<::mlir::OpFoldResult> getMixedGrid();
  }];
}

def Plan_GemmOp : Plan_Op<"gemm", [HasParent<"ProgramOp">, AttrSizedOperandSegments]> {
  let summary = "C = epilogue(alpha * op(A) op(B) + beta * C), row-major, [m, n, k]";
  let description = [{
    A is [m, k] ([k, m] with trans_a), B is [k, n] ([n, k] with trans_b, torch's layout of
    a linear weight), C is [m, n]. `dims` are m, n, k: constants or runtime sizes. The
    epilogue adds `bias` [n], applies at most one activation, then adds `residual` [m, n];
    the operands are present exactly when the epilogue names them. Where a size is static
    (or bounded by a plan.dim limit) every buffer must be large enough.

    ```mlir
    plan.gemm f16 %x, %w -> %y dims [%tokens, 3072, 768] trans_b epilogue bias|gelu_tanh bias %b
    ```
  }];
  let arguments = (ins TypeAttrOf<Plan_ComputeType>:$dtype,
                   Arg<Plan_Buffer, "", [MemRead]>:$a, Arg<Plan_Buffer, "", [MemRead]>:$b,
                   Arg<Plan_Buffer, "", [MemRead, MemWrite]>:$c,
                   Variadic<Index>:$dims, DenseI64ArrayAttr:$static_dims,
                   UnitAttr:$trans_a, UnitAttr:$trans_b,
                   DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                   DefaultValuedAttr<F32Attr, "0.0">:$beta,
                   DefaultValuedAttr<Plan_EpilogueAttr, "::dsc::plan::Epilogue::none">:$epilogue,
                   Arg<Optional<Plan_Buffer>, "", [MemRead]>:$bias,
                   Arg<Optional<Plan_Buffer>, "", [MemRead]>:$residual);
  let assemblyFormat = [{
    $dtype $a `,` $b `->` $c `dims` custom<IndexList>($dims, $static_dims)
    (`trans_a` $trans_a^)? (`trans_b` $trans_b^)? (`alpha` $alpha^)? (`beta` $beta^)?
    (`epilogue` $epilogue^)? (`bias` $bias^)? (`residual` $residual^)? attr-dict
  }];
  let hasVerifier = 1;
  let builders = [
    // C = A B (no epilogue); set trans_a/trans_b, alpha/beta and the epilogue afterwards.
    OpBuilder<(ins "::mlir::Type":$dtype, "::mlir::Value":$a, "::mlir::Value":$b,
                   "::mlir::Value":$c, "::llvm::ArrayRef<::mlir::OpFoldResult>":$dims)>
  ];
  let extraClassDeclaration = [{
    // m, n, k as constants and index values.
    ::llvm::SmallVector<::mlir::OpFoldResult> getMixedDims();
  }];
}

def Plan_AllReduceOp : Plan_Op<"all_reduce", [HasParent<"ProgramOp">]> {
  let summary = "in-place sum of `count` elements of a buffer over all TP ranks";
  let arguments = (ins TypeAttrOf<Plan_CollectiveType>:$dtype,
                   Arg<Plan_Buffer, "", [MemRead, MemWrite]>:$buffer,
                   Optional<Index>:$count, I64Attr:$static_count);
  let assemblyFormat = [{
    $dtype $buffer `count` custom<IndexValue>($count, $static_count) attr-dict
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::Type":$dtype, "::mlir::Value":$buffer,
                   "::mlir::OpFoldResult":$count)>
  ];
}

def Plan_AllGatherOp : Plan_Op<"all_gather", [HasParent<"ProgramOp">]> {
  let summary = "each of `ranks` ranks contributes `count` elements; dst holds them by rank";
  let arguments = (ins TypeAttrOf<Plan_CollectiveType>:$dtype,
                   Arg<Plan_Buffer, "", [MemRead]>:$src, Arg<Plan_Buffer, "", [MemWrite]>:$dst,
                   Optional<Index>:$count, I64Attr:$static_count,
                   ConfinedAttr<I64Attr, [IntPositive]>:$ranks);
  let assemblyFormat = [{
    $dtype $src `->` $dst `count` custom<IndexValue>($count, $static_count) `ranks` $ranks
    attr-dict
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::Type":$dtype, "::mlir::Value":$src, "::mlir::Value":$dst,
                   "::mlir::OpFoldResult":$count, "int64_t":$ranks)>
  ];
}

include "dialects/plan/IR/PlanTensorOps.td"

#endif
