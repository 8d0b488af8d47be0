// The compiler's types and attributes as the runtime's (dtypes, tensors, kernel
// attributes) and back: constant folding, shape bounds and plan export evaluate and store
// what the runtime's kernels read.
#ifndef DSC_COMPILER_LOWERING_RUNTIMETYPES_H
#define DSC_COMPILER_LOWERING_RUNTIMETYPES_H

#include "core/Tensor.h"
#include "ops/Ops.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

namespace dsc {

// MLIR element type -> runtime dtype (Undefined when there is none) and back (null).
dsrt::DType runtimeDType(mlir::Type type);
mlir::Type mlirElementType(mlir::MLIRContext *context, dsrt::DType dtype);

// A dense attribute as a runtime tensor (little-endian, one byte per bool), and back.
dsrt::OwnedTensor tensorFromAttr(mlir::DenseElementsAttr value);
mlir::DenseElementsAttr attrFromTensor(mlir::MLIRContext *context,
                                       const dsrt::OwnedTensor &tensor);

// The inherent attributes of an onnx op as kernel attributes.
mlir::FailureOr<dsrt::ops::AttrMap> kernelAttributes(mlir::Operation *op);

} // namespace dsc

#endif
