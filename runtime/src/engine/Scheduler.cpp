#include "engine/Scheduler.h"

#include <algorithm>
#include <string>

namespace dsrt::engine {
namespace {

Status checkOptions(const SchedulerOptions &options) {
  auto atLeastOne = [](const char *name, int64_t value) {
    if (value >= 1)
      return Status::ok();
    return Status::error(std::string("scheduler option ") + name + " must be at least 1, got " +
                         std::to_string(value));
  };
  DSRT_RETURN_IF_ERROR(atLeastOne("maxTokensPerStep", options.maxTokensPerStep));
  DSRT_RETURN_IF_ERROR(atLeastOne("maxRunningSequences", options.maxRunningSequences));
  DSRT_RETURN_IF_ERROR(atLeastOne("maxSequenceLength", options.maxSequenceLength));
  DSRT_RETURN_IF_ERROR(atLeastOne("draftNgramMin", options.draftNgramMin));
  DSRT_RETURN_IF_ERROR(atLeastOne("draftMaxSequences", options.draftMaxSequences));
  if (options.draftNgramMax < options.draftNgramMin)
    return Status::error("scheduler option draftNgramMax must be at least draftNgramMin (" +
                         std::to_string(options.draftNgramMin) + "), got " +
                         std::to_string(options.draftNgramMax));
  return Status::ok();
}

Status unknownRequest(const char *verb, int64_t id) {
  return Status::error(std::string("cannot ") + verb + " request " + std::to_string(id) +
                       ": request " + std::to_string(id) + " is unknown or finished");
}

} // namespace

int64_t StepPlan::scheduledTokens() const {
  int64_t total = 0;
  for (const ScheduledChunk &chunk : chunks)
    total += chunk.count;
  return total;
}

Scheduler::Scheduler(const SchedulerOptions &options, BlockPool pool)
    : options_(options), pool_(std::move(pool)), configStatus_(checkOptions(options)) {
  if (configStatus_.isOk())
    configStatus_ = pool_.validate();
}

int64_t Scheduler::blocksFor(int64_t tokens) const {
  return (tokens + pool_.blockSize() - 1) / pool_.blockSize();
}

Status Scheduler::add(std::vector<int64_t> prompt, int64_t maxNewTokens, int64_t &id,
                      bool takesPrefixHits, int64_t speculativeTokens, int64_t priority) {
  DSRT_RETURN_IF_ERROR(configStatus_);
  if (prompt.empty())
    return Status::error("a request needs at least one prompt token");
  if (maxNewTokens < 1)
    return Status::error("a request must generate at least 1 token, got maxNewTokens " +
                         std::to_string(maxNewTokens));
  int64_t promptLength = static_cast<int64_t>(prompt.size());
  // Written so that a huge maxNewTokens cannot overflow the sum.
  if (promptLength > options_.maxSequenceLength ||
      maxNewTokens > options_.maxSequenceLength - promptLength)
    return Status::error("a request of " + std::to_string(promptLength) + " prompt tokens and " +
                         std::to_string(maxNewTokens) +
                         " new tokens exceeds the maximum sequence length " +
                         std::to_string(options_.maxSequenceLength));
  int64_t total = promptLength + maxNewTokens;
  // Checked against the whole pool so that a request running alone always fits: that is
  // what lets preemption always make progress.
  int64_t needed = blocksFor(total);
  if (needed > pool_.totalBlocks())
    return Status::error("a request of " + std::to_string(total) + " tokens needs " +
                         std::to_string(needed) + " KV blocks of " +
                         std::to_string(pool_.blockSize()) + " tokens, but the pool has " +
                         std::to_string(pool_.totalBlocks()));
  Sequence seq;
  seq.id = nextId_++;
  seq.tokens = std::move(prompt);
  seq.promptLength = promptLength;
  seq.maxNewTokens = maxNewTokens;
  seq.takesPrefixHits = takesPrefixHits;
  seq.speculativeTokens = std::max<int64_t>(0, speculativeTokens);
  seq.draftLimit = seq.speculativeTokens;
  seq.priority = priority;
  id = seq.id;
  enqueueWaiting(seq);
  sequences_.emplace(id, std::move(seq));
  return Status::ok();
}

void Scheduler::enqueueWaiting(const Sequence &seq) {
  // After every waiting sequence that goes before it (waiting_ is sorted): for equal
  // priorities an arrival goes to the back, and a preempted sequence, older than every
  // waiting one, to the front.
  auto place = std::upper_bound(waiting_.begin(), waiting_.end(), seq.id,
                                [&](int64_t id, int64_t other) {
                                  const Sequence &waiting = sequences_.at(other);
                                  return std::make_pair(seq.priority, id) <
                                         std::make_pair(waiting.priority, waiting.id);
                                });
  waiting_.insert(place, seq.id);
}

Scheduler::Sequence &Scheduler::preemptionVictim() {
  Sequence *victim = nullptr;
  for (int64_t id : running_) {
    Sequence &seq = sequences_.at(id);
    if (!victim || std::make_pair(seq.priority, seq.id) > std::make_pair(victim->priority,
                                                                            victim->id))
      victim = &seq;
  }
  return *victim;
}

void Scheduler::computeBlockHashes(Sequence &seq, size_t fullBlocks) {
  size_t blockSize = static_cast<size_t>(pool_.blockSize());
  while (seq.blockHashes.size() < fullBlocks) {
    size_t index = seq.blockHashes.size();
    uint64_t parent = index == 0 ? BlockPool::kRootHash : seq.blockHashes.back();
    seq.blockHashes.push_back(
        BlockPool::chainHash(parent, seq.tokens.data() + index * blockSize, blockSize));
  }
}

void Scheduler::releaseBlocks(Sequence &seq) {
  // Last block first: cached blocks are evicted in release order, so the tail of a prefix
  // chain goes before its head, which more requests share.
  for (auto block = seq.blocks.rbegin(); block != seq.blocks.rend(); ++block) {
    // Cannot fail: a table holds exactly one reference to each of its blocks.
    Status released = pool_.release(*block);
    (void)released;
  }
  seq.blocks.clear();
  seq.computed = 0;
  seq.publishedBlocks = 0;
}

void Scheduler::scheduleChunk(Sequence &seq, int64_t count, StepState &step) {
  ScheduledChunk chunk;
  chunk.requestId = seq.id;
  chunk.start = seq.computed;
  chunk.count = count;
  chunk.samples = seq.computed + count == static_cast<int64_t>(seq.tokens.size());
  step.plan.chunks.push_back(std::move(chunk));
  step.budget -= count;
}

void Scheduler::preempt(Sequence &victim, StepState &step) {
  releaseBlocks(victim);
  victim.state = SequenceState::Waiting;
  running_.erase(std::find(running_.begin(), running_.end(), victim.id));
  // Before anything of its priority that arrived after it.
  enqueueWaiting(victim);
  std::vector<ScheduledChunk> &chunks = step.plan.chunks;
  auto chunk = std::find_if(chunks.begin(), chunks.end(), [&](const ScheduledChunk &c) {
    return c.requestId == victim.id;
  });
  if (chunk != chunks.end()) {
    step.budget += chunk->count;
    chunks.erase(chunk);
  }
  step.plan.preempted.push_back(victim.id);
  step.preempted = true;
  ++preemptions_;
}

bool Scheduler::growRunning(Sequence &seq, int64_t count, StepState &step) {
  int64_t needed = blocksFor(seq.computed + count) - static_cast<int64_t>(seq.blocks.size());
  while (needed > 0) {
    BlockId block = pool_.allocate();
    if (block != kNoBlock) {
      seq.blocks.push_back(block);
      --needed;
      continue;
    }
    // `seq` is running, so running_ is not empty. A sequence alone always fits (add()
    // checks it against the whole pool), so this ends before `seq` is the only one left,
    // or by preempting `seq` itself, never in a loop.
    Sequence &victim = preemptionVictim();
    bool preemptsItself = &victim == &seq;
    preempt(victim, step);
    if (preemptsItself)
      return false;
  }
  return true;
}

bool Scheduler::admitHead(StepState &step) {
  Sequence &seq = sequences_.at(waiting_.front());
  int64_t blockSize = pool_.blockSize();
  int64_t length = static_cast<int64_t>(seq.tokens.size());
  // Full blocks before the last token only: the engine needs that token computed for the
  // logits it samples from, even when the whole prompt is cached.
  size_t candidates = static_cast<size_t>((length - 1) / blockSize);
  std::vector<BlockId> hits;
  int64_t cachedHits = 0;  // hits that come out of the evictable blocks
  if (pool_.prefixCaching() && seq.takesPrefixHits) {
    computeBlockHashes(seq, candidates);
    for (size_t i = 0; i < candidates; ++i) {
      BlockId block = pool_.peek(seq.blockHashes[i]);
      if (block == kNoBlock)
        break;
      hits.push_back(block);
      cachedHits += pool_.refCount(block) == 0;
    }
  }
  int64_t hitTokens = static_cast<int64_t>(hits.size()) * blockSize;
  int64_t count = std::min(length - hitTokens, step.budget);
  int64_t freshBlocks = blocksFor(hitTokens + count) - static_cast<int64_t>(hits.size());
  if (freshBlocks + cachedHits > pool_.freeBlocks())
    return false;

  // Hits first: taking them out of the evictable blocks keeps allocate() from evicting them.
  for (size_t i = 0; i < hits.size(); ++i)
    seq.blocks.push_back(pool_.lookup(seq.blockHashes[i]));
  if (pool_.prefixCaching() && seq.takesPrefixHits)
    pool_.countMisses(candidates - hits.size());
  for (int64_t i = 0; i < freshBlocks; ++i)
    seq.blocks.push_back(pool_.allocate());  // fits: checked above
  seq.computed = hitTokens;
  seq.publishedBlocks = hits.size();
  if (seq.cachedPromptTokens < 0)
    seq.cachedPromptTokens = hitTokens;
  seq.state = SequenceState::Running;
  waiting_.pop_front();
  running_.push_back(seq.id);
  scheduleChunk(seq, count, step);
  return true;
}

Status Scheduler::schedule(StepPlan &plan) {
  DSRT_RETURN_IF_ERROR(configStatus_);
  if (stepPending_)
    return Status::error("schedule() called before the previous step was committed");
  plan.chunks.clear();
  plan.preempted.clear();
  StepState step{plan, options_.maxTokensPerStep};

  // A copy: preemption removes sequences from running_ while we walk it.
  std::vector<int64_t> running = running_;
  auto remaining = [](const Sequence &seq) {
    return static_cast<int64_t>(seq.tokens.size()) - seq.computed;
  };
  // Decode first: one token each keeps every generating sequence moving, and decode is what
  // a user waits on between tokens.
  for (int64_t id : running) {
    if (step.budget == 0)
      break;
    Sequence &seq = sequences_.at(id);
    if (seq.state != SequenceState::Running || remaining(seq) != 1)
      continue;
    if (growRunning(seq, 1, step))
      scheduleChunk(seq, 1, step);
  }
  // Then the prompts (or recomputations) already under way, in chunks.
  for (int64_t id : running) {
    if (step.budget == 0)
      break;
    Sequence &seq = sequences_.at(id);
    if (seq.state != SequenceState::Running || remaining(seq) <= 1)
      continue;
    int64_t count = std::min(remaining(seq), step.budget);
    if (growRunning(seq, count, step))
      scheduleChunk(seq, count, step);
  }
  // Then new work, strictly in order: stopping at a head that does not fit, rather than
  // skipping it, is what keeps long requests from starving behind short ones.
  if (!step.preempted) {
    while (!waiting_.empty() && step.budget > 0 &&
           runningCount() < options_.maxRunningSequences && admitHead(step)) {
    }
  }
  // Last, drafts from the budget left: a guess takes no token from a prompt, and its blocks,
  // taken after everything else's, cannot make anything else preempt.
  addDrafts(step);

  pendingChunks_.clear();
  for (ScheduledChunk &chunk : plan.chunks) {
    chunk.blockTable = sequences_.at(chunk.requestId).blocks;
    pendingChunks_.push_back(
        {chunk.requestId, chunk.start, chunk.count, chunk.samples, chunk.drafts});
  }
  // An empty step needs no commit: an idle engine just waits for requests.
  stepPending_ = !plan.chunks.empty();
  peakUsedBlocks_ = std::max(peakUsedBlocks_, pool_.usedBlocks());
  return Status::ok();
}

std::vector<int64_t> Scheduler::draftsFor(const Sequence &seq, int64_t most) const {
  const std::vector<int64_t> &tokens = seq.tokens;
  const int64_t length = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min(options_.draftNgramMax, length - 1); n >= options_.draftNgramMin;
       --n) {
    // The latest earlier occurrence: `end` is the index of its last token.
    for (int64_t end = length - 2; end >= n - 1; --end)
      if (std::equal(tokens.end() - n, tokens.end(), tokens.begin() + (end - n + 1))) {
        const int64_t count = std::min(most, length - 1 - end);
        return {tokens.begin() + end + 1, tokens.begin() + end + 1 + count};
      }
  }
  return {};
}

