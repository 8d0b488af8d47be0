// dsc-select-kernels (Passes.td): each plan step's generated kernels, chosen by its op's rule
// and recorded as #plan.kernel attributes, so that lit can check the choice and the plan
// writer only compiles it.
//
// The rules (codegen/kernels/*Rules.cpp) are plain C++ over the plan header's object API:
// they are unit-tested without MLIR, and what they read is exactly what the runtime's
// launchers will read. The pass hands them that header as the serializer builds it
// (describePlan) and writes their answers back onto the plan.exec ops.
#include "compiler/lowering/Passes.h"
#include "compiler/lowering/PlanView.h"

#include "codegen/AttachKernels.h"

#include "mlir/IR/Builders.h"

namespace dsc {
#define GEN_PASS_DEF_SELECTKERNELS
#include "compiler/lowering/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

plan::KernelAttr kernelAttr(MLIRContext *context, const codegen::KernelSpec &spec) {
  SmallVector<StringAttr> names;
  SmallVector<int64_t> values;
  for (const auto &[name, value] : spec.constants) {
    names.push_back(StringAttr::get(context, name));
    values.push_back(value);
  }
  return plan::KernelAttr::get(context, spec.kind, names, values);
}

struct SelectKernelsPass : impl::SelectKernelsBase<SelectKernelsPass> {
  using SelectKernelsBase::SelectKernelsBase;
  SelectKernelsPass(const onnx_frontend::WeightStore *weights, SelectKernelsOptions options)
      : SelectKernelsBase(std::move(options)), weights_(weights) {}

  // A rule is keyed by an op's name as plan.exec spells it (an onnx op without its dialect
  // prefix, a tfm op with it). A key that names no op of either dialect would never match a
  // step: refuse it here rather than let its steps silently fall back.
  LogicalResult initialize(MLIRContext *context) override {
    for (const codegen::KernelRuleEntry &entry : codegen::kernelRuleTable()) {
      StringRef op = entry.op;
      std::string registered = op.starts_with("tfm.") ? op.str() : "onnx." + op.str();
      if (!RegisteredOperationName::lookup(registered, context))
        return emitError(UnknownLoc::get(context))
               << "dsc-select-kernels: a kernel rule is keyed by '" << op
               << "', which is no op of the onnx or tfm dialect";
    }
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *context = &getContext();
    std::vector<std::string> archs;
    if (dsrt::Status status = codegen::parseArchList(arch, archs); !status.isOk()) {
      module.emitError() << status.message();
      return signalPassFailure();
    }
    // The choice is made afresh: nothing an earlier run recorded survives.
    module->removeAttr(plan::PlanDialect::kKernelArchsAttr);
    module->removeAttr(plan::PlanDialect::kSamplingKernelAttr);
    module.walk([](plan::ExecOp exec) {
      exec.removeKernelsAttr();
      exec.removeKernelDeclineAttr();
    });
    if (archs.empty())
      return;
    if (weightDtype != "fp32" && weightDtype != "fp16" && weightDtype != "bf16") {
      module.emitError() << "dsc-select-kernels: weight-dtype is fp32, fp16 or bf16, not '"
                         << weightDtype << "'";
      return signalPassFailure();
    }

    PlanView view;
    if (failed(describePlan(module, weights_, weightDtype, view)))
      return signalPassFailure();
    codegen::PlanKernelChoices choices = codegen::selectKernels(view.plan, view.weightDTypes);
    for (const auto &[step, choice] : choices.steps) {
      auto exec = cast<plan::ExecOp>(view.steps.at(step));
      if (choice.declined) {
        exec.setKernelDeclineAttr(StringAttr::get(context, choice.reason));
        continue;
      }
      SmallVector<Attribute> kernels;
      for (const codegen::KernelSpec &spec : choice.kernels)
        kernels.push_back(kernelAttr(context, spec));
      exec.setKernelsAttr(ArrayAttr::get(context, kernels));
    }
    SmallVector<Attribute> archNames;
    for (const std::string &name : archs)
      archNames.push_back(StringAttr::get(context, name));
    module->setAttr(plan::PlanDialect::kKernelArchsAttr, ArrayAttr::get(context, archNames));
    if (choices.sampling)
      module->setAttr(plan::PlanDialect::kSamplingKernelAttr,
                      kernelAttr(context, *choices.sampling));
  }

  const onnx_frontend::WeightStore *weights_ = nullptr;
};

} // namespace

std::unique_ptr<Pass> createSelectKernelsWithWeights(const onnx_frontend::WeightStore *weights,
                                                     SelectKernelsOptions options) {
  return std::make_unique<SelectKernelsPass>(weights, std::move(options));
}

} // namespace dsc
