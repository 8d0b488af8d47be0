// libdsrt: a header-only C++ wrapper over the C API in dsrt.h (C++11 or later).
//
// Objects own their C handles (move-only, released in destructors), and every failed call
// throws dsrt::Error with the status and dsrt_last_error(). Nothing here adds behaviour: it
// is the C API with RAII and standard containers, so the two never disagree.
//
//   dsrt::Plan plan("model.dsp");
//   dsrt::Session session(plan);                  // the plan must outlive its sessions
//   dsrt::GenerateOptions options;                // defaults from dsrt_generate_options_init
//   options.maxNewTokens = 16;
//   options.onToken = [](size_t sequence, int64_t token) { ...; return false; };
//   std::vector<std::vector<int64_t>> out = session.generate({{1, 2, 3}}, options);
//
//   dsrt::Engine engine(plan);                    // continuous batching (docs/serving.md)
//   engine.setCallback([](int64_t request, int64_t token, dsrt_request_state state,
//                         const dsrt_token_logprobs *) { ... });
//   engine.start();                               // or call engine.step() yourself
//   int64_t id = engine.addRequest({1, 2, 3}, dsrt::RequestOptions());
#ifndef DSRT_DSRT_HPP
#define DSRT_DSRT_HPP

#include "dsrt/dsrt.h"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dsrt {

class Error : public std::runtime_error {
public:
  Error(dsrt_status status, const std::string &message)
      : std::runtime_error(std::string(dsrt_status_name(status)) + ": " + message),
        status_(status), message_(message) {}
  dsrt_status status() const noexcept { return status_; }
  // dsrt_last_error() at the time of the failure, without the status name.
  const std::string &message() const noexcept { return message_; }

private:
  dsrt_status status_;
  std::string message_;
};

namespace detail {
inline void check(dsrt_status status) {
  if (status != DSRT_OK)
    throw Error(status, dsrt_last_error());
}
struct PlanDeleter {
  void operator()(dsrt_plan *p) const noexcept { dsrt_plan_close(p); }
};
struct SessionDeleter {
  void operator()(dsrt_session *s) const noexcept { dsrt_session_destroy(s); }
};
struct TokenizerDeleter {
  void operator()(dsrt_tokenizer *t) const noexcept { dsrt_tokenizer_free(t); }
};
struct GenerationDeleter {
  void operator()(dsrt_generation *g) const noexcept { dsrt_generation_free(g); }
};
struct FreeDeleter {
  void operator()(void *p) const noexcept { dsrt_free(p); }
};
struct EngineDeleter {
  void operator()(dsrt_engine *e) const noexcept { dsrt_engine_destroy(e); }
};
} // namespace detail

inline std::string version() { return dsrt_version(); }
// The CPU kernels' threads for the whole process (dsrt_set_cpu_threads; 0: the CPUs it may
// run on).
inline void setCpuThreads(int threads) { detail::check(dsrt_set_cpu_threads(threads)); }
inline int cpuThreads() { return dsrt_cpu_threads(); }

class Plan {
public:
  explicit Plan(const std::string &path) {
    dsrt_plan *plan = nullptr;
    detail::check(dsrt_plan_open(path.c_str(), &plan));
    plan_.reset(plan);
  }
  int rankCount() const { return dsrt_plan_rank_count(plan_.get()); }
  // Name, dtype and shape (-1: dynamic) of each input or output of `program`; the shape
  // pointers stay valid as long as the plan.
  std::vector<dsrt_tensor> inputs(const std::string &program) const { return io(program, 0); }
  std::vector<dsrt_tensor> outputs(const std::string &program) const { return io(program, 1); }
  dsrt_plan *get() const noexcept { return plan_.get(); }

private:
  std::vector<dsrt_tensor> io(const std::string &program, int isOutput) const {
    size_t count = 0;
    detail::check(dsrt_plan_io_count(plan_.get(), program.c_str(), isOutput, &count));
    std::vector<dsrt_tensor> infos(count);
    for (size_t i = 0; i < count; ++i)
      detail::check(dsrt_plan_io_info(plan_.get(), program.c_str(), isOutput, i, &infos[i]));
    return infos;
  }
  std::unique_ptr<dsrt_plan, detail::PlanDeleter> plan_;
};