void Scheduler::addDrafts(StepState &step) {
  int64_t decoding = 0;
  for (const ScheduledChunk &chunk : step.plan.chunks)
    decoding += chunk.count == 1 && chunk.samples;
  if (decoding > options_.draftMaxSequences)
    return;
  for (ScheduledChunk &chunk : step.plan.chunks) {
    if (step.budget == 0)
      break;
    Sequence &seq = sequences_.at(chunk.requestId);
    if (seq.speculativeTokens == 0 || chunk.count != 1 || !chunk.samples)
      continue;
    // Every accepted draft is a token emitted, and one more comes after them: no more
    // drafts than the request's tokens left, less one.
    const int64_t left =
        seq.maxNewTokens - (static_cast<int64_t>(seq.tokens.size()) - seq.promptLength);
    const int64_t most = std::min({seq.draftLimit, left - 1, step.budget});
    if (most <= 0)
      continue;
    std::vector<int64_t> drafts = draftsFor(seq, most);
    // Blocks for the drafts' positions, [computed + 1, computed + 1 + drafts), from what is
    // free only: fewer drafts where the pool runs out.
    const int64_t blockSize = pool_.blockSize();
    while (!drafts.empty() &&
           blocksFor(seq.computed + 1 + static_cast<int64_t>(drafts.size())) >
               static_cast<int64_t>(seq.blocks.size())) {
      BlockId block = pool_.allocate();
      if (block != kNoBlock) {
        seq.blocks.push_back(block);
        continue;
      }
      drafts.resize(static_cast<size_t>(
          std::max<int64_t>(0, static_cast<int64_t>(seq.blocks.size()) * blockSize -
                                   seq.computed - 1)));
    }
    if (drafts.empty())
      continue;
    const int64_t count = static_cast<int64_t>(drafts.size());
    chunk.count += count;
    step.budget -= count;
    chunk.drafts = std::move(drafts);
    draftTokens_ += static_cast<uint64_t>(count);
  }
}

