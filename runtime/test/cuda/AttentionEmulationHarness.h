// The host harness of the attention launcher's emulation tests (AttentionEmulationTest.cpp,
// CrossAttentionEmulationTest.cpp): a step context whose launches run the kernel templates
// through CudaEmulation.h, and the comparisons against the CPU reference.
#ifndef DSRT_TEST_CUDA_ATTENTIONEMULATIONHARNESS_H
#define DSRT_TEST_CUDA_ATTENTIONEMULATIONHARNESS_H

#include "CudaEmulation.h"

#include "TestStepTensors.h"
#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using dsrt::DType;
using dsrt::Shape;
using dsrt::Status;
using dsrt::TensorRef;
using dsrt::cuda::DevicePtr;
using dsrt::cuda::DeviceTensor;

// Slots 0-3 as a plan's dense steps have them; 3 and 4 are the paged kernels of a serving
// plan's step program in the families that have them (EMU_PAGED), and 5 its paged prefill
// (pagedPrefillKernels: slot 3 then writes the queries too, PAGED 2).
struct KernelSet {
  std::function<void(void **)> slots[6];
  std::map<std::string, int64_t> constants[6];
  // EMU_PAGED's attention_rotary with PAGED 2, which slot 3 is beside a paged prefill.
  std::function<void(void **)> pagedQueriesRotary;
  // Slot 1 is attention_prefill_mma (the tensor cores), which rounds the queries and the
  // softmax weights to the cache's dtype.
  bool prefillOnTensorCores = false;
};

// Calls `kernel` with the parameters cuLaunchKernel would pass: args[i] points to the
// value of parameter i (a DevicePtr for a pointer, which on the host is the address).
template <typename... Params, size_t... I>
void invokeWith(void (*kernel)(Params...), void **args, std::index_sequence<I...>) {
  std::tuple<std::decay_t<Params>...> values;
  (std::memcpy(&std::get<I>(values), args[I], sizeof(std::get<I>(values))), ...);
  kernel(std::get<I>(values)...);
}
template <typename... Params> void invokeKernel(void (*kernel)(Params...), void **args) {
  invokeWith(kernel, args, std::index_sequence_for<Params...>{});
}

} // namespace

namespace dsrt::cuda {
namespace {

using dsrt::DType;
using dsrt::Shape;
using dsrt::Status;
using dsrt::TensorRef;

// A group that only says which rank the reference kernel runs as.
class RankOnly : public ops::Collectives {
public:
  RankOnly(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allReduceSum(float *, int64_t) override { return Status::error("not here"); }
  Status allGather(const void *, const std::vector<int64_t> &, void *) override {
    return Status::error("not here");
  }

private:
  int rank_, size_;
};

DevicePtr addressOf(const void *data) {
  return static_cast<DevicePtr>(reinterpret_cast<uintptr_t>(data));
}

class EmulatedStep : public dsrt::test::TestStepTensors {
public:
  EmulatedStep(const KernelSet &kernels, size_t kernelCount, ops::AttrMap attrs)
      : kernels_(kernels), kernelCount_(kernelCount), attrs_(std::move(attrs)) {}

  std::string_view op() const override { return "tfm.attention"; }
  const ops::AttrMap &attrs() const override { return attrs_; }
  Status launch(size_t slot, Dim3 grid, Dim3 block, uint32_t sharedBytes,
                void **args) override {
    if (slot >= kernelCount_)
      return error("slot ", slot, " of ", kernelCount_);
    if (block.x % 32 != 0 || block.x == 0 || block.y != 1 || block.z != 1)
      return error("unexpected launch shape");
    // Dynamic shared memory is the kernel's SHARED_BYTES (the family's array stands for it).
    if (sharedBytes != kernelConstant(slot, "SHARED_BYTES", 0))
      return error("kernel ", slot, " launched with ", sharedBytes, " bytes of shared memory");
    cuda_emulation::launch({grid.x, grid.y, grid.z}, {block.x, block.y, block.z},
                                [&] { kernels_.slots[slot](args); });
    ++launches[slot];
    grids[slot] = grid;
    gridLog[slot].push_back(grid);
    return Status::ok();
  }
  size_t kernelCount() const override { return kernelCount_; }
  int64_t kernelConstant(size_t slot, std::string_view name, int64_t fallback) const override {
    if (slot >= kernelCount_)
      return fallback;
    auto found = kernels_.constants[slot].find(std::string(name));
    return found == kernels_.constants[slot].end() ? fallback : found->second;
  }
  Status gemm(const GemmDesc &) override { return error("no gemm here"); }
  Status scratch(size_t bytes, DevicePtr &out) override {
    // NaN-filled: a kernel that reads scratch it did not write shows in the output.
    scratch_.emplace_back(bytes / sizeof(float) + 1, std::numeric_limits<float>::quiet_NaN());
    out = addressOf(scratch_.back().data());
    return Status::ok();
  }
  Status arrivalCounters(size_t count, DevicePtr &out) override {
    if (arrivals.size() < count)
      arrivals.resize(count, 0);  // zero, as the session's are when allocated
    out = addressOf(arrivals.data());
    return Status::ok();
  }
  const DeviceKvLayer *kvLayer(int64_t layer) const override {
    return layer == 0 && cache ? &*cache : nullptr;
  }
  const DevicePagedRows *pagedRows() const override { return paged ? &*paged : nullptr; }
  DevicePtr sequenceLengths() const override { return cache ? addressOf(lengths) : 0; }
  const int32_t *hostSequenceLengths() const override { return cache ? lengths : nullptr; }
  DeviceCollectives *collectives() override { return nullptr; }
  int rank() const override { return rank_; }
  StreamHandle stream() const override { return nullptr; }
  int multiprocessorCount() const override { return 1; }
  int computeCapability() const override { return 80; }
  bool capturing() const override { return capturing_; }

