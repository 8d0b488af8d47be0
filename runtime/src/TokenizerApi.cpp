// The tokenizer part of the C API (include/dsrt/dsrt.h) over dsrt::Tokenizer.
#include "dsrt/dsrt.h"

#include "PlanHandle.h"
#include "Status.h"
#include "tokenizer/Tokenizer.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

struct dsrt_tokenizer {
  std::unique_ptr<dsrt::Tokenizer> tokenizer;
};

namespace {

dsrt_status nullArgument(const char *what) {
  return dsrt::fail(DSRT_INVALID_ARGUMENT, std::string(what) + " is null");
}

// Unsupported components are DSRT_UNSUPPORTED; anything else wrong with the JSON (or the
// file) is the caller's input, DSRT_INVALID_ARGUMENT.
dsrt_status loadFailure(const dsrt::Status &status) {
  bool unsupported = status.message().find("not supported") != std::string::npos;
  return dsrt::fail(unsupported ? DSRT_UNSUPPORTED : DSRT_INVALID_ARGUMENT, status.message());
}

dsrt_status wrap(std::unique_ptr<dsrt::Tokenizer> tokenizer, dsrt_tokenizer **out) {
  *out = new (std::nothrow) dsrt_tokenizer{std::move(tokenizer)};
  return *out ? DSRT_OK : dsrt::fail(DSRT_OUT_OF_MEMORY, "out of memory");
}

} // namespace

extern "C" {

dsrt_status dsrt_tokenizer_from_plan(const dsrt_plan *plan, dsrt_tokenizer **out) {
  if (!plan || !out)
    return nullArgument(!plan ? "plan" : "out");
  const auto *json = plan->file->plan().tokenizer_json();
  if (!json || json->size() == 0)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, plan->file->path() + ": the plan has no tokenizer");
  std::unique_ptr<dsrt::Tokenizer> tokenizer;
  dsrt::Status status = dsrt::Tokenizer::fromJson(
      std::string_view(reinterpret_cast<const char *>(json->data()), json->size()), tokenizer);
  if (!status.isOk())
    return loadFailure(dsrt::Status::error(plan->file->path() + ": " + status.message()));
  return wrap(std::move(tokenizer), out);
}

dsrt_status dsrt_plan_tokenizer_json(const dsrt_plan *plan, const char **json, size_t *size) {
  if (!plan || !json || !size)
    return nullArgument(!plan ? "plan" : !json ? "json" : "size");
  const auto *stored = plan->file->plan().tokenizer_json();
  if (!stored || stored->size() == 0)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, plan->file->path() + ": the plan has no tokenizer");
  *json = reinterpret_cast<const char *>(stored->data());
  *size = stored->size();
  return DSRT_OK;
}

dsrt_status dsrt_plan_generation_config(const dsrt_plan *plan, const char **json,
                                        size_t *size) {
  if (!plan || !json || !size)
    return nullArgument(!plan ? "plan" : !json ? "json" : "size");
  const auto *stored = plan->file->plan().generation_config_json();
  const bool any = stored && stored->size() != 0;
  *json = any ? reinterpret_cast<const char *>(stored->data()) : nullptr;
  *size = any ? stored->size() : 0;
  return DSRT_OK;
}

dsrt_status dsrt_tokenizer_from_file(const char *path, dsrt_tokenizer **out) {
  if (!path || !out)
    return nullArgument(!path ? "path" : "out");
  std::unique_ptr<dsrt::Tokenizer> tokenizer;
  dsrt::Status status = dsrt::Tokenizer::fromFile(path, tokenizer);
  if (!status.isOk())
    return loadFailure(status);
  return wrap(std::move(tokenizer), out);
}

void dsrt_tokenizer_free(dsrt_tokenizer *tokenizer) { delete tokenizer; }

