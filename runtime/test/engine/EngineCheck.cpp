// The serving engine's "equal to alone" check (issue 41), through the C API as a user calls
// it: every request's greedy tokens under continuous batching must equal the tokens the same
// request gets alone from dsrt_generate (the static path: the prefill and decode programs
// over a dense cache, an independent reference for the paged kernels and the scheduler).
// Scenarios, each at several block sizes: all requests at once; arrivals one per step;
// prompts sharing a system prefix (prefix-cache hits required); a KV budget so small that
// sequences are preempted and recomputed (preemptions required); cancellations mid-prompt
// and mid-decode (the others unaffected, every block returned).
//
//   dsrt-engine-check PLAN [--alone PLAN] [--requests N] [--block-sizes 1,16,7]
//                          [--device cpu|cpu-reference|cuda] [--strict] [--mpi]
//                          [--kv-cache-dtype int8] [--temperature T] [--speculative-tokens K]
//                          [--exact]
//
// --alone: the plan the reference runs (default PLAN; a TP plan runs as an in-process group).
// --device: both sides' kernels (cpu-reference: the paged reference attention; cuda: the
// paged attention kernels of a serving plan's step program against the dense ones).
// --strict: strict device mode for every session (DSRT_STRICT_DEVICE=1): a cuda session
// without a GPU, or a step through the host fallback, fails the check instead of passing
// on the CPU.
// --mpi: under mpirun, one rank per process (dsrt_engine_create_mpi): rank 0 leads the
// scenarios, the others follow each engine; the reference runs on rank 0 as an in-process
// group of the same plan.
// --kv-cache-dtype int8: every engine's cache is int8, which the static path does not have:
// the reference is then each request alone in an engine of its own (no prefix cache, block
// size 16), so that what is checked is that batching, block sizes, prefix hits, preemption
// and cancellation change nothing; the int8 cache's numerics against an f16 one are
// test/ops' (FastPagedAttention).
// --temperature T: every request samples (temperature T, top-p 0.95, top-k 40, its own
// seed) instead of taking the greedy token, and the reference is each request alone in an
// engine as above: a seed's tokens must not depend on what else is in the batch.
// --speculative-tokens K: every engine drafts up to K tokens per decode token (prompt
// lookup); the tokens must still be the reference's (which never drafts), and some draft
// must have been accepted (NO-DRAFTS otherwise), or the check proved nothing of the drafts.
// With --temperature, a low one (0.05) keeps the draws close enough to the drafts.
// --exact: every engine with batch_invariant 2 (float weights summed as a row alone, bit for
// bit), and the reference each request alone in an engine as above: the logits, not only
// the greedy tokens, must not depend on the batch, which sampling (--temperature) and a half
// plan's rounding would show.
#include "EngineCheck.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace engine_check {

void die(const std::string &what) {
  std::fprintf(stderr, "dsrt-engine-check: %s: %s\n", what.c_str(), dsrt_last_error());
  std::exit(2);
}

void check(dsrt_status status, const std::string &what) {
  if (status != DSRT_OK)
    die(what);
}

dsrt_device device = DSRT_DEVICE_CPU;
bool mpi = false;
dsrt_dtype kvCacheDType = DSRT_UNDEFINED;
float temperature = 0;  // 0: greedy
bool exactFloat = false;  // --exact: batch_invariant 2
int32_t speculativeTokens = 0;
uint64_t draftTokens = 0, acceptedDraftTokens = 0;  // over every engine of the check

// A request's options: greedy, or sampled from its own seed (--temperature).
dsrt_request_options optionsOf(const Request &request) {
  dsrt_request_options options;
  dsrt_request_options_init(&options);
  options.max_new_tokens = request.maxNewTokens;
  options.ignore_eos = 1;
  if (temperature > 0) {
    options.temperature = temperature;
    options.top_p = 0.95f;
    options.top_k = 40;
    options.seed = request.seed;
  }
  return options;
}

