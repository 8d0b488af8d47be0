// The CUDA session's logic against the fake driver (FakeDriver.h): weight upload, step
// placement, the fallback's results, graph buckets and capture. Strict mode, the counters
// and the staged collectives are CudaStrictStatsTest.cpp's.
#include "FakeSessions.h"
#include "cpu/Session.h"
#include "plan/PlanArena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

namespace dsrt::cuda {
namespace {

TEST(CudaBuckets, BatchAndMaskWidth) {
  EXPECT_EQ(batchBucket(1, 8), 1);
  EXPECT_EQ(batchBucket(2, 8), 2);
  EXPECT_EQ(batchBucket(3, 8), 4);
  EXPECT_EQ(batchBucket(5, 8), 8);
  EXPECT_EQ(batchBucket(5, 6), 6);  // the limit is the last bucket
  EXPECT_EQ(maskWidthBucket(1, 2048), 64);
  EXPECT_EQ(maskWidthBucket(64, 2048), 64);
  EXPECT_EQ(maskWidthBucket(65, 2048), 128);
  EXPECT_EQ(maskWidthBucket(100, 100), 100);
  EXPECT_EQ(maskWidthBucket(5, 16), 16);
}

TEST(CudaFakeSession, DescribesTheDevice) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, noLaunchers));
  EXPECT_EQ(fake.session->deviceName(), "cuda:0 (Fake GPU)");
  EXPECT_EQ(fake.session->device(), DeviceKind::Cuda);
  SessionMemory memory = fake.session->memory();
  EXPECT_GT(memory.weights, 0u);
  EXPECT_GT(memory.arena, 0u);
  EXPECT_LE(memory.arena, fake.plan->plan().arena_bytes());
  double bandwidth = 0;
  ASSERT_TRUE(fake.session->measureCopyBandwidth(1 << 20, bandwidth).isOk());
  // The fake's events say every copy took 1 ms: 2 MiB moved per millisecond.
  EXPECT_DOUBLE_EQ(bandwidth, 2.0 * (1 << 20) / 1e-3);
}

// Small chunks, so that the two staging buffers alternate many times.
TEST(CudaFakeSession, WeightUploadCoversEveryByteOnce) {
  constexpr size_t kChunk = 4096;
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, noLaunchers, kChunk));
  DevicePtr base = fake.session->weightBase();
  uint64_t image = fake.session->memory().weights;
  ASSERT_NE(base, 0u);
  std::vector<std::pair<DevicePtr, size_t>> ranges;
  std::set<const void *> sources;
  for (const fake::HostToDevice &copy : fake::state().hostToDevice)
    if (copy.destination >= base && copy.destination < base + image) {
      ranges.push_back({copy.destination, copy.bytes});
      sources.insert(copy.source);
      EXPECT_LE(copy.bytes, kChunk);
    }
  ASSERT_GT(ranges.size(), 2u);
  EXPECT_EQ(sources.size(), 2u) << "two staging buffers, alternating";
  std::sort(ranges.begin(), ranges.end());
  DevicePtr next = base;
  for (const auto &range : ranges) {
    EXPECT_EQ(range.first, next) << "a gap or an overlap at offset " << range.first - base;
    next = range.first + range.second;
  }
  EXPECT_EQ(next, base + image);
  // Every weight arrived in its stored dtype, byte for byte.
  const PlanSection *section = nullptr;
  ASSERT_TRUE(fake.plan->section(0, section).isOk());
  const auto *tensors = fake.plan->plan().tensors();
  size_t weights = 0;
  for (size_t i = 0; i < tensors->size(); ++i) {
    const dsp::Tensor &tensor = *tensors->Get(i);
    if (tensor.kind() != dsp::TensorKind::weight)
      continue;
    TensorRef stored = section->weight(tensor.weight_index());
    DevicePtr device = fake.session->weightDevicePointer(static_cast<int>(i));
    ASSERT_NE(device, 0u);
    EXPECT_EQ(std::memcmp(reinterpret_cast<const void *>(device), stored.data, stored.bytes()),
              0)
        << tensor.name()->str();
    ++weights;
  }
  EXPECT_GT(weights, 0u);
  // The staging buffers are pinned and given back.
  EXPECT_TRUE(fake::state().pinned.empty());
}

