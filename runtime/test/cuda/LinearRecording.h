// The recording StepContext of the tfm.linear / tfm.lm_head launcher tests
// (LinearOpsTest.cpp, LinearTileGemmOpsTest.cpp): which kernel slot runs with which
// parameters, the GEMMs handed to cuBLASLt and the scratch asked for, and the steps as
// LinearRules.cpp would specialise them. Included once per test file: everything here has
// internal linkage.
#pragma once
#include "TestStepTensors.h"
#include "cuda/GpuOps.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

namespace dsrt::test {
namespace {

using namespace dsrt::cuda;

struct Launch {
  size_t slot;
  Dim3 grid, block;
  uint32_t sharedBytes;
  std::vector<uint64_t> args;  // each parameter's bytes, zero-extended
};

class RecordingContext : public TestStepTensors {
public:
  std::string opName = "tfm.linear";
  ops::AttrMap attributes;
  // Each kernel slot's constants.
  std::vector<std::map<std::string, int64_t>> kernels;
  // Parameter sizes per slot, as the templates declare them.
  std::vector<std::vector<size_t>> paramSizes;

  std::vector<Launch> launches;
  std::vector<GemmDesc> gemms;
  std::vector<size_t> scratchRequests;
  DevicePtr nextScratch = 9ull << 32;
  size_t partBytes = size_t(64) << 20;  // scratchPartBytes()

