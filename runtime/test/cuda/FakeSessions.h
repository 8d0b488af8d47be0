// The CUDA session against the fake driver (FakeDriver.h): fake launchers, a session of the
// GPT-2 fixture plan, and binding a batch of one for prefill and decode (their logits). Shared by
// CudaSessionTest.cpp (placement, the fallback, graphs) and CudaStrictStatsTest.cpp (strict
// mode, the counters, the staged collectives).
#pragma once

#include "FakeDriver.h"
#include "TestPlans.h"
#include "cuda/CudaSession.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace dsrt::cuda {

// Fake launchers: they compute nothing, but check what the session hands them.
inline int launcherCalls = 0;
inline Status checkingLauncher(StepContext &context) {
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
inline Status kernelLauncher(StepContext &context) {
  ++launcherCalls;
  return context.launch(0, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, nullptr);
}

inline GpuOpFn noLaunchers(std::string_view) { return nullptr; }
inline GpuOpFn everyOp(std::string_view) { return checkingLauncher; }
inline GpuOpFn allButAttention(std::string_view op) {
  return op == "tfm.attention" ? nullptr : checkingLauncher;
}
inline GpuOpFn tfmOpsWithKernelLmHead(std::string_view op) {
  if (op == "tfm.lm_head")
    return kernelLauncher;
  return op.rfind("tfm.", 0) == 0 ? checkingLauncher : nullptr;
}

struct FakeSession {
  std::shared_ptr<PlanFile> plan;
  std::unique_ptr<CudaSession> session;
};

inline bool anyOp(std::string_view) { return true; }

// `kernelFree`: the fake launchers run without the plan's kernels (the fixture plan may
// have none); false keeps the session's rule (steps without kernels fall back).
inline void createFake(FakeSession &out, GpuOpFn (*findOp)(std::string_view),
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

struct DecodeInputs {
  std::vector<int64_t> ids, mask, positions;
};

// Binds input_ids, attention_mask and position_ids (when the program has it) of a batch
// of one: `tokens` new tokens after `past` cached ones.
inline bool bind(Session &session, const char *program, int64_t past, int64_t tokens,
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

inline std::vector<float> logitsOf(Session &session, const char *program) {
  TensorRef out;
  Status status = session.output(program, 0, out);
  EXPECT_TRUE(status.isOk()) << status.message();
  if (!status.isOk() || out.dtype != DType::F32)
    return {};
  return std::vector<float>(out.as<float>(), out.as<float>() + out.elements());
}

} // namespace dsrt::cuda
