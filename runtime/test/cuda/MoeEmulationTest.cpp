// tfm.moe's CUDA launcher (runtime/src/cuda/ops/MoeOps.cpp) and its templates (moe_route,
// moe_experts, moe_combine) run on the host through the emulation of CUDA's threads, barriers
// and warp shuffles (CudaEmulation.h), against the CPU's tfm.moe (runtime/src/ops/
// TransformerMoe.cpp, its reference kernels through the op registry) on the same stored
// tensors (the harness: MoeEmulation.h): f32, bf16, int8 (f16 scales) and int4 experts, each
// through the 16-byte loads and the one-weight path, softmax and sigmoid routing over 4 to 40
// experts, renormalised or not, GPT-OSS's clamped SwiGLU with biases, Qwen2-MoE's shared
// expert, one row (decode) and 12, the ranks of an expert-parallel split and a tensor-parallel
// rank with down_bias_rank, and a row of NaN logits.
// Every expert that no row chooses has NaN weights (NaN scales for int8 and int4) and NaN
// biases: a kernel that read one would put a NaN in the output, so a finite result that
// matches proves that only the chosen experts are read (a decode step reads k of E).
// Tolerance: |gpu - cpu| <= 1e-5 + 1e-4 * max|cpu| over the row. Both read the same stored
// weights exactly and compute in f32; the sums run in another order (the products of a
// 40-input gate row and of a 24-input down row, warp-reduced; the routing's softmax sum),
// which moves a result by a few units of f32's 6e-8 relative per term. A wrong expert,
// weight, order or scale moves it by the weights' own size, 1e-2 and more.
#include "CudaEmulation.h"

#include "dsc_common.cuh"

#include "EmulatedHalf.h"

#include <map>
#include <string>

#include "MoeEmulationFamilies.inc"

#include "MoeEmulation.h"

