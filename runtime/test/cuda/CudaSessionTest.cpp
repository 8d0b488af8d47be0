// The CUDA session's logic against the fake driver (FakeDriver.h): weight upload, step
// placement, the fallback's results, graph buckets and capture, the staged collectives.
#include "FakeDriver.h"
#include "TestPlans.h"
#include "comm/InProcessGroup.h"
#include "cpu/Session.h"
#include "cuda/CudaSession.h"
#include "cuda/StagedCollectives.h"
#include "plan/PlanArena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

namespace dsrt::cuda {
namespace {

// Fake launchers: they compute nothing, but check what the session hands them.
int launcherCalls = 0;
Status checkingLauncher(StepContext &context) {
  ++launcherCalls;
  for (size_t i = 0; i < context.inputCount(); ++i)
    if (const DeviceTensor *input = context.input(i))
      if (!input->data || input->elements() < 0)
        return context.error("input ", i, " is not on the device");
  for (size_t o = 0; o < context.outputCount(); ++o)
    if (!context.output(o).data)
      return context.error("output ", o, " is not placed");
  // Launch the step's kernels, as a real launcher would (none in a CPU-only plan).
  for (size_t slot = 0; slot < context.kernelCount(); ++slot)
    DSRT_RETURN_IF_ERROR(context.launch(slot, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, nullptr));
  return Status::ok();
}
// Needs the plan's kernel 0; a plan without one makes the step a fallback step.
Status kernelLauncher(StepContext &context) {
  ++launcherCalls;
  return context.launch(0, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, nullptr);
}

GpuOpFn noLaunchers(std::string_view) { return nullptr; }
GpuOpFn everyOp(std::string_view) { return checkingLauncher; }
GpuOpFn allButAttention(std::string_view op) {
  return op == "tfm.attention" ? nullptr : checkingLauncher;
}
GpuOpFn tfmOpsWithKernelLmHead(std::string_view op) {
  if (op == "tfm.lm_head")
    return kernelLauncher;
  return op.rfind("tfm.", 0) == 0 ? checkingLauncher : nullptr;
}

struct FakeSession {
  std::shared_ptr<PlanFile> plan;
  std::unique_ptr<CudaSession> session;
};

bool anyOp(std::string_view) { return true; }

// `kernelFree`: the fake launchers run without the plan's kernels (the fixture plan may
// have none); false keeps the session's rule (steps without kernels fall back).
void createFake(FakeSession &out, GpuOpFn (*findOp)(std::string_view),
                size_t chunkBytes = size_t(64) << 20, bool graphs = true,
                bool kernelFree = true) {
  fake::reset();
  launcherCalls = 0;
  // Without the test's permission to launch kernel-less steps, the plan must have none.
  ASSERT_TRUE(test::openGpt2Plan(out.plan, /*cpuOnly=*/!kernelFree));
  CudaSessionOptions options;
  options.driver = &fake::driver();
  options.findOp = findOp;
  options.uploadChunkBytes = chunkBytes;
  options.graphs = graphs;
  if (kernelFree)
    options.launchesWithoutKernels = anyOp;
  Status status = CudaSession::create(out.plan, 0, options, out.session);
  ASSERT_TRUE(status.isOk()) << status.message();
}

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

struct DecodeInputs {
  std::vector<int64_t> ids, mask, positions;
};

// Binds input_ids, attention_mask and position_ids (when the program has it) of a batch
// of one: `tokens` new tokens after `past` cached ones.
bool bind(Session &session, const char *program, int64_t past, int64_t tokens,
          DecodeInputs &storage) {
  const dsp::Program *found = session.program(program);
  const auto *tensors = session.plan().plan().tensors();
  storage.ids.assign(tokens, 7);
  storage.mask.assign(past + tokens, 1);
  storage.positions.resize(tokens);
  for (int64_t t = 0; t < tokens; ++t)
    storage.positions[t] = past + t;
  for (size_t i = 0; i < found->inputs()->size(); ++i) {
    std::string name = tensors->Get(found->inputs()->Get(i))->name()->str();
    TensorRef value{DType::I64, {1, tokens}, storage.ids.data()};
    if (name == "attention_mask")
      value = {DType::I64, {1, past + tokens}, storage.mask.data()};
    else if (name == "position_ids")
      value = {DType::I64, {1, tokens}, storage.positions.data()};
    else if (name != "input_ids")
      return false;
    if (!session.setInput(program, i, value).isOk())
      return false;
  }
  return true;
}

std::vector<float> logitsOf(Session &session, const char *program) {
  TensorRef out;
  Status status = session.output(program, 0, out);
  EXPECT_TRUE(status.isOk()) << status.message();
  if (!status.isOk() || out.dtype != DType::F32)
    return {};
  return std::vector<float>(out.as<float>(), out.as<float>() + out.elements());
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

// ---- Strict device mode and the session's counters (Session::setStrict, stats()). ----

void createStrictFake(FakeSession &out, GpuOpFn (*findOp)(std::string_view), bool strict,
                      bool graphs = true) {
  ASSERT_NO_FATAL_FAILURE(createFake(out, findOp, size_t(64) << 20, graphs));
  out.session->setStrict(strict);
}

size_t eagerFakeLaunches() {
  size_t count = 0;
  for (const fake::Launch &launch : fake::state().launches)
    count += !launch.captured;
  return count;
}

// The weights are the only upload of a session's creation: bytes uploaded is the weight
// image, byte for byte, and nothing has run yet.
TEST(CudaStrictAndStats, CreationUploadsTheWeightsOnly) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, everyOp));
  SessionStats stats = fake.session->stats();
  EXPECT_GT(stats.bytesUploaded, 0u);
  EXPECT_EQ(stats.bytesUploaded, fake.session->memory().weights);
  size_t faked = 0;
  for (const fake::HostToDevice &copy : fake::state().hostToDevice)
    faked += copy.bytes;
  EXPECT_EQ(stats.bytesUploaded, faked);
  EXPECT_EQ(stats.bytesDownloaded, 0u);
  EXPECT_EQ(stats.kernelLaunches, 0u);
  EXPECT_EQ(stats.fallbackSteps, 0u);
  EXPECT_EQ(stats.graphCaptures, 0u);
  EXPECT_EQ(stats.graphReplays, 0u);
}

