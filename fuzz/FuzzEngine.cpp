// libFuzzer harness of the serving engine's C API (issue 41): an engine on one plan
// ($DSRT_FUZZ_PLAN, a small single-rank plan) created with options the input spells, then a
// sequence of calls it spells: add a request with any prompt and options, step, cancel or
// poll any id (a live one or not), ask a request's cached tokens, reset the prefix cache,
// read the stats. Every call either works or fails with a message; afterwards the engine
// must finish every request it holds within a bound of steps, and give every KV block back.
#include "fuzz/FuzzSupport.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

namespace {

using dsc::fuzz::Choices;
using dsc::fuzz::requireMessage;

dsrt_plan *plan = nullptr;
int64_t maxSeq = 0;

dsrt_engine *createEngine(Choices &choices) {
  dsrt_engine_options options;
  dsrt_engine_options_init(&options);
  options.block_size = static_cast<int32_t>(choices.pick<int64_t>({16, 1, 7, 0, -1, 64, 1000}));
  // A few blocks to a roomy pool: small budgets force preemption.
  options.kv_cache_bytes = choices.pick<uint64_t>({0, 0, 1, 1 << 16, 1 << 18, 1 << 20, 1 << 22,
                                                   std::numeric_limits<uint64_t>::max()});
  options.max_tokens_per_step = static_cast<int32_t>(choices.pick<int64_t>({0, 1, 3, 8, -1}));
  options.max_running = static_cast<int32_t>(choices.pick<int64_t>({0, 1, 2, 5, -1}));
  options.prefix_caching = choices.byte() % 2;
  options.batch_invariant = choices.byte() % 2;
  options.kv_cache_dtype = choices.pick<dsrt_dtype>({DSRT_UNDEFINED, DSRT_I8, DSRT_F32});
  // Fractions of the free memory that allocate little (a real one would take gigabytes,
  // past libFuzzer's memory limit), and ones to refuse.
  if (choices.byte() % 8 == 0)
    options.kv_cache_memory_fraction =
        choices.pick<double>({1e-5, 1e-9, 0.0, -0.5, 2.0, std::nan(""), 1e-300});
  // Speculative decoding: the fuzzer's prompts repeat (3 + i % 5), so drafts are found, and
  // some confirmed; and values to refuse.
  options.speculative_tokens = static_cast<int32_t>(choices.pick<int64_t>({0, 0, 2, 4, 17, -1}));
  options.prompt_lookup_max = static_cast<int32_t>(choices.pick<int64_t>({3, 1, 5, 0}));
  options.prompt_lookup_min = static_cast<int32_t>(choices.pick<int64_t>({1, 2, 0}));
  if (choices.byte() % 16 == 0)
    options.struct_size = choices.byte();
  dsrt_engine *engine = nullptr;
  const dsrt_status status = dsrt_engine_create(plan, &options, &engine);
  requireMessage(status, "dsrt_engine_create");
  return status == DSRT_OK ? engine : nullptr;
}

// Token masks (structured output) of a few fixed kinds, which outlive every request: all
// allowed, one token, none, a failing mask, and every third token.
enum class MaskKind { All, One, None, Fails, EveryThird };
constexpr MaskKind kMaskKinds[] = {MaskKind::All, MaskKind::One, MaskKind::None, MaskKind::Fails,
                                   MaskKind::EveryThird};

int fuzzMask(void *user, int64_t, const int64_t *, size_t count, uint32_t *allowed,
             size_t words) {
  switch (*static_cast<const MaskKind *>(user)) {
  case MaskKind::All:
    return 0;
  case MaskKind::One:
    std::fill(allowed, allowed + words, 0u);
    allowed[count % words] = 1u << (count % 32);
    return 0;
  case MaskKind::None:
    std::fill(allowed, allowed + words, 0u);
    return 0;
  case MaskKind::Fails:
    return count >= 1 ? -3 : 0;
  case MaskKind::EveryThird:
    for (size_t w = 0; w < words; ++w)
      allowed[w] = 0x49249249u << (w % 3);
    return 0;
  }
  return 0;
}

void addRequest(Choices &choices, dsrt_engine *engine, std::vector<int64_t> &ids) {
  // Prompts from a few shared tokens, so that prefixes repeat and the cache hits.
  const size_t length = choices.pick<size_t>({1, 2, 5, 17, 33, 0, static_cast<size_t>(maxSeq)});
  std::vector<int64_t> prompt(length);
  for (size_t i = 0; i < length; ++i)
    prompt[i] = choices.byte() % 8 == 0 ? choices.integer() : 3 + (i % 5);
  dsrt_request_options options;
  dsrt_request_options_init(&options);
  options.max_new_tokens = static_cast<int32_t>(choices.pick<int64_t>({1, 2, 4, 9, 0, -1, 100000}));
  options.temperature = choices.byte() % 2 ? 0.0f : choices.real();
  options.top_k = static_cast<int32_t>(choices.pick<int64_t>({0, 1, 5, -1}));
  options.top_p = choices.byte() % 2 ? 1.0f : choices.real();
  options.min_p = choices.byte() % 4 ? 0.0f : choices.real();
  options.seed = static_cast<uint64_t>(choices.integer());
  std::vector<int64_t> stops;
  for (size_t i = choices.byte() % 3; i > 0; --i)
    stops.push_back(choices.integer());
  options.stop_tokens = stops.empty() ? nullptr : stops.data();
  options.stop_token_count = stops.size();
  options.ignore_eos = choices.byte() % 2;
  options.logprobs = static_cast<int32_t>(choices.pick<int64_t>({-1, -1, 0, 3, 20, 21, -2}));
  options.prompt_logprobs = static_cast<int32_t>(choices.pick<int64_t>({-1, -1, 0, 2, 21}));
  if (choices.byte() % 4 == 0) {
    options.repetition_penalty = choices.real();
    options.presence_penalty = choices.real();
    options.frequency_penalty = choices.real();
  }
  std::vector<int64_t> biasTokens;
  std::vector<float> biasValues;
  for (size_t i = choices.byte() % 3; i > 0; --i) {
    biasTokens.push_back(choices.integer());
    biasValues.push_back(choices.real());
  }
  options.logit_bias_tokens = biasTokens.empty() ? nullptr : biasTokens.data();
  options.logit_bias_values = biasValues.empty() ? nullptr : biasValues.data();
  options.logit_bias_count = biasTokens.size();
  options.min_tokens = static_cast<int32_t>(choices.pick<int64_t>({0, 0, 1, 3, -1}));
  options.priority = static_cast<int32_t>(choices.pick<int64_t>({0, 0, 1, -1, INT32_MIN}));
  if (choices.byte() % 4 == 0) {
    options.token_mask = fuzzMask;
    options.token_mask_user_data =
        const_cast<MaskKind *>(&kMaskKinds[choices.byte() % std::size(kMaskKinds)]);
  }
  int64_t id = -1;
  const dsrt_status status = dsrt_engine_add_request(
      engine, length || choices.byte() % 2 ? prompt.data() : nullptr, length,
      choices.byte() % 16 ? &options : nullptr, &id);
  requireMessage(status, "dsrt_engine_add_request");
  if (status == DSRT_OK)
    ids.push_back(id);
}

// One of the ids handed out, or one never handed out.
int64_t someId(Choices &choices, const std::vector<int64_t> &ids) {
  if (ids.empty() || choices.byte() % 4 == 0)
    return choices.integer();
  return ids[choices.byte() % ids.size()];
}

void poll(Choices &choices, dsrt_engine *engine, const std::vector<int64_t> &ids) {
  int64_t tokens[8];
  size_t count = 0;
  dsrt_request_state state;
  requireMessage(dsrt_engine_poll(engine, someId(choices, ids), tokens, choices.byte() % 9,
                                  &count, &state),
                 "dsrt_engine_poll");
}

} // namespace

