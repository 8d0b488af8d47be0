// dsrt._dsrt.Engine: the serving engine (dsrt_engine_*) for python/dsrt/engine.py. The
// engine's thread takes the GIL only for a request's token mask (structured output); its
// token callback queues events, which a Python thread collects with wait_events.
#include "binding.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace dsrt_python {
namespace {

using namespace nb::literals;

// One token (or, with token -1, a request's end) as the engine's thread reported it.
struct Event {
  int64_t request = 0, token = -1;
  int state = DSRT_REQUEST_RUNNING;
  bool hasLogprob = false;
  float logprob = 0;
  std::vector<std::pair<int64_t, float>> top;
  // With each generated token: the prompt tokens the request found in the prefix cache
  // (dsrt_engine_request_cached_tokens); -1 on the other events.
  int64_t cached = -1;
};

// A request's token mask: `fill(new_tokens)` is told the tokens drawn since its last call
// and returns the allowed tokens as int32 words (bit t % 32 of word t / 32), or None for
// all of them. Called on the engine's stepping thread, which takes the GIL for it.
struct MaskHolder {
  nb::object fill;
  size_t seen = 0;

  static int call(void *user, int64_t, const int64_t *generated, size_t count,
                  uint32_t *allowed, size_t words) {
    auto *self = static_cast<MaskHolder *>(user);
    nb::gil_scoped_acquire gil;
    try {
      nb::list fresh;
      for (size_t i = self->seen; i < count; ++i)
        fresh.append(generated[i]);
      self->seen = count;
      nb::object words_ = self->fill(fresh);
      if (words_.is_none())
        return 0;
      auto array = nb::cast<nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig,
                                        nb::device::cpu>>(words_);
      if (array.shape(0) != words)
        return 2;
      std::memcpy(allowed, array.data(), words * sizeof(uint32_t));
      return 0;
    } catch (nb::python_error &) {
      // The mask keeps its own error for the request's end (python/dsrt/structured.py).
      return 1;
    } catch (const std::exception &) {
      return 1;
    }
  }
};

struct Engine {
  std::shared_ptr<Plan> plan;
  dsrt_engine *handle = nullptr;
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Event> events;
  bool interrupted = false;
  // Requests' token masks by id (under `mutex`), and those whose requests have ended,
  // dropped where the GIL is held (wait_events).
  std::unordered_map<int64_t, std::unique_ptr<MaskHolder>> masks;
  std::vector<std::unique_ptr<MaskHolder>> endedMasks;

  Engine(std::shared_ptr<Plan> planIn, const std::string &device, int blockSize,
         uint64_t kvCacheBytes, int maxTokensPerStep, int maxRunning, bool prefixCaching,
         int batchInvariant, const std::string &kvCacheDType, bool mpi,
         float kvCacheMemoryFraction, int speculativeTokens, int promptLookupMax,
         int promptLookupMin, int speculativeMaxBatch)
      : plan(std::move(planIn)) {
    dsrt_engine_options options;
    dsrt_engine_options_init(&options);
    options.device = deviceFromName(device);
    options.block_size = blockSize;
    options.kv_cache_bytes = kvCacheBytes;
    options.kv_cache_memory_fraction = kvCacheMemoryFraction;
    options.max_tokens_per_step = maxTokensPerStep;
    options.max_running = maxRunning;
    options.prefix_caching = prefixCaching ? 1 : 0;
    options.batch_invariant = batchInvariant;
    options.speculative_tokens = speculativeTokens;
    options.prompt_lookup_max = promptLookupMax;
    options.prompt_lookup_min = promptLookupMin;
    options.speculative_max_batch = speculativeMaxBatch;
    if (kvCacheDType == "int8")
      options.kv_cache_dtype = DSRT_I8;
    else if (kvCacheDType != "auto")
      throw nb::value_error(("kv_cache_dtype must be 'auto' (the plan's) or 'int8', not '" +
                             kvCacheDType + "'").c_str());
    nb::gil_scoped_release release;
    check(mpi ? dsrt_engine_create_mpi(plan->handle, &options, &handle)
              : dsrt_engine_create(plan->handle, &options, &handle));
    if (dsrt_engine_rank(handle) == 0)
      check(dsrt_engine_set_callback(handle, &Engine::onEvent, this));
  }
  ~Engine() {
    {
      nb::gil_scoped_release release;
      dsrt_engine_destroy(handle);
    }
    masks.clear();
    endedMasks.clear();
  }

