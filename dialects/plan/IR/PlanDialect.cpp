#include "dialects/plan/IR/PlanDialect.h"

#include "dialects/plan/IR/PlanDialect.cpp.inc"

namespace dsc::plan {
void PlanDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/plan/IR/PlanOps.cpp.inc"
      >();
}
} // namespace dsc::plan
