// The attention emulation test's check (AttentionEmulationTest.cpp): a family's
// specialised kernels with the attributes they were specialised for, a scenario (batch,
// past, new tokens, padding, cache mode, TP rank), and the comparison of the emulated
// launcher and kernels against the CPU reference kernel on random inputs, every output,
// present and cache row included. Included once, after AttentionEmulationHarness.h.
#ifndef DSRT_TEST_CUDA_ATTENTIONEMULATIONCHECK_H
#define DSRT_TEST_CUDA_ATTENTIONEMULATIONCHECK_H

#include "AttentionEmulationHarness.h"

#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

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
  // q/k norms (inputs 8 and 9, qk_norm_epsilon): 1 per head (Qwen3's and Gemma-3's),
  // 2 over all of a token's query or key heads (OLMo-2's), 3 per head with the scales
  // after the rotation (HunYuan-Dense's, qk_norm_after_rotary; the kernels' QK_NORM).
  int qkNorm = 0;
  // The session cache's dtype (cache_dtype; the kernels' KV_DTYPE where it is half). Such a
  // family runs session scenarios only: its kernels write nothing else.
  DType cacheType = DType::F32;
  // The result's dtype (output_dtype; the kernels' OUT_DT where it is half: the plan's
  // activation dtype). Session scenarios only, as a half cache's.
  DType outputType = DType::F32;
  // Attention sinks (input 10, the kernels' SINKS): 1 GPT-OSS's learned logits per head
  // (sinkLogits), 2 ORT's smooth_softmax (a sink of 0 for every head).
  int sinks = 0;
};

// The model's sink logits, [heads]: spread over [-1, 3], so that every head's sink weighs
// from a fraction of one key to some twenty (e^3), or 0 for every head (smooth softmax).
std::vector<float> sinkLogits(const Family &f) {
  std::vector<float> sinks(static_cast<size_t>(f.heads), 0.0f);
  for (int64_t h = 0; f.sinks == 1 && h < f.heads; ++h)
    sinks[h] = -1.0f + 4.0f * static_cast<float>(h) / static_cast<float>(std::max<int64_t>(1, f.heads - 1));
  return sinks;
}

// The family's sinks as input 10 of the reference's and the emulated step's inputs: the
// model's [heads] (a rank reads its own), nothing without sinks.
struct SinkInputs {
  explicit SinkInputs(const Family &f)
      : family(f), logits(sinkLogits(f)), ref{DType::F32, {f.heads}, logits.data()} {}
  SinkInputs(const SinkInputs &) = delete;
  SinkInputs &operator=(const SinkInputs &) = delete;
  ops::Inputs with(ops::Inputs inputs) const {
    if (family.sinks) {
      inputs.resize(10, nullptr);
      inputs.push_back(&ref);
    }
    return inputs;
  }
  void addTo(std::vector<std::optional<DeviceTensor>> &inputs) const {
    if (family.sinks) {
      inputs.resize(10);
      inputs.push_back(DeviceTensor{DType::F32, {family.heads}, addressOf(logits.data())});
    }
  }
  const Family &family;
  std::vector<float> logits;
  TensorRef ref;
};

// The sinks must matter: kernels that ignored them would miss the reference `expected` by
// at least its gap to the reference without them (`sinkless`), which must be 10 times the
// largest error expectClose allows anywhere here (with these extra terms). Prints both.
void expectSinksMatter(const Family &f, const std::vector<float> &sinkless,
                       const std::vector<float> &expected, float extraRelative,
                       float extraAbsolute) {
  if (!f.sinks)
    return;
  float largest = 0, gap = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    largest = std::max(largest, std::fabs(expected[i]));
    if (i < sinkless.size())
      gap = std::max(gap, std::fabs(sinkless[i] - expected[i]));
  }
  const float allowed = 1e-5f + extraAbsolute + (1e-4f + extraRelative) * largest;
  EXPECT_GT(gap, 10 * allowed) << "the sinks change too little here to be tested";
  std::printf(" (without the sinks the output moves by %.3g; tolerance at most %.3g)", gap,
              allowed);
}

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