// allButAttention: tfm.attention has no launcher. Without strict mode the step falls back
// and is counted; in strict mode the run fails, naming that step (index and op).
TEST(CudaStrictAndStats, AFallbackStepFailsOnlyInStrictMode) {
  size_t attentionStep = 0;
  {
    FakeSession fake;
    ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, allButAttention, false));
    std::vector<float> logits, reference;
    ASSERT_TRUE(test::runForward(*fake.session, logits, reference));
    const std::vector<StepPlacement> &placements = fake.session->lastPlacements("forward");
    size_t fallbacks = 0;
    bool first = true;
    for (size_t i = 0; i < placements.size(); ++i)
      if (placements[i] == StepPlacement::Fallback) {
        ++fallbacks;
        if (first)
          attentionStep = i;
        first = false;
      }
    ASSERT_GT(fallbacks, 0u);
    EXPECT_EQ(fake.session->program("forward")->steps()->Get(attentionStep)->op()->str(),
              "tfm.attention");
    SessionStats stats = fake.session->stats();
    EXPECT_EQ(stats.fallbackSteps, fallbacks);
    EXPECT_EQ(stats.kernelLaunches, eagerFakeLaunches());
    // The fallback downloads its inputs and the caller's logits came down too.
    EXPECT_GT(stats.bytesDownloaded, logits.size() * sizeof(float));
    EXPECT_GT(stats.bytesUploaded, fake.session->memory().weights);
  }
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, allButAttention, true));
  ASSERT_TRUE(test::bindForward(*fake.session));
  Status status = fake.session->run("forward");
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("strict device mode"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("step " + std::to_string(attentionStep) + " (tfm.attention"),
            std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("no GPU launcher"), std::string::npos) << status.message();
  EXPECT_EQ(fake.session->stats().fallbackSteps, 0u);
}

// A step whose op needs kernels and has none in the plan (the CPU-only plan): strict mode
// says the plan has no GPU kernel for it.
TEST(CudaStrictAndStats, AStepWithoutKernelsFailsInStrictMode) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createFake(fake, everyOp, size_t(64) << 20, true, false));
  fake.session->setStrict(true);
  ASSERT_TRUE(test::bindForward(*fake.session));
  Status status = fake.session->run("forward");
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("the plan has no GPU kernel for it"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("step "), std::string::npos) << status.message();
}

