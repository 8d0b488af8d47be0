// How large a CPU session's activation arena must be: for every program (the plan's
// arena_bytes), or for some of them alone (the serving engine's sessions run `step` only,
// where `prefill` would need max_batch x max_seq_len tokens' worth); and how much the
// machine has, which no arena may exceed.
#ifndef DSRT_CPU_SESSIONARENA_H
#define DSRT_CPU_SESSIONARENA_H

#include "plan/PlanFile.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dsrt {

// The end of the last arena slot that `programs` (and the branches they take) use.
uint64_t arenaBytesOf(const dsp::Plan &plan, const std::vector<std::string> &programs);

// This machine's physical memory in bytes (UINT64_MAX where it cannot be read).
uint64_t physicalMemoryBytes();
// Memory free for a new allocation without swapping: the kernel's MemAvailable (free pages
// plus the page cache and slabs it can reclaim), else sysconf's free pages.
uint64_t availableMemoryBytes();

} // namespace dsrt

#endif