  static void onEvent(void *user, int64_t request, int64_t token, dsrt_request_state state,
                      const dsrt_token_logprobs *logprobs) {
    auto *self = static_cast<Engine *>(user);
    Event event;
    event.request = request;
    event.token = token;
    event.state = state;
    if (logprobs) {
      event.hasLogprob = true;
      event.logprob = logprobs->logprob;
      for (size_t i = 0; i < logprobs->top_count; ++i)
        event.top.emplace_back(logprobs->top_tokens[i], logprobs->top_logprobs[i]);
    }
    // Asked during the callback, while the engine still knows the request: with every
    // token (a lock and a lookup), since the first may be the last before a stop string
    // cancels the request.
    if (token >= 0 && state == DSRT_REQUEST_RUNNING)
      (void)dsrt_engine_request_cached_tokens(self->handle, request, &event.cached);
    std::lock_guard<std::mutex> lock(self->mutex);
    if (token < 0 && state != DSRT_REQUEST_PROMPT)
      if (auto mask = self->masks.find(request); mask != self->masks.end()) {
        self->endedMasks.push_back(std::move(mask->second));
        self->masks.erase(mask);
      }
    self->events.push_back(std::move(event));
    self->ready.notify_all();
  }

  int64_t addRequest(const std::vector<int64_t> &prompt, int maxNewTokens, float temperature,
                     int topK, float topP, uint64_t seed, const std::vector<int64_t> &stopTokens,
                     bool ignoreEos, int logprobs, float minP, float repetitionPenalty,
                     float presencePenalty, float frequencyPenalty, int promptLogprobs,
                     const std::vector<int64_t> &biasTokens,
                     const std::vector<float> &biasValues, int minTokens,
                     nb::object tokenMask, int priority) {
    if (biasTokens.size() != biasValues.size())
      throw nb::value_error("logit_bias_tokens and logit_bias_values differ in length");
    dsrt_request_options options;
    dsrt_request_options_init(&options);
    options.max_new_tokens = maxNewTokens;
    options.temperature = temperature;
    options.top_k = topK;
    options.top_p = topP;
    options.seed = seed;
    options.stop_tokens = stopTokens.data();
    options.stop_token_count = stopTokens.size();
    options.ignore_eos = ignoreEos ? 1 : 0;
    options.logprobs = logprobs;
    options.min_p = minP;
    options.repetition_penalty = repetitionPenalty;
    options.presence_penalty = presencePenalty;
    options.frequency_penalty = frequencyPenalty;
    options.prompt_logprobs = promptLogprobs;
    options.logit_bias_tokens = biasTokens.data();
    options.logit_bias_values = biasValues.data();
    options.logit_bias_count = biasTokens.size();
    options.min_tokens = minTokens;
    options.priority = priority;
    std::unique_ptr<MaskHolder> mask;
    if (!tokenMask.is_none()) {
      mask = std::make_unique<MaskHolder>();
      mask->fill = tokenMask;
      options.token_mask = &MaskHolder::call;
      options.token_mask_user_data = mask.get();
    }
    int64_t id = 0;
    nb::gil_scoped_release release;
    // Registered under the lock the token callback takes: the request's end cannot come
    // before its mask is known here.
    std::lock_guard<std::mutex> lock(mutex);
    const dsrt_status status =
        dsrt_engine_add_request(handle, prompt.data(), prompt.size(), &options, &id);
    if (status != DSRT_OK) {
      nb::gil_scoped_acquire gil;
      mask.reset();
      check(status);
    }
    if (mask)
      masks.emplace(id, std::move(mask));
    return id;
  }
  void cancel(int64_t id) {
    std::unique_ptr<MaskHolder> ended;
    {
      nb::gil_scoped_release release;
      check(dsrt_engine_cancel(handle, id));
      // No mask call comes after the cancel has returned.
      std::lock_guard<std::mutex> lock(mutex);
      if (auto mask = masks.find(id); mask != masks.end()) {
        ended = std::move(mask->second);
        masks.erase(mask);
      }
    }
  }
  void resetPrefixCache() {
    nb::gil_scoped_release release;
    check(dsrt_engine_reset_prefix_cache(handle));
  }

