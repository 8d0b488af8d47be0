// The step scheduler, driven by a fake model whose "KV cache" stores, in every slot, the
// token it was computed from: a wrong block table, a block reused too early or a wrong prefix
// hit then shows up as a wrong token, not just as a wrong count.
#include "engine/Scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace dsrt::engine {
namespace {

// The fake model's choice of the next token: any deterministic function of all tokens.
int64_t nextToken(const std::vector<int64_t> &context) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t token : context)
    h = (h ^ static_cast<uint64_t>(token)) * 1099511628211ull;
  return static_cast<int64_t>((h >> 17) % 1000);
}

// A model whose text repeats, as greedy decoding's often does: two tokens in three follow
// from the last token alone (a cycle that n-gram drafts then predict), the third from
// everything (which they miss).
int64_t repetitiveToken(const std::vector<int64_t> &context) {
  if (context.size() % 3 == 0)
    return nextToken(context);
  return (context.back() * 7 + 3) % 11;
}

// A model that only repeats: each token from the last one alone, around a cycle.
int64_t cyclicToken(const std::vector<int64_t> &context) { return (context.back() * 7 + 3) % 11; }

using Model = int64_t (*)(const std::vector<int64_t> &);

// What a request generates when it runs alone, without any KV cache.
std::vector<int64_t> generateAlone(std::vector<int64_t> tokens, int64_t maxNewTokens,
                                   Model model = nextToken) {
  for (int64_t i = 0; i < maxNewTokens; ++i)
    tokens.push_back(model(tokens));
  return tokens;
}

