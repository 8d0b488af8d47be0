// dsbench serve: a bounded load generator in this process (issue 41). One stream of requests,
// drawn from a seeded long-tailed distribution of prompt and output lengths (optionally after
// a shared system prompt), is served three ways in the same run: by the engine (continuous
// batching over the paged KV cache) under a fixed number of concurrent clients or Poisson
// arrivals, by the static-batch path (dsrt_generate, one left-padded batch after another of
// the clients' size), and one request at a time. Benchmarks are not tests: nothing here
// asserts on time.
#include "Serve.h"
#include "common/CommandLine.h"
#include "common/CpuThreads.h"

#include "dsrt/dsrt.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace dsbench {
namespace {

using Clock = std::chrono::steady_clock;

struct ServeOptions {
  std::string plan, staticPlan, dumpRequests;
  int requests = 64, clients = 16, blockSize = 16, tokensPerStep = 0;
  double rate = 0;  // requests/s; 0: closed-loop clients
  double temperature = 0;  // 0: greedy; else every request samples (seed: its index)
  uint64_t seed = 1, kvBytes = 0;
  double kvMemoryFraction = 0;  // the engine's kv_cache_memory_fraction; 0: kvBytes decides
  int promptMin = 8, promptMax = 400, outputMin = 8, outputMax = 160, systemPrompt = 0;
  int warmup = 1;  // untimed requests before each way's run
  bool prefixCaching = true, skipStatic = false, skipAlone = false, json = false;
  int batchInvariant = 1;  // the engine option: 0, 1 or 2 (float weights exact too)
  bool int8KvCache = false;  // the engine's; the static runs keep the plan's cache
  bool coldKv = false;  // time the engine from a KV pool no request has written
  int speculativeTokens = 0;  // the engine's drafts per decode token (prompt lookup)
  int speculativeMaxBatch = 8;  // drafts only in steps of at most this many decode sequences
  dsrt_device device = DSRT_DEVICE_CPU;  // every run's: engine, static batches, alone
};

// "MIN,MAX" with 1 <= MIN <= MAX.
std::pair<int, int> range(const dstools::CommandLine &commandLine, const std::string &option,
                          const std::string &text) {
  int low = 0, high = 0;
  char rest = 0;
  if (std::sscanf(text.c_str(), "%d,%d%c", &low, &high, &rest) != 2 || low < 1 || high < low)
    commandLine.usageError(option + " must be MIN,MAX with 1 <= MIN <= MAX, not '" + text + "'");
  return {low, high};
}

ServeOptions parse(int argc, char **argv) {
  ServeOptions o;
  std::vector<std::string> plans;
  std::string promptLength, outputLength;
  bool noPrefixCaching = false;
  dstools::CommandLine commandLine(
      "dsbench",
      {"dsbench serve PLAN [--requests N] [--clients C | --rate R] [OPTIONS]"},
      "The serving engine under a bounded load in this process. N requests; prompt and "
      "output lengths log-uniform in their ranges (many short, a long tail), after a shared "
      "system prompt of P tokens. C closed-loop clients, each sending its next request when "
      "the last one finished, or Poisson arrivals at R requests/s. The same stream then runs "
      "through dsrt_generate in static batches of C (or the plan's max_batch, if smaller; cut "
      "short where a batch's longest prompt and longest output would pass max_seq_len) and "
      "one request at a time. Reports requests/s, output tokens/s, TTFT and TPOT at P50/P99, "
      "peak KV blocks.",
      "dsbench serve");
  commandLine.arguments("PLAN", plans, "a serving plan (dsc compile --serving)");
  commandLine.integer("--requests", o.requests, "N", "requests in the stream (default 64)", 1,
                      100000000);
  commandLine.integer("--clients", o.clients, "C", "closed-loop clients (default 16)", 1,
                      100000000);
  commandLine.number("--rate", o.rate, "R", "Poisson arrivals at R requests/s instead of clients",
                     dstools::CommandLine::Sign::Positive);
  commandLine.integer("--seed", o.seed, "S", "the stream's seed (default 1)");
  commandLine.number("--temperature", o.temperature, "T",
                     "sample at temperature T (default 0: greedy), each request from its own "
                     "seed, in every way the stream is served",
                     dstools::CommandLine::Sign::NonNegative);
  commandLine.text("--prompt-len", promptLength, "MIN,MAX",
                   "prompt lengths (default 8,400)");
  commandLine.text("--output-len", outputLength, "MIN,MAX", "output lengths (default 8,160)");
  commandLine.integer("--system-prompt", o.systemPrompt, "P",
                      "tokens of a system prompt every request shares (default 0)", 0,
                      100000000);
  commandLine.integer("--block-size", o.blockSize, "B", "KV-cache block size in tokens (16)", 1,
                      100000000);
  commandLine.integer("--kv-cache-bytes,--kv-bytes", o.kvBytes, "BYTES",
                      "the KV cache's bytes (default: the engine's, a full sequence for "
                      "each row a step may run, at most a quarter of the memory)");
  commandLine.number("--kv-cache-memory-fraction", o.kvMemoryFraction, "F",
                     "the KV cache as this fraction (0 to 1) of the memory free when the "
                     "engine starts (a GPU's: once the weights are on it), instead of "
                     "--kv-cache-bytes");
  commandLine.integer("--tokens-per-step", o.tokensPerStep, "T",
                      "tokens one engine step computes at most (default: the rows of the "
                      "plan's step program)",
                      1, 100000000);
  commandLine.integer("--warmup", o.warmup, "W",
                      "untimed requests each way runs before its timed run, none of the "
                      "stream's tokens (default 1; 0: time from a cold start)",
                      0, 1000);
  commandLine.flag("--no-prefix-caching", noPrefixCaching, "turn the engine's prefix cache off");
  commandLine.flag("--cold-kv", o.coldKv,
                   "time the engine from a KV pool no request has written (by default it "
                   "first serves the stream once untimed, with other tokens, then resets its "
                   "prefix cache: the timed run writes pages a running server has written "
                   "before, not fresh ones the OS must fault in)");
  bool notBatchInvariant = false;
  commandLine.flag("--no-batch-invariant", notBatchInvariant,
                   "let long steps of half and quantized plans take the bf16 GEMMs and AMX "
                   "attention (faster; a token may then differ from the request's alone)");
  bool exactBatchInvariance = false;
  commandLine.flag("--exact-batch-invariance", exactBatchInvariance,
                   "batch_invariant 2: f32 and half weights too sum every row as a row alone, "
                   "bit for bit (slower on steps of many rows)");
  std::string kvCacheDType = "auto";
  commandLine.text("--kv-cache-dtype", kvCacheDType, "DTYPE",
                   "the engine's KV cache: auto (the plan's, default) or int8 (a scale per "
                   "32 values, about half an f16 cache's bytes; CPU only). The static and "
                   "one-at-a-time runs keep the plan's");
  commandLine.integer("--speculative-tokens", o.speculativeTokens, "K",
                      "the engine's drafts per decode token of a request (speculative "
                      "decoding by prompt lookup; default 0: off). The static and "
                      "one-at-a-time runs have none",
                      0, 1000);
  commandLine.integer("--speculative-max-batch", o.speculativeMaxBatch, "N",
                      "drafts only in steps of at most N decode sequences (default 8)", 1,
                      1000000);
  commandLine.flag("--skip-static", o.skipStatic, "skip the static-batch run");
  commandLine.flag("--skip-alone", o.skipAlone, "skip the one-at-a-time run");
  commandLine.flag("--json", o.json, "one JSON object on stdout instead of the table");
  std::string device;
  commandLine.text("--device", device, "NAME",
                   "where every run of the stream runs: cpu (default), cuda or cpu-reference");
  int32_t threads = 0;
  dstools::addThreadsOption(commandLine, threads);
  commandLine.text("--static-plan", o.staticPlan, "PLAN",
                   "run the static and one-at-a-time runs on this plan (a serving plan's "
                   "max_batch x max_seq_len may need more arena than a static session can "
                   "have)");
  commandLine.text("--dump-requests", o.dumpRequests, "FILE",
                   "write the stream as JSON ([{prompt, max_tokens, arrival}]) for "
                   "bench/serving/http_load.py to send the same requests to dsserve");
  commandLine.parse(argc, argv);
  dstools::applyThreadsOption(commandLine, threads);
  if (!promptLength.empty())
    std::tie(o.promptMin, o.promptMax) = range(commandLine, "--prompt-len", promptLength);
  if (!outputLength.empty())
    std::tie(o.outputMin, o.outputMax) = range(commandLine, "--output-len", outputLength);
  o.prefixCaching = !noPrefixCaching;
  if (notBatchInvariant && exactBatchInvariance)
    commandLine.usageError("--no-batch-invariant and --exact-batch-invariance contradict");
  o.batchInvariant = notBatchInvariant ? 0 : exactBatchInvariance ? 2 : 1;
  if (kvCacheDType != "auto" && kvCacheDType != "int8")
    commandLine.usageError("--kv-cache-dtype must be auto or int8, not '" + kvCacheDType + "'");
  o.int8KvCache = kvCacheDType == "int8";
  if (!device.empty() && dsrt_device_from_name(device.c_str(), &o.device) != DSRT_OK)
    commandLine.usageError(std::string("--device: ") + dsrt_last_error());
  o.plan = commandLine.single(plans, "plan");
  return o;
}

struct Request {
  std::vector<int64_t> prompt;
  int outputTokens = 0;
  double arrival = 0;  // seconds after the start (Poisson mode)
};

// Log-uniform in [low, high]: most draws short, a long tail, as chat traffic.
int logUniform(std::mt19937_64 &random, int low, int high) {
  std::uniform_real_distribution<double> u(std::log(double(low)), std::log(double(high) + 1));
  return std::min(high, static_cast<int>(std::exp(u(random))));
}

std::vector<Request> drawRequests(const ServeOptions &o, int64_t vocab, int64_t maxSeq) {
  std::mt19937_64 random(o.seed);
  std::vector<int64_t> system(static_cast<size_t>(o.systemPrompt));
  for (int64_t &token : system)
    token = static_cast<int64_t>(random() % static_cast<uint64_t>(vocab));
  std::vector<Request> requests(static_cast<size_t>(o.requests));
  double clock = 0;
  std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1.0);
  for (Request &request : requests) {
    int promptLength = logUniform(random, o.promptMin, o.promptMax);
    request.outputTokens = logUniform(random, o.outputMin, o.outputMax);
    // Within the plan's positions: the output cut to leave a prompt token after the system
    // prompt, then the prompt to what the output leaves (the default ranges on a plan of
    // few positions give a stream that fits, not an error).
    const int64_t afterSystem = maxSeq - o.systemPrompt;
    if (afterSystem < 2)
      die("a system prompt of " + std::to_string(o.systemPrompt) +
          " tokens leaves no room for a prompt and an output in the plan's max_seq_len of " +
          std::to_string(maxSeq));
    request.outputTokens =
        static_cast<int>(std::min<int64_t>(request.outputTokens, afterSystem - 1));
    promptLength = static_cast<int>(
        std::min<int64_t>(promptLength, afterSystem - request.outputTokens));
    request.prompt = system;
    for (int i = 0; i < promptLength; ++i)
      request.prompt.push_back(static_cast<int64_t>(random() % static_cast<uint64_t>(vocab)));
    if (o.rate > 0)
      clock += gap(random);
    request.arrival = clock;
  }
  return requests;
}