class Tokenizer {
public:
  // The tokenizer embedded in the plan; throws (DSRT_INVALID_ARGUMENT) when it has none.
  static Tokenizer fromPlan(const Plan &plan) {
    dsrt_tokenizer *t = nullptr;
    detail::check(dsrt_tokenizer_from_plan(plan.get(), &t));
    return Tokenizer(t);
  }
  // A HuggingFace tokenizer.json.
  static Tokenizer fromFile(const std::string &path) {
    dsrt_tokenizer *t = nullptr;
    detail::check(dsrt_tokenizer_from_file(path.c_str(), &t));
    return Tokenizer(t);
  }
  std::vector<int64_t> encode(const std::string &text, bool addSpecial = false) const {
    int64_t *ids = nullptr;
    size_t count = 0;
    detail::check(dsrt_tokenizer_encode(tokenizer_.get(), text.data(), text.size(),
                                        addSpecial ? 1 : 0, &ids, &count));
    std::unique_ptr<int64_t, detail::FreeDeleter> owned(ids);
    return std::vector<int64_t>(ids, ids + count);
  }
  std::string decode(const int64_t *ids, size_t count, bool skipSpecial = false) const {
    char *text = nullptr;
    detail::check(dsrt_tokenizer_decode(tokenizer_.get(), ids, count, skipSpecial ? 1 : 0,
                                        &text));
    std::unique_ptr<char, detail::FreeDeleter> owned(text);
    return std::string(text);
  }
  std::string decode(const std::vector<int64_t> &ids, bool skipSpecial = false) const {
    return decode(ids.data(), ids.size(), skipSpecial);
  }
  dsrt_tokenizer *get() const noexcept { return tokenizer_.get(); }

private:
  explicit Tokenizer(dsrt_tokenizer *t) : tokenizer_(t) {}
  std::unique_ptr<dsrt_tokenizer, detail::TokenizerDeleter> tokenizer_;
};

// dsrt_generate_options with standard containers. The defaults are the C API's, or with a
// plan the model's own (dsrt_generate_options_from_plan: its generation_config.json).
struct GenerateOptions {
  GenerateOptions() {
    dsrt_generate_options c;
    dsrt_generate_options_init(&c);
    take(c);
  }
  explicit GenerateOptions(const Plan &plan) {
    dsrt_generate_options c;
    detail::check(dsrt_generate_options_from_plan(plan.get(), &c));
    take(c);
  }
  int32_t maxNewTokens;
  float temperature; // 0: greedy
  int32_t topK;      // 0: no limit
  float topP;        // 1: no limit
  uint64_t seed;
  std::vector<int64_t> stopTokens; // in addition to the plan's EOS tokens
  bool ignoreEos;                  // the plan's EOS tokens do not stop
  // Beam search and transformers' logits processors (dsrt_generate_options' comments).
  int32_t numBeams;
  float lengthPenalty;
  int32_t earlyStopping;  // 0 transformers' default, 1 true, 2 "never"
  float repetitionPenalty;
  int32_t noRepeatNgramSize;
  int32_t minNewTokens;
  int64_t forcedBosTokenId;  // -1: none
  int64_t forcedEosTokenId;  // -1: none
  // Called for every new token of every sequence, in order, as it is generated. Returns
  // true to stop that sequence after this token (as the C callback's nonzero). An exception
  // it throws stops generation and is rethrown from Session::generate.
  std::function<bool(size_t sequence, int64_t token)> onToken;

