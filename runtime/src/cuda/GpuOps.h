// The CUDA backend's op launchers and what they may use of the session running them: the
// runtime side of the contract whose compiler side is codegen/kernels/KernelRules.h.
//
// The session infers every step's output shapes with the reference kernels' shape
// functions (ops::inferShapes), places the outputs (the plan's arena offsets, in device
// memory), and then calls the op's launcher, which enqueues work on the session's stream
// and returns without synchronising. Steps whose inputs are all known on the host (shape
// arithmetic) run on the host with the reference kernels; an op without a launcher, or a
// step whose rule declined at compile time, runs on the host with copies (the fallback).
// No LLVM, no CUDA headers: the driver is reached through dlopen (CudaDriver.h).
#ifndef DSRT_CUDA_GPUOPS_H
#define DSRT_CUDA_GPUOPS_H

#include "core/Status.h"
#include "core/Tensor.h"
#include "ops/Ops.h"

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace dsrt::cuda {

using DevicePtr = uint64_t;  // CUdeviceptr
using StreamHandle = void *; // CUstream

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct DeviceTensor {
  DType dtype = DType::Undefined;
  Shape shape;
  DevicePtr data = 0;

  int64_t elements() const { return elementCount(shape); }
  size_t bytes() const { return static_cast<size_t>(elements()) * dtypeSize(dtype); }
};

// One layer of the session's KV cache on the device: keys and values of
// [batch, kvHeads, capacity, headDim] elements of `dtype` (f32, as on the CPU).
struct DeviceKvLayer {
  DType dtype = DType::Undefined;
  int64_t batch = 0, kvHeads = 0, capacity = 0, headDim = 0;
  DevicePtr key = 0, value = 0;
};

// The serving engine's rows of the step about to run, where the session's cache is the
// engine's block pool (docs/serving.md): each DeviceKvLayer then holds `batch` blocks of
// `capacity` (the block size) positions, [blocks, kvHeads, blockSize, headDim]. Row r is
// `1 + tableWidth` int32 at `data` (device memory, uploaded once per step): its position,
// then its sequence's block table (-1 past its blocks). `host` holds the same values, which
// the session checked when they were set (positions within the table, blocks within the
// pool). In device memory so that a captured graph replays the rows of its replay.
// `chunks` prompt chunks follow the rows, in the same upload: [first row, rows] int32 per
// run of two or more consecutive rows of one sequence at consecutive positions
// (findPagedChunks), at `chunkData` and `hostChunks`; a paged prefill kernel attends for
// them a tile of rows at a time, the paged decode kernel for every other row. None where
// the step was padded for a graph (its grid would be baked into the capture).
struct DevicePagedRows {
  int64_t rows = 0, tableWidth = 0, blockSize = 0, blocks = 0;
  DevicePtr data = 0;
  const int32_t *host = nullptr;
  int64_t chunks = 0;
  DevicePtr chunkData = 0;
  const int32_t *hostChunks = nullptr;
};

// The prompt chunks of `rows` rows laid out as DevicePagedRows' ([rows][1 + tableWidth]):
// runs of two or more rows with equal tables at consecutive positions, as [first, count]
// pairs appended to `chunks`. (AttentionPagedOps.cpp.)
void findPagedChunks(const int32_t *rows, int64_t count, int64_t tableWidth,
                     std::vector<int32_t> &chunks);
// The lengths of the running session-cache program (prefill, decode), as three int32 in
// device memory: {past, total, maskWidth}. `past` tokens are already in the cache, `total`
// = past + new tokens, and the attention mask has `maskWidth` >= total columns whose last
// `total` are the keys (a captured decode graph pads the mask on the left with zeros to its
// bucket's width, which neither the attention nor a cumulative sum over the mask sees).
// They live in device memory so that each replay of a captured graph reads that replay's
// values; launchers pass the pointer, never the values, where a graph may be captured.
enum SequenceLength : int { kPast = 0, kTotal = 1, kMaskWidth = 2 };

// C[m, n] = A[m, k] · B[n, k]ᵀ (+ C when accumulate; + addend instead, when set: cuBLASLt's
// C ≠ D, so a linear's residual is added without an epilogue), B in torch layout [out, in]; A and C
// row-major with leading dimensions k and n, C f32; B in its stored dtype (f32, f16, bf16),
// A in f32 or, for f16/bf16 weights, in B's dtype (the launcher converts the activations
// first: cuBLASLt multiplies equal types). f32 weights compute in f32 (no TF32: the fp32
// plans' tolerance is 1e-4); f16/bf16 on the tensor cores with f32 accumulation.
// The activations cuBLASLt's epilogues apply: ReLU, and GELU as the tanh approximation
// (GPT-2's gelu_new, tfm.activation gelu_tanh).
enum class GemmActivation { None, Relu, GeluTanh };

struct GemmDesc {
  int64_t m = 0, n = 0, k = 0;
  DevicePtr a = 0;
  DType aType = DType::F32;
  DevicePtr b = 0;
  DType bType = DType::F32;
  DevicePtr c = 0;
  int64_t ldc = 0;  // elements between C's rows (0: n); a part of a wider C has the whole's
  bool accumulate = false;
  // With `accumulate`: what the product is added to, laid out as C (ldc), read before C is
  // written; 0 adds to C itself.
  DevicePtr addend = 0;
  // cuBLASLt's epilogue: C = activation(A·Bᵀ (+ addend) + bias), the bias [n] broadcast over
  // the rows, so that a prefill linear needs no epilogue kernel. Only where
  // StepContext::gemmTakesEpilogue said cuBLASLt has an algorithm for it.
  DevicePtr bias = 0;
  DType biasType = DType::F32;
  GemmActivation activation = GemmActivation::None;
  bool hasEpilogue() const { return bias != 0 || activation != GemmActivation::None; }
};

// The tensor-parallel group on the device: NCCL between GPUs, or the in-process group of
// threads sharing one GPU (staged through host memory). Enqueued on `stream`.
class DeviceCollectives {
public:
  virtual ~DeviceCollectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Status allReduceSum(DevicePtr data, int64_t count, StreamHandle stream) = 0;
  // Concatenates each rank's `bytes[rank]` bytes, in rank order, into `out`.
  virtual Status allGather(DevicePtr mine, const std::vector<int64_t> &bytes, DevicePtr out,
                           StreamHandle stream) = 0;
  // Whether a collective may be captured into a CUDA graph (NCCL: yes; host staging: no).
  virtual bool capturable() const = 0;
  // Runs `wait`, a host wait (a stream synchronisation) on work that includes this group's
  // collectives, for the program or step `step`. A collective on the device waits for its
  // peers without a bound, so NCCL's watchdog ends the wait with an error naming `step`
  // when a peer fails or DSRT_COLLECTIVE_TIMEOUT passes. Staged collectives have already
  // waited in the host group (MPI's timeout, the in-process group's abort) before their work
  // reaches the stream: plain wait().
  virtual Status guard(const char *step, const std::function<Status()> &wait) {
    (void)step;
    return wait();
  }
};

class StepContext {
public:
  virtual ~StepContext() = default;

  virtual std::string_view op() const = 0;
  virtual const ops::AttrMap &attrs() const = 0;
  virtual size_t inputCount() const = 0;
  // Input `index` on the device, or null when absent. Weights keep their stored dtype.
  virtual const DeviceTensor *input(size_t index) const = 0;
  // The input's values on the host when the session knows them there (constants and the
  // results of host steps), or null.
  virtual const TensorRef *hostInput(size_t index) const = 0;
  virtual size_t outputCount() const = 0;
  // Already placed, with the shape the reference kernels' shape function gave.
  virtual const DeviceTensor &output(size_t index) const = 0;

  // Launches the step's generated kernel `slot` (its Step.kernels[slot]) on the stream.
  // `args` as cuLaunchKernel takes them: one pointer to each parameter's value.
  virtual Status launch(size_t slot, Dim3 grid, Dim3 block, uint32_t sharedBytes,
                        void **args) = 0;
  virtual size_t kernelCount() const = 0;
  // The specialisation constant `name` of kernel `slot` (Kernel.constants), or `fallback`.
  virtual int64_t kernelConstant(size_t slot, std::string_view name,
                                 int64_t fallback) const = 0;
  virtual Status gemm(const GemmDesc &gemm) = 0;
  // Whether gemm can run `gemm` with its epilogue (bias, activation) in cuBLASLt: the
  // heuristic has an algorithm for it. Contexts without cuBLASLt say no, and the launcher
  // runs its epilogue kernel instead.
  virtual bool gemmTakesEpilogue(const GemmDesc &gemm) {
    (void)gemm;
    return false;
  }
  // Device memory for this step only (freed, or reused, after it).
  virtual Status scratch(size_t bytes, DevicePtr &out) = 0;
  // Layer `layer` of the session's KV cache, or null without one.
  virtual const DeviceKvLayer *kvLayer(int64_t layer) const = 0;
  // The engine's rows over the paged cache, or null where the session's cache is dense.
  virtual const DevicePagedRows *pagedRows() const { return nullptr; }
  // SequenceLength's three int32 for this run; 0 outside a session-cache program.
  virtual DevicePtr sequenceLengths() const = 0;
  // The same values on the host (valid outside capture; in capture they are the values of
  // the capturing run and must not be baked into kernel parameters).
  virtual const int32_t *hostSequenceLengths() const = 0;
  virtual DeviceCollectives *collectives() = 0;  // null for a single rank
  virtual int rank() const = 0;                  // in the tensor-parallel group
  virtual StreamHandle stream() const = 0;
  virtual int multiprocessorCount() const = 0;
  // How many blocks of kernel `slot`, of `threads` threads and `sharedBytes` of dynamic
  // shared memory, one multiprocessor holds at once (the driver's occupancy calculator: its
  // registers, shared memory and threads), or 0 where that is not known. A kernel whose
  // blocks stride over their work sizes its grid to whole waves of these.
  virtual int residentBlocksPerMultiprocessor(size_t slot, unsigned threads,
                                              uint32_t sharedBytes) {
    (void)slot, (void)threads, (void)sharedBytes;
    return 0;
  }
  virtual int computeCapability() const = 0;     // 80, 90, ...
  // While a CUDA graph is being captured: no host synchronisation, no reads of device data.
  virtual bool capturing() const = 0;
  // Enqueues a device-to-device copy of `height` rows of `widthBytes` bytes whose starts are
  // `srcPitch` and `dstPitch` bytes apart (height 1: a plain copy). Capturable. (Added with
  // the collectives' launchers, which copy and interleave without a generated kernel.)
  virtual Status copy(DevicePtr dst, size_t dstPitch, DevicePtr src, size_t srcPitch,
                      size_t widthBytes, size_t height) {
    (void)dst, (void)dstPitch, (void)src, (void)srcPitch, (void)widthBytes, (void)height;
    return error("this session cannot copy on the device");
  }
  // `count` int32 of device memory that are zero before each launch that uses them and
  // that the launch leaves at zero (a kernel's arrival counts: attention_decode's
  // FUSED_COMBINE). They live as long as the session, and every step shares them: steps run
  // one after another on the stream.
  virtual Status arrivalCounters(size_t count, DevicePtr &out) {
    (void)count, (void)out;
    return error("this session has no arrival counters");
  }
  // The most scratch a launcher should take for one piece of work it can split (an int8
  // weight dequantized for a GEMM goes in parts of at most this many bytes): scratch blocks
  // live as long as the session, so one large layer would otherwise hold its size forever.
  virtual size_t scratchPartBytes() const { return size_t(64) << 20; }

  template <typename... Parts> Status error(const Parts &...parts) const {
    std::ostringstream message;
    message << op() << " (cuda): ";
    (message << ... << parts);
    return Status::error(message.str());
  }
};

using GpuOpFn = Status (*)(StepContext &context);

struct GpuOpInfo {
  const char *op;  // the plan step's op
  GpuOpFn run;
};

// Each family's file contributes its launchers.
void addTransformerGpuOps(std::vector<GpuOpInfo> &ops);  // embedding, norms, elementwise tfm
void addGenericGpuOps(std::vector<GpuOpInfo> &ops);      // onnx-path ops
void addLinearGpuOps(std::vector<GpuOpInfo> &ops);       // tfm.linear, tfm.lm_head
void addAttentionGpuOps(std::vector<GpuOpInfo> &ops);    // tfm.attention
void addCollectiveGpuOps(std::vector<GpuOpInfo> &ops);   // tfm.all_reduce, tfm.all_gather
void addMoeGpuOps(std::vector<GpuOpInfo> &ops);          // tfm.moe

// The launcher of `op`, or null.
GpuOpFn findGpuOp(std::string_view op);

} // namespace dsrt::cuda

#endif
