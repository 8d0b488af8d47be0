// Iteration-level scheduling for continuous batching: each step decides which tokens of
// which sequences the engine computes, over a paged KV cache (BlockPool).
//
// The engine's loop:
//   scheduler.add(prompt, maxNewTokens, id)         any time
//   scheduler.schedule(plan)                        one step; run plan.chunks
//   scheduler.commit(sampled)                       one token per chunk that samples
//   for each sampled stop token not in lastFinished(): finish(id)
//   cancel(id)                                      any time, even between schedule and commit
//
// Policy, per step, under maxTokensPerStep:
//   1. running sequences with one token left to compute (decode), one token each;
//   2. running sequences still computing their prompt (chunked prefill);
//   3. waiting sequences in order of (priority, arrival), admitted while the running cap
//      and the pool allow; the head of the queue is never skipped for a later one (no
//      starvation among equal priorities; every request has priority 0 unless its caller
//      gave one, and then this is FCFS);
//   4. drafts of the decode sequences that speculate (below).
// Speculative decoding (prompt lookup, vLLM's "ngram"): a decode chunk of a sequence added
// with speculativeTokens > 0 also computes up to that many drafts, the tokens that followed
// the latest earlier occurrence of the sequence's last n tokens (n from draftNgramMax down
// to draftNgramMin), from the budget left after everything else (4. below), into blocks the
// pool has free (a guess never preempts), in steps of at most draftMaxSequences decode
// sequences (the engine option speculative_max_batch) (more make the step bound by its multiply-adds, where a rejected draft's row
// costs and saves nothing). A sequence's drafts follow its luck: after a rejection it drafts
// one more than it had accepted, after a full acceptance twice as many, up to
// speculativeTokens. The engine keeps the drafts its model confirms.
// A running sequence that needs a block when none is left preempts the running sequence of
// the largest (priority, arrival): of equal priorities, the one that arrived last (vLLM's
// choice under either of its policies). Recompute: its blocks are released, and it goes
// back to the waiting queue with its generated tokens, at its place by (priority, arrival),
// which for equal priorities is the front. No sequence is admitted in a step that preempted
// one: the pool has just proven too small.
#ifndef DSRT_ENGINE_SCHEDULER_H
#define DSRT_ENGINE_SCHEDULER_H

