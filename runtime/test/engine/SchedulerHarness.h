// The scheduler tests' fake model and harness (SchedulerTest.cpp, SchedulerDraftTest.cpp):
// the "KV cache" stores, in every slot, the token it was computed from, so a wrong block
// table, a block reused too early or a wrong prefix hit shows up as a wrong token, not just
// as a wrong count.
#pragma once

#include "engine/Scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace dsrt::engine::scheduler_test {

// The fake model's choice of the next token: any deterministic function of all tokens.
inline int64_t nextToken(const std::vector<int64_t> &context) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t token : context)
    h = (h ^ static_cast<uint64_t>(token)) * 1099511628211ull;
  return static_cast<int64_t>((h >> 17) % 1000);
}

// A model whose text repeats, as greedy decoding's often does: two tokens in three follow
// from the last token alone (a cycle that n-gram drafts then predict), the third from
// everything (which they miss).
inline int64_t repetitiveToken(const std::vector<int64_t> &context) {
  if (context.size() % 3 == 0)
    return nextToken(context);
  return (context.back() * 7 + 3) % 11;
}

// A model that only repeats: each token from the last one alone, around a cycle.
inline int64_t cyclicToken(const std::vector<int64_t> &context) { return (context.back() * 7 + 3) % 11; }

using Model = int64_t (*)(const std::vector<int64_t> &);

// What a request generates when it runs alone, without any KV cache.
inline std::vector<int64_t> generateAlone(std::vector<int64_t> tokens, int64_t maxNewTokens,
                                   Model model = nextToken) {
  for (int64_t i = 0; i < maxNewTokens; ++i)
    tokens.push_back(model(tokens));
  return tokens;
}

inline std::vector<int64_t> iota(int64_t count, int64_t first = 1) {
  std::vector<int64_t> tokens(count);
  for (int64_t i = 0; i < count; ++i)
    tokens[i] = first + i;
  return tokens;
}

// A scheduler and the fake model that runs its plans.
class Harness {
public:
  Harness(SchedulerOptions options, int64_t blockSize, int64_t numBlocks, bool prefixCaching,
          Model model = nextToken)
      : scheduler(options, BlockPool(blockSize, numBlocks, prefixCaching)),
        kv_(static_cast<size_t>(blockSize * numBlocks), -1), blockSize_(blockSize),
        model_(model) {
    EXPECT_TRUE(scheduler.validate().isOk()) << scheduler.validate().message();
  }

  int64_t add(std::vector<int64_t> prompt, int64_t maxNewTokens, int64_t drafts = 0,
              int64_t priority = 0) {
    int64_t id = 0;
    Status status = scheduler.add(prompt, maxNewTokens, id, true, drafts, priority);
    EXPECT_TRUE(status.isOk()) << status.message();
    expected[id] = generateAlone(std::move(prompt), maxNewTokens, model_);
    return id;
  }

  StepPlan schedule() {
    StepPlan plan;
    Status status = scheduler.schedule(plan);
    EXPECT_TRUE(status.isOk()) << status.message();
    EXPECT_LE(plan.scheduledTokens(), scheduler.options().maxTokensPerStep);
    return plan;
  }

  // Runs the chunks of live requests and commits their samples.
  void runAndCommit(const StepPlan &plan) {
    std::vector<std::pair<int64_t, int64_t>> sampled;
    for (const ScheduledChunk &chunk : plan.chunks)
      if (scheduler.contains(chunk.requestId))
        runChunk(chunk, sampled);
    Status status = scheduler.commit(sampled);
    ASSERT_TRUE(status.isOk()) << status.message();
    for (const FinishedRequest &done : scheduler.lastFinished())
      finished[done.id] = done.tokens;
  }

  StepPlan step() {
    StepPlan plan = schedule();
    runAndCommit(plan);
    return plan;
  }

  int runUntilIdle(int maxSteps = 10000) {
    int steps = 0;
    while (scheduler.runningCount() + scheduler.waitingCount() > 0 && steps < maxSteps &&
           !::testing::Test::HasFatalFailure()) {
      step();
      ++steps;
    }
    EXPECT_LT(steps, maxSteps) << "the scheduler stopped making progress";
    return steps;
  }

  // Every finished request generated what it would alone.
  void expectFinishedAsAlone() {
    for (const auto &[id, tokens] : finished)
      EXPECT_EQ(tokens, expected.at(id)) << "request " << id;
  }

  Scheduler scheduler;
  std::map<int64_t, std::vector<int64_t>> expected;  // by request id
  std::map<int64_t, std::vector<int64_t>> finished;  // by commit(), by request id

private:
  int64_t &slot(const std::vector<BlockId> &table, int64_t position) {
    BlockId block = table[static_cast<size_t>(position / blockSize_)];
    return kv_[static_cast<size_t>(block * blockSize_ + position % blockSize_)];
  }

  // Writes the chunk's rows (its drafts' too) into the fake cache and samples: with drafts,
  // as the engine verifies them, each next token while the one before was its draft.
  void runChunk(const ScheduledChunk &chunk, std::vector<std::pair<int64_t, int64_t>> &sampled) {
    const std::vector<int64_t> &tokens = scheduler.tokens(chunk.requestId);
    const BlockPool &pool = scheduler.pool();
    const int64_t drafted = static_cast<int64_t>(chunk.drafts.size());
    const int64_t length = static_cast<int64_t>(tokens.size());
    int64_t end = chunk.start + chunk.count;
    ASSERT_GE(chunk.count, 1);
    ASSERT_LE(end - drafted, length);
    ASSERT_GE(static_cast<int64_t>(chunk.blockTable.size()) * blockSize_, end);
    EXPECT_EQ(chunk.samples, end - drafted == length);
    if (drafted > 0) {
      ASSERT_TRUE(chunk.samples && chunk.count == 1 + drafted);
    }
    for (int64_t p = 0; p < chunk.start; ++p)
      ASSERT_EQ(slot(chunk.blockTable, p), tokens[p])
          << "request " << chunk.requestId << " reads stale KV at position " << p;
    for (int64_t p = chunk.start; p < end; ++p) {
      BlockId block = chunk.blockTable[static_cast<size_t>(p / blockSize_)];
      // Blocks that others may read (shared or published) are never written again.
      ASSERT_EQ(pool.refCount(block), 1) << "request " << chunk.requestId << " block " << block;
      ASSERT_FALSE(pool.isPublished(block));
      slot(chunk.blockTable, p) = p < length ? tokens[p] : chunk.drafts[p - length];
    }
    if (!chunk.samples)
      return;
    std::vector<int64_t> context;
    for (int64_t p = 0; p < length; ++p)
      context.push_back(slot(chunk.blockTable, p));
    for (int64_t row = 0;; ++row) {
      const int64_t token = model_(context);
      sampled.emplace_back(chunk.requestId, token);
      if (row == drafted || token != chunk.drafts[static_cast<size_t>(row)])
        break;
      context.push_back(slot(chunk.blockTable, length + row));
    }
  }

  std::vector<int64_t> kv_;
  int64_t blockSize_;
  Model model_;
};

inline SchedulerOptions options(int64_t tokens, int64_t running, int64_t length) {
  SchedulerOptions o;
  o.maxTokensPerStep = tokens;
  o.maxRunningSequences = running;
  o.maxSequenceLength = length;
  return o;
}

inline const ScheduledChunk *chunkOf(const StepPlan &plan, int64_t id) {
  for (const ScheduledChunk &chunk : plan.chunks)
    if (chunk.requestId == id)
      return &chunk;
  return nullptr;
}

} // namespace dsrt::engine::scheduler_test
