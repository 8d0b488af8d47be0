#include "plan/PlanViews.h"

#include <string_view>

namespace dsrt {
namespace {

const dsp::Tensor *tensorAt(const dsp::Plan &plan, const flatbuffers::Vector<int32_t> *list,
                            uint32_t position) {
  if (!list || position >= list->size() || !plan.tensors())
    return nullptr;
  int32_t index = list->Get(position);
  return index >= 0 && static_cast<uint32_t>(index) < plan.tensors()->size()
             ? plan.tensors()->Get(index)
             : nullptr;
}

bool isArenaTensor(const dsp::Tensor *tensor) {
  return tensor && tensor->kind() == dsp::TensorKind::activation && tensor->arena_bytes() > 0;
}

} // namespace

bool isView(const dsp::Plan &plan, const dsp::Step &step) {
  std::string_view op = step.op() ? step.op()->string_view() : std::string_view();
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" ||
      op == "Identity")
    return true;
  const dsp::Tensor *in = tensorAt(plan, step.inputs(), 0);
  const dsp::Tensor *out = tensorAt(plan, step.outputs(), 0);
  return op == "Cast" && in && out && in->dtype() == out->dtype();
}

bool isViewOfArenaTensor(const dsp::Plan &plan, const dsp::Step &step) {
  return isView(plan, step) && isArenaTensor(tensorAt(plan, step.inputs(), 0)) &&
         isArenaTensor(tensorAt(plan, step.outputs(), 0));
}

bool sharesInputSlot(const dsp::Plan &plan, const dsp::Step &step) {
  return isViewOfArenaTensor(plan, step) &&
         tensorAt(plan, step.inputs(), 0)->arena_offset() ==
             tensorAt(plan, step.outputs(), 0)->arena_offset();
}

bool viewsProgramInput(const dsp::Plan &plan, const dsp::Step &step) {
  std::string_view op = step.op() ? step.op()->string_view() : std::string_view();
  const dsp::Tensor *in = tensorAt(plan, step.inputs(), 0);
  const dsp::Tensor *out = tensorAt(plan, step.outputs(), 0);
  return op != "Cast" && isView(plan, step) && in && in->kind() == dsp::TensorKind::input &&
         isArenaTensor(out) && in->dtype() == out->dtype();
}

} // namespace dsrt
