#include "engine/Engine.h"

#include "comm/InProcessGroup.h"
#include "engine/Scheduler.h"
#include "engine/TokenSampling.h"
#include "ops/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>

namespace dsrt::engine {

Engine::~Engine() {
  stop();
  // The followers stop with the leader: an empty record.
  if (group_ && group_->size() > 1 && leads()) {
    std::vector<uint8_t> stop;
    (void)group_->broadcastFromRank0(stop);
  }
}

Status Engine::add(const std::vector<int64_t> &prompt, const RequestOptions &options,
                   int64_t &id) {
  if (!leads())
    return Status::error("rank " + std::to_string(group_->rank()) +
                         " follows rank 0, which takes the requests");
  if (options.maxNewTokens < 1)
    return Status::error("max_new_tokens must be at least 1, not " +
                         std::to_string(options.maxNewTokens));
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature) ||
      !(options.topP > 0 && options.topP <= 1) || options.topK < 0)
    return Status::error("sampling needs a finite temperature >= 0, 0 < top_p <= 1 and "
                         "top_k >= 0");
  if (!(options.minP >= 0 && options.minP <= 1))
    return Status::error("min_p must be in [0, 1], not " + numberText(options.minP));
  if (!(options.repetitionPenalty > 0) || !std::isfinite(options.repetitionPenalty))
    return Status::error("repetition_penalty must be finite and above 0, not " +
                         numberText(options.repetitionPenalty));
  // OpenAI's range for both.
  if (!(std::fabs(options.presencePenalty) <= 2) || !(std::fabs(options.frequencyPenalty) <= 2))
    return Status::error("presence_penalty and frequency_penalty must be in [-2, 2], not " +
                         numberText(options.presencePenalty) + " and " +
                         numberText(options.frequencyPenalty));
  if (options.logprobs < -1 || options.logprobs > kMaxTopLogprobs)
    return Status::error("logprobs must be -1 (none) to " + std::to_string(kMaxTopLogprobs) +
                         ", not " + std::to_string(options.logprobs));
  for (const auto &[token, bias] : options.logitBias)
    if (token < 0 || token >= vocab_ || !(std::fabs(bias) <= 100))
      return Status::error("logit_bias needs tokens in the vocabulary [0, " +
                           std::to_string(vocab_) + ") and biases in [-100, 100], not " +
                           numberText(bias) + " for token " + std::to_string(token));
  if (options.minTokens < 0 || options.minTokens > options.maxNewTokens)
    return Status::error("min_tokens must be in [0, max_new_tokens " +
                         std::to_string(options.maxNewTokens) + "], not " +
                         std::to_string(options.minTokens));
  if (options.promptLogprobs < -1 || options.promptLogprobs > kMaxTopLogprobs)
    return Status::error("prompt_logprobs must be -1 (none) to " +
                         std::to_string(kMaxTopLogprobs) + ", not " +
                         std::to_string(options.promptLogprobs));
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab_)
      return Status::error("prompt token " + std::to_string(i) + " is " +
                           std::to_string(prompt[i]) + ", outside the vocabulary [0, " +
                           std::to_string(vocab_) + ")");
  std::lock_guard<std::mutex> lock(mutex_);
  // Every request may draft: each row is drawn as it would be without drafts (greedy, or
  // from the request's stream, after the penalties and min_tokens of the tokens before it),
  // and a draft counts only where the draw is the draft (EngineSampling.cpp).
  // A masked request's drafts would need its grammar's state after each of them.
  DSRT_RETURN_IF_ERROR(scheduler_->add(prompt, options.maxNewTokens, id,
                                       options.promptLogprobs < 0,
                                       options.tokenMask ? 0 : options_.speculativeTokens,
                                       options.priority));
  counters_.promptTokens += prompt.size();
  Live &live = live_[id];
  live.options = options;
  live.rng = options.seed;
  live.promptLength = static_cast<int64_t>(prompt.size());
  if (options.repetitionPenalty != 1) {
    live.promptTokens = prompt;
    std::sort(live.promptTokens.begin(), live.promptTokens.end());
    live.promptTokens.erase(std::unique(live.promptTokens.begin(), live.promptTokens.end()),
                            live.promptTokens.end());
  }
  work_.notify_all();
  return Status::ok();
}

Status Engine::cancel(int64_t id) {
  std::lock_guard<std::mutex> masking(maskMutex_);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(id);
  if (it == live_.end() || it->second.finish != RequestFinish::Running)
    return Status::error("request " + std::to_string(id) + " is unknown or finished");
  DSRT_RETURN_IF_ERROR(scheduler_->cancel(id));
  finishLocked(id, RequestFinish::Cancelled);
  return Status::ok();
}

