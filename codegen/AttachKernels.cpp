#include "codegen/AttachKernels.h"

#include "codegen/Nvrtc.h"

#include <algorithm>
#include <map>
#include <set>

namespace dsc::codegen {

// Threads per block of the sampling kernel: a vocabulary of 50k is ~50 elements a thread
// per round.
constexpr int64_t kSampleTopkBlock = 1024;

dsrt::Status parseArchList(const std::string &list, std::vector<std::string> &archs) {
  archs.clear();
  if (list == "none")
    return dsrt::Status::ok();
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string arch = list.substr(start, comma == std::string::npos ? std::string::npos
                                                                      : comma - start);
    bool digits = arch.size() > 3 && arch.compare(0, 3, "sm_") == 0 &&
                  arch.find_first_not_of("0123456789", 3) == std::string::npos;
    // Suffixed targets (sm_90a) are real architectures too.
    bool suffixed = arch.size() > 4 && arch.compare(0, 3, "sm_") == 0 &&
                    arch.find_first_not_of("0123456789", 3) == arch.size() - 1 &&
                    (arch.back() == 'a' || arch.back() == 'f');
    if (!digits && !suffixed)
      return dsrt::Status::error("--arch takes a comma list of GPU architectures like "
                                 "sm_80,sm_90, or none; '" + arch + "' is not one");
    if (std::find(archs.begin(), archs.end(), arch) == archs.end())
      archs.push_back(arch);
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return dsrt::Status::ok();
}

dsrt::Status specialiseKernel(const KernelSpec &spec, std::string &source) {
  const char *body = kernelTemplateSource(spec.kind);
  if (!body)
    return dsrt::Status::error("no kernel template '" + spec.kind +
                               "' (codegen/kernels/" + spec.kind + ".cuh)");
  source.clear();
  for (const auto &[name, value] : spec.constants)
    source += "#define " + name + " " + std::to_string(value) + "\n";
  source += body;
  return dsrt::Status::ok();
}

PlanKernelChoices selectKernels(const dsp::PlanT &plan,
                                const std::vector<dsrt::DType> &weightDTypes) {
  PlanKernelChoices choices;
  for (const auto &program : plan.programs) {
    for (const auto &step : program->steps) {
      KernelRule rule = findKernelRule(step->op);
      if (!rule)
        continue;
      RuleInput input(plan, *step, &weightDTypes);
      KernelChoice &choice = choices.steps[step.get()];
      choice.declined = !rule(input, choice.kernels, choice.reason);
      if (choice.declined)
        choice.kernels.clear();
    }
  }
  // Sampling selects the largest logits where the logits are (Session::topLogits).
  if (plan.model && plan.model->kind == "decoder" && !plan.model->logits.empty())
    choices.sampling = KernelSpec{"sample_topk", {{"BLOCK", kSampleTopkBlock}}};
  return choices;
}

dsrt::Status emitKernels(dsp::PlanT &plan, const PlanKernelChoices &choices,
                         const AttachKernelsOptions &options, AttachKernelsReport &report) {
  report = {};
  plan.kernels.clear();
  for (auto &program : plan.programs)
    for (auto &step : program->steps)
      step->kernels.clear();
  if (plan.model)
    plan.model->sampling_kernel = -1;
  if (options.archs.empty())
    return dsrt::Status::ok();

  const Nvrtc *nvrtc = nullptr;
  if (options.compile) {
    std::string error;
    nvrtc = Nvrtc::instance(error);
    if (!nvrtc) {
      report.warnings.push_back("writing a CPU-only plan: " + error);
      return dsrt::Status::ok();
    }
  }

  std::map<std::string, int32_t> kernelIndex;  // by KernelSpec::name
  std::set<std::string> declines;
  // The plan's kernel for `spec`, specialised and compiled on first use; `user` names what
  // needs it in errors.
  auto kernelFor = [&](const KernelSpec &spec, const std::string &user,
                       int32_t &index) -> dsrt::Status {
    std::string name = spec.name();
    auto [it, inserted] = kernelIndex.try_emplace(name, -1);
    if (inserted) {
      std::string source;
      DSRT_RETURN_IF_ERROR(specialiseKernel(spec, source));
      auto kernel = std::make_unique<dsp::KernelT>();
      kernel->name = name;
      kernel->entry = spec.kind;
      kernel->kind = spec.kind;
      for (const auto &[constantName, value] : spec.constants) {
        auto constant = std::make_unique<dsp::AttrT>();
        constant->name = constantName;
        constant->kind = dsp::AttrKind::int_;
        constant->i = value;
        kernel->constants.push_back(std::move(constant));
      }
      if (nvrtc) {
        CompiledKernel compiled;
        std::string error;
        if (!compileKernelCached(*nvrtc, source, name, kKernelPtxArch, options.archs,
                                 compiled, error))
          return dsrt::Status::error("cannot compile kernel " + name + " of " + user + ": " +
                                     error);
        kernel->ptx.assign(compiled.ptx.begin(), compiled.ptx.end());
        kernel->ptx_arch = kKernelPtxArch;
        for (auto &[arch, cubin] : compiled.binaries) {
          auto binary = std::make_unique<dsp::KernelBinaryT>();
          binary->arch = arch;
          binary->cubin.assign(cubin.begin(), cubin.end());
          kernel->binaries.push_back(std::move(binary));
        }
      }
      it->second = static_cast<int32_t>(plan.kernels.size());
      plan.kernels.push_back(std::move(kernel));
      report.sources.push_back(std::move(source));
    }
    index = it->second;
    return dsrt::Status::ok();
  };
  for (auto &program : plan.programs) {
    for (auto &step : program->steps) {
      auto chosen = choices.steps.find(step.get());
      if (chosen == choices.steps.end())
        continue;
      const KernelChoice &choice = chosen->second;
      ++report.steps;
      if (choice.declined) {
        ++report.declined;
        if (declines.insert(step->op + ": " + choice.reason).second)
          report.declines.push_back(step->op + ": " + choice.reason);
        continue;
      }
      std::vector<int32_t> indices;
      for (const KernelSpec &spec : choice.kernels) {
        int32_t index = -1;
        DSRT_RETURN_IF_ERROR(kernelFor(spec, step->op, index));
        indices.push_back(index);
      }
      if (!indices.empty())
        ++report.stepsWithKernels;
      step->kernels = std::move(indices);
    }
  }
  if (choices.sampling && plan.model)
    DSRT_RETURN_IF_ERROR(kernelFor(*choices.sampling, "sampling", plan.model->sampling_kernel));
  report.kernels = static_cast<int>(plan.kernels.size());
  return dsrt::Status::ok();
}

dsrt::Status attachKernels(dsp::PlanT &plan, const AttachKernelsOptions &options,
                           AttachKernelsReport &report) {
  return emitKernels(plan, selectKernels(plan, options.weightDTypes), options, report);
}

} // namespace dsc::codegen