  // The C struct of these options (the callback set apart).
  void fill(dsrt_generate_options &c) const {
    dsrt_generate_options_init(&c);
    c.max_new_tokens = maxNewTokens;
    c.temperature = temperature;
    c.top_k = topK;
    c.top_p = topP;
    c.seed = seed;
    c.stop_tokens = stopTokens.empty() ? nullptr : stopTokens.data();
    c.stop_token_count = stopTokens.size();
    c.ignore_eos = ignoreEos ? 1 : 0;
    c.num_beams = numBeams;
    c.length_penalty = lengthPenalty;
    c.early_stopping = earlyStopping;
    c.repetition_penalty = repetitionPenalty;
    c.no_repeat_ngram_size = noRepeatNgramSize;
    c.min_new_tokens = minNewTokens;
    c.forced_bos_token_id = forcedBosTokenId;
    c.forced_eos_token_id = forcedEosTokenId;
  }

private:
  void take(const dsrt_generate_options &c) {
    maxNewTokens = c.max_new_tokens;
    temperature = c.temperature;
    topK = c.top_k;
    topP = c.top_p;
    seed = c.seed;
    ignoreEos = c.ignore_eos != 0;
    numBeams = c.num_beams;
    lengthPenalty = c.length_penalty;
    earlyStopping = c.early_stopping;
    repetitionPenalty = c.repetition_penalty;
    noRepeatNgramSize = c.no_repeat_ngram_size;
    minNewTokens = c.min_new_tokens;
    forcedBosTokenId = c.forced_bos_token_id;
    forcedEosTokenId = c.forced_eos_token_id;
  }
};

// The result of one dsrt_generate: the new tokens (prompt not included) of each sequence.
class Generation {
public:
  size_t count() const { return dsrt_generation_count(generation_.get()); }
  std::vector<int64_t> tokens(size_t index) const {
    const int64_t *tokens = nullptr;
    size_t n = 0;
    dsrt_finish_reason reason;
    detail::check(dsrt_generation_tokens(generation_.get(), index, &tokens, &n, &reason));
    return std::vector<int64_t>(tokens, tokens + n);
  }
  dsrt_finish_reason finishReason(size_t index) const {
    const int64_t *tokens = nullptr;
    size_t n = 0;
    dsrt_finish_reason reason;
    detail::check(dsrt_generation_tokens(generation_.get(), index, &tokens, &n, &reason));
    return reason;
  }
  std::vector<std::vector<int64_t>> sequences() const {
    std::vector<std::vector<int64_t>> all;
    for (size_t i = 0, n = count(); i < n; ++i)
      all.push_back(tokens(i));
    return all;
  }
  dsrt_generation *get() const noexcept { return generation_.get(); }

private:
  friend class Session;
  explicit Generation(dsrt_generation *g) : generation_(g) {}
  std::unique_ptr<dsrt_generation, detail::GenerationDeleter> generation_;
};

class Session {
public:
  // The plan must outlive the session.
  explicit Session(const Plan &plan, int rank = 0, dsrt_device device = DSRT_DEVICE_CPU) {
    dsrt_session *s = nullptr;
    detail::check(dsrt_session_create(plan.get(), rank, device, &s));
    session_.reset(s);
  }

  void setInput(const std::string &program, size_t index, dsrt_dtype dtype,
                const std::vector<int64_t> &shape, const void *data) {
    detail::check(dsrt_session_set_input(session_.get(), program.c_str(), index, dtype,
                                         shape.data(), shape.size(), data));
  }
  void run(const std::string &program) {
    detail::check(dsrt_session_run(session_.get(), program.c_str()));
  }
  // Owned by the session; valid until its next run.
  dsrt_tensor output(const std::string &program, size_t index) {
    dsrt_tensor t;
    detail::check(dsrt_session_get_output(session_.get(), program.c_str(), index, &t));
    return t;
  }

  // Generates for the prompts as one batch; the new tokens of each, in prompt order.
  std::vector<std::vector<int64_t>> generate(const std::vector<std::vector<int64_t>> &prompts,
                                             const GenerateOptions &options = GenerateOptions()) {
    return generateDetailed(prompts, options).sequences();
  }

