#include "engine/TokenSampling.h"

#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dsrt::engine {

TokenLogprobs logprobsOf(const std::vector<float> &logits, int64_t token, int64_t top) {
  // log-softmax: the exponentials vectorised in float (within 2 ulp of libm's; 0 from 88
  // below the peak, where a term is below 1e-38 of the peak's 1), summed in double, as a 150k
  // vocabulary's sum loses float's digits. A third of the time of double exponentials.
  const size_t vocabulary = logits.size();
  const float peak = *std::max_element(logits.begin(), logits.end());
  thread_local std::vector<float> terms;
  terms.resize(vocabulary);
  for (size_t i = 0; i < vocabulary; ++i)
    terms[i] = logits[i] - peak;
  ops::fast::exponentiate(terms.data(), static_cast<int64_t>(vocabulary));
  double sums[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= vocabulary; i += 4)
    for (int k = 0; k < 4; ++k)
      sums[k] += terms[i + k];
  for (; i < vocabulary; ++i)
    sums[0] += terms[i];
  const double logNormaliser = peak + std::log((sums[0] + sums[1]) + (sums[2] + sums[3]));
  auto logprob = [&](int64_t id) {
    return static_cast<float>(logits[static_cast<size_t>(id)] - logNormaliser);
  };
  TokenLogprobs result;
  result.logprob = logprob(token);
  if (top > 0) {
    // The likeliest `top` in one pass, kept sorted (ties by the smaller id, so the list does
    // not depend on a sort's implementation): no vocabulary-sized index vector to fill and
    // sort for each token.
    const size_t count = std::min<size_t>(static_cast<size_t>(top), vocabulary);
    auto before = [&](int64_t a, int64_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    };
    std::vector<int64_t> best;
    best.reserve(count + 1);
    for (size_t id = 0; id < vocabulary; ++id) {
      const auto candidate = static_cast<int64_t>(id);
      if (best.size() == count && !before(candidate, best.back()))
        continue;
      best.insert(std::upper_bound(best.begin(), best.end(), candidate, before), candidate);
      if (best.size() > count)
        best.pop_back();
    }
    for (int64_t id : best) {
      result.topTokens.push_back(id);
      result.topLogprobs.push_back(logprob(id));
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
