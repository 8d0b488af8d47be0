// The attributes and types of the plan dialect.
#include "dialects/plan/IR/PlanDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h" // for the generated attribute and type parsers and printers

using namespace mlir;

#include "dialects/plan/IR/PlanEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/IR/PlanAttrs.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/plan/IR/PlanTypes.cpp.inc"

void dsc::plan::PlanDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/plan/IR/PlanAttrs.cpp.inc"
      >();
}

void dsc::plan::PlanDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/plan/IR/PlanTypes.cpp.inc"
      >();
}
