// What the binding's files share (module.cpp: plans, tokenizers, sessions and the module;
// engine.cpp: the serving engine): the error, the status check and the plan.
#pragma once

#include "dsrt/dsrt.h"

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace dsrt_python {

namespace nb = nanobind;

// Raised as dsrt.Error with the library's message; `status` names the dsrt_status.
struct DsrtError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(dsrt_status status) {
  if (status != DSRT_OK)
    throw DsrtError(std::string(dsrt_status_name(status)) + ": " + dsrt_last_error());
}

inline dsrt_device deviceFromName(const std::string &name) {
  dsrt_device device = DSRT_DEVICE_CPU;
  check(dsrt_device_from_name(name.c_str(), &device));
  return device;
}

struct Plan {
  dsrt_plan *handle = nullptr;
  std::string path;

  explicit Plan(const std::string &file) : path(file) {
    nb::gil_scoped_release release;
    check(dsrt_plan_open(file.c_str(), &handle));
  }
  ~Plan() { dsrt_plan_close(handle); }
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;

  // The model's vocabulary size and EOS tokens.
  std::pair<int64_t, std::vector<int64_t>> vocabulary() const {
    int64_t size = 0;
    const int64_t *eos = nullptr;
    size_t count = 0;
    check(dsrt_plan_vocabulary(handle, &size, &eos, &count));
    return {size, std::vector<int64_t>(eos, eos + count)};
  }
  // The plan's tokenizer.json (a grammar library's token table), or None.
  std::optional<nb::bytes> tokenizerJson() const {
    const char *json = nullptr;
    size_t size = 0;
    if (dsrt_plan_tokenizer_json(handle, &json, &size) != DSRT_OK)
      return std::nullopt;
    return nb::bytes(json, size);
  }
  // The defaults of static generation by the Python keyword names of Session.generate: the
  // model's (dsrt_generate_options_from_plan), or dsrt_generate_options_init's.
  std::vector<std::pair<std::string, double>> generateDefaults(bool model) const {
    dsrt_generate_options options;
    if (model)
      check(dsrt_generate_options_from_plan(handle, &options));
    else
      dsrt_generate_options_init(&options);
    return {{"max_new_tokens", options.max_new_tokens},
            {"temperature", options.temperature},
            {"top_k", options.top_k},
            {"top_p", options.top_p},
            {"num_beams", options.num_beams},
            {"length_penalty", options.length_penalty},
            {"early_stopping", options.early_stopping},
            {"repetition_penalty", options.repetition_penalty},
            {"no_repeat_ngram_size", options.no_repeat_ngram_size},
            {"min_new_tokens", options.min_new_tokens},
            {"forced_bos_token_id", static_cast<double>(options.forced_bos_token_id)},
            {"forced_eos_token_id", static_cast<double>(options.forced_eos_token_id)}};
  }
  // The model's generation_config.json (its sampling defaults), or None.
  std::optional<nb::bytes> generationConfigJson() const {
    const char *json = nullptr;
    size_t size = 0;
    check(dsrt_plan_generation_config(handle, &json, &size));
    if (size == 0)
      return std::nullopt;
    return nb::bytes(json, size);
  }
  std::pair<int64_t, int64_t> limits() const {
    int64_t maxBatch = 0, maxSeqLen = 0;
    check(dsrt_plan_limits(handle, &maxBatch, &maxSeqLen));
    return {maxBatch, maxSeqLen};
  }
  std::vector<std::pair<std::string, std::string>> chatTemplates() const {
    size_t count = 0;
    check(dsrt_plan_chat_template_count(handle, &count));
    std::vector<std::pair<std::string, std::string>> templates;
    for (size_t i = 0; i < count; ++i) {
      const char *name = nullptr, *source = nullptr;
      check(dsrt_plan_chat_template(handle, i, &name, &source));
      templates.emplace_back(name, source);
    }
    return templates;
  }
  std::optional<std::string> specialToken(const std::string &name) const {
    const char *content = nullptr;
    check(dsrt_plan_special_token(handle, name.c_str(), &content));
    return content ? std::optional<std::string>(content) : std::nullopt;
  }
  // (name, dtype, shape with -1 where dynamic) of each input or output of `program`.
  std::vector<std::tuple<std::string, int, std::vector<int64_t>>> io(const std::string &program,
                                                                    bool outputs) const {
    size_t count = 0;
    check(dsrt_plan_io_count(handle, program.c_str(), outputs ? 1 : 0, &count));
    std::vector<std::tuple<std::string, int, std::vector<int64_t>>> result;
    for (size_t i = 0; i < count; ++i) {
      dsrt_tensor info{};
      check(dsrt_plan_io_info(handle, program.c_str(), outputs ? 1 : 0, i, &info));
      result.emplace_back(info.name, static_cast<int>(info.dtype),
                          std::vector<int64_t>(info.shape, info.shape + info.rank));
    }
    return result;
  }
};


// Adds Engine (engine.cpp) to the module.
void bindEngine(nb::module_ &m);

} // namespace dsrt_python