// Several decode steps: one capture for the bucket, replays after it; the counters agree
// with what the fake driver saw. Strict mode has nothing to refuse.
TEST(CudaStrictAndStats, CapturedDecodeCountsCapturesAndReplays) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, everyOp, true));
  if (!fake.session->program("decode") || !fake.session->program("prefill"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  DecodeInputs inputs;
  ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
  Status status = fake.session->run("prefill");
  ASSERT_TRUE(status.isOk()) << status.message();
  for (int64_t past = 3; past < 8; ++past) {
    ASSERT_TRUE(bind(*fake.session, "decode", past, 1, inputs));
    status = fake.session->run("decode");
    ASSERT_TRUE(status.isOk()) << status.message();
    EXPECT_FALSE(logitsOf(*fake.session, "decode").empty());
  }
  SessionStats stats = fake.session->stats();
  EXPECT_EQ(stats.graphCaptures, 1u);
  EXPECT_EQ(stats.graphReplays, 3u);  // the first decode decides, the second captures
  EXPECT_EQ(stats.graphReplays, static_cast<uint64_t>(fake::state().graphLaunches));
  EXPECT_EQ(stats.fallbackSteps, 0u);
  EXPECT_EQ(stats.kernelLaunches, eagerFakeLaunches());
  if (fake.plan->plan().kernels() && fake.plan->plan().kernels()->size())
    EXPECT_GT(stats.kernelLaunches, 0u);
  EXPECT_GT(stats.bytesDownloaded, 0u);
}

// The fake driver fails the capture: without strict mode decode goes on eagerly (and says
// so on stderr); in strict mode it is an error naming the program and bucket.
TEST(CudaStrictAndStats, AFailedCaptureFailsOnlyInStrictMode) {
  for (bool strict : {false, true}) {
    SCOPED_TRACE(strict ? "strict" : "not strict");
    FakeSession fake;
    ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, everyOp, strict));
    if (!fake.session->program("decode") || !fake.session->program("prefill"))
      GTEST_SKIP() << "the plan has no session-cache programs";
    DecodeInputs inputs;
    ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
    ASSERT_TRUE(fake.session->run("prefill").isOk());
    ASSERT_TRUE(bind(*fake.session, "decode", 3, 1, inputs));
    ASSERT_TRUE(fake.session->run("decode").isOk());
    fake::state().failCaptures = 1;
    ASSERT_TRUE(bind(*fake.session, "decode", 4, 1, inputs));
    testing::internal::CaptureStderr();
    Status status = fake.session->run("decode");
    std::string said = testing::internal::GetCapturedStderr();
    EXPECT_EQ(fake.session->stats().graphCaptures, 0u);
    if (!strict) {
      ASSERT_TRUE(status.isOk()) << status.message();
      EXPECT_NE(said.find("could not be captured"), std::string::npos) << said;
      ASSERT_TRUE(bind(*fake.session, "decode", 5, 1, inputs));
      ASSERT_TRUE(fake.session->run("decode").isOk());  // eager: nothing replays
      EXPECT_EQ(fake.session->stats().graphReplays, 0u);
      continue;
    }
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("strict device mode"), std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find("program 'decode'"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("could not be captured"), std::string::npos)
        << status.message();
    // The bucket stays without a graph: every later decode in it fails too.
    ASSERT_TRUE(bind(*fake.session, "decode", 5, 1, inputs));
    status = fake.session->run("decode");
    EXPECT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("would run eagerly"), std::string::npos) << status.message();
  }
}

