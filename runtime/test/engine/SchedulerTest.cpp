// The step scheduler, driven by SchedulerHarness.h's fake model: admission, budgets,
// chunking, prefix hits, preemption, cancellation, and a seeded simulation of random
// traffic (with drafts in three of its pools) checked against each request alone.
#include "SchedulerHarness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace dsrt::engine {
namespace {

using namespace scheduler_test;


TEST(Scheduler, BadOptionsAndRequestsAreErrors) {
  Scheduler badOptions(options(0, 4, 64), BlockPool(4, 8, false));
  EXPECT_NE(badOptions.validate().message().find("maxTokensPerStep"), std::string::npos);
  int64_t id = 0;
  EXPECT_FALSE(badOptions.add({1}, 1, id).isOk());
  StepPlan plan;
  EXPECT_FALSE(badOptions.schedule(plan).isOk());
  EXPECT_FALSE(Scheduler(options(8, 4, 64), BlockPool(4, 0, false)).validate().isOk());

  Scheduler scheduler(options(8, 4, 20), BlockPool(4, 4, false));
  ASSERT_TRUE(scheduler.validate().isOk());
  EXPECT_FALSE(scheduler.add({}, 4, id).isOk());
  EXPECT_FALSE(scheduler.add({1}, 0, id).isOk());
  Status tooLong = scheduler.add(iota(15), 6, id);
  EXPECT_NE(tooLong.message().find("15 prompt tokens and 6 new tokens"), std::string::npos)
      << tooLong.message();
  EXPECT_NE(tooLong.message().find("20"), std::string::npos);
  EXPECT_FALSE(scheduler.add(iota(5), INT64_MAX, id).isOk());
  Status tooBig = scheduler.add(iota(16), 1, id);  // 17 tokens: 5 blocks of 4, pool of 4
  EXPECT_NE(tooBig.message().find("needs 5 KV blocks of 4 tokens"), std::string::npos)
      << tooBig.message();
  EXPECT_EQ(scheduler.waitingCount(), 0);

  ASSERT_TRUE(scheduler.add(iota(3), 2, id).isOk());
  EXPECT_EQ(id, 1);
  Status unknown = scheduler.cancel(7);
  EXPECT_NE(unknown.message().find("request 7 is unknown or finished"), std::string::npos);
  EXPECT_FALSE(scheduler.finish(0).isOk());
  EXPECT_FALSE(scheduler.commit({{1, 5}}).isOk());  // nothing scheduled
  ASSERT_TRUE(scheduler.schedule(plan).isOk());
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_FALSE(scheduler.schedule(plan).isOk());     // previous step not committed
  EXPECT_FALSE(scheduler.commit({}).isOk());         // request 1's token is missing
  EXPECT_FALSE(scheduler.commit({{1, 5}, {1, 6}}).isOk());
  EXPECT_FALSE(scheduler.commit({{1, 5}, {9, 6}}).isOk());
  EXPECT_EQ(scheduler.computedCount(1), 0);          // the failed commits changed nothing
  EXPECT_TRUE(scheduler.commit({{1, 5}}).isOk());
  EXPECT_EQ(scheduler.tokens(1), (std::vector<int64_t>{1, 2, 3, 5}));
  EXPECT_EQ(scheduler.computedCount(1), 3);
  ASSERT_TRUE(scheduler.finish(1).isOk());
  EXPECT_FALSE(scheduler.finish(1).isOk());
  EXPECT_EQ(scheduler.pool().freeBlocks(), 4);
}

TEST(Scheduler, LongPromptIsChunkedUnderTheTokenBudget) {
  Harness h(options(5, 4, 64), 4, 16, false);
  int64_t a = h.add(iota(13), 2);
  int64_t b = h.add(iota(4, 100), 2);
  std::vector<int64_t> totals;
  StepPlan s1 = h.step(), s2 = h.step(), s3 = h.step(), s4 = h.step();
  for (const StepPlan *plan : {&s1, &s2, &s3, &s4})
    totals.push_back(plan->scheduledTokens());
  EXPECT_EQ(totals, (std::vector<int64_t>{5, 5, 5, 3}));
  ASSERT_EQ(s1.chunks.size(), 1u);
  EXPECT_EQ(s1.chunks[0].start, 0);
  EXPECT_EQ(s2.chunks[0].start, 5);
  EXPECT_FALSE(s2.chunks[0].samples);
  // Step 3: a's last 3 prompt tokens, then b's first 2 with what is left.
  ASSERT_EQ(s3.chunks.size(), 2u);
  EXPECT_EQ(s3.chunks[0].requestId, a);
  EXPECT_EQ(s3.chunks[0].count, 3);
  EXPECT_TRUE(s3.chunks[0].samples);
  EXPECT_EQ(s3.chunks[1].requestId, b);
  EXPECT_EQ(s3.chunks[1].count, 2);
  EXPECT_FALSE(s3.chunks[1].samples);
  h.runUntilIdle();
  EXPECT_EQ(h.finished.size(), 2u);
  h.expectFinishedAsAlone();
}

TEST(Scheduler, DecodeGoesFirstAndTakesTheBudgetBeforePrefill) {
  Harness h(options(4, 8, 64), 4, 32, false);
  int64_t a = h.add(iota(2), 8);
  int64_t b = h.add(iota(1, 50), 8);
  h.step();  // a's and b's prompts
  int64_t c = h.add(iota(20, 200), 2);
  StepPlan plan = h.step();
  ASSERT_EQ(plan.chunks.size(), 3u);
  EXPECT_EQ(plan.chunks[0].requestId, a);
  EXPECT_EQ(plan.chunks[1].requestId, b);
  EXPECT_EQ(plan.chunks[0].count, 1);
  EXPECT_EQ(plan.chunks[1].count, 1);
  EXPECT_EQ(plan.chunks[2].requestId, c);
  EXPECT_EQ(plan.chunks[2].count, 2);  // the budget left after both decodes
  plan = h.step();
  EXPECT_EQ(plan.chunks[2].start, 2);
  h.runUntilIdle();
  h.expectFinishedAsAlone();
}

TEST(Scheduler, RunningCapHoldsBackAdmission) {
  Harness h(options(64, 2, 64), 4, 32, false);
  h.add(iota(2), 3);
  int64_t b = h.add(iota(2, 10), 1);
  int64_t c = h.add(iota(2, 20), 3);
  StepPlan plan = h.step();
  EXPECT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(chunkOf(plan, c), nullptr);
  EXPECT_EQ(h.scheduler.runningCount(), 1);  // b finished after one token
  EXPECT_EQ(h.finished.count(b), 1u);
  plan = h.step();
  ASSERT_NE(chunkOf(plan, c), nullptr);
  EXPECT_EQ(h.scheduler.runningCount(), 2);
  h.runUntilIdle();
  EXPECT_EQ(h.finished.size(), 3u);
  h.expectFinishedAsAlone();
}

TEST(Scheduler, ShortRequestDoesNotOvertakeALongOneThatDoesNotFit) {
  Harness h(options(64, 8, 64), 4, 6, false);
  int64_t a = h.add(iota(12), 4);      // 3 blocks now, 4 later
  int64_t b = h.add(iota(16, 100), 1); // 4 blocks: does not fit next to a
  int64_t c = h.add(iota(2, 200), 1);  // 1 block: would fit
  std::map<int64_t, int> firstStep;
  for (int step = 0; h.scheduler.runningCount() + h.scheduler.waitingCount() > 0; ++step) {
    ASSERT_LT(step, 100);
    StepPlan plan = h.step();
    for (const ScheduledChunk &chunk : plan.chunks)
      firstStep.emplace(chunk.requestId, step);
  }
  EXPECT_EQ(firstStep.at(a), 0);
  EXPECT_GT(firstStep.at(b), 0);
  EXPECT_LE(firstStep.at(b), firstStep.at(c)) << "c overtook b";
  EXPECT_EQ(h.finished.size(), 3u);
  h.expectFinishedAsAlone();
}

TEST(Scheduler, PrefixHitsSkipSharedBlocksButNeverTheLastToken) {
  Harness h(options(64, 8, 64), 4, 16, true);
  int64_t a = h.add(iota(8), 2);
  EXPECT_EQ(h.scheduler.cachedPromptTokens(a), -1);  // not admitted yet
  h.step();
  EXPECT_EQ(h.scheduler.cachedPromptTokens(a), 0);
  h.runUntilIdle();
  EXPECT_EQ(h.scheduler.prefixHits(), 0u);
  EXPECT_EQ(h.scheduler.prefixMisses(), 1u);  // one full block before the last token
  EXPECT_EQ(h.scheduler.cachedPromptTokens(a), -1);  // finished: unknown

  // The same 8 tokens: block 0 is hit, block 1 holds the last token and is computed.
  int64_t b = h.add(iota(8), 5);  // still running when c arrives
  StepPlan plan = h.step();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].start, 4);
  EXPECT_EQ(plan.chunks[0].count, 4);
  EXPECT_EQ(h.scheduler.prefixHits(), 1u);
  EXPECT_EQ(h.scheduler.cachedPromptTokens(b), 4);

  // One token more: both full blocks are hits (block 0 now shared with b), one token left.
  int64_t c = h.add(iota(9), 2);
  plan = h.step();
  const ScheduledChunk *chunk = chunkOf(plan, c);
  ASSERT_NE(chunk, nullptr);
  EXPECT_EQ(chunk->start, 8);
  EXPECT_EQ(chunk->count, 1);
  EXPECT_EQ(h.scheduler.prefixHits(), 3u);
  EXPECT_EQ(h.scheduler.cachedPromptTokens(c), 8);
  EXPECT_EQ(h.scheduler.cachedPromptTokens(b), 4);  // unchanged by c's hits
  BlockId shared = h.scheduler.blockTable(c)[0];
  EXPECT_EQ(h.scheduler.blockTable(b)[0], shared);
  EXPECT_EQ(h.scheduler.pool().refCount(shared), 2);

  // A different first block shares nothing, even with the same second block.
  std::vector<int64_t> other = iota(9);
  other[0] = 99;
  int64_t d = h.add(other, 1);
  plan = h.step();
  ASSERT_NE(chunkOf(plan, d), nullptr);
  EXPECT_EQ(chunkOf(plan, d)->start, 0);
  h.runUntilIdle();
  EXPECT_EQ(h.finished.size(), 4u);
  EXPECT_EQ(h.finished.count(a), 1u);
  h.expectFinishedAsAlone();
  EXPECT_EQ(h.scheduler.pool().freeBlocks(), 16);
  EXPECT_EQ(h.scheduler.usedBlocks(), 0);
}