#include "core/Status.h"
#include "engine/BlockPool.h"

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dsrt::engine {

struct SchedulerOptions {
  int64_t maxTokensPerStep = 0;     // tokens computed per step, all sequences together
  int64_t maxRunningSequences = 0;  // sequences holding KV blocks at once
  int64_t maxSequenceLength = 0;    // prompt + new tokens of one request
  int64_t draftNgramMax = 3, draftNgramMin = 1;  // the n-grams drafts are looked up by
  int64_t draftMaxSequences = 8;
};

enum class SequenceState { Waiting, Running };

struct ScheduledChunk {
  int64_t requestId = 0;
  // Tokens [start, start + count) of the sequence's tokens are computed this step; those
  // before `start` already have KV in the blocks of `blockTable`.
  int64_t start = 0;
  int64_t count = 0;
  // The chunk ends at the sequence's last token: the engine samples a token from it.
  bool samples = false;
  // A decode chunk's drafts: the tokens of its rows after the first (speculative, not yet
  // the sequence's). Every row samples; commit() takes the tokens the engine accepted.
  std::vector<int64_t> drafts;
  // A copy, valid even when the request is cancelled before commit(). Position p lives in
  // blockTable[p / blockSize] at slot p % blockSize; the table covers start + count.
  std::vector<BlockId> blockTable;
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;  // decode chunks first, then prefill chunks
  // Running sequences preempted this step: their KV is gone and will be recomputed.
  std::vector<int64_t> preempted;
  int64_t scheduledTokens() const;
};

struct FinishedRequest {
  int64_t id = 0;
  int64_t promptLength = 0;
  std::vector<int64_t> tokens;  // prompt followed by the generated tokens
};

class Scheduler {
public:
  // Owns the pool, so that nobody else can release or publish blocks behind its back.
  // Invalid options or an invalid pool leave a scheduler whose add() and schedule() return
  // what validate() says.
  Scheduler(const SchedulerOptions &options, BlockPool pool);

  Status validate() const { return configStatus_; }

  // Queues a request; `id` gets its id (1, 2, 3...). Refused: an empty prompt,
  // maxNewTokens < 1, prompt + maxNewTokens over maxSequenceLength, and a request whose
  // prompt + maxNewTokens tokens need more blocks than the whole pool.
  // takesPrefixHits false: the request computes its whole prompt (prompt log-probabilities
  // need every position's logits); its full blocks are still published.
  // speculativeTokens: drafts its decode chunks may carry (0: none). priority: lower runs
  // first (vLLM's), ties by arrival.
  Status add(std::vector<int64_t> prompt, int64_t maxNewTokens, int64_t &id,
             bool takesPrefixHits = true, int64_t speculativeTokens = 0,
             int64_t priority = 0);

  // The next step. An error when the previous step was not committed yet. A plan without
  // chunks (nothing to run) needs no commit(); every other plan needs one, also when the
  // engine failed to run it (cancel its requests, then commit({})).
  Status schedule(StepPlan &plan);

  // After the engine ran the last plan: `sampled` holds (request id, token) for every chunk
  // that samples, except requests cancelled or finished since schedule() (those entries
  // may be present or not; they are ignored). A chunk with drafts has 1 to 1 + drafts
  // entries, in order: its accepted drafts, then the token sampled after the last of them
  // (the KV of the rejected drafts' rows is dropped). Advances the computed tokens, publishes the
  // newly computed full blocks for prefix caching, appends the sampled tokens, and finishes
  // (removes, releasing their blocks) the requests that reached maxNewTokens: see
  // lastFinished(). Validates everything before it changes anything.
  Status commit(const std::vector<std::pair<int64_t, int64_t>> &sampled);
  // The requests the last commit() finished by length, with their tokens.
  const std::vector<FinishedRequest> &lastFinished() const { return lastFinished_; }

  // Removes a request wherever it is and releases its blocks: finish() when the engine saw
  // a stop token (read tokens(id) first: they go with it), cancel() when the client left.
  // An error for an unknown id or one already finished or cancelled.
  Status finish(int64_t id);
  Status cancel(int64_t id);
  // BlockPool::forgetCached, when no request is running or waiting (else an error).
  Status resetPrefixCache();

  // Queries. For an id that is not live, tokens() and blockTable() are empty and the counts
  // are -1. The references last until the next commit(), finish() or cancel().
  // Not thread-safe, like everything here: the engine serializes the calls.
  bool contains(int64_t id) const { return sequences_.count(id) != 0; }
  const std::vector<int64_t> &tokens(int64_t id) const;
  int64_t generatedCount(int64_t id) const;
  int64_t computedCount(int64_t id) const;
  // The prompt tokens whose KV the sequence's first admission took from the prefix cache
  // (whole blocks; vLLM's num_cached_tokens, which a recompute after preemption leaves as
  // it was), -1 before that.
  int64_t cachedPromptTokens(int64_t id) const;
  const std::vector<BlockId> &blockTable(int64_t id) const;
  std::vector<int64_t> liveRequests() const;  // running then waiting, each in queue order

  int64_t runningCount() const { return static_cast<int64_t>(running_.size()); }
  int64_t waitingCount() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t usedBlocks() const { return pool_.usedBlocks(); }
  int64_t peakUsedBlocks() const { return peakUsedBlocks_; }
  uint64_t prefixHits() const { return pool_.prefixHits(); }
  uint64_t prefixMisses() const { return pool_.prefixMisses(); }
  uint64_t preemptions() const { return preemptions_; }
  uint64_t draftTokens() const { return draftTokens_; }
  uint64_t acceptedDraftTokens() const { return acceptedDraftTokens_; }
  const BlockPool &pool() const { return pool_; }
  const SchedulerOptions &options() const { return options_; }

private:
  struct Sequence {
    int64_t id = 0;
    std::vector<int64_t> tokens;
    int64_t promptLength = 0;
    int64_t maxNewTokens = 0;
    int64_t computed = 0;  // tokens whose KV is in `blocks`
    std::vector<BlockId> blocks;
    SequenceState state = SequenceState::Waiting;
    // blockHashes[i]: the chained hash of tokens [0, (i+1) * blockSize), extended lazily
    // as tokens fill blocks; its last entry is the hash of the last full block.
    std::vector<uint64_t> blockHashes;
    size_t publishedBlocks = 0;  // leading blocks already published or taken from cache
    bool takesPrefixHits = true;
    int64_t cachedPromptTokens = -1;  // see cachedPromptTokens(); -1 until admitted
    int64_t speculativeTokens = 0;
    int64_t draftLimit = 0;  // its next drafts at most (speculativeTokens, then its luck's)
    int64_t priority = 0;
  };

  // One step in the making: the plan plus what scheduling it has spent.
  struct StepState {
    StepPlan &plan;
    int64_t budget;
    bool preempted = false;
  };

  Status removeRequest(int64_t id, const char *verb);
  void releaseBlocks(Sequence &seq);
  void computeBlockHashes(Sequence &seq, size_t fullBlocks);
  Status publishComputedBlocks(Sequence &seq);
  int64_t blocksFor(int64_t tokens) const;
  // Gives `seq` the blocks for `count` more tokens, preempting others if needed. False when
  // `seq` itself had to be preempted.
  bool growRunning(Sequence &seq, int64_t count, StepState &step);
  void preempt(Sequence &victim, StepState &step);
  // Puts `seq` into waiting_ at its place by (priority, id).
  void enqueueWaiting(const Sequence &seq);
  // The running sequence preemption takes first: the largest (priority, id).
  Sequence &preemptionVictim();
  void scheduleChunk(Sequence &seq, int64_t count, StepState &step);
  // Admits the head of the waiting queue with its first chunk; false when it does not fit.
  bool admitHead(StepState &step);
  // Up to `most` tokens that followed the latest earlier occurrence of seq's last n tokens.
  std::vector<int64_t> draftsFor(const Sequence &seq, int64_t most) const;
  void addDrafts(StepState &step);

  SchedulerOptions options_;
  BlockPool pool_;
  Status configStatus_;
  int64_t nextId_ = 1;
  std::unordered_map<int64_t, Sequence> sequences_;
  // running_ in admission order; waiting_ by (priority, id). With equal priorities the
  // back of running_ is preempted first and goes back to the front of waiting_, so
  // running_ then waiting_ list the ids in arrival order, and admission order is FCFS.
  std::vector<int64_t> running_;
  std::deque<int64_t> waiting_;
  // The chunks handed out by schedule(), without their tables, kept until commit().
  struct PendingChunk {
    int64_t requestId;
    int64_t start;
    int64_t count;
    bool samples;
    std::vector<int64_t> drafts;
  };
  bool stepPending_ = false;
  std::vector<PendingChunk> pendingChunks_;
  std::vector<FinishedRequest> lastFinished_;
  int64_t peakUsedBlocks_ = 0;
  uint64_t preemptions_ = 0;
  uint64_t draftTokens_ = 0, acceptedDraftTokens_ = 0;
};

} // namespace dsrt::engine

#endif
