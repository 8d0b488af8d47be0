// The host emulation of tfm.moe's CUDA launcher (runtime/src/cuda/ops/MoeOps.cpp) for
// MoeEmulationTest.cpp: a StepContext whose launches run the templates that
// MoeEmulationFamilies.inc specialised (MoeKernels, in moeRule's slot order) through
// CudaEmulation.h, random stored tensors for a MoeCase (every expert no row chooses made
// NaN), the CPU's tfm.moe on the same tensors through the op registry, and the comparison.
// Included once, after MoeEmulationFamilies.inc (HIDDEN and BLOCK are its constants):
// everything here has internal linkage.
#pragma once

#include "core/Tensor.h"
#include "TestStepTensors.h"
#include "cuda/GpuOps.h"
#include "ops/MoeRouting.h"
#include "ops/Ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <tuple>

namespace dsrt::test {
namespace {

using namespace dsrt::cuda;

template <typename... Params> void invokeKernel(void (*kernel)(Params...), void **args) {
  std::tuple<std::decay_t<Params>...> values;
  std::apply([&](auto &...value) {
    size_t i = 0;
    ((std::memcpy(&value, args[i++], sizeof value)), ...);
  }, values);
  std::apply(kernel, values);
}

// One step's kernels in moeRule's slot order.
struct MoeKernels {
  std::function<void(void **)> slots[6];
  std::map<std::string, int64_t> constants[6];
  size_t count = 4;
};

template <typename Kernel>
void setSlot(MoeKernels &set, size_t slot, Kernel *kernel,
             std::map<std::string, int64_t> constants) {
  set.slots[slot] = [kernel](void **args) { invokeKernel(kernel, args); };
  set.constants[slot] = std::move(constants);
}

std::map<std::string, int64_t> routeConstants(int64_t experts, int64_t topK, int64_t sigmoid,
                                              int64_t normalize) {
  return {{"EXPERTS", experts}, {"TOP_K", topK}, {"SIGMOID", sigmoid},
          {"NORMALIZE", normalize}, {"BLOCK", BLOCK}};
}

DevicePtr address(const void *pointer) { return reinterpret_cast<DevicePtr>(pointer); }

class EmulatedMoe : public TestStepTensors {
public:
  EmulatedMoe(MoeKernels kernels, ops::AttrMap attrs, int rank)
      : kernels_(std::move(kernels)), attrs_(std::move(attrs)), rank_(rank) {}

  int launches[6] = {};

