// transformers' logits processors that a model's generation_config turns on (BART-CNN's
// no_repeat_ngram_size, forced BOS and EOS; chat models' repetition_penalty), as its
// RepetitionPenaltyLogitsProcessor, NoRepeatNGramLogitsProcessor,
// MinNewTokensLengthLogitsProcessor, ForcedBOSTokenLogitsProcessor and
// ForcedEOSTokenLogitsProcessor compute them, in that order.
#include "generate/Generator.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsrt {
namespace {

constexpr float kBanned = -std::numeric_limits<float>::infinity();

void force(float *scores, int64_t vocab, int64_t token) {
  std::fill(scores, scores + vocab, kBanned);
  if (token >= 0 && token < vocab)
    scores[token] = 0;
}

} // namespace

void processLogits(const GenerateOptions &options, const std::vector<int64_t> &history,
                   int64_t generated, const std::vector<int64_t> &stops, float *scores,
                   int64_t vocab) {
  if (options.repetitionPenalty != 1) {
    // Each token of the row once: a logit below 0 grows more negative, one above shrinks.
    std::vector<int64_t> seen = history;
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int64_t token : seen)
      if (token >= 0 && token < vocab)
        scores[token] = scores[token] < 0 ? scores[token] * options.repetitionPenalty
                                          : scores[token] / options.repetitionPenalty;
  }
  const int64_t n = options.noRepeatNgramSize;
  const int64_t length = static_cast<int64_t>(history.size());
  if (n > 0 && length + 1 >= n) {
    // The tokens that followed the row's last n - 1 tokens before would repeat an n-gram.
    for (int64_t start = 0; start + n <= length; ++start)
      if (std::equal(history.begin() + start, history.begin() + start + n - 1,
                     history.end() - (n - 1))) {
        const int64_t token = history[start + n - 1];
        if (token >= 0 && token < vocab)
          scores[token] = kBanned;
      }
  }
  if (generated < options.minNewTokens)
    for (int64_t stop : stops)
      if (stop >= 0 && stop < vocab)
        scores[stop] = kBanned;
  if (options.forcedBosToken >= 0 && length == 1)
    force(scores, vocab, options.forcedBosToken);
  if (options.forcedEosToken >= 0 && generated == options.maxNewTokens - 1)
    force(scores, vocab, options.forcedEosToken);
}

} // namespace dsrt
