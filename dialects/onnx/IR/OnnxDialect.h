// The onnx dialect: ONNX operators in one normalised form, as imported by frontends/onnx.
#ifndef DSC_DIALECTS_ONNX_IR_ONNXDIALECT_H
#define DSC_DIALECTS_ONNX_IR_ONNXDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/onnx/IR/OnnxDialect.h.inc"

namespace dsc::onnx {
// Checks that the ranked operands broadcast together (numpy rules) and that a ranked
// result has the broadcast rank and agrees with every dimension known statically.
llvm::LogicalResult verifyBroadcast(mlir::Operation *op);
// Checks -rank <= axis < rank when `type` is ranked.
llvm::LogicalResult verifyAxis(mlir::Operation *op, mlir::Type type, int64_t axis,
                               llvm::StringRef what);
} // namespace dsc::onnx

#define GET_OP_CLASSES
#include "dialects/onnx/IR/OnnxOps.h.inc"

#endif
