// Internal to dsrt_ops: a small pool of worker threads for the kernels that pay for it
// (MatMul, Gemm). The size is set by setThreadCount (Ops.h).
#ifndef DSRT_OPS_THREADPOOL_H
#define DSRT_OPS_THREADPOOL_H

#include <cstdint>
#include <functional>

namespace dsrt::ops {

// Runs body(begin, end) over disjoint ranges covering [0, count), in parallel when the
// pool has threads and count exceeds `grain` (the smallest range worth a thread). A call
// made while the pool is busy (another thread's kernel, or a nested call) runs inline.
void parallelFor(int64_t count, int64_t grain,
                 const std::function<void(int64_t, int64_t)> &body);

// The threads parallelFor runs on (setThreadCount's, else the hardware's): for kernels that
// take exactly one range per thread.
int parallelThreads();

} // namespace dsrt::ops

#endif
