#include "dsrun/Generation.h"

#include "common/CommandLine.h"

#include <algorithm>
#include <iostream>

namespace dsrun {

void die(const std::string &message, int code) { dstools::fail("dsrun", message, code); }

void check(dsrt_status status, const std::string &what) {
  if (status != DSRT_OK)
    die(what + ": " + dsrt_last_error());
}

const char *const kSamplingFlags[12] = {
    "--max-new-tokens", "--temperature", "--top-k", "--top-p", "--num-beams",
    "--length-penalty", "--early-stopping", "--repetition-penalty", "--no-repeat-ngram-size",
    "--min-new-tokens", "--forced-bos", "--forced-eos"};

dsrt_generate_options withModelDefaults(const dsrt_plan *plan, bool model,
                                        const dsrt_generate_options &given,
                                        const std::vector<std::string> &givenFlags) {
  if (!model)
    return given;
  dsrt_generate_options options;
  check(dsrt_generate_options_from_plan(plan, &options),
        "the model's generation defaults (--generation-config none leaves them out)");
  auto keep = [&](const char *flag) {
    return std::find(givenFlags.begin(), givenFlags.end(), std::string(flag)) !=
           givenFlags.end();
  };
  if (keep("--max-new-tokens")) options.max_new_tokens = given.max_new_tokens;
  if (keep("--temperature")) options.temperature = given.temperature;
  if (keep("--top-k")) options.top_k = given.top_k;
  if (keep("--top-p")) options.top_p = given.top_p;
  if (keep("--num-beams")) options.num_beams = given.num_beams;
  if (keep("--length-penalty")) options.length_penalty = given.length_penalty;
  if (keep("--early-stopping")) options.early_stopping = given.early_stopping;
  if (keep("--repetition-penalty")) options.repetition_penalty = given.repetition_penalty;
  if (keep("--no-repeat-ngram-size")) options.no_repeat_ngram_size = given.no_repeat_ngram_size;
  if (keep("--min-new-tokens")) options.min_new_tokens = given.min_new_tokens;
  if (keep("--forced-bos")) options.forced_bos_token_id = given.forced_bos_token_id;
  if (keep("--forced-eos")) options.forced_eos_token_id = given.forced_eos_token_id;
  options.seed = given.seed;
  options.ignore_eos = given.ignore_eos;
  return options;
}

void Stream::print(size_t count, bool final) {
  char *text = nullptr;
  if (dsrt_tokenizer_decode(tokenizer, tokens.data(), count, 1, &text) != DSRT_OK)
    return;
  std::string whole(text);
  dsrt_free(text);
  size_t stable = whole.size();
  if (!final && whole.size() >= 3 && whole.compare(whole.size() - 3, 3, "\xEF\xBF\xBD") == 0)
    stable -= 3;
  if (stable > printed) {
    std::cout << whole.substr(printed, stable - printed) << std::flush;
    printed = stable;
  }
}

int streamToken(void *user, size_t sequence, int64_t token) {
  auto *stream = static_cast<Stream *>(user);
  if (sequence != 0 || !stream->tokenizer)
    return 0;
  stream->tokens.push_back(token);
  stream->print(stream->tokens.size() - 1, false);
  return 0;
}

void printGeneration(dsrt_generation *generation, const dsrt_tokenizer *tokenizer,
                     const std::vector<std::string> &texts, Stream *stream, bool echoPrompt) {
  const char *reasons[] = {"length", "stop", "callback"};
  for (size_t i = 0; i < dsrt_generation_count(generation); ++i) {
    const int64_t *tokens = nullptr;
    size_t count = 0;
    dsrt_finish_reason reason = DSRT_FINISH_LENGTH;
    check(dsrt_generation_tokens(generation, i, &tokens, &count, &reason), "result");
    // The stop token is in the tokens, not in the text.
    const size_t spoken = reason == DSRT_FINISH_STOP && count > 0 ? count - 1 : count;
    if (stream) {
      stream->print(std::min(spoken, stream->tokens.size()), true);
      std::cout << "\n";
      continue;
    }
    if (tokenizer && i < texts.size()) {
      char *text = nullptr;
      check(dsrt_tokenizer_decode(tokenizer, tokens, spoken, 1, &text), "cannot decode");
      std::cout << "sequence " << i << ": " << (echoPrompt ? texts[i] : "") << text << "\n";
      dsrt_free(text);
      continue;
    }
    std::cout << "sequence " << i << ":";
    for (size_t t = 0; t < count; ++t)
      std::cout << " " << tokens[t];
    std::cout << " (" << reasons[reason] << ")\n";
  }
}

} // namespace dsrun
