// The plan dialect: what the runtime executes (programs, kernels, buffers, collectives).
#ifndef DSC_DIALECTS_PLAN_IR_PLANDIALECT_H
#define DSC_DIALECTS_PLAN_IR_PLANDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/plan/IR/PlanDialect.h.inc"
#include "dialects/plan/IR/PlanEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/IR/PlanAttrs.h.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/plan/IR/PlanTypes.h.inc"

namespace dsc::plan {
// Bytes per element of `type` (an integer or float type of whole bytes), or 0.
int64_t getElementByteSize(mlir::Type type);
// The size of a buffer value when its producer says it statically: a plan.buffer's size, a
// plan.weight's tensor bytes.
std::optional<int64_t> getByteSize(mlir::Value buffer);
// An upper bound of an index value: the `max` of a plan.dim, a monotonic plan.apply of
// bounded operands. std::nullopt where none is known.
std::optional<int64_t> getUpperBound(mlir::Value index);
// The value of entry `i` of a mixed static/dynamic list (`static` holds kDynamic where the
// entry is the next of `dynamic`), its upper bound when dynamic.
std::optional<int64_t> getMixedUpperBound(llvm::ArrayRef<int64_t> statics,
                                          mlir::ValueRange dynamic, unsigned i);
// Splits constants and index values into the static list (kDynamic for values) and the
// dynamic operands of a mixed list, as plan.launch's grid and plan.gemm's dims store them.
void dispatchMixed(llvm::ArrayRef<mlir::OpFoldResult> mixed,
                   llvm::SmallVectorImpl<mlir::Value> &dynamic,
                   llvm::SmallVectorImpl<int64_t> &statics);
// The inverse of dispatchMixed.
llvm::SmallVector<mlir::OpFoldResult> getMixed(mlir::MLIRContext *context,
                                               llvm::ArrayRef<int64_t> statics,
                                               mlir::ValueRange dynamic);
} // namespace dsc::plan

#define GET_OP_CLASSES
#include "dialects/plan/IR/PlanOps.h.inc"

#endif
