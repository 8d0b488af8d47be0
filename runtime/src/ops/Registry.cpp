// The table of kernels and the entry points of Ops.h: argument checking common to every op,
// then dispatch to the kernel.
#include "ops/Kernel.h"
#include "ops/OpTraits.h"

#include <algorithm>

namespace dsrt::ops {
namespace {

const std::vector<KernelInfo> &kernels() {
  static const std::vector<KernelInfo> table = [] {
    std::vector<KernelInfo> all;
    addElementwiseKernels(all);
    addBinaryKernels(all);
    addCastKernels(all);
    addMatMulKernels(all);
    addNormalizationKernels(all);
    addReduceKernels(all);
    addShapeKernels(all);
    addMovementKernels(all);
    addGatherKernels(all);
    addRoutingKernels(all);
    addTransformerKernels(all);
    std::sort(all.begin(), all.end(), [](const KernelInfo &a, const KernelInfo &b) {
      return std::string_view(a.name) < std::string_view(b.name);
    });
    return all;
  }();
  return table;
}

const KernelInfo *findKernel(std::string_view op) {
  const auto &table = kernels();
  auto it = std::lower_bound(table.begin(), table.end(), op,
                             [](const KernelInfo &k, std::string_view name) {
                               return std::string_view(k.name) < name;
                             });
  return it != table.end() && it->name == op ? &*it : nullptr;
}

Status checkArguments(const KernelInfo &kernel, const KernelContext &ctx) {
  int given = static_cast<int>(ctx.inputs.size());
  if (given < kernel.minInputs || (kernel.maxInputs != kAnyCount && given > kernel.maxInputs))
    return ctx.error("takes ", kernel.minInputs,
                     kernel.maxInputs == kAnyCount ? " or more"
                                                   : concat(" to ", kernel.maxInputs),
                     " inputs, not ", given);
  int required = kernel.requiredInputs == kAnyCount ? given : kernel.requiredInputs;
  for (int i = 0; i < given; ++i) {
    const TensorRef *input = ctx.inputs[i];
    if (!input) {
      if (i < required)
        return ctx.error("input ", i, " is required but absent");
      continue;
    }
    if (input->dtype == DType::Undefined || dtypeSize(input->dtype) == 0)
      return ctx.error("input ", i, " has no dtype");
    if (input->elements() < 0)
      return ctx.error("input ", i, " has an invalid shape ", shapeString(input->shape));
  }
  int outputs = static_cast<int>(ctx.numOutputs);
  if (outputs < kernel.minOutputs ||
      (kernel.maxOutputs != kAnyCount && outputs > kernel.maxOutputs))
    return ctx.error("has ", kernel.minOutputs,
                     kernel.maxOutputs == kAnyCount ? " or more"
                                                    : concat(" to ", kernel.maxOutputs),
                     " outputs, not ", outputs);
  return Status::ok();
}

Status inferChecked(const KernelInfo &kernel, const KernelContext &ctx,
                    std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkArguments(kernel, ctx));
  outputs.clear();
  DSRT_RETURN_IF_ERROR(kernel.infer(ctx, outputs));
  if (outputs.size() != ctx.numOutputs)
    return ctx.error("internal error: shape inference gave ", outputs.size(),
                     " outputs for ", ctx.numOutputs);
  for (const OutputSpec &spec : outputs)
    DSRT_RETURN_IF_ERROR(checkShape(ctx, spec.shape, "output shape"));
  return Status::ok();
}

} // namespace

bool readsInputValues(std::string_view op) { return op != "Shape" && op != "Size"; }

bool isSupported(std::string_view op) { return findKernel(op) != nullptr; }

std::vector<std::string> supportedOps() {
  std::vector<std::string> names;
  for (const KernelInfo &kernel : kernels())
    names.emplace_back(kernel.name);
  return names;
}

Status inferShapes(std::string_view op, const AttrMap &attrs, const Inputs &inputs,
                   size_t numOutputs, std::vector<OutputSpec> &outputs,
                   const SessionState *state) {
  const KernelInfo *kernel = findKernel(op);
  if (!kernel)
    return Status::error(concat(op, ": no kernel for this op"));
  KernelContext ctx{op, attrs, inputs, numOutputs, state ? state->cache : nullptr,
                    state ? state->collectives : nullptr, state && state->fastKernels,
                    state && state->rowInvariant, state && state->exactFloatRows};
  return inferChecked(*kernel, ctx, outputs);
}

Status compute(std::string_view op, const AttrMap &attrs, const Inputs &inputs,
               const Outputs &outputs, const SessionState *state) {
  const KernelInfo *kernel = findKernel(op);
  if (!kernel)
    return Status::error(concat(op, ": no kernel for this op"));
  KernelContext ctx{op, attrs, inputs, outputs.size(), state ? state->cache : nullptr,
                    state ? state->collectives : nullptr, state && state->fastKernels,
                    state && state->rowInvariant, state && state->exactFloatRows};
  // Re-deriving the shapes costs little next to the kernel and makes a caller's mistake an
  // error instead of an out-of-bounds write.
  std::vector<OutputSpec> expected;
  DSRT_RETURN_IF_ERROR(inferChecked(*kernel, ctx, expected));
  if (readsInputValues(op))
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i] && inputs[i]->elements() > 0 && !inputs[i]->data)
        return ctx.error("the value of input ", i, " ", kUnknownValue);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorRef *output = outputs[i];
    if (!output)
      return ctx.error("output ", i, " is missing");
    if (output->dtype != expected[i].dtype || output->shape != expected[i].shape)
      return ctx.error("output ", i, " is ", dtypeName(output->dtype), " ",
                       shapeString(output->shape), " but the op produces ",
                       dtypeName(expected[i].dtype), " ", shapeString(expected[i].shape));
    if (output->elements() > 0 && !output->data)
      return ctx.error("output ", i, " has no storage");
  }
  return kernel->compute(ctx, outputs);
}

} // namespace dsrt::ops