Status Scheduler::publishComputedBlocks(Sequence &seq) {
  if (!pool_.prefixCaching())
    return Status::ok();
  // Only blocks whose every token has KV: a block still being filled changes.
  size_t computedBlocks = static_cast<size_t>(seq.computed / pool_.blockSize());
  computeBlockHashes(seq, computedBlocks);
  for (; seq.publishedBlocks < computedBlocks; ++seq.publishedBlocks) {
    size_t index = seq.publishedBlocks;
    DSRT_RETURN_IF_ERROR(pool_.publish(seq.blocks[index], seq.blockHashes[index]));
  }
  return Status::ok();
}

Status Scheduler::commit(const std::vector<std::pair<int64_t, int64_t>> &sampled) {
  if (!stepPending_) {
    if (!sampled.empty())
      return Status::error("commit() with sampled tokens but no scheduled step");
    lastFinished_.clear();
    return Status::ok();
  }
  // Validate everything first so that a wrong call leaves the step pending and intact.
  std::unordered_map<int64_t, size_t> chunkOf;
  for (size_t i = 0; i < pendingChunks_.size(); ++i)
    chunkOf.emplace(pendingChunks_[i].requestId, i);
  // Each request's tokens, a run of `sampled` (its accepted drafts, then one more): where
  // the run starts and how long it is.
  std::unordered_map<int64_t, std::pair<size_t, size_t>> tokensOf;
  for (size_t i = 0; i < sampled.size(); ++i) {
    auto [run, fresh] = tokensOf.emplace(sampled[i].first, std::make_pair(i, size_t(0)));
    if (!fresh && run->second.first + run->second.second != i)
      return Status::error("commit(): request " + std::to_string(sampled[i].first) +
                           "'s sampled tokens are not in one run");
    ++run->second.second;
  }
  for (const auto &[id, run] : tokensOf) {
    const auto token = [&, at = run.first](size_t i) { return sampled[at + i].second; };
    const size_t count = run.second;
    if (id < 1 || id >= nextId_)
      return Status::error("commit(): request " + std::to_string(id) + " is unknown");
    if (!contains(id))
      continue;  // cancelled or finished since schedule()
    auto chunk = chunkOf.find(id);
    if (chunk == chunkOf.end() || !pendingChunks_[chunk->second].samples)
      return Status::error("commit(): request " + std::to_string(id) +
                           " was not scheduled to sample this step");
    const std::vector<int64_t> &drafts = pendingChunks_[chunk->second].drafts;
    if (count > 1 + drafts.size())
      return Status::error("commit(): request " + std::to_string(id) + " has " +
                           std::to_string(count) + " sampled tokens for " +
                           std::to_string(drafts.size()) + " drafts");
    // Only what the model confirmed: every token before the last is the draft of its row.
    for (size_t i = 0; i + 1 < count; ++i)
      if (token(i) != drafts[i])
        return Status::error("commit(): request " + std::to_string(id) + "'s token " +
                             std::to_string(i) + " is not its draft");
  }
  for (const PendingChunk &chunk : pendingChunks_) {
    auto seq = sequences_.find(chunk.requestId);
    if (seq == sequences_.end())
      continue;
    if (seq->second.state != SequenceState::Running || seq->second.computed != chunk.start)
      return Status::error("commit(): request " + std::to_string(chunk.requestId) +
                           " changed since schedule()");
    if (chunk.samples && !tokensOf.count(chunk.requestId))
      return Status::error("commit(): the sampled token of request " +
                           std::to_string(chunk.requestId) + " is missing");
  }

  lastFinished_.clear();
  Status published = Status::ok();
  for (const PendingChunk &chunk : pendingChunks_) {
    auto found = sequences_.find(chunk.requestId);
    if (found == sequences_.end())
      continue;
    Sequence &seq = found->second;
    // A chunk's rows less its rejected drafts': the first of those held a guess.
    const std::pair<size_t, size_t> emitted =
        chunk.samples ? tokensOf.at(seq.id) : std::make_pair(size_t(0), size_t(0));
    const int64_t accepted = chunk.samples ? static_cast<int64_t>(emitted.second) - 1 : 0;
    seq.computed = chunk.start + chunk.count - static_cast<int64_t>(chunk.drafts.size()) +
                   accepted;
    acceptedDraftTokens_ += static_cast<uint64_t>(accepted);
    if (!chunk.drafts.empty())
      seq.draftLimit = accepted == static_cast<int64_t>(chunk.drafts.size())
                           ? std::min(seq.speculativeTokens, 2 * seq.draftLimit)
                           : accepted + 1;
    for (size_t i = 0; i < emitted.second; ++i)
      seq.tokens.push_back(sampled[emitted.first + i].second);
    Status status = publishComputedBlocks(seq);
    if (!status.isOk() && published.isOk())
      published = status;
    if (!chunk.samples)
      continue;
    if (static_cast<int64_t>(seq.tokens.size()) - seq.promptLength < seq.maxNewTokens)
      continue;
    FinishedRequest finished;
    finished.id = seq.id;
    finished.promptLength = seq.promptLength;
    finished.tokens = std::move(seq.tokens);
    lastFinished_.push_back(std::move(finished));
    Status removed = removeRequest(chunk.requestId, "finish");
    (void)removed;  // cannot fail: the request was just found
  }
  stepPending_ = false;
  pendingChunks_.clear();
  // Only an internal inconsistency fails here, after a step that was otherwise applied.
  return published;
}