  std::string_view op() const override { return opName; }
  const ops::AttrMap &attrs() const override { return attributes; }
  Status launch(size_t slot, Dim3 grid, Dim3 block, uint32_t sharedBytes,
                void **args) override {
    if (slot >= kernels.size())
      return Status::error("no kernel in slot " + std::to_string(slot));
    Launch launch{slot, grid, block, sharedBytes, {}};
    for (size_t i = 0; i < paramSizes.at(slot).size(); ++i) {
      uint64_t value = 0;
      std::memcpy(&value, args[i], paramSizes[slot][i]);
      launch.args.push_back(value);
    }
    launches.push_back(launch);
    return Status::ok();
  }
  size_t kernelCount() const override { return kernels.size(); }
  int64_t kernelConstant(size_t slot, std::string_view name, int64_t fallback) const override {
    if (slot >= kernels.size())
      return fallback;
    auto found = kernels[slot].find(std::string(name));
    return found == kernels[slot].end() ? fallback : found->second;
  }
  Status gemm(const GemmDesc &desc) override {
    gemms.push_back(desc);
    return Status::ok();
  }
  size_t scratchPartBytes() const override { return partBytes; }
  static constexpr DevicePtr kCounters = 7ull << 32;
  std::vector<size_t> counterRequests;
  Status arrivalCounters(size_t count, DevicePtr &out) override {
    counterRequests.push_back(count);
    out = kCounters;
    return Status::ok();
  }
  Status scratch(size_t bytes, DevicePtr &out) override {
    scratchRequests.push_back(bytes);
    out = nextScratch;
    nextScratch += (bytes + 255) / 256 * 256;
    return Status::ok();
  }
  int rank() const override { return 0; }
  int multiprocessorCount() const override { return 132; }
  int residentBlocksPerMultiprocessor(size_t slot, unsigned threads,
                                      uint32_t sharedBytes) override {
    occupancyQueries.push_back({slot, threads, sharedBytes});
    return residentBlocks;
  }
  int residentBlocks = 0;  // what the occupancy calculator says (0: unknown)
  std::vector<std::tuple<size_t, unsigned, uint32_t>> occupancyQueries;
  int computeCapability() const override { return 90; }
};

constexpr size_t kPtr = 8, kInt = 4, kLong = 8;
// Far enough apart that no test's tensors overlap (the launcher refuses overlaps).
constexpr DevicePtr kX = 1ull << 32, kW = 2ull << 32, kBias = 3ull << 32, kResidual = 4ull << 32,
                    kY = 5ull << 32, kScales = 6ull << 32;

DeviceTensor tensor(DType dtype, Shape shape, DevicePtr data) {
  DeviceTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = data;
  return t;
}

// A fused linear of `rows` x [k] by [n, k] weights of `weightType`, as LinearRules.cpp
// would specialise it.
RecordingContext linearStep(int64_t rows, int64_t n, int64_t k, DType weightType, bool bias,
                            bool residual, int64_t activation) {
  RecordingContext context;
  context.inputs.push_back(tensor(DType::F32, {rows, k}, kX));
  context.inputs.push_back(tensor(weightType, {n, k}, kW));
  context.inputs.push_back(bias ? std::optional(tensor(weightType, {n}, kBias)) : std::nullopt);
  context.inputs.push_back(std::nullopt);
  context.inputs.push_back(residual ? std::optional(tensor(DType::F32, {rows, n}, kResidual))
                                    : std::nullopt);
  context.outputs.push_back(tensor(DType::F32, {rows, n}, kY));
  const int64_t biasType = bias ? static_cast<int64_t>(weightType) : 1;
  context.kernels.push_back({{"K", k},
                             {"WT", static_cast<int64_t>(weightType)},
                             {"ACT", activation},
                             {"HAS_BIAS", bias},
                             {"BIAS_DT", biasType},
                             {"HAS_RESIDUAL", residual}});
  context.paramSizes.push_back({kPtr, kPtr, kPtr, kPtr, kPtr, kPtr, kInt, kInt, kInt, kInt});
  context.kernels.push_back(
      {{"ACT", activation}, {"HAS_BIAS", bias}, {"BIAS_DT", biasType}, {"HAS_RESIDUAL", residual}});
  context.paramSizes.push_back({kPtr, kPtr, kPtr, kPtr, kLong, kLong});
  if (weightType != DType::F32) {
    context.kernels.push_back({{"WT", static_cast<int64_t>(weightType)}});
    context.paramSizes.push_back({kPtr, kPtr, kLong});
  }
  return context;
}

// An int8 linear: [n, k] int8 weights with [n, groups] scales of `scaleType` (the bias in
// the scales' dtype, as dsc stores it), specialised as LinearRules.cpp would: gemv,
// linear_epilogue, dequantize_int8, then convert_activations for f16/bf16 scales.
RecordingContext int8Step(int64_t rows, int64_t n, int64_t k, int64_t groups, DType scaleType,
                          bool bias, bool residual, int64_t activation) {
  RecordingContext context;
  context.inputs.push_back(tensor(DType::F32, {rows, k}, kX));
  context.inputs.push_back(tensor(DType::I8, {n, k}, kW));
  context.inputs.push_back(bias ? std::optional(tensor(scaleType, {n}, kBias)) : std::nullopt);
  context.inputs.push_back(tensor(scaleType, {n, groups}, kScales));
  context.inputs.push_back(residual ? std::optional(tensor(DType::F32, {rows, n}, kResidual))
                                    : std::nullopt);
  context.outputs.push_back(tensor(DType::F32, {rows, n}, kY));
  const int64_t biasType = bias ? static_cast<int64_t>(scaleType) : 1;
  const int64_t sdt = static_cast<int64_t>(scaleType), gs = groups == 1 ? 0 : k / groups;
  context.kernels.push_back({{"K", k},
                             {"WT", 8},
                             {"SDT", sdt},
                             {"GS", gs},
                             {"ACT", activation},
                             {"HAS_BIAS", bias},
                             {"BIAS_DT", biasType},
                             {"HAS_RESIDUAL", residual}});
  context.paramSizes.push_back({kPtr, kPtr, kPtr, kPtr, kPtr, kPtr, kInt, kInt, kInt, kInt});
  context.kernels.push_back(
      {{"ACT", activation}, {"HAS_BIAS", bias}, {"BIAS_DT", biasType}, {"HAS_RESIDUAL", residual}});
  context.paramSizes.push_back({kPtr, kPtr, kPtr, kPtr, kLong, kLong});
  context.kernels.push_back({{"SDT", sdt}, {"GS", gs}});
  context.paramSizes.push_back({kPtr, kPtr, kPtr, kLong, kLong});
  if (scaleType != DType::F32) {
    context.kernels.push_back({{"WT", sdt}});
    context.paramSizes.push_back({kPtr, kPtr, kLong});
  }
  return context;
}

Status run(RecordingContext &context) {
  GpuOpFn launcher = findGpuOp(context.opName);
  if (!launcher)
    return Status::error("no launcher for " + context.opName);
  return launcher(context);
}

} // namespace
} // namespace dsrt::test
