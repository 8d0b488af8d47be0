// Attention sinks (GPT-OSS's learned logit per head, ORT GroupQueryAttention's head_sink and
// smooth_softmax: input 10 of tfm.attention, the kernels' SINKS) in the CUDA attention
// kernels, run on the host through CudaEmulation.h against the CPU reference kernel
// (AttentionEmulationCheck.h's check): the flash prefill, the tensor cores' prefill over f16
// and bf16 caches, the split-KV decode with its merge (where the sink counts once, whatever
// the number of splits) over one split and over several, in either block order, GQA decode
// blocks, a sliding window (GPT-OSS alternates sliding and full layers), a row with no key
// to attend (zero with a sink, as the CPU makes it), tensor-parallel ranks (each reads its
// heads' sinks out of the model's), and smooth softmax (a sink of 0 for every head).
// Tolerance: check()'s |gpu − cpu| <= 1e-5 + 1e-4·|cpu| per element, plus the tensor cores'
// operand rounding (2.4 u (1 + 2 g), AttentionEmulationCheck.h). Every case also requires the
// CPU's output without the sinks to miss the reference by more than 10 times the largest
// error that tolerance allows, so kernels that ignored the sinks fail it.
// The paged kernels' sinks are PagedAttentionEmulationTest.cpp's (PagedSinks).
#include "AttentionEmulationHarness.h"

// Once, at global scope: each family's templates include it again inside their namespace,
// where its include guard makes that a no-op.
#include "dsc_common.cuh"

#include "EmulatedHalf.h"
#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <gtest/gtest.h>

#include <vector>

#define EMU_CAT2(family, kind) family##_##kind
#define EMU_CAT(family, kind) EMU_CAT2(family, kind)
#define attention_rotary EMU_CAT(EMU_FAMILY, attention_rotary)
#define attention_prefill EMU_CAT(EMU_FAMILY, attention_prefill)
#define attention_prefill_mma EMU_CAT(EMU_FAMILY, attention_prefill_mma)
#define attention_decode EMU_CAT(EMU_FAMILY, attention_decode)
#define attention_combine EMU_CAT(EMU_FAMILY, attention_combine)

// What the rule gives GPT-OSS's attention (heads of 64, GQA 8/2 here: the group of 4 in one
// decode block), with its sinks: 16 query rows and 64 keys per prefill tile, 128 keys per
// decode split.
#define EMU_FAMILY gptoss
#define HEAD_DIM 64
#define ROTARY_DIM 64
#define ROTARY_INTERLEAVED 0
#define POS_DTYPE 5
#define WARPS 4
#define Q_TILE 16
#define K_TILE 64
#define SPLIT_KEYS 128
#define CAUSAL 1
#define WINDOW 0
#define ALIBI 0
#define MASK_DTYPE 5
#define UNATTENDED_CAUSAL 0
#define FUSED_ROTARY 1
#define FUSED_COMBINE 1
#define GROUP_HEADS 4
#define SINKS 1
#include "AttentionEmulationFamily.inc"

// Its sliding layers (a window of 4 here, so that it cuts these short sequences), heads of 16.
#define EMU_FAMILY gptoss_swa
#define HEAD_DIM 16
#define ROTARY_DIM 16
#define ROTARY_INTERLEAVED 0
#define POS_DTYPE 5
#define WARPS 4
#define Q_TILE 16
#define K_TILE 64
#define SPLIT_KEYS 128
#define CAUSAL 1
#define WINDOW 4
#define ALIBI 0
#define MASK_DTYPE 5
#define UNATTENDED_CAUSAL 0
#define FUSED_ROTARY 1
#define FUSED_COMBINE 1
#define GROUP_HEADS 2
#define SINKS 1
#include "AttentionEmulationFamily.inc"

// ORT's smooth_softmax (a sink of 0 logit for every head), MQA 4/1: one decode block for all
// four heads.
#define EMU_FAMILY smooth
#define HEAD_DIM 16
#define ROTARY_DIM 16
#define ROTARY_INTERLEAVED 0
#define POS_DTYPE 5
#define WARPS 4
#define Q_TILE 16
#define K_TILE 64
#define SPLIT_KEYS 128
#define CAUSAL 1
#define WINDOW 0
#define ALIBI 0
#define MASK_DTYPE 6
#define UNATTENDED_CAUSAL 0
#define FUSED_ROTARY 1
#define FUSED_COMBINE 1
#define GROUP_HEADS 4
#define SINKS 1
#include "AttentionEmulationFamily.inc"