dsrt_status dsrt_tokenizer_encode(const dsrt_tokenizer *tokenizer, const char *text,
                                  size_t length, int add_special, int64_t **ids, size_t *count) {
  if (!tokenizer || !ids || !count)
    return nullArgument(!tokenizer ? "tokenizer" : !ids ? "ids" : "count");
  if (!text && length)
    return nullArgument("text");
  std::vector<int64_t> encoded;
  dsrt::Status status = tokenizer->tokenizer->encode(
      std::string_view(text ? text : "", length), add_special != 0, encoded);
  if (!status.isOk())
    return dsrt::fail(DSRT_INVALID_ARGUMENT, status.message());
  // malloc(0) may return null; one element keeps a successful result non-null.
  auto *buffer = static_cast<int64_t *>(std::malloc(sizeof(int64_t) * (encoded.size() + 1)));
  if (!buffer)
    return dsrt::fail(DSRT_OUT_OF_MEMORY, "out of memory");
  if (!encoded.empty())
    std::memcpy(buffer, encoded.data(), sizeof(int64_t) * encoded.size());
  *ids = buffer;
  *count = encoded.size();
  return DSRT_OK;
}

dsrt_status dsrt_tokenizer_decode(const dsrt_tokenizer *tokenizer, const int64_t *ids,
                                  size_t count, int skip_special, char **text) {
  if (!tokenizer || !text)
    return nullArgument(!tokenizer ? "tokenizer" : "text");
  if (!ids && count)
    return nullArgument("ids");
  std::string decoded;
  dsrt::Status status = tokenizer->tokenizer->decode(ids, count, skip_special != 0, decoded);
  if (!status.isOk())
    return dsrt::fail(DSRT_INVALID_ARGUMENT, status.message());
  auto *buffer = static_cast<char *>(std::malloc(decoded.size() + 1));
  if (!buffer)
    return dsrt::fail(DSRT_OUT_OF_MEMORY, "out of memory");
  std::memcpy(buffer, decoded.c_str(), decoded.size() + 1);
  *text = buffer;
  return DSRT_OK;
}

dsrt_status dsrt_plan_chat_template_count(const dsrt_plan *plan, size_t *count) {
  if (!plan || !count)
    return nullArgument(!plan ? "plan" : "count");
  const auto *templates = plan->file->plan().chat_templates();
  *count = templates ? templates->size() : 0;
  return DSRT_OK;
}

dsrt_status dsrt_plan_chat_template(const dsrt_plan *plan, size_t index, const char **name,
                                    const char **source) {
  if (!plan || !name || !source)
    return nullArgument(!plan ? "plan" : !name ? "name" : "source");
  const auto *templates = plan->file->plan().chat_templates();
  const size_t count = templates ? templates->size() : 0;
  if (index >= count)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "chat template " + std::to_string(index) +
                                                 " of " + std::to_string(count));
  const dsp::ChatTemplate *entry = templates->Get(static_cast<flatbuffers::uoffset_t>(index));
  *name = entry->name() ? entry->name()->c_str() : "";
  *source = entry->source() ? entry->source()->c_str() : "";
  return DSRT_OK;
}

dsrt_status dsrt_plan_special_token(const dsrt_plan *plan, const char *name,
                                    const char **content) {
  if (!plan || !name || !content)
    return nullArgument(!plan ? "plan" : !name ? "name" : "content");
  *content = nullptr;
  if (const auto *tokens = plan->file->plan().special_tokens())
    for (const dsp::SpecialToken *token : *tokens)
      if (token->name() && token->content() && token->name()->string_view() == name)
        *content = token->content()->c_str();
  return DSRT_OK;
}

const char *dsrt_plan_model_name(const dsrt_plan *plan) {
  if (!plan || !plan->file->plan().model_name())
    return "";
  return plan->file->plan().model_name()->c_str();
}

dsrt_status dsrt_plan_vocabulary(const dsrt_plan *plan, int64_t *vocab_size,
                                 const int64_t **eos_tokens, size_t *eos_count) {
  if (!plan || !vocab_size || !eos_tokens || !eos_count)
    return nullArgument(!plan ? "plan" : !vocab_size ? "vocab_size" : !eos_tokens ? "eos_tokens"
                                                                                  : "eos_count");
  const auto *model = plan->file->plan().model();
  if (!model || model->vocab_size() <= 0)
    return dsrt::fail(DSRT_INVALID_ARGUMENT,
                      plan->file->path() + ": the plan describes no language model");
  *vocab_size = model->vocab_size();
  const auto *eos = model->eos_token_ids();
  *eos_tokens = eos && eos->size() ? reinterpret_cast<const int64_t *>(eos->data()) : nullptr;
  *eos_count = eos ? eos->size() : 0;
  return DSRT_OK;
}

} // extern "C"
