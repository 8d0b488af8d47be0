// The C API of the serving engine (docs/serving.md) over engine/Engine.h.
#include "dsrt/dsrt.h"

#include "PlanHandle.h"
#include "Status.h"
#include "comm/MpiCollectives.h"
#include "engine/Engine.h"

#include <cmath>

struct dsrt_engine {
  // Declared first, destroyed last: an MPI rank's engine uses it to its end.
  std::unique_ptr<dsrt::ops::Collectives> mpi;
  std::unique_ptr<dsrt::engine::Engine> engine;
};

namespace {

dsrt_status nullArgument(const char *what) {
  return dsrt::fail(DSRT_INVALID_ARGUMENT, std::string(what) + " is null");
}

dsrt_status fromStatus(const dsrt::Status &status, dsrt_status code) {
  return status.isOk() ? DSRT_OK : dsrt::fail(code, status.message());
}

bool knownDevice(dsrt_device device) {
  return device == DSRT_DEVICE_CPU || device == DSRT_DEVICE_CUDA ||
         device == DSRT_DEVICE_CPU_REFERENCE;
}

} // namespace

extern "C" {

void dsrt_engine_options_init(dsrt_engine_options *options) {
  if (!options)
    return;
  *options = dsrt_engine_options{};
  options->struct_size = sizeof(dsrt_engine_options);
  options->device = DSRT_DEVICE_CPU;
  options->block_size = 16;
  options->prefix_caching = 1;
  options->batch_invariant = 1;
  options->prompt_lookup_max = 3;
  options->prompt_lookup_min = 1;
  options->speculative_max_batch = 8;
}

void dsrt_request_options_init(dsrt_request_options *options) {
  if (!options)
    return;
  *options = dsrt_request_options{};
  options->struct_size = sizeof(dsrt_request_options);
  options->max_new_tokens = 16;
  options->top_p = 1.0f;
  options->logprobs = -1;
  options->repetition_penalty = 1.0f;
  options->prompt_logprobs = -1;
}

static dsrt_status toEngineOptions(const dsrt_engine_options *options,
                                   dsrt::engine::EngineOptions &cpp) {
  dsrt_engine_options given;
  dsrt_engine_options_init(&given);
  if (options) {
    if (options->struct_size != sizeof(dsrt_engine_options))
      return dsrt::fail(DSRT_INVALID_ARGUMENT,
                        "dsrt_engine_options.struct_size is not this library's; call "
                        "dsrt_engine_options_init first");
    given = *options;
  }
  if (!knownDevice(given.device))
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "unknown device " + std::to_string(given.device));
  cpp.device = given.device == DSRT_DEVICE_CUDA            ? dsrt::DeviceKind::Cuda
               : given.device == DSRT_DEVICE_CPU_REFERENCE ? dsrt::DeviceKind::CpuReference
                                                           : dsrt::DeviceKind::Cpu;
  cpp.blockSize = given.block_size;
  cpp.kvCacheBytes = given.kv_cache_bytes;
  cpp.kvCacheMemoryFraction = given.kv_cache_memory_fraction;
  cpp.maxTokensPerStep = given.max_tokens_per_step;
  cpp.maxRunningSequences = given.max_running;
  cpp.prefixCaching = given.prefix_caching != 0;
  if (given.batch_invariant < 0 || given.batch_invariant > 2)
    return dsrt::fail(DSRT_INVALID_ARGUMENT, "batch_invariant must be 0, 1 or 2, not " +
                                                 std::to_string(given.batch_invariant));
  cpp.batchInvariant = given.batch_invariant;
  if (given.kv_cache_dtype != DSRT_UNDEFINED && given.kv_cache_dtype != DSRT_I8)
    return dsrt::fail(DSRT_INVALID_ARGUMENT,
                      "kv_cache_dtype must be DSRT_UNDEFINED (the plan's) or DSRT_I8, not " +
                          std::to_string(given.kv_cache_dtype));
  cpp.int8KvCache = given.kv_cache_dtype == DSRT_I8;
  cpp.speculativeTokens = given.speculative_tokens;
  cpp.promptLookupMax = given.prompt_lookup_max;
  cpp.promptLookupMin = given.prompt_lookup_min;
  cpp.speculativeMaxBatch = given.speculative_max_batch;
  return DSRT_OK;
}