Status Scheduler::removeRequest(int64_t id, const char *verb) {
  auto found = sequences_.find(id);
  if (found == sequences_.end())
    return unknownRequest(verb, id);
  Sequence &seq = found->second;
  releaseBlocks(seq);
  if (seq.state == SequenceState::Running)
    running_.erase(std::find(running_.begin(), running_.end(), id));
  else
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  sequences_.erase(found);
  return Status::ok();
}

Status Scheduler::finish(int64_t id) { return removeRequest(id, "finish"); }

Status Scheduler::resetPrefixCache() {
  if (!running_.empty() || !waiting_.empty())
    return Status::error("cannot reset the prefix cache while requests run (" +
                         std::to_string(running_.size()) + " running, " +
                         std::to_string(waiting_.size()) + " waiting)");
  return pool_.forgetCached();
}

Status Scheduler::cancel(int64_t id) { return removeRequest(id, "cancel"); }

const std::vector<int64_t> &Scheduler::tokens(int64_t id) const {
  static const std::vector<int64_t> none;
  auto found = sequences_.find(id);
  return found == sequences_.end() ? none : found->second.tokens;
}

const std::vector<BlockId> &Scheduler::blockTable(int64_t id) const {
  static const std::vector<BlockId> none;
  auto found = sequences_.find(id);
  return found == sequences_.end() ? none : found->second.blocks;
}

int64_t Scheduler::generatedCount(int64_t id) const {
  auto found = sequences_.find(id);
  if (found == sequences_.end())
    return -1;
  return static_cast<int64_t>(found->second.tokens.size()) - found->second.promptLength;
}

int64_t Scheduler::computedCount(int64_t id) const {
  auto found = sequences_.find(id);
  return found == sequences_.end() ? -1 : found->second.computed;
}

int64_t Scheduler::cachedPromptTokens(int64_t id) const {
  auto found = sequences_.find(id);
  return found == sequences_.end() ? -1 : found->second.cachedPromptTokens;
}

std::vector<int64_t> Scheduler::liveRequests() const {
  std::vector<int64_t> ids(running_.begin(), running_.end());
  ids.insert(ids.end(), waiting_.begin(), waiting_.end());
  return ids;
}

} // namespace dsrt::engine