std::vector<int64_t> iota(int64_t count, int64_t first = 1) {
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

  int64_t add(std::vector<int64_t> prompt, int64_t maxNewTokens, int64_t drafts = 0) {
    int64_t id = 0;
    Status status = scheduler.add(prompt, maxNewTokens, id, true, drafts);
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

SchedulerOptions options(int64_t tokens, int64_t running, int64_t length) {
  SchedulerOptions o;
  o.maxTokensPerStep = tokens;
  o.maxRunningSequences = running;
  o.maxSequenceLength = length;
  return o;
}

const ScheduledChunk *chunkOf(const StepPlan &plan, int64_t id) {
  for (const ScheduledChunk &chunk : plan.chunks)
    if (chunk.requestId == id)
      return &chunk;
  return nullptr;
}

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
void checkInvariants(const Scheduler &scheduler, const StepPlan *plan) {
  const BlockPool &pool = scheduler.pool();
  std::vector<int> holders(static_cast<size_t>(pool.totalBlocks()), 0);
  std::vector<int64_t> live = scheduler.liveRequests();
  // Running then waiting in arrival order: FCFS survives preemption.
  ASSERT_TRUE(std::is_sorted(live.begin(), live.end()));
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

TEST(Scheduler, DraftsAreTheTokensAfterTheLatestEarlierNgram) {
  // 1 2 3 9 1 2 3 | 4 5: the last 3 tokens (1 2 3) came before, followed by 9 1 2 3 4.
  Harness h(options(16, 4, 64), 4, 16, false, repetitiveToken);
  int64_t id = 0;
  ASSERT_TRUE(h.scheduler.add({1, 2, 3, 9, 1, 2, 3}, 10, id, true, 3).isOk());
  StepPlan prefill = h.schedule();
  ASSERT_EQ(prefill.chunks.size(), 1u);
  EXPECT_TRUE(prefill.chunks[0].drafts.empty()) << "a prompt chunk carries no drafts";
  std::vector<std::pair<int64_t, int64_t>> sampled = {{id, 9}};
  ASSERT_TRUE(h.scheduler.commit(sampled).isOk());
  // Now ... 1 2 3 9: "2 3 9" was followed by "1 2 3", three drafts.
  StepPlan decode = h.schedule();
  ASSERT_EQ(decode.chunks.size(), 1u);
  EXPECT_EQ(decode.chunks[0].drafts, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(decode.chunks[0].count, 4);
  // Two accepted, then another token: computed through the second draft.
  ASSERT_TRUE(h.scheduler.commit({{id, 1}, {id, 2}, {id, 9}}).isOk());
  EXPECT_EQ(h.scheduler.tokens(id), (std::vector<int64_t>{1, 2, 3, 9, 1, 2, 3, 9, 1, 2, 9}));
  EXPECT_EQ(h.scheduler.computedCount(id), 10);
  EXPECT_EQ(h.scheduler.draftTokens(), 3u);
  EXPECT_EQ(h.scheduler.acceptedDraftTokens(), 2u);
  // What commit() refuses: a token that is not its draft, more tokens than rows. The last
  // token, 9, came before at 7, followed by 1 2 9.
  StepPlan next = h.schedule();
  ASSERT_EQ(next.chunks.size(), 1u);
  const std::vector<int64_t> drafts = next.chunks[0].drafts;
  ASSERT_EQ(drafts, (std::vector<int64_t>{1, 2, 9}));
  EXPECT_FALSE(h.scheduler.commit({{id, drafts[0] + 1}, {id, 5}}).isOk());
  std::vector<std::pair<int64_t, int64_t>> tooMany(drafts.size() + 2, {id, 0});
  EXPECT_FALSE(h.scheduler.commit(tooMany).isOk());
  ASSERT_TRUE(h.scheduler.commit({{id, drafts[0] + 1}}).isOk());
}

TEST(Scheduler, DraftsNeverPassTheRequestsEndOrTakeAPromptsBudget) {
  Harness h(options(6, 4, 64), 4, 16, false, repetitiveToken);
  int64_t a = h.add({1, 2, 1, 2, 1, 2}, 3, 8);
  h.step();  // a's prompt, then its first token
  int64_t b = h.add(iota(20, 30), 2, 8);
  StepPlan plan = h.schedule();
  // a: two tokens left, so at most one draft; b's prompt took the rest of the budget first.
  const ScheduledChunk *decode = chunkOf(plan, a);
  ASSERT_NE(decode, nullptr);
  EXPECT_LE(decode->drafts.size(), 1u);
  const ScheduledChunk *prompt = chunkOf(plan, b);
  ASSERT_NE(prompt, nullptr);
  EXPECT_EQ(prompt->count + decode->count, 6);
  EXPECT_EQ(prompt->count, 5) << "the prompt gets all the budget the decode token leaves";
  h.runAndCommit(plan);
  h.runUntilIdle();
  h.expectFinishedAsAlone();
}

TEST(Scheduler, DraftsOnlyInStepsOfAtMostDraftMaxSequencesDecoding) {
  SchedulerOptions o = options(32, 4, 64);
  o.draftMaxSequences = 1;
  Harness h(o, 4, 32, false, cyclicToken);
  // cyclicToken's whole cycle as each prompt (from two places in it): every next token came
  // before, so every decode token finds drafts, and the right ones.
  int64_t a = h.add({2, 6, 1, 10, 7, 8, 4, 9, 0, 3}, 20, 4);
  int64_t b = h.add({8, 4, 9, 0, 3, 2, 6, 1, 10, 7}, 20, 4);
  h.step();  // both prompts, a token each
  StepPlan both = h.schedule();
  ASSERT_NE(chunkOf(both, a), nullptr);
  ASSERT_NE(chunkOf(both, b), nullptr);
  EXPECT_TRUE(chunkOf(both, a)->drafts.empty() && chunkOf(both, b)->drafts.empty())
      << "two sequences decode, one may draft";
  h.runAndCommit(both);
  ASSERT_TRUE(h.scheduler.cancel(b).isOk());
  StepPlan alone = h.schedule();
  ASSERT_NE(chunkOf(alone, a), nullptr);
  EXPECT_FALSE(chunkOf(alone, a)->drafts.empty());
  h.runAndCommit(alone);
}

TEST(Scheduler, SpeculationSavesStepsAndGivesTheTokensAlone) {
  Harness h(options(16, 4, 128), 4, 64, true, cyclicToken);
  h.add({5, 6}, 60, 4);
  int steps = h.runUntilIdle();
  h.expectFinishedAsAlone();
  EXPECT_GT(h.scheduler.acceptedDraftTokens(), 20u);
  EXPECT_LT(steps, 45) << "60 tokens took a step each";
}

struct SimulationCase {
  int64_t blockSize;
  int64_t numBlocks;
  int64_t maxTokensPerStep;
  bool prefixCaching;
  uint32_t seed;
  int64_t drafts = 0;  // each request's speculative tokens (over repetitiveToken's model)
};

void PrintTo(const SimulationCase &sim, std::ostream *out) {
  *out << "blocks of " << sim.blockSize << " x" << sim.numBlocks << ", budget "
       << sim.maxTokensPerStep << (sim.prefixCaching ? ", prefix caching" : "") << ", seed "
       << sim.seed << (sim.drafts ? ", drafts" : "");
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
      h.add(std::move(prompt), maxNew, sim.drafts);
    }
    if (uniform(0, 99) < 3)
      cancelOne();
    StepPlan plan = h.schedule();
    checkInvariants(h.scheduler, &plan);
    if (uniform(0, 99) < 3)
      cancelOne();  // between schedule() and commit()
    h.runAndCommit(plan);
    checkInvariants(h.scheduler, nullptr);
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
                                           SimulationCase{2, 24, 8, false, 8, 2}));

} // namespace
} // namespace dsrt::engine
