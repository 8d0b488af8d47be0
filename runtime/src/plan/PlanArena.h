// How much of a plan's activation arena each program uses. The programs share one arena
// (dsc-plan-memory gives every activation a slot in it), and `forward`, which keeps every
// position's logits, is usually the largest by far ([max_batch, max_seq, vocab] floats:
// 16.8 GB at 8 x 4096 x 128k): a session that generates (prefill, decode) needs none of
// that, so the CUDA session allocates the arena for the programs it runs (dsp-dump prints
// each program's use).
#ifndef DSRT_PLAN_PLANARENA_H
#define DSRT_PLAN_PLANARENA_H

#include "plan_generated.h"

#include <cstdint>

namespace dsrt {

// The end of the highest arena slot program `index`'s steps write, its If branches'
// included: the bytes of the arena a session that runs it must have. 0 for a program
// index the plan does not have.
uint64_t programArenaUse(const dsp::Plan &plan, uint32_t index);

} // namespace dsrt

#endif