// The tensor cores' prefill's scenarios (attention_prefill_mma): 70 new tokens are two query
// tiles of 64, the second mostly beyond the prompt, over two or three key tiles, and a row
// padded throughout attends nothing; after a cached past of 20 a chunk's keys start
// mid-tile, under a mask bucketed wider than the keys.
inline Scenario tensorCorePrompt() {
  Scenario prompt;
  prompt.session = true;
  prompt.batch = 3;
  prompt.fresh = 70;
  prompt.padding = {0, 5, 70};
  prompt.capacity = 96;
  return prompt;
}
inline Scenario tensorCoreChunk() {
  Scenario chunk;
  chunk.session = true;
  chunk.past = 20;
  chunk.fresh = 9;
  chunk.padding = {0, 3};
  chunk.capacity = 40;
  chunk.maskPadding = 5;  // a mask bucketed wider than the keys
  return chunk;
}

// 141 keys over two splits of 128 of a 300-row cache (three splits in the grid), a mask
// padded on the left to 192 columns, and a dummy row that attends nothing; its blocks in
// either order (a merging decode kernel's last arrival merges).
inline Scenario capturedDecodeOverSplits(bool reversedBlocks) {
  Scenario s;
  s.session = true;
  s.batch = 3;
  s.past = 140;
  s.fresh = 1;
  s.padding = {0, 7, 141};
  s.capacity = 300;
  s.maskPadding = 51;
  s.capturing = true;
  s.reversedBlocks = reversedBlocks;
  return s;
}

ops::AttrMap attributesOf(const Family &f, const Scenario &s) {
  ops::AttrMap attrs;
  attrs["num_heads"] = ops::Attr::ofInt(f.heads);
  attrs["num_kv_heads"] = ops::Attr::ofInt(f.kvHeads);
  attrs["head_dim"] = ops::Attr::ofInt(f.headDim);
  // The models' 1/sqrt(head_dim) (0.25 for the heads of 16 most families here have), so
  // that wide heads' scores are as peaked as a model's, not sqrt(D / 16) times more.
  attrs["scale"] = ops::Attr::ofFloat(1.0f / std::sqrt(static_cast<float>(f.headDim)));
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
  if (f.qkNorm == 3)
    attrs["qk_norm_after_rotary"] = ops::Attr::ofInt(1);
  if (f.scaledRotary) {
    std::vector<float> frequencies;
    EXPECT_TRUE(ops::rotaryInverseFrequencies(attrs, frequencies).isOk());
    for (size_t i = frequencies.size() / 2; i < frequencies.size(); ++i)
      frequencies[i] /= 8;
    attrs["rotary_inv_freq"] = ops::Attr::ofFloats(frequencies);
    attrs["rotary_attention_factor"] = ops::Attr::ofFloat(1.2f);
  }
  if (f.cacheType != DType::F32)
    attrs["cache_dtype"] = ops::Attr::ofType(f.cacheType);
  if (f.outputType != DType::F32)
    attrs["output_dtype"] = ops::Attr::ofType(f.outputType);
  addRankHeads(attrs, f.heads, f.kvHeads, s.ranks);
  return attrs;
}

// A cache of `type` holding `values` (f32, or f16/bf16 bits in the same bytes' first half).
std::vector<float> cacheOf(DType type, const std::vector<float> &values) {
  std::vector<float> cache(values);
  if (type != DType::F32)
    EXPECT_TRUE(convertFloats(DType::F32, values.data(), type, cache.data(),
                              static_cast<int64_t>(values.size())));
  return cache;
}

// The floats a cache of `type` holds.
std::vector<float> widened(DType type, const std::vector<float> &cache, size_t count) {
  std::vector<float> values(cache.begin(), cache.begin() + std::min(count, cache.size()));
  if (type != DType::F32) {
    values.resize(count);
    EXPECT_TRUE(convertFloats(type, cache.data(), DType::F32, values.data(),
                              static_cast<int64_t>(count)));
  }
  return values;
}


