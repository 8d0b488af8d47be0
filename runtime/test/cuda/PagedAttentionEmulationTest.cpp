// tfm.attention over the serving engine's paged KV cache on the GPU: the launcher
// (runtime/src/cuda/ops/AttentionPagedOps.cpp) and the paged kernels (attention_rotary and
// attention_decode with PAGED, slots 3 and 4 of a serving plan's step, and 5, the paged
// prefill, on the CUDA cores or the tensor cores) run on the host
// through CudaEmulation.h, against the CPU reference paged attention
// (runtime/src/ops/TransformerPagedAttention.cpp) on random inputs and a random pool.
// Each step mixes rows of several sequences: prompt chunks (consecutive rows of one
// sequence, which must see each other's keys), decode tokens, a chunk from position 0,
// sequences past one decode split (128 keys), at block sizes 1, 16 and 7, with tables of
// shuffled block ids. Compared: the output and every block of the pool, written or not.
// With a paged prefill kernel (slot 5, six kernels), the prompt chunks go through it and
// the other rows through the decode kernel: the launches say which ran for which rows.
// Tolerance: AttentionEmulationHarness.h's |gpu − cpu| <= 1e-5 + 1e-4·|cpu| per element
// (another summation order), plus one step of a half dtype where both sides round an f32
// into it (cache rows: 2^-10 relative for f16, 2^-7 for bf16; a half result likewise).
#include "AttentionEmulationHarness.h"

// Once, at global scope: each family's templates include it again inside their namespace,
// where its include guard makes that a no-op.
#include "dsc_common.cuh"

#include "EmulatedHalf.h"
#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "PagedAttentionEmulationFamilies.inc"

#include "AttentionEmulationCheck.h"

