#include "engine/TokenSampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dsrt::engine {

TokenLogprobs logprobsOf(const std::vector<float> &logits, int64_t token, int64_t top) {
  // log-softmax in double: a 150k vocabulary's sum of exponentials loses float's digits.
  const float peak = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float logit : logits)
    sum += std::exp(static_cast<double>(logit) - peak);
  const double logNormaliser = peak + std::log(sum);
  auto logprob = [&](int64_t id) {
    return static_cast<float>(logits[static_cast<size_t>(id)] - logNormaliser);
  };
  TokenLogprobs result;
  result.logprob = logprob(token);
  if (top > 0) {
    std::vector<int64_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    const auto count = std::min<size_t>(static_cast<size_t>(top), order.size());
    // Ties by the smaller id, so the list does not depend on the sort's implementation.
    std::partial_sort(order.begin(), order.begin() + count, order.end(),
                      [&](int64_t a, int64_t b) {
                        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
                      });
    for (size_t i = 0; i < count; ++i) {
      result.topTokens.push_back(order[i]);
      result.topLogprobs.push_back(logprob(order[i]));
    }
  }
  return result;
}

bool penalises(const RequestOptions &options) {
  return options.repetitionPenalty != 1 || options.presencePenalty != 0 ||
         options.frequencyPenalty != 0 || !options.logitBias.empty();
}

// Each token's logit changes alone, so the map's order does not matter.
void applyPenalties(const RequestOptions &options,
                    const std::unordered_map<int64_t, int64_t> &generatedCounts,
                    const std::vector<int64_t> &promptTokens, std::vector<float> &logits) {
  for (const auto &[token, bias] : options.logitBias)
    logits[static_cast<size_t>(token)] += bias;
  const float repetition = options.repetitionPenalty;
  auto repeat = [&](int64_t token) {
    float &logit = logits[static_cast<size_t>(token)];
    logit = logit > 0 ? logit / repetition : logit * repetition;
  };
  if (repetition != 1) {
    for (int64_t token : promptTokens)
      repeat(token);
    for (const auto &[token, count] : generatedCounts)
      if (!std::binary_search(promptTokens.begin(), promptTokens.end(), token))
        repeat(token);
  }
  for (const auto &[token, count] : generatedCounts)
    logits[static_cast<size_t>(token)] -=
        options.frequencyPenalty * static_cast<float>(count) + options.presencePenalty;
}

} // namespace dsrt::engine