// Resetting the prefix cache: refused while a request is live (nothing forgotten: the next
// request still hits), then every cached block is free and the same prompt hits nothing,
// computing all its tokens again to what it generated alone.
TEST(Scheduler, ResetPrefixCacheForgetsEveryBlockOnlyWhenIdle) {
  Harness h(options(64, 8, 64), 4, 16, true);
  h.add(iota(9), 2);
  h.runUntilIdle();
  EXPECT_EQ(h.scheduler.pool().cachedBlocks(), 2);
  h.add(iota(9), 3);
  StepPlan plan = h.step();
  EXPECT_FALSE(h.scheduler.resetPrefixCache().isOk());
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].start, 8);  // hit both blocks
  h.runUntilIdle();
  const uint64_t hits = h.scheduler.prefixHits();
  ASSERT_TRUE(h.scheduler.resetPrefixCache().isOk());
  EXPECT_EQ(h.scheduler.pool().cachedBlocks(), 0);
  EXPECT_EQ(h.scheduler.pool().freeBlocks(), 16);
  int64_t again = h.add(iota(9), 2);
  plan = h.step();
  ASSERT_NE(chunkOf(plan, again), nullptr);
  EXPECT_EQ(chunkOf(plan, again)->start, 0);
  EXPECT_EQ(h.scheduler.prefixHits(), hits);
  h.runUntilIdle();
  h.expectFinishedAsAlone();
}