  // As generate, with the finish reason of each sequence.
  Generation generateDetailed(const std::vector<std::vector<int64_t>> &prompts,
                              const GenerateOptions &options = GenerateOptions()) {
    std::vector<const int64_t *> starts;
    std::vector<size_t> lengths;
    for (const std::vector<int64_t> &p : prompts) {
      starts.push_back(p.data());
      lengths.push_back(p.size());
    }
    dsrt_generate_options c;
    options.fill(c);
    Streaming streaming{&options.onToken, nullptr};
    if (options.onToken) {
      c.on_token = &Streaming::trampoline;
      c.user_data = &streaming;
    }
    dsrt_generation *g = nullptr;
    dsrt_status status = dsrt_generate(session_.get(), prompts.size(), starts.data(),
                                       lengths.data(), &c, &g);
    Generation result(g);
    // Exceptions must not unwind through the library's C frames: the trampoline keeps the
    // callback's and it is thrown here, after dsrt_generate has returned.
    if (streaming.error)
      std::rethrow_exception(streaming.error);
    detail::check(status);
    return result;
  }

  // Strict device mode (dsrt_session_set_strict).
  void setStrict(bool strict = true) {
    detail::check(dsrt_session_set_strict(session_.get(), strict ? 1 : 0));
  }
  // Counters of device work since the session was created (dsrt_session_stats).
  dsrt_stats stats() const {
    dsrt_stats s;
    detail::check(dsrt_session_stats(session_.get(), &s));
    return s;
  }

  dsrt_session *get() const noexcept { return session_.get(); }

private:
  struct Streaming {
    const std::function<bool(size_t, int64_t)> *onToken;
    std::exception_ptr error;
    static int trampoline(void *userData, size_t sequence, int64_t token) {
      Streaming *self = static_cast<Streaming *>(userData);
      if (self->error)
        return 1;
      try {
        return (*self->onToken)(sequence, token) ? 1 : 0;
      } catch (...) {
        self->error = std::current_exception();
        return 1;
      }
    }
  };
  std::unique_ptr<dsrt_session, detail::SessionDeleter> session_;
};

// dsrt_engine_options with the C API's defaults.
struct EngineOptions {
  EngineOptions() {
    dsrt_engine_options c;
    dsrt_engine_options_init(&c);
    device = c.device;
    blockSize = c.block_size;
    kvCacheBytes = c.kv_cache_bytes;
    maxTokensPerStep = c.max_tokens_per_step;
    maxRunning = c.max_running;
    prefixCaching = c.prefix_caching != 0;
    batchInvariant = c.batch_invariant;
    kvCacheDType = c.kv_cache_dtype;
    kvCacheMemoryFraction = c.kv_cache_memory_fraction;
    speculativeTokens = c.speculative_tokens;
    promptLookupMax = c.prompt_lookup_max;
    promptLookupMin = c.prompt_lookup_min;
    speculativeMaxBatch = c.speculative_max_batch;
  }
  dsrt_device device;
  int32_t blockSize;          // positions per KV block
  uint64_t kvCacheBytes;      // 0: the default budget
  int32_t maxTokensPerStep;   // 0: the plan's step program's rows
  int32_t maxRunning;         // 0: maxTokensPerStep
  bool prefixCaching;
  int batchInvariant;         // dsrt_engine_options::batch_invariant: 0, 1 or 2 (exact)
  dsrt_dtype kvCacheDType;    // DSRT_UNDEFINED: the plan's; DSRT_I8: int8 (CPU only)
  float kvCacheMemoryFraction;  // (0, 1]: that fraction of the free memory (a GPU's: after the
                                // weights), kvCacheBytes 0
  int32_t speculativeTokens;    // 0: off; drafts per decode token (prompt lookup, CPU only)
  int32_t promptLookupMax, promptLookupMin;  // the n-grams drafts are looked up by
  int32_t speculativeMaxBatch;  // drafts only in steps of at most this many decode sequences
};