namespace dsrt::cuda {
namespace {

const Family kPagedLlama{"paged_llama", paged_llama::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "all",
                         DType::I64};
const Family kPagedLlamaF16{"paged_llama_f16", paged_llama_f16::kernels, 16, 4, 2, 1, 0, 0, 16,
                            0, "all", DType::I64, 0, false, 0, DType::F16, DType::F16};
const Family kPagedGemma2Bf16{"paged_gemma2_bf16", paged_gemma2_bf16::kernels, 16, 4, 2, 1, 0,
                              4, 16, 0, "all", DType::I64, 0.25f, false, 0, DType::BF16};
const Family kPagedBloom{"paged_bloom", paged_bloom::kernels, 16, 4, 4, 1, 1, 0, 0, 0, "all",
                         DType::I64};
const Family kPagedQwen3Bf16{"paged_qwen3_bf16", paged_qwen3_bf16::kernels, 16, 4, 2, 1, 0, 0,
                             16, 0, "all", DType::I64, 0, false, 1, DType::BF16};
const Family kPagedMqa{"paged_mqa", paged_mqa::kernels, 16, 6, 1, 1, 0, 0, 16, 0, "all",
                       DType::I32};

// Query, key and value in one joined projection (packed_qkv), as dsc fuses Llama's.
const Family kPagedLlamaPacked{"paged_llama_packed", paged_llama_packed::kernels, 16, 4, 2, 1, 0,
                               0, 16, 0, "all", DType::I64};

// Slot 1 (and 5) on the tensor cores.
const Family kPagedLlamaF16Mma{"paged_llama_f16_mma", paged_llama_f16_mma::kernels, 16, 4, 2, 1,
                               0, 0, 16, 0, "all", DType::I64, 0, false, 0, DType::F16,
                               DType::F16};
const Family kPagedGemma2Bf16Mma{"paged_gemma2_bf16_mma", paged_gemma2_bf16_mma::kernels, 16, 4,
                                 2, 1, 0, 4, 16, 0, "all", DType::I64, 0.25f, false, 0,
                                 DType::BF16};
const Family kPagedWide512MmaF16{"paged_wide512_mma_f16", paged_wide512_mma_f16::kernels, 512,
                                 2, 2, 1, 0, 0, 128, 0, "all", DType::I64, 0, false, 0,
                                 DType::F16};

// Attention sinks (SINKS): GPT-OSS's logits over an f32 pool, its sliding window over a
// bf16 pool on the tensor cores, and smooth softmax (a sink of 0) with the first's kernels.
const Family kPagedGptOss{"paged_gptoss", paged_gptoss::kernels, 16, 4, 2, 1, 0, 0, 16, 0,
                          "all", DType::I64, 0, false, 0, DType::F32, DType::F32, 1};
const Family kPagedGptOssSwaBf16Mma{"paged_gptoss_swa_bf16_mma",
                                    paged_gptoss_swa_bf16_mma::kernels, 16, 4, 2, 1, 0, 4, 16, 0,
                                    "all", DType::I64, 0, false, 0, DType::BF16, DType::F32, 1};
const Family kPagedSmooth{"paged_smooth", paged_gptoss::kernels, 16, 4, 2, 1, 0, 0, 16, 0, "all",
                          DType::I64, 0, false, 0, DType::F32, DType::F32, 2};

const Family *const kPagedFamilies[] = {&kPagedLlama,  &kPagedLlamaF16,  &kPagedGemma2Bf16,
                                        &kPagedBloom,  &kPagedQwen3Bf16, &kPagedMqa};

// One sequence's part of a step: `rows` new tokens from position `past` (its keys before
// that are in the pool already).
struct Part {
  int64_t past, rows;
};

struct PagedScenario {
  int64_t blockSize = 16;
  int64_t maxPositions = 256;  // a table's reach (the plan's max_seq_len)
  std::vector<Part> parts;
  bool reversedBlocks = false;
  bool packed = false;  // the step reads q, k and v from one joined tensor
  int rank = 0, ranks = 1;  // tensor parallelism: each rank takes heads / ranks heads
  bool prefill = false;  // the plan's step has the paged prefill kernel (slot 5)
};

// The pool's elements of `type` (f32, or f16/bf16 bits in the first half of the bytes).
struct Pool {
  std::vector<float> keys, values;
};

// Runs the step through the CPU reference and the emulated launcher and kernels, and
// compares the output and both pools whole.
void checkPaged(const Family &f, const PagedScenario &s) {
  SCOPED_TRACE(std::string(f.name) + " block size " + std::to_string(s.blockSize) + " rank " +
               std::to_string(s.rank) + " of " + std::to_string(s.ranks));
  const KernelSet kernels = s.prefill ? pagedPrefillKernels(f.kernels()) : f.kernels();
  const int64_t D = f.headDim, H = f.heads / s.ranks,
                KH = rankKvHeads(f.heads, f.kvHeads, s.rank, s.ranks), BS = s.blockSize;
  const int64_t tableWidth = (s.maxPositions + BS - 1) / BS;
  std::mt19937 generator(77 + static_cast<unsigned>(BS));

  // Each sequence's blocks: distinct ids, shuffled, with spare blocks nobody uses.
  int64_t needed = 0;
  for (const Part &part : s.parts)
    needed += (part.past + part.rows + BS - 1) / BS;
  const int64_t blocks = needed + 3;
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), generator);
  std::vector<std::vector<int32_t>> tables;
  size_t next = 0;
  for (const Part &part : s.parts) {
    std::vector<int32_t> table(static_cast<size_t>(tableWidth), -1);
    for (int64_t i = 0; i < (part.past + part.rows + BS - 1) / BS; ++i)
      table[i] = ids[next++];
    tables.push_back(std::move(table));
  }
  // The rows, each sequence's as consecutive rows (a chunk), in the order of the parts.
  std::vector<ops::KvPagedRow> rows;
  std::vector<int32_t> deviceRows;  // [rows][1 + tableWidth]
  for (size_t p = 0; p < s.parts.size(); ++p)
    for (int64_t r = 0; r < s.parts[p].rows; ++r) {
      const int64_t position = s.parts[p].past + r;
      rows.push_back({tables[p].data(), (s.parts[p].past + s.parts[p].rows + BS - 1) / BS,
                      position});
      deviceRows.push_back(static_cast<int32_t>(position));
      deviceRows.insert(deviceRows.end(), tables[p].begin(), tables[p].end());
    }
  const int64_t B = static_cast<int64_t>(rows.size());
  // The prompt chunks after the rows, in one buffer, as the session uploads them.
  const size_t rowInts = deviceRows.size();
  std::vector<int32_t> chunks;
  findPagedChunks(deviceRows.data(), B, tableWidth, chunks);
  deviceRows.insert(deviceRows.end(), chunks.begin(), chunks.end());
  const int64_t chunkCount = static_cast<int64_t>(chunks.size() / 2);