  std::string_view op() const override { return "tfm.moe"; }
  const ops::AttrMap &attrs() const override { return attrs_; }
  Status launch(size_t slot, Dim3 grid, Dim3 block, uint32_t sharedBytes,
                void **args) override {
    if (slot >= kernels_.count || sharedBytes != 0 || block.x % 32 != 0 || grid.z != 1)
      return error("unexpected launch of slot ", slot);
    // The whole grid: the expert kernels' blocks do not stride.
    cuda_emulation::launch({grid.x, grid.y, 1}, {block.x, 1, 1},
                           [&] { kernels_.slots[slot](args); });
    ++launches[slot];
    return Status::ok();
  }
  size_t kernelCount() const override { return kernels_.count; }
  int64_t kernelConstant(size_t slot, std::string_view name, int64_t fallback) const override {
    if (slot >= kernels_.count)
      return fallback;
    auto found = kernels_.constants[slot].find(std::string(name));
    return found == kernels_.constants[slot].end() ? fallback : found->second;
  }
  Status gemm(const GemmDesc &) override { return error("no GEMM in tfm.moe"); }
  // Filled with 0xff bytes (NaN floats, -1 ints): a kernel that reads what no kernel wrote
  // shows.
  Status scratch(size_t bytes, DevicePtr &out) override {
    scratch_.emplace_back((bytes + 15) / 16 + 1);
    std::memset(scratch_.back().data(), 0xff, scratch_.back().size() * sizeof(Chunk));
    out = address(scratch_.back().data());
    return Status::ok();
  }
  int rank() const override { return rank_; }
  int multiprocessorCount() const override { return 2; }
  int computeCapability() const override { return 90; }

private:
  MoeKernels kernels_;
  ops::AttrMap attrs_;
  int rank_;
  struct alignas(16) Chunk {
    float values[4];
  };
  std::vector<std::vector<Chunk>> scratch_;
};

// The CPU kernel's view of the rank (rank_experts): only rank() is read.
class RankOnly : public ops::Collectives {
public:
  explicit RankOnly(int rank) : rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  Status allReduceSum(float *, int64_t) override { return Status::error("not here"); }
  Status allGather(const void *, const std::vector<int64_t> &, void *) override {
    return Status::error("not here");
  }

private:
  int rank_;
};

struct MoeCase {
  int64_t rows = 1, experts = 4, topK = 2, inter = 24;
  const char *scoring = "softmax";
  bool normalize = true;
  const char *activation = "silu";
  DType weightType = DType::F32, scaleType = DType::Undefined;
  int64_t gateUpGroups = 1, downGroups = 1;  // int8/int4 scale groups per row
  bool biases = false, clamped = false;
  int64_t sharedInter = 0;                    // a shared expert of this width
  // Expert parallelism: the ranks' expert counts; the step runs as rank `rank`.
  std::vector<int64_t> rankExperts;
  int rank = 0;
  // Tensor parallelism with biases: the one rank that adds the down biases (-1: every rank).
  int64_t downBiasRank = -1;
  // Rows whose logits are all equal: ties, broken towards the lower expert.
  bool tiedRow = false;
  // An expert no row chooses (its logits far below), besides whatever routing leaves out.
  int64_t shunned = -1;
  // A row whose logits the device gets as NaN (the CPU, which refuses them, gets the real ones).
  int64_t nanRow = -1;
};

constexpr int64_t kHidden = HIDDEN;
constexpr float kAlpha = 1.702f, kLimit = 0.75f;

OwnedTensor tensorOf(DType dtype, Shape shape) { return OwnedTensor(dtype, std::move(shape)); }

void storeFloat(OwnedTensor &t, int64_t index, float value) {
  convertFloats(DType::F32, &value, t.dtype, t.storage.data() + index * dtypeSize(t.dtype), 1);
}

float floatAt(const OwnedTensor &t, int64_t index) {
  float value = 0;
  convertFloats(t.dtype, t.storage.data() + index * dtypeSize(t.dtype), DType::F32, &value, 1);
  return value;
}

struct MoeTensors {
  OwnedTensor x, logits, gateUp, down, gateUpBias, downBias, sharedGateUp, sharedDown,
      sharedGate, gateUpScales, downScales;
};

// A stacked expert weight of `experts` x [out, in]: float values in [-0.3, 0.3], or int8
// codes in [-127, 127] / int4 codes (two a byte) with scales [rows, groups] of about
// 0.3 / 127 and 0.3 / 7.
void randomWeights(const MoeCase &c, int64_t experts, int64_t out, int64_t in, int64_t groups,
                   OwnedTensor &weights, OwnedTensor &scales, std::mt19937 &random) {
  std::uniform_real_distribution<float> value(-0.3f, 0.3f), scale(0.5f, 1.5f);
  const int64_t rows = experts * out;
  if (c.weightType == DType::I8 || c.weightType == DType::U8) {
    const bool int4 = c.weightType == DType::U8;
    weights = tensorOf(c.weightType, {rows, int4 ? in / 2 : in});
    for (uint8_t &byte : weights.storage)
      byte = int4 ? static_cast<uint8_t>(random() & 0xff)
                  : static_cast<uint8_t>(static_cast<int8_t>(int(random() % 255) - 127));
    scales = tensorOf(c.scaleType, {rows, groups});
    for (int64_t i = 0; i < rows * groups; ++i)
      storeFloat(scales, i, scale(random) * 0.3f / (int4 ? 7.0f : 127.0f));
    return;
  }
  weights = tensorOf(c.weightType, {rows, in});
  for (int64_t i = 0; i < rows * in; ++i)
    storeFloat(weights, i, value(random));
}

// Expert `local`'s rows of a stacked weight (and of its scales) made NaN.
void poisonExpert(OwnedTensor &weights, OwnedTensor *scales, int64_t local, int64_t out) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OwnedTensor &target = scales && !scales->storage.empty() ? *scales : weights;
  const int64_t perRow = target.shape[1];
  for (int64_t i = local * out * perRow; i < (local + 1) * out * perRow; ++i)
    storeFloat(target, i, nan);
}

MoeTensors makeTensors(const MoeCase &c, int64_t firstExpert, int64_t heldExperts,
                       unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  MoeTensors t;
  t.x = tensorOf(DType::F32, {c.rows, kHidden});
  for (int64_t i = 0; i < c.rows * kHidden; ++i)
    storeFloat(t.x, i, normal(random));
  t.logits = tensorOf(DType::F32, {c.rows, c.experts});
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t e = 0; e < c.experts; ++e)
      storeFloat(t.logits, r * c.experts + e,
                 c.tiedRow && r == 0 ? 0.5f : e == c.shunned ? -40.0f : 2.0f * normal(random));
  // Every rank draws the whole model's weights, so that the ranks' experts are the model's.
  OwnedTensor gateUp, down, gateUpScales, downScales;
  randomWeights(c, c.experts, 2 * c.inter, kHidden, c.gateUpGroups, gateUp, gateUpScales, random);
  randomWeights(c, c.experts, kHidden, c.inter, c.downGroups, down, downScales, random);
  auto slice = [&](const OwnedTensor &whole, int64_t rowsPerExpert) {
    if (whole.storage.empty())
      return OwnedTensor();
    const int64_t rowBytes = static_cast<int64_t>(whole.storage.size()) / whole.shape[0];
    OwnedTensor part = tensorOf(whole.dtype, whole.shape);
    part.shape[0] = heldExperts * rowsPerExpert;
    if (whole.shape.size() == 1)
      part.shape = {heldExperts * rowsPerExpert};
    part.storage.assign(whole.storage.begin() + firstExpert * rowsPerExpert * rowBytes,
                        whole.storage.begin() +
                            (firstExpert + heldExperts) * rowsPerExpert * rowBytes);
    return part;
  };
  t.gateUp = slice(gateUp, 2 * c.inter);
  t.down = slice(down, kHidden);
  t.gateUpScales = slice(gateUpScales, 2 * c.inter);
  t.downScales = slice(downScales, kHidden);
  if (c.biases) {
    OwnedTensor gateUpBias = tensorOf(DType::F32, {c.experts * 2 * c.inter}),
                downBias = tensorOf(DType::F32, {c.experts * kHidden});
    for (OwnedTensor *bias : {&gateUpBias, &downBias})
      for (int64_t i = 0; i < bias->shape[0]; ++i)
        storeFloat(*bias, i, 0.3f * normal(random));
    t.gateUpBias = slice(gateUpBias, 2 * c.inter);
    t.downBias = slice(downBias, kHidden);
  }
  if (c.sharedInter > 0) {
    std::uniform_real_distribution<float> value(-0.3f, 0.3f);
    t.sharedGateUp = tensorOf(DType::F32, {2 * c.sharedInter, kHidden});
    t.sharedDown = tensorOf(DType::F32, {kHidden, c.sharedInter});
    t.sharedGate = tensorOf(DType::BF16, {1, kHidden});
    for (OwnedTensor *w : {&t.sharedGateUp, &t.sharedDown, &t.sharedGate})
      for (int64_t i = 0; i < w->shape[0] * w->shape[1]; ++i)
        storeFloat(*w, i, value(random));
  }
  // The experts of this rank that no row chooses: NaN, so that reading one shows.
  std::set<int64_t> chosen;
  std::vector<float> scores;
  std::vector<int64_t> order;
  std::vector<std::pair<int64_t, float>> routes;
  for (int64_t r = 0; r < c.rows; ++r) {
    ops::routeToken(reinterpret_cast<const float *>(t.logits.storage.data()) + r * c.experts,
                    c.experts, c.topK, std::string(c.scoring) == "sigmoid", c.normalize, scores,
                    order, routes);
    for (const auto &route : routes)
      chosen.insert(route.first);
  }
  for (int64_t local = 0; local < heldExperts; ++local)
    if (!chosen.count(firstExpert + local)) {
      poisonExpert(t.gateUp, &t.gateUpScales, local, 2 * c.inter);
      poisonExpert(t.down, &t.downScales, local, kHidden);
      if (c.biases) {
        OwnedTensor gateUpBias = t.gateUpBias, downBias = t.downBias;
        gateUpBias.shape = {heldExperts * 2 * c.inter, 1};
        downBias.shape = {heldExperts * kHidden, 1};
        poisonExpert(gateUpBias, nullptr, local, 2 * c.inter);
        poisonExpert(downBias, nullptr, local, kHidden);
        t.gateUpBias.storage = gateUpBias.storage;
        t.downBias.storage = downBias.storage;
      }
    }
  return t;
}

