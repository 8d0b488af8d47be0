// A plan on one GPU for one rank (docs/cuda-backend.md): the weights uploaded in their
// stored dtype, one arena allocation laid out by the plan's offsets, the KV cache on the
// device, and an executor that runs each step on the host (shape arithmetic), on the device
// (GpuOps.h launchers) or through the fallback (reference kernels with copies). The decode
// program is captured into CUDA graphs per batch and mask-width bucket and replayed.
#ifndef DSRT_CUDA_CUDASESSION_H
#define DSRT_CUDA_CUDASESSION_H

#include "core/Status.h"
#include "core/Tensor.h"
#include "cuda/CudaDriver.h"
#include "cuda/GpuOps.h"
#include "ops/Ops.h"
#include "plan/PlanFile.h"
#include "session/Session.h"

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace dsrt::cuda {

class CublasLt;

struct CudaSessionOptions {
  const DriverApi *driver = nullptr;             // null: processDriver()
  GpuOpFn (*findOp)(std::string_view) = nullptr;  // null: findGpuOp (tests inject launchers)
  // Ops whose launchers need no generated kernel (null: the collectives). A step of any
  // other op whose Step.kernels is empty (a CPU-only plan, a rule that declined) runs
  // through the fallback.
  bool (*launchesWithoutKernels)(std::string_view op) = nullptr;
  size_t uploadChunkBytes = size_t(64) << 20;    // per pinned staging buffer
  bool graphs = true;                            // DSRT_CUDA_GRAPHS=0 also turns them off
  // Strict device mode (Session::setStrict); DSRT_STRICT_DEVICE=1 also turns it on.
  bool strict = false;
  ops::Collectives *collectives = nullptr;       // the rank's host group (kept, not owned)
  // NCCL (kept, not owned); without it a multi-rank session stages `collectives` through
  // host memory.
  DeviceCollectives *deviceCollectives = nullptr;
  // The serving engine's paged KV cache (session/Session.h's PagedKvOptions): per layer
  // `kvBlocks` blocks of `kvBlockSize` positions on the device; 0 keeps the dense cache.
  int64_t kvBlockSize = 0;
  int64_t kvBlocks = 0;
  // PagedKvOptions::memoryFraction: with it, kvBlocks is the most, and the pool as many
  // blocks as this fraction of the GPU's free memory holds once the weights, the arena and
  // the kernels are placed (allocateKvCache runs last).
  double kvMemoryFraction = 0;
  // The programs this session runs (empty: every one): the arena is sized for them alone,
  // and the others are refused, as CpuSessionOptions::onlyPrograms.
  std::vector<std::string> onlyPrograms;
};

// DSRT_STRICT_DEVICE=1: every CUDA session is strict (CudaSessionOptions::strict), and a
// DSRT_DEVICE_CUDA session without a usable GPU is an error instead of the CPU.
bool strictDeviceFromEnvironment();

// Where the last run of a program ran each step.
enum class StepPlacement : uint8_t { NotRun, Host, Device, Fallback, If };

// The buckets a captured decode graph is specialised for: powers of two up to max_batch,
// multiples of 64 up to max_seq_len (the largest bucket is the limit itself).
int64_t batchBucket(int64_t batch, int64_t maxBatch);
int64_t maskWidthBucket(int64_t width, int64_t maxWidth);

class CudaSession final : public Session {
public:
  static Status create(std::shared_ptr<PlanFile> plan, int rank,
                       const CudaSessionOptions &options, std::unique_ptr<CudaSession> &out);
  ~CudaSession() override;
  CudaSession(const CudaSession &) = delete;
  CudaSession &operator=(const CudaSession &) = delete;

  const PlanFile &plan() const override { return *plan_; }
  const dsp::Program *program(std::string_view name) const override;
  std::string deviceName() const override;
  DeviceKind device() const override { return DeviceKind::Cuda; }
  SessionMemory memory() const override { return memory_; }
  SessionStats stats() const override { return stats_; }
  void setStrict(bool strict) override { strict_ = strict; }
  bool strict() const { return strict_; }
  Status setInput(std::string_view program, size_t index, const TensorRef &value) override;
  Status run(std::string_view program) override;
  Status output(std::string_view program, size_t index, TensorRef &out) override;
  // On the device with the plan's sampling kernel (ModelInfo.sampling_kernel) when the
  // logits are f32 there and count is at most kMaxDeviceTopLogits; Session's otherwise.
  Status topLogits(std::string_view program, size_t index, int64_t count,
                   std::vector<std::vector<float>> &values,
                   std::vector<std::vector<int64_t>> &ids) override;
  static constexpr int64_t kMaxDeviceTopLogits = 1024;
  bool hasKvCache() const override { return !kvLayers_.empty(); }
  Status measureCopyBandwidth(uint64_t bytes, double &bytesPerSecond) override;
  // The engine's rows for the next run (CudaPaged.cpp): checked, then uploaded in one copy.
  Status setPagedRows(const std::vector<ops::KvPagedRow> &rows) override;
  int64_t pagedKvBlocks() const override {
    return hostKvMirror_.blockSize != 0 ? pagedRows_.blocks : 0;
  }
  // Beam search's moves of the dense cache's rows (CudaResources.cpp): strided copies on
  // the session's stream through scratch memory, ordered before the next program's steps.
  Status reorderKvRows(const std::vector<int64_t> &sources, int64_t positions) override;

  // For tests and diagnostics.
  const std::vector<StepPlacement> &lastPlacements(std::string_view program) const;
  size_t graphCount() const { return graphs_.size(); }
  bool hasGraph(std::string_view program, int64_t batch, int64_t maskWidth) const;
  size_t graphReplays() const { return graphReplays_; }
  // The device range the weights were uploaded to, and each weight's place in it.
  DevicePtr weightBase() const { return weightBase_; }
  DevicePtr weightDevicePointer(int tensorIndex) const;

private:
  friend class CudaStepContext;

  struct Slot {
    dsp::TensorKind kind = dsp::TensorKind::activation;
    DType dtype = DType::Undefined;  // the plan's
    Shape shape;
    bool known = false;  // has a value in this run
    // The device value: arena slot, input or dynamic buffer, or weight.
    DevicePtr device = 0;
    uint64_t deviceCapacity = 0;
    DType deviceDType = DType::Undefined;  // a weight's stored dtype; `dtype` otherwise
    bool deviceValid = false;
    // Known on the host from constants and shapes alone (constants, host-step results).
    bool hostKnown = false;
    const uint8_t *host = nullptr;
    std::vector<uint8_t> hostStorage;
    // Where host values are uploaded: never reused by other tensors and never freed while
    // the session lives, so a captured graph may read it on every replay.
    DevicePtr hostCopy = 0;
    uint64_t hostCopyCapacity = 0;
    std::vector<uint8_t> hostCopyBytes;  // what hostCopy holds
    // A captured graph reads hostCopy: other values go to a new buffer, never over it.
    bool hostCopyCaptured = false;
    // Weights read by generic-path ops: a copy converted to `dtype`.
    DevicePtr converted = 0;
    std::vector<uint8_t> hostConverted;  // for the fallback, converted on first use
    // Program inputs as the caller gave them (uploaded when the program runs).
    std::vector<uint8_t> inputValue;
    Shape inputShape;
    bool inputSet = false;
  };
  struct CompiledStep {
    std::string op;
    ops::AttrMap attrs;
    GpuOpFn launcher = nullptr;
    bool readsStoredWeights = false;  // a tfm op: its kernels take weights as stored
    // Whether input `index` is a weight read as stored. tfm.attention's q/k norm scales and
    // sinks (inputs 8 to 10) are read as f32 whatever they are stored as: int8 and int4 plans
    // store float weights in f16, and Qwen3's int8 plans failed in the launcher for it.
    bool readsStored(size_t index) const {
      return readsStoredWeights && !(op == "tfm.attention" && index >= 8);
    }
    bool fallbackOnly = false;        // its launcher found no kernel in the plan
  };
  // A captured decode program for one bucket.
  struct Graph {
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    std::vector<Shape> outputShapes;  // padded, as the capture placed them
    bool failed = false;              // could not be captured: the bucket runs eagerly
    bool hasCollectives = false;      // a replay's wait is guarded (DeviceCollectives::guard)
  };
  struct ProgramState {
    std::vector<StepPlacement> placements;
    bool usesCache = false;  // a session-cache program (prefill, decode)
    int idsInput = -1, maskInput = -1;  // positions among the program's inputs
    int eligible = -1;  // graphs: -1 not yet known, 0 no, 1 yes
    bool saidEager = false;
    std::string noGraphWhy;      // eligible 0: why
    bool graphExpected = true;   // eligible 0: false when no graph is ever expected
    int64_t realBatch = -1;  // rows the caller gave when padded, else -1
  };

  CudaSession() = default;
  Status initDevice(int rank);
  Status prepareTensors();
  // The arena holds what the programs run so far need (programArenaUse): a session that
  // generates never allocates `forward`'s logits. A program that needs more grows it, which
  // moves every activation and drops the captured graphs (they hold its addresses).
  Status ensureArena(const dsp::Program &program);
  void placeActivations();
  void destroyGraphs();
  Status uploadWeights();
  Status loadKernels();
  Status allocateKvCache();
  Status compilePrograms();
  Status allocate(size_t bytes, DevicePtr &out, const char *what);
  Status check(CUresult result, const char *call) const;
  // Waits for the stream; under the collectives' watchdog (DeviceCollectives::guard) when
  // collectives were enqueued since the last wait, since those may wait for a dead peer.
  Status sync();
  // Asynchronous copies on the session's stream, counted in stats_.
  Status copyToDevice(DevicePtr dst, const void *src, size_t bytes);
  Status copyToHost(void *dst, DevicePtr src, size_t bytes);
  int programIndex(const dsp::Program &program) const;

  // Executor (CudaExecutor.cpp).
  Status runProgram(const dsp::Program &program);
  Status runStep(const dsp::Step &step, CompiledStep &compiled, StepPlacement &placement);
  Status runIf(const dsp::Step &step, StepPlacement &placement);
  Status runFallback(const dsp::Step &step, CompiledStep &compiled, ops::Inputs &inputs,
                     std::vector<TensorRef> &inputRefs, std::vector<ops::OutputSpec> &specs);
  Status placeDeviceOutput(int tensor, const ops::OutputSpec &spec);
  Status hostView(int tensor, TensorRef &out, std::vector<uint8_t> &download);
  Status deviceView(int tensor, bool storedWeights, DeviceTensor &out);
  Status uploadHostValue(Slot &slot);
  Status downloadKvLayer(int64_t layer);
  Status uploadKvLayer(int64_t layer);
  Status writeSequenceLengths(int32_t past, int32_t total, int32_t maskWidth);
  Status scratch(size_t bytes, DevicePtr &out);
  Status arrivalCounters(size_t count, DevicePtr &out);
  Status gemm(const GemmDesc &gemm);
  bool gemmTakesEpilogue(const GemmDesc &gemm);
  Status openCublas();  // on first use: the library, its handle and workspace
  Status copy2D(DevicePtr dst, size_t dstPitch, DevicePtr src, size_t srcPitch,
                size_t widthBytes, size_t height);
  std::string describe(const dsp::Step &step, size_t index) const;

  // Inputs and graphs (CudaGraphs.cpp).
  Status uploadInputs(const dsp::Program &program, ProgramState &state, int64_t padBatch,
                      int64_t padWidth);
  Status runWithGraphs(const dsp::Program &program, ProgramState &state);
  Status capture(const dsp::Program &program, ProgramState &state, Graph &graph);
  bool graphCandidate(const ProgramState &state, const dsp::Program &program) const;
  // An error only in strict mode, when a graph was expected and cannot be had.
  Status decideGraphs(const dsp::Program &program, ProgramState &state);

  std::shared_ptr<PlanFile> plan_;
  const PlanSection *section_ = nullptr;
  CudaSessionOptions options_;
  const DriverApi *driver_ = nullptr;
  int rank_ = 0;
  CUdevice device_ = 0;
  int ordinal_ = 0;
  int deviceCount_ = 1;  // the GPUs the driver shows
  bool devicePinned_ = false;  // DSRT_CUDA_DEVICE chose ordinal_ for every rank
  bool contextRetained_ = false;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  std::string deviceLabel_;
  int multiprocessors_ = 0;
  int computeCapability_ = 0;

  std::vector<Slot> slots_;
  std::vector<std::vector<CompiledStep>> compiled_;
  std::vector<ProgramState> programs_;
  std::vector<DevicePtr> allocations_;  // freed with the session
  DevicePtr arena_ = 0;
  uint64_t arenaBytes_ = 0;            // allocated at arena_
  std::vector<uint64_t> arenaUse_;     // per program: the arena bytes it needs
  DevicePtr weightBase_ = 0;
  DevicePtr sequenceLengths_ = 0;
  int32_t hostSequenceLengths_[3] = {0, 0, 0};
  bool sequenceLengthsSet_ = false;
  bool currentUsesCache_ = false;  // the running program is a session-cache program

  std::vector<CUmodule> modules_;
  std::vector<CUfunction> functions_;  // per plan kernel
  std::vector<int> functionSharedBytes_;  // the dynamic shared memory each allows
  // The occupancy calculator's answers, by (kernel, threads, dynamic shared memory).
  std::map<std::tuple<int, unsigned, uint32_t>, int> residentBlocks_;

  std::vector<DeviceKvLayer> kvLayers_;
  // The paged cache (CudaPaged.cpp): the pool's shape, and the rows of the next run as
  // attention_*'s PAGED kernels read them (DevicePagedRows), on the host and the device.
  Status initPagedCache();
  Status padPagedRows(int64_t batch);  // a captured step's bucket
  DevicePagedRows pagedRows_;
  bool pagedRowsSet_ = false;
  std::vector<int32_t> hostPagedRows_;
  size_t pagedRowsCapacity_ = 0;  // rows at pagedRows_.data
  ops::KvCache hostKvMirror_;  // the fallback's view of the cache
  std::vector<std::vector<float>> hostKvStorage_;

  struct ScratchBlock {
    DevicePtr base = 0;
    size_t size = 0, used = 0;
  };
  std::vector<ScratchBlock> scratch_;
  // StepContext::arrivalCounters: zeroed when allocated, left at zero by the kernels. A
  // larger need replaces the block without freeing it (captured graphs keep its address).
  DevicePtr arrivalCounters_ = 0;
  size_t arrivalCapacity_ = 0;

  std::unique_ptr<CublasLt> cublas_;
  DevicePtr cublasWorkspace_ = 0;

  std::unique_ptr<DeviceCollectives> stagedCollectives_;
  DeviceCollectives *deviceCollectives_ = nullptr;
  bool collectivesPending_ = false;  // enqueued on the stream since the last sync
  std::string runningProgram_;       // what a timed-out wait names

  bool capturing_ = false;
  bool syncEachStep_ = false;  // DSRT_CUDA_SYNC_STEPS=1: find the step a kernel fault is in
  // DSRT_CUDA_LAUNCH_COUNTS=1: eager launches per plan kernel, printed on stderr when the
  // session ends (which kernels a run took, e.g. the paged prefill: test/gpu), else empty.
  std::vector<int64_t> launchCounts_;
  std::string captureProblem_;  // why the capture under way cannot complete
  std::map<std::tuple<int, int64_t, int64_t>, std::unique_ptr<Graph>> graphs_;
  size_t graphReplays_ = 0;
  bool strict_ = false;
  SessionStats stats_;

  std::vector<uint8_t> outputStorage_;
  // topLogits's device results: values [rows, count] f32, then ids [rows, count] int64.
  DevicePtr topLogitsBuffer_ = 0;
  size_t topLogitsCapacity_ = 0;
  std::vector<std::vector<uint8_t>> outputs_;
  std::vector<std::unique_ptr<uint8_t[]>> constantStorage_;  // aligned copies of constants
  SessionMemory memory_;
};

} // namespace dsrt::cuda

#endif