  std::vector<float> q = randomFloats(generator, B * H * D);
  std::vector<float> k = randomFloats(generator, B * KH * D);
  std::vector<float> v = randomFloats(generator, B * KH * D);
  std::vector<int64_t> positions(static_cast<size_t>(B)), maskWide(static_cast<size_t>(B), 1);
  std::vector<int32_t> maskNarrow(static_cast<size_t>(B), 1);
  for (int64_t b = 0; b < B; ++b)
    positions[b] = rows[b].position;
  void *mask = f.maskType == DType::I32 ? static_cast<void *>(maskNarrow.data())
                                        : static_cast<void *>(maskWide.data());
  const int64_t normWidth = D;
  std::vector<float> queryNorm = randomFloats(generator, normWidth),
                     keyNorm = randomFloats(generator, normWidth);
  for (std::vector<float> *scale : {&queryNorm, &keyNorm})
    for (float &value : *scale)
      value += 1.0f;

  const size_t poolElements = static_cast<size_t>(blocks * KH * BS * D);
  std::vector<float> init = randomFloats(generator, poolElements);
  Pool cpu{cacheOf(f.cacheType, init), {}};
  std::reverse(init.begin(), init.end());
  cpu.values = cacheOf(f.cacheType, init);
  Pool gpu = cpu;

  Scenario session;
  session.session = true;
  session.ranks = s.ranks;
  const ops::AttrMap attrs = attributesOf(f, session);

  // The reference.
  TensorRef qRef{DType::F32, {B, 1, H * D}, q.data()};
  TensorRef kRef{DType::F32, {B, 1, KH * D}, k.data()};
  TensorRef vRef{DType::F32, {B, 1, KH * D}, v.data()};
  TensorRef maskRef{f.maskType, {B, 1}, mask};
  TensorRef positionRef{DType::I64, {B, 1}, positions.data()};
  TensorRef queryNormRef{DType::F32, {normWidth}, queryNorm.data()};
  TensorRef keyNormRef{DType::F32, {normWidth}, keyNorm.data()};
  ops::Inputs inputs{&qRef, &kRef, &vRef, &maskRef, nullptr, nullptr, &positionRef};
  if (f.qkNorm)
    inputs.insert(inputs.end(), {nullptr, &queryNormRef, &keyNormRef});
  const SinkInputs sinks(f);
  const ops::Inputs inputsWithoutSinks = inputs;
  inputs = sinks.with(inputs);
  RankOnly group(s.rank, s.ranks);
  // The reference's output, over a pool of its own (it writes the rows' keys and values).
  auto referenceOutput = [&](const ops::Inputs &stepInputs, Pool &pool) {
    std::vector<float> stored(static_cast<size_t>(B * H * D));
    TensorRef outRef{f.outputType, {B, 1, H * D}, stored.data()};
    ops::KvCache cache;
    cache.layers.push_back({f.cacheType, blocks, KH, BS, D, pool.keys.data(), pool.values.data()});
    cache.blockSize = BS;
    cache.pagedRows = rows;
    ops::SessionState state;
    state.cache = &cache;
    state.collectives = s.ranks > 1 ? &group : nullptr;
    Status reference = ops::compute("tfm.attention", attrs, stepInputs, {&outRef}, &state);
    EXPECT_TRUE(reference.isOk()) << reference.message();
    return widened(f.outputType, stored, stored.size());
  };
  std::vector<float> sinkless;
  if (f.sinks) {
    Pool scratchPool = cpu;
    sinkless = referenceOutput(inputsWithoutSinks, scratchPool);
  }
  const std::vector<float> expected = referenceOutput(inputs, cpu);
  if (::testing::Test::HasFailure())
    return;