Status Engine::resetPrefixCache() {
  std::lock_guard<std::mutex> lock(mutex_);
  return scheduler_->resetPrefixCache();
}

void Engine::finishLocked(int64_t id, RequestFinish finish) {
  auto it = live_.find(id);
  if (it == live_.end())
    return;
  it->second.finish = finish;
  // With a callback, nobody polls: the callback hears of the finish and the record goes.
  if (callback_)
    live_.erase(it);
}

Status Engine::poll(int64_t id, size_t maxTokens, std::vector<int64_t> &tokens,
                    RequestFinish &finish) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(id);
  if (it == live_.end())
    return Status::error("request " + std::to_string(id) + " is unknown or already collected");
  std::vector<int64_t> &unread = it->second.unread;
  const size_t taken = std::min(maxTokens, unread.size());
  tokens.assign(unread.begin(), unread.begin() + taken);
  unread.erase(unread.begin(), unread.begin() + taken);
  // Finished once the last tokens are read, and then forgotten.
  finish = unread.empty() ? it->second.finish : RequestFinish::Running;
  if (finish != RequestFinish::Running)
    live_.erase(it);
  return Status::ok();
}

Status Engine::cachedPromptTokens(int64_t id, int64_t &cached) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(id);
  if (it == live_.end())
    return Status::error("request " + std::to_string(id) + " is unknown or already collected");
  cached = it->second.cachedPromptTokens;
  return Status::ok();
}

void Engine::setCallback(TokenCallback callback) {
  std::lock_guard<std::mutex> lock(mutex_);
  callback_ = std::move(callback);
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return scheduler_->runningCount() == 0 && scheduler_->waitingCount() == 0;
}

Status Engine::runRows(const std::vector<int64_t> &ids, const std::vector<int64_t> &positions,
                       const std::vector<ops::KvPagedRow> &rows,
                       const std::vector<int64_t> &logitsRows) {
  const int64_t T = static_cast<int64_t>(ids.size());
  // One column of ones, or, where the program reads positions off the mask, each row as
  // generate's left-padded batch has it: padding, then a one for every token up to the
  // row's (OPT counts its positions from the mask's last column).
  int64_t maskWidth = 1;
  if (maskSpansPositions_)
    maskWidth = 1 + *std::max_element(positions.begin(), positions.end());
  std::vector<int64_t> mask(static_cast<size_t>(T * maskWidth), 1);
  if (maskSpansPositions_)
    for (int64_t r = 0; r < T; ++r)
      std::fill(mask.begin() + r * maskWidth,
                mask.begin() + (r + 1) * maskWidth - (positions[r] + 1), 0);
  // Each input encoded once, in its declared dtype, for every rank.
  std::vector<TensorRef> inputs;
  std::vector<std::vector<uint8_t>> encoded(bindings_.size());
  for (size_t b = 0; b < bindings_.size(); ++b) {
    const Binding &binding = bindings_[b];
    const std::vector<int64_t> &values =
        binding.role == Binding::Role::Ids          ? ids
        : binding.role == Binding::Role::Mask       ? mask
        : binding.role == Binding::Role::LogitsRows ? logitsRows
                                                    : positions;
    encoded[b].resize(values.size() * dtypeSize(binding.dtype));
    if (encodeExactIntegers(values.data(), values.size(), binding.dtype, encoded[b].data()) !=
        values.size())
      return Status::error("input '" + binding.name + "' (" + dtypeName(binding.dtype) +
                           ") cannot hold the engine's values exactly");
    Shape shape = binding.role == Binding::Role::LogitsRows
                      ? Shape{static_cast<int64_t>(logitsRows.size())}
                      : Shape{T, binding.role == Binding::Role::Mask ? maskWidth : 1};
    inputs.push_back(TensorRef{binding.dtype, shape, encoded[b].data()});
  }
  auto runRank = [&](int rank) -> Status {
    Session &session = *sessions_[rank];
    DSRT_RETURN_IF_ERROR(session.setPagedRows(rows));
    for (size_t b = 0; b < bindings_.size(); ++b)
      DSRT_RETURN_IF_ERROR(session.setInput(program_, bindings_[b].index, inputs[b]));
    return session.run(program_);
  };
  if (sessions_.size() == 1)
    return runRank(0);
  // Every rank on a thread of its own (rank 0 on this one); a failing rank wakes the others
  // out of their collectives.
  std::vector<Status> results(sessions_.size(), Status::ok());
  std::vector<std::thread> threads;
  auto runOne = [&](int rank) {
    results[rank] = runRank(rank);
    if (!results[rank].isOk())
      inProcess_->abort();
  };
  for (int rank = 1; rank < static_cast<int>(sessions_.size()); ++rank)
    threads.emplace_back(runOne, rank);
  runOne(0);
  for (std::thread &thread : threads)
    thread.join();
  inProcess_->reset();
  for (size_t rank = 0; rank < results.size(); ++rank)
    if (!results[rank].isOk())
      return Status::error("rank " + std::to_string(rank) + ": " + results[rank].message());
  return Status::ok();
}

