// A model's generation_config.json as transformers' generate() reads it, for the defaults of
// static generation (dsrt_generate_options_from_plan, dsrun): beam search, the logits
// processors, greedy or sampled, and how long. A value of the wrong type or range is an
// error naming it.
#include "generate/Generator.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace dsrt {
namespace {

using Json = nlohmann::json;

Status wrong(const std::string &key, const Json &value, const std::string &want) {
  return Status::error("generation_config.json's " + key + " must be " + want + ", not " +
                       value.dump());
}

// The integer at `key` (absent or null: left as it is), at least `least`.
Status integer(const Json &config, const std::string &key, int64_t least, int64_t &out) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null())
    return Status::ok();
  if (!it->is_number_integer() || it->get<int64_t>() < least)
    return wrong(key, *it, "an integer of at least " + std::to_string(least));
  out = it->get<int64_t>();
  return Status::ok();
}

Status number(const Json &config, const std::string &key, float &out) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null())
    return Status::ok();
  if (!it->is_number() || !std::isfinite(it->get<double>()))
    return wrong(key, *it, "a number");
  out = it->get<float>();
  return Status::ok();
}

// A token id, or a list of one (transformers takes a list for several EOS tokens).
Status token(const Json &config, const std::string &key, int64_t &out) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null())
    return Status::ok();
  const Json &value = it->is_array() && it->size() == 1 ? (*it)[0] : *it;
  if (!value.is_number_integer() || value.get<int64_t>() < 0)
    return wrong(key, *it, "a token id");
  out = value.get<int64_t>();
  return Status::ok();
}

} // namespace

Status modelGenerateDefaults(std::string_view text, bool encoderDecoder,
                             GenerateOptions &options) {
  Json config = Json::parse(text.begin(), text.end(), nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return Status::error("generation_config.json is not a JSON object");
  // Lengths: max_new_tokens, else an encoder-decoder's max_length (its decoder's, which
  // starts from one token); a decoder's max_length counts its prompt, unknown here.
  int64_t maxLength = 0, minLength = 0;
  DSRT_RETURN_IF_ERROR(integer(config, "max_new_tokens", 1, options.maxNewTokens));
  DSRT_RETURN_IF_ERROR(integer(config, "max_length", 1, maxLength));
  if (!config.contains("max_new_tokens") && maxLength > 1 && encoderDecoder)
    options.maxNewTokens = maxLength - 1;
  DSRT_RETURN_IF_ERROR(integer(config, "min_new_tokens", 0, options.minNewTokens));
  DSRT_RETURN_IF_ERROR(integer(config, "min_length", 0, minLength));
  if (!config.contains("min_new_tokens") && minLength > 1 && encoderDecoder)
    options.minNewTokens = minLength - 1;
  // Greedy unless do_sample, whatever the temperature says (as transformers reads it); top_k
  // is transformers' 50 when sampling and not set.
  auto doSample = config.find("do_sample");
  if (doSample != config.end() && !doSample->is_null() && !doSample->is_boolean())
    return wrong("do_sample", *doSample, "true or false");
  const bool sample = doSample != config.end() && doSample->is_boolean() && doSample->get<bool>();
  int64_t beams = 1;
  DSRT_RETURN_IF_ERROR(integer(config, "num_beams", 1, beams));
  if (sample && beams > 1)
    return Status::error("generation_config.json asks for beam sampling (do_sample with "
                         "num_beams " + std::to_string(beams) + "), which dsrt does not do");
  if (sample) {
    options.temperature = 1;
    options.topK = 50;
    options.topP = 1;
    DSRT_RETURN_IF_ERROR(number(config, "temperature", options.temperature));
    DSRT_RETURN_IF_ERROR(integer(config, "top_k", 0, options.topK));
    DSRT_RETURN_IF_ERROR(number(config, "top_p", options.topP));
  } else {
    options.temperature = 0;
  }
  options.numBeams = beams;
  DSRT_RETURN_IF_ERROR(number(config, "length_penalty", options.lengthPenalty));
  auto early = config.find("early_stopping");
  if (early != config.end() && !early->is_null()) {
    if (early->is_boolean())
      options.earlyStopping = early->get<bool>() ? GenerateOptions::EarlyStopping::Stop
                                                 : GenerateOptions::EarlyStopping::Heuristic;
    else if (*early == "never")
      options.earlyStopping = GenerateOptions::EarlyStopping::Never;
    else
      return wrong("early_stopping", *early, "true, false or \"never\"");
  }
  DSRT_RETURN_IF_ERROR(number(config, "repetition_penalty", options.repetitionPenalty));
  DSRT_RETURN_IF_ERROR(integer(config, "no_repeat_ngram_size", 0, options.noRepeatNgramSize));
  DSRT_RETURN_IF_ERROR(token(config, "forced_bos_token_id", options.forcedBosToken));
  DSRT_RETURN_IF_ERROR(token(config, "forced_eos_token_id", options.forcedEosToken));
  return Status::ok();
}

} // namespace dsrt