// dsrt_request_options with standard containers and the C API's defaults.
struct RequestOptions {
  RequestOptions() {
    dsrt_request_options c;
    dsrt_request_options_init(&c);
    maxNewTokens = c.max_new_tokens;
    temperature = c.temperature;
    topK = c.top_k;
    topP = c.top_p;
    minP = c.min_p;
    seed = c.seed;
    ignoreEos = c.ignore_eos != 0;
    logprobs = c.logprobs;
    repetitionPenalty = c.repetition_penalty;
    presencePenalty = c.presence_penalty;
    frequencyPenalty = c.frequency_penalty;
    promptLogprobs = c.prompt_logprobs;
    minTokens = c.min_tokens;
    priority = c.priority;
  }
  int32_t maxNewTokens;
  float temperature;  // 0: greedy
  int32_t topK;       // 0: no limit
  float topP;         // 1: no limit
  float minP;         // 0: none
  uint64_t seed;
  std::vector<int64_t> stopTokens;  // in addition to the plan's EOS tokens
  bool ignoreEos;
  int32_t logprobs;   // -1: none; 0: each token's; k <= 20: and the k likeliest
  float repetitionPenalty, presencePenalty, frequencyPenalty;  // 1, 0, 0: none
  int32_t promptLogprobs;  // -1: none (DSRT_REQUEST_PROMPT callbacks otherwise)
  int32_t minTokens;       // 0: none; else EOS and stop tokens wait for this many
  std::vector<std::pair<int64_t, float>> logitBias;  // (token, bias in [-100, 100])
  int32_t priority;        // lower first (vLLM's); 0: first come, first served
};

// The serving engine (dsrt_engine_*): requests added and cancelled at any time, from any
// thread; steps by step() or by the engine's thread after start().
class Engine {
public:
  // Each new token of a request, then token -1 with its final state; runs on the stepping
  // thread (see dsrt_engine_callback). An exception it throws is kept and rethrown by the
  // next step(), addRequest() or stop() (it must not unwind through the library).
  using Callback = std::function<void(int64_t request, int64_t token, dsrt_request_state state,
                                      const dsrt_token_logprobs *logprobs)>;

  // The plan must outlive the engine.
  explicit Engine(const Plan &plan, const EngineOptions &options = EngineOptions())
      : callback_(new CallbackState) {
    dsrt_engine_options c;
    dsrt_engine_options_init(&c);
    c.device = options.device;
    c.block_size = options.blockSize;
    c.kv_cache_bytes = options.kvCacheBytes;
    c.max_tokens_per_step = options.maxTokensPerStep;
    c.max_running = options.maxRunning;
    c.prefix_caching = options.prefixCaching ? 1 : 0;
    c.batch_invariant = options.batchInvariant;
    c.kv_cache_dtype = options.kvCacheDType;
    c.kv_cache_memory_fraction = options.kvCacheMemoryFraction;
    c.speculative_tokens = options.speculativeTokens;
    c.prompt_lookup_max = options.promptLookupMax;
    c.prompt_lookup_min = options.promptLookupMin;
    c.speculative_max_batch = options.speculativeMaxBatch;
    dsrt_engine *e = nullptr;
    detail::check(dsrt_engine_create(plan.get(), &c, &e));
    engine_.reset(e);
  }

  // Set before adding requests (dsrt_engine_set_callback); without one, poll().
  void setCallback(Callback callback) {
    callback_->callback = std::move(callback);
    detail::check(dsrt_engine_set_callback(
        engine_.get(), callback_->callback ? &CallbackState::trampoline : nullptr,
        callback_.get()));
  }