// The runtime allocates plan-sized buffers with new (std::nothrow) and refuses what it cannot
// get; ASan would abort on a forged size instead of returning null.
extern "C" const char *__asan_default_options() { return "allocator_may_return_null=1"; }

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  plan = dsc::fuzz::openFuzzPlan();
  if (dsrt_plan_limits(plan, nullptr, &maxSeq) != DSRT_OK) {
    std::fprintf(stderr, "fuzz: the plan's limits: %s\n", dsrt_last_error());
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Choices choices(data, size);
  dsrt_engine *engine = createEngine(choices);
  if (!engine)
    return 0;
  std::vector<int64_t> ids;
  for (int call = 0; call < 24 && !choices.empty(); ++call) {
    switch (choices.byte() % 8) {
    case 0:
    case 1: addRequest(choices, engine, ids); break;
    case 2:
    case 3: requireMessage(dsrt_engine_step(engine, nullptr), "dsrt_engine_step"); break;
    case 4:
      requireMessage(dsrt_engine_cancel(engine, someId(choices, ids)), "dsrt_engine_cancel");
      break;
    case 5: poll(choices, engine, ids); break;
    case 6: {
      int64_t cached = 0;
      requireMessage(dsrt_engine_request_cached_tokens(engine, someId(choices, ids), &cached),
                     "dsrt_engine_request_cached_tokens");
      break;
    }
    default:
      requireMessage(dsrt_engine_reset_prefix_cache(engine), "dsrt_engine_reset_prefix_cache");
      break;
    }
  }
  // Whatever was asked, the engine finishes what it holds (each request at most maxSeq
  // positions, recomputed at most once per preemption) and returns every block.
  int busy = 1;
  for (int64_t steps = 0; busy; ++steps) {
    if (steps > 100000) {
      std::fprintf(stderr, "fuzz: the engine made no progress in 100000 steps\n");
      std::abort();
    }
    const dsrt_status status = dsrt_engine_step(engine, &busy);
    requireMessage(status, "dsrt_engine_step");
  }
  dsrt_engine_stats stats;
  requireMessage(dsrt_engine_stats_get(engine, &stats), "dsrt_engine_stats_get");
  if (stats.used_blocks != 0 || stats.running != 0 || stats.waiting != 0) {
    std::fprintf(stderr, "fuzz: an idle engine holds %lld blocks (%lld running, %lld waiting)\n",
                 static_cast<long long>(stats.used_blocks), static_cast<long long>(stats.running),
                 static_cast<long long>(stats.waiting));
    std::abort();
  }
  dsrt_engine_destroy(engine);
  return 0;
}
