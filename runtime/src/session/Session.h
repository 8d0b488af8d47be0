// A plan on one device for one rank (docs/design.md §5): what the generator, the C API and the
// tools drive, whichever backend runs it. The CPU backend (cpu/Session.h) is the reference;
// the CUDA backend (cuda/) runs the same plans.
#ifndef DSRT_SESSION_SESSION_H
#define DSRT_SESSION_SESSION_H

#include "core/Status.h"
#include "core/Tensor.h"
#include "ops/Ops.h"
#include "plan/PlanFile.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dsrt {

namespace ops {
class Collectives;
}
namespace cuda {
class DeviceCollectives;
struct DriverApi;
}

// Cpu runs the fast kernels; CpuReference the reference kernels (ops/Ops.h, SessionState).
enum class DeviceKind { Cpu, Cuda, CpuReference };

// Bytes a session holds, for dsbench and dsp-dump's per-rank tables.
struct SessionMemory {
  uint64_t weights = 0;
  uint64_t arena = 0;
  uint64_t kvCache = 0;
  uint64_t other = 0;  // kernels, workspaces, staging
};

// What a session has done on its device since it was created (dsrt_session_stats).
struct SessionStats {
  uint64_t kernelLaunches = 0;  // kernels and GEMMs issued eagerly (not inside a graph)
  uint64_t fallbackSteps = 0;   // step runs through the host fallback
  uint64_t graphCaptures = 0;   // CUDA graphs captured
  uint64_t graphReplays = 0;    // CUDA graphs launched
  uint64_t bytesUploaded = 0;   // host to device
  uint64_t bytesDownloaded = 0; // device to host
};

class Session {
public:
  virtual ~Session() = default;

  virtual const PlanFile &plan() const = 0;
  // The program named `name`, or null.
  virtual const dsp::Program *program(std::string_view name) const = 0;
  // "cpu", or "cuda:0 (NVIDIA H100 80GB HBM3)".
  virtual std::string deviceName() const = 0;
  virtual DeviceKind device() const = 0;
  virtual SessionMemory memory() const = 0;
  // Counters of device work; zeros where the backend has no device (the CPU).
  virtual SessionStats stats() const { return {}; }
  // Strict device mode (docs/cuda-backend.md): a step through the host fallback, a failed
  // graph capture or a decode run eagerly where a graph was expected is an error. The CPU
  // backend has nothing to fall back from and ignores it.
  virtual void setStrict(bool strict) { (void)strict; }

  // Copies `value` (host memory) in as input `index` of `program`. The dtype must match,
  // the rank too, static dimensions exactly, dynamic ones within the plan's limits.
  virtual Status setInput(std::string_view program, size_t index, const TensorRef &value) = 0;
  // Runs every step of `program`; all its inputs must have been set. Returns when the
  // outputs can be read.
  virtual Status run(std::string_view program) = 0;
  // Output `index` of the last run of `program`, in host memory; valid until the next run.
  virtual Status output(std::string_view program, size_t index, TensorRef &out) = 0;
  // Whether the plan's attention keeps its keys and values in this session (the prefill and
  // decode programs), rather than taking them as program inputs.
  virtual bool hasKvCache() const = 0;
  // For each batch row of output `index` of the last run of `program` (logits
  // [batch, ..., vocab], any float dtype), the `count` largest logits of the last position,
  // descending, equal logits by lower index (std::stable_sort's order, what the generator's
  // sampling takes), as f32 values and vocabulary indices. The default reads output() and
  // selects on the host; a device backend may select where the logits are and copy back
  // only the candidates.
  virtual Status topLogits(std::string_view program, size_t index, int64_t count,
                           std::vector<std::vector<float>> &values,
                           std::vector<std::vector<int64_t>> &ids);

