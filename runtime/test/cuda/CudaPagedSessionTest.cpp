// The CUDA session's paged KV cache (CudaPaged.cpp) against the fake driver: the block pool
// is allocated on the device, each step's rows reach it in one copy, the serving plan's
// step program runs its attention on the paged kernels (strict: nothing falls back), and
// bad rows are refused by name before anything launches. The kernels' arithmetic is
// PagedAttentionEmulationTest.cpp's.
#include "FakeDriver.h"
#include "TestPlans.h"
#include "cpu/Session.h"
#include "cuda/CudaSession.h"
#include "session/PlanChecks.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace dsrt::cuda {
namespace {

constexpr int64_t kBlockSize = 4, kBlocks = 6;

struct PagedFake {
  std::shared_ptr<PlanFile> plan;
  std::unique_ptr<CudaSession> session;
};

void createPaged(PagedFake &out) {
  fake::reset();
  ASSERT_TRUE(test::openServingPlan(out.plan));
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.strict = true;  // a fallback step fails the run
  options.kvBlockSize = kBlockSize;
  options.kvBlocks = kBlocks;
  options.onlyPrograms = {"step"};
  Status status = CudaSession::create(out.plan, 0, options, out.session);
  ASSERT_TRUE(status.isOk()) << status.message();
}

// Binds `program`'s inputs for `rows` (one token each; every row sampled where the program
// takes logits_rows), as the engine does.
void bindRows(Session &session, const char *program, const std::vector<ops::KvPagedRow> &rows) {
  const dsp::Program *step = session.program(program);
  ASSERT_NE(step, nullptr) << "the plan has no " << program << " program";
  const dsp::ModelInfo &model = *session.plan().plan().model();
  const auto &tensors = *session.plan().plan().tensors();
  const int64_t B = static_cast<int64_t>(rows.size());
  std::vector<int64_t> ids, positions, ones(B, 1), sampled;
  for (int64_t b = 0; b < B; ++b) {
    ids.push_back(7 + 3 * b);
    positions.push_back(rows[b].position);
    sampled.push_back(b);
  }
  for (size_t i = 0; i < step->inputs()->size(); ++i) {
    const std::string name = tensors.Get(step->inputs()->Get(i))->name()->str();
    const std::vector<int64_t> *values = name == model.input_ids()->str()      ? &ids
                                         : name == model.position_ids()->str() ? &positions
                                         : name == model.attention_mask()->str() ? &ones
                                         : name == "logits_rows"               ? &sampled
                                                                               : nullptr;
    ASSERT_NE(values, nullptr) << "step input " << name;
    Shape shape = name == "logits_rows" ? Shape{B} : Shape{B, 1};
    TensorRef value{DType::I64, shape, const_cast<int64_t *>(values->data())};
    Status status = session.setInput(program, i, value);
    ASSERT_TRUE(status.isOk()) << name << ": " << status.message();
  }
}

using test::launchedKernels;

TEST(CudaPagedSession, ThePoolIsBlocksOnTheDevice) {
  PagedFake f;
  ASSERT_NO_FATAL_FAILURE(createPaged(f));
  std::vector<KvLayerShape> layers;
  ASSERT_TRUE(kvCacheLayout(*f.plan, 0, layers).isOk());
  ASSERT_FALSE(layers.empty());
  uint64_t expected = 0;
  for (const KvLayerShape &layer : layers)
    expected += 2 * static_cast<uint64_t>(kBlocks * layer.kvHeads * kBlockSize * layer.headDim) *
                dtypeSize(layer.dtype);
  EXPECT_EQ(f.session->memory().kvCache, expected);
  // Its arena is the step's: other programs are refused, by name.
  Status prefill = f.session->run("prefill");
  ASSERT_FALSE(prefill.isOk());
  EXPECT_NE(prefill.message().find("not 'prefill'"), std::string::npos) << prefill.message();
}

TEST(CudaPagedSession, StepRunsThePagedKernels) {
  PagedFake f;
  ASSERT_NO_FATAL_FAILURE(createPaged(f));
  // A chunk of three rows of one sequence (blocks 3, 1) and a decode token of another.
  const std::vector<int32_t> first{3, 1}, second{0};
  std::vector<ops::KvPagedRow> rows{{first.data(), 2, 4}, {first.data(), 2, 5},
                                    {first.data(), 2, 6}, {second.data(), 1, 2}};
  const size_t uploadsBefore = fake::state().hostToDevice.size();
  ASSERT_TRUE(f.session->setPagedRows(rows).isOk());
  // One copy: each row's position, then its table of max_seq_len / block size entries; then
  // the prompt chunks, [first row, rows] each: rows 0-2.
  ASSERT_EQ(fake::state().hostToDevice.size(), uploadsBefore + 1);
  const int64_t width = (f.plan->plan().limits()->max_seq_len() + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> table(rows.size() * (width + 1), -1);
  for (size_t r = 0; r < rows.size(); ++r) {
    table[r * (width + 1)] = static_cast<int32_t>(rows[r].position);
    for (int64_t i = 0; i < rows[r].blockCount; ++i)
      table[r * (width + 1) + 1 + i] = rows[r].blocks[i];
  }
  table.insert(table.end(), {0, 3});
  const fake::HostToDevice &copy = fake::state().hostToDevice.back();
  ASSERT_EQ(copy.bytes, table.size() * sizeof(int32_t));
  EXPECT_EQ(std::memcmp(copy.data.data(), table.data(), copy.bytes), 0);

  bindRows(*f.session, "step", rows);
  fake::state().launches.clear();
  Status run = f.session->run("step");
  ASSERT_TRUE(run.isOk()) << run.message();
  EXPECT_EQ(f.session->stats().fallbackSteps, 0u);
  // Every attention ran attention_rotary (PAGED 2: it writes the queries too), the paged
  // prefill for the chunk and the paged decode kernel for the decode row, and no dense one.
  std::vector<KvLayerShape> layers;
  ASSERT_TRUE(kvCacheLayout(*f.plan, 0, layers).isOk());
  size_t pagedWrites = 0, pagedDecodes = 0, pagedPrefills = 0;
  for (const std::string &name : launchedKernels(*f.plan)) {
    const bool paged = name.find("_PAGED1") != std::string::npos;
    if (name.rfind("attention_rotary", 0) == 0) {
      const bool withQueries = name.find("_PAGED2") != std::string::npos;
      EXPECT_TRUE(withQueries) << name;
      pagedWrites += withQueries;
    } else if (name.rfind("attention_decode", 0) == 0) {
      EXPECT_TRUE(paged) << name;
      pagedDecodes += paged;
    } else if (name.rfind("attention_prefill", 0) == 0) {
      EXPECT_TRUE(paged) << name;
      pagedPrefills += paged;
    } else {
      EXPECT_EQ(name.rfind("attention_", 0), std::string::npos) << name;
    }
  }
  EXPECT_EQ(pagedWrites, layers.size());
  EXPECT_EQ(pagedDecodes, layers.size());
  EXPECT_EQ(pagedPrefills, layers.size());
}

// DSRT_CUDA_LAUNCH_COUNTS=1 (what test/gpu/engine-paged-prefill.test reads on a GPU): the
// session prints its eager launches per kernel when it ends, the paged prefill's among them
// for a step with a prompt chunk.
TEST(CudaPagedSession, LaunchCountsNameThePagedPrefill) {
  ASSERT_EQ(setenv("DSRT_CUDA_LAUNCH_COUNTS", "1", 1), 0);
  PagedFake f;
  createPaged(f);
  unsetenv("DSRT_CUDA_LAUNCH_COUNTS");
  ASSERT_NE(f.session, nullptr);
  const std::vector<int32_t> first{3, 1}, second{0};
  std::vector<ops::KvPagedRow> rows{{first.data(), 2, 4}, {first.data(), 2, 5},
                                    {second.data(), 1, 2}};
  ASSERT_TRUE(f.session->setPagedRows(rows).isOk());
  bindRows(*f.session, "step", rows);
  Status run = f.session->run("step");
  ASSERT_TRUE(run.isOk()) << run.message();
  std::vector<KvLayerShape> layers;
  ASSERT_TRUE(kvCacheLayout(*f.plan, 0, layers).isOk());
  testing::internal::CaptureStderr();
  f.session.reset();
  const std::string printed = testing::internal::GetCapturedStderr();
  bool prefill = false, decode = false;
  const std::string each = "dsrt: " + std::to_string(layers.size()) + " launches of ";
  for (size_t at = 0, end; at < printed.size(); at = end + 1) {
    end = printed.find('\n', at);
    if (end == std::string::npos)
      end = printed.size();
    const std::string line = printed.substr(at, end - at);
    if (line.rfind(each, 0) != 0)
      continue;
    const std::string kernel = line.substr(each.size());
    const bool paged = kernel.size() > 6 && kernel.compare(kernel.size() - 6, 6, "PAGED1") == 0;
    prefill |= paged && kernel.rfind("attention_prefill", 0) == 0;
    decode |= paged && kernel.rfind("attention_decode", 0) == 0;
  }
  EXPECT_TRUE(prefill) << printed;
  EXPECT_TRUE(decode) << printed;
}

// Decode-only steps (every row sampled) are captured once per bucket of rows and replayed,
// their padding rows copies of row 0 (rows, table and all); a step with a prompt chunk,
// which samples some rows only, runs eagerly. Strict: nothing falls back, and the step's
// output has the caller's rows.
TEST(CudaPagedSession, DecodeOnlyStepsAreCapturedPerBucket) {
  PagedFake f;
  ASSERT_NO_FATAL_FAILURE(createPaged(f));
  const std::vector<int32_t> a{0, 3}, b{1}, c{2, 4};
  auto decodeStep = [&](int64_t advance) {
    return std::vector<ops::KvPagedRow>{
        {a.data(), 2, 4 + advance}, {b.data(), 1, 1 + advance}, {c.data(), 2, 5 + advance}};
  };
  const int64_t width = f.plan->plan().limits()->max_seq_len() / kBlockSize + 1;
  for (int64_t advance = 0; advance < 3; ++advance) {
    const std::vector<ops::KvPagedRow> rows = decodeStep(advance);
    ASSERT_TRUE(f.session->setPagedRows(rows).isOk());
    bindRows(*f.session, "step", rows);
    Status run = f.session->run("step");
    ASSERT_TRUE(run.isOk()) << run.message();
    TensorRef logits;
    ASSERT_TRUE(f.session->output("step", 0, logits).isOk());
    EXPECT_EQ(logits.shape[0], 3);
  }
  // The first run decides, the second captures the bucket of 4 rows, the third replays it.
  EXPECT_EQ(f.session->stats().graphCaptures, 1u);
  EXPECT_EQ(f.session->stats().graphReplays, 1u);
  EXPECT_TRUE(f.session->hasGraph(
      "step", 4, maskWidthBucket(1, f.plan->plan().limits()->max_seq_len())));
  // The last rows uploaded: 4, the padding row a copy of row 0.
  const fake::HostToDevice *rowsCopy = nullptr;
  for (const fake::HostToDevice &copy : fake::state().hostToDevice)
    if (copy.bytes == 4 * static_cast<size_t>(width) * sizeof(int32_t))
      rowsCopy = &copy;
  ASSERT_NE(rowsCopy, nullptr);
  const int32_t *uploaded = reinterpret_cast<const int32_t *>(rowsCopy->data.data());
  EXPECT_EQ(uploaded[0], 6);
  EXPECT_EQ(std::memcmp(uploaded, uploaded + 3 * width, width * sizeof(int32_t)), 0);

  // A prompt chunk and a decode row, the chunk's last row and the decode row sampled.
  const std::vector<ops::KvPagedRow> mixed{{a.data(), 2, 7}, {b.data(), 1, 0},
                                           {b.data(), 1, 1}, {b.data(), 1, 2}};
  ASSERT_TRUE(f.session->setPagedRows(mixed).isOk());
  bindRows(*f.session, "step", mixed);
  std::vector<int64_t> sampled{0, 3};
  const dsp::Program *step = f.session->program("step");
  for (size_t i = 0; i < step->inputs()->size(); ++i)
    if (f.plan->plan().tensors()->Get(step->inputs()->Get(i))->name()->str() == "logits_rows")
      ASSERT_TRUE(f.session->setInput("step", i, {DType::I64, {2}, sampled.data()}).isOk());
  Status run = f.session->run("step");
  ASSERT_TRUE(run.isOk()) << run.message();
  EXPECT_EQ(f.session->stats().graphCaptures, 1u);
  EXPECT_EQ(f.session->stats().graphReplays, 1u);
}

TEST(CudaPagedSession, BadRowsAreRefusedByName) {
  PagedFake f;
  ASSERT_NO_FATAL_FAILURE(createPaged(f));
  const std::vector<int32_t> good{2, 5}, outOfPool{2, kBlocks}, negative{-1};
  struct Case {
    std::vector<ops::KvPagedRow> rows;
    const char *message;
  };
  const int64_t positions = f.plan->plan().limits()->max_seq_len();
  const Case cases[] = {
      {{{good.data(), 2, 1}, {outOfPool.data(), 2, 5}}, "row 1 names block 6 of 6"},
      {{{negative.data(), 1, 0}}, "row 0 names block -1 of 6"},
      {{{good.data(), 1, 5}}, "row 0 at position 5 has 1 blocks of 4; it needs 2"},
      {{{good.data(), 2, -1}}, "row 0 is at position -1"},
      {{{good.data(), 2, positions}}, "outside the plan's"},
  };
  for (const Case &c : cases) {
    Status status = f.session->setPagedRows(c.rows);
    ASSERT_FALSE(status.isOk()) << c.message;
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status.message();
  }
}

// A plan without the paged kernels (here the CPU-only GPT-2 plan: every step through the
// host fallback) runs the CPU paged attention over the downloaded pool: its logits equal
// the CPU paged session's, within 1e-4 relative (the fallback's reference kernels against
// the fast ones), over a step of a prompt chunk and a new sequence, then a step of decode
// rows that read what the first wrote.
TEST(CudaPagedSession, WithoutPagedKernelsTheFallbackPagesOnTheHost) {
  fake::reset();
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openGpt2Plan(plan, /*cpuOnly=*/true));
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.kvBlockSize = kBlockSize;
  options.kvBlocks = kBlocks;
  options.onlyPrograms = {"decode"};
  std::unique_ptr<CudaSession> gpu;
  Status created = CudaSession::create(plan, 0, options, gpu);
  ASSERT_TRUE(created.isOk()) << created.message();
  CpuSessionOptions cpuOptions;
  cpuOptions.kvBlockSize = kBlockSize;
  cpuOptions.kvBlocks = kBlocks;
  cpuOptions.onlyPrograms = {"decode"};
  std::unique_ptr<CpuSession> cpu;
  created = CpuSession::create(plan, 0, cpu, nullptr, cpuOptions);
  ASSERT_TRUE(created.isOk()) << created.message();

  const std::vector<int32_t> first{4, 1}, second{3};
  const std::vector<std::vector<ops::KvPagedRow>> steps{
      {{first.data(), 1, 0}, {first.data(), 1, 1}, {first.data(), 1, 2}, {second.data(), 1, 0}},
      {{first.data(), 2, 4}, {second.data(), 1, 1}}};
  // Step 2's first row is at position 4 of a sequence whose step 1 wrote 0-2: position 3
  // stays as the pool was (zeros on both sides), which the comparison covers too.
  for (const std::vector<ops::KvPagedRow> &rows : steps) {
    std::vector<std::vector<float>> logits;
    for (Session *session : {static_cast<Session *>(gpu.get()), static_cast<Session *>(cpu.get())}) {
      ASSERT_TRUE(session->setPagedRows(rows).isOk());
      bindRows(*session, "decode", rows);
      Status run = session->run("decode");
      ASSERT_TRUE(run.isOk()) << session->deviceName() << ": " << run.message();
      TensorRef out;
      ASSERT_TRUE(session->output("decode", 0, out).isOk());
      const float *values = static_cast<const float *>(out.data);
      logits.emplace_back(values, values + out.elements());
    }
    ASSERT_FALSE(logits[0].empty());
    test::expectClose(logits[0], logits[1], 1e-4f);
  }
  EXPECT_GT(gpu->stats().fallbackSteps, 0u);
}

// PagedKvOptions::memoryFraction: the pool is what the fraction of the GPU's free memory
// holds, read once the weights and the arena are on the device, less cuBLASLt's workspace.
TEST(CudaPagedSession, AMemoryFractionSizesThePoolFromWhatTheWeightsLeave) {
  std::shared_ptr<PlanFile> plan;
  fake::reset();
  ASSERT_TRUE(test::openServingPlan(plan));
  const uint64_t perBlock = test::pagedBytesPerBlock(*plan, kBlockSize);
  auto create = [&](double fraction, int64_t most, std::unique_ptr<CudaSession> &session) {
    fake::reset();
    fake::state().deviceBytes = size_t(256) << 20;
    CudaSessionOptions options;
    options.driver = &fake::driver();
    options.kvBlockSize = kBlockSize;
    options.kvBlocks = most;
    options.kvMemoryFraction = fraction;
    options.onlyPrograms = {"step"};
    return CudaSession::create(plan, 0, options, session);
  };
  std::unique_ptr<CudaSession> session;
  Status status = create(0.05, int64_t(1) << 30, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(fake::state().freeAnswers.size(), 1u);
  const size_t free = fake::state().freeAnswers[0];
  const SessionMemory memory = session->memory();
  EXPECT_LE(free, fake::state().deviceBytes - memory.weights - memory.arena)
      << "the free memory was read before the weights and the arena were placed";
  const auto expected =
      static_cast<int64_t>(static_cast<uint64_t>(0.05 * double(free - (size_t(32) << 20))) /
                           perBlock);
  ASSERT_GT(expected, 1);
  EXPECT_EQ(session->pagedKvBlocks(), expected);
  EXPECT_EQ(memory.kvCache, static_cast<uint64_t>(expected) * perBlock);

  // The most the engine asks for bounds it.
  status = create(1.0, 3, session);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(session->pagedKvBlocks(), 3);

  // Less than one block is refused, with the numbers.
  status = create(1e-12, int64_t(1) << 30, session);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("less than one block"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("bytes free on cuda:0"), std::string::npos)
      << status.message();
}

// A TP plan's ranks on one GPU share its memory: rank 0, which reads it first, takes its
// fraction of half of it, leaving rank 1 room for its weights.
TEST(CudaPagedSession, RanksOnOneGpuShareItsMemory) {
  const char *path = std::getenv("DSRT_TEST_TP2_PLAN");
  std::unique_ptr<PlanFile> opened;
  ASSERT_TRUE(PlanFile::open(path && *path ? path : DSRT_TEST_TP2_PLAN_DEFAULT, opened).isOk());
  std::shared_ptr<PlanFile> plan = std::move(opened);
  ASSERT_EQ(plan->rankCount(), 2);
  const uint64_t perBlock = test::pagedBytesPerBlock(*plan, kBlockSize);
  fake::reset();
  ASSERT_EQ(fake::state().deviceCount, 1);
  fake::state().deviceBytes = size_t(256) << 20;
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.kvBlockSize = kBlockSize;
  options.kvBlocks = int64_t(1) << 30;
  options.kvMemoryFraction = 0.1;
  options.onlyPrograms = {"decode"};
  std::unique_ptr<CudaSession> rank0;
  Status status = CudaSession::create(plan, 0, options, rank0);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(fake::state().freeAnswers.size(), 1u);
  const size_t free = fake::state().freeAnswers[0] - (size_t(32) << 20);
  const auto expected =
      static_cast<int64_t>(static_cast<uint64_t>(0.1 * static_cast<double>(free / 2)) / perBlock);
  ASSERT_GT(expected, 1);
  EXPECT_EQ(rank0->pagedKvBlocks(), expected);
}

TEST(CudaPagedSession, ADenseSessionHasNoRows) {
  PagedFake f;
  fake::reset();
  ASSERT_TRUE(test::openServingPlan(f.plan));
  CudaSessionOptions options;
  options.driver = &fake::driver();
  ASSERT_TRUE(CudaSession::create(f.plan, 0, options, f.session).isOk());
  const std::vector<int32_t> blocks{0};
  Status status = f.session->setPagedRows({{blocks.data(), 1, 0}});
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("without a paged KV cache"), std::string::npos)
      << status.message();
}

} // namespace
} // namespace dsrt::cuda