  // The emulated GPU, the step's five kernels.
  ops::AttrMap stepAttrs = attrs;
  std::vector<float> packed;
  if (s.packed) {
    stepAttrs["packed_qkv"] = ops::Attr::ofInt(1);
    for (int64_t b = 0; b < B; ++b) {
      packed.insert(packed.end(), &q[b * H * D], &q[(b + 1) * H * D]);
      packed.insert(packed.end(), &k[b * KH * D], &k[(b + 1) * KH * D]);
      packed.insert(packed.end(), &v[b * KH * D], &v[(b + 1) * KH * D]);
    }
  }
  EmulatedStep step(kernels, s.prefill ? 6 : 5, stepAttrs);
  step.rank_ = s.rank;
  step.inputs = {DeviceTensor{DType::F32, {B, 1, H * D}, addressOf(q.data())},
                 DeviceTensor{DType::F32, {B, 1, KH * D}, addressOf(k.data())},
                 DeviceTensor{DType::F32, {B, 1, KH * D}, addressOf(v.data())},
                 DeviceTensor{f.maskType, {B, 1}, addressOf(mask)},
                 std::nullopt,
                 std::nullopt,
                 DeviceTensor{DType::I64, {B, 1}, addressOf(positions.data())}};
  if (s.packed)
    for (int i = 0; i < 3; ++i)
      step.inputs[i] =
          DeviceTensor{DType::F32, {B, 1, (H + 2 * KH) * D}, addressOf(packed.data())};
  if (f.qkNorm) {
    step.inputs.push_back(std::nullopt);
    step.inputs.push_back(DeviceTensor{DType::F32, {normWidth}, addressOf(queryNorm.data())});
    step.inputs.push_back(DeviceTensor{DType::F32, {normWidth}, addressOf(keyNorm.data())});
  }
  sinks.addTo(step.inputs);
  std::vector<float> actualStored(expected.size());
  std::memset(actualStored.data(), 0xff, actualStored.size() * sizeof(float));  // NaN
  step.outputs.push_back(
      DeviceTensor{f.outputType, {B, 1, H * D}, addressOf(actualStored.data())});
  step.cache = DeviceKvLayer{f.cacheType, blocks, KH, BS, D, addressOf(gpu.keys.data()),
                             addressOf(gpu.values.data())};
  step.paged = DevicePagedRows{B,
                               tableWidth,
                               BS,
                               blocks,
                               addressOf(deviceRows.data()),
                               deviceRows.data(),
                               chunkCount,
                               addressOf(deviceRows.data() + rowInts),
                               deviceRows.data() + rowInts};
  std::vector<GpuOpInfo> launchers;
  addAttentionGpuOps(launchers);
  cuda_emulation::reversedBlockOrder = s.reversedBlocks;
  Status run = launchers[0].run(step);
  cuda_emulation::reversedBlockOrder = false;
  ASSERT_TRUE(run.isOk()) << run.message();

  // The paged kernels alone: the write once, then the decode kernel once for every row, or
  // with the paged prefill, the prefill once for the chunks and the decode kernel once for
  // each run of rows between them.
  EXPECT_EQ(step.launches[0] + step.launches[1] + step.launches[2], 0);
  EXPECT_EQ(step.launches[3], 1);
  int64_t decodeRows = 0;
  for (const Dim3 &grid : step.gridLog[4]) {
    EXPECT_EQ(grid.x, static_cast<unsigned>((tableWidth * BS + 127) / 128));
    decodeRows += grid.z;
  }
  int64_t chunkRows = 0, longest = 0;
  for (int64_t c = 0; c < chunkCount; ++c) {
    chunkRows += chunks[2 * c + 1];
    longest = std::max<int64_t>(longest, chunks[2 * c + 1]);
  }
  if (s.prefill && chunkCount > 0) {
    EXPECT_EQ(step.launches[5], 1) << "the prompt chunks did not run the paged prefill";
    EXPECT_EQ(step.grids[5].z, static_cast<unsigned>(chunkCount));
    EXPECT_EQ(step.grids[5].y, static_cast<unsigned>(H));
    const int64_t tile = kernels.constants[5].at("Q_TILE");
    const auto parts = kernels.constants[5].find("FEATURE_PARTS");
    const int64_t blocksPerTile = parts == kernels.constants[5].end() ? 1 : parts->second;
    EXPECT_EQ(step.grids[5].x,
              static_cast<unsigned>((longest + tile - 1) / tile * blocksPerTile));
    EXPECT_EQ(decodeRows, B - chunkRows);
  } else {
    EXPECT_EQ(step.launches[5], 0);
    EXPECT_EQ(step.launches[4], 1);
    EXPECT_EQ(decodeRows, B);
  }
  for (size_t i = 0; i < step.arrivals.size(); ++i)
    EXPECT_EQ(step.arrivals[i], 0) << "arrival count " << i << " left set for the next launch";