// An engine's options on the check's device and cache dtype, at `blockSize`.
dsrt_engine_options engineOptions(int32_t blockSize) {
  dsrt_engine_options options;
  dsrt_engine_options_init(&options);
  options.device = device;
  options.block_size = blockSize;
  options.kv_cache_dtype = kvCacheDType;
  options.speculative_tokens = speculativeTokens;
  if (exactFloat)
    options.batch_invariant = 2;
  return options;
}

} // namespace engine_check

using namespace engine_check;

namespace {

// Tokens alone, from the static path, one request per batch.
std::vector<int64_t> generateAlone(dsrt_session *session, dsrt_group *group,
                                   const Request &request) {
  dsrt_generate_options options;
  dsrt_generate_options_init(&options);
  options.max_new_tokens = request.maxNewTokens;
  options.ignore_eos = 1;
  const int64_t *prompts[] = {request.prompt.data()};
  const size_t lengths[] = {request.prompt.size()};
  dsrt_generation *generation = nullptr;
  check(group ? dsrt_group_generate(group, 1, prompts, lengths, &options, &generation)
              : dsrt_generate(session, 1, prompts, lengths, &options, &generation),
        "generate alone");
  const int64_t *tokens;
  size_t count;
  check(dsrt_generation_tokens(generation, 0, &tokens, &count, nullptr), "tokens");
  std::vector<int64_t> result(tokens, tokens + count);
  dsrt_generation_free(generation);
  return result;
}

// Tokens alone in an engine of the same cache dtype (--kv-cache-dtype): one request, run to
// its end.
std::vector<int64_t> generateAloneInEngine(dsrt_plan *plan, const Request &request) {
  dsrt_engine_options options = engineOptions(16);
  options.prefix_caching = 0;
  options.speculative_tokens = 0;  // the reference takes no drafts
  dsrt_engine *engine = nullptr;
  check(dsrt_engine_create(plan, &options, &engine), "engine alone");
  dsrt_request_options given = optionsOf(request);
  int64_t id = 0;
  check(dsrt_engine_add_request(engine, request.prompt.data(), request.prompt.size(), &given,
                                &id),
        "add alone");
  std::vector<int64_t> result;
  dsrt_request_state state = DSRT_REQUEST_RUNNING;
  for (int busy = 1; busy;) {
    check(dsrt_engine_step(engine, &busy), "step alone");
    int64_t tokens[64];
    size_t count = 0;
    do {
      if (state != DSRT_REQUEST_RUNNING)
        break;
      check(dsrt_engine_poll(engine, id, tokens, 64, &count, &state), "poll alone");
      result.insert(result.end(), tokens, tokens + count);
    } while (count == 64);
  }
  dsrt_engine_destroy(engine);
  return result;
}

struct Scenario {
  std::string name;
  int32_t blockSize = 16;
  int32_t tokensPerStep = 0;     // 0: the plan's max_batch
  uint64_t kvBytes = 0;          // 0: the default
  bool staggered = false;        // one arrival per step
  bool cancel = false;           // cancel request 0 mid-prompt and request 1 mid-decode
  bool needPrefixHits = false;
  bool needPreemptions = false;
};

int runScenario(dsrt_plan *plan, const Scenario &scenario, std::vector<Request> &requests) {
  dsrt_engine_options options = engineOptions(scenario.blockSize);
  options.max_tokens_per_step = scenario.tokensPerStep;
  options.kv_cache_bytes = scenario.kvBytes;
  dsrt_engine *engine = nullptr;
  check(mpi ? dsrt_engine_create_mpi(plan, &options, &engine)
            : dsrt_engine_create(plan, &options, &engine),
        scenario.name + ": engine");
  std::vector<int64_t> ids(requests.size(), -1);
  std::vector<std::vector<int64_t>> got(requests.size());
  std::vector<dsrt_request_state> states(requests.size(), DSRT_REQUEST_RUNNING);
  std::vector<bool> cancelled(requests.size(), false);
  std::vector<int64_t> cached(requests.size(), -1);  // dsrt_engine_request_cached_tokens
  size_t added = 0;
  auto addNext = [&] {
    dsrt_request_options request = optionsOf(requests[added]);
    check(dsrt_engine_add_request(engine, requests[added].prompt.data(),
                                  requests[added].prompt.size(), &request, &ids[added]),
          scenario.name + ": add");
    ++added;
  };
  if (!scenario.staggered)
    while (added < requests.size())
      addNext();
  // Bad requests among good ones: each refused with a message naming the problem, and the
  // others served as if they had not come.
  auto refused = [&](const std::vector<int64_t> &prompt, dsrt_request_options request,
                     const char *expected) {
    int64_t id = 0;
    if (dsrt_engine_add_request(engine, prompt.data(), prompt.size(), &request, &id) ==
            DSRT_OK ||
        !std::strstr(dsrt_last_error(), expected))
      die(scenario.name + ": a bad request was not refused with '" + expected + "'");
  };
  dsrt_request_options bad;
  dsrt_request_options_init(&bad);
  int64_t maxSeq = 0;
  check(dsrt_plan_limits(plan, nullptr, &maxSeq), "limits");
  refused(std::vector<int64_t>(static_cast<size_t>(maxSeq), 5), bad, "max");
  refused({}, bad, "at least one prompt token");
  refused({-1}, bad, "outside the vocabulary");
  bad.top_p = 2;
  refused({5}, bad, "top_p");
  bad.top_p = 1;
  bad.temperature = -1;
  refused({5}, bad, "temperature");
  bad.temperature = 0;
  bad.max_new_tokens = 0;
  refused({5}, bad, "max_new_tokens");
  if (dsrt_engine_cancel(engine, 1 << 30) == DSRT_OK ||
      !std::strstr(dsrt_last_error(), "unknown"))
    die(scenario.name + ": cancelling an unknown request was not refused");
  int busy = 1;
  for (int steps = 0; busy || added < requests.size(); ++steps) {
    if (steps > 100000)
      die(scenario.name + ": the engine made no progress");
    if (added < requests.size())
      addNext();
    check(dsrt_engine_step(engine, &busy), scenario.name + ": step");
    // The prefix cache is reset only between requests: refused while these run.
    if (steps == 0 && busy && (dsrt_engine_reset_prefix_cache(engine) == DSRT_OK ||
                               !std::strstr(dsrt_last_error(), "while requests run")))
      die(scenario.name + ": resetting the prefix cache while requests ran was not refused");
    for (size_t r = 0; r < added; ++r) {
      if (states[r] != DSRT_REQUEST_RUNNING)
        continue;
      // Known until the poll that collects the finish, and not after.
      check(dsrt_engine_request_cached_tokens(engine, ids[r], &cached[r]), "cached tokens");
      int64_t tokens[64];
      size_t count = 0;
      do {
        check(dsrt_engine_poll(engine, ids[r], tokens, 64, &count, &states[r]), "poll");
        got[r].insert(got[r].end(), tokens, tokens + count);
      } while (count == 64);
      int64_t gone = 0;
      if (states[r] != DSRT_REQUEST_RUNNING &&
          dsrt_engine_request_cached_tokens(engine, ids[r], &gone) == DSRT_OK)
        die(scenario.name + ": a collected request's cached tokens were still known");
      // Request 0 leaves during its prompt (nothing generated yet), request 1 after two
      // tokens of its own.
      if (scenario.cancel && states[r] == DSRT_REQUEST_RUNNING &&
          ((r == 0 && steps == 0) || (r == 1 && got[r].size() == 2))) {
        check(dsrt_engine_cancel(engine, ids[r]), "cancel");
        cancelled[r] = true;
        // A cancelled id is gone: cancelling it again must say so.
        if (dsrt_engine_cancel(engine, ids[r]) == DSRT_OK)
          die(scenario.name + ": cancelling a cancelled request succeeded");
        states[r] = DSRT_REQUEST_CANCELLED;
      }
    }
  }
  dsrt_engine_stats stats;
  check(dsrt_engine_stats_get(engine, &stats), "stats");
  check(dsrt_engine_reset_prefix_cache(engine), scenario.name + ": prefix cache reset when idle");
  int failures = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    if (cancelled[r])
      continue;
    if (got[r] != requests[r].alone || states[r] != DSRT_REQUEST_LENGTH) {
      ++failures;
      std::printf("MISMATCH %s: request %zu (prompt %zu tokens, state %d): engine", 
                  scenario.name.c_str(), r, requests[r].prompt.size(), states[r]);
      for (int64_t t : got[r])
        std::printf(" %lld", static_cast<long long>(t));
      std::printf(" | alone");
      for (int64_t t : requests[r].alone)
        std::printf(" %lld", static_cast<long long>(t));
      std::printf("\n");
    }
  }
  if (stats.used_blocks != 0) {
    ++failures;
    std::printf("LEAK %s: %lld blocks still in use after every request ended\n",
                scenario.name.c_str(), static_cast<long long>(stats.used_blocks));
  }
  if (scenario.needPrefixHits && stats.prefix_hits == 0) {
    ++failures;
    std::printf("NO-HITS %s: shared prefixes gave no prefix-cache hit\n", scenario.name.c_str());
  }
  // Each request's cached prompt tokens are its first admission's hits, in whole blocks:
  // together the engine's hits where nothing was recomputed, and at most those where
  // recomputes hit blocks again.
  uint64_t cachedBlocks = 0;
  bool wholeBlocks = true;
  for (int64_t tokens : cached)
    if (tokens > 0) {
      wholeBlocks = wholeBlocks && tokens % scenario.blockSize == 0;
      cachedBlocks += static_cast<uint64_t>(tokens / scenario.blockSize);
    }
  if (!wholeBlocks || (stats.preemptions == 0 ? cachedBlocks != stats.prefix_hits
                                              : cachedBlocks > stats.prefix_hits)) {
    ++failures;
    std::printf("CACHED-TOKENS %s: the requests' cached prompt tokens make %llu blocks%s; the "
                "engine hit %llu\n",
                scenario.name.c_str(), static_cast<unsigned long long>(cachedBlocks),
                wholeBlocks ? "" : " (not all whole blocks)",
                static_cast<unsigned long long>(stats.prefix_hits));
  }
  if (scenario.needPreemptions && stats.preemptions == 0) {
    ++failures;
    std::printf("NO-PREEMPTION %s: the small KV budget preempted nothing\n",
                scenario.name.c_str());
  }
  uint64_t drafts = 0, accepted = 0;
  check(dsrt_engine_draft_stats(engine, &drafts, &accepted), "draft stats");
  draftTokens += drafts;
  acceptedDraftTokens += accepted;
  if (speculativeTokens > 0)
    std::printf("  drafts %s: %llu, %llu accepted\n", scenario.name.c_str(),
                static_cast<unsigned long long>(drafts),
                static_cast<unsigned long long>(accepted));
  std::printf("%s %s: %zu requests, %llu steps, peak %lld of %lld blocks, %llu prefix hits, "
              "%llu preemptions\n",
              failures ? "FAIL" : "ok", scenario.name.c_str(), requests.size(),
              static_cast<unsigned long long>(stats.steps),
              static_cast<long long>(stats.peak_used_blocks),
              static_cast<long long>(stats.total_blocks),
              static_cast<unsigned long long>(stats.prefix_hits),
              static_cast<unsigned long long>(stats.preemptions));
  dsrt_engine_destroy(engine);
  return failures;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    die("usage: dsrt-engine-check PLAN [--alone PLAN] [--requests N] [--block-sizes 1,16,7]");
  std::string planPath = argv[1], alonePath = argv[1];
  int requestCount = 8;
  std::vector<int32_t> blockSizes = {1, 16, 7};
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + flag);
      return argv[++i];
    };
    if (flag == "--alone")
      alonePath = value();
    else if (flag == "--mpi")
      mpi = true;
    else if (flag == "--device")
      check(dsrt_device_from_name(value().c_str(), &device), "--device");
    else if (flag == "--exact")
      exactFloat = true;
    else if (flag == "--strict")
      setenv("DSRT_STRICT_DEVICE", "1", 1);  // every session: no CPU fallback, no host step
    else if (flag == "--kv-cache-dtype") {
      const std::string dtype = value();
      if (dtype != "int8" && dtype != "auto")
        die("--kv-cache-dtype must be auto or int8, not " + dtype);
      kvCacheDType = dtype == "int8" ? DSRT_I8 : DSRT_UNDEFINED;
    } else if (flag == "--temperature") {
      temperature = std::strtof(value().c_str(), nullptr);
      if (!(temperature > 0 && temperature <= 4))
        die("--temperature must be in (0, 4]");
    } else if (flag == "--speculative-tokens") {
      speculativeTokens = std::atoi(value().c_str());
      // The engine's own range is what is checked: a bad value fails at its creation.
      if (speculativeTokens < 1)
        die("--speculative-tokens must be at least 1");
    } else if (flag == "--requests")
      requestCount = std::atoi(value().c_str());
    else if (flag == "--block-sizes") {
      blockSizes.clear();
      std::string list = value();
      for (size_t at = 0; at < list.size();) {
        size_t comma = list.find(',', at);
        blockSizes.push_back(std::atoi(list.substr(at, comma - at).c_str()));
        at = comma == std::string::npos ? list.size() : comma + 1;
      }
    } else
      die("unknown option " + flag);
  }
  dsrt_plan *plan = nullptr, *alonePlan = nullptr;
  check(dsrt_plan_open(planPath.c_str(), &plan), planPath);
  if (mpi) {
    // Whether this process leads: an engine's rank, known once one exists; the followers
    // follow one engine per scenario of rank 0's, in the same order.
    dsrt_engine *first = nullptr;
    check(dsrt_engine_create_mpi(plan, nullptr, &first), "engine (MPI)");
    const int rank = dsrt_engine_rank(first);
    if (rank != 0) {
      check(dsrt_engine_follow(first), "follow");
      dsrt_engine_destroy(first);
      for (size_t engines = 0; engines < 4 * blockSizes.size(); ++engines) {
        dsrt_engine *engine = nullptr;
        check(dsrt_engine_create_mpi(plan, nullptr, &engine), "engine (MPI)");
        check(dsrt_engine_follow(engine), "follow");
        dsrt_engine_destroy(engine);
      }
      dsrt_plan_close(plan);
      std::printf("rank %d followed %zu engines\n", rank, 1 + 4 * blockSizes.size());
      return 0;
    }
    dsrt_engine_destroy(first);
  }
  check(dsrt_plan_open(alonePath.c_str(), &alonePlan), alonePath);
  dsrt_session *session = nullptr;
  dsrt_group *group = nullptr;
  if (dsrt_plan_rank_count(alonePlan) > 1)
    check(dsrt_group_create(alonePlan, device, &group), "group");
  else
    check(dsrt_session_create(alonePlan, 0, device, &session), "session");

  size_t inputs = 0;
  check(dsrt_plan_io_count(plan, "decode", 0, &inputs), "the plan's decode program");
  // Prompts of mixed lengths over a vocabulary every fixture has, half of them after a
  // shared "system prompt" of two 16-token blocks; outputs of mixed lengths. The plan must
  // hold the longest (--max-seq-len 64 or more).
  std::mt19937_64 random(41);
  std::vector<int64_t> system(32);
  for (int64_t &token : system)
    token = 3 + static_cast<int64_t>(random() % 90);
  std::vector<Request> requests(static_cast<size_t>(requestCount));
  for (size_t r = 0; r < requests.size(); ++r) {
    Request &request = requests[r];
    if (r % 2 == 1)
      request.prompt = system;
    // Request 0 is cancelled during its prompt, request 1 after two tokens.
    size_t own = r == 0 ? 12 : 1 + random() % 17;
    for (size_t i = 0; i < own; ++i)
      request.prompt.push_back(3 + static_cast<int64_t>(random() % 90));
    request.maxNewTokens = r == 1 ? 8 : 1 + static_cast<int32_t>(random() % 12);
    request.seed = 1000 + r;
    request.alone = kvCacheDType == DSRT_I8 || temperature > 0 || exactFloat
                        ? generateAloneInEngine(plan, request)
                        : generateAlone(session, group, request);
  }
  int failures =
      mpi ? 0
          : checkCachedTokensInCallbacks(plan) + runThreadedClients(plan, requests, 4) +
                checkTokenMasks(plan, requests);
  for (int32_t blockSize : blockSizes) {
    std::string at = " (block " + std::to_string(blockSize) + ")";
    failures += runScenario(plan, {"all at once" + at, blockSize}, requests);
    Scenario staggered{"staggered, shared prefix" + at, blockSize};
    staggered.staggered = true;
    staggered.needPrefixHits = blockSize <= 16;
    failures += runScenario(plan, staggered, requests);
    // Room for the longest request: the others must wait or be preempted and recomputed.
    size_t longest = 0;
    for (const Request &request : requests)
      longest = std::max(longest, request.prompt.size() + request.maxNewTokens);
    Scenario tight{"tight KV budget" + at, blockSize};
    tight.needPreemptions = true;
    int64_t planTokensPerStep = 0;
    {
      dsrt_engine_options defaults = engineOptions(blockSize);
      dsrt_engine *probe = nullptr;
      check(dsrt_engine_create(plan, &defaults, &probe), "engine");
      dsrt_engine_stats stats;
      check(dsrt_engine_stats_get(probe, &stats), "stats");
      dsrt_engine_destroy(probe);
      planTokensPerStep = stats.max_tokens_per_step;
      // Short steps (prompts in chunks), within what the plan's step program takes: a plan
      // compiled with --max-tokens-per-step 3 refuses 8 by name.
      tight.tokensPerStep = static_cast<int32_t>(std::min<int64_t>(8, planTokensPerStep));
      // Exactly the longest request's blocks: it can always run alone, so the engine makes
      // progress, and sequences that grow together must preempt (one block more left room
      // at blocks of 13 and 29: nothing was preempted). Where the longest fits one block no
      // sequence ever grows into another, and nothing can be.
      const size_t longestBlocks = (longest + blockSize - 1) / blockSize;
      tight.kvBytes = stats.bytes_per_block * longestBlocks;
      // Steps of fewer than 8 tokens admit and grow so few sequences at once that they may
      // wait for blocks rather than grow into each other (3 tokens a step on the Llama 3
      // fixture: none preempted); their tokens must still equal alone.
      tight.needPreemptions = longestBlocks > 1 && tight.tokensPerStep >= 8;
      // The default tokens per step are the rows of the plan's step program, and one more is
      // refused, naming them.
      if (blockSize == blockSizes.front())
        std::printf("default tokens per step: %lld; KV bytes per block of %d: %llu\n",
                    static_cast<long long>(stats.max_tokens_per_step), blockSize,
                    static_cast<unsigned long long>(stats.bytes_per_block));
      checkRefusals(plan, defaults, stats);
      if (blockSize == blockSizes.front())
        checkMemoryFraction(plan, defaults, stats.bytes_per_block);
    }
    failures += runScenario(plan, tight, requests);
    if (!mpi)
      failures += checkTokenMasksPreempted(plan, requests, blockSize, tight.tokensPerStep,
                                           tight.kvBytes, tight.needPreemptions);
    Scenario cancel{"cancellations" + at, blockSize};
    cancel.tokensPerStep = static_cast<int32_t>(std::min<int64_t>(4, planTokensPerStep));
    cancel.cancel = true;
    failures += runScenario(plan, cancel, requests);
  }
  if (session)
    dsrt_session_destroy(session);
  if (group)
    dsrt_group_destroy(group);
  dsrt_plan_close(alonePlan);
  dsrt_plan_close(plan);
  if (speculativeTokens > 0) {
    // Equal to alone proves nothing of the drafts unless some were confirmed.
    std::printf("speculation: %llu drafts, %llu accepted\n",
                static_cast<unsigned long long>(draftTokens),
                static_cast<unsigned long long>(acceptedDraftTokens));
    if (acceptedDraftTokens == 0) {
      ++failures;
      std::printf("NO-DRAFTS: no draft was accepted\n");
    }
  }
  std::printf("%s: %d failure(s)\n", planPath.c_str(), failures);
  return failures ? 1 : 0;
}
