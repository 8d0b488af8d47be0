// The engine's log-probabilities (engine/TokenSampling.cpp) against a reference written
// again here the plain way: the log-softmax in double with libm's exponentials, and the top
// tokens by a full sort (logit descending, ties by the smaller id).
#include "engine/TokenSampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace dsrt::engine {
namespace {

struct Reference {
  std::vector<double> logprobs;
  std::vector<int64_t> order;
};

Reference referenceOf(const std::vector<float> &logits) {
  const double peak = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float logit : logits)
    sum += std::exp(logit - peak);
  Reference r;
  for (float logit : logits)
    r.logprobs.push_back(logit - peak - std::log(sum));
  r.order.resize(logits.size());
  std::iota(r.order.begin(), r.order.end(), 0);
  std::stable_sort(r.order.begin(), r.order.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  return r;
}

// Vocabularies of 1 to 152k, logits on a grid of quarters (many ties) over a wide range (the
// float exponentials flush terms 88 below the peak to zero), every top count the API takes.
TEST(TokenSampling, LogprobsEqualTheDoubleLogSoftmaxAndTheSortedTop) {
  std::mt19937 rng(5);
  for (int64_t vocabulary : {1, 7, 1000, 151936})
    for (float spread : {0.5f, 3.0f, 40.0f}) {
      std::normal_distribution<float> normal(0.0f, spread);
      std::vector<float> logits(static_cast<size_t>(vocabulary));
      for (float &logit : logits)
        logit = std::round(normal(rng) * 4) / 4;
      const Reference want = referenceOf(logits);
      for (int64_t top : {0, 1, 5, 20}) {
        const int64_t token = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocabulary));
        const TokenLogprobs got = logprobsOf(logits, token, top);
        // float exponentials within 2 ulp, summed in double: far inside 1e-5 of the log.
        EXPECT_NEAR(got.logprob, want.logprobs[token], 1e-5)
            << "vocabulary " << vocabulary << " spread " << spread;
        const size_t count = std::min<size_t>(static_cast<size_t>(top), logits.size());
        ASSERT_EQ(got.topTokens.size(), count);
        ASSERT_EQ(got.topLogprobs.size(), count);
        for (size_t i = 0; i < count; ++i) {
          EXPECT_EQ(got.topTokens[i], want.order[i]) << "place " << i << " of " << top;
          EXPECT_NEAR(got.topLogprobs[i], want.logprobs[want.order[i]], 1e-5);
        }
      }
    }
}

} // namespace
} // namespace dsrt::engine
