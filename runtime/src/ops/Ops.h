// The reference implementation of every op of the generic path: shape inference and
// computation, on the CPU, with fp32 accumulation. The CPU backend runs plan steps with it;
// the compiler folds constants and evaluates shape bounds with it.
//
// Op names and operand orders are those of the onnx dialect's normalised form
// (dialects/onnx/IR/OnnxOps.td): axes, split sizes and the like are inputs, never
// attributes; an absent optional input is a null pointer; Cast's `to` is a DType attribute.
#ifndef DSRT_OPS_OPS_H
#define DSRT_OPS_OPS_H

#include "core/Status.h"
#include "core/Tensor.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dsrt::ops {

struct Attr {
  enum class Kind { Int, Float, String, Ints, Floats, Tensor, Type };
  Kind kind = Kind::Int;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  OwnedTensor tensor;
  DType type = DType::Undefined;

  static Attr ofInt(int64_t v);
  static Attr ofFloat(float v);
  static Attr ofString(std::string v);
  static Attr ofInts(std::vector<int64_t> v);
  static Attr ofFloats(std::vector<float> v);
  static Attr ofTensor(OwnedTensor v);
  static Attr ofType(DType v);
};

using AttrMap = std::map<std::string, Attr, std::less<>>;

// Typed access with ONNX's defaults; a present attribute of the wrong kind is an error.
Status getInt(const AttrMap &attrs, std::string_view name, int64_t fallback, int64_t &out);
Status getFloat(const AttrMap &attrs, std::string_view name, float fallback, float &out);
Status getString(const AttrMap &attrs, std::string_view name, std::string fallback,
                 std::string &out);
Status getInts(const AttrMap &attrs, std::string_view name, std::vector<int64_t> &out,
               bool &present);

// The inverse frequencies of a tfm.attention step's rotary embedding, rotary_dim / 2 of
// them: rotary_inv_freq where the plan lists them (scaled RoPE: llama3, linear, yarn), else
// rotary_base^(-2i/rotary_dim) computed in double and rounded to fp32. Both backends rotate
// with these; empty without a rotary embedding.
Status rotaryInverseFrequencies(const AttrMap &attrs, std::vector<float> &out);
// yarn's and longrope's rotary_attention_factor (1 when absent): the cosines and sines are
// scaled by it.
Status rotaryAttentionFactor(const AttrMap &attrs, float &out);

// The dtype of the session's KV cache a tfm.attention step reads and writes: its
// `cache_dtype` (f16 or bf16: keys and values are rounded to it when they are written, and
// attention reads them as stored), f32 when absent.
Status kvCacheDType(const AttrMap &attrs, DType &out);

// A tfm.attention step's heads on tensor-parallel rank `rank` of a model with
// `globalHeads` query heads in groups over `globalKvHeads` (a positive multiple): its
// entries of rank_heads, rank_head_offsets, rank_kv_heads and rank_kv_head_offsets where
// the step has those lists, the model's heads from 0 where not; an error unless every
// query head's KV head is one of the rank's (whole groups).
struct RankHeads {
  int64_t heads = 0, headOffset = 0, kvHeads = 0, kvHeadOffset = 0;
};
Status readRankHeads(const AttrMap &attrs, int rank, int64_t globalHeads,
                     int64_t globalKvHeads, RankHeads &out);

// A step's `output_dtype` (a float type), `fallback` when absent: the plan's activation
// dtype where the step writes its result narrower than it computes (dsc-activation-dtype),
// or the CPU session's f32 gathered from a narrow embedding table.
Status floatOutputDType(const AttrMap &attrs, DType fallback, DType &out);

struct OutputSpec {
  DType dtype = DType::Undefined;
  Shape shape;
};