// The tensor cores' prefill over an f16 cache (64 query rows per block), full attention.
#define EMU_FAMILY gptoss_f16_mma
#define HEAD_DIM 16
#define ROTARY_DIM 16
#define ROTARY_INTERLEAVED 0
#define POS_DTYPE 5
#define WARPS 4
#define PREFILL_MMA 1
#define Q_TILE 64
#define K_TILE 64
#define SPLIT_KEYS 128
#define CAUSAL 1
#define WINDOW 0
#define ALIBI 0
#define MASK_DTYPE 5
#define UNATTENDED_CAUSAL 0
#define FUSED_ROTARY 1
#define FUSED_COMBINE 1
#define KV_DTYPE 2
#define GROUP_HEADS 2
#define SINKS 1
#include "AttentionEmulationFamily.inc"

// And over a bf16 cache with the window, heads of 32.
#define EMU_FAMILY gptoss_swa_bf16_mma
#define HEAD_DIM 32
#define ROTARY_DIM 32
#define ROTARY_INTERLEAVED 0
#define POS_DTYPE 5
#define WARPS 4
#define PREFILL_MMA 1
#define Q_TILE 64
#define K_TILE 64
#define SPLIT_KEYS 128
#define CAUSAL 1
#define WINDOW 4
#define ALIBI 0
#define MASK_DTYPE 5
#define UNATTENDED_CAUSAL 0
#define FUSED_ROTARY 1
#define FUSED_COMBINE 1
#define KV_DTYPE 3
#define GROUP_HEADS 2
#define SINKS 1
#include "AttentionEmulationFamily.inc"

#undef attention_rotary
#undef attention_prefill
#undef attention_prefill_mma
#undef attention_decode
#undef attention_combine

#include "AttentionEmulationCheck.h"

