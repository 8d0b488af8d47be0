// The GPT-2 fixture plan (ctest fixture gpt2_plan) and its test data, for the CUDA tests.
#ifndef DSRT_TEST_CUDA_TESTPLANS_H
#define DSRT_TEST_CUDA_TESTPLANS_H

#include "plan/PlanFile.h"
#include "session/Session.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dsrt::cuda::test {

// Opens $DSRT_TEST_GPT2_PLAN, else the ctest fixture's plan; adds a gtest failure and
// returns false when it cannot. `cpuOnly`: the same model compiled with `--arch none`
// ($DSRT_TEST_GPT2_CPU_PLAN), whose steps list no kernels.
bool openGpt2Plan(std::shared_ptr<PlanFile> &out, bool cpuOnly = false);
// Opens $`variable`, else `fallback` (a ctest fixture's plan); null, with a gtest failure,
// when it cannot.
std::shared_ptr<PlanFile> openPlanFile(const char *variable, const char *fallback);
// The plan kernel each launch the fake driver recorded ran (FakeDriver.h: its functions are
// the plan's kernels in order), "?" for any other.
std::vector<std::string> launchedKernels(const PlanFile &plan);

// The Llama fixture at 64 tokens, CPU-only (DSRT_TEST_LLAMA_LONG_PLAN overrides it), whose
// forward needs more arena than prefill and decode.
bool openLlamaLongPlan(std::shared_ptr<PlanFile> &out);
// The Llama fixture compiled with --serving --max-batch 8 --max-seq-len 16: a step program
// whose attention carries the paged kernels (DSRT_TEST_SERVING_PLAN overrides it).
bool openServingPlan(std::shared_ptr<PlanFile> &out);

// One paged KV block of `blockSize` positions of `rank`'s cache, keys and values over every
// layer, in bytes: what a session's pool holds per block.
uint64_t pagedBytesPerBlock(const PlanFile &plan, int64_t blockSize, int rank = 0);
// Binds test_data_set_0's inputs to `forward` by name (adds a gtest failure and returns
// false when it cannot).
bool bindForward(Session &session);
// Binds test_data_set_0's inputs to `forward` by name, runs it, and returns the logits and
// the PyTorch reference logits.
bool runForward(Session &session, std::vector<float> &logits, std::vector<float> &reference);
// Runs `program` (prefill or decode) at batch 1 on a context of `total` tokens, the last
// `tokens` of them new: ids in a fixed pattern below 300, positions and an all-ones mask
// bound by input name. `logits` (may be null) gets output 0.
Status runTokens(Session &session, const char *program, int64_t total, int64_t tokens,
                 std::vector<float> *logits = nullptr);
// |a - b| <= tolerance * max(1, |b|) elementwise.
void expectClose(const std::vector<float> &actual, const std::vector<float> &expected,
                 float tolerance);

} // namespace dsrt::cuda::test

#endif
