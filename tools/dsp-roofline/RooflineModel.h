// A performance model of a plan on the CUDA backend (issue 14; bench/roofline/README.md):
// per program, the stream operations one run issues, predicted from the plan alone by the
// decisions the CUDA executor and its launchers take (runtime/src/cuda/CudaExecutor.cpp,
// runtime/src/cuda/ops/*.cpp), and the bytes a run reads (weights, KV cache). A decode step
// at batch 1 is bound by those bytes and by the launches' fixed cost, so
//   predicted time = bytes / bandwidth + stream operations x launch cost.
// Plain C++17 over the plan reader (dsrt_plan): no LLVM, no CUDA, no session.
#ifndef DSP_ROOFLINE_ROOFLINEMODEL_H
#define DSP_ROOFLINE_ROOFLINEMODEL_H

#include "plan/PlanFile.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dsrt::roofline {

// What the run is modelled at. `context` is the number of positions a sequence's attention
// reads from the KV cache (past tokens plus the new one in decode; the prompt in prefill),
// and the new tokens per sequence of every program but decode.
struct Workload {
  int rank = 0;
  int64_t batch = 1;
  int64_t context = 0;
};

// Where the executor runs a step, as CudaSession::lastPlacements reports it.
enum class Placement { Host, Device, Fallback, If };

struct StepCost {
  Placement placement = Placement::Host;
  uint32_t kernels = 0;      // cuLaunchKernel of the plan's generated kernels
  uint32_t gemms = 0;        // cuBLASLt matmuls (the session counts them as launches too)
  uint32_t copies = 0;       // device-to-device copies on the stream
  uint32_t collectives = 0;  // NCCL calls (none for a single rank)
  bool sharedView = false;   // a view whose output is its input's arena slot
};

struct ProgramCost {
  std::string name;
  int64_t newTokens = 0;  // per sequence
  std::vector<StepCost> steps;
  uint64_t kernels = 0, gemms = 0, copies = 0, collectives = 0;
  std::map<std::string, uint64_t> launchesByOp;  // every stream operation, by step op
  size_t host = 0, device = 0, fallback = 0, sharedViews = 0;
  // An If runs one branch, chosen at run time: the larger one is counted.
  bool branchEstimated = false;
  size_t layers = 0;  // the program's attention steps, or the KV cache's layers if more
  uint64_t weightBytes = 0, kvBytes = 0;

  // Launches the session counts (kernel_launches): generated kernels and cuBLASLt.
  uint64_t sessionLaunches() const { return kernels + gemms; }
  // Everything with a launch's fixed cost on the stream.
  uint64_t streamOps() const { return kernels + gemms + copies + collectives; }
  uint64_t totalBytes() const { return weightBytes + kvBytes; }
};

// One layer of the session's KV cache for one rank (session/PlanChecks.h's kvCacheLayout,
// which lives in the CPU session's library: mirrored here). Keys and values take
// `elementBytes` each: 4 for f32, 2 for an f16/bf16 cache (the steps' cache_dtype).
struct KvLayer {
  int64_t kvHeads = 0, headDim = 0;
  int64_t elementBytes = 4;
  const char *dtype = "f32";  // or "f16", "bf16"
};
Status kvCacheLayers(const dsp::Plan &plan, int rank, std::vector<KvLayer> &layers);
// Bytes of keys and values one sequence position takes in every layer together.
uint64_t kvBytesPerPosition(const std::vector<KvLayer> &layers);

// Whether the CUDA backend has a launcher for `op` (runtime/src/cuda/GpuOpRegistry.cpp).
bool hasGpuLauncher(std::string_view op);

// Models program `program` of `plan` (any named program: forward, prefill, decode, ...).
Status modelProgram(const dsp::Plan &plan, const std::string &program, const Workload &workload,
                    ProgramCost &out);

// bytes / bytesPerSecond + streamOps x launchSeconds.
double predictedSeconds(const ProgramCost &cost, double bytesPerSecond, double launchSeconds);

// The assumed launch cost until a GPU run measures one (bench/roofline/README.md).
constexpr double kAssumedLaunchMicroseconds = 2.5;
// Peak HBM bandwidths of the data sheets: H100 SXM5 (HBM3) and H200 (HBM3e).
constexpr double kH100BytesPerSecond = 3.35e12;
constexpr double kH200BytesPerSecond = 4.8e12;

} // namespace dsrt::roofline

#endif
