// The plan dialect: what the runtime executes (programs of steps over tensors, and the
// activation arena they live in).
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

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/IR/PlanAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/plan/IR/PlanOps.h.inc"

#endif
