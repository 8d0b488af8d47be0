// How the engine turns a row of logits into a request's token and what it reports of it:
// log-probabilities (OpenAI's and vLLM's: of the raw logits), and vLLM's penalties
// (docs/serving.md, "Penalties and min-p").
#ifndef DSRT_ENGINE_TOKENSAMPLING_H
#define DSRT_ENGINE_TOKENSAMPLING_H

#include "engine/Engine.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace dsrt::engine {

// `token`'s log-softmax over `logits`, and the `top` likeliest (ties by the smaller id).
TokenLogprobs logprobsOf(const std::vector<float> &logits, int64_t token, int64_t top);

// Whether the request's options change its logits before sampling.
bool penalises(const RequestOptions &options);

// vLLM's order: the logit bias, then the repetition penalty over the prompt's distinct tokens
// (sorted) and the output's, then the presence and frequency penalties over the output's.
void applyPenalties(const RequestOptions &options,
                    const std::unordered_map<int64_t, int64_t> &generatedCounts,
                    const std::vector<int64_t> &promptTokens, std::vector<float> &logits);

} // namespace dsrt::engine

#endif