// No launchers: every step runs on the host or through the fallback, whose copies move the
// real values through the fake's memory; the logits must be the CPU reference kernels'.
TEST(CudaFakeSession, FallbackMatchesTheCpuBackend) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, noLaunchers));
  std::vector<float> logits, reference, cpuLogits, cpuReference;
  ASSERT_TRUE(test::runForward(*fake.session, logits, reference));
  // The fallback runs the reference kernels: the CPU backend's reference session computes
  // the same sums in the same order.
  std::unique_ptr<CpuSession> cpu;
  ASSERT_TRUE(CpuSession::create(fake.plan, 0, cpu, nullptr, {/*reference=*/true}).isOk());
  ASSERT_TRUE(test::runForward(*cpu, cpuLogits, cpuReference));
  test::expectClose(logits, cpuLogits, 1e-6f);
  test::expectClose(logits, reference, 1e-4f);
  for (StepPlacement placement : fake.session->lastPlacements("forward"))
    EXPECT_TRUE(placement == StepPlacement::Host || placement == StepPlacement::Fallback);
  EXPECT_TRUE(fake::state().launches.empty());
}

TEST(CudaFakeSession, PlacesStepsOnHostDeviceOrFallback) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, tfmOpsWithKernelLmHead));
  std::vector<float> logits, reference;
  ASSERT_TRUE(test::runForward(*fake.session, logits, reference));
  const dsp::Program &forward = *fake.session->program("forward");
  const std::vector<StepPlacement> &placements = fake.session->lastPlacements("forward");
  ASSERT_EQ(placements.size(), forward.steps()->size());
  size_t device = 0, host = 0, fallback = 0;
  for (size_t i = 0; i < placements.size(); ++i) {
    const dsp::Step &step = *forward.steps()->Get(i);
    std::string op = step.op()->str();
    bool hasKernels = step.kernels() && step.kernels()->size() > 0;
    SCOPED_TRACE("step " + std::to_string(i) + " " + op);
    if (op == "Shape")
      EXPECT_EQ(placements[i], StepPlacement::Host);
    else if (op == "tfm.lm_head")  // its launcher needs kernel 0
      EXPECT_EQ(placements[i], hasKernels ? StepPlacement::Device : StepPlacement::Fallback);
    else if (op.rfind("tfm.", 0) == 0)
      EXPECT_EQ(placements[i], StepPlacement::Device);
    else
      EXPECT_NE(placements[i], StepPlacement::Device);
    device += placements[i] == StepPlacement::Device;
    host += placements[i] == StepPlacement::Host;
    fallback += placements[i] == StepPlacement::Fallback;
  }
  EXPECT_GT(device, 0u);
  EXPECT_EQ(device + host + fallback, placements.size());
  EXPECT_GT(launcherCalls, 0);
}

// The session's own rule: a step whose op needs kernels and has none in the plan is never
// handed to its launcher.
TEST(CudaFakeSession, StepsWithoutKernelsFallBack) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, everyOp, size_t(64) << 20, true, false));
  std::vector<float> logits, reference;
  ASSERT_TRUE(test::runForward(*fake.session, logits, reference));
  test::expectClose(logits, reference, 1e-4f);
  const dsp::Program &forward = *fake.session->program("forward");
  const std::vector<StepPlacement> &placements = fake.session->lastPlacements("forward");
  int withKernels = 0;
  for (size_t i = 0; i < placements.size(); ++i) {
    const dsp::Step &step = *forward.steps()->Get(i);
    bool hasKernels = step.kernels() && step.kernels()->size() > 0;
    withKernels += hasKernels && placements[i] != StepPlacement::Host;
    if (!hasKernels)
      EXPECT_NE(placements[i], StepPlacement::Device) << "step " << i;
  }
  EXPECT_EQ(launcherCalls, withKernels);
}