  // The events since the last call, waiting up to `timeout` seconds for one: a list of
  // (request, token, state, logprob or None, [(token, logprob)], cached prompt tokens or -1).
  nb::list waitEvents(double timeout) {
    std::deque<Event> taken;
    std::vector<std::unique_ptr<MaskHolder>> ended;
    {
      nb::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(mutex);
      ready.wait_for(lock, std::chrono::duration<double>(timeout),
                     [&] { return !events.empty() || interrupted; });
      interrupted = false;
      taken.swap(events);
      ended.swap(endedMasks);
    }
    ended.clear();  // their Python objects, with the GIL
    nb::list result;
    for (const Event &event : taken) {
      nb::object logprob = event.hasLogprob ? nb::object(nb::float_(event.logprob)) : nb::none();
      result.append(nb::make_tuple(event.request, event.token, event.state, logprob,
                                   nb::cast(event.top), event.cached));
    }
    return result;
  }
  // Wakes a wait_events caller now (shutting down).
  void interrupt() {
    std::lock_guard<std::mutex> lock(mutex);
    interrupted = true;
    ready.notify_all();
  }
  nb::dict stats() const {
    dsrt_engine_stats s{};
    check(dsrt_engine_stats_get(handle, &s));
    nb::dict d;
    d["running"] = s.running;
    d["waiting"] = s.waiting;
    d["peak_running"] = s.peak_running;
    d["used_blocks"] = s.used_blocks;
    d["total_blocks"] = s.total_blocks;
    d["peak_used_blocks"] = s.peak_used_blocks;
    d["block_size"] = s.block_size;
    d["max_tokens_per_step"] = s.max_tokens_per_step;
    d["bytes_per_block"] = s.bytes_per_block;
    d["prefix_hits"] = s.prefix_hits;
    d["prefix_misses"] = s.prefix_misses;
    d["preemptions"] = s.preemptions;
    d["steps"] = s.steps;
    d["prompt_tokens"] = s.prompt_tokens;
    d["generated_tokens"] = s.generated_tokens;
    uint64_t drafts = 0, accepted = 0;
    check(dsrt_engine_draft_stats(handle, &drafts, &accepted));
    d["draft_tokens"] = drafts;
    d["accepted_draft_tokens"] = accepted;
    return d;
  }
};

} // namespace

void bindEngine(nb::module_ &m) {
  nb::class_<Engine>(m, "Engine")
      .def(nb::init<std::shared_ptr<Plan>, const std::string &, int, uint64_t, int, int, bool,
                    int, const std::string &, bool, float, int, int, int, int>(),
           "plan"_a, "device"_a, "block_size"_a, "kv_cache_bytes"_a, "max_tokens_per_step"_a,
           "max_running"_a, "prefix_caching"_a, "batch_invariant"_a, "kv_cache_dtype"_a,
           "mpi"_a, "kv_cache_memory_fraction"_a = 0.0f, "speculative_tokens"_a = 0,
           "prompt_lookup_max"_a = 3, "prompt_lookup_min"_a = 1,
           "speculative_max_batch"_a = 8)
      .def_prop_ro("rank", [](const Engine &e) { return dsrt_engine_rank(e.handle); })
      .def("start", [](Engine &e) { check(dsrt_engine_start(e.handle)); })
      .def("stop",
           [](Engine &e) {
             nb::gil_scoped_release release;
             dsrt_engine_stop(e.handle);
           })
      .def("follow",
           [](Engine &e) {
             nb::gil_scoped_release release;
             check(dsrt_engine_follow(e.handle));
           })
      .def("add_request", &Engine::addRequest, "prompt"_a, "max_new_tokens"_a,
           "temperature"_a, "top_k"_a, "top_p"_a, "seed"_a, "stop_token_ids"_a,
           "ignore_eos"_a, "logprobs"_a, "min_p"_a = 0.0f, "repetition_penalty"_a = 1.0f,
           "presence_penalty"_a = 0.0f, "frequency_penalty"_a = 0.0f,
           "prompt_logprobs"_a = -1, "logit_bias_tokens"_a = std::vector<int64_t>(),
           "logit_bias_values"_a = std::vector<float>(), "min_tokens"_a = 0,
           "token_mask"_a = nb::none(), "priority"_a = 0)
      .def("cancel", &Engine::cancel, "request"_a)
      .def("reset_prefix_cache", &Engine::resetPrefixCache)
      .def("wait_events", &Engine::waitEvents, "timeout"_a)
      .def("interrupt", &Engine::interrupt)
      .def("stats", &Engine::stats);
}

} // namespace dsrt_python
