// The engine's reading of a step's logits: each request's next token (its penalties,
// min_tokens, sampling and log-probabilities), the drafts the model confirms, and prompt
// tokens' log-probabilities. Engine::step() runs one RowWork per request on the pool's
// threads.
#include "engine/Engine.h"

#include "engine/Scheduler.h"
#include "engine/TokenSampling.h"
#include "generate/Generator.h"

#include <algorithm>
#include <cmath>

namespace dsrt::engine {

bool Engine::stopsAt(const RequestOptions &options, int64_t token) const {
  return std::find(options.stopTokens.begin(), options.stopTokens.end(), token) !=
             options.stopTokens.end() ||
         (!options.ignoreEos &&
          std::find(eosTokens_.begin(), eosTokens_.end(), token) != eosTokens_.end());
}

void Engine::sampleRow(RowWork &item, const LogitsReader &readRow) const {
  thread_local std::vector<float> values, penalized;
  Live &live = *item.live;
  if (item.promptToken >= 0) {
    readRow(item.logitsRow, values);
    item.logprobs = logprobsOf(values, item.promptToken, live.options.promptLogprobs);
    return;
  }
  const RequestOptions &options = live.options;
  GenerateOptions sampling;
  sampling.temperature = options.temperature;
  sampling.topK = options.topK;
  sampling.topP = options.topP;
  sampling.minP = options.minP;
  const bool counts = penalises(options);
  // A row's draw, and what it changes of the request's state: its random stream, its count
  // of tokens (min_tokens) and of each token (the penalties). Drafts' rows come in order,
  // each after the tokens before it, so each draws what it draws without drafts.
  auto draw = [&](int64_t row) {
    readRow(row, values);
    // min_tokens: the tokens that would end the request are out of the draw.
    const bool holdsStop = live.generated < options.minTokens;
    const bool masked = item.allowed != nullptr;
    if (counts || holdsStop || masked) {
      penalized.assign(values.begin(), values.end());
      if (counts)
        applyPenalties(options, live.generatedCounts, live.promptTokens, penalized);
      if (masked)
        for (size_t t = 0; t < penalized.size(); ++t)
          if (!((*item.allowed)[t / 32] >> (t % 32) & 1u))
            penalized[t] = -INFINITY;
      if (holdsStop) {
        // What the bans take, kept: where the mask allows nothing else (a grammar that is
        // complete allows EOS alone), min_tokens gives way.
        thread_local std::vector<std::pair<int64_t, float>> banned;
        banned.clear();
        auto ban = [&](int64_t token) {
          if (token >= 0 && token < vocab_) {
            banned.emplace_back(token, penalized[static_cast<size_t>(token)]);
            penalized[static_cast<size_t>(token)] = -INFINITY;
          }
        };
        if (!options.ignoreEos)
          for (int64_t eos : eosTokens_)
            ban(eos);
        for (int64_t stop : options.stopTokens)
          ban(stop);
        if (masked && std::none_of(penalized.begin(), penalized.end(),
                                   [](float x) { return x > -INFINITY; }))
          for (const auto &[token, logit] : banned)
            penalized[static_cast<size_t>(token)] = logit;
      }
      if (masked && std::none_of(penalized.begin(), penalized.end(),
                                 [](float x) { return x > -INFINITY; }))
        return int64_t(-1);
    }
    const int64_t token =
        sampleToken(counts || holdsStop || masked ? penalized : values, sampling, live.rng);
    ++live.generated;
    if (counts)
      ++live.generatedCounts[token];
    return token;
  };
  auto logprobsOfRow = [&](int64_t token) {
    return options.logprobs >= 0 ? std::optional<TokenLogprobs>(
                                       logprobsOf(values, token, options.logprobs))
                                 : std::nullopt;
  };
  item.token = draw(item.logitsRow);
  if (item.token < 0)
    return;  // the mask left no token: the step ends the request
  item.logprobs = logprobsOfRow(item.token);
  // Each draft the last token confirmed gives the next row's token, until one is not its
  // draft or ends the request. A row is drawn as it is without drafts, from the same stream
  // in the same order, and a draft is confirmed only where the draw is the draft: the
  // tokens are those the request has without, greedy or sampled (for sampled ones this is
  // speculative sampling's acceptance with the draft's probability, the draw coupled).
  for (size_t d = 0; item.drafts && d < item.drafts->size(); ++d) {
    const int64_t last = d == 0 ? item.token : item.more.back();
    if (last != (*item.drafts)[d] || stopsAt(options, last))
      break;
    item.more.push_back(draw(item.logitsRow + static_cast<int64_t>(d) + 1));
    item.moreLogprobs.push_back(logprobsOfRow(item.more.back()));
  }
}

void Engine::failRequestLocked(int64_t id, const std::string &why) {
  if (scheduler_->contains(id))
    (void)scheduler_->cancel(id);
  if (auto live = live_.find(id); live != live_.end())
    live->second.finish = RequestFinish::Cancelled;
  lastError_ = "request " + std::to_string(id) + ": " + why;
}

void Engine::computeTokenMasks(std::vector<MaskJob> &jobs, TokenMasks &masks,
                               std::vector<int64_t> &failed) {
  if (jobs.empty())
    return;
  // Outside mutex_ (a mask may take a while: the Python package's takes the GIL), and
  // inside maskMutex_, which cancel() takes first: a request cancelled after the check
  // below waits until its mask has returned.
  std::lock_guard<std::mutex> masking(maskMutex_);
  const size_t words = static_cast<size_t>((vocab_ + 31) / 32);
  for (MaskJob &job : jobs) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto live = live_.find(job.request);
      if (live == live_.end() || live->second.finish != RequestFinish::Running)
        continue;
    }
    std::vector<uint32_t> allowed(words, ~uint32_t(0));
    Status status = job.mask(job.request, job.generated, allowed);
    if (status.isOk() && allowed.size() == words) {
      masks.emplace(job.request, std::move(allowed));
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    failRequestLocked(job.request, status.isOk() ? "its token mask changed the mask's size"
                                                 : status.message());
    failed.push_back(job.request);
  }
}

} // namespace dsrt::engine
