// The decoding loop over a session (docs/design.md §5, docs/transformer-ops.md): a left-padded
// batch of prompts with per-sequence positions, greedy or sampled tokens, stop tokens and a
// streaming callback. It drives whichever programs the plan has: prefill + decode with the
// session's KV cache, or forward with the export's past/present pairs, or forward alone
// (the whole sequence again every step).
#ifndef DSRT_GENERATE_GENERATOR_H
#define DSRT_GENERATE_GENERATOR_H

#include "core/Status.h"
#include "ops/Ops.h"
#include "session/Session.h"

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace dsrt {

constexpr int64_t kMaxBeams = 256;

struct GenerateOptions {
  int64_t maxNewTokens = 32;
  float temperature = 0;  // 0: greedy
  int64_t topK = 0;       // 0: no limit
  float topP = 1;         // 1: no limit
  // After top-p: tokens below minP times the likeliest one's probability are dropped (vLLM's
  // and llama.cpp's min_p; the serving engine's requests set it). 0: none.
  float minP = 0;
  uint64_t seed = 0;
  std::vector<int64_t> stopTokens;  // besides the plan's EOS tokens
  bool ignoreEos = false;
  // Beam search, transformers' (num_beams, length_penalty, early_stopping): numBeams > 1
  // keeps that many sequences per prompt, each step the likeliest continuations of all of
  // them, and returns each prompt's best finished one, scored by its summed log-probability
  // over (its length ** lengthPenalty). Greedy: temperature 0. The callback then sees the
  // returned sequence's tokens once it is known, and cannot stop it.
  int64_t numBeams = 1;  // at most kMaxBeams
  float lengthPenalty = 1;
  enum class EarlyStopping { Heuristic, Stop, Never } earlyStopping = EarlyStopping::Heuristic;
  // transformers' logits processors (LogitsProcessors.cpp), on the logits before sampling
  // and on the log-probabilities in beam search; each off at its default.
  float repetitionPenalty = 1;     // > 0; the row's tokens' logits divided (or, < 0, times)
  int64_t noRepeatNgramSize = 0;   // no n-gram of the row twice
  int64_t minNewTokens = 0;        // no stop token before this many new tokens
  int64_t forcedBosToken = -1;     // the first token of a one-token row (BART's)
  int64_t forcedEosToken = -1;     // the last of max_new_tokens
  bool processesLogits() const {
    return repetitionPenalty != 1 || noRepeatNgramSize > 0 || minNewTokens > 0 ||
           forcedBosToken >= 0 || forcedEosToken >= 0;
  }
  // Called for each new token of each sequence; returning true stops that sequence. In a
  // group, a sequence that any rank's callback stops stops on every rank (one all-reduce
  // per step when some rank has a callback), so one rank may have it alone.
  std::function<bool(size_t sequence, int64_t token)> onToken;
  // The session's tensor-parallel group (kept, not owned; null for one rank). With it, greedy
  // decoding of a plan with a vocabulary-parallel LM head runs the prefill_greedy and
  // decode_greedy programs and a distributed argmax instead of gathering the logits.
  ops::Collectives *group = nullptr;
};

enum class FinishReason { Length = 0, Stop = 1, Callback = 2 };

struct GeneratedSequence {
  std::vector<int64_t> tokens;  // the new tokens, the prompt not included
  FinishReason reason = FinishReason::Length;
};

// transformers' logits processors over one row's `scores` (logits, or log-probabilities in
// beam search) of `vocab` values, in transformers' order (repetition penalty, no repeated
// n-gram, min new tokens, forced BOS, forced EOS): `history` is the row's tokens so far
// (the prompt's or the decoder's start, then the new ones; no padding), `generated` how many
// are new, `stops` the tokens min_new_tokens holds back. Each processor changes single
// tokens' scores, so a rank of a distributed argmax runs them on its shard of the
// vocabulary: `scores` are then the tokens [first, first + count), every other token left
// to the rank that holds it (a whole row: first 0, count the vocabulary).
void processLogits(const GenerateOptions &options, const std::vector<int64_t> &history,
                   int64_t generated, const std::vector<int64_t> &stops, float *scores,
                   int64_t first, int64_t count);

// The defaults a model's generation_config.json (`text`) sets, over `options`, as
// transformers' generate() reads it (GenerationConfig.cpp); an error names a value of the
// wrong type or range.
Status modelGenerateDefaults(std::string_view text, bool encoderDecoder,
                             GenerateOptions &options);

// Every limit is checked before anything runs; a failure leaves the session usable.
Status generate(Session &session, const std::vector<std::vector<int64_t>> &prompts,
                const GenerateOptions &options, std::vector<GeneratedSequence> &out);

// The distributed argmax of greedy decoding (docs/transformer-ops.md, "Tensor
// parallelism"): each rank packs its shard's first maximum into a key that orders like
// (logit, -global index), and one all-reduce MAX of the keys leaves the global first maximum,
// torch.argmax's choice, on every rank. The high 32 bits are the logit's bits mapped to an
// unsigned order (-0 as +0, every NaN above +inf as torch.argmax takes NaN for the
// maximum), the low 32 bits 0xFFFFFFFF - index, so that of equal logits the lowest index wins.
uint64_t packArgmaxKey(float logit, int64_t globalIndex);
int64_t argmaxKeyIndex(uint64_t key);
// The key of the first maximum of `count` logits whose first is global index `offset`.
uint64_t localArgmaxKey(const float *logits, int64_t count, int64_t offset);
// Each row's global argmax from every rank's shard of it: `rows[b]` is this rank's logits
// of row b, whose first is global index `offset`. One all-reduce for all rows.
Status distributedArgmax(ops::Collectives &group, const std::vector<std::vector<float>> &rows,
                         int64_t offset, std::vector<int64_t> &tokens);

// The index std::max_element gives over `count` values (the first of the largest; a NaN is
// never the largest unless it is the first value), vectorized. Exposed for tests.
int64_t firstLargest(const float *values, int64_t count);
// The index of a token drawn from `logits` (vocabulary-sized) under the options' sampling
// settings; greedy takes the first maximum. Exposed for tests.
int64_t sampleToken(const std::vector<float> &logits, const GenerateOptions &options,
                    uint64_t &rngState);
// The same draw from a row's `count` largest logits, `values` descending with equal logits
// by lower index and `ids` their vocabulary indices (Session::topLogits's candidates): with
// count >= topK (or the whole row) it picks what sampleToken picks from the whole row.
int64_t sampleFromCandidates(const float *values, const int64_t *ids, size_t count,
                             const GenerateOptions &options, uint64_t &rngState);

} // namespace dsrt

#endif