// What each way runs before its timed run, so that no way is charged for the process's cold
// start (the plan's weight pages faulted in, the thread pool, the first packing), as vLLM's
// benchmark sends a test prompt first. Its tokens come from another seed: the engine's
// prefix cache holds nothing of the stream after it.
std::vector<Request> drawWarmup(const ServeOptions &o, int64_t vocab, int64_t maxSeq) {
  std::mt19937_64 random(o.seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<Request> warmup(static_cast<size_t>(o.warmup));
  const int64_t outputs = std::max<int64_t>(1, std::min<int64_t>(8, maxSeq / 2));
  const int64_t promptLength = std::max<int64_t>(1, std::min<int64_t>(64, maxSeq - outputs));
  for (Request &request : warmup) {
    request.outputTokens = static_cast<int>(outputs);
    for (int64_t i = 0; i < promptLength; ++i)
      request.prompt.push_back(static_cast<int64_t>(random() % static_cast<uint64_t>(vocab)));
  }
  return warmup;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  size_t index = static_cast<size_t>(std::ceil(p * double(values.size()))) - 1;
  return values[std::min(index, values.size() - 1)];
}

// What one way of serving the stream measured.
struct Measured {
  std::string name;
  double seconds = 0;
  uint64_t outputTokens = 0;
  std::vector<double> ttft, tpot;  // per request, seconds
  int64_t peakBlocks = -1, totalBlocks = -1, peakRunning = -1, staticSequences = -1;
  uint64_t prefixHits = 0, preemptions = 0, bytesPerBlock = 0;
  uint64_t draftTokens = 0, acceptedDraftTokens = 0;
  nlohmann::json toJson(size_t requests) const {
    return {{"name", name},
            {"seconds", seconds},
            {"requests_per_s", double(requests) / seconds},
            {"output_tokens_per_s", double(outputTokens) / seconds},
            {"ttft_first_ms", ttft.empty() ? 0.0 : 1e3 * ttft.front()},
            {"ttft_rest_p50_ms",
             ttft.size() < 2 ? 0.0
                             : 1e3 * percentile(std::vector<double>(ttft.begin() + 1, ttft.end()),
                                                0.5)},
            {"ttft_p50_ms", 1e3 * percentile(ttft, 0.5)},
            {"ttft_p99_ms", 1e3 * percentile(ttft, 0.99)},
            {"tpot_p50_ms", 1e3 * percentile(tpot, 0.5)},
            {"tpot_p99_ms", 1e3 * percentile(tpot, 0.99)},
            {"peak_kv_blocks", peakBlocks},
            {"peak_sequences_in_flight", peakRunning},
            {"static_sequences_same_budget", staticSequences},
            {"kv_blocks", totalBlocks},
            {"kv_bytes_per_block", bytesPerBlock},
            {"prefix_hits", prefixHits},
            {"preemptions", preemptions},
            {"draft_tokens", draftTokens},
            {"accepted_draft_tokens", acceptedDraftTokens}};
  }
};

// Per request: when it was sent, when its first and last tokens came, how many came.
struct Timing {
  Clock::time_point sent, first, last;
  int tokens = 0;
  bool done = false;
};

void summarize(const std::vector<Timing> &timings, Measured &measured) {
  for (const Timing &t : timings) {
    measured.outputTokens += static_cast<uint64_t>(t.tokens);
    measured.ttft.push_back(std::chrono::duration<double>(t.first - t.sent).count());
    if (t.tokens > 1)
      measured.tpot.push_back(std::chrono::duration<double>(t.last - t.first).count() /
                              (t.tokens - 1));
  }
}

struct EngineRun {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Timing> timings;
  std::vector<int64_t> idToRequest;  // engine id -> request index (ids count from 1)
  int finished = 0;
  int64_t warmupId = 0;  // the untimed request in flight (0: none; ids count from 1)
};

void onToken(void *user, int64_t id, int64_t token, dsrt_request_state state,
             const dsrt_token_logprobs * /*logprobs*/) {
  auto &run = *static_cast<EngineRun *>(user);
  std::lock_guard<std::mutex> lock(run.mutex);
  if (id == run.warmupId) {
    if (state != DSRT_REQUEST_RUNNING) {
      run.warmupId = 0;
      run.changed.notify_all();
    }
    return;
  }
  if (id <= 0 || static_cast<size_t>(id) >= run.idToRequest.size())
    return;
  Timing &t = run.timings[static_cast<size_t>(run.idToRequest[static_cast<size_t>(id)])];
  auto now = Clock::now();
  if (token >= 0) {
    if (t.tokens++ == 0)
      t.first = now;
    t.last = now;
  }
  if (state != DSRT_REQUEST_RUNNING && !t.done) {
    t.done = true;
    ++run.finished;
    run.changed.notify_all();
  }
}

// One pass of `requests` through the started engine at the stream's concurrency (o.clients
// closed-loop clients or o.rate arrivals), its timings in `run`; its seconds.
double serveStream(dsrt_engine *engine, EngineRun &run, const ServeOptions &o,
                   const std::vector<Request> &requests) {
  {
    std::lock_guard<std::mutex> lock(run.mutex);
    run.timings.assign(requests.size(), Timing{});
    run.idToRequest.assign(requests.size() + 1, 0);
    run.finished = 0;
  }
  auto send = [&](size_t index) {
    dsrt_request_options request;
    dsrt_request_options_init(&request);
    request.max_new_tokens = requests[index].outputTokens;
    request.ignore_eos = 1;  // every request produces the tokens it was drawn with
    request.temperature = static_cast<float>(o.temperature);
    request.seed = index;
    int64_t id = 0;
    std::lock_guard<std::mutex> lock(run.mutex);
    run.timings[index].sent = Clock::now();
    check(dsrt_engine_add_request(engine, requests[index].prompt.data(),
                                  requests[index].prompt.size(), &request, &id),
          "request " + std::to_string(index));
    if (static_cast<size_t>(id) >= run.idToRequest.size())
      run.idToRequest.resize(static_cast<size_t>(id) + 1, 0);
    run.idToRequest[static_cast<size_t>(id)] = static_cast<int64_t>(index);
  };
  const Clock::time_point start = Clock::now();
  size_t next = 0;
  if (o.rate > 0) {
    for (; next < requests.size(); ++next) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(requests[next].arrival)));
      send(next);
    }
  } else {
    for (; next < requests.size() && next < static_cast<size_t>(o.clients); ++next)
      send(next);
    // Each finished request lets its client send the next one.
    while (next < requests.size()) {
      std::unique_lock<std::mutex> lock(run.mutex);
      run.changed.wait(lock, [&] { return static_cast<int>(next) - run.finished < o.clients; });
      lock.unlock();
      send(next++);
    }
  }
  {
    std::unique_lock<std::mutex> lock(run.mutex);
    run.changed.wait(lock, [&] { return run.finished == static_cast<int>(requests.size()); });
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Measured serveWithEngine(dsrt_plan *plan, const ServeOptions &o,
                         const std::vector<Request> &requests,
                         const std::vector<Request> &warmup, int64_t vocab) {
  dsrt_engine_options options;
  dsrt_engine_options_init(&options);
  options.block_size = o.blockSize;
  options.kv_cache_bytes = o.kvBytes;
  options.kv_cache_memory_fraction = static_cast<float>(o.kvMemoryFraction);
  options.max_tokens_per_step = o.tokensPerStep;
  options.prefix_caching = o.prefixCaching ? 1 : 0;
  options.batch_invariant = o.batchInvariant;
  options.kv_cache_dtype = o.int8KvCache ? DSRT_I8 : DSRT_UNDEFINED;
  options.speculative_tokens = o.speculativeTokens;
  options.speculative_max_batch = o.speculativeMaxBatch;
  options.device = o.device;
  dsrt_engine *engine = nullptr;
  check(dsrt_engine_create(plan, &options, &engine), "engine");
  EngineRun run;
  check(dsrt_engine_set_callback(engine, onToken, &run), "callback");
  check(dsrt_engine_start(engine), "engine thread");
  for (const Request &request : warmup) {
    dsrt_request_options options;
    dsrt_request_options_init(&options);
    options.max_new_tokens = request.outputTokens;
    options.ignore_eos = 1;
    int64_t id = 0;
    std::unique_lock<std::mutex> lock(run.mutex);
    check(dsrt_engine_add_request(engine, request.prompt.data(), request.prompt.size(),
                                  &options, &id),
          "warm-up request");
    run.warmupId = id;
    run.changed.wait(lock, [&] { return run.warmupId == 0; });
  }
  if (!o.coldKv) {
    // The same lengths and arrivals, other tokens: each token renamed by one permutation of
    // the vocabulary, so that the requests share prefixes (a system prompt) as the timed
    // run's do. As many KV blocks are written, the same peak is held (the engine's peak
    // counts both runs: random tokens had shared nothing and held more), and nothing of
    // the warm run is cached after the reset.
    std::vector<Request> warm = requests;
    std::vector<int64_t> renamed(static_cast<size_t>(vocab));
    std::iota(renamed.begin(), renamed.end(), int64_t{0});
    std::shuffle(renamed.begin(), renamed.end(), std::mt19937_64(o.seed ^ 0x5bd1e9955bd1e995ull));
    for (Request &request : warm)
      for (int64_t &token : request.prompt)
        token = renamed[static_cast<size_t>(token)];
    serveStream(engine, run, o, warm);
    check(dsrt_engine_reset_prefix_cache(engine), "prefix cache reset");
  }
  dsrt_engine_stats before;
  check(dsrt_engine_stats_get(engine, &before), "stats");
  uint64_t draftsBefore = 0, acceptedBefore = 0;
  check(dsrt_engine_draft_stats(engine, &draftsBefore, &acceptedBefore), "draft stats");
  const double seconds = serveStream(engine, run, o, requests);
  Measured measured;
  measured.name = "engine";
  measured.seconds = seconds;
  dsrt_engine_stats stats;
  check(dsrt_engine_stats_get(engine, &stats), "stats");
  check(dsrt_engine_draft_stats(engine, &measured.draftTokens, &measured.acceptedDraftTokens),
        "draft stats");
  measured.draftTokens -= draftsBefore;
  measured.acceptedDraftTokens -= acceptedBefore;
  dsrt_engine_destroy(engine);
  summarize(run.timings, measured);
  measured.peakBlocks = stats.peak_used_blocks;
  measured.peakRunning = stats.peak_running;
  measured.bytesPerBlock = stats.bytes_per_block;
  // What a static reservation of max_seq_len positions per sequence fits in the same bytes.
  int64_t maxSeq = 0;
  check(dsrt_plan_limits(plan, nullptr, &maxSeq), "limits");
  const uint64_t perSequence = stats.bytes_per_block / static_cast<uint64_t>(stats.block_size) *
                               static_cast<uint64_t>(maxSeq);
  measured.staticSequences =
      static_cast<int64_t>(stats.bytes_per_block * static_cast<uint64_t>(stats.total_blocks) /
                           perSequence);
  measured.totalBlocks = stats.total_blocks;
  measured.prefixHits = stats.prefix_hits - before.prefix_hits;
  measured.preemptions = stats.preemptions - before.preemptions;
  return measured;
}

struct StaticRun {
  std::vector<Timing> *timings;
  size_t first;  // the batch's first request
};

int onStaticToken(void *user, size_t sequence, int64_t token) {
  (void)token;
  auto &run = *static_cast<StaticRun *>(user);
  Timing &t = (*run.timings)[run.first + sequence];
  auto now = Clock::now();
  if (t.tokens++ == 0)
    t.first = now;
  t.last = now;
  return 0;
}

// The stream through dsrt_generate, `batch` requests at a time in arrival order; every
// request is counted as sent when the run starts (the static path makes later ones wait). A
// static batch runs its longest prompt (the others left-padded to it) for its longest
// output: a batch is cut short where the next request would take that past max_seq_len, as a
// static server must (each request alone fits: drawRequests).
Measured serveStatic(dsrt_plan *plan, const std::vector<Request> &requests,
                     const std::vector<Request> &warmup, int batch, const std::string &name,
                     dsrt_device device, double temperature) {
  dsrt_session *session = nullptr;
  dsrt_group *group = nullptr;
  if (dsrt_plan_rank_count(plan) > 1)
    check(dsrt_group_create(plan, device, &group), "group");
  else
    check(dsrt_session_create(plan, 0, device, &session), "session");
  for (const Request &request : warmup) {
    const int64_t *prompt = request.prompt.data();
    const size_t length = request.prompt.size();
    dsrt_generate_options options;
    dsrt_generate_options_init(&options);
    options.max_new_tokens = request.outputTokens;
    options.ignore_eos = 1;
    dsrt_generation *generation = nullptr;
    check(group ? dsrt_group_generate(group, 1, &prompt, &length, &options, &generation)
                : dsrt_generate(session, 1, &prompt, &length, &options, &generation),
          name + " warm-up");
    dsrt_generation_free(generation);
  }
  int64_t maxSeq = 0;
  check(dsrt_plan_limits(plan, nullptr, &maxSeq), "limits");
  std::vector<Timing> timings(requests.size());
  const Clock::time_point start = Clock::now();
  for (Timing &t : timings)
    t.sent = start;
  for (size_t first = 0, count = 0; first < requests.size(); first += count) {
    std::vector<const int64_t *> prompts;
    std::vector<size_t> lengths;
    int32_t longestOutput = 0;
    size_t longestPrompt = 0;
    for (count = 0; count < static_cast<size_t>(batch) && first + count < requests.size();
         ++count) {
      const Request &next = requests[first + count];
      const size_t prompt = std::max(longestPrompt, next.prompt.size());
      const int32_t output = std::max(longestOutput, next.outputTokens);
      if (count > 0 && static_cast<int64_t>(prompt) + output > maxSeq)
        break;
      longestPrompt = prompt;
      longestOutput = output;
      prompts.push_back(next.prompt.data());
      lengths.push_back(next.prompt.size());
    }
    StaticRun run{&timings, first};
    dsrt_generate_options options;
    dsrt_generate_options_init(&options);
    // The batch runs as long as its longest output; each request stops counting at its own.
    options.max_new_tokens = longestOutput;
    options.ignore_eos = 1;
    options.temperature = static_cast<float>(temperature);
    options.seed = first;
    options.on_token = onStaticToken;
    options.user_data = &run;
    dsrt_generation *generation = nullptr;
    dsrt_status status =
        group ? dsrt_group_generate(group, count, prompts.data(), lengths.data(), &options,
                                    &generation)
              : dsrt_generate(session, count, prompts.data(), lengths.data(), &options,
                              &generation);
    check(status, name + " batch at request " + std::to_string(first));
    dsrt_generation_free(generation);
    for (size_t i = first; i < first + count; ++i)
      timings[i].tokens = std::min(timings[i].tokens, requests[i].outputTokens);
  }
  Measured measured;
  measured.name = name;
  measured.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  summarize(timings, measured);
  dsrt_session_destroy(session);
  dsrt_group_destroy(group);
  return measured;
}

} // namespace

