// The plan header a module of plan programs describes, built by the plan writer's own
// serializer (ExportPlan.cpp) without reading any weight: what dsc-select-kernels' rules
// read. Kept apart from ExportPlan.h, which passes include for its attribute names, so that
// they do not pull in the FlatBuffers header.
#ifndef DSC_COMPILER_LOWERING_PLANVIEW_H
#define DSC_COMPILER_LOWERING_PLANVIEW_H

#include "core/Tensor.h"
#include "plan_generated.h"

#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <string>
#include <vector>

namespace dsc {
namespace onnx_frontend {
class WeightStore;
}

// The plan header that `module` describes, without its weights' bytes: what the plan
// writer would store, each weight's stored dtype by weight_index (`weights` gives a widened
// half export's source dtype; null: the IR's), and the plan.exec of each step. Kernel
// selection runs its rules on it. Errors are emitted as diagnostics on the module.
struct PlanView {
  dsp::PlanT plan;
  std::vector<dsrt::DType> weightDTypes;
  std::map<const dsp::StepT *, mlir::Operation *> steps;
};
mlir::LogicalResult describePlan(mlir::ModuleOp module,
                                 const onnx_frontend::WeightStore *weights,
                                 const std::string &weightDtype, PlanView &view);

} // namespace dsc

#endif
