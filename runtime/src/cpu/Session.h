// A plan on the CPU for one rank: its weight section mapped, one activation arena, and an
// executor that runs a program's steps with the fast kernels (runtime/src/ops/fast) where an
// op has one, or with the reference kernels only (runtime/src/ops).
#ifndef DSRT_CPU_SESSION_H
#define DSRT_CPU_SESSION_H

#include "core/Status.h"
#include "core/Tensor.h"
#include "ops/Ops.h"
#include "plan/PlanFile.h"
#include "session/Session.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dsrt {

struct CpuSessionOptions {
  // The reference kernels only, every weight widened to the dtype its steps compute in: the
  // oracle the fast kernels are tested against.
  bool reference = false;
  // The serving engine's paged KV cache (session/Session.h's PagedKvOptions); a block size
  // of 0 keeps the dense cache of max_batch sequences.
  int64_t kvBlockSize = 0;
  int64_t kvBlocks = 0;
  // The programs this session runs (empty: every one): the arena is then only as large as
  // their activations need, and the others are refused. The serving engine runs `step`
  // alone, whose rows are tokens, where `prefill` would need max_batch x max_seq_len.
  std::vector<std::string> onlyPrograms;
  // ops::SessionState::rowInvariant: the serving engine's sessions, so that a request's
  // tokens do not depend on what else a step computes.
  bool rowInvariant = false;
  // ops::SessionState::exactFloatRows (with rowInvariant: the engine's batch_invariant 2).
  bool exactFloatRows = false;
  // With the paged cache: keys and values stored as int8 with a scale per 32 values
  // (ops::KvCacheLayer's scales), half an f16 cache's bytes; the plan's dtype otherwise.
  bool kvInt8 = false;
};

class CpuSession final : public Session {
public:
  // Maps `rank`'s section (verifying its checksum) and allocates the arena. A weight stored
  // in another dtype than the program computes in stays as stored where every step reading
  // it has a fast kernel for that dtype (linear layers, LM head, embedding); otherwise, and
  // always with `options.reference`, it is converted once here.
  // `collectives` (kept, not owned) joins the session to the plan's other ranks; it must have
  // the plan's rank count and `rank`. Without it, a step that needs the other ranks fails.
  static Status create(std::shared_ptr<PlanFile> plan, int rank, std::unique_ptr<CpuSession> &out,
                       ops::Collectives *collectives = nullptr,
                       const CpuSessionOptions &options = {});
  // With DSRT_PROFILE=1, prints the time spent per op over the session's life on stderr;
  // with DSRT_PROFILE=layers, also per program, layer and op.
  ~CpuSession() override;

  const PlanFile &plan() const override { return *plan_; }
  // The program named `name`, or null.
  const dsp::Program *program(std::string_view name) const override;
  std::string deviceName() const override { return reference_ ? "cpu-reference" : "cpu"; }
  DeviceKind device() const override { return DeviceKind::Cpu; }
  SessionMemory memory() const override;
  Status measureCopyBandwidth(uint64_t bytes, double &bytesPerSecond) override;

  // Copies `value` in as input `index` of `program`. The dtype must match, the rank too,
  // static dimensions exactly, dynamic ones within the plan's limits.
  Status setInput(std::string_view program, size_t index, const TensorRef &value) override;
  // Runs every step of `program`; all its inputs must have been set.
  Status run(std::string_view program) override;
  // Output `index` of the last run of `program`; valid until the next run.
  Status output(std::string_view program, size_t index, TensorRef &out) override;
  // Whether the plan's attention keeps its keys and values in this session (the prefill and
  // decode programs), rather than taking them as program inputs.
  bool hasKvCache() const override { return !kvCache_.layers.empty(); }
  Status setPagedRows(const std::vector<ops::KvPagedRow> &rows) override;
  Status reorderKvRows(const std::vector<int64_t> &sources, int64_t positions) override;
  int64_t pagedKvBlocks() const override {
    return kvCache_.blockSize != 0 && !kvCache_.layers.empty() ? kvCache_.layers[0].batch : 0;
  }

private:
  // What the executor knows of one tensor of the plan while it runs.
  struct Slot {
    DType dtype = DType::Undefined;
    Shape shape;
    uint8_t *data = nullptr;   // arena, owned storage, or read-only mapped bytes
    uint64_t capacity = 0;     // bytes available at `data`
    bool known = false;        // shape and data are set
  };
  struct CompiledStep {
    std::string op;
    ops::AttrMap attrs;
  };

  CpuSession() = default;
  Status findProgram(std::string_view name, const dsp::Program *&out) const;
  Status runProgram(const dsp::Program &program);
  Status runStep(const dsp::Step &step, const CompiledStep &compiled, size_t index);
  Status runIf(const dsp::Step &step);
  Status allocateKvCache(const CpuSessionOptions &options);
  // Per tensor: whether every step reading it takes it in its stored narrow dtype.
  std::vector<bool> narrowReaders() const;
  std::string describe(const dsp::Step &step, size_t index) const;

  std::shared_ptr<PlanFile> plan_;
  const PlanSection *section_ = nullptr;
  std::vector<Slot> slots_;
  // Weights stored in another dtype, and constants copied out of the header.
  std::vector<std::unique_ptr<uint8_t[]>> converted_;
  std::vector<std::vector<uint8_t>> inputStorage_;     // per tensor (inputs, dynamic
                                                       // activations); reused across runs
  std::unique_ptr<uint8_t[]> arenaStorage_;
  uint8_t *arena_ = nullptr;
  // Per step of every program, in plan order: kernel name and decoded attributes.
  std::vector<std::vector<CompiledStep>> compiled_;
  ops::KvCache kvCache_;
  ops::Collectives *collectives_ = nullptr;  // the rank's group; null for one rank
  // calloc'ed: large blocks come from the OS already zero and are committed page by page as
  // they are first written, so a serving pool's budget is an upper bound, not its RSS.
  struct FreeDeleter {
    void operator()(float *p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<float, FreeDeleter>> kvStorage_;
  SessionMemory memory_;
  bool reference_ = false;
  bool rowInvariant_ = false;
  bool exactFloatRows_ = false;
  std::vector<std::string> onlyPrograms_;  // CpuSessionOptions::onlyPrograms
  // DSRT_PROFILE=1: seconds and runs per op. DSRT_PROFILE=layers adds, per program, the
  // seconds per run of each op in each layer (stepLayer_: a step's layer, or -1).
  bool profile_ = false, profileLayers_ = false;
  size_t runningProgram_ = 0;
  std::vector<std::vector<int64_t>> stepLayer_;
  std::vector<int64_t> programRuns_;
  std::vector<std::map<std::pair<int64_t, std::string>, double>> profileByLayer_;
  void printLayerProfile() const;
  std::map<std::string, std::pair<double, int64_t>> profileByOp_;  // `other`: weights converted from their stored dtype
};

// A plan Attr as a kernel attribute.
Status decodeAttr(const dsp::Attr &attr, ops::Attr &out);

} // namespace dsrt

#endif
