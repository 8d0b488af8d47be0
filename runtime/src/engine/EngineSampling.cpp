// The engine's reading of a step's logits: each request's next token (its penalties,
// min_tokens, sampling and log-probabilities), the drafts the model confirms, and prompt
// tokens' log-probabilities. Engine::step() runs one RowWork per request on the pool's
// threads.
#include "engine/Engine.h"

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
    if (counts || holdsStop) {
      penalized.assign(values.begin(), values.end());
      if (counts)
        applyPenalties(options, live.generatedCounts, live.promptTokens, penalized);
      if (holdsStop) {
        if (!options.ignoreEos)
          for (int64_t eos : eosTokens_)
            if (eos >= 0 && eos < vocab_)
              penalized[static_cast<size_t>(eos)] = -INFINITY;
        for (int64_t stop : options.stopTokens)
          if (stop >= 0 && stop < vocab_)
            penalized[static_cast<size_t>(stop)] = -INFINITY;
      }
    }
    const int64_t token =
        sampleToken(counts || holdsStop ? penalized : values, sampling, live.rng);
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

} // namespace dsrt::engine