TEST(Scheduler, PreemptsTheYoungestAndRecomputesIt) {
  Harness h(options(16, 4, 8), 2, 4, false);
  int64_t a = h.add(iota(2), 6);        // 8 tokens: needs all 4 blocks at the end
  int64_t b = h.add(iota(2, 10), 6);
  bool preempted = false;
  bool recomputed = false;
  for (int step = 0; h.scheduler.runningCount() + h.scheduler.waitingCount() > 0; ++step) {
    ASSERT_LT(step, 100);
    StepPlan plan = h.step();
    if (!plan.preempted.empty()) {
      EXPECT_EQ(plan.preempted, std::vector<int64_t>{b});
      EXPECT_EQ(chunkOf(plan, b), nullptr);
      EXPECT_EQ(h.scheduler.computedCount(b), 0);
      EXPECT_GT(h.scheduler.generatedCount(b), 0);  // kept for the recomputation
      preempted = true;
    }
    const ScheduledChunk *chunk = chunkOf(plan, b);
    if (preempted && chunk && !recomputed) {
      EXPECT_EQ(chunk->start, 0);
      EXPECT_GT(chunk->count, 2);  // prompt and generated tokens
      recomputed = true;
    }
  }
  EXPECT_TRUE(preempted);
  EXPECT_TRUE(recomputed);
  EXPECT_GE(h.scheduler.preemptions(), 1u);
  ASSERT_EQ(h.finished.size(), 2u);
  EXPECT_EQ(h.finished[a].size(), 8u);
  EXPECT_EQ(h.finished[b].size(), 8u);
  h.expectFinishedAsAlone();
  EXPECT_EQ(h.scheduler.peakUsedBlocks(), 4);
  EXPECT_EQ(h.scheduler.pool().freeBlocks(), 4);
}