namespace dsrt::cuda {
namespace {

const Family kGptOss{"gptoss", gptoss::kernels, 64, 8, 2, 1, 0, 0, 64, 0, "all", DType::I64,
                     0, false, 0, DType::F32, DType::F32, 1};
const Family kGptOssSwa{"gptoss_swa", gptoss_swa::kernels, 16, 4, 2, 1, 0, 4, 16, 0, "all",
                        DType::I64, 0, false, 0, DType::F32, DType::F32, 1};
const Family kSmooth{"smooth", smooth::kernels, 16, 4, 1, 1, 0, 0, 16, 0, "all", DType::I32,
                     0, false, 0, DType::F32, DType::F32, 2};
const Family kGptOssF16Mma{"gptoss_f16_mma", gptoss_f16_mma::kernels, 16, 4, 2, 1, 0, 0, 16, 0,
                           "all", DType::I64, 0, false, 0, DType::F16, DType::F32, 1};
const Family kGptOssSwaBf16Mma{"gptoss_swa_bf16_mma", gptoss_swa_bf16_mma::kernels, 32, 4, 2, 1,
                               0, 4, 32, 0, "all", DType::I64, 0, false, 0, DType::BF16,
                               DType::F32, 1};

const Family *const kF32Families[] = {&kGptOss, &kGptOssSwa, &kSmooth};
const Family *const kHalfFamilies[] = {&kGptOssF16Mma, &kGptOssSwaBf16Mma};

// I/O mode (past inputs, presents) and no cache at all, a row padded throughout (no key:
// zero with a sink, not the values' average).
TEST(AttentionSinksEmulation, IoModePrefill) {
  for (const Family *f : kF32Families) {
    Scenario s;
    s.batch = 3;
    s.past = 3;
    s.fresh = 6;
    s.padding = {0, 2, 9};
    check(*f, s);
    s.pastInputs = false;
    s.past = 0;
    s.padding = {0, 2, 6};
    check(*f, s);
  }
}

// The session's prefill over several query and key tiles (70 tokens), and a chunk after a
// cached past; the tensor cores' over two query tiles of 64, a row padded throughout.
TEST(AttentionSinksEmulation, SessionPrefill) {
  for (const Family *f : kF32Families) {
    Scenario s;
    s.session = true;
    s.fresh = 70;
    s.padding = {0, 5};
    s.capacity = 96;
    check(*f, s);
    s.past = 20;
    s.fresh = 4;
    s.padding = {0, 3};
    s.capacity = 40;
    check(*f, s);
  }
}

TEST(AttentionSinksEmulation, TensorCorePrefill) {
  for (const Family *f : kHalfFamilies) {
    ASSERT_TRUE(f->kernels().prefillOnTensorCores) << f->name;
    check(*f, tensorCorePrompt());
    check(*f, tensorCoreChunk());
  }
}

// Decode within one split (20 keys), and over two splits of a 300-row cache (three in the
// grid) under a bucketed mask with a row that attends nothing, its blocks in either order:
// the sink joins the last block's merge once, not each split.
TEST(AttentionSinksEmulation, DecodeOverOneAndSeveralSplits) {
  std::vector<const Family *> families(std::begin(kF32Families), std::end(kF32Families));
  families.insert(families.end(), std::begin(kHalfFamilies), std::end(kHalfFamilies));
  for (const Family *f : families) {
    Scenario one;
    one.session = true;
    one.past = 19;
    one.fresh = 1;
    one.padding = {0, 4};
    one.capacity = 32;
    check(*f, one);
    for (bool reversed : {false, true})
      check(*f, capturedDecodeOverSplits(reversed));
  }
}

// Rank 1 of 2 reads heads [H/2, H) of the model's sinks: in a prefill chunk and a decode step.
TEST(AttentionSinksEmulation, TensorParallelRankReadsItsHeadsSinks) {
  for (const Family *f : {&kGptOss, &kGptOssSwa, &kGptOssF16Mma}) {
    Scenario s;
    s.session = true;
    s.past = 9;
    s.fresh = 1;
    s.padding = {0, 2};
    s.capacity = 24;
    s.rank = 1;
    s.ranks = 2;
    check(*f, s);
    s.fresh = 5;
    check(*f, s);
  }
}

// The launcher refuses, by name, sinks of another shape and kernels compiled without SINKS
// for a step with sinks (or with it for one without), before anything launches.
TEST(AttentionSinksEmulation, MismatchesAreRefused) {
  const int64_t H = 4, KH = 2, D = 16;
  std::vector<float> q(H * D, 0.5f), kv(KH * D, 0.25f), sinks(H, 1.0f);
  std::vector<int64_t> mask{1}, positions{0};
  auto run = [&](const KernelSet &kernels, int64_t sinkCount) {
    Scenario io;
    io.pastInputs = false;
    EmulatedStep step(kernels, 2, attributesOf(kGptOssSwa, io));
    step.inputs = {DeviceTensor{DType::F32, {1, 1, H * D}, addressOf(q.data())},
                   DeviceTensor{DType::F32, {1, 1, KH * D}, addressOf(kv.data())},
                   DeviceTensor{DType::F32, {1, 1, KH * D}, addressOf(kv.data())},
                   DeviceTensor{DType::I64, {1, 1}, addressOf(mask.data())},
                   std::nullopt,
                   std::nullopt,
                   DeviceTensor{DType::I64, {1, 1}, addressOf(positions.data())}};
    if (sinkCount > 0) {
      step.inputs.resize(10);
      step.inputs.push_back(DeviceTensor{DType::F32, {sinkCount}, addressOf(sinks.data())});
    }
    std::vector<float> out(H * D);
    step.outputs.push_back(DeviceTensor{DType::F32, {1, 1, H * D}, addressOf(out.data())});
    std::vector<GpuOpInfo> launchers;
    addAttentionGpuOps(launchers);
    Status status = launchers[0].run(step);
    EXPECT_EQ(step.launches[0] + step.launches[1], 0);
    return status.isOk() ? std::string() : status.message();
  };
  const KernelSet withSinks = gptoss_swa::kernels();
  KernelSet withoutSinks = gptoss_swa::kernels();
  withoutSinks.constants[1].erase("SINKS");
  std::string error = run(withSinks, 3);
  EXPECT_NE(error.find("the sinks must be f32 [4]"), std::string::npos) << error;
  error = run(withoutSinks, H);
  EXPECT_NE(error.find("SINKS -1, the step needs 1"), std::string::npos) << error;
  error = run(withSinks, 0);
  EXPECT_NE(error.find("SINKS 1, the step needs -1"), std::string::npos) << error;
}

} // namespace
} // namespace dsrt::cuda
