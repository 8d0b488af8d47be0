// Which plan steps are views: they pass their input's bytes through unchanged, so that
// dsc-plan-memory can give the output its input's arena slot (compiler/lowering/
// PlanMemory.cpp, whose isView says the same on the plan dialect) and the kernels then copy
// nothing. One definition for the tools that read plans (dsp-dump, dsp-roofline).
#ifndef DSRT_PLAN_PLANVIEWS_H
#define DSRT_PLAN_PLANVIEWS_H

#include "plan_generated.h"

namespace dsrt {

// Reshape, Flatten, Squeeze, Unsqueeze, Identity, or a Cast to its input's dtype.
bool isView(const dsp::Plan &plan, const dsp::Step &step);

// A view whose input and output are both arena tensors (so that the planner may alias them).
bool isViewOfArenaTensor(const dsp::Plan &plan, const dsp::Step &step);

// A view of an arena tensor whose output sits in its input's slot: it copies nothing.
bool sharesInputSlot(const dsp::Plan &plan, const dsp::Step &step);

// A view (not a Cast) of a program input into an arena tensor: dsc-plan-memory cannot alias
// it (a program input has a buffer of its own), so the CUDA session hands the output the
// input's buffer at run time, and it copies nothing either.
bool viewsProgramInput(const dsp::Plan &plan, const dsp::Step &step);

} // namespace dsrt

#endif