// Prefill and decode through the fallback: the attention reads and writes the device KV
// cache through the host mirror; every step's logits must be the CPU backend's.
// A session that generates allocates the arena of prefill and decode, not `forward`'s
// (every position's logits); running `forward` grows it, and every program's results stay
// right in the moved arena. Llama at 64 tokens, where forward needs more than prefill.
TEST(CudaFakeSession, TheArenaGrowsToTheProgramsRun) {
  fake::reset();
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openLlamaLongPlan(plan));
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.findOp = noLaunchers;
  std::unique_ptr<CudaSession> session;
  Status created = CudaSession::create(plan, 0, options, session);
  ASSERT_TRUE(created.isOk()) << created.message();
  const dsp::Plan &header = plan->plan();
  uint64_t generation = 0, forward = 0;
  for (uint32_t p = 0; p < header.programs()->size(); ++p) {
    uint64_t use = programArenaUse(header, p);
    if (header.programs()->Get(p)->name()->str() == "forward")
      forward = use;
    else
      generation = std::max(generation, use);
  }
  ASSERT_GT(forward, generation) << "forward's logits should make it the largest program";
  EXPECT_EQ(session->memory().arena, generation);

  constexpr int64_t kTokens = 5;
  DecodeInputs inputs;
  ASSERT_TRUE(bind(*session, "prefill", 0, kTokens, inputs));
  ASSERT_TRUE(session->run("prefill").isOk());
  EXPECT_EQ(session->memory().arena, generation);
  std::vector<float> prefill = logitsOf(*session, "prefill");
  ASSERT_FALSE(prefill.empty());

  // forward, with empty pasts: its last position's logits are prefill's.
  const dsp::Program *program = session->program("forward");
  std::vector<float> nothing(1);
  for (size_t i = 0; i < program->inputs()->size(); ++i) {
    const dsp::Tensor &tensor = *header.tensors()->Get(program->inputs()->Get(i));
    std::string name = tensor.name()->str();
    TensorRef value{DType::I64, {1, kTokens}, inputs.ids.data()};
    if (name == "attention_mask")
      value = {DType::I64, {1, kTokens}, inputs.mask.data()};
    else if (name == "position_ids")
      value = {DType::I64, {1, kTokens}, inputs.positions.data()};
    else if (name != "input_ids")  // a past key or value: [1, kv_heads, 0, head_dim]
      value = {DType::F32,
               {1, tensor.shape()->Get(1)->size(), 0, tensor.shape()->Get(3)->size()},
               nothing.data()};
    Status bound = session->setInput("forward", i, value);
    ASSERT_TRUE(bound.isOk()) << name << ": " << bound.message();
  }
  Status ran = session->run("forward");
  ASSERT_TRUE(ran.isOk()) << ran.message();
  EXPECT_EQ(session->memory().arena, forward);
  std::vector<float> all = logitsOf(*session, "forward");
  ASSERT_EQ(all.size(), kTokens * prefill.size());
  std::vector<float> last(all.end() - prefill.size(), all.end());
  test::expectClose(last, prefill, 1e-5f);

  // prefill again, in the moved arena: the same logits, and the arena stays.
  ASSERT_TRUE(bind(*session, "prefill", 0, kTokens, inputs));
  ASSERT_TRUE(session->run("prefill").isOk());
  test::expectClose(logitsOf(*session, "prefill"), prefill, 0.0f);
  EXPECT_EQ(session->memory().arena, forward);
}

TEST(CudaFakeSession, SessionCacheThroughTheFallbackMatchesTheCpu) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, noLaunchers));
  if (!fake.session->program("decode") || !fake.session->program("prefill"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  // The fallback runs the reference kernels: the CPU backend's reference session computes
  // the same sums in the same order.
  std::unique_ptr<CpuSession> cpu;
  ASSERT_TRUE(CpuSession::create(fake.plan, 0, cpu, nullptr, {/*reference=*/true}).isOk());
  DecodeInputs gpuInputs, cpuInputs;
  ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, gpuInputs));
  ASSERT_TRUE(bind(*cpu, "prefill", 0, 3, cpuInputs));
  ASSERT_TRUE(fake.session->run("prefill").isOk());
  ASSERT_TRUE(cpu->run("prefill").isOk());
  test::expectClose(logitsOf(*fake.session, "prefill"), logitsOf(*cpu, "prefill"), 1e-6f);
  for (int64_t past = 3; past < 6; ++past) {
    SCOPED_TRACE("decode after " + std::to_string(past) + " tokens");
    ASSERT_TRUE(bind(*fake.session, "decode", past, 1, gpuInputs));
    ASSERT_TRUE(bind(*cpu, "decode", past, 1, cpuInputs));
    Status status = fake.session->run("decode");
    ASSERT_TRUE(status.isOk()) << status.message();
    ASSERT_TRUE(cpu->run("decode").isOk());
    std::vector<float> gpu = logitsOf(*fake.session, "decode");
    ASSERT_FALSE(gpu.empty());
    test::expectClose(gpu, logitsOf(*cpu, "decode"), 1e-6f);
  }
  EXPECT_EQ(fake::state().captures, 0);  // a program with fallback steps is never captured
}