  const std::vector<float> actual = widened(f.outputType, actualStored, actualStored.size());
  const float outputStep = f.outputType == DType::F16 ? 0x1p-10f
                           : f.outputType == DType::BF16 ? 0x1p-7f : 0.0f;
  // The tensor cores' prefill rounds the queries and the softmax weights to the cache's
  // dtype: AttentionEmulationCheck.h's bound for it, 2.4 u (1 + 2 g) with g the scores'
  // rounding gain (scale · sqrt(D) · rms(q) · rms(k)), on the chunks' rows only.
  float operandRounding = 0.0f;
  if (s.prefill && kernels.prefillOnTensorCores) {
    auto rms = [](const std::vector<float> &values) {
      double sum = 0;
      for (float value : values)
        sum += static_cast<double>(value) * value;
      return std::sqrt(sum / static_cast<double>(values.size()));
    };
    const double gain = attrs.at("scale").f * std::sqrt(static_cast<double>(D)) * rms(q) * rms(k);
    const float unit = f.cacheType == DType::F16 ? 0x1p-11f : 0x1p-8f;
    operandRounding = static_cast<float>(2.4 * unit * (1 + 2 * gain));
  }
  std::vector<bool> inChunk(static_cast<size_t>(B), false);
  for (int64_t c = 0; c < chunkCount; ++c)
    for (int64_t r = chunks[2 * c]; r < chunks[2 * c] + chunks[2 * c + 1]; ++r)
      inChunk[r] = true;
  float worst = 0.0f;
  for (int64_t b = 0; b < B; ++b) {
    const size_t at = static_cast<size_t>(b * H * D);
    worst = std::max(worst, expectClose(&actual[at], &expected[at], static_cast<size_t>(H * D),
                                        "output row " + std::to_string(b), outputStep,
                                        inChunk[b] ? operandRounding : 0.0f));
  }
  const float cacheStep = f.cacheType == DType::F16 ? 0x1p-10f
                          : f.cacheType == DType::BF16 ? 0x1p-7f : 0.0f;
  for (auto [gpuPool, cpuPool, what] :
       {std::make_tuple(&gpu.keys, &cpu.keys, "pooled keys"),
        std::make_tuple(&gpu.values, &cpu.values, "pooled values")}) {
    const std::vector<float> a = widened(f.cacheType, *gpuPool, poolElements),
                             e = widened(f.cacheType, *cpuPool, poolElements);
    worst = std::max(worst, expectClose(a.data(), e.data(), poolElements, what, cacheStep));
  }
  std::printf("%s paged, block size %lld, %lld rows: max abs error %.3g", f.name,
              static_cast<long long>(BS), static_cast<long long>(B), worst);
  expectSinksMatter(f, sinkless, expected, outputStep, operandRounding);
  std::printf("\n");
}

// Rows of four sequences: a prompt chunk after a cached past that spans a decode split, a
// decode token, a chunk from position 0, and a decode token far into its sequence.
PagedScenario mixedStep(int64_t blockSize) {
  PagedScenario s;
  s.blockSize = blockSize;
  s.parts = {{130, 5}, {40, 1}, {0, 6}, {200, 1}};
  return s;
}

TEST(PagedAttentionEmulation, MixedRowsAtBlockSizes) {
  for (const Family *f : kPagedFamilies)
    for (int64_t blockSize : {1, 16, 7})
      checkPaged(*f, mixedStep(blockSize));
}

TEST(PagedAttentionEmulation, PackedProjection) {
  PagedScenario s = mixedStep(7);
  s.packed = true;
  checkPaged(kPagedLlamaPacked, s);
}