// Every rank in this process, or (mpi) this process's rank of an MPI group.
static dsrt_status createEngine(dsrt_plan *plan, const dsrt_engine_options *options, bool mpi,
                                dsrt_engine **out) {
  if (!plan || !out)
    return nullArgument(!plan ? "plan" : "out");
  dsrt::engine::EngineOptions cpp;
  if (dsrt_status status = toEngineOptions(options, cpp))
    return status;
  auto handle = std::make_unique<dsrt_engine>();
  if (mpi)
    if (dsrt_status status =
            fromStatus(dsrt::createMpiCollectives(handle->mpi), DSRT_UNSUPPORTED))
      return status;
  dsrt::Status created =
      mpi ? dsrt::engine::Engine::createRank(plan->file, cpp, *handle->mpi, handle->engine)
          : dsrt::engine::Engine::create(plan->file, cpp, handle->engine);
  if (dsrt_status status = fromStatus(created, DSRT_INVALID_ARGUMENT))
    return status;
  *out = handle.release();
  return DSRT_OK;
}

dsrt_status dsrt_engine_create(dsrt_plan *plan, const dsrt_engine_options *options,
                               dsrt_engine **out) {
  return createEngine(plan, options, false, out);
}

dsrt_status dsrt_engine_create_mpi(dsrt_plan *plan, const dsrt_engine_options *options,
                                   dsrt_engine **out) {
  return createEngine(plan, options, true, out);
}

int dsrt_engine_rank(const dsrt_engine *engine) {
  return engine && engine->mpi ? engine->mpi->rank() : 0;
}

dsrt_status dsrt_engine_follow(dsrt_engine *engine) {
  if (!engine)
    return nullArgument("engine");
  return fromStatus(engine->engine->follow(), DSRT_INTERNAL);
}

void dsrt_engine_destroy(dsrt_engine *engine) { delete engine; }

dsrt_status dsrt_engine_set_callback(dsrt_engine *engine, dsrt_engine_callback callback,
                                     void *user_data) {
  if (!engine)
    return nullArgument("engine");
  if (!callback) {
    engine->engine->setCallback(nullptr);
    return DSRT_OK;
  }
  engine->engine->setCallback([callback, user_data](
                                  int64_t request, int64_t token,
                                  dsrt::engine::RequestFinish finish,
                                  const dsrt::engine::TokenLogprobs *logprobs) {
    const auto state = static_cast<dsrt_request_state>(finish);
    if (!logprobs) {
      callback(user_data, request, token, state, nullptr);
      return;
    }
    const dsrt_token_logprobs view{logprobs->logprob, logprobs->topTokens.size(),
                                   logprobs->topTokens.data(), logprobs->topLogprobs.data()};
    callback(user_data, request, token, state, &view);
  });
  return DSRT_OK;
}

dsrt_status dsrt_engine_add_request(dsrt_engine *engine, const int64_t *prompt, size_t length,
                                    const dsrt_request_options *options,
                                    int64_t *request_id) {
  if (!engine || !request_id || (!prompt && length > 0))
    return nullArgument(!engine ? "engine" : !request_id ? "request_id" : "prompt");
  dsrt_request_options given;
  dsrt_request_options_init(&given);
  if (options) {
    if (options->struct_size != sizeof(dsrt_request_options))
      return dsrt::fail(DSRT_INVALID_ARGUMENT,
                        "dsrt_request_options.struct_size is not this library's; call "
                        "dsrt_request_options_init first");
    given = *options;
  }
  if (given.stop_token_count > 0 && !given.stop_tokens)
    return nullArgument("stop_tokens");
  if (given.logit_bias_count > 0 && (!given.logit_bias_tokens || !given.logit_bias_values))
    return nullArgument(!given.logit_bias_tokens ? "logit_bias_tokens" : "logit_bias_values");
  dsrt::engine::RequestOptions cpp;
  cpp.maxNewTokens = given.max_new_tokens;
  cpp.temperature = given.temperature;
  cpp.topK = given.top_k;
  cpp.topP = given.top_p;
  cpp.seed = given.seed;
  cpp.stopTokens.assign(given.stop_tokens, given.stop_tokens + given.stop_token_count);
  cpp.ignoreEos = given.ignore_eos != 0;
  cpp.logprobs = given.logprobs;
  cpp.minP = given.min_p;
  cpp.repetitionPenalty = given.repetition_penalty;
  cpp.presencePenalty = given.presence_penalty;
  cpp.frequencyPenalty = given.frequency_penalty;
  cpp.promptLogprobs = given.prompt_logprobs;
  cpp.minTokens = given.min_tokens;
  cpp.priority = given.priority;
  for (size_t i = 0; i < given.logit_bias_count; ++i)
    cpp.logitBias.emplace_back(given.logit_bias_tokens[i], given.logit_bias_values[i]);
  if (given.token_mask) {
    const dsrt_token_mask_fn mask = given.token_mask;
    void *user = given.token_mask_user_data;
    cpp.tokenMask = [mask, user](int64_t request, const std::vector<int64_t> &generated,
                                 std::vector<uint32_t> &allowed) {
      const int code = mask(user, request, generated.data(), generated.size(), allowed.data(),
                            allowed.size());
      return code == 0 ? dsrt::Status::ok()
                       : dsrt::Status::error("its token_mask returned " + std::to_string(code));
    };
  }
  return fromStatus(engine->engine->add(std::vector<int64_t>(prompt, prompt + length), cpp,
                                        *request_id),
                    DSRT_INVALID_ARGUMENT);
}

