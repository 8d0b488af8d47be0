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

// A row's scores, or a rank's shard of them: tokens [first, first + count).
struct Scores {
  float *values;
  int64_t first, count;
  float *at(int64_t token) const {
    return token >= first && token < first + count ? values + (token - first) : nullptr;
  }
};

void force(const Scores &scores, int64_t token) {
  std::fill(scores.values, scores.values + scores.count, kBanned);
  if (float *forced = scores.at(token))
    *forced = 0;
}

} // namespace

void processLogits(const GenerateOptions &options, const std::vector<int64_t> &history,
                   int64_t generated, const std::vector<int64_t> &stops, float *values,
                   int64_t first, int64_t count) {
  const Scores scores{values, first, count};
  if (options.repetitionPenalty != 1) {
    // Each token of the row once: a logit below 0 grows more negative, one above shrinks.
    std::vector<int64_t> seen = history;
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int64_t token : seen)
      if (float *score = scores.at(token))
        *score = *score < 0 ? *score * options.repetitionPenalty
                            : *score / options.repetitionPenalty;
  }
  const int64_t n = options.noRepeatNgramSize;
  const int64_t length = static_cast<int64_t>(history.size());
  if (n > 0 && length + 1 >= n) {
    // The tokens that followed the row's last n - 1 tokens before would repeat an n-gram.
    for (int64_t start = 0; start + n <= length; ++start)
      if (std::equal(history.begin() + start, history.begin() + start + n - 1,
                     history.end() - (n - 1))) {
        if (float *score = scores.at(history[start + n - 1]))
          *score = kBanned;
      }
  }
  if (generated < options.minNewTokens)
    for (int64_t stop : stops)
      if (float *score = scores.at(stop))
        *score = kBanned;
  if (options.forcedBosToken >= 0 && length == 1)
    force(scores, options.forcedBosToken);
  if (options.forcedEosToken >= 0 && generated == options.maxNewTokens - 1)
    force(scores, options.forcedEosToken);
}

} // namespace dsrt
