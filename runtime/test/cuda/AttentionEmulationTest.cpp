// tfm.attention's CUDA launcher (runtime/src/cuda/ops/AttentionOps.cpp) and its kernel
// templates (codegen/kernels/attention_*.cuh) run on the host through a small emulation of
// CUDA's execution model (CudaEmulation.h), against the CPU reference kernel
// (ops::compute, runtime/src/ops/Transformer.cpp) on random inputs. No GPU is needed: this
// checks the launcher's parameters against the templates' signatures, the kernels' indexing,
// masks, rotary forms, ALiBi, windows, GQA, Gemma-2's logit soft-capping, heads of 16, 128
// and 256 (the rule's three tile shapes), tensor-parallel head offsets, the rows with no
// key to attend, both cache modes, the split-KV decode over a left-padded (bucketed) mask
// and the flash tiles' online softmax. Tolerance: |gpu − cpu| <= 1e-5 + 1e-4·|cpu| per
// element (the kernels sum in another order and take cos/sin in double). For the
// soft-capped families the check also requires the CPU's output without the cap to differ
// from the capped one by more than 1e-2 somewhere, so kernels that ignored the cap fail.
#include "AttentionEmulationHarness.h"

// Once, at global scope: each family's templates (AttentionEmulationFamily.inc) include it
// again inside their namespace, where its include guard makes that a no-op.
#include "dsc_common.cuh"

#include "EmulatedHalf.h"
#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// Each family's kernels (the templates under their own names and namespaces).
#include "AttentionEmulationFamilies.inc"

#include "AttentionEmulationCheck.h"

