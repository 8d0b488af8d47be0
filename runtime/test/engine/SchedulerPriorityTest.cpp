// The scheduler's priorities (vLLM's --scheduling-policy priority): admission by (priority,
// arrival), preemption of the least important running sequence, and its place back in the
// queue; every request still generates what it would alone.
#include "SchedulerHarness.h"

#include <gtest/gtest.h>

#include <map>

namespace dsrt::engine {
namespace {

using namespace scheduler_test;

const ScheduledChunk *chunkOf(const StepPlan &plan, int64_t id) {
  for (const ScheduledChunk &chunk : plan.chunks)
    if (chunk.requestId == id)
      return &chunk;
  return nullptr;
}

SchedulerOptions options(int64_t tokensPerStep, int64_t running, int64_t maxLength) {
  SchedulerOptions o;
  o.maxTokensPerStep = tokensPerStep;
  o.maxRunningSequences = running;
  o.maxSequenceLength = maxLength;
  return o;
}

// The step of each request's first chunk, running the harness until it is idle.
std::map<int64_t, int> firstSteps(Harness &h) {
  std::map<int64_t, int> first;
  for (int step = 0; h.scheduler.runningCount() + h.scheduler.waitingCount() > 0; ++step) {
    EXPECT_LT(step, 1000);
    if (step >= 1000)
      break;
    StepPlan plan = h.step();
    for (const ScheduledChunk &chunk : plan.chunks)
      first.emplace(chunk.requestId, step);
  }
  return first;
}

TEST(SchedulerPriority, LowerPriorityValuesAreAdmittedFirstThenByArrival) {
  // One sequence at a time: the queue's order is the admission order.
  Harness h(options(64, 1, 64), 4, 32, false);
  int64_t a = h.add(iota(3), 2);
  int64_t b = h.add(iota(3, 10), 2, 0, /*priority=*/1);
  int64_t c = h.add(iota(3, 20), 2, 0, /*priority=*/1);
  int64_t d = h.add(iota(3, 30), 2, 0, /*priority=*/-1);
  int64_t e = h.add(iota(3, 40), 2);
  std::map<int64_t, int> first = firstSteps(h);
  ASSERT_EQ(first.size(), 5u);
  EXPECT_EQ(first.at(d), 0);
  EXPECT_LT(first.at(d), first.at(a));
  EXPECT_LT(first.at(a), first.at(e));
  EXPECT_LT(first.at(e), first.at(b));
  EXPECT_LT(first.at(b), first.at(c));
  h.expectFinishedAsAlone();
}

TEST(SchedulerPriority, EqualPrioritiesAreFirstComeFirstServed) {
  Harness h(options(64, 1, 64), 4, 32, false);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 4; ++i)
    ids.push_back(h.add(iota(3, 10 * i), 2, 0, /*priority=*/7));
  std::map<int64_t, int> first = firstSteps(h);
  for (size_t i = 1; i < ids.size(); ++i)
    EXPECT_LT(first.at(ids[i - 1]), first.at(ids[i]));
  h.expectFinishedAsAlone();
}

TEST(SchedulerPriority, PreemptsTheLeastImportantNotTheYoungest) {
  // Two sequences that each need every block of the pool by their end: one must be
  // preempted. a arrived first but matters least; FCFS would preempt b, the youngest.
  Harness h(options(16, 4, 8), 2, 4, false);
  int64_t a = h.add(iota(2), 6, 0, /*priority=*/5);
  int64_t b = h.add(iota(2, 10), 6, 0, /*priority=*/0);
  std::vector<int64_t> preempted;
  for (int step = 0; h.scheduler.runningCount() + h.scheduler.waitingCount() > 0; ++step) {
    ASSERT_LT(step, 100);
    StepPlan plan = h.step();
    preempted.insert(preempted.end(), plan.preempted.begin(), plan.preempted.end());
    if (!plan.preempted.empty()) {
      EXPECT_EQ(chunkOf(plan, a), nullptr);
    }
  }
  ASSERT_FALSE(preempted.empty());
  for (int64_t id : preempted)
    EXPECT_EQ(id, a) << "the more important request was preempted";
  ASSERT_EQ(h.finished.size(), 2u);
  EXPECT_EQ(h.finished[b].size(), 8u);
  h.expectFinishedAsAlone();
}

TEST(SchedulerPriority, APreemptedSequenceWaitsBehindMoreImportantArrivals) {
  // a (priority 1) runs and is preempted by b's growth; c (priority 0) arrived after a
  // but matters more, so it runs before a's recompute; d (priority 1, after a) runs after.
  Harness h(options(16, 2, 8), 2, 4, false);
  int64_t a = h.add(iota(2), 6, 0, /*priority=*/1);
  int64_t b = h.add(iota(2, 10), 6, 0, /*priority=*/0);
  StepPlan plan = h.step();
  ASSERT_NE(chunkOf(plan, a), nullptr);
  ASSERT_NE(chunkOf(plan, b), nullptr);
  int64_t c = h.add(iota(2, 20), 1, 0, /*priority=*/0);
  int64_t d = h.add(iota(2, 30), 1, 0, /*priority=*/1);
  int readmitted = -1, cStarted = -1, dStarted = -1;
  bool preempted = false;
  for (int step = 1; h.scheduler.runningCount() + h.scheduler.waitingCount() > 0; ++step) {
    ASSERT_LT(step, 100);
    plan = h.step();
    for (int64_t id : plan.preempted) {
      EXPECT_EQ(id, a);
      preempted = true;
    }
    if (preempted && readmitted < 0 && chunkOf(plan, a))
      readmitted = step;
    if (cStarted < 0 && chunkOf(plan, c))
      cStarted = step;
    if (dStarted < 0 && chunkOf(plan, d))
      dStarted = step;
  }
  ASSERT_TRUE(preempted);
  EXPECT_LE(cStarted, readmitted) << "the preempted a went before the more important c";
  EXPECT_GE(dStarted, readmitted) << "d, of a's priority and younger, overtook a";
  EXPECT_EQ(h.finished.size(), 4u);
  h.expectFinishedAsAlone();
}

} // namespace
} // namespace dsrt::engine