// The session state tfm.attention reads and writes in place (docs/transformer-ops.md):
// per layer, keys and values of [batch, kvHeads, capacity, headDim] elements of `dtype`
// (f32, f16 or bf16: the steps' cache_dtype).
struct KvCacheLayer {
  DType dtype = DType::Undefined;
  int64_t batch = 0, kvHeads = 0, capacity = 0, headDim = 0;
  void *key = nullptr;
  void *value = nullptr;
  // An int8 layer (the serving engine's int8 KV cache, docs/serving.md): each stored row of
  // headDim values has kvInt8Groups(headDim) f32 scales, the row's element offset / headDim
  // times that many into these.
  float *keyScales = nullptr;
  float *valueScales = nullptr;
};
// Scales per cached row of an int8 KV cache: one per 32 values (llama.cpp's q8_0 blocks)
// where the head's width is a multiple of 32, else one for the row.
inline int64_t kvInt8Groups(int64_t headDim) { return headDim % 32 == 0 ? headDim / 32 : 1; }
// The serving engine's paged cache (docs/serving.md): every layer is a pool of blocks of
// [kvHeads, blockSize, headDim] (KvCacheLayer's batch counts the blocks, its capacity is the
// block size), and each row of a step is one token of some sequence: its position, and the
// blocks that hold its sequence's keys and values, position t in block t / blockSize.
struct KvPagedRow {
  const int32_t *blocks = nullptr;
  int64_t blockCount = 0;
  int64_t position = 0;
};
struct KvCache {
  std::vector<KvCacheLayer> layers;
  // 0: each layer is [batch, kvHeads, capacity, headDim], row b of a step is sequence b.
  int64_t blockSize = 0;
  // With blockSize: the rows of the step about to run, set by the engine before each run.
  std::vector<KvPagedRow> pagedRows;
};

// The tensor-parallel group a session belongs to (tfm.all_reduce, tfm.all_gather): an
// in-process group of threads, MPI processes, or NCCL. Every rank calls each collective in
// the same order.
class Collectives {
public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums `count` floats over the ranks, in place.
  virtual Status allReduceSum(float *data, int64_t count) = 0;
  // Concatenates each rank's `bytes[rank]` bytes, in rank order, into `out`.
  virtual Status allGather(const void *mine, const std::vector<int64_t> &bytes, void *out) = 0;
  // As allGather, but waiting as long as it takes, without DSRT_COLLECTIVE_TIMEOUT: for work
  // that has not come yet (a follower waiting for rank 0's next request, which a server may
  // receive in an hour), not for a rank that failed. Only communicators with a timeout
  // override it.
  virtual Status allGatherUntimed(const void *mine, const std::vector<int64_t> &bytes,
                                  void *out) {
    return allGather(mine, bytes, out);
  }
  // Every rank's `mine` (a trivially copyable record), in rank order: what ranks that must
  // agree compare (session/RankAgreement.cpp, the generator's request check).
  template <typename Record> Status allGatherRecords(const Record &mine, std::vector<Record> &all) {
    all.assign(static_cast<size_t>(size()), Record{});
    return allGather(&mine,
                     std::vector<int64_t>(static_cast<size_t>(size()),
                                          static_cast<int64_t>(sizeof(Record))),
                     all.data());
  }
  // Rank 0's `bytes` on every rank (the others' are replaced): a request that only rank 0
  // was given (generate/Request.h). The ranks first agree on the size, then rank 0 alone
  // contributes to one all-gather, so no communicator needs a broadcast of its own. The
  // other ranks wait for the size untimed (allGatherUntimed), rank 0 for them as usual.
  Status broadcastFromRank0(std::vector<uint8_t> &bytes) {
    uint64_t mine = rank() == 0 ? bytes.size() : 0;
    std::vector<uint64_t> sizes(static_cast<size_t>(size()), 0);
    std::vector<int64_t> sizeBytes(static_cast<size_t>(size()),
                                   static_cast<int64_t>(sizeof(uint64_t)));
    Status status = rank() == 0 ? allGather(&mine, sizeBytes, sizes.data())
                                : allGatherUntimed(&mine, sizeBytes, sizes.data());
    if (!status.isOk())
      return status;
    // Checked on every rank alike, before the followers allocate (MPI counts are int).
    if (sizes[0] > 0x7FFFFFFFull)
      return Status::error("a broadcast of " + std::to_string(sizes[0]) +
                           " bytes, more than the 2 GiB one collective moves");
    std::vector<int64_t> counts(static_cast<size_t>(size()), 0);
    counts[0] = static_cast<int64_t>(sizes[0]);
    // MPI forbids aliased send and receive buffers, even where a rank sends nothing.
    uint8_t nothing = 0;
    if (rank() == 0) {
      std::vector<uint8_t> received(bytes.size());
      return allGather(bytes.data(), counts, received.data());
    }
    bytes.assign(static_cast<size_t>(sizes[0]), 0);
    return allGather(&nothing, counts, bytes.data());
  }
  // The element-wise maximum of `count` uint64 over the ranks, in place (the distributed
  // argmax of greedy decoding combines packed (logit, index) keys with it). The default
  // gathers every rank's values; communicators with a native max override it.
  virtual Status allReduceMax(uint64_t *data, int64_t count) {
    if (count <= 0)
      return Status::ok();
    int64_t bytes = count * static_cast<int64_t>(sizeof(uint64_t));
    std::vector<uint64_t> all(static_cast<size_t>(count) * static_cast<size_t>(size()));
    Status status = allGather(data, std::vector<int64_t>(static_cast<size_t>(size()), bytes),
                              all.data());
    if (!status.isOk())
      return status;
    for (int r = 0; r < size(); ++r)
      for (int64_t i = 0; i < count; ++i)
        data[i] = std::max(data[i], all[static_cast<size_t>(r * count + i)]);
    return Status::ok();
  }
};