// A tensor-parallel rank: its query heads and the KV heads they read, at the heads'
// offsets (GQA 4/2 over 2 ranks: one KV head each; MQA 6/1 over 3: the KV head
// replicated, two query heads each).
TEST(PagedAttentionEmulation, TensorParallelRanks) {
  for (int rank = 0; rank < 2; ++rank) {
    PagedScenario s = mixedStep(7);
    s.rank = rank;
    s.ranks = 2;
    checkPaged(kPagedLlama, s);
  }
  PagedScenario s = mixedStep(16);
  s.rank = 2;
  s.ranks = 3;
  checkPaged(kPagedMqa, s);
}

TEST(PagedAttentionEmulation, BlocksInReverseOrder) {
  // The last block of each (head run, row) to arrive merges: in either order.
  PagedScenario s = mixedStep(16);
  s.reversedBlocks = true;
  checkPaged(kPagedLlama, s);
  checkPaged(kPagedMqa, s);
}

// The rows' chunk-mates matter: attending without them (keys of a chunk written after its
// rows attend) would differ from the reference by far more than the tolerance.
TEST(PagedAttentionEmulation, ChunkRowsSeeEachOther) {
  PagedScenario s;
  s.blockSize = 7;
  s.parts = {{0, 9}};
  checkPaged(kPagedLlama, s);
  checkPaged(kPagedGemma2Bf16, s);
}

// The paged prefill (slot 5) for the prompt chunks, the decode kernel for the rest: every
// family (GQA, f16 cache and result, Gemma-2's window and cap over bf16, ALiBi, q/k norms,
// MQA) at block sizes 1, 16 and 7, the mixed step, and a step whose decode rows come first
// and whose chunks span several query tiles (a chunk of 40 after a past of 19, one of 21
// from position 0) around a decode row.
void checkPrefillSteps(const Family &f, int64_t longChunk) {
  for (int64_t blockSize : {1, 16, 7}) {
    PagedScenario s = mixedStep(blockSize);
    s.prefill = true;
    checkPaged(f, s);
    s.parts = {{33, 1}, {19, longChunk}, {5, 1}, {0, 21}};
    checkPaged(f, s);
  }
}

TEST(PagedAttentionEmulation, PagedPrefillForPromptChunks) {
  for (const Family *f : kPagedFamilies)
    checkPrefillSteps(*f, 40);
}

// Slot 5 on the tensor cores, where slot 1 is (a half cache): the chunks' rows within the
// operands' rounding, the decode rows as tight as ever.
TEST(PagedAttentionEmulation, PagedPrefillOnTensorCores) {
  for (const Family *f : {&kPagedLlamaF16Mma, &kPagedGemma2Bf16Mma})
    checkPrefillSteps(*f, 70);  // two query tiles of 64
}

// Heads of 512: each query tile's two blocks (FEATURE_PARTS) read their queries from scratch
// and write their halves of the rows, the tiles in dynamic shared memory.
TEST(PagedAttentionEmulation, PagedPrefillOnTensorCoresWideHeads) {
  PagedScenario s = mixedStep(7);
  s.prefill = true;
  checkPaged(kPagedWide512MmaF16, s);
  s.blockSize = 16;
  s.parts = {{3, 1}, {19, 70}};
  checkPaged(kPagedWide512MmaF16, s);
}

TEST(PagedAttentionEmulation, PagedPrefillVariants) {
  PagedScenario s = mixedStep(7);
  s.prefill = true;
  s.packed = true;
  checkPaged(kPagedLlamaPacked, s);
  s.packed = false;
  s.reversedBlocks = true;
  checkPaged(kPagedLlama, s);
  checkPaged(kPagedMqa, s);
  s.reversedBlocks = false;
  for (int rank = 0; rank < 2; ++rank) {
    s.rank = rank;
    s.ranks = 2;
    checkPaged(kPagedLlama, s);
  }
  s.rank = 2;
  s.ranks = 3;
  checkPaged(kPagedMqa, s);
  // Decode rows only: no chunk, the decode kernel alone.
  s.rank = 0;
  s.ranks = 1;
  s.parts = {{130, 1}, {0, 1}, {17, 1}};
  checkPaged(kPagedLlama, s);
}

