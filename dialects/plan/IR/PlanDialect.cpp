#include "dialects/plan/IR/PlanDialect.h"

#include "dialects/plan/IR/PlanDialect.cpp.inc"

using namespace mlir;

namespace dsc::plan {
void PlanDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "dialects/plan/IR/PlanOps.cpp.inc"
      >();
}

LogicalResult PlanDialect::verifyOperationAttribute(Operation *op, NamedAttribute attribute) {
  StringRef name = attribute.getName().getValue();
  if (name == kKernelArchsAttr) {
    auto archs = dyn_cast<ArrayAttr>(attribute.getValue());
    if (!isa<ModuleOp>(op) || !archs ||
        !llvm::all_of(archs, [](Attribute arch) { return isa<StringAttr>(arch); }))
      return op->emitError() << name << " is a module's list of GPU architectures (strings)";
    return success();
  }
  if (name == kSamplingKernelAttr) {
    if (!isa<ModuleOp>(op) || !isa<KernelAttr>(attribute.getValue()))
      return op->emitError() << name << " is a module's #plan.kernel";
    return success();
  }
  return op->emitError() << "unknown plan dialect attribute " << name;
}
} // namespace dsc::plan