// Runs the scenario through the CPU reference and through the emulated launcher and
// kernels, and compares the output and every key and value written.
void check(const Family &f, const Scenario &s) {
  SCOPED_TRACE(std::string(f.name) + (s.session ? " session" : " I/O") + " past " +
               std::to_string(s.past) + " fresh " + std::to_string(s.fresh));
  const KernelSet kernels = f.kernels();
  const int64_t B = s.batch, P = s.past, S = s.fresh, T = P + S, D = f.headDim;
  const int64_t H = f.heads / s.ranks, KH = rankKvHeads(f.heads, f.kvHeads, s.rank, s.ranks);
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
  const int64_t queryNormWidth = f.qkNorm == 2 ? H * D : D,
                keyNormWidth = f.qkNorm == 2 ? KH * D : D;
  std::vector<float> queryNormScale = randomFloats(generator, queryNormWidth),
                     keyNormScale = randomFloats(generator, keyNormWidth);
  for (std::vector<float> *scale : {&queryNormScale, &keyNormScale})
    for (float &value : *scale)
      value += 1.0f;
  TensorRef queryNormRef{DType::F32, {queryNormWidth}, queryNormScale.data()};
  TensorRef keyNormRef{DType::F32, {keyNormWidth}, keyNormScale.data()};
  if (f.qkNorm)
    inputs.insert(inputs.end(), {nullptr, &queryNormRef, &keyNormRef});
  const SinkInputs sinks(f);
  const ops::Inputs inputsWithoutSinks = inputs;
  inputs = sinks.with(inputs);

  std::vector<float> expected(B * S * H * D), expectedKey(B * KH * T * D),
      expectedValue(B * KH * T * D);
  // A half result is written into these floats' bytes, and widened after.
  std::vector<float> expectedStored(expected.size());
  TensorRef outRef{f.outputType, {B, S, H * D}, expectedStored.data()};
  TensorRef presentKeyRef{DType::F32, {B, KH, T, D}, expectedKey.data()};
  TensorRef presentValueRef{DType::F32, {B, KH, T, D}, expectedValue.data()};
  ops::Outputs outputs{&outRef};
  if (io) {
    outputs.push_back(&presentKeyRef);
    outputs.push_back(&presentValueRef);
  }
  const int64_t cacheBatch = B + 1, capacity = s.capacity;
  const size_t cacheElements = static_cast<size_t>(cacheBatch * KH * capacity * D);
  std::vector<float> cacheInit = randomFloats(generator, cacheElements);
  std::vector<float> cpuKeys = cacheOf(f.cacheType, cacheInit);
  std::reverse(cacheInit.begin(), cacheInit.end());
  std::vector<float> cpuValues = cacheOf(f.cacheType, cacheInit);
  std::vector<float> gpuKeys = cpuKeys, gpuValues = cpuValues;
  ops::KvCache cpuCache;
  cpuCache.layers.push_back({f.cacheType, cacheBatch, KH, capacity, D, cpuKeys.data(),
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
    TensorRef outC{f.outputType, {B, S, H * D}, out.data()};  // widened below if half
    TensorRef keyC{DType::F32, {B, KH, T, D}, presentKey.data()};
    TensorRef valueC{DType::F32, {B, KH, T, D}, presentValue.data()};
    ops::Outputs outputsC{&outC};
    if (io) {
      outputsC.push_back(&keyC);
      outputsC.push_back(&valueC);
    }
    ops::KvCache cacheC;
    cacheC.layers.push_back({f.cacheType, cacheBatch, KH, capacity, D, keys.data(),
                             values.data()});
    ops::SessionState stateC = state;
    stateC.cache = s.session ? &cacheC : nullptr;
    Status status = ops::compute("tfm.attention", changed, stepInputs, outputsC, &stateC);
    EXPECT_TRUE(status.isOk()) << status.message();
    return widened(f.outputType, out, out.size());
  };
  std::vector<float> uncappedOut, unnormalizedOut, scaledBeforeOut, sinklessOut;
  if (f.sinks)
    sinklessOut = outputWithout("sinks", inputsWithoutSinks);
  if (f.softcap > 0)
    uncappedOut = outputWithout("softcap", inputs);
  if (f.qkNorm == 3)
    scaledBeforeOut = outputWithout("qk_norm_after_rotary", inputs);
  if (f.qkNorm)  // without the epsilon and the scales (inputs 8 and 9, after the bias's 7)
    unnormalizedOut =
        outputWithout("qk_norm_epsilon", ops::Inputs(inputs.begin(), inputs.begin() + 7));
  Status reference = ops::compute("tfm.attention", attrs, inputs, outputs, &state);
  ASSERT_TRUE(reference.isOk()) << reference.message();
  expected = widened(f.outputType, expectedStored, expected.size());
  float normGap = 0;
  for (size_t i = 0; i < unnormalizedOut.size(); ++i)
    normGap = std::max(normGap, std::fabs(unnormalizedOut[i] - expected[i]));
  if (f.qkNorm)
    EXPECT_GT(normGap, 1e-2f) << "the q/k norms change too little here to be tested";
  float orderGap = 0;
  for (size_t i = 0; i < scaledBeforeOut.size(); ++i)
    orderGap = std::max(orderGap, std::fabs(scaledBeforeOut[i] - expected[i]));
  if (f.qkNorm == 3)
    EXPECT_GT(orderGap, 1e-2f) << "scaling before or after the rotation differs too little "
                                  "here to be tested";
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
    step.inputs.push_back(
        DeviceTensor{DType::F32, {queryNormWidth}, addressOf(queryNormScale.data())});
    step.inputs.push_back(
        DeviceTensor{DType::F32, {keyNormWidth}, addressOf(keyNormScale.data())});
  }
  sinks.addTo(step.inputs);
  if (io) {
    step.inputs[4] = DeviceTensor{DType::F32, {B, pastHeads, P, D}, addressOf(pastKey.data())};
    step.inputs[5] =
        DeviceTensor{DType::F32, {B, pastHeads, P, D}, addressOf(pastValue.data())};
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> actual(B * S * H * D, nan), actualKey(B * KH * T * D, nan),
      actualValue(B * KH * T * D, nan);
  // NaN bits in f32, f16 and bf16 alike: every element the kernels leave unwritten fails.
  std::vector<float> actualStored(actual.size());
  std::memset(actualStored.data(), 0xff, actualStored.size() * sizeof(float));
  step.outputs.push_back(
      DeviceTensor{f.outputType, {B, S, H * D}, addressOf(actualStored.data())});
  if (io) {
    step.outputs.push_back(DeviceTensor{DType::F32, {B, KH, T, D}, addressOf(actualKey.data())});
    step.outputs.push_back(
        DeviceTensor{DType::F32, {B, KH, T, D}, addressOf(actualValue.data())});
  }
  if (s.session) {
    step.cache = DeviceKvLayer{f.cacheType,          cacheBatch, KH, capacity, D,
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
  actual = widened(f.outputType, actualStored, actual.size());

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
  if (decode) {
    // A block row per query head, or (GROUP_HEADS) per run of that many query heads of one
    // KV head: the rank's KV heads times ceil(group / GROUP_HEADS).
    const auto grouped = kernels.constants[2].find("GROUP_HEADS");
    const int64_t group = f.heads / f.kvHeads;
    const int64_t rows =
        grouped == kernels.constants[2].end()
            ? H
            : KH * ((group + grouped->second - 1) / grouped->second);
    EXPECT_EQ(step.grids[2].y, static_cast<unsigned>(rows));
  }
  for (size_t i = 0; i < step.arrivals.size(); ++i)
    EXPECT_EQ(step.arrivals[i], 0) << "arrival count " << i << " left set for the next launch";
  // The tensor cores' prefill rounds each query and each softmax weight to the cache's
  // dtype (unit roundoff u: 2^-11 f16, 2^-8 bf16). With values in [-1, 1] the weights'
  // rounding moves an output by at most u. The queries' moves each score by scale · Σ Δq·k:
  // D terms of random sign, each at most u·|q·k|, about g·u with g = scale · sqrt(D) ·
  // rms(q) · rms(k), the heads as the kernel multiplies them: 1/3 for values in [-1, 1] (rms
  // 1/sqrt(3) each), 4/3 with q/k norms (rms 1, times the scales' rms 1.15 each). That moves
  // the softmax's average by at most about twice that. 2.4 u (1 + 2g) bounds both with room:
  // 4u for unnormalised heads.
  auto rms = [](const std::vector<float> &values) {
    double sum = 0;
    for (float value : values)
      sum += static_cast<double>(value) * value;
    return std::sqrt(sum / static_cast<double>(values.size()));
  };
  const double headGain = f.qkNorm ? rms(queryNormScale) * rms(keyNormScale) : rms(q) * rms(k);
  const double scoreRounding = attrs.at("scale").f * std::sqrt(static_cast<double>(D)) * headGain;
  const float unitRoundoff = f.cacheType == DType::F16 ? 0x1p-11f : 0x1p-8f;
  const float operandRounding =
      kernels.prefillOnTensorCores && !decode
          ? static_cast<float>(2.4 * unitRoundoff * (1 + 2 * scoreRounding))
          : 0.0f;
  // A half result holds each side's f32 value rounded once: where those differ in their
  // last bits the two may lie one step of its dtype apart, as the cache's rows below.
  const float outputStep = f.outputType == DType::F16 ? 0x1p-10f
                           : f.outputType == DType::BF16 ? 0x1p-7f : 0.0f;
  float worst = expectClose(actual.data(), expected.data(), actual.size(), "output",
                            outputStep, operandRounding);
  if (io) {
    worst = std::max(worst, expectClose(actualKey.data(), expectedKey.data(), actualKey.size(),
                                        "present key"));
    worst = std::max(worst, expectClose(actualValue.data(), expectedValue.data(),
                                        actualValue.size(), "present value"));
  }
  if (s.session) {
    // Every cache row, written or not, must match: the kernels write [past, total) only.
    // A half cache holds each value rounded once by both sides; where the f32 values they
    // round differ in their last bits, the two may lie one step of the cache's dtype apart
    // (2^-10 relative for f16, 2^-7 for bf16 at most).
    const float step = f.cacheType == DType::F16 ? 0x1p-10f
                       : f.cacheType == DType::BF16 ? 0x1p-7f : 0.0f;
    const std::vector<float> gpuK = widened(f.cacheType, gpuKeys, cacheElements),
                             cpuK = widened(f.cacheType, cpuKeys, cacheElements),
                             gpuV = widened(f.cacheType, gpuValues, cacheElements),
                             cpuV = widened(f.cacheType, cpuValues, cacheElements);
    worst = std::max(worst, expectClose(gpuK.data(), cpuK.data(), cacheElements, "cached keys",
                                        step));
    worst = std::max(worst, expectClose(gpuV.data(), cpuV.data(), cacheElements,
                                        "cached values", step));
  }
  ::testing::Test::RecordProperty("max_abs_error", std::to_string(worst));
  std::printf("%s %s past %lld fresh %lld: max abs error %.3g", f.name,
              s.session ? "session" : "I/O", static_cast<long long>(P),
              static_cast<long long>(S), worst);
  if (f.softcap > 0)
    std::printf(" (without the cap the output moves by %.3g)", softcapGap);
  if (f.qkNorm)
    std::printf(" (without the q/k norms the output moves by %.3g)", normGap);
  expectSinksMatter(f, sinklessOut, expected, outputStep, operandRounding);
  std::printf("\n");
}

} // namespace
} // namespace dsrt::cuda

#endif