int runServe(int argc, char **argv) {
  ServeOptions o = parse(argc, argv);
  dsrt_plan *plan = nullptr;
  check(dsrt_plan_open(o.plan.c_str(), &plan), "cannot open the plan");
  // The vocabulary and the positions from the decode program's logits and the plan's mask.
  dsrt_tensor logits;
  size_t outputs = 0;
  check(dsrt_plan_io_count(plan, "decode", 1, &outputs), "the plan's decode program");
  check(dsrt_plan_io_info(plan, "decode", 1, 0, &logits), "the decode program's logits");
  const int64_t vocab = logits.shape[logits.rank - 1];
  int64_t maxSeq = 0, maxBatch = 0;
  check(dsrt_plan_limits(plan, &maxBatch, &maxSeq), "limits");
  std::vector<Request> requests = drawRequests(o, vocab, maxSeq);
  const std::vector<Request> warmup = drawWarmup(o, vocab, maxSeq);
  if (!o.dumpRequests.empty()) {
    nlohmann::json stream = nlohmann::json::array();
    for (const Request &request : requests)
      stream.push_back({{"prompt", request.prompt},
                        {"max_tokens", request.outputTokens},
                        {"arrival", request.arrival}});
    std::FILE *file = std::fopen(o.dumpRequests.c_str(), "w");
    if (!file)
      die("cannot write " + o.dumpRequests);
    const std::string text = stream.dump();
    const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
    if (std::fclose(file) != 0 || !written)
      die("cannot write " + o.dumpRequests);
  }
  std::vector<Measured> results;
  results.push_back(serveWithEngine(plan, o, requests, warmup, vocab));
  dsrt_plan *staticPlan = plan;
  if (!o.staticPlan.empty()) {
    check(dsrt_plan_open(o.staticPlan.c_str(), &staticPlan), "cannot open --static-plan");
    check(dsrt_plan_limits(staticPlan, &maxBatch, nullptr), "limits");
  }
  const int staticBatch = static_cast<int>(std::min<int64_t>(o.clients, maxBatch));
  if (!o.skipStatic)
    results.push_back(serveStatic(staticPlan, requests, warmup, staticBatch,
                                  "static batch of " + std::to_string(staticBatch), o.device,
                                  o.temperature));
  if (!o.skipAlone)
    results.push_back(
        serveStatic(staticPlan, requests, warmup, 1, "one at a time", o.device, o.temperature));
  if (staticPlan != plan)
    dsrt_plan_close(staticPlan);
  uint64_t promptTokens = 0, outputTokens = 0;
  for (const Request &request : requests) {
    promptTokens += request.prompt.size();
    outputTokens += static_cast<uint64_t>(request.outputTokens);
  }
  if (o.json) {
    nlohmann::json out = {{"plan", o.plan},
                          {"device", dsrt_device_to_name(o.device)},
                          {"cpu_threads", dsrt_cpu_threads()},
                          {"requests", requests.size()},
                          {"prompt_tokens", promptTokens},
                          {"output_tokens", outputTokens},
                          {"clients", o.rate > 0 ? 0 : o.clients},
                          {"rate", o.rate},
                          {"system_prompt", o.systemPrompt},
                          {"block_size", o.blockSize},
                          {"kv_cache_dtype", o.int8KvCache ? "int8" : "auto"},
                          {"runs", nlohmann::json::array()}};
    for (const Measured &m : results)
      out["runs"].push_back(m.toJson(requests.size()));
    std::cout << out.dump(2) << "\n";
  } else {
    const Measured &engine = results.front();
    if (o.systemPrompt > 0) {
      nlohmann::json j = engine.toJson(requests.size());
      std::printf("engine: a shared system prompt of %d tokens: the first request's TTFT %.0f ms, "
                  "the others' median %.0f ms (%.2fx); %llu prefix-cache hits (blocks)\n",
                  o.systemPrompt, j["ttft_first_ms"].get<double>(),
                  j["ttft_rest_p50_ms"].get<double>(),
                  j["ttft_rest_p50_ms"].get<double>() / j["ttft_first_ms"].get<double>(),
                  static_cast<unsigned long long>(engine.prefixHits));
    }
    std::printf("engine: at most %lld sequences in flight in %lld %sKV blocks of %d positions; a "
                "static reservation of max_seq_len per sequence holds %lld in the same bytes\n",
                static_cast<long long>(engine.peakRunning),
                static_cast<long long>(engine.totalBlocks), o.int8KvCache ? "int8 " : "",
                o.blockSize,
                static_cast<long long>(engine.staticSequences));
    if (o.speculativeTokens > 0)
      std::printf("engine: speculative decoding, up to %d drafts a decode token: %llu drafts, "
                  "%llu accepted (%.0f%%)\n",
                  o.speculativeTokens, static_cast<unsigned long long>(engine.draftTokens),
                  static_cast<unsigned long long>(engine.acceptedDraftTokens),
                  engine.draftTokens ? 100.0 * static_cast<double>(engine.acceptedDraftTokens) /
                                           static_cast<double>(engine.draftTokens)
                                     : 0.0);
    char load[64];
    if (o.rate > 0)
      std::snprintf(load, sizeof load, "Poisson %g/s", o.rate);
    else
      std::snprintf(load, sizeof load, "%d clients", static_cast<int>(o.clients));
    std::printf("%s: %zu requests (%llu prompt, %llu output tokens), %s, %d CPU thread%s\n",
                o.plan.c_str(), requests.size(), static_cast<unsigned long long>(promptTokens),
                static_cast<unsigned long long>(outputTokens), load, dsrt_cpu_threads(),
                dsrt_cpu_threads() == 1 ? "" : "s");
    std::printf("%-22s %9s %9s %10s %10s %10s %10s %12s\n", "", "req/s", "out tok/s",
                "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "peak blocks");
    for (const Measured &m : results) {
      nlohmann::json j = m.toJson(requests.size());
      std::printf("%-22s %9.2f %9.1f %8.0fms %8.0fms %8.1fms %8.1fms %12s\n", m.name.c_str(),
                  j["requests_per_s"].get<double>(), j["output_tokens_per_s"].get<double>(),
                  j["ttft_p50_ms"].get<double>(), j["ttft_p99_ms"].get<double>(),
                  j["tpot_p50_ms"].get<double>(), j["tpot_p99_ms"].get<double>(),
                  m.peakBlocks >= 0 ? (std::to_string(m.peakBlocks) + "/" +
                                       std::to_string(m.totalBlocks))
                                          .c_str()
                                    : "-");
    }
    // Issue 41's ratios, measured in this run (the one-at-a-time path's TPOT follows the
    // machine's memory bandwidth at that moment: RESULTS.md).
    if (results.size() > 1) {
      const double engineRate = engine.toJson(requests.size())["output_tokens_per_s"];
      std::string ratios;
      for (size_t i = 1; i < results.size(); ++i) {
        const double rate = results[i].toJson(requests.size())["output_tokens_per_s"];
        char part[96];
        std::snprintf(part, sizeof part, "%s%.2fx %s", i > 1 ? ", " : "",
                      rate > 0 ? engineRate / rate : 0.0, results[i].name.c_str());
        ratios += part;
      }
      std::printf("engine output tokens/s over: %s\n", ratios.c_str());
    }
  }
  dsrt_plan_close(plan);
  return 0;
}

} // namespace dsbench
