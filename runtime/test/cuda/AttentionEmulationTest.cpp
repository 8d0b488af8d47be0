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

#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>


// Each family's kernels (the templates under their own names and namespaces).
#include "AttentionEmulationFamilies.inc"

namespace dsrt::cuda {
namespace {

struct Family {
  const char *name;
  KernelSet (*kernels)();
  int64_t headDim;
  int64_t heads, kvHeads, causal, alibi, window, rotaryDim, interleaved;
  const char *unattended;
  DType maskType;
  float softcap = 0;  // 0: no `softcap` attribute
  // A rotary_inv_freq table no base gives (as llama3 scaling: slower pairs divided by 8)
  // and yarn's rotary_attention_factor.
  bool scaledRotary = false;
  // Per-head q/k norms (inputs 8 and 9, qk_norm_epsilon): Qwen3's and Gemma-3's.
  bool qkNorm = false;
};

const Family kGpt2{"gpt2", gpt2::kernels, 16, 4, 4, 1, 0, 0, 0, 0, "all", DType::I64};
const Family kLlama{"llama", llama::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "all", DType::I64};
const Family kBloom{"bloom", bloom::kernels, 16, 4, 4, 1, 1, 0, 0, 0, "all", DType::I64};
const Family kGptj{"gptj", gptj::kernels, 16, 4, 4, 1, 0, 0, 8, 1, "all", DType::I64};
const Family kGptNeo{"gptneo", gptneo::kernels, 16, 4, 4, 1, 0, 4, 0, 0, "causal", DType::I64};
const Family kBert{"bert", bert::kernels, 16, 4, 4, 0, 0, 0, 0, 0, "all", DType::Bool};
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
const Family kGemma3Wide{"gemma3wide", gemma3wide::kernels, 256, 2, 1, 1, 0, 4, 256, 0, "all",
                         DType::I64, 0, false, true};

struct Scenario {
  int64_t batch = 2, past = 0, fresh = 5;
  // Left padding of each row, in tokens of the past + fresh (>= that: the whole row).
  std::vector<int64_t> padding;
  bool session = false;
  bool pastInputs = true;      // I/O mode: past inputs and present outputs
  int64_t capacity = 0;        // session: the cache's rows
  int64_t maskPadding = 0;     // session: zero columns left of the mask (a graph bucket)
  bool capturing = false;
  int rank = 0, ranks = 1;     // tensor parallelism: each rank takes heads / ranks heads
  // The emulated step reads query, key and value packed in one tensor (packed_qkv); the
  // reference reads them apart.
  bool packed = false;
  bool reversedBlocks = false;  // the emulated blocks run from the last to the first
};

ops::AttrMap attributesOf(const Family &f, const Scenario &s) {
  ops::AttrMap attrs;
  attrs["num_heads"] = ops::Attr::ofInt(f.heads);
  attrs["num_kv_heads"] = ops::Attr::ofInt(f.kvHeads);
  attrs["head_dim"] = ops::Attr::ofInt(f.headDim);
  attrs["scale"] = ops::Attr::ofFloat(0.25f);
  attrs["causal"] = ops::Attr::ofInt(f.causal);
  attrs["alibi"] = ops::Attr::ofInt(f.alibi);
  attrs["window"] = ops::Attr::ofInt(f.window);
  attrs["rotary_dim"] = ops::Attr::ofInt(f.rotaryDim);
  attrs["rotary_base"] = ops::Attr::ofFloat(10000.0f);
  attrs["rotary_interleaved"] = ops::Attr::ofInt(f.interleaved);
  attrs["cache_layer"] = ops::Attr::ofInt(s.session ? 0 : -1);
  attrs["unattended"] = ops::Attr::ofString(f.unattended);
  if (f.softcap > 0)
    attrs["softcap"] = ops::Attr::ofFloat(f.softcap);
  if (f.qkNorm)
    attrs["qk_norm_epsilon"] = ops::Attr::ofFloat(1e-6f);
  if (f.scaledRotary) {
    std::vector<float> frequencies;
    EXPECT_TRUE(ops::rotaryInverseFrequencies(attrs, frequencies).isOk());
    for (size_t i = frequencies.size() / 2; i < frequencies.size(); ++i)
      frequencies[i] /= 8;
    attrs["rotary_inv_freq"] = ops::Attr::ofFloats(frequencies);
    attrs["rotary_attention_factor"] = ops::Attr::ofFloat(1.2f);
  }
  addRankHeads(attrs, f.heads, f.kvHeads, s.ranks);
  return attrs;
}


// Runs the scenario through the CPU reference and through the emulated launcher and
// kernels, and compares the output and every key and value written.
void check(const Family &f, const Scenario &s) {
  SCOPED_TRACE(std::string(f.name) + (s.session ? " session" : " I/O") + " past " +
               std::to_string(s.past) + " fresh " + std::to_string(s.fresh));
  const KernelSet kernels = f.kernels();
  const int64_t B = s.batch, P = s.past, S = s.fresh, T = P + S, D = f.headDim;
  const int64_t H = f.heads / s.ranks, KH = f.kvHeads / s.ranks;
  std::mt19937 generator(1234 + static_cast<unsigned>(P * 31 + S));

  std::vector<float> q = randomFloats(generator, B * S * H * D);
  std::vector<float> k = randomFloats(generator, B * S * KH * D);
  std::vector<float> v = randomFloats(generator, B * S * KH * D);
  // The padding mask over the keys, positions as transformers' generate makes them.
  std::vector<int64_t> mask(B * T), positions(B * S);
  for (int64_t b = 0; b < B; ++b) {
    int64_t pad = b < static_cast<int64_t>(s.padding.size()) ? s.padding[b] : 0, count = 0;
    for (int64_t t = 0; t < T; ++t) {
      bool on = t >= pad;
      mask[b * T + t] = on;
      count += on;
      if (t >= P)
        positions[b * S + t - P] = on ? count - 1 : 1;
    }
  }
  std::vector<uint8_t> maskBytes(mask.begin(), mask.end());
  std::vector<int32_t> maskInts(mask.begin(), mask.end());
  auto maskIn = [&](const std::vector<int64_t> &wide, const std::vector<int32_t> &narrow,
                    const std::vector<uint8_t> &bytes) -> const void * {
    if (f.maskType == DType::Bool)
      return bytes.data();
    return f.maskType == DType::I32 ? static_cast<const void *>(narrow.data())
                                    : static_cast<const void *>(wide.data());
  };
  const void *maskData = maskIn(mask, maskInts, maskBytes);

  const ops::AttrMap attrs = attributesOf(f, s);
  // The reference.
  TensorRef qRef{DType::F32, {B, S, H * D}, q.data()};
  TensorRef kRef{DType::F32, {B, S, KH * D}, k.data()};
  TensorRef vRef{DType::F32, {B, S, KH * D}, v.data()};
  TensorRef maskRef{f.maskType, {B, T}, const_cast<void *>(maskData)};
  TensorRef positionRef{DType::I64, {B, S}, positions.data()};
  const int64_t pastHeads = f.kvHeads;  // I/O pasts hold every KV head under TP
  std::vector<float> pastKey = randomFloats(generator, B * pastHeads * P * D);
  std::vector<float> pastValue = randomFloats(generator, B * pastHeads * P * D);
  TensorRef pastKeyRef{DType::F32, {B, pastHeads, P, D}, pastKey.data()};
  TensorRef pastValueRef{DType::F32, {B, pastHeads, P, D}, pastValue.data()};
  const bool io = !s.session && s.pastInputs;
  ops::Inputs inputs{&qRef, &kRef, &vRef, &maskRef, io ? &pastKeyRef : nullptr,
                     io ? &pastValueRef : nullptr, &positionRef};
  // The q/k norms' scales, around 1 (inputs 8 and 9, after an absent bias).
  std::vector<float> queryNormScale = randomFloats(generator, D),
                     keyNormScale = randomFloats(generator, D);
  for (std::vector<float> *scale : {&queryNormScale, &keyNormScale})
    for (float &value : *scale)
      value += 1.0f;
  TensorRef queryNormRef{DType::F32, {D}, queryNormScale.data()};
  TensorRef keyNormRef{DType::F32, {D}, keyNormScale.data()};
  if (f.qkNorm)
    inputs.insert(inputs.end(), {nullptr, &queryNormRef, &keyNormRef});

  std::vector<float> expected(B * S * H * D), expectedKey(B * KH * T * D),
      expectedValue(B * KH * T * D);
  TensorRef outRef{DType::F32, {B, S, H * D}, expected.data()};
  TensorRef presentKeyRef{DType::F32, {B, KH, T, D}, expectedKey.data()};
  TensorRef presentValueRef{DType::F32, {B, KH, T, D}, expectedValue.data()};
  ops::Outputs outputs{&outRef};
  if (io) {
    outputs.push_back(&presentKeyRef);
    outputs.push_back(&presentValueRef);
  }
  const int64_t cacheBatch = B + 1, capacity = s.capacity;
  std::vector<float> cacheInit = randomFloats(generator, cacheBatch * KH * capacity * D);
  std::vector<float> cpuKeys = cacheInit, cpuValues = cacheInit;
  std::reverse(cpuValues.begin(), cpuValues.end());
  std::vector<float> gpuKeys = cpuKeys, gpuValues = cpuValues;
  ops::KvCache cpuCache;
  cpuCache.layers.push_back({DType::F32, cacheBatch, KH, capacity, D, cpuKeys.data(),
                             cpuValues.data()});
  RankOnly group(s.rank, s.ranks);
  ops::SessionState state;
  state.cache = s.session ? &cpuCache : nullptr;
  state.collectives = s.ranks > 1 ? &group : nullptr;
  // The reference's output for the step changed (the cap or the norms left out), on copies
  // of everything it writes: the kernels must not pass without what was left out.
  auto outputWithout = [&](const char *attribute, const ops::Inputs &stepInputs) {
    ops::AttrMap changed = attrs;
    changed.erase(attribute);
    std::vector<float> out(expected.size()), presentKey(expectedKey.size()),
        presentValue(expectedValue.size()), keys = cpuKeys, values = cpuValues;
    TensorRef outC{DType::F32, {B, S, H * D}, out.data()};
    TensorRef keyC{DType::F32, {B, KH, T, D}, presentKey.data()};
    TensorRef valueC{DType::F32, {B, KH, T, D}, presentValue.data()};
    ops::Outputs outputsC{&outC};
    if (io) {
      outputsC.push_back(&keyC);
      outputsC.push_back(&valueC);
    }
    ops::KvCache cacheC;
    cacheC.layers.push_back({DType::F32, cacheBatch, KH, capacity, D, keys.data(),
                             values.data()});
    ops::SessionState stateC = state;
    stateC.cache = s.session ? &cacheC : nullptr;
    Status status = ops::compute("tfm.attention", changed, stepInputs, outputsC, &stateC);
    EXPECT_TRUE(status.isOk()) << status.message();
    return out;
  };
  std::vector<float> uncappedOut, unnormalizedOut;
  if (f.softcap > 0)
    uncappedOut = outputWithout("softcap", inputs);
  if (f.qkNorm)  // without the epsilon and the scales (inputs 8 and 9, after the bias's 7)
    unnormalizedOut =
        outputWithout("qk_norm_epsilon", ops::Inputs(inputs.begin(), inputs.begin() + 7));
  Status reference = ops::compute("tfm.attention", attrs, inputs, outputs, &state);
  ASSERT_TRUE(reference.isOk()) << reference.message();
  float normGap = 0;
  for (size_t i = 0; i < unnormalizedOut.size(); ++i)
    normGap = std::max(normGap, std::fabs(unnormalizedOut[i] - expected[i]));
  if (f.qkNorm)
    EXPECT_GT(normGap, 1e-2f) << "the q/k norms change too little here to be tested";
  float softcapGap = 0;
  for (size_t i = 0; i < uncappedOut.size(); ++i)
    softcapGap = std::max(softcapGap, std::fabs(uncappedOut[i] - expected[i]));
  if (f.softcap > 0)
    EXPECT_GT(softcapGap, 1e-2f) << "the cap changes too little here to be tested";

  // The emulated GPU: a mask padded on the left as a captured graph's bucket pads it.
  const int64_t W = s.session ? T + s.maskPadding : T;
  std::vector<int64_t> wideMask(B * W, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      wideMask[b * W + (W - T) + t] = mask[b * T + t];
  std::vector<uint8_t> wideMaskBytes(wideMask.begin(), wideMask.end());
  std::vector<int32_t> wideMaskInts(wideMask.begin(), wideMask.end());
  const void *wideMaskData = maskIn(wideMask, wideMaskInts, wideMaskBytes);
  ops::AttrMap stepAttrs = attrs;
  std::vector<float> packed;
  if (s.packed) {
    stepAttrs["packed_qkv"] = ops::Attr::ofInt(1);
    for (int64_t token = 0; token < B * S; ++token) {
      packed.insert(packed.end(), &q[token * H * D], &q[(token + 1) * H * D]);
      packed.insert(packed.end(), &k[token * KH * D], &k[(token + 1) * KH * D]);
      packed.insert(packed.end(), &v[token * KH * D], &v[(token + 1) * KH * D]);
    }
  }
  EmulatedStep step(kernels, s.session ? sessionKernelCount(kernels) : 2, stepAttrs);
  step.rank_ = s.rank;
  step.capturing_ = s.capturing;
  step.inputs = {DeviceTensor{DType::F32, {B, S, H * D}, addressOf(q.data())},
                 DeviceTensor{DType::F32, {B, S, KH * D}, addressOf(k.data())},
                 DeviceTensor{DType::F32, {B, S, KH * D}, addressOf(v.data())},
                 DeviceTensor{f.maskType, {B, W}, addressOf(wideMaskData)},
                 std::nullopt,
                 std::nullopt,
                 DeviceTensor{DType::I64, {B, S}, addressOf(positions.data())}};
  if (s.packed)
    for (int i = 0; i < 3; ++i)
      step.inputs[i] = DeviceTensor{DType::F32, {B, S, (H + 2 * KH) * D}, addressOf(packed.data())};
  if (f.qkNorm) {
    step.inputs.push_back(std::nullopt);
    step.inputs.push_back(DeviceTensor{DType::F32, {D}, addressOf(queryNormScale.data())});
    step.inputs.push_back(DeviceTensor{DType::F32, {D}, addressOf(keyNormScale.data())});
  }
  if (io) {
    step.inputs[4] = DeviceTensor{DType::F32, {B, pastHeads, P, D}, addressOf(pastKey.data())};
    step.inputs[5] =
        DeviceTensor{DType::F32, {B, pastHeads, P, D}, addressOf(pastValue.data())};
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> actual(B * S * H * D, nan), actualKey(B * KH * T * D, nan),
      actualValue(B * KH * T * D, nan);
  step.outputs.push_back(DeviceTensor{DType::F32, {B, S, H * D}, addressOf(actual.data())});
  if (io) {
    step.outputs.push_back(DeviceTensor{DType::F32, {B, KH, T, D}, addressOf(actualKey.data())});
    step.outputs.push_back(
        DeviceTensor{DType::F32, {B, KH, T, D}, addressOf(actualValue.data())});
  }
  if (s.session) {
    step.cache = DeviceKvLayer{DType::F32,          cacheBatch, KH, capacity, D,
                               addressOf(gpuKeys.data()), addressOf(gpuValues.data())};
    step.lengths[kPast] = static_cast<int32_t>(P);
    step.lengths[kTotal] = static_cast<int32_t>(T);
    step.lengths[kMaskWidth] = static_cast<int32_t>(W);
  }
  std::vector<GpuOpInfo> launchers;
  addAttentionGpuOps(launchers);
  ASSERT_EQ(launchers.size(), 1u);
  // The blocks of a merging decode kernel meet through memory: in either order the last
  // one to arrive must merge every split.
  cuda_emulation::reversedBlockOrder = s.reversedBlocks;
  Status run = launchers[0].run(step);
  cuda_emulation::reversedBlockOrder = false;
  ASSERT_TRUE(run.isOk()) << run.message();

  const bool decode = s.session && S == 1;
  // A decode kernel with FUSED_ROTARY rotates and caches its token itself, and one with
  // FUSED_COMBINE merges its splits itself.
  const bool fused = decode && kernels.constants[2].count("FUSED_ROTARY");
  const bool merges = decode && kernels.constants[2].count("FUSED_COMBINE");
  EXPECT_EQ(step.launches[0], fused ? 0 : 1);
  EXPECT_EQ(step.launches[1], decode ? 0 : 1);
  EXPECT_EQ(step.launches[2], decode ? 1 : 0);
  EXPECT_EQ(step.launches[3], decode && !merges ? 1 : 0);
  EXPECT_EQ(step.arrivals.empty(), !merges);
  for (size_t i = 0; i < step.arrivals.size(); ++i)
    EXPECT_EQ(step.arrivals[i], 0) << "arrival count " << i << " left set for the next launch";
  float worst = expectClose(actual.data(), expected.data(), actual.size(), "output");
  if (io) {
    worst = std::max(worst, expectClose(actualKey.data(), expectedKey.data(), actualKey.size(),
                                        "present key"));
    worst = std::max(worst, expectClose(actualValue.data(), expectedValue.data(),
                                        actualValue.size(), "present value"));
  }
  if (s.session) {
    // Every cache row, written or not, must match: the kernels write [past, total) only.
    worst = std::max(worst, expectClose(gpuKeys.data(), cpuKeys.data(), gpuKeys.size(),
                                        "cached keys"));
    worst = std::max(worst, expectClose(gpuValues.data(), cpuValues.data(), gpuValues.size(),
                                        "cached values"));
  }
  ::testing::Test::RecordProperty("max_abs_error", std::to_string(worst));
  std::printf("%s %s past %lld fresh %lld: max abs error %.3g", f.name,
              s.session ? "session" : "I/O", static_cast<long long>(P),
              static_cast<long long>(S), worst);
  if (f.softcap > 0)
    std::printf(" (without the cap the output moves by %.3g)", softcapGap);
  if (f.qkNorm)
    std::printf(" (without the q/k norms the output moves by %.3g)", normGap);
  std::printf("\n");
}

const Family *const kDecoders[] = {&kGpt2,   &kLlama,  &kBloom, &kGptj,
                                   &kGptNeo, &kGemma2, &kSdpa};

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

TEST(AttentionEmulation, SessionPrefillOverSeveralTiles) {
  // 70 tokens: five query tiles of 16 and two key tiles of 64.
  for (const Family *f : {&kBloom, &kGptNeo, &kLlama, &kGemma2}) {
    Scenario s;
    s.session = true;
    s.fresh = 70;
    s.padding = {0, 5};
    s.capacity = 96;
    check(*f, s);
  }
}

TEST(AttentionEmulation, SessionChunkAfterCachedPast) {
  for (const Family *f : kDecoders) {
    Scenario s;
    s.session = true;
    s.past = 20;
    s.fresh = 4;
    s.padding = {0, 3};
    s.capacity = 40;
    check(*f, s);
  }
}

TEST(AttentionEmulation, CapturedDecodeOverSplitsAndABucketedMask) {
  // 141 keys over two splits of 128 of a 300-row cache (three splits in the grid), a mask
  // padded on the left to 192 columns, and a dummy row that attends nothing; its blocks
  // in either order (a merging decode kernel's last arrival merges).
  for (const Family *f : kDecoders)
    for (bool reversed : {false, true}) {
      Scenario s;
      s.session = true;
      s.batch = 3;
      s.past = 140;
      s.fresh = 1;
      s.padding = {0, 7, 141};
      s.capacity = 300;
      s.maskPadding = 51;
      s.capturing = true;
      s.reversedBlocks = reversed;
      check(*f, s);
    }
}

TEST(AttentionEmulation, TensorParallelRankReadsItsHeads) {
  // Rank 1 of 2: query heads [2, 4), KV heads [1, 2) of llama's 4/2 (GQA), and heads [2, 4)
  // of BLOOM's ALiBi slopes; the I/O past holds every KV head.
  for (const Family *f : {&kLlama, &kBloom, &kGemma2}) {
    Scenario io;
    io.past = 5;
    io.fresh = 3;
    io.padding = {0, 2};
    io.rank = 1;
    io.ranks = 2;
    check(*f, io);
    Scenario decode;
    decode.session = true;
    decode.past = 9;
    decode.fresh = 1;
    decode.padding = {0, 2};
    decode.capacity = 16;
    decode.rank = 1;
    decode.ranks = 2;
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
  for (const Family *f : {&kWide128, &kWide256, &kGemma2Wide}) {
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

// Qwen3's and Gemma-3's per-head q/k norms (QK_NORM): each head of the new queries and keys
// normalised before its rotation in attention_rotary (prompts, I/O mode) and in the decode
// kernel (a decode step), apart and packed, on one rank's heads, and on heads of 256
// features (more than a block's threads) with a sliding window; the cache holds the
// normalised keys.
TEST(AttentionEmulation, PerHeadQueryKeyNorms) {
  Scenario prompt;
  prompt.batch = 3;
  prompt.past = 4;
  prompt.fresh = 9;
  prompt.padding = {0, 3, 13};
  check(kQwen3, prompt);
  Scenario prefill;
  prefill.session = true;
  prefill.fresh = 37;
  prefill.padding = {0, 5};
  prefill.capacity = 64;
  check(kQwen3, prefill);
  Scenario decode;
  decode.session = true;
  decode.past = 20;
  decode.fresh = 1;
  decode.padding = {0, 3};
  decode.capacity = 300;
  check(kQwen3, decode);
  Scenario rank = decode;
  rank.rank = 1;
  rank.ranks = 2;
  check(kQwen3, rank);
  prefill.packed = decode.packed = rank.packed = true;
  check(kQwen3Packed, prefill);
  check(kQwen3Packed, decode);
  check(kQwen3Packed, rank);
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

} // namespace
} // namespace dsrt::cuda
