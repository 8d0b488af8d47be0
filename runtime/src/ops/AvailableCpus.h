// Internal to dsrt_ops: how many threads the kernels should run on by default, which is what
// the process may actually run on. std::thread::hardware_concurrency counts the machine's
// online CPUs, so a process confined to 2 CPUs of a 16-CPU host (taskset, a container's
// cpuset, a Kubernetes CPU limit, a Slurm allocation) had started 16 spinning workers: 8
// threads on 1 CPU served GPT-2 int8 3.6x slower than 1 (docs/cpu-backend.md, "Threads").
#ifndef DSRT_OPS_AVAILABLECPUS_H
#define DSRT_OPS_AVAILABLECPUS_H

#include <string>

namespace dsrt::ops {

// CPUs a cgroup's CPU quota allows, rounded up: cgroup v2's cpu.max ("QUOTA PERIOD", or "max
// PERIOD" for none) or v1's quota and period in microseconds (a quota <= 0 is none). 0 where
// there is no quota or the text is not one.
int cpusOfQuota(const std::string &cpuMax);
int cpusOfQuota(long long quotaMicros, long long periodMicros);

// The CPUs the calling thread may run on (its affinity mask), bounded by the CPU quota of its
// cgroup and of every cgroup above it; at least 1.
int availableCpus();

// DSRT_NUM_THREADS where set to an integer from 1 to 4096, else availableCpus() (0 is the
// default; any other value is warned of once on stderr). Read once.
int defaultThreadCount();

} // namespace dsrt::ops

#endif
