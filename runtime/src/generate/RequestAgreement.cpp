// The ranks of a tensor-parallel group must generate from one request (docs/reliability.md).
#include "generate/RequestAgreement.h"

#include <algorithm>
#include <string>

namespace dsrt {
namespace {


// What one rank was asked to generate, fixed-size for one all-gather: FNV-1a hashes of the
// prompts and stop tokens, and the options as they are.
struct RequestIdentity {
  uint64_t promptsHash = 0;
  uint64_t stopTokensHash = 0;
  int64_t prompts = 0;
  int64_t maxNewTokens = 0;
  int64_t topK = 0;
  uint64_t seed = 0;
  float temperature = 0;
  float topP = 0;
  int32_t ignoreEos = 0;
  int64_t numBeams = 1;
  float lengthPenalty = 1;
  int32_t earlyStopping = 0;
  float repetitionPenalty = 1;
  int64_t noRepeatNgramSize = 0, minNewTokens = 0, forcedBosToken = -1, forcedEosToken = -1;
  // Not compared: one rank alone may have a callback (the one that reports the tokens);
  // whether any has tells the ranks to share the stops it decides.
  int32_t hasCallback = 0;
};

uint64_t fnv1a(uint64_t hash, const void *data, size_t bytes) {
  const auto *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < bytes; ++i)
    hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

RequestIdentity identityOf(const std::vector<std::vector<int64_t>> &prompts,
                           const GenerateOptions &options) {
  RequestIdentity id;
  uint64_t hash = 14695981039346656037ull;
  for (const std::vector<int64_t> &prompt : prompts) {
    uint64_t length = prompt.size();
    hash = fnv1a(hash, &length, sizeof length);
    hash = fnv1a(hash, prompt.data(), prompt.size() * sizeof(int64_t));
  }
  id.promptsHash = hash;
  id.stopTokensHash = fnv1a(14695981039346656037ull, options.stopTokens.data(),
                            options.stopTokens.size() * sizeof(int64_t));
  id.prompts = static_cast<int64_t>(prompts.size());
  id.maxNewTokens = options.maxNewTokens;
  id.topK = options.topK;
  id.seed = options.seed;
  id.temperature = options.temperature;
  id.topP = options.topP;
  id.ignoreEos = options.ignoreEos;
  id.numBeams = options.numBeams;
  id.lengthPenalty = options.lengthPenalty;
  id.earlyStopping = static_cast<int32_t>(options.earlyStopping);
  id.repetitionPenalty = options.repetitionPenalty;
  id.noRepeatNgramSize = options.noRepeatNgramSize;
  id.minNewTokens = options.minNewTokens;
  id.forcedBosToken = options.forcedBosToken;
  id.forcedEosToken = options.forcedEosToken;
  id.hasCallback = options.onToken ? 1 : 0;
  return id;
}

} // namespace

Status checkRanksAgree(ops::Collectives &group, const std::vector<std::vector<int64_t>> &prompts,
                       const GenerateOptions &options, bool &anyCallback) {
  const int ranks = group.size();
  RequestIdentity mine = identityOf(prompts, options);
  std::vector<RequestIdentity> all;
  DSRT_RETURN_IF_ERROR(group.allGatherRecords(mine, all));
  anyCallback = std::any_of(all.begin(), all.end(),
                            [](const RequestIdentity &id) { return id.hasCallback != 0; });
  std::string message;
  const RequestIdentity &first = all[0];
  for (int rank = 1; rank < ranks; ++rank) {
    const RequestIdentity &other = all[static_cast<size_t>(rank)];
    std::vector<std::string> differs;
    if (other.prompts != first.prompts)
      differs.push_back("the number of prompts " + std::to_string(other.prompts) +
                        " (rank 0: " + std::to_string(first.prompts) + ")");
    else if (other.promptsHash != first.promptsHash)
      differs.push_back("the prompts' tokens");
    if (other.maxNewTokens != first.maxNewTokens)
      differs.push_back("max_new_tokens " + std::to_string(other.maxNewTokens) +
                        " (rank 0: " + std::to_string(first.maxNewTokens) + ")");
    if (other.temperature != first.temperature || other.topK != first.topK ||
        other.topP != first.topP || other.seed != first.seed)
      differs.push_back("the sampling settings (temperature, top-k, top-p, seed)");
    if (other.numBeams != first.numBeams || other.lengthPenalty != first.lengthPenalty ||
        other.earlyStopping != first.earlyStopping)
      differs.push_back("the beam search (num_beams, length_penalty, early_stopping)");
    if (other.repetitionPenalty != first.repetitionPenalty ||
        other.noRepeatNgramSize != first.noRepeatNgramSize ||
        other.minNewTokens != first.minNewTokens ||
        other.forcedBosToken != first.forcedBosToken ||
        other.forcedEosToken != first.forcedEosToken)
      differs.push_back("the logits processors (repetition_penalty, no_repeat_ngram_size, "
                        "min_new_tokens, forced BOS/EOS)");
    if (other.stopTokensHash != first.stopTokensHash || other.ignoreEos != first.ignoreEos)
      differs.push_back("the stop tokens");
    if (differs.empty())
      continue;
    message += "; rank " + std::to_string(rank) + " differs from rank 0 in ";
    for (size_t i = 0; i < differs.size(); ++i)
      message += (i ? ", " : "") + differs[i];
  }
  if (message.empty())
    return Status::ok();
  return Status::error("rank " + std::to_string(group.rank()) +
                       ": the tensor-parallel ranks were given different requests" + message +
                       "; every rank must generate from the same prompts and options");
}

} // namespace dsrt
