// The encoder-decoder forms of tfm.attention on the CUDA launcher and kernel templates,
// through the host emulation (AttentionEmulationHarness.h), against the CPU reference
// kernel on random inputs:
// * T5's relative position bias, an input computed in the graph (BIAS): [1, heads, s, t],
//   [batch, 1, s, t], and under tensor parallelism every head of the model, of which a
//   rank reads its own;
// * cross-attention: keys and values of another sequence (fewer or more than the queries)
//   under the encoder's right-padded mask, with and without presents, and under tensor
//   parallelism keys that hold every KV head (optimum's cached cross keys);
// * the session programs' cross-attention (`cross`): prefill writes the encoder's keys into
//   a cache layer, decode steps add none and read them, whatever the decoder's lengths;
// * T5's decoder self-attention over the session's cache with the bias its session programs
//   compute for each step ([1, heads, new, past + new]), through the prefill kernel.
// Tolerance as AttentionEmulationTest.cpp's: |gpu − cpu| <= 1e-5 + 1e-4·|cpu| per element.
// Each case with a bias also requires that dropping it changes the reference by more than
// 1e-2 somewhere, so a kernel that ignored it would fail; a rank that holds every head of
// the bias or of the keys must give the reference's output from its own heads alone.
#include "AttentionEmulationHarness.h"

#include "dsc_common.cuh"

#include <cstdio>

#define EMU_CAT2(family, kind) family##_##kind
#define EMU_CAT(family, kind) EMU_CAT2(family, kind)
#define attention_rotary EMU_CAT(EMU_FAMILY, attention_rotary)
#define attention_prefill EMU_CAT(EMU_FAMILY, attention_prefill)
#define attention_decode EMU_CAT(EMU_FAMILY, attention_decode)
#define attention_combine EMU_CAT(EMU_FAMILY, attention_combine)

// T5's encoder self-attention: padding mask and bias, no causal mask, no rotary.
#define EMU_FAMILY t5_encoder
#define HEAD_DIM 16
#define ROTARY_DIM 0
#define ROTARY_INTERLEAVED 0
#define POS_DTYPE 0
#define WARPS 4
#define Q_TILE 16
#define K_TILE 64
#define SPLIT_KEYS 128
#define CAUSAL 0
#define WINDOW 0
#define ALIBI 0
#define MASK_DTYPE 5
#define UNATTENDED_CAUSAL 0
#define BIAS 1
#include "AttentionEmulationFamily.inc"

// T5's decoder self-attention of an export without a cache: causal, bias, no mask.
#define EMU_FAMILY t5_decoder
#define HEAD_DIM 16
#define ROTARY_DIM 0
#define ROTARY_INTERLEAVED 0
#define POS_DTYPE 0
#define WARPS 4
#define Q_TILE 16
#define K_TILE 64
#define SPLIT_KEYS 128
#define CAUSAL 1
#define WINDOW 0
#define ALIBI 0
#define MASK_DTYPE 0
#define UNATTENDED_CAUSAL 0
#define BIAS 1
#include "AttentionEmulationFamily.inc"

// T5's decoder self-attention in its session programs: causal over the session's cache,
// the decoder's padding mask, and the bias its program computes for the cached step.
#define EMU_FAMILY t5_session
#define HEAD_DIM 16
#define ROTARY_DIM 0
#define ROTARY_INTERLEAVED 0
#define POS_DTYPE 0
#define WARPS 4
#define Q_TILE 16
#define K_TILE 64
#define SPLIT_KEYS 128
#define CAUSAL 1
#define WINDOW 0
#define ALIBI 0
#define MASK_DTYPE 5
#define UNATTENDED_CAUSAL 0
#define BIAS 1
#include "AttentionEmulationFamily.inc"

// The cross-attention: the encoder's padding mask (i64), nothing else.
#define EMU_FAMILY cross
#define HEAD_DIM 16
#define ROTARY_DIM 0
#define ROTARY_INTERLEAVED 0
#define POS_DTYPE 0
#define WARPS 4
#define Q_TILE 16
#define K_TILE 64
#define SPLIT_KEYS 128
#define CAUSAL 0
#define WINDOW 0
#define ALIBI 0
#define MASK_DTYPE 5
#define UNATTENDED_CAUSAL 0
#include "AttentionEmulationFamily.inc"

