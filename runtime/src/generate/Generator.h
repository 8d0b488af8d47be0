// The decoding loop over a session (DESIGN.md §5, docs/transformer-ops.md): a left-padded
// batch of prompts with per-sequence positions, greedy or sampled tokens, stop tokens and a
// streaming callback. It drives whichever programs the plan has: prefill + decode with the
// session's KV cache, or forward with the export's past/present pairs, or forward alone
// (the whole sequence again every step).
#ifndef DSRT_GENERATE_GENERATOR_H
#define DSRT_GENERATE_GENERATOR_H

#include "core/Status.h"
#include "session/Session.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace dsrt {

struct GenerateOptions {
  int64_t maxNewTokens = 32;
  float temperature = 0;  // 0: greedy
  int64_t topK = 0;       // 0: no limit
  float topP = 1;         // 1: no limit
  uint64_t seed = 0;
  std::vector<int64_t> stopTokens;  // besides the plan's EOS tokens
  bool ignoreEos = false;
  // Called for each new token of each sequence; returning true stops that sequence.
  std::function<bool(size_t sequence, int64_t token)> onToken;
};

enum class FinishReason { Length = 0, Stop = 1, Callback = 2 };

struct GeneratedSequence {
  std::vector<int64_t> tokens;  // the new tokens, the prompt not included
  FinishReason reason = FinishReason::Length;
};

// Every limit is checked before anything runs; a failure leaves the session usable.
Status generate(Session &session, const std::vector<std::vector<int64_t>> &prompts,
                const GenerateOptions &options, std::vector<GeneratedSequence> &out);

// The index of a token drawn from `logits` (vocabulary-sized) under the options' sampling
// settings; greedy takes the first maximum. Exposed for tests.
int64_t sampleToken(const std::vector<float> &logits, const GenerateOptions &options,
                    uint64_t &rngState);

} // namespace dsrt

#endif