// Strict mode turned on after decode was found unfit for graphs (a fallback step): the next
// decode fails, naming the step that kept it from being captured.
TEST(CudaStrictAndStats, StrictAfterAnEagerDecisionFails) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, allButAttention, false));
  if (!fake.session->program("decode") || !fake.session->program("prefill"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  DecodeInputs inputs;
  ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
  ASSERT_TRUE(fake.session->run("prefill").isOk());
  testing::internal::CaptureStderr();
  ASSERT_TRUE(bind(*fake.session, "decode", 3, 1, inputs));
  ASSERT_TRUE(fake.session->run("decode").isOk());
  testing::internal::GetCapturedStderr();
  EXPECT_GT(fake.session->stats().fallbackSteps, 0u);
  fake.session->setStrict(true);
  ASSERT_TRUE(bind(*fake.session, "decode", 4, 1, inputs));
  Status status = fake.session->run("decode");
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("would run without CUDA graphs"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("tfm.attention"), std::string::npos) << status.message();
}

// Graphs turned off by the caller: no graph is expected, so strict decode runs eagerly.
TEST(CudaStrictAndStats, StrictDecodeWithGraphsTurnedOff) {
  FakeSession fake;
  ASSERT_NO_FATAL_FAILURE(createStrictFake(fake, everyOp, true, /*graphs=*/false));
  if (!fake.session->program("decode") || !fake.session->program("prefill"))
    GTEST_SKIP() << "the plan has no session-cache programs";
  DecodeInputs inputs;
  ASSERT_TRUE(bind(*fake.session, "prefill", 0, 3, inputs));
  ASSERT_TRUE(fake.session->run("prefill").isOk());
  for (int64_t past = 3; past < 6; ++past) {
    ASSERT_TRUE(bind(*fake.session, "decode", past, 1, inputs));
    Status status = fake.session->run("decode");
    ASSERT_TRUE(status.isOk()) << status.message();
  }
  EXPECT_EQ(fake.session->stats().graphCaptures, 0u);
  EXPECT_EQ(fake.session->stats().graphReplays, 0u);
}

// DSRT_STRICT_DEVICE=1 makes every CUDA session strict; the option does too.
TEST(CudaStrictAndStats, TheEnvironmentTurnsStrictModeOn) {
  ::setenv("DSRT_STRICT_DEVICE", "1", 1);
  FakeSession fake;
  createFake(fake, allButAttention);
  ::unsetenv("DSRT_STRICT_DEVICE");
  ASSERT_TRUE(fake.session);
  EXPECT_TRUE(fake.session->strict());
  ASSERT_TRUE(test::bindForward(*fake.session));
  Status status = fake.session->run("forward");
  EXPECT_NE(status.message().find("strict device mode"), std::string::npos) << status.message();
  fake.session->setStrict(false);
  EXPECT_FALSE(fake.session->strict());
  FakeSession plain;
  ASSERT_NO_FATAL_FAILURE(createFake(plain, everyOp));
  EXPECT_FALSE(plain.session->strict());
}

// The CPU backend has nothing to fall back from: strict mode changes nothing, the counters
// stay zero.
TEST(CudaStrictAndStats, TheCpuSessionIgnoresStrictMode) {
  std::shared_ptr<PlanFile> plan;
  ASSERT_TRUE(test::openGpt2Plan(plan));
  std::unique_ptr<CpuSession> cpu;
  ASSERT_TRUE(CpuSession::create(plan, 0, cpu).isOk());
  cpu->setStrict(true);
  std::vector<float> logits, reference;
  ASSERT_TRUE(test::runForward(*cpu, logits, reference));
  SessionStats stats = cpu->stats();
  EXPECT_EQ(stats.kernelLaunches + stats.fallbackSteps + stats.graphCaptures +
                stats.graphReplays + stats.bytesUploaded + stats.bytesDownloaded,
            0u);
}

// Two ranks (threads) sharing the fake GPU, each summing and gathering its own buffer.
TEST(CudaStagedCollectives, SumAndGatherThroughTheHost) {
  fake::reset();
  const DriverApi &driver = fake::driver();
  InProcessGroup group(2);
  std::vector<std::vector<float>> sums(2), gathered(2);
  std::vector<std::string> errors(2);
  auto rank = [&](int r) {
    StagedCollectives staged(driver, group.member(r));
    CUdeviceptr data = 0, mine = 0, out = 0;
    driver.cuMemAlloc(&data, 4 * sizeof(float));
    driver.cuMemAlloc(&mine, 3 * sizeof(float));
    driver.cuMemAlloc(&out, 5 * sizeof(float));
    float values[4] = {1.0f + r, 2.0f + r, 3.0f + r, 4.0f + r};
    driver.cuMemcpyHtoDAsync(data, values, sizeof values, nullptr);
    // Uneven shards: rank 0 holds 3 floats, rank 1 holds 2.
    float shard[3] = {10.0f * r, 10.0f * r + 1, 10.0f * r + 2};
    driver.cuMemcpyHtoDAsync(mine, shard, sizeof shard, nullptr);
    Status status = staged.allReduceSum(data, 4, nullptr);
    if (status.isOk())
      status = staged.allGather(mine, {12, 8}, out, nullptr);
    errors[r] = status.message();
    sums[r].resize(4);
    gathered[r].resize(5);
    driver.cuMemcpyDtoHAsync(sums[r].data(), data, 4 * sizeof(float), nullptr);
    driver.cuMemcpyDtoHAsync(gathered[r].data(), out, 5 * sizeof(float), nullptr);
    EXPECT_FALSE(staged.capturable());
    for (CUdeviceptr pointer : {data, mine, out})
      driver.cuMemFree(pointer);
  };
  std::thread zero(rank, 0), one(rank, 1);
  zero.join();
  one.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(errors[r].empty()) << errors[r];
    EXPECT_EQ(sums[r], (std::vector<float>{3, 5, 7, 9}));
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 1, 2, 10, 11}));
  }
}

} // namespace
} // namespace dsrt::cuda
