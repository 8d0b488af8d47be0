// --threads, for every tool that runs CPU kernels: the process's kernel threads
// (dsrt_set_cpu_threads), as llama.cpp's -t. Header-only: dstools_cli does not link libdsrt.
#ifndef DSTOOLS_CPUTHREADS_H
#define DSTOOLS_CPUTHREADS_H

#include "common/CommandLine.h"
#include "dsrt/dsrt.h"

#include <cstdint>
#include <string>

namespace dstools {

inline void addThreadsOption(CommandLine &commandLine, int32_t &threads) {
  commandLine.integer("--threads", threads, "N",
                      "threads of the CPU kernels (default 0: DSRT_NUM_THREADS, else the CPUs "
                      "this process may run on: its affinity mask and cgroup CPU quota)",
                      0, 4096);
}

// After parse(): sets the count where --threads was given.
inline void applyThreadsOption(CommandLine &commandLine, int32_t threads) {
  if (commandLine.given("--threads") && dsrt_set_cpu_threads(threads) != DSRT_OK)
    commandLine.usageError(std::string("--threads: ") + dsrt_last_error());
}

} // namespace dstools

#endif