ops::AttrMap attrsOf(const MoeCase &c) {
  ops::AttrMap attrs = {{"top_k", ops::Attr::ofInt(c.topK)},
                        {"scoring", ops::Attr::ofString(c.scoring)},
                        {"normalize", ops::Attr::ofInt(c.normalize ? 1 : 0)},
                        {"activation", ops::Attr::ofString(c.activation)}};
  if (c.clamped) {
    attrs["swiglu_alpha"] = ops::Attr::ofFloat(kAlpha);
    attrs["swiglu_limit"] = ops::Attr::ofFloat(kLimit);
  }
  if (c.downBiasRank >= 0)
    attrs["down_bias_rank"] = ops::Attr::ofInt(c.downBiasRank);
  if (!c.rankExperts.empty()) {
    std::vector<int64_t> offsets;
    int64_t first = 0;
    for (int64_t count : c.rankExperts) {
      offsets.push_back(first);
      first += count;
    }
    attrs["rank_experts"] = ops::Attr::ofInts(c.rankExperts);
    attrs["rank_expert_offsets"] = ops::Attr::ofInts(offsets);
  }
  return attrs;
}

std::vector<const OwnedTensor *> inputsOf(const MoeTensors &t) {
  return {&t.x,          &t.logits,     &t.gateUp,     &t.down,         &t.gateUpBias,
          &t.downBias,   &t.sharedGateUp, &t.sharedDown, &t.sharedGate, &t.gateUpScales,
          &t.downScales};
}