// A request's cached prompt tokens are what its first admission found (vLLM's
// num_cached_tokens): its recompute after preemption hits its own published blocks, and
// that does not count.
TEST(Scheduler, CachedPromptTokensAreTheFirstAdmissions) {
  Harness h(options(16, 4, 12), 2, 6, true);
  int64_t a = h.add(iota(2), 7);  // 9 tokens: 5 of the 6 blocks at the end
  int64_t b = h.add(iota(3, 10), 5);
  bool preempted = false, recomputed = false;
  for (int step = 0; h.scheduler.runningCount() + h.scheduler.waitingCount() > 0; ++step) {
    ASSERT_LT(step, 100);
    StepPlan plan = h.schedule();
    preempted = preempted || !plan.preempted.empty();
    if (const ScheduledChunk *chunk = chunkOf(plan, b)) {
      // Checked before the commit: the recompute's step finishes b.
      EXPECT_EQ(h.scheduler.cachedPromptTokens(b), 0) << "step " << step;
      // The recompute took its own blocks from the cache: a count that followed every
      // admission would show them.
      recomputed = recomputed || (preempted && chunk->start > 0);
    }
    h.runAndCommit(plan);
  }
  EXPECT_EQ(h.finished.count(a), 1u);
  EXPECT_TRUE(preempted);
  EXPECT_TRUE(recomputed);
  h.expectFinishedAsAlone();
}