// What a step may use of the session running it; null members where there is none (the
// compiler's evaluation, a single-rank plan).
struct SessionState {
  KvCache *cache = nullptr;
  Collectives *collectives = nullptr;
  // The CPU backend's fast kernels (ops/fast) where an op has one; false: the reference
  // kernels, the oracle the fast ones are tested against (--device cpu-reference).
  bool fastKernels = false;
  // Each row's arithmetic the same whatever other rows the step computes (the serving
  // engine's batch invariance, docs/serving.md): no kernel choice by row count that rounds
  // differently (the bf16 prompt GEMMs, AMX attention), int8 activations at every row count
  // where short prompts take them.
  bool rowInvariant = false;
  // With rowInvariant, float weights (f32, f16, bf16) too: every row's products summed as a
  // row alone sums them (fast::linear's exactFloatRows), where the kernels by row count and
  // sgemm each keep an order of their own (within f32 rounding of each other).
  bool exactFloatRows = false;
};

using Inputs = std::vector<const TensorRef *>;   // null: an absent optional input
using Outputs = std::vector<TensorRef *>;

inline constexpr const char *kUnknownValue = "is unknown";

// ONNX Slice along one axis of size `dim` (step != 0): negative start and end count from
// the end, then clamp. Gives the first index read (0 when none is) and how many are read.
// Shared by the reference kernel and the CUDA launcher, so both slice alike.
void sliceAxis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t &first,
               int64_t &count);

bool isSupported(std::string_view op);
std::vector<std::string> supportedOps();

// Output dtypes and shapes from the inputs' dtypes and shapes, and from the values of the
// inputs that determine shapes (Reshape's shape, Slice's starts, ...). When such a value is
// unknown (data == null) the result is an error that names the input and contains
// kUnknownValue (the compiler then allocates the outputs when the step runs). `numOutputs` is the
// number of outputs the step has (Split, Dropout, LayerNormalization).
// `state` (optional) gives the tensor-parallel group, whose rank selects per-rank
// attributes (tfm.attention's rank_heads ...); without it, rank 0's shapes come out.
Status inferShapes(std::string_view op, const AttrMap &attrs, const Inputs &inputs,
                   size_t numOutputs, std::vector<OutputSpec> &outputs,
                   const SessionState *state = nullptr);

// Computes the outputs, whose dtypes, shapes and storage the caller prepared from
// inferShapes. Inputs and outputs do not alias.
// `state` is the running session's (null where there is no session: the compiler's
// evaluation).
Status compute(std::string_view op, const AttrMap &attrs, const Inputs &inputs,
               const Outputs &outputs, const SessionState *state = nullptr);

// Threads the kernels may use (0: DSRT_NUM_THREADS, else the CPUs this process may run on,
// AvailableCpus.h); 1 makes everything sequential.
void setThreadCount(int threads);

} // namespace dsrt::ops

#endif