TEST(CudaFakeSession, DecodeIsCapturedPerBucketAndReplayed) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, everyOp));
  if (!fake.session->program("decode") || !fake.session->program("prefill"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  int64_t maxSeq = fake.plan->plan().limits()->max_seq_len();
  ASSERT_GE(maxSeq, 8);
  DecodeInputs inputs;
  ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
  ASSERT_TRUE(fake.session->run("prefill").isOk());
  // First decode: eager, and it shows every step can be captured.
  ASSERT_TRUE(bind(*fake.session, "decode", 3, 1, inputs));
  Status status = fake.session->run("decode");
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(fake.session->graphCount(), 0u);
  for (StepPlacement placement : fake.session->lastPlacements("decode"))
    EXPECT_TRUE(placement == StepPlacement::Host || placement == StepPlacement::Device);
  // Second: an eager run of the padded bucket, then the capture.
  ASSERT_TRUE(bind(*fake.session, "decode", 4, 1, inputs));
  status = fake.session->run("decode");
  ASSERT_TRUE(status.isOk()) << status.message();
  int64_t width = maskWidthBucket(5, maxSeq);
  EXPECT_TRUE(fake.session->hasGraph("decode", 1, width));
  EXPECT_EQ(fake::state().captures, 1);
  EXPECT_EQ(fake::state().instantiations, 1);
  EXPECT_TRUE(fake::state().captureViolations.empty())
      << fake::state().captureViolations.front();
  // Third, same bucket: a replay, after the padded inputs and the lengths are copied in.
  size_t launchesBefore = fake::state().launches.size();
  size_t copiesBefore = fake::state().hostToDevice.size();
  ASSERT_TRUE(bind(*fake.session, "decode", 5, 1, inputs));
  status = fake.session->run("decode");
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(fake::state().graphLaunches, 1);
  EXPECT_EQ(fake.session->graphReplays(), 1u);
  EXPECT_EQ(fake::state().captures, 1);
  EXPECT_EQ(fake::state().launches.size(), launchesBefore) << "a replay launches no kernel";
  bool sawMask = false, sawLengths = false;
  for (size_t c = copiesBefore; c < fake::state().hostToDevice.size(); ++c) {
    const fake::HostToDevice &copy = fake::state().hostToDevice[c];
    if (copy.bytes == static_cast<size_t>(width) * sizeof(int64_t)) {
      // The mask [1, 6] padded on the left with zeros to the bucket's width.
      std::vector<int64_t> mask(width);
      std::memcpy(mask.data(), copy.data.data(), copy.bytes);
      for (int64_t c2 = 0; c2 < width; ++c2)
        EXPECT_EQ(mask[c2], c2 < width - 6 ? 0 : 1) << "column " << c2;
      sawMask = true;
    }
    if (copy.bytes == 3 * sizeof(int32_t)) {
      int32_t lengths[3];
      std::memcpy(lengths, copy.data.data(), sizeof lengths);
      EXPECT_EQ(lengths[kPast], 5);
      EXPECT_EQ(lengths[kTotal], 6);
      EXPECT_EQ(lengths[kMaskWidth], width);
      sawLengths = true;
    }
  }
  EXPECT_TRUE(sawMask);
  EXPECT_TRUE(sawLengths);
  TensorRef logits;
  ASSERT_TRUE(fake.session->output("decode", 0, logits).isOk());
  EXPECT_EQ(logits.shape[0], 1);
}

TEST(CudaFakeSession, ProgramWithAFallbackStepIsNotCaptured) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, allButAttention));
  if (!fake.session->program("decode") || !fake.session->program("prefill"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  DecodeInputs inputs;
  ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
  ASSERT_TRUE(fake.session->run("prefill").isOk());
  testing::internal::CaptureStderr();
  for (int64_t past = 3; past < 6; ++past) {
    ASSERT_TRUE(bind(*fake.session, "decode", past, 1, inputs));
    Status status = fake.session->run("decode");
    ASSERT_TRUE(status.isOk()) << status.message();
  }
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(fake::state().captures, 0);
  EXPECT_EQ(fake.session->graphCount(), 0u);
  EXPECT_NE(said.find("runs without CUDA graphs"), std::string::npos) << said;
  EXPECT_NE(said.find("tfm.attention"), std::string::npos) << said;
  bool fellBack = false;
  for (StepPlacement placement : fake.session->lastPlacements("decode"))
    fellBack |= placement == StepPlacement::Fallback;
  EXPECT_TRUE(fellBack);
}

TEST(CudaFakeSession, GraphsCanBeTurnedOff) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, everyOp, size_t(64) << 20, /*graphs=*/false));
  if (!fake.session->program("decode") || !fake.session->program("prefill"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  DecodeInputs inputs;
  ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
  ASSERT_TRUE(fake.session->run("prefill").isOk());
  for (int64_t past = 3; past < 6; ++past) {
    ASSERT_TRUE(bind(*fake.session, "decode", past, 1, inputs));
    ASSERT_TRUE(fake.session->run("decode").isOk());
  }
  EXPECT_EQ(fake::state().captures, 0);
}

} // namespace
} // namespace dsrt::cuda
