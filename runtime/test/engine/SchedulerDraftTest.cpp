// The scheduler's speculative drafts (prompt lookup): what is drafted, within which budget,
// blocks and steps, and that confirmed drafts give each request its tokens alone.
#include "SchedulerHarness.h"

#include <gtest/gtest.h>

namespace dsrt::engine {
namespace {

using namespace scheduler_test;

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

} // namespace
} // namespace dsrt::engine
