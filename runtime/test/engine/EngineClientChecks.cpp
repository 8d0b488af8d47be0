// dsrt-engine-check's checks of what dsrt.h promises callers: requests added, polled and
// cancelled from many threads while the engine steps on its own, and a request's cached
// prompt tokens asked from its callbacks.
#include "EngineCheck.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace engine_check {

// dsrt.h's promise that requests may be added, polled and cancelled from any thread while
// the engine steps on its own (dsrt_engine_start): `clients` threads, each adding its share
// of the requests one after another and polling each to its end; every third request is
// cancelled after its first token (unless it finished first). The others must get their
// tokens alone, every id must be distinct, and every block must come back. Returns the
// failures. Run under ThreadSanitizer, it checks the engine's locking as well.
int runThreadedClients(dsrt_plan *plan, const std::vector<Request> &requests, int clients) {
  dsrt_engine_options options = engineOptions(16);
  dsrt_engine *engine = nullptr;
  check(dsrt_engine_create(plan, &options, &engine), "engine (threads)");
  check(dsrt_engine_start(engine), "start (threads)");
  std::vector<std::vector<int64_t>> got(requests.size());
  std::vector<int64_t> ids(requests.size(), -1);
  std::vector<dsrt_request_state> states(requests.size(), DSRT_REQUEST_RUNNING);
  std::vector<char> cancelled(requests.size(), 0);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      for (size_t r = static_cast<size_t>(c); r < requests.size();
           r += static_cast<size_t>(clients)) {
        dsrt_request_options given = optionsOf(requests[r]);
        if (dsrt_engine_add_request(engine, requests[r].prompt.data(), requests[r].prompt.size(),
                                    &given, &ids[r]) != DSRT_OK) {
          ++errors;
          continue;
        }
        while (states[r] == DSRT_REQUEST_RUNNING) {
          int64_t cachedTokens = 0, tokens[64];
          size_t count = 0;
          if (dsrt_engine_request_cached_tokens(engine, ids[r], &cachedTokens) != DSRT_OK ||
              dsrt_engine_poll(engine, ids[r], tokens, 64, &count, &states[r]) != DSRT_OK) {
            ++errors;
            break;
          }
          got[r].insert(got[r].end(), tokens, tokens + count);
          // A cancel that finds the request finished is refused; it is then polled to its end.
          if (r % 3 == 2 && !got[r].empty() && states[r] == DSRT_REQUEST_RUNNING &&
              dsrt_engine_cancel(engine, ids[r]) == DSRT_OK) {
            cancelled[r] = 1;
            break;
          }
          if (count == 0)
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  dsrt_engine_stop(engine);
  dsrt_engine_stats stats;
  check(dsrt_engine_stats_get(engine, &stats), "stats (threads)");
  dsrt_engine_destroy(engine);
  int failures = errors.load();
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    ++failures, std::printf("THREADS: two requests got one id\n");
  for (size_t r = 0; r < requests.size(); ++r)
    if (!cancelled[r] && (got[r] != requests[r].alone || states[r] != DSRT_REQUEST_LENGTH))
      ++failures, std::printf("MISMATCH clients on threads: request %zu (state %d) differs from "
                              "its tokens alone\n", r, states[r]);
  if (stats.used_blocks != 0)
    ++failures, std::printf("LEAK clients on threads: %lld blocks still in use\n",
                            static_cast<long long>(stats.used_blocks));
  std::printf("%s %d clients on threads: %zu requests (%d cancelled), %llu steps\n",
              failures ? "FAIL" : "ok", clients, requests.size(),
              static_cast<int>(std::count(cancelled.begin(), cancelled.end(), 1)),
              static_cast<unsigned long long>(stats.steps));
  return failures;
}

// With a callback, a request's cached prompt tokens can be asked from its callbacks, its
// last one included, and not after: two requests of one prompt of 3 blocks and a token, one
// after the other; the second finds the 3 blocks cached. Returns the failures.
int checkCachedTokensInCallbacks(dsrt_plan *plan) {
  dsrt_engine_options options = engineOptions(16);
  dsrt_engine *engine = nullptr;
  check(dsrt_engine_create(plan, &options, &engine), "engine (callback)");
  struct Seen {
    dsrt_engine *engine;
    int64_t request = -1, atFinish = -2;
    dsrt_status status = DSRT_OK;
  } seen{engine};
  check(dsrt_engine_set_callback(
            engine,
            [](void *user, int64_t request, int64_t token, dsrt_request_state,
               const dsrt_token_logprobs *) {
              auto *seen = static_cast<Seen *>(user);
              if (token < 0 && request == seen->request)
                seen->status =
                    dsrt_engine_request_cached_tokens(seen->engine, request, &seen->atFinish);
            },
            &seen),
        "callback");
  std::vector<int64_t> prompt(49);
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = 3 + static_cast<int64_t>((i * 37) % 90);
  dsrt_request_options request;
  dsrt_request_options_init(&request);
  request.max_new_tokens = 2;
  int failures = 0;
  for (int64_t expected : {int64_t(0), int64_t(48)}) {
    check(dsrt_engine_add_request(engine, prompt.data(), prompt.size(), &request, &seen.request),
          "add (callback)");
    seen.atFinish = -2;
    for (int busy = 1; busy;)
      check(dsrt_engine_step(engine, &busy), "step (callback)");
    int64_t after = 0;
    const bool knownAfter =
        dsrt_engine_request_cached_tokens(engine, seen.request, &after) == DSRT_OK;
    if (seen.status != DSRT_OK || seen.atFinish != expected || knownAfter) {
      ++failures;
      std::printf("CACHED-TOKENS callbacks: asked at the last callback: %s, %lld cached "
                  "(expected %lld); %s after it\n",
                  seen.status == DSRT_OK ? "ok" : "refused",
                  static_cast<long long>(seen.atFinish), static_cast<long long>(expected),
                  knownAfter ? "still known" : "unknown");
    }
  }
  std::printf("%s cached prompt tokens asked from callbacks\n", failures ? "FAIL" : "ok");
  dsrt_engine_destroy(engine);
  return failures;
}

} // namespace engine_check