Status Engine::step() {
  if (!leads())
    return Status::error("rank " + std::to_string(group_->rank()) +
                         " follows rank 0's steps (follow), it does not step");
  StepPlan plan;
  std::vector<int64_t> ids, positions;
  std::vector<ops::KvPagedRow> rows;
  // The rows whose logits are read: each sampling chunk's last, and the prompt rows of a
  // request that asked for prompt log-probabilities.
  std::vector<int64_t> logitsRows;
  // Per chunk: where its rows' logits are (their index among the program's logits rows),
  // the first position of them, and its sampled row's (-1: it samples none).
  struct ChunkLogits {
    int64_t firstPromptRow = 0, promptRows = 0, firstPosition = 0, sampledRow = -1;
  };
  std::vector<ChunkLogits> chunkLogits;
  std::vector<MaskJob> maskJobs;  // structured output's masks to ask
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (scheduler_->runningCount() == 0 && scheduler_->waitingCount() == 0)
      return Status::ok();
    DSRT_RETURN_IF_ERROR(scheduler_->schedule(plan));
    counters_.peakRunning = std::max(counters_.peakRunning, scheduler_->runningCount());
    // What each step runs, for tuning the scheduler (DSRT_TRACE_ENGINE=1).
    static const bool trace = [] {
      const char *value = std::getenv("DSRT_TRACE_ENGINE");
      return value && *value && *value != '0';
    }();
    // With the time since the first traced step: a step's time is the next one's less its.
    static const auto traceStart = std::chrono::steady_clock::now();
    if (trace)
      std::fprintf(stderr, "dsrt: engine step %llu at %.3f ms: %zu chunks, %lld tokens, "
                           "%lld running, %lld waiting, %lld blocks used\n",
                   static_cast<unsigned long long>(counters_.steps),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                             traceStart)
                       .count(),
                   plan.chunks.size(),
                   static_cast<long long>(plan.scheduledTokens()),
                   static_cast<long long>(scheduler_->runningCount()),
                   static_cast<long long>(scheduler_->waitingCount()),
                   static_cast<long long>(scheduler_->usedBlocks()));
    for (const ScheduledChunk &chunk : plan.chunks) {
      const std::vector<int64_t> &tokens = scheduler_->tokens(chunk.requestId);
      const int64_t firstRow = static_cast<int64_t>(ids.size());
      const int64_t drafted = static_cast<int64_t>(chunk.drafts.size());
      const int64_t known = chunk.count - drafted;  // rows of the sequence's own tokens
      for (int64_t i = 0; i < chunk.count; ++i) {
        ids.push_back(i < known ? tokens[chunk.start + i]
                                : chunk.drafts[static_cast<size_t>(i - known)]);
        positions.push_back(chunk.start + i);
        rows.push_back({chunk.blockTable.data(), static_cast<int64_t>(chunk.blockTable.size()),
                        chunk.start + i});
      }
      ChunkLogits where;
      auto live = live_.find(chunk.requestId);
      if (chunk.samples && live != live_.end() && live->second.options.tokenMask &&
          live->second.finish == RequestFinish::Running)
        maskJobs.push_back({chunk.requestId,
                            std::vector<int64_t>(tokens.begin() + live->second.promptLength,
                                                 tokens.end()),
                            live->second.options.tokenMask});
      if (live != live_.end() && live->second.cachedPromptTokens < 0)
        live->second.cachedPromptTokens = scheduler_->cachedPromptTokens(chunk.requestId);
      // Prompt rows whose logits give a prompt token's log-probability: position p's give
      // token p + 1's, for p + 1 in [the next one due, the prompt's end).
      if (live != live_.end() && live->second.options.promptLogprobs >= 0) {
        const int64_t first = std::max(chunk.start, live->second.nextPromptLogprob - 1);
        const int64_t end = std::min(chunk.start + chunk.count, live->second.promptLength - 1);
        if (end > first) {
          where.firstPosition = first;
          where.promptRows = end - first;
          where.firstPromptRow = hasLogitsRows_ ? static_cast<int64_t>(logitsRows.size())
                                                : firstRow + (first - chunk.start);
          if (hasLogitsRows_)
            for (int64_t p = first; p < end; ++p)
              logitsRows.push_back(firstRow + (p - chunk.start));
        }
      }
      if (chunk.samples) {
        // The last known token's row, then each draft's: consecutive logits rows.
        const int64_t sampledRow = firstRow + known - 1;
        where.sampledRow = hasLogitsRows_ ? static_cast<int64_t>(logitsRows.size()) : sampledRow;
        if (hasLogitsRows_)
          for (int64_t row = sampledRow; row < static_cast<int64_t>(ids.size()); ++row)
            logitsRows.push_back(row);
      }
      chunkLogits.push_back(where);
    }
  }
  // Structured output: each masked request's allowed tokens, asked outside the lock.
  TokenMasks masks;
  std::vector<int64_t> maskFailed;
  computeTokenMasks(maskJobs, masks, maskFailed);
  std::vector<std::pair<int64_t, int64_t>> sampled;
  // Parallel to `sampled` where the request asked for log-probabilities.
  std::vector<std::optional<TokenLogprobs>> sampledLogprobs;
  // Prompt tokens' log-probabilities: (request, token, what), reported before the step's
  // sampled tokens.
  struct PromptLogprob {
    int64_t request, token;
    TokenLogprobs logprobs;
  };
  std::vector<PromptLogprob> promptLogprobs;
  // Nothing to sample (every chunk a prompt's middle): @step still needs one row to gather.
  const bool selectRows = hasLogitsRows_;
  if (selectRows && logitsRows.empty() && !ids.empty())
    logitsRows.push_back(0);
  Status ran = Status::ok();
  if (!ids.empty() && group_ && group_->size() > 1)
    ran = sendStep(ids, positions, rows, logitsRows);
  if (ran.isOk() && !ids.empty())
    ran = runRows(ids, positions, rows, logitsRows);
  if (ran.isOk() && !ids.empty()) {
    TensorRef logits;
    ran = sessions_[0]->output(program_, logitsOutput_, logits);
    const int64_t width = logits.shape.empty() ? 0 : logits.shape.back();
    const int64_t expected = selectRows ? static_cast<int64_t>(logitsRows.size())
                                        : static_cast<int64_t>(ids.size());
    if (ran.isOk() &&
        (width != vocab_ || logits.elements() != width * expected || !isFloat(logits.dtype)))
      ran = Status::error("the " + program_ + " program's logits are " +
                          shapeString(logits.shape) + ", not " + std::to_string(expected) +
                          " rows of " + std::to_string(vocab_));
    const LogitsReader readRow = [&](int64_t at, std::vector<float> &values) {
      values.resize(static_cast<size_t>(width));
      const auto *bytes = static_cast<const uint8_t *>(logits.data) +
                          static_cast<size_t>(at * width) * dtypeSize(logits.dtype);
      convertFloats(logits.dtype, bytes, DType::F32, values.data(), width);
    };
    std::lock_guard<std::mutex> lock(mutex_);
    // The rows to read: each prompt token's log-probability and each sampled token. They
    // run on the pool's threads (a 150k vocabulary costs a few ms a row to sample, and more
    // with log-probabilities); each request's random stream and counts are its own, and a
    // request's rows (its drafts' too) are one item, so the order does not matter.
    std::vector<RowWork> work;
    for (size_t c = 0; c < plan.chunks.size(); ++c) {
      const ScheduledChunk &chunk = plan.chunks[c];
      const ChunkLogits &where = chunkLogits[c];
      auto live = live_.find(chunk.requestId);
      if (!ran.isOk() || live == live_.end() || live->second.finish != RequestFinish::Running)
        continue;
      if (where.promptRows > 0 && scheduler_->contains(chunk.requestId)) {
        const std::vector<int64_t> &tokens = scheduler_->tokens(chunk.requestId);
        for (int64_t i = 0; i < where.promptRows; ++i)
          work.push_back({chunk.requestId, &live->second, where.firstPromptRow + i,
                          tokens[where.firstPosition + i + 1], -1, std::nullopt, nullptr,
                          {}, {}});
        live->second.nextPromptLogprob = where.firstPosition + where.promptRows + 1;
      }
      if (chunk.samples) {
        work.push_back({chunk.requestId, &live->second, where.sampledRow, -1, -1, std::nullopt,
                        chunk.drafts.empty() ? nullptr : &chunk.drafts, {}, {}});
        if (auto mask = masks.find(chunk.requestId); mask != masks.end())
          work.back().allowed = &mask->second;
      }
    }
    ops::parallelFor(static_cast<int64_t>(work.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t w = begin; w < end; ++w)
        sampleRow(work[static_cast<size_t>(w)], readRow);
    });
    for (RowWork &item : work)
      if (item.promptToken < 0 && item.token < 0) {
        failRequestLocked(item.request, "its token mask allows no token");
        maskFailed.push_back(item.request);
      } else if (item.promptToken >= 0) {
        promptLogprobs.push_back({item.request, item.promptToken, std::move(*item.logprobs)});
      } else {
        sampled.push_back({item.request, item.token});
        sampledLogprobs.push_back(std::move(item.logprobs));
        for (size_t i = 0; i < item.more.size(); ++i) {
          sampled.push_back({item.request, item.more[i]});
          sampledLogprobs.push_back(std::move(item.moreLogprobs[i]));
        }
      }
  }
  struct Event {
    int64_t request, token;
    RequestFinish finish;
    const TokenLogprobs *logprobs = nullptr;
  };
  std::vector<Event> events;
  TokenCallback callback;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ran.isOk())
      for (const PromptLogprob &entry : promptLogprobs)
        events.push_back({entry.request, entry.token, RequestFinish::Prompt, &entry.logprobs});
    for (int64_t id : maskFailed)
      events.push_back({id, -1, RequestFinish::Cancelled});
    if (!ran.isOk()) {
      // The step's requests cannot go on with KV that was never written: they fail, the
      // others do not.
      lastError_ = ran.message();
      for (const ScheduledChunk &chunk : plan.chunks)
        if (scheduler_->contains(chunk.requestId)) {
          (void)scheduler_->cancel(chunk.requestId);
          events.push_back({chunk.requestId, -1, RequestFinish::Cancelled});
        }
      DSRT_RETURN_IF_ERROR(scheduler_->commit({}));
    } else {
      DSRT_RETURN_IF_ERROR(scheduler_->commit(sampled));
      ++counters_.steps;
      std::vector<int64_t> stopped;
      for (size_t i = 0; i < sampled.size(); ++i) {
        const auto &[request, token] = sampled[i];
        auto live = live_.find(request);
        if (live == live_.end())
          continue;
        ++counters_.generatedTokens;
        live->second.unread.push_back(token);
        events.push_back({request, token, RequestFinish::Running,
                          sampledLogprobs[i] ? &*sampledLogprobs[i] : nullptr});
        if (stopsAt(live->second.options, token)) {
          // A stop token as the last allowed one still finishes by Stop, as generate says.
          stopped.push_back(request);
          if (scheduler_->contains(request))
            (void)scheduler_->finish(request);
          events.push_back({request, -1, RequestFinish::Stop});
        }
      }
      for (const FinishedRequest &finished : scheduler_->lastFinished())
        if (std::find(stopped.begin(), stopped.end(), finished.id) == stopped.end())
          events.push_back({finished.id, -1, RequestFinish::Length});
    }
    for (const Event &event : events)
      if (event.token < 0) {
        auto live = live_.find(event.request);
        if (live != live_.end() && live->second.finish == RequestFinish::Running)
          live->second.finish = event.finish;
      }
    callback = callback_;
  }
  if (callback) {
    for (const Event &event : events)
      callback(event.request, event.token, event.finish, event.logprobs);
    // Nobody polls: a finished request's record goes, once its last callback has returned
    // (until then the callbacks may ask cachedPromptTokens).
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Event &event : events)
      if (event.token < 0)
        live_.erase(event.request);
  }
  return ran.isOk() ? Status::ok() : Status::error("engine step: " + ran.message());
}

void Engine::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (thread_.joinable())
    return;
  stopping_ = false;
  thread_ = std::thread([this] {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [&] {
          return stopping_ || scheduler_->runningCount() > 0 || scheduler_->waitingCount() > 0;
        });
        if (stopping_)
          return;
      }
      (void)step();  // a failed step has failed its own requests and said why
    }
  });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    work_.notify_all();
  }
  if (thread_.joinable())
    thread_.join();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineStats stats = counters_;
  stats.running = scheduler_->runningCount();
  stats.waiting = scheduler_->waitingCount();
  stats.usedBlocks = scheduler_->usedBlocks();
  stats.totalBlocks = scheduler_->pool().totalBlocks();
  stats.peakUsedBlocks = scheduler_->peakUsedBlocks();
  stats.prefixHits = scheduler_->prefixHits();
  stats.prefixMisses = scheduler_->prefixMisses();
  stats.preemptions = scheduler_->preemptions();
  stats.draftTokens = scheduler_->draftTokens();
  stats.acceptedDraftTokens = scheduler_->acceptedDraftTokens();
  return stats;
}

std::string Engine::lastError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lastError_;
}

} // namespace dsrt::engine