TEST(Scheduler, PreemptedRequestGoesBackToTheFrontOfTheQueue) {
  Harness h(options(16, 2, 8), 2, 4, false);
  h.add(iota(2), 6);
  int64_t b = h.add(iota(2, 10), 6);
  int64_t c = h.add(iota(2, 20), 1);  // waits for the running cap; would fit in 1 block
  int readmitted = -1, cStarted = -1;
  bool preempted = false;
  for (int step = 0; h.scheduler.runningCount() + h.scheduler.waitingCount() > 0; ++step) {
    ASSERT_LT(step, 100);
    StepPlan plan = h.step();
    preempted = preempted || !plan.preempted.empty();
    if (preempted && readmitted < 0 && chunkOf(plan, b))
      readmitted = step;
    if (cStarted < 0 && chunkOf(plan, c))
      cStarted = step;
  }
  ASSERT_TRUE(preempted);
  EXPECT_GE(cStarted, readmitted) << "c overtook the preempted b";
  EXPECT_EQ(h.finished.size(), 3u);
  h.expectFinishedAsAlone();
}

TEST(Scheduler, CancelAnywhereLeavesOthersIntact) {
  Harness h(options(6, 8, 64), 4, 16, true);
  int64_t decoding = h.add(iota(3), 10);
  int64_t prefilling = h.add(iota(20, 100), 2);
  int64_t survivor = h.add(iota(5, 300), 4);
  int64_t waiting = h.add(iota(4, 200), 2);
  h.step();  // decoding's prompt, prefilling's first 3 tokens
  EXPECT_EQ(h.scheduler.generatedCount(decoding), 1);
  EXPECT_GT(h.scheduler.computedCount(prefilling), 0);
  ASSERT_TRUE(h.scheduler.cancel(waiting).isOk());
  EXPECT_EQ(h.scheduler.waitingCount(), 1);  // survivor
  // Between schedule() and commit(): commit skips both chunks.
  StepPlan plan = h.schedule();
  ASSERT_NE(chunkOf(plan, decoding), nullptr);
  ASSERT_NE(chunkOf(plan, prefilling), nullptr);
  ASSERT_TRUE(h.scheduler.cancel(prefilling).isOk());
  ASSERT_TRUE(h.scheduler.cancel(decoding).isOk());
  EXPECT_FALSE(h.scheduler.cancel(decoding).isOk());
  h.runAndCommit(plan);
  EXPECT_EQ(h.scheduler.tokens(decoding).size(), 0u);
  EXPECT_EQ(h.scheduler.runningCount() + h.scheduler.waitingCount(), 1);
  h.runUntilIdle();
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished.count(survivor), 1u);
  h.expectFinishedAsAlone();
  EXPECT_EQ(h.scheduler.pool().freeBlocks(), 16);
}

TEST(Scheduler, FinishOnStopTokenReleasesBlocks) {
  Harness h(options(16, 8, 64), 4, 8, false);
  int64_t a = h.add(iota(6), 20);
  h.step();
  h.step();
  EXPECT_EQ(h.scheduler.generatedCount(a), 2);
  EXPECT_EQ(h.scheduler.usedBlocks(), 2);
  ASSERT_TRUE(h.scheduler.finish(a).isOk());
  EXPECT_EQ(h.scheduler.usedBlocks(), 0);
  EXPECT_FALSE(h.scheduler.cancel(a).isOk());
  StepPlan plan = h.schedule();
  EXPECT_TRUE(plan.chunks.empty());
  EXPECT_TRUE(h.scheduler.commit({}).isOk());  // an empty step needs none, but may have one
}

