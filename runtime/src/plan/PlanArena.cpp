#include "plan/PlanArena.h"

#include <algorithm>

namespace dsrt {
namespace {

template <typename T> uint32_t length(const flatbuffers::Vector<T> *vector) {
  return vector ? vector->size() : 0;
}

uint64_t arenaUse(const dsp::Plan &plan, uint32_t index, int depth) {
  uint64_t end = 0;
  // A verified plan's branches form no cycle; the depth bound keeps an unverified one from
  // recursing without end.
  if (depth > 16 || index >= length(plan.programs()))
    return end;
  const dsp::Program &program = *plan.programs()->Get(index);
  for (uint32_t s = 0; s < length(program.steps()); ++s) {
    const dsp::Step &step = *program.steps()->Get(s);
    for (uint32_t o = 0; o < length(step.outputs()); ++o) {
      int32_t id = step.outputs()->Get(o);
      if (id < 0 || static_cast<uint32_t>(id) >= length(plan.tensors()))
        continue;
      const dsp::Tensor &tensor = *plan.tensors()->Get(static_cast<uint32_t>(id));
      if (tensor.kind() == dsp::TensorKind::activation)
        end = std::max<uint64_t>(end, tensor.arena_offset() + tensor.arena_bytes());
    }
    for (uint32_t b = 0; b < length(step.branches()); ++b)
      end = std::max(end, arenaUse(plan, static_cast<uint32_t>(step.branches()->Get(b)),
                                   depth + 1));
  }
  return end;
}

} // namespace

uint64_t programArenaUse(const dsp::Plan &plan, uint32_t index) {
  return arenaUse(plan, index, 0);
}

} // namespace dsrt
