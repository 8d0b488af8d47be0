// The generic rules' shared checks (GenericRuleHelpers.h).
#include "codegen/kernels/GenericRuleHelpers.h"

#include <map>

namespace dsc::codegen::generic {


// hostKnownInput's walk over the steps that produce a tensor.
namespace {
class HostKnowledge {
public:
  explicit HostKnowledge(const dsp::PlanT &plan) : plan_(plan) {
    for (const auto &program : plan.programs)
      if (program)
        for (const auto &step : program->steps)
          if (step)
            for (int32_t output : step->outputs)
              if (output >= 0)
                producers_[output].push_back(step.get());
  }

  bool known(int32_t tensor) {
    if (tensor < 0 || static_cast<size_t>(tensor) >= plan_.tensors.size() ||
        !plan_.tensors[tensor])
      return false;
    auto cached = memo_.find(tensor);
    if (cached != memo_.end())
      return cached->second;
    // A cycle (an If's branch reading its own result) is not host-known.
    memo_[tensor] = false;
    bool result = compute(tensor);
    memo_[tensor] = result;
    return result;
  }

private:
  bool compute(int32_t tensor) {
    const dsp::TensorT &t = *plan_.tensors[tensor];
    if (t.kind == dsp::TensorKind::constant)
      return true;
    if (t.kind == dsp::TensorKind::input || t.kind == dsp::TensorKind::weight)
      return false;
    auto producers = producers_.find(tensor);
    if (producers == producers_.end())
      return false;
    for (const dsp::StepT *step : producers->second) {
      if (step->op == "Shape" || step->op == "Size")
        continue;  // they read the shape only, which the host always knows
      if (!step->branches.empty())
        return false;  // an If: its value depends on which branch ran
      for (int32_t input : step->inputs)
        if (input >= 0 && !known(input))
          return false;
    }
    return true;
  }

  const dsp::PlanT &plan_;
  std::map<int32_t, std::vector<const dsp::StepT *>> producers_;
  std::map<int32_t, bool> memo_;
};
} // namespace

DType dtypeOf(const dsp::TensorT &tensor) { return static_cast<DType>(tensor.dtype); }

DType heldType(const dsp::TensorT &tensor) { return dtypeOf(tensor); }

std::string nameOf(DType dtype) { return dsrt::dtypeName(dtype); }

int64_t code(DType dtype) { return static_cast<int64_t>(dtype); }

bool isIndexType(DType dtype) { return dtype == DType::I64 || dtype == DType::I32; }

const dsp::TensorT *required(const dsp::TensorT *tensor, const char *what,
                             std::string &reason) {
  if (!tensor)
    reason = std::string("has no ") + what;
  return tensor;
}

bool knownRank(const dsp::TensorT &tensor, const char *what, int64_t &rank,
               std::string &reason) {
  if (tensor.kind == dsp::TensorKind::dynamic) {
    reason = std::string(what) + " is dynamic (its rank may be unknown)";
    return false;
  }
  rank = static_cast<int64_t>(tensor.shape.size());
  if (rank > kMaxRank) {
    reason = std::string(what) + " has rank " + std::to_string(rank) + ", the kernels " +
             "take at most " + std::to_string(kMaxRank);
    return false;
  }
  return true;
}

bool hostKnownInput(const RuleInput &in, size_t index) {
  if (index >= in.step().inputs.size())
    return false;
  HostKnowledge knowledge(in.plan());
  return knowledge.known(in.step().inputs[index]);
}

bool sameDeviceType(const dsp::TensorT &input, const dsp::TensorT &output,
                    std::string &reason) {
  DType from = heldType(input), to = dtypeOf(output);
  if (from != to) {
    reason = "the input is held as " + nameOf(from) + " on the device, the output is " +
             nameOf(to);
    return false;
  }
  if (dsrt::dtypeSize(to) == 0 || dsrt::dtypeSize(to) > 8) {
    reason = "no element size for " + nameOf(to);
    return false;
  }
  return true;
}

int64_t elementSizeOf(const dsp::TensorT &tensor) {
  return static_cast<int64_t>(dsrt::dtypeSize(dtypeOf(tensor)));
}

} // namespace dsc::codegen::generic
