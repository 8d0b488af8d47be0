// The compiler's types and attributes as the runtime's (dtypes, tensors, kernel
// attributes) and back: constant folding, shape bounds and plan export evaluate and store
// what the runtime's kernels read.
#ifndef DSC_COMPILER_LOWERING_RUNTIMETYPES_H
#define DSC_COMPILER_LOWERING_RUNTIMETYPES_H

#include "core/Tensor.h"
#include "ops/Ops.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

#include <vector>

namespace dsc {

// MLIR element type -> runtime dtype (Undefined when there is none) and back (null).
dsrt::DType runtimeDType(mlir::Type type);
mlir::Type mlirElementType(mlir::MLIRContext *context, dsrt::DType dtype);

// A dense attribute as a runtime tensor (little-endian, one byte per bool), and back.
dsrt::OwnedTensor tensorFromAttr(mlir::DenseElementsAttr value);
mlir::DenseElementsAttr attrFromTensor(mlir::MLIRContext *context,
                                       const dsrt::OwnedTensor &tensor);

// An op as a runtime step (docs/transformer-ops.md, "Steps"): its kernel name (the onnx
// op's name without the dialect, the tfm op's full name), its inputs in order with a null
// Value for an absent optional operand, and its attributes as plain integers, floats,
// strings, types, tensors and arrays (tfm enums become strings, unit attributes 0/1, the
// rotary attribute rotary_dim/rotary_base/rotary_interleaved, absent optional ones their
// contract default). Plan lowering and shape evaluation both use these, so a step runs
// with the attributes its shapes were evaluated with.
// The type a weight has in the plan and to the runtime's kernels: a ui4 [.., in] weight
// (docs/int4.md) is stored two codes to a byte, ui8 [.., in / 2]; any other type as it is.
mlir::Type storedWeightType(mlir::Type type);

std::string stepName(mlir::Operation *op);
llvm::SmallVector<mlir::Value> stepInputs(mlir::Operation *op);
mlir::FailureOr<mlir::DictionaryAttr> stepAttributes(mlir::Operation *op);

// stepAttributes as kernel attributes.
mlir::FailureOr<dsrt::ops::AttrMap> kernelAttributes(mlir::Operation *op);

// Runs `op` once with the runtime's kernel on known operands (null for an absent optional
// one): its results, or failure where the kernel declines or a result would have more than
// `maxElements` elements. Constant folding and recognition's static values both use it.
mlir::FailureOr<std::vector<dsrt::OwnedTensor>> runKernelOnce(mlir::Operation *op,
                                                              const dsrt::ops::Inputs &inputs,
                                                              int64_t maxElements);

} // namespace dsc

#endif