  std::optional<DeviceKvLayer> cache;
  int32_t lengths[3] = {0, 0, 0};
  std::optional<DevicePagedRows> paged;  // the engine's rows over a block pool (`cache`)
  int launches[6] = {0, 0, 0, 0, 0, 0};
  Dim3 grids[6];  // each slot's last launch
  std::vector<Dim3> gridLog[6];  // each slot's launches, in order
  std::vector<int32_t> arrivals;  // arrivalCounters'; a kernel must leave them at zero
  int rank_ = 0;
  bool capturing_ = false;

private:
  const KernelSet &kernels_;
  size_t kernelCount_;
  ops::AttrMap attrs_;
  std::vector<std::vector<float>> scratch_;
};

// A serving step's six kernels: slot 5 the paged prefill, slot 3 the rotary with PAGED 2.
inline KernelSet pagedPrefillKernels(KernelSet set) {
  set.slots[3] = set.pagedQueriesRotary;
  set.constants[3]["PAGED"] = 2;
  return set;
}

// The kernels a plan's session step has: rotary and prefill, then the decode kernel, and
// attention_combine unless the decode kernel merges its splits itself (FUSED_COMBINE).
inline size_t sessionKernelCount(const KernelSet &kernels) {
  return kernels.constants[2].count("FUSED_COMBINE") ? 3 : 4;
}

std::vector<float> randomFloats(std::mt19937 &generator, size_t count) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float &value : values)
    value = uniform(generator);
  return values;
}

// The KV heads rank `rank` of `ranks` even ranks holds: those its query heads read (with
// fewer KV heads than ranks, a KV head is replicated on the ranks that share its group).
inline int64_t rankKvHeadOffset(int64_t heads, int64_t kvHeads, int rank, int ranks) {
  return rank * heads / ranks / (heads / kvHeads);
}
inline int64_t rankKvHeads(int64_t heads, int64_t kvHeads, int rank, int ranks) {
  const int64_t group = heads / kvHeads, first = rank * heads / ranks;
  return (first + heads / ranks - 1) / group - first / group + 1;
}

// Tensor parallelism over `ranks` even ranks: each rank's query and KV heads, as tp-shard
// writes them on a tfm.attention step.
inline void addRankHeads(ops::AttrMap &attrs, int64_t heads, int64_t kvHeads, int ranks) {
  if (ranks <= 1)
    return;
  std::vector<int64_t> counts, offsets, kvCounts, kvOffsets;
  for (int r = 0; r < ranks; ++r) {
    counts.push_back(heads / ranks);
    offsets.push_back(r * heads / ranks);
    kvCounts.push_back(rankKvHeads(heads, kvHeads, r, ranks));
    kvOffsets.push_back(rankKvHeadOffset(heads, kvHeads, r, ranks));
  }
  attrs["rank_heads"] = ops::Attr::ofInts(counts);
  attrs["rank_head_offsets"] = ops::Attr::ofInts(offsets);
  attrs["rank_kv_heads"] = ops::Attr::ofInts(kvCounts);
  attrs["rank_kv_head_offsets"] = ops::Attr::ofInts(kvOffsets);
}

// Compares with the file's tolerance, |actual - expected| <= 1e-5 + extraAbsolute + (1e-4
// + extraRelative) * |expected|; returns the largest error for the report.
float expectClose(const float *actual, const float *expected, size_t count,
                  const std::string &what, float extraRelative = 0.0f,
                  float extraAbsolute = 0.0f) {
  float worst = 0;
  size_t failures = 0;
  for (size_t i = 0; i < count; ++i) {
    float error = std::fabs(actual[i] - expected[i]);
    if (!(error <= 1e-5f + extraAbsolute + (1e-4f + extraRelative) * std::fabs(expected[i]))) {
      if (++failures <= 5)
        ADD_FAILURE() << what << " [" << i << "]: " << actual[i] << " vs " << expected[i];
    }
    if (error > worst || std::isnan(error))
      worst = std::isnan(error) ? std::numeric_limits<float>::infinity() : error;
  }
  EXPECT_EQ(failures, 0u) << what;
  return worst;
}

} // namespace
} // namespace dsrt::cuda

#endif