dsrt_status dsrt_engine_cancel(dsrt_engine *engine, int64_t request_id) {
  if (!engine)
    return nullArgument("engine");
  return fromStatus(engine->engine->cancel(request_id), DSRT_INVALID_ARGUMENT);
}

dsrt_status dsrt_engine_reset_prefix_cache(dsrt_engine *engine) {
  if (!engine)
    return nullArgument("engine");
  return fromStatus(engine->engine->resetPrefixCache(), DSRT_INVALID_ARGUMENT);
}

dsrt_status dsrt_engine_step(dsrt_engine *engine, int *busy) {
  if (!engine)
    return nullArgument("engine");
  dsrt::Status status = engine->engine->step();
  if (busy)
    *busy = engine->engine->idle() ? 0 : 1;
  return fromStatus(status, DSRT_INTERNAL);
}

dsrt_status dsrt_engine_start(dsrt_engine *engine) {
  if (!engine)
    return nullArgument("engine");
  engine->engine->start();
  return DSRT_OK;
}

void dsrt_engine_stop(dsrt_engine *engine) {
  if (engine)
    engine->engine->stop();
}

dsrt_status dsrt_engine_poll(dsrt_engine *engine, int64_t request_id, int64_t *tokens,
                             size_t capacity, size_t *count, dsrt_request_state *state) {
  if (!engine || !count || !state || (!tokens && capacity > 0))
    return nullArgument(!engine ? "engine" : !count ? "count" : !state ? "state" : "tokens");
  std::vector<int64_t> taken;
  dsrt::engine::RequestFinish finish;
  if (dsrt_status status = fromStatus(
          engine->engine->poll(request_id, capacity, taken, finish), DSRT_INVALID_ARGUMENT))
    return status;
  std::copy(taken.begin(), taken.end(), tokens);
  *count = taken.size();
  *state = static_cast<dsrt_request_state>(finish);
  return DSRT_OK;
}

dsrt_status dsrt_engine_request_cached_tokens(const dsrt_engine *engine, int64_t request_id,
                                              int64_t *cached) {
  if (!engine || !cached)
    return nullArgument(!engine ? "engine" : "cached");
  return fromStatus(engine->engine->cachedPromptTokens(request_id, *cached),
                    DSRT_INVALID_ARGUMENT);
}

dsrt_status dsrt_engine_stats_get(const dsrt_engine *engine, dsrt_engine_stats *out) {
  if (!engine || !out)
    return nullArgument(!engine ? "engine" : "out");
  dsrt::engine::EngineStats stats = engine->engine->stats();
  *out = dsrt_engine_stats{};
  out->running = stats.running;
  out->waiting = stats.waiting;
  out->peak_running = stats.peakRunning;
  out->used_blocks = stats.usedBlocks;
  out->total_blocks = stats.totalBlocks;
  out->peak_used_blocks = stats.peakUsedBlocks;
  out->block_size = stats.blockSize;
  out->max_tokens_per_step = stats.maxTokensPerStep;
  out->bytes_per_block = stats.bytesPerBlock;
  out->prefix_hits = stats.prefixHits;
  out->prefix_misses = stats.prefixMisses;
  out->preemptions = stats.preemptions;
  out->steps = stats.steps;
  out->prompt_tokens = stats.promptTokens;
  out->generated_tokens = stats.generatedTokens;
  return DSRT_OK;
}

dsrt_status dsrt_engine_draft_stats(const dsrt_engine *engine, uint64_t *draft_tokens,
                                    uint64_t *accepted_tokens) {
  if (!engine || !draft_tokens || !accepted_tokens)
    return nullArgument(!engine ? "engine" : !draft_tokens ? "draft_tokens" : "accepted_tokens");
  dsrt::engine::EngineStats stats = engine->engine->stats();
  *draft_tokens = stats.draftTokens;
  *accepted_tokens = stats.acceptedDraftTokens;
  return DSRT_OK;
}

dsrt_status dsrt_plan_limits(const dsrt_plan *plan, int64_t *max_batch, int64_t *max_seq_len) {
  if (!plan)
    return nullArgument("plan");
  const dsp::Limits *limits = plan->file->plan().limits();
  if (max_batch)
    *max_batch = limits ? limits->max_batch() : 0;
  if (max_seq_len)
    *max_seq_len = limits ? limits->max_seq_len() : 0;
  return DSRT_OK;
}

} // extern "C"