// Every block is held once per table that lists it; a block in two tables is one shared
// through the prefix cache. Waiting requests hold nothing.
// `fcfs`: every request has priority 0.
void checkInvariants(const Scheduler &scheduler, const StepPlan *plan, bool fcfs = true) {
  const BlockPool &pool = scheduler.pool();
  std::vector<int> holders(static_cast<size_t>(pool.totalBlocks()), 0);
  std::vector<int64_t> live = scheduler.liveRequests();
  // Running then waiting in arrival order: FCFS survives preemption.
  if (fcfs) {
    ASSERT_TRUE(std::is_sorted(live.begin(), live.end()));
  }
  for (size_t i = 0; i < live.size(); ++i) {
    const std::vector<BlockId> &table = scheduler.blockTable(live[i]);
    bool waiting = i >= static_cast<size_t>(scheduler.runningCount());
    ASSERT_TRUE(!waiting || table.empty()) << "waiting request " << live[i] << " holds blocks";
    ASSERT_EQ(std::set<BlockId>(table.begin(), table.end()).size(), table.size());
    ASSERT_GE(static_cast<int64_t>(table.size()) * pool.blockSize(),
              scheduler.computedCount(live[i]));
    for (BlockId block : table)
      ++holders[static_cast<size_t>(block)];
  }
  int64_t used = 0;
  for (BlockId block = 0; block < pool.totalBlocks(); ++block) {
    int held = holders[static_cast<size_t>(block)];
    ASSERT_EQ(pool.refCount(block), held) << "block " << block;
    ASSERT_TRUE(held < 2 || pool.isPublished(block)) << "block " << block << " shared unpublished";
    used += held > 0;
  }
  ASSERT_EQ(pool.usedBlocks(), used);
  ASSERT_LE(scheduler.runningCount(), scheduler.options().maxRunningSequences);
  if (!plan)
    return;
  ASSERT_LE(plan->scheduledTokens(), scheduler.options().maxTokensPerStep);
  std::set<int64_t> ids;
  for (const ScheduledChunk &chunk : plan->chunks) {
    ASSERT_TRUE(ids.insert(chunk.requestId).second);
    ASSERT_EQ(chunk.start, scheduler.computedCount(chunk.requestId));
  }
}

struct SimulationCase {
  int64_t blockSize;
  int64_t numBlocks;
  int64_t maxTokensPerStep;
  bool prefixCaching;
  uint32_t seed;
  int64_t drafts = 0;  // each request's speculative tokens (over repetitiveToken's model)
  bool priorities = false;  // each request a priority in [-2, 2] (else all 0: FCFS)
};

void PrintTo(const SimulationCase &sim, std::ostream *out) {
  *out << "blocks of " << sim.blockSize << " x" << sim.numBlocks << ", budget "
       << sim.maxTokensPerStep << (sim.prefixCaching ? ", prefix caching" : "") << ", seed "
       << sim.seed << (sim.drafts ? ", drafts" : "") << (sim.priorities ? ", priorities" : "");
}

class SchedulerSimulation : public ::testing::TestWithParam<SimulationCase> {};

