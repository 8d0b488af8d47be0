// A CUDA driver in host memory for the session's tests: device pointers are host addresses,
// copies and memsets happen at once (as if every stream were synchronous), kernel launches
// are recorded instead of run, and a stream capture records what a real capture would and
// flags what a real driver would refuse in one (synchronising, allocating, copying from
// pageable host memory).
#ifndef DSRT_TEST_CUDA_FAKEDRIVER_H
#define DSRT_TEST_CUDA_FAKEDRIVER_H

#include "cuda/CudaDriver.h"

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace dsrt {
class PlanFile;
namespace cuda {
class CudaSession;
}
} // namespace dsrt

namespace dsrt::cuda::fake {

struct HostToDevice {
  CUdeviceptr destination = 0;
  const void *source = nullptr;
  size_t bytes = 0;
  std::vector<uint8_t> data;  // what was copied
};

struct Launch {
  const void *function = nullptr;
  unsigned grid[3] = {}, block[3] = {};
  unsigned sharedBytes = 0;
  bool captured = false;
};

struct State {
  int deviceCount = 1;
  size_t deviceBytes = size_t(1) << 30;  // cuMemGetInfo's total; free is what is not allocated
  std::vector<size_t> freeAnswers;       // each cuMemGetInfo's free bytes
  std::vector<HostToDevice> hostToDevice;
  std::vector<Launch> launches;
  std::set<void *> pinned;
  size_t liveAllocations = 0;
  int captures = 0, instantiations = 0, graphLaunches = 0;
  bool capturing = false;
  // cuStreamEndCapture fails (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), as when something in
  // the capture was not capturable, while this is positive; each failure counts it down.
  int failCaptures = 0;
  std::vector<std::string> captureViolations;  // what a real capture would have refused
  std::vector<std::string> moduleImages;      // the first bytes of each loaded image
  std::vector<std::string> functionNames;     // each cuModuleGetFunction's name
  std::vector<const void *> functions;        // and the handle it returned
  std::vector<int> sharedMemoryLimits;        // each MAX_DYNAMIC_SHARED_SIZE_BYTES set
  // What cuOccupancyMaxActiveBlocksPerMultiprocessor answers, and each query's block size
  // and dynamic shared memory.
  int residentBlocks = 3;
  std::vector<std::pair<int, size_t>> occupancyQueries;
};

State &state();
void reset();
// The fake's entry points.
const DriverApi &driver();

// Opens $`variable`'s plan, else `fallbackPath` (into `plan`), and creates a session of it
// over this driver after reset(), graphs off so that every step runs through its launcher;
// with `launchCounts` the session counts its launches per kernel (DSRT_CUDA_LAUNCH_COUNTS=1).
// `plan` is left null, and `session` too, where the plan has no kernels (no NVRTC: the
// caller skips).
Status openSession(const char *variable, const char *fallbackPath, bool launchCounts,
                   std::shared_ptr<PlanFile> &plan, std::unique_ptr<CudaSession> &session);
// Ends a session created with launch counts and returns what it printed when it ended
// ("dsrt: N launches of KERNEL"): the launches by kernel name.
std::map<std::string, long long> endCountingSession(std::unique_ptr<CudaSession> &session);

} // namespace dsrt::cuda::fake

#endif
