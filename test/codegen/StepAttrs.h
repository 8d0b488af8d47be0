// Attributes of a hand-built plan step (the object API), for the kernel-rule tests.
#ifndef DSC_TEST_CODEGEN_STEPATTRS_H
#define DSC_TEST_CODEGEN_STEPATTRS_H

#include "plan_generated.h"

#include <memory>
#include <string>

namespace dsc::codegen::test {

inline void addAttr(dsp::StepT &step, const std::string &name, dsp::AttrKind kind,
                    int64_t i = 0, float f = 0, const std::string &s = {}) {
  auto a = std::make_unique<dsp::AttrT>();
  a->name = name;
  a->kind = kind;
  a->i = i;
  a->f = f;
  a->s = s;
  step.attrs.push_back(std::move(a));
}
inline void intAttr(dsp::StepT &step, const std::string &name, int64_t value) {
  addAttr(step, name, dsp::AttrKind::int_, value);
}
inline void floatAttr(dsp::StepT &step, const std::string &name, float value) {
  addAttr(step, name, dsp::AttrKind::float_, 0, value);
}
inline void stringAttr(dsp::StepT &step, const std::string &name, const std::string &value) {
  addAttr(step, name, dsp::AttrKind::string_, 0, 0, value);
}
inline void typeAttr(dsp::StepT &step, const std::string &name, dsp::DType value) {
  addAttr(step, name, dsp::AttrKind::type);
  step.attrs.back()->type = value;
}

} // namespace dsc::codegen::test

#endif