// A seeded stream of requests over a small pool, with random cancellations: every request
// that is not cancelled ends with the tokens it generates alone, and the books balance at
// every step.
TEST_P(SchedulerSimulation, RandomTrafficMatchesRunningAlone) {
  const SimulationCase &sim = GetParam();
  const int64_t maxLength = std::min<int64_t>(48, sim.blockSize * sim.numBlocks);
  Harness h(options(sim.maxTokensPerStep, 6, maxLength), sim.blockSize, sim.numBlocks,
            sim.prefixCaching, sim.drafts ? repetitiveToken : nextToken);
  std::mt19937 rng(sim.seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<std::vector<int64_t>> systemPrompts(4);
  for (auto &prompt : systemPrompts)
    for (int i = 0; i < 20; ++i)
      prompt.push_back(uniform(0, 999));
  std::set<int64_t> cancelled;
  std::map<int64_t, int64_t> priority;  // by request id
  // The waiting queue (liveRequests() after the running ones) is in (priority, arrival)
  // order: with all priorities 0, arrival order.
  auto checkQueueOrder = [&] {
    std::vector<int64_t> live = h.scheduler.liveRequests();
    for (size_t i = static_cast<size_t>(h.scheduler.runningCount()) + 1; i < live.size(); ++i)
      ASSERT_LT(std::make_pair(priority[live[i - 1]], live[i - 1]),
                std::make_pair(priority[live[i]], live[i]))
          << "request " << live[i - 1] << " waits before request " << live[i];
  };
  auto cancelOne = [&] {
    std::vector<int64_t> live = h.scheduler.liveRequests();
    if (live.empty())
      return;
    int64_t id = live[static_cast<size_t>(uniform(0, int64_t(live.size()) - 1))];
    ASSERT_TRUE(h.scheduler.cancel(id).isOk());
    cancelled.insert(id);
  };

  int added = 0;
  for (int step = 0; added < 200 || h.scheduler.liveRequests().size() > 0; ++step) {
    ASSERT_LT(step, 20000) << "no progress";
    for (int64_t arrivals = uniform(0, 2); arrivals > 0 && added < 200; --arrivals, ++added) {
      std::vector<int64_t> prompt;
      if (uniform(0, 2) > 0) {
        const auto &shared = systemPrompts[static_cast<size_t>(uniform(0, 3))];
        prompt.assign(shared.begin(), shared.begin() + uniform(1, 20));
      }
      for (int64_t n = uniform(prompt.empty() ? 1 : 0, 12); n > 0; --n)
        prompt.push_back(uniform(0, 999));
      int64_t promptLength = static_cast<int64_t>(prompt.size());
      int64_t maxNew = std::min(uniform(1, 12), maxLength - promptLength);
      const int64_t given = sim.priorities ? uniform(-2, 2) : 0;
      priority[h.add(std::move(prompt), maxNew, sim.drafts, given)] = given;
    }
    if (uniform(0, 99) < 3)
      cancelOne();
    StepPlan plan = h.schedule();
    checkInvariants(h.scheduler, &plan, !sim.priorities);
    checkQueueOrder();
    if (uniform(0, 99) < 3)
      cancelOne();  // between schedule() and commit()
    h.runAndCommit(plan);
    checkInvariants(h.scheduler, nullptr, !sim.priorities);
    checkQueueOrder();
    if (HasFatalFailure())
      return;
  }

  for (const auto &[id, tokens] : h.expected) {
    if (cancelled.count(id)) {
      EXPECT_EQ(h.finished.count(id), 0u);
      continue;
    }
    ASSERT_EQ(h.finished.count(id), 1u) << "request " << id << " never finished";
    EXPECT_EQ(h.finished[id], tokens) << "request " << id;
  }
  EXPECT_EQ(h.expected.size(), 200u);
  EXPECT_GT(cancelled.size(), 0u);
  EXPECT_EQ(h.scheduler.pool().freeBlocks(), sim.numBlocks);
  EXPECT_GT(h.scheduler.preemptions(), 0u) << "the pool was meant to be too small";
  if (sim.drafts) {
    EXPECT_GT(h.scheduler.acceptedDraftTokens(), 0u);
    EXPECT_LT(h.scheduler.acceptedDraftTokens(), h.scheduler.draftTokens())
        << "some drafts were meant to be rejected";
  }
  if (sim.prefixCaching)
    EXPECT_GT(h.scheduler.prefixHits(), 0u);
  else
    EXPECT_EQ(h.scheduler.prefixHits() + h.scheduler.prefixMisses(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Pools, SchedulerSimulation,
                         ::testing::Values(SimulationCase{4, 16, 16, true, 1},
                                           SimulationCase{4, 16, 16, false, 2},
                                           SimulationCase{2, 24, 8, true, 3},
                                           SimulationCase{1, 48, 32, true, 4},
                                           SimulationCase{8, 8, 24, true, 5},
                                           SimulationCase{4, 16, 16, true, 6, 3},
                                           SimulationCase{1, 48, 32, true, 7, 4},
                                           SimulationCase{2, 24, 8, false, 8, 2},
                                           SimulationCase{4, 16, 16, true, 9, 0, true},
                                           SimulationCase{2, 24, 8, true, 10, 2, true}));

} // namespace
} // namespace dsrt::engine