#undef attention_rotary
#undef attention_prefill
#undef attention_decode
#undef attention_combine

namespace dsrt::cuda {
namespace {

struct Case {
  const char *name;
  KernelSet (*kernels)();
  bool causal = false, mask = true;
  int64_t batch = 2, queries = 5, keys = 5;  // keys != queries: a cross-attention
  int64_t heads = 4, kvHeads = 4;
  // Right padding of each row's keys (the encoder's mask).
  std::vector<int64_t> padding;
  // The bias: 0 none; else its batch (1 or batch) and heads (1, this rank's, or all).
  int64_t biasBatch = 0, biasHeads = 0;
  bool presents = false;
  int rank = 0, ranks = 1;
  bool allKvHeads = false;  // under TP: the keys and values hold every KV head
};

ops::AttrMap attributesOf(const Case &c) {
  ops::AttrMap attrs;
  attrs["num_heads"] = ops::Attr::ofInt(c.heads);
  attrs["num_kv_heads"] = ops::Attr::ofInt(c.kvHeads);
  attrs["head_dim"] = ops::Attr::ofInt(16);
  attrs["scale"] = ops::Attr::ofFloat(1.0f);  // T5 does not scale its scores
  attrs["causal"] = ops::Attr::ofInt(c.causal);
  attrs["alibi"] = ops::Attr::ofInt(0);
  attrs["window"] = ops::Attr::ofInt(0);
  attrs["rotary_dim"] = ops::Attr::ofInt(0);
  attrs["cache_layer"] = ops::Attr::ofInt(-1);
  addRankHeads(attrs, c.heads, c.kvHeads, c.ranks);
  return attrs;
}

// The CPU reference's output, with or without the bias.
std::vector<float> reference(const Case &c, const ops::AttrMap &attrs, ops::Inputs inputs,
                             std::vector<float> *presentKey, std::vector<float> *presentValue,
                             bool withBias) {
  const int64_t B = c.batch, S = c.queries, T = c.keys, D = 16;
  const int64_t H = c.heads / c.ranks, KH = c.kvHeads / c.ranks;
  if (!withBias)
    inputs.resize(7);
  std::vector<float> out(B * S * H * D);
  TensorRef outRef{DType::F32, {B, S, H * D}, out.data()};
  TensorRef keyRef{DType::F32, {B, KH, T, D}, presentKey ? presentKey->data() : nullptr};
  TensorRef valueRef{DType::F32, {B, KH, T, D}, presentValue ? presentValue->data() : nullptr};
  ops::Outputs outputs{&outRef};
  if (presentKey) {
    outputs.push_back(&keyRef);
    outputs.push_back(&valueRef);
  }
  RankOnly group(c.rank, c.ranks);
  ops::SessionState state;
  state.collectives = c.ranks > 1 ? &group : nullptr;
  Status status = ops::compute("tfm.attention", attrs, inputs, outputs, &state);
  EXPECT_TRUE(status.isOk()) << status.message();
  return out;
}

void check(const Case &c) {
  SCOPED_TRACE(c.name);
  const KernelSet kernels = c.kernels();
  const int64_t B = c.batch, S = c.queries, T = c.keys, D = 16;
  const int64_t H = c.heads / c.ranks, KH = c.kvHeads / c.ranks;
  const int64_t keyHeads = c.allKvHeads ? c.kvHeads : KH;
  std::mt19937 generator(77 + static_cast<unsigned>(S * 13 + T));
  std::vector<float> q = randomFloats(generator, B * S * H * D);
  std::vector<float> k = randomFloats(generator, B * T * keyHeads * D);
  std::vector<float> v = randomFloats(generator, B * T * keyHeads * D);
  std::vector<int64_t> mask(B * T, 1);
  for (int64_t b = 0; b < B; ++b) {
    int64_t pad = b < static_cast<int64_t>(c.padding.size()) ? c.padding[b] : 0;
    for (int64_t t = T - pad; t < T; ++t)
      mask[b * T + t] = 0;
  }
  // Biases of T5's size (a few units), so that they move the softmax.
  std::uniform_real_distribution<float> spread(-3.0f, 3.0f);
  std::vector<float> bias(c.biasBatch * c.biasHeads * S * T);
  for (float &value : bias)
    value = spread(generator);

  const ops::AttrMap attrs = attributesOf(c);
  TensorRef qRef{DType::F32, {B, S, H * D}, q.data()};
  TensorRef kRef{DType::F32, {B, T, keyHeads * D}, k.data()};
  TensorRef vRef{DType::F32, {B, T, keyHeads * D}, v.data()};
  TensorRef maskRef{DType::I64, {B, T}, mask.data()};
  TensorRef biasRef{DType::F32, {c.biasBatch, c.biasHeads, S, T}, bias.data()};
  ops::Inputs inputs{&qRef,   &kRef,   &vRef,   c.mask ? &maskRef : nullptr,
                     nullptr, nullptr, nullptr, c.biasBatch ? &biasRef : nullptr};
  std::vector<float> expectedKey(B * KH * T * D), expectedValue(B * KH * T * D);
  std::vector<float> expected =
      reference(c, attrs, inputs, c.presents ? &expectedKey : nullptr,
                c.presents ? &expectedValue : nullptr, true);
  // A rank that holds every head of the bias or of the keys must compute what it computes
  // from its own heads alone.
  std::vector<float> ownBias, ownKeys, ownValues;
  TensorRef ownBiasRef = biasRef, ownKeyRef = kRef, ownValueRef = vRef;
  if (c.ranks > 1 && c.biasHeads == c.heads) {
    for (int64_t b = 0; b < c.biasBatch; ++b)
      for (int64_t h = c.rank * H; h < (c.rank + 1) * H; ++h)
        ownBias.insert(ownBias.end(), &bias[(b * c.heads + h) * S * T],
                       &bias[(b * c.heads + h + 1) * S * T]);
    ownBiasRef = TensorRef{DType::F32, {c.biasBatch, H, S, T}, ownBias.data()};
  }
  if (c.allKvHeads) {
    for (int64_t row = 0; row < B * T; ++row) {
      const int64_t from = (row * keyHeads + c.rank * KH) * D;
      ownKeys.insert(ownKeys.end(), &k[from], &k[from + KH * D]);
      ownValues.insert(ownValues.end(), &v[from], &v[from + KH * D]);
    }
    ownKeyRef = TensorRef{DType::F32, {B, T, KH * D}, ownKeys.data()};
    ownValueRef = TensorRef{DType::F32, {B, T, KH * D}, ownValues.data()};
  }
  if (!ownBias.empty() || c.allKvHeads) {
    ops::Inputs own = inputs;
    own[1] = &ownKeyRef;
    own[2] = &ownValueRef;
    if (c.biasBatch)
      own[7] = &ownBiasRef;
    std::vector<float> fromOwnHeads = reference(c, attrs, own, nullptr, nullptr, true);
    expectClose(expected.data(), fromOwnHeads.data(), expected.size(), "own heads");
  }
  if (c.biasBatch) {
    std::vector<float> unbiased = reference(c, attrs, inputs, nullptr, nullptr, false);
    float gap = 0;
    for (size_t i = 0; i < unbiased.size(); ++i)
      gap = std::max(gap, std::fabs(unbiased[i] - expected[i]));
    EXPECT_GT(gap, 1e-2f) << "the bias changes too little here to be tested";
  }

  EmulatedStep step(kernels, 2, attrs);
  step.rank_ = c.rank;
  step.inputs = {DeviceTensor{DType::F32, {B, S, H * D}, addressOf(q.data())},
                 DeviceTensor{DType::F32, {B, T, keyHeads * D}, addressOf(k.data())},
                 DeviceTensor{DType::F32, {B, T, keyHeads * D}, addressOf(v.data())},
                 std::nullopt,
                 std::nullopt,
                 std::nullopt,
                 std::nullopt};
  if (c.mask)
    step.inputs[3] = DeviceTensor{DType::I64, {B, T}, addressOf(mask.data())};
  if (c.biasBatch)
    step.inputs.push_back(
        DeviceTensor{DType::F32, {c.biasBatch, c.biasHeads, S, T}, addressOf(bias.data())});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> actual(B * S * H * D, nan), actualKey(B * KH * T * D, nan),
      actualValue(B * KH * T * D, nan);
  step.outputs.push_back(DeviceTensor{DType::F32, {B, S, H * D}, addressOf(actual.data())});
  if (c.presents) {
    step.outputs.push_back(DeviceTensor{DType::F32, {B, KH, T, D}, addressOf(actualKey.data())});
    step.outputs.push_back(
        DeviceTensor{DType::F32, {B, KH, T, D}, addressOf(actualValue.data())});
  }
  std::vector<GpuOpInfo> launchers;
  addAttentionGpuOps(launchers);
  Status run = launchers.at(0).run(step);
  ASSERT_TRUE(run.isOk()) << run.message();
  // Keys of another sequence are placed, and the queries copied, in launches of their own.
  EXPECT_EQ(step.launches[0], S != T || c.allKvHeads ? 2 : 1);
  EXPECT_EQ(step.launches[1], 1);
  float worst = expectClose(actual.data(), expected.data(), actual.size(), "output");
  if (c.presents) {
    worst = std::max(worst, expectClose(actualKey.data(), expectedKey.data(), actualKey.size(),
                                        "present key"));
    worst = std::max(worst, expectClose(actualValue.data(), expectedValue.data(),
                                        actualValue.size(), "present value"));
  }
  std::printf("%s: max abs error %.3g\n", c.name, worst);
}

TEST(CrossAttentionEmulation, T5EncoderBiasPerHead) {
  Case c{"t5 encoder, bias [1, heads, s, s]", t5_encoder::kernels};
  c.queries = c.keys = 9;
  c.padding = {0, 3};
  c.biasBatch = 1;
  c.biasHeads = 4;
  check(c);
}

TEST(CrossAttentionEmulation, T5DecoderBiasPerSequenceOverSeveralTiles) {
  // 70 tokens: five query tiles and two key tiles; a bias that differs per sequence and
  // broadcasts over the heads.
  Case c{"t5 decoder, causal, bias [batch, 1, s, s]", t5_decoder::kernels};
  c.causal = true;
  c.mask = false;
  c.queries = c.keys = 70;
  c.biasBatch = 2;
  c.biasHeads = 1;
  check(c);
}

TEST(CrossAttentionEmulation, TensorParallelRankReadsItsHeadsOfTheBias) {
  Case c{"t5 encoder, rank 1 of 2, bias of every head", t5_encoder::kernels};
  c.queries = c.keys = 6;
  c.padding = {1, 0};
  c.biasBatch = 1;
  c.biasHeads = 4;
  c.rank = 1;
  c.ranks = 2;
  check(c);
}

TEST(CrossAttentionEmulation, FewQueriesOverManyKeys) {
  Case c{"cross, 3 queries over 11 keys, presents", cross::kernels};
  c.queries = 3;
  c.keys = 11;
  c.padding = {0, 4};
  c.presents = true;
  check(c);
}

TEST(CrossAttentionEmulation, ManyQueriesOverFewKeys) {
  Case c{"cross, 20 queries over 5 keys", cross::kernels};
  c.queries = 20;
  c.keys = 5;
  c.padding = {2, 0};
  check(c);
}

TEST(CrossAttentionEmulation, TensorParallelRankReadsItsHeadsOfTheCachedKeys) {
  // Rank 1 of 2 over keys that hold all 4 KV heads: it must read heads [2, 4).
  Case c{"cross, rank 1 of 2, keys of every head", cross::kernels};
  c.queries = 1;
  c.keys = 9;
  c.padding = {0, 3};
  c.rank = 1;
  c.ranks = 2;
  c.allKvHeads = true;
  check(c);
}

// An encoder-decoder's session programs: prefill (one decoder token, the encoder's T keys
// written into cache layer 0) and then decode steps (no new keys: the cache's), against the
// CPU kernel run the same way on a cache of its own. The session's device lengths are the
// decoder's (past 0, then 1, 2: not the encoder's), which the launcher must not use for
// these keys.
void checkCachedCross(int64_t rank, int64_t ranks) {
  SCOPED_TRACE("cached cross-attention, rank " + std::to_string(rank) + " of " +
               std::to_string(ranks));
  const KernelSet kernels = cross::kernels();
  const int64_t B = 2, T = 9, D = 16, heads = 4, capacity = 16;
  const int64_t H = heads / ranks, KH = H;
  std::mt19937 generator(91 + static_cast<unsigned>(rank));
  std::vector<int64_t> mask(B * T, 1);
  for (int64_t t = T - 3; t < T; ++t)
    mask[1 * T + t] = 0;  // the second sequence's encoder input is 3 tokens shorter
  ops::AttrMap attrs = attributesOf(Case{"", cross::kernels, false, true, B, 1, T, heads, heads});
  attrs["cache_layer"] = ops::Attr::ofInt(0);
  attrs["cross"] = ops::Attr::ofInt(1);
  addRankHeads(attrs, heads, heads, ranks);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> cpuKeys(B * KH * capacity * D, 0), cpuValues(cpuKeys.size(), 0);
  std::vector<float> gpuKeys(cpuKeys.size(), nan), gpuValues(cpuKeys.size(), nan);
  ops::KvCache cpuCache;
  cpuCache.layers.push_back({DType::F32, B, KH, capacity, D, cpuKeys.data(), cpuValues.data()});
  RankOnly group(static_cast<int>(rank), static_cast<int>(ranks));
  TensorRef maskRef{DType::I64, {B, T}, mask.data()};
  for (int step = 0; step < 3; ++step) {
    const int64_t newKeys = step == 0 ? T : 0;
    // A decode step's empty keys are of every head under TP (tp-shard leaves them whole).
    const int64_t keyHeads = newKeys == 0 ? heads : KH;
    std::vector<float> q = randomFloats(generator, B * H * D);
    std::vector<float> k = randomFloats(generator, B * newKeys * KH * D);
    std::vector<float> v = randomFloats(generator, B * newKeys * KH * D);
    TensorRef qRef{DType::F32, {B, 1, H * D}, q.data()};
    TensorRef kRef{DType::F32, {B, newKeys, keyHeads * D}, k.data()};
    TensorRef vRef{DType::F32, {B, newKeys, keyHeads * D}, v.data()};
    std::vector<float> expected(B * H * D);
    TensorRef outRef{DType::F32, {B, 1, H * D}, expected.data()};
    ops::SessionState state;
    state.cache = &cpuCache;
    state.collectives = ranks > 1 ? &group : nullptr;
    Status cpu = ops::compute("tfm.attention", attrs,
                              {&qRef, &kRef, &vRef, &maskRef, nullptr, nullptr, nullptr},
                              {&outRef}, &state);
    ASSERT_TRUE(cpu.isOk()) << cpu.message();

    EmulatedStep gpu(kernels, 2, attrs);
    gpu.rank_ = static_cast<int>(rank);
    gpu.cache = DeviceKvLayer{DType::F32, B, KH, capacity, D, addressOf(gpuKeys.data()),
                              addressOf(gpuValues.data())};
    gpu.lengths[0] = step;  // the decoder's: past, total, mask width
    gpu.lengths[1] = gpu.lengths[2] = step + 1;
    gpu.inputs = {DeviceTensor{DType::F32, {B, 1, H * D}, addressOf(q.data())},
                  DeviceTensor{DType::F32, {B, newKeys, keyHeads * D}, addressOf(k.data())},
                  DeviceTensor{DType::F32, {B, newKeys, keyHeads * D}, addressOf(v.data())},
                  DeviceTensor{DType::I64, {B, T}, addressOf(mask.data())},
                  std::nullopt,
                  std::nullopt,
                  std::nullopt};
    std::vector<float> actual(B * H * D, nan);
    gpu.outputs.push_back(DeviceTensor{DType::F32, {B, 1, H * D}, addressOf(actual.data())});
    std::vector<GpuOpInfo> launchers;
    addAttentionGpuOps(launchers);
    Status run = launchers.at(0).run(gpu);
    ASSERT_TRUE(run.isOk()) << run.message();
    // Prefill places the encoder's keys and copies the query; a decode step only copies.
    EXPECT_EQ(gpu.launches[0], step == 0 ? 2 : 1) << "step " << step;
    EXPECT_EQ(gpu.launches[1], 1) << "step " << step;
    float worst = expectClose(actual.data(), expected.data(), actual.size(), "output");
    std::printf("cached cross, step %d, rank %lld of %lld: max abs error %.3g\n", step,
                static_cast<long long>(rank), static_cast<long long>(ranks), worst);
  }
  // The cache holds the keys prefill wrote, as the CPU's does.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < KH; ++h) {
      const int64_t at = (b * KH + h) * capacity * D;
      expectClose(&gpuKeys[at], &cpuKeys[at], T * D, "cached keys");
      expectClose(&gpuValues[at], &cpuValues[at], T * D, "cached values");
    }
  // A graph would replay the first request's encoder length: the launcher refuses to be
  // captured (CudaSession captures no program with such a step).
  EmulatedStep captured(kernels, 2, attrs);
  captured.capturing_ = true;
  captured.cache = DeviceKvLayer{DType::F32, B, KH, capacity, D, addressOf(gpuKeys.data()),
                                 addressOf(gpuValues.data())};
  std::vector<float> q(B * H * D, 0.5f), none, out(B * H * D);
  captured.inputs = {DeviceTensor{DType::F32, {B, 1, H * D}, addressOf(q.data())},
                     DeviceTensor{DType::F32, {B, 0, KH * D}, addressOf(none.data())},
                     DeviceTensor{DType::F32, {B, 0, KH * D}, addressOf(none.data())},
                     DeviceTensor{DType::I64, {B, T}, addressOf(mask.data())},
                     std::nullopt,
                     std::nullopt,
                     std::nullopt};
  captured.outputs.push_back(DeviceTensor{DType::F32, {B, 1, H * D}, addressOf(out.data())});
  std::vector<GpuOpInfo> launchers;
  addAttentionGpuOps(launchers);
  Status refused = launchers.at(0).run(captured);
  EXPECT_FALSE(refused.isOk());
  EXPECT_EQ(captured.launches[0] + captured.launches[1], 0);
}

// T5's decoder in its session programs: a prefill of 3 tokens, then decode steps of one,
// each with the bias [1, heads, new, past + new] its program computes, over the session's
// cache and the device lengths, against the CPU kernel on a cache of its own.
void checkSessionBias(int64_t rank, int64_t ranks) {
  SCOPED_TRACE("t5 session bias, rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  const KernelSet kernels = t5_session::kernels();
  const int64_t B = 2, D = 16, heads = 4, capacity = 8;
  const int64_t H = heads / ranks, KH = H;
  std::mt19937 generator(53 + static_cast<unsigned>(rank));
  ops::AttrMap attrs = attributesOf(Case{"", t5_session::kernels, true, true, B, 1, 1, heads, heads});
  attrs["cache_layer"] = ops::Attr::ofInt(0);
  addRankHeads(attrs, heads, heads, ranks);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> cpuKeys(B * KH * capacity * D, 0), cpuValues(cpuKeys.size(), 0);
  std::vector<float> gpuKeys(cpuKeys.size(), nan), gpuValues(cpuKeys.size(), nan);
  ops::KvCache cpuCache;
  cpuCache.layers.push_back({DType::F32, B, KH, capacity, D, cpuKeys.data(), cpuValues.data()});
  RankOnly group(static_cast<int>(rank), static_cast<int>(ranks));
  std::uniform_real_distribution<float> spread(-3.0f, 3.0f);
  int64_t past = 0;
  for (int64_t fresh : {3, 1, 1}) {
    const int64_t total = past + fresh;
    std::vector<float> q = randomFloats(generator, B * fresh * H * D);
    std::vector<float> k = randomFloats(generator, B * fresh * KH * D);
    std::vector<float> v = randomFloats(generator, B * fresh * KH * D);
    std::vector<int64_t> mask(B * total, 1);
    mask[1 * total + 0] = 0;  // the second row left-padded by one
    // Every head of the model (each rank reads its own), as the session program gives it.
    std::vector<float> bias(heads * fresh * total);
    for (float &value : bias)
      value = spread(generator);
    TensorRef qRef{DType::F32, {B, fresh, H * D}, q.data()};
    TensorRef kRef{DType::F32, {B, fresh, KH * D}, k.data()};
    TensorRef vRef{DType::F32, {B, fresh, KH * D}, v.data()};
    TensorRef maskRef{DType::I64, {B, total}, mask.data()};
    TensorRef biasRef{DType::F32, {1, heads, fresh, total}, bias.data()};
    std::vector<float> expected(B * fresh * H * D);
    TensorRef outRef{DType::F32, {B, fresh, H * D}, expected.data()};
    ops::SessionState state;
    state.cache = &cpuCache;
    state.collectives = ranks > 1 ? &group : nullptr;
    Status cpu = ops::compute("tfm.attention", attrs,
                              {&qRef, &kRef, &vRef, &maskRef, nullptr, nullptr, nullptr, &biasRef},
                              {&outRef}, &state);
    ASSERT_TRUE(cpu.isOk()) << cpu.message();

    EmulatedStep gpu(kernels, 2, attrs);
    gpu.rank_ = static_cast<int>(rank);
    gpu.cache = DeviceKvLayer{DType::F32, B, KH, capacity, D, addressOf(gpuKeys.data()),
                              addressOf(gpuValues.data())};
    gpu.lengths[0] = static_cast<int32_t>(past);
    gpu.lengths[1] = gpu.lengths[2] = static_cast<int32_t>(total);
    gpu.inputs = {DeviceTensor{DType::F32, {B, fresh, H * D}, addressOf(q.data())},
                  DeviceTensor{DType::F32, {B, fresh, KH * D}, addressOf(k.data())},
                  DeviceTensor{DType::F32, {B, fresh, KH * D}, addressOf(v.data())},
                  DeviceTensor{DType::I64, {B, total}, addressOf(mask.data())},
                  std::nullopt,
                  std::nullopt,
                  std::nullopt,
                  DeviceTensor{DType::F32, {1, heads, fresh, total}, addressOf(bias.data())}};
    std::vector<float> actual(B * fresh * H * D, nan);
    gpu.outputs.push_back(DeviceTensor{DType::F32, {B, fresh, H * D}, addressOf(actual.data())});
    std::vector<GpuOpInfo> launchers;
    addAttentionGpuOps(launchers);
    Status run = launchers.at(0).run(gpu);
    ASSERT_TRUE(run.isOk()) << run.message();
    EXPECT_EQ(gpu.launches[0], 1);  // the new keys into the cache, the queries out
    EXPECT_EQ(gpu.launches[1], 1);  // the prefill kernel, for decode steps too
    float worst = expectClose(actual.data(), expected.data(), actual.size(), "output");
    std::printf("t5 session, %lld new over %lld, rank %lld of %lld: max abs error %.3g\n",
                static_cast<long long>(fresh), static_cast<long long>(total),
                static_cast<long long>(rank), static_cast<long long>(ranks), worst);
    past = total;
  }
}

TEST(CrossAttentionEmulation, T5SessionStepsAddTheirBiasOverTheCache) { checkSessionBias(0, 1); }

TEST(CrossAttentionEmulation, TensorParallelRankAddsItsHeadsOfTheSessionBias) {
  checkSessionBias(1, 2);
}

TEST(CrossAttentionEmulation, SessionProgramsCacheTheEncodersKeysOnce) {
  checkCachedCross(0, 1);
}

TEST(CrossAttentionEmulation, TensorParallelRankCachesItsHeadsOfTheEncodersKeys) {
  checkCachedCross(1, 2);
}

} // namespace
} // namespace dsrt::cuda