  // The serving engine's paged KV cache (docs/serving.md), where the session was created
  // with one (createPagedSession): before each run of a session program, each row of its
  // batch is described as one new token of a sequence, at its position, with the blocks of
  // that sequence. Backends without a paged cache refuse.
  virtual Status setPagedRows(const std::vector<ops::KvPagedRow> &rows) {
    (void)rows;
    return Status::error(deviceName() + " sessions have no paged KV cache");
  }
  // The blocks of the paged KV cache's pool (0 without one): PagedKvOptions::blocks, or as
  // many as its memoryFraction gave.
  virtual int64_t pagedKvBlocks() const { return 0; }
  // Beam search (generate/BeamSearch.cpp): row b of the session's KV cache becomes what row
  // sources[b] held, for the first `positions` positions of every layer. Backends without it
  // refuse.
  virtual Status reorderKvRows(const std::vector<int64_t> &sources, int64_t positions) {
    (void)sources;
    (void)positions;
    return Status::error(deviceName() + " sessions cannot reorder their KV cache's rows, "
                         "which beam search needs: it runs on the CPU backend");
  }

  // The device's memory bandwidth as a large copy on it measures it (bytes read plus bytes
  // written per second), the roofline dsbench reports achieved bandwidth against.
  virtual Status measureCopyBandwidth(uint64_t bytes, double &bytesPerSecond) = 0;
};

// A session for `rank` of `plan` on `device`. `collectives` (kept, not owned) joins it to
// the plan's other ranks; it must have the plan's rank count and `rank`. On the GPU,
// `deviceCollectives` (kept, not owned; NCCL) carries the collectives when given; otherwise
// they are staged through host memory over `collectives`. Cuda without a usable GPU or
// driver falls back to the CPU backend and says so once on stderr.
// Session::topLogits's selection over host logits, for backends that override it and fall
// back to it.
Status hostTopLogits(const TensorRef &logits, int64_t count,
                     std::vector<std::vector<float>> &values,
                     std::vector<std::vector<int64_t>> &ids);

Status createSession(std::shared_ptr<PlanFile> plan, int rank, DeviceKind device,
                     ops::Collectives *collectives, std::unique_ptr<Session> &out,
                     cuda::DeviceCollectives *deviceCollectives = nullptr);

// The KV cache as the serving engine keeps it: per layer, `blocks` blocks of `blockSize`
// positions, instead of max_batch rows of max_seq_len.
struct PagedKvOptions {
  int64_t blockSize = 0;
  int64_t blocks = 0;
  // In (0, 1], on CUDA: the pool is as many blocks (at most gpuMostBlocks) as this fraction
  // of the GPU's free memory holds once the session's weights, arena and kernels are placed
  // (Session::pagedKvBlocks says how many). A session that falls back to the CPU, and every
  // CPU session, has `blocks`.
  double memoryFraction = 0;
  int64_t gpuMostBlocks = 0;
  // The programs the session runs (empty: all); its arena is sized for them alone.
  std::vector<std::string> programs;
  // CpuSessionOptions::rowInvariant (the CPU backends; cuBLASLt's choices are its own).
  bool rowInvariant = false;
  // CpuSessionOptions::exactFloatRows (the CPU backends).
  bool exactFloatRows = false;
  // CpuSessionOptions::kvInt8 (the CPU backends only).
  bool int8Cache = false;
};
// Tests: the CUDA sessions these factories create use `driver` (the fake driver of
// test/cuda), null: the process's own.
void setCudaDriverForTests(const cuda::DriverApi *driver);

// As createSession, with the paged KV cache: on the CPU backends, or on the GPU, whose
// paged attention kernels a serving plan's `step` program carries (dsc --serving; a plan
// without them runs its attention through the host fallback). Cuda without a usable GPU
// falls back to the CPU as createSession does.
Status createPagedSession(std::shared_ptr<PlanFile> plan, int rank, DeviceKind device,
                          ops::Collectives *collectives, const PagedKvOptions &paged,
                          std::unique_ptr<Session> &out);

} // namespace dsrt

#endif