  int64_t addRequest(const std::vector<int64_t> &prompt,
                     const RequestOptions &options = RequestOptions()) {
    rethrowCallbackError();
    dsrt_request_options c;
    dsrt_request_options_init(&c);
    c.max_new_tokens = options.maxNewTokens;
    c.temperature = options.temperature;
    c.top_k = options.topK;
    c.top_p = options.topP;
    c.min_p = options.minP;
    c.seed = options.seed;
    c.stop_tokens = options.stopTokens.empty() ? nullptr : options.stopTokens.data();
    c.stop_token_count = options.stopTokens.size();
    c.ignore_eos = options.ignoreEos ? 1 : 0;
    c.logprobs = options.logprobs;
    c.repetition_penalty = options.repetitionPenalty;
    c.presence_penalty = options.presencePenalty;
    c.frequency_penalty = options.frequencyPenalty;
    c.prompt_logprobs = options.promptLogprobs;
    c.min_tokens = options.minTokens;
    c.priority = options.priority;
    std::vector<int64_t> biasTokens;
    std::vector<float> biasValues;
    for (size_t i = 0; i < options.logitBias.size(); ++i) {
      biasTokens.push_back(options.logitBias[i].first);
      biasValues.push_back(options.logitBias[i].second);
    }
    c.logit_bias_tokens = biasTokens.empty() ? nullptr : biasTokens.data();
    c.logit_bias_values = biasValues.empty() ? nullptr : biasValues.data();
    c.logit_bias_count = biasTokens.size();
    int64_t id = -1;
    detail::check(dsrt_engine_add_request(engine_.get(), prompt.data(), prompt.size(), &c, &id));
    return id;
  }
  void cancel(int64_t request) { detail::check(dsrt_engine_cancel(engine_.get(), request)); }
  void resetPrefixCache() { detail::check(dsrt_engine_reset_prefix_cache(engine_.get())); }

  // One step; true while requests remain.
  bool step() {
    int busy = 0;
    dsrt_status status = dsrt_engine_step(engine_.get(), &busy);
    rethrowCallbackError();
    detail::check(status);
    return busy != 0;
  }
  void start() { detail::check(dsrt_engine_start(engine_.get())); }
  void stop() {
    dsrt_engine_stop(engine_.get());
    rethrowCallbackError();
  }

  // The tokens generated since the last poll (all of them) and the request's state.
  struct Polled {
    std::vector<int64_t> tokens;
    dsrt_request_state state;
  };
  Polled poll(int64_t request) {
    Polled result;
    result.state = DSRT_REQUEST_RUNNING;
    int64_t chunk[256];
    size_t count = 0;
    do {
      detail::check(
          dsrt_engine_poll(engine_.get(), request, chunk, 256, &count, &result.state));
      result.tokens.insert(result.tokens.end(), chunk, chunk + count);
    } while (count == 256);
    return result;
  }

  // The prompt tokens the request found in the prefix cache (dsrt_engine_request_cached_tokens:
  // -1 before it is scheduled; ask before its finish is collected, or from its callbacks).
  int64_t cachedTokens(int64_t request) const {
    int64_t cached = -1;
    detail::check(dsrt_engine_request_cached_tokens(engine_.get(), request, &cached));
    return cached;
  }

  dsrt_engine_stats stats() const {
    dsrt_engine_stats s;
    detail::check(dsrt_engine_stats_get(engine_.get(), &s));
    return s;
  }
  dsrt_engine *get() const noexcept { return engine_.get(); }

private:
  struct CallbackState {
    Callback callback;
    std::mutex mutex;
    std::exception_ptr error;
    static void trampoline(void *userData, int64_t request, int64_t token,
                           dsrt_request_state state, const dsrt_token_logprobs *logprobs) {
      CallbackState *self = static_cast<CallbackState *>(userData);
      try {
        self->callback(request, token, state, logprobs);
      } catch (...) {
        std::lock_guard<std::mutex> lock(self->mutex);
        if (!self->error)
          self->error = std::current_exception();
      }
    }
  };
  void rethrowCallbackError() {
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(callback_->mutex);
      std::swap(error, callback_->error);
    }
    if (error)
      std::rethrow_exception(error);
  }
  // Declared first, destroyed last: the engine's thread may call the callback until the
  // engine is destroyed.
  std::unique_ptr<CallbackState> callback_;
  std::unique_ptr<dsrt_engine, detail::EngineDeleter> engine_;
};

} // namespace dsrt

#endif