// The paged decode kernel (one row per sequence, its merge adding the sink once) and the
// paged prefill (a chunk's rows starting at the sink) with sinks, against the CPU paged
// attention, at block sizes 1, 16 and 7; a rank of 2 reads its heads' sinks.
TEST(PagedAttentionEmulation, PagedSinks) {
  for (const Family *f : {&kPagedGptOss, &kPagedGptOssSwaBf16Mma, &kPagedSmooth}) {
    for (int64_t blockSize : {1, 16, 7}) {
      PagedScenario s = mixedStep(blockSize);
      checkPaged(*f, s);
      s.prefill = true;
      checkPaged(*f, s);
    }
    PagedScenario s = mixedStep(7);
    s.prefill = true;
    s.rank = 1;
    s.ranks = 2;
    checkPaged(*f, s);
  }
}

// Runs found on the host: equal tables at consecutive positions, two rows or more.
TEST(PagedAttentionEmulation, FindPagedChunks) {
  // Width 2: [position, block, block] per row.
  const std::vector<int32_t> rows = {4, 0, 1,  5, 0, 1,  6, 0, 1,   // a chunk of 3
                                     9, 2, -1,                      // decode
                                     3, 3, -1,  5, 3, -1,           // not consecutive
                                     0, 4, -1,  1, 5, -1,           // other tables
                                     7, 6, 7,   8, 6, 7};           // a chunk of 2
  std::vector<int32_t> chunks;
  findPagedChunks(rows.data(), 10, 2, chunks);
  EXPECT_EQ(chunks, (std::vector<int32_t>{0, 3, 8, 2}));
}

// A step of a plan without the paged kernels (compiled without --serving) asks for slot 3,
// which it lacks (the session then runs it through the host fallback, or refuses it in
// strict mode), and launches nothing; rows the engine described otherwise are refused.
TEST(PagedAttentionEmulation, PlanWithoutPagedKernelsIsRefused) {
  const KernelSet kernels = paged_llama::kernels();
  Scenario session;
  session.session = true;
  const ops::AttrMap attrs = attributesOf(kPagedLlama, session);
  EmulatedStep step(kernels, 3, attrs);
  std::vector<float> q(4 * 16), kv(2 * 16), out(4 * 16);
  std::vector<int64_t> positions{0}, mask{1};
  std::vector<int32_t> rows{0, 0};
  std::vector<float> pool(2 * 16);
  step.inputs = {DeviceTensor{DType::F32, {1, 1, 64}, addressOf(q.data())},
                 DeviceTensor{DType::F32, {1, 1, 32}, addressOf(kv.data())},
                 DeviceTensor{DType::F32, {1, 1, 32}, addressOf(kv.data())},
                 DeviceTensor{DType::I64, {1, 1}, addressOf(mask.data())},
                 std::nullopt,
                 std::nullopt,
                 DeviceTensor{DType::I64, {1, 1}, addressOf(positions.data())}};
  step.outputs.push_back(DeviceTensor{DType::F32, {1, 1, 64}, addressOf(out.data())});
  step.cache = DeviceKvLayer{DType::F32, 1, 2, 1, 16, addressOf(pool.data()),
                             addressOf(pool.data())};
  step.paged = DevicePagedRows{1, 1, 1, 1, addressOf(rows.data()), rows.data()};
  std::vector<GpuOpInfo> launchers;
  addAttentionGpuOps(launchers);
  Status run = launchers[0].run(step);
  ASSERT_FALSE(run.isOk());
  EXPECT_NE(run.message().find("slot 3 of 3"), std::string::npos) << run.message();
  for (int launches : step.launches)
    EXPECT_EQ(launches, 0);

  // Rows the engine described differently from the step's batch.
  EmulatedStep wrongRows(kernels, 5, attrs);
  wrongRows.inputs = step.inputs;
  wrongRows.outputs = step.outputs;
  wrongRows.cache = step.cache;
  wrongRows.paged = DevicePagedRows{2, 1, 1, 1, addressOf(rows.data()), rows.data()};
  run = launchers[0].run(wrongRows);
  ASSERT_FALSE(run.isOk());
  EXPECT_NE(run.message().find("engine described 2"), std::string::npos) << run.message();
}

} // namespace
} // namespace dsrt::cuda
