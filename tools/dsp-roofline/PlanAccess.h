// Small readers of plan tables shared by the model's files (absent entries read as empty).
#ifndef DSP_ROOFLINE_PLANACCESS_H
#define DSP_ROOFLINE_PLANACCESS_H

#include "plan/PlanFile.h"

#include <string>
#include <string_view>

namespace dsrt::roofline::plan_access {

inline std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

template <typename T> uint32_t length(const flatbuffers::Vector<T> *v) { return v ? v->size() : 0; }

inline const dsp::Attr *findAttr(const dsp::Step &step, std::string_view name) {
  for (uint32_t i = 0; i < length(step.attrs()); ++i)
    if (step.attrs()->Get(i)->name() && step.attrs()->Get(i)->name()->string_view() == name)
      return step.attrs()->Get(i);
  return nullptr;
}

inline int64_t intAttr(const dsp::Step &step, std::string_view name, int64_t fallback) {
  const dsp::Attr *attr = findAttr(step, name);
  return attr && attr->kind() == dsp::AttrKind::int_ ? attr->i() : fallback;
}

inline int32_t inputAt(const dsp::Step &step, uint32_t position) {
  return position < length(step.inputs()) ? step.inputs()->Get(position) : -1;
}

} // namespace dsrt::roofline::plan_access

#endif