struct MoeRun {
  std::vector<float> gpu, cpu;
};

// The step on the emulated device and on the CPU, as rank c.rank.
MoeRun runBoth(const MoeCase &c, const MoeKernels &kernels, unsigned seed) {
  int64_t first = 0, held = c.experts;
  for (int r = 0; r < static_cast<int>(c.rankExperts.size()); ++r) {
    if (r == c.rank) {
      held = c.rankExperts[r];
      break;
    }
    first += c.rankExperts[r];
  }
  const MoeTensors tensors = makeTensors(c, first, held, seed);
  const ops::AttrMap attrs = attrsOf(c);
  MoeRun run;
  run.gpu.assign(c.rows * kHidden, -1.0f);
  run.cpu.assign(c.rows * kHidden, -2.0f);

  EmulatedMoe context(kernels, attrs, c.rank);
  OwnedTensor nanLogits = tensors.logits;
  for (int64_t e = 0; c.nanRow >= 0 && e < c.experts; ++e)
    storeFloat(nanLogits, c.nanRow * c.experts + e, std::numeric_limits<float>::quiet_NaN());
  for (const OwnedTensor *tensor : inputsOf(tensors)) {
    if (tensor == &tensors.logits)
      tensor = &nanLogits;
    if (tensor->storage.empty()) {
      context.inputs.push_back(std::nullopt);
      continue;
    }
    context.inputs.push_back(DeviceTensor{tensor->dtype, tensor->shape,
                                          address(tensor->storage.data())});
  }
  context.outputs.push_back({DType::F32, {c.rows, kHidden}, address(run.gpu.data())});
  std::vector<GpuOpInfo> ops;
  addMoeGpuOps(ops);
  EXPECT_EQ(ops.size(), 1u);
  const Status status = ops[0].run(context);
  EXPECT_TRUE(status.isOk()) << status.message();
  // The device ran the step: each slot once.
  for (size_t slot = 0; slot < kernels.count; ++slot)
    EXPECT_EQ(context.launches[slot], 1) << "slot " << slot;

  ops::Inputs inputs;
  std::vector<TensorRef> refs;
  refs.reserve(11);
  for (const OwnedTensor *tensor : inputsOf(tensors)) {
    refs.push_back(tensor->ref());
    inputs.push_back(tensor->storage.empty() ? nullptr : &refs.back());
  }
  TensorRef out{DType::F32, {c.rows, kHidden}, run.cpu.data()};
  RankOnly rank(c.rank);
  ops::SessionState state;
  state.collectives = c.rankExperts.empty() && c.rank == 0 ? nullptr : &rank;
  const Status cpuStatus = ops::compute("tfm.moe", attrs, inputs, {&out}, &state);
  EXPECT_TRUE(cpuStatus.isOk()) << cpuStatus.message();
  return run;
}

void expectClose(const MoeCase &c, const std::vector<float> &gpu, const std::vector<float> &cpu,
                 const char *what) {
  for (int64_t r = 0; r < c.rows; ++r) {
    double largest = 0;
    for (int64_t h = 0; h < kHidden; ++h)
      largest = std::max(largest, std::fabs(double(cpu[r * kHidden + h])));
    ASSERT_GT(largest, 1e-3) << what << ": row " << r << " is all zeros";
    const double tolerance = 1e-5 + 1e-4 * largest;
    for (int64_t h = 0; h < kHidden; ++h) {
      const float g = gpu[r * kHidden + h], e = cpu[r * kHidden + h];
      ASSERT_TRUE(std::isfinite(g)) << what << ": row " << r << " feature " << h;
      ASSERT_NEAR(g, e, tolerance) << what << ": row " << r << " feature " << h;
    }
  }
}

void checkMoe(const MoeCase &c, const MoeKernels &kernels, unsigned seed = 7) {
  const MoeRun run = runBoth(c, kernels, seed);
  expectClose(c, run.gpu, run.cpu, "gpu against cpu");
}

// One row (a decode step: k experts of E read) and 12 (a prompt).
void checkDecodeAndPrompt(MoeCase c, const MoeKernels &kernels, unsigned seed) {
  for (int64_t rows : {1, 12}) {
    c.rows = rows;
    checkMoe(c, kernels, seed);
  }
}

} // namespace
} // namespace dsrt::test