namespace dsrt::test {
namespace {

MoeKernels floatKernels(int64_t experts, int64_t topK, int64_t sigmoid, int64_t normalize) {
  MoeKernels set;
  if (experts == 4 && topK == 2 && !sigmoid && normalize)
    setSlot(set, 0, &::route_e4k2::route_e4k2_kernel, routeConstants(4, 2, 0, 1));
  else if (experts == 8 && topK == 3 && !sigmoid && normalize)
    setSlot(set, 0, &::route_e8k3::route_e8k3_kernel, routeConstants(8, 3, 0, 1));
  else
    setSlot(set, 0, &::route_e8k2_sigmoid::route_e8k2_sigmoid_kernel, routeConstants(8, 2, 1, 0));
  setSlot(set, 1, &::up_f32::up_f32_kernel, up_f32::kConstants);
  setSlot(set, 2, &::down_f32::down_f32_kernel, down_f32::kConstants);
  const std::map<std::string, int64_t> combine = {
      {"HIDDEN", kHidden}, {"TOP_K", topK}, {"SHARED", 0}, {"BLOCK", BLOCK}};
  if (topK == 3)
    setSlot(set, 3, &::combine_k3::combine_k3_kernel, combine);
  else
    setSlot(set, 3, &::combine_k2::combine_k2_kernel, combine);
  return set;
}

TEST(MoeEmulation, SoftmaxTop2Of4RenormalisedDecodeAndPrompt) {
  MoeCase c;
  for (int64_t rows : {1, 12}) {
    c.rows = rows;
    c.tiedRow = rows > 1;  // row 0: four equal logits, experts 0 and 1 chosen
    checkMoe(c, floatKernels(4, 2, 0, 1));
  }
}

TEST(MoeEmulation, SoftmaxTop3Of8WithAnExpertNoRowChooses) {
  MoeCase c;
  c.experts = 8;
  c.topK = 3;
  c.shunned = 5;
  checkDecodeAndPrompt(c, floatKernels(8, 3, 0, 1), 11);
}

// 40 experts, top 5: the routing warp's lanes 0-7 scan two experts each, and most experts
// go unchosen (NaN weights) in a decode step.
TEST(MoeEmulation, SoftmaxTop5Of40) {
  MoeCase c;
  c.experts = 40;
  c.topK = 5;
  c.inter = 8;
  MoeKernels set = floatKernels(4, 2, 0, 1);
  setSlot(set, 0, &::route_e40k5::route_e40k5_kernel, routeConstants(40, 5, 0, 1));
  setSlot(set, 3, &::combine_k5::combine_k5_kernel,
          {{"HIDDEN", kHidden}, {"TOP_K", 5}, {"SHARED", 0}, {"BLOCK", BLOCK}});
  checkDecodeAndPrompt(c, set, 37);
}

TEST(MoeEmulation, SigmoidTop2Of8NotRenormalised) {
  MoeCase c;
  c.experts = 8;
  c.scoring = "sigmoid";
  c.normalize = false;
  c.rows = 12;
  c.inter = 18;  // the down rows' 18 inputs: one f32 at a time (not whole 16-byte loads)
  checkMoe(c, floatKernels(8, 2, 1, 0), 13);
}

// GPT-OSS's: bf16 experts with f32 biases and the clamped SwiGLU of kAlpha and kLimit.
MoeKernels gptOssKernels() {
  MoeKernels set = floatKernels(4, 2, 0, 1);
  std::map<std::string, int64_t> up = up_bf16_clamped::kConstants;
  uint32_t alpha = 0, limit = 0;
  std::memcpy(&alpha, &kAlpha, 4);
  std::memcpy(&limit, &kLimit, 4);
  up["ALPHA_BITS"] = alpha;
  up["LIMIT_BITS"] = limit;
  setSlot(set, 1, &::up_bf16_clamped::up_bf16_clamped_kernel, up);
  setSlot(set, 2, &::down_bf16_bias::down_bf16_bias_kernel, down_bf16_bias::kConstants);
  return set;
}

// GPT-OSS: bf16 experts, f32 biases, the clamped SwiGLU (limit 0.75: the gate and up values,
// of spread ~1, cross it both ways).
TEST(MoeEmulation, GptOssClampedSwigluWithBiases) {
  MoeCase c;
  c.weightType = DType::BF16;
  c.biases = true;
  c.clamped = true;
  c.inter = 20;  // gate-up rows in 16-byte loads (40 inputs), down rows (20) one at a time
  const MoeKernels set = gptOssKernels();
  checkDecodeAndPrompt(c, set, 17);
}

// Qwen2-MoE: a shared expert (f32, width 16) and its sigmoid gate (bf16).
TEST(MoeEmulation, SharedExpertWithItsGate) {
  MoeCase c;
  c.sharedInter = 16;
  MoeKernels set = floatKernels(4, 2, 0, 1);
  set.count = 6;
  setSlot(set, 3, &::combine_k2_shared::combine_k2_shared_kernel,
          {{"HIDDEN", kHidden}, {"TOP_K", 2}, {"SHARED", 1}, {"BLOCK", BLOCK},
           {"SHARED_GATE_DT", 3}});
  setSlot(set, 4, &::shared_up_f32::shared_up_f32_kernel, shared_up_f32::kConstants);
  setSlot(set, 5, &::shared_down_f32::shared_down_f32_kernel, shared_down_f32::kConstants);
  checkDecodeAndPrompt(c, set, 19);
}

// int8 experts with f16 scales: per channel for gate-up (40 inputs: one byte at a time), 3
// groups for down: of 8 over inter 24 (one at a time), of 16 over inter 48 (16-byte loads).
TEST(MoeEmulation, Int8ExpertsPerChannelAndInGroups) {
  MoeCase c;
  c.weightType = DType::I8;
  c.scaleType = DType::F16;
  c.gateUpGroups = 1;
  c.downGroups = 3;
  c.activation = "gelu_tanh";
  MoeKernels set = floatKernels(4, 2, 0, 1);
  setSlot(set, 1, &::up_i8::up_i8_kernel, up_i8::kConstants);
  setSlot(set, 2, &::down_i8::down_i8_kernel, down_i8::kConstants);
  for (int64_t inter : {24, 48}) {
    c.inter = inter;
    checkDecodeAndPrompt(c, set, 23);
  }
}

// int4 experts (two codes a byte) with f32 scales: gate-up in groups of 20, down in 2 groups,
// of 12 over inter 24 (one code at a time) and of 32 over inter 64 (16-byte loads).
TEST(MoeEmulation, Int4Experts) {
  MoeCase c;
  c.weightType = DType::U8;
  c.scaleType = DType::F32;
  c.gateUpGroups = 2;  // 40 = 2 x 20
  c.downGroups = 2;
  MoeKernels set = floatKernels(8, 3, 0, 1);
  c.experts = 8;
  c.topK = 3;
  setSlot(set, 1, &::up_i4::up_i4_kernel, up_i4::kConstants);
  setSlot(set, 2, &::down_i4::down_i4_kernel, down_i4::kConstants);
  for (int64_t inter : {24, 64}) {
    c.inter = inter;
    checkDecodeAndPrompt(c, set, 29);
  }
}

// Expert parallelism: two ranks of two experts each. Each rank's partial sum is the CPU
// rank's, and the two partials add up to the whole step's output (what the plan's
// all-reduce computes after it).
TEST(MoeEmulation, ExpertParallelRanksHoldHalfTheExpertsEach) {
  MoeCase whole;
  whole.rows = 12;
  whole.biases = true;
  whole.weightType = DType::BF16;
  whole.clamped = true;
  const MoeKernels set = gptOssKernels();
  const MoeRun all = runBoth(whole, set, 31);
  expectClose(whole, all.gpu, all.cpu, "one rank");
  std::vector<float> sum(all.gpu.size(), 0.0f);
  for (int rank : {0, 1}) {
    MoeCase part = whole;
    part.rankExperts = {2, 2};
    part.rank = rank;
    const MoeRun run = runBoth(part, set, 31);
    for (size_t i = 0; i < sum.size(); ++i) {
      const float tolerance = 1e-5f + 1e-4f * std::fabs(run.cpu[i]) + 1e-4f;
      ASSERT_NEAR(run.gpu[i], run.cpu[i], tolerance) << "rank " << rank << " element " << i;
      sum[i] += run.gpu[i];
    }
  }
  expectClose(whole, sum, all.cpu, "the ranks' sum");
}

// A row whose router scores are all NaN (the CPU kernel refuses the step) chooses no expert on
// the device: its output is zeros, and the other rows are the CPU's.
TEST(MoeEmulation, NanScoresChooseNoExpert) {
  MoeCase c;
  c.rows = 3;
  c.nanRow = 1;
  const MoeRun run = runBoth(c, floatKernels(4, 2, 0, 1), 43);
  for (int64_t h = 0; h < kHidden; ++h)
    EXPECT_EQ(run.gpu[kHidden + h], 0.0f) << h;
  MoeCase others = c;
  others.rows = 1;
  expectClose(others, {run.gpu.begin(), run.gpu.begin() + kHidden},
              {run.cpu.begin(), run.cpu.begin() + kHidden}, "row 0");
  expectClose(others, {run.gpu.begin() + 2 * kHidden, run.gpu.end()},
              {run.cpu.begin() + 2 * kHidden, run.cpu.end()}, "row 2");
}

// Tensor parallelism splits every expert's inter features (each rank's weights are a smaller
// expert, inter 16 here where the kernels know only the hidden size) and one rank adds the
// down biases: rank 1 of `down_bias_rank` 0 adds none, rank 0 adds them.
TEST(MoeEmulation, TensorParallelRankAddsTheDownBiasesOnlyWhereAsked) {
  MoeCase c;
  c.rows = 3;
  c.inter = 16;
  c.biases = true;
  c.weightType = DType::BF16;
  c.clamped = true;
  c.downBiasRank = 0;
  for (int rank : {0, 1}) {
    c.rank = rank;
    checkMoe(c, gptOssKernels(), 41);
  }
}

// The launcher refuses what its kernels were not generated for, by name.
TEST(MoeEmulation, RefusesMismatchedKernels) {
  MoeCase c;
  c.rows = 2;
  MoeKernels set = floatKernels(4, 2, 0, 1);
  set.constants[1]["WT"] = 3;  // generated for bf16 gate-up weights
  const MoeTensors tensors = makeTensors(c, 0, 4, 3);
  EmulatedMoe context(set, attrsOf(c), 0);
  for (const OwnedTensor *tensor : inputsOf(tensors))
    context.inputs.push_back(tensor->storage.empty()
                                 ? std::nullopt
                                 : std::optional<DeviceTensor>(DeviceTensor{
                                       tensor->dtype, tensor->shape,
                                       address(tensor->storage.data())}));
  std::vector<float> out(c.rows * kHidden);
  context.outputs.push_back({DType::F32, {c.rows, kHidden}, address(out.data())});
  std::vector<GpuOpInfo> ops;
  addMoeGpuOps(ops);
  const Status status = ops[0].run(context);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("gate_up"), std::string::npos) << status.message();
  EXPECT_EQ(context.launches[0], 0);
}

} // namespace
} // namespace dsrt::test