namespace dsrt::cuda {
namespace {

const Family kGpt2{"gpt2", gpt2::kernels, 16, 4, 4, 1, 0, 0, 0, 0, "all", DType::I64};
const Family kLlama{"llama", llama::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "all", DType::I64};
const Family kBloom{"bloom", bloom::kernels, 16, 4, 4, 1, 1, 0, 0, 0, "all", DType::I64};
const Family kGptj{"gptj", gptj::kernels, 16, 4, 4, 1, 0, 0, 8, 1, "all", DType::I64};
const Family kGptNeo{"gptneo", gptneo::kernels, 16, 4, 4, 1, 0, 4, 0, 0, "causal", DType::I64};
const Family kBert{"bert", bert::kernels, 16, 4, 4, 0, 0, 0, 0, 0, "all", DType::Bool};
const Family kModernBert{"modernbert", modernbert::kernels, 16, 4, 4, 0, 0, 3, 0, 0, "all",
                         DType::Bool};
const Family kWide128{"wide128", wide128::kernels, 128, 4, 2, 1, 0, 0, 64, 0, "all", DType::I32};
const Family kWide256{"wide256", wide256::kernels, 256, 2, 2, 1, 1, 0, 0, 0, "all", DType::I64};
const Family kGemma2{"gemma2",  gemma2::kernels, 16, 4, 2, 1, 0, 4, 16, 0, "all", DType::I64,
                     0.25f};
const Family kSdpa{"sdpa", sdpa::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "zero", DType::I64};
const Family kLlamaPacked{"llama_packed", llama_packed::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "all",
                          DType::I64};
const Family kGemma2Wide{"gemma2wide", gemma2wide::kernels, 256, 2, 1, 1, 0, 0, 256, 0, "all",
                         DType::I64, 1.0f};
const Family kQwen3{"qwen3", qwen3::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "all", DType::I64, 0,
                    false, true};
const Family kQwen3Packed{"qwen3_packed", qwen3_packed::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "all",
                          DType::I64, 0, false, true};
const Family kOlmo2{"olmo2", olmo2::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "all", DType::I64, 0,
                    false, 2};
const Family kOlmo2Packed{"olmo2_packed", olmo2_packed::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "all",
                          DType::I64, 0, false, 2};
const Family kHunyuan{"hunyuan", hunyuan::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "all", DType::I64,
                      0, false, 3};
const Family kHunyuanPacked{"hunyuan_packed", hunyuan_packed::kernels, 16, 4, 2, 1, 0, 0, 16, 0,
                            "all", DType::I64, 0, false, 3};
const Family kGemma3Wide{"gemma3wide", gemma3wide::kernels, 256, 2, 1, 1, 0, 4, 256, 0, "all",
                         DType::I64, 0, false, true};
const Family kGemma4Wide{"gemma4wide", gemma4wide::kernels, 512, 2, 1, 1, 0, 0, 128, 0, "all",
                         DType::I64, 0, false, true};
const Family kLlamaF16Cache{"llama_f16cache", llama_f16cache::kernels, 16, 4, 2, 1, 0, 0, 16, 0,
                            "all", DType::I64, 0, false, false, DType::F16};
const Family kBloomBf16Cache{"bloom_bf16cache", bloom_bf16cache::kernels, 16, 4, 4, 1, 1, 0, 0, 0,
                             "all", DType::I64, 0, false, false, DType::BF16};

const Family kMqa{"mqa", mqa::kernels, 16, 6, 1, 1, 0, 0, 16, 0, "all", DType::I64};
const Family kGqa3AlibiBf16Cache{"gqa3_alibi_bf16cache", gqa3_alibi_bf16cache::kernels, 16, 6, 2,
                                 1, 1, 100, 0, 0, "all", DType::I32, 0, false, false,
                                 DType::BF16};

// The tensor cores' prefill beyond llama_f16cache (AttentionEmulationFamilies.inc).
const Family kGemma2MmaBf16{"gemma2_mma_bf16", gemma2_mma_bf16::kernels, 32, 4, 2, 1, 0, 4, 32,
                            0, "all", DType::I64, 0.25f, false, false, DType::BF16};
const Family kWide128MmaF16{"wide128_mma_f16", wide128_mma_f16::kernels, 128, 4, 2, 1, 0, 0, 64,
                            0, "zero", DType::I32, 0, false, false, DType::F16};

const Family kGemmaMma256Bf16{"gemma_mma256_bf16", gemma_mma256_bf16::kernels, 256, 4, 2, 1, 0, 40,
                              256, 0, "all", DType::I64, 1.0f, false, true, DType::BF16,
                              DType::BF16};
const Family kGemma4Mma512F16{"gemma4_mma512_f16", gemma4_mma512_f16::kernels, 512, 2, 2, 1, 0,
                              0, 128, 0, "all", DType::I64, 0, false, true, DType::F16};

const Family *const kDecoders[] = {&kGpt2,   &kLlama,  &kBloom, &kGptj,
                                   &kGptNeo, &kGemma2, &kSdpa};
// Families whose kernels write a half session cache (KV_DTYPE): session scenarios only.
// Half session caches whose results are the plan's half activation dtype too.
const Family kLlamaF16Out{"llama_f16out", llama_f16out::kernels, 16, 4, 2, 1, 0, 0, 16, 0,
                          "all", DType::I64, 0, false, false, DType::F16, DType::F16};
const Family kBloomBf16Out{"bloom_bf16out", bloom_bf16out::kernels, 16, 4, 4, 1, 1, 0, 0, 0,
                           "all", DType::I64, 0, false, false, DType::BF16, DType::BF16};

const Family *const kHalfCaches[] = {&kLlamaF16Cache, &kBloomBf16Cache, &kGemma2MmaBf16,
                                     &kWide128MmaF16, &kLlamaF16Out, &kBloomBf16Out};

TEST(AttentionEmulation, IoModePromptWithPaddedRows) {
  for (const Family *f : kDecoders) {
    Scenario s;
    s.batch = 3;
    s.fresh = 9;
    s.padding = {0, 3, 9};  // the last row attends nothing at all
    check(*f, s);
  }
}

TEST(AttentionEmulation, IoModeWithPast) {
  for (const Family *f : kDecoders) {
    Scenario s;
    s.past = 6;
    s.fresh = 3;
    s.padding = {0, 4};
    check(*f, s);
  }
}

TEST(AttentionEmulation, EncoderWithoutCacheOrPresents) {
  Scenario s;
  s.batch = 2;
  s.fresh = 7;
  s.padding = {0, 2};
  s.pastInputs = false;
  check(kBert, s);
}

// A window on both sides of each query (ModernBERT's local layers), over more keys than a
// tile: each query's keys before and after its window are masked.
TEST(AttentionEmulation, EncoderUnderABidirectionalWindow) {
  Scenario s;
  s.batch = 2;
  s.fresh = 70;
  s.padding = {0, 5};
  s.pastInputs = false;
  check(kModernBert, s);
}

TEST(AttentionEmulation, SessionPrefillOverSeveralTiles) {
  // 70 tokens: five query tiles of 16 and two key tiles of 64.
  for (const Family *f : {&kBloom, &kGptNeo, &kLlama, &kGemma2, &kLlamaF16Cache,
                          &kBloomBf16Cache, &kBloomBf16Out}) {
    Scenario s;
    s.session = true;
    s.fresh = 70;
    s.padding = {0, 5};
    s.capacity = 96;
    check(*f, s);
  }
}

// The tensor cores' prefill (attention_prefill_mma): 70 new tokens are two query tiles of
// 64, the second mostly beyond the prompt, over two or three key tiles; a row padded
// throughout attends nothing; after a cached past of 20 the chunk's keys start mid-tile,
// under a mask bucketed wider than the keys; and on rank 1 of 2 the block reads its rank's
// heads.
TEST(AttentionEmulation, TensorCorePrefill) {
  for (const Family *f : {&kLlamaF16Cache, &kGemma2MmaBf16, &kWide128MmaF16, &kLlamaF16Out,
                          &kGemmaMma256Bf16, &kGemma4Mma512F16}) {
    ASSERT_TRUE(f->kernels().prefillOnTensorCores) << f->name;
    check(*f, tensorCorePrompt());
    Scenario chunk = tensorCoreChunk();
    check(*f, chunk);
    chunk.rank = 1;
    chunk.ranks = 2;
    check(*f, chunk);
  }
}

TEST(AttentionEmulation, SessionChunkAfterCachedPast) {
  std::vector<const Family *> families(std::begin(kDecoders), std::end(kDecoders));
  families.insert(families.end(), std::begin(kHalfCaches), std::end(kHalfCaches));
  for (const Family *f : families) {
    Scenario s;
    s.session = true;
    s.past = 20;
    s.fresh = 4;
    s.padding = {0, 3};
    s.capacity = 40;
    check(*f, s);
  }
}

// capturedDecodeOverSplits (AttentionEmulationCheck.h): 141 keys over two splits, a
// bucketed mask and a row that attends nothing, its blocks in either order.
TEST(AttentionEmulation, CapturedDecodeOverSplitsAndABucketedMask) {
  std::vector<const Family *> families(std::begin(kDecoders), std::end(kDecoders));
  families.insert(families.end(), std::begin(kHalfCaches), std::end(kHalfCaches));
  for (const Family *f : families)
    for (bool reversed : {false, true})
      check(*f, capturedDecodeOverSplits(reversed));
}

// A decode step after 9 cached tokens on rank `rank` of `ranks`.
Scenario rankDecode(int rank, int ranks) {
  Scenario decode;
  decode.session = true;
  decode.past = 9;
  decode.fresh = 1;
  decode.padding = {0, 2};
  decode.capacity = 16;
  decode.rank = rank;
  decode.ranks = ranks;
  return decode;
}

TEST(AttentionEmulation, TensorParallelRankReadsItsHeads) {
  // Rank 1 of 2: query heads [2, 4), KV heads [1, 2) of llama's 4/2 (GQA), and heads [2, 4)
  // of BLOOM's ALiBi slopes; the I/O past holds every KV head.
  // The half caches' families (session scenarios only) decode on that rank too.
  const Scenario decode = rankDecode(1, 2);
  for (const Family *f : {&kLlama, &kBloom, &kGemma2, &kLlamaF16Cache, &kBloomBf16Cache}) {
    if (f->cacheType == DType::F32) {
      Scenario io;
      io.past = 5;
      io.fresh = 3;
      io.padding = {0, 2};
      io.rank = 1;
      io.ranks = 2;
      check(*f, io);
    }
    check(*f, decode);
  }
}

// The cap is compiled into the kernels: a step whose `softcap` differs from the kernels'
// SOFTCAP_BITS (a plan not made by the rule) is refused, not run with the kernels' cap.
TEST(AttentionEmulation, SoftcapMustMatchTheKernels) {
  struct Case {
    Family family;        // the step's attributes
    const Family &kernels;  // the kernels it is given
  };
  Family capped = kLlama, uncapped = kGemma2, otherCap = kGemma2;
  capped.softcap = 0.25f;   // llama's kernels have no SOFTCAP_BITS
  uncapped.softcap = 0;     // gemma2's have 0.25f's
  otherCap.softcap = 0.5f;
  for (const Case &c : {Case{capped, kLlama}, Case{uncapped, kGemma2}, Case{otherCap, kGemma2}}) {
    const Family &f = c.family;
    const int64_t B = 1, S = 2, H = f.heads, KH = f.kvHeads, D = f.headDim;
    std::vector<float> q(B * S * H * D), kv(B * S * KH * D), out(B * S * H * D);
    std::vector<int64_t> mask(B * S, 1), positions(B * S, 0);
    const KernelSet kernels = c.kernels.kernels();
    Scenario scenario;
    EmulatedStep step(kernels, 2, attributesOf(f, scenario));
    step.inputs = {DeviceTensor{DType::F32, {B, S, H * D}, addressOf(q.data())},
                   DeviceTensor{DType::F32, {B, S, KH * D}, addressOf(kv.data())},
                   DeviceTensor{DType::F32, {B, S, KH * D}, addressOf(kv.data())},
                   DeviceTensor{DType::I64, {B, S}, addressOf(mask.data())},
                   std::nullopt,
                   std::nullopt,
                   DeviceTensor{DType::I64, {B, S}, addressOf(positions.data())}};
    step.outputs.push_back(DeviceTensor{DType::F32, {B, S, H * D}, addressOf(out.data())});
    std::vector<GpuOpInfo> launchers;
    addAttentionGpuOps(launchers);
    Status run = launchers.at(0).run(step);
    EXPECT_FALSE(run.isOk()) << f.name << " softcap " << f.softcap;
    EXPECT_NE(run.message().find("SOFTCAP_BITS"), std::string::npos) << run.message();
    EXPECT_EQ(step.launches[0] + step.launches[1], 0) << f.name;
  }
}

// The launcher passes the plan's rotary table and attention factor to the kernel (a
// by-value parameter), as the CPU kernel reads them; with the base's frequencies or no
// factor the rotated keys would differ.
TEST(AttentionEmulation, ScaledRotaryTable) {
  Family scaled = kLlama;
  scaled.scaledRotary = true;
  Scenario io;
  io.past = 6;
  io.fresh = 3;
  io.padding = {0, 4};
  check(scaled, io);
  Scenario decode;
  decode.session = true;
  decode.past = 40;
  decode.fresh = 1;
  decode.padding = {0, 3};
  decode.capacity = 64;
  check(scaled, decode);
}

TEST(AttentionEmulation, WideHeadsInEveryMode) {
  for (const Family *f : {&kWide128, &kWide256, &kGemma2Wide, &kGemma4Wide}) {
    Scenario prompt;
    prompt.batch = 2;
    prompt.past = 3;
    prompt.fresh = 37;  // three key tiles of 16, two query tiles of 16 or five of 8
    prompt.padding = {0, 6};
    check(*f, prompt);
    Scenario decode;
    decode.session = true;
    decode.batch = 2;
    decode.past = 130;
    decode.fresh = 1;
    decode.padding = {0, 9};
    decode.capacity = 260;
    decode.maskPadding = 61;
    decode.capturing = true;
    check(*f, decode);
  }
}

// One joined Q, K and V projection read in place (packed_qkv): session prefill over several
// tiles, a decode step, and a tensor-parallel rank's own packed heads, against the
// reference on the same values apart.
TEST(AttentionEmulation, PackedQueryKeyValue) {
  Scenario prefill;
  prefill.session = true;
  prefill.fresh = 37;
  prefill.padding = {0, 5};
  prefill.capacity = 64;
  prefill.packed = true;
  check(kLlamaPacked, prefill);
  Scenario decode;
  decode.session = true;
  decode.past = 20;
  decode.fresh = 1;
  decode.padding = {0, 3};
  decode.capacity = 40;
  decode.packed = true;
  check(kLlamaPacked, decode);
  Scenario rank = decode;
  rank.rank = 1;
  rank.ranks = 2;
  check(kLlamaPacked, rank);
}

// A family with q/k norms, apart and packed: a prompt in I/O mode, a session prefill and a
// decode step, and with `rank`, the decode step on one of two ranks' heads.
void checkNormedSteps(const Family &apart, const Family &packed, bool rank) {
  Scenario prompt;
  prompt.batch = 3;
  prompt.past = 4;
  prompt.fresh = 9;
  prompt.padding = {0, 3, 13};
  check(apart, prompt);
  Scenario prefill;
  prefill.session = true;
  prefill.fresh = 37;
  prefill.padding = {0, 5};
  prefill.capacity = 64;
  Scenario decode;
  decode.session = true;
  decode.past = 20;
  decode.fresh = 1;
  decode.padding = {0, 3};
  decode.capacity = 300;
  Scenario onRank = decode;
  onRank.rank = 1;
  onRank.ranks = 2;
  for (const Family *f : {&apart, &packed}) {
    prefill.packed = decode.packed = onRank.packed = f == &packed;
    check(*f, prefill);
    check(*f, decode);
    if (rank)
      check(*f, onRank);
  }
}

// OLMo-2's q/k norms over all of a token's query heads and all of its key heads (QK_NORM
// 2): in attention_rotary (a prompt in I/O mode, a session prefill) and in the decode
// kernel, apart and packed; the cache holds the normalised keys. Not on a rank's heads:
// the norm would span the ranks, which tp-shard makes generic steps around an all-reduce.
TEST(AttentionEmulation, AllHeadsQueryKeyNorms) {
  checkNormedSteps(kOlmo2, kOlmo2Packed, false);
}

// HunYuan-Dense's q/k norms after its rotary (QK_NORM 3): each head normalised, rotated, and
// then scaled per feature, in attention_rotary and the decode kernel, apart and packed, on
// one rank's heads; the check also asserts that scaling before the rotation differs.
TEST(AttentionEmulation, QueryKeyNormsAfterTheRotary) {
  checkNormedSteps(kHunyuan, kHunyuanPacked, true);
}

// Qwen3's and Gemma-3's per-head q/k norms (QK_NORM): each head of the new queries and keys
// normalised before its rotation in attention_rotary (prompts, I/O mode) and in the decode
// kernel (a decode step), apart and packed, on one rank's heads, and on heads of 256
// features (more than a block's threads) with a sliding window; the cache holds the
// normalised keys.
TEST(AttentionEmulation, PerHeadQueryKeyNorms) {
  checkNormedSteps(kQwen3, kQwen3Packed, true);
  Scenario widePrompt;
  widePrompt.past = 3;
  widePrompt.fresh = 11;
  widePrompt.padding = {0, 6};
  check(kGemma3Wide, widePrompt);
  Scenario wideDecode;
  wideDecode.session = true;
  wideDecode.past = 130;
  wideDecode.fresh = 1;
  wideDecode.padding = {0, 9};
  wideDecode.capacity = 260;
  wideDecode.maskPadding = 61;
  wideDecode.capturing = true;
  check(kGemma3Wide, wideDecode);
}

// Half session caches (cache_dtype f16, bf16: KV_DTYPE): the kernels round the keys and
// values they write into the cache and read every one widened, in the session scenarios
// above (prefill over several tiles, a chunk after a cached past, a captured decode step,
// whose kernel writes its token and attends it from shared memory, BLOOM's row with no key,
// which averages the cached values in the decode kernel's merge, and a TP rank's heads).
// The CPU reference rounds at the same points, and rounding must matter here: its output
// over an f32 cache differs.
TEST(AttentionEmulation, HalfSessionCaches) {
  // The CPU reference over a half cache against itself over an f32 one, on one prompt.
  const int64_t B = 1, S = 6, H = 4, KH = 2, D = 16, capacity = 8;
  std::mt19937 generator(99);
  std::vector<float> q = randomFloats(generator, B * S * H * D),
                     k = randomFloats(generator, B * S * KH * D),
                     v = randomFloats(generator, B * S * KH * D);
  std::vector<int64_t> mask(B * S, 1), positions(B * S);
  std::iota(positions.begin(), positions.end(), 0);
  TensorRef qRef{DType::F32, {B, S, H * D}, q.data()}, kRef{DType::F32, {B, S, KH * D}, k.data()},
      vRef{DType::F32, {B, S, KH * D}, v.data()}, maskRef{DType::I64, {B, S}, mask.data()},
      positionRef{DType::I64, {B, S}, positions.data()};
  std::vector<float> outputs[2];
  for (int half = 0; half < 2; ++half) {
    const DType type = half ? DType::F16 : DType::F32;
    Scenario session;
    session.session = true;
    Family family = kLlama;
    family.cacheType = type;
    std::vector<float> keys(B * KH * capacity * D), values(keys.size());
    ops::KvCache cache;
    cache.layers.push_back({type, B, KH, capacity, D, keys.data(), values.data()});
    ops::SessionState state;
    state.cache = &cache;
    outputs[half].resize(B * S * H * D);
    TensorRef outRef{DType::F32, {B, S, H * D}, outputs[half].data()};
    Status status = ops::compute("tfm.attention", attributesOf(family, session),
                                 {&qRef, &kRef, &vRef, &maskRef, nullptr, nullptr, &positionRef},
                                 {&outRef}, &state);
    ASSERT_TRUE(status.isOk()) << status.message();
  }
  float gap = 0;
  for (size_t i = 0; i < outputs[0].size(); ++i)
    gap = std::max(gap, std::fabs(outputs[0][i] - outputs[1][i]));
  EXPECT_GT(gap, 1e-5f) << "an f16 cache changes the output too little here to be tested";
  EXPECT_LT(gap, 1e-2f) << "an f16 cache should change the output by its rounding only";
}

// Decode blocks that attend for several query heads of one KV head (GROUP_HEADS), reading
// each key and value once for all of them: runs cut short by the group's end (MQA's 6 heads
// in runs of 4 and 2), runs of 3 with ALiBi's per-head slopes, a window and a bf16 cache,
// over several splits in either block order, and on tensor-parallel ranks whose query
// heads are part of a group (a replicated KV head) or span two.
TEST(AttentionEmulation, GroupedDecodeBlocks) {
  for (const Family *f : {&kMqa, &kGqa3AlibiBf16Cache}) {
    for (bool reversed : {false, true})
      check(*f, capturedDecodeOverSplits(reversed));
    for (int ranks : {2, 3})
      for (int rank = 0; rank < ranks; ++rank)
        check(*f, rankDecode(rank, ranks));
  }
  // Its prompt and I/O steps (the prefill kernel, unchanged) on the same rule.
  Scenario prompt;
  prompt.past = 5;
  prompt.fresh = 3;
  prompt.padding = {0, 2};
  check(kMqa, prompt);
}

} // namespace
} // namespace dsrt::cuda
