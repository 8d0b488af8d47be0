// dsrt-engine-check's checks of token masks (dsrt_token_mask_fn, structured output): a mask
// decides each draw and is told what was drawn before it, a mask that allows everything
// changes nothing, one that allows nothing or fails ends its request alone, and no mask is
// asked for after a cancel has returned.
#include "EngineCheck.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace engine_check {
namespace {

// What a mask does at each draw, and what it saw.
struct Mask {
  enum class Kind { Forced, Everything, Nothing, Fails, Slow } kind = Kind::Everything;
  std::vector<int64_t> forced;  // Forced: the one token of draw i
  size_t failAt = 0;            // Nothing, Fails: from this draw on
  std::vector<std::vector<int64_t>> seen;  // each call's tokens generated so far
  std::atomic<int> calls{0};
  std::atomic<bool> inside{false};
  std::chrono::steady_clock::time_point lastReturn;
};

int maskOf(void *user, int64_t, const int64_t *generated, size_t count, uint32_t *allowed,
           size_t words) {
  auto &mask = *static_cast<Mask *>(user);
  mask.inside = true;
  ++mask.calls;
  mask.seen.emplace_back(generated, generated + count);
  int code = 0;
  switch (mask.kind) {
  case Mask::Kind::Forced: {
    std::fill(allowed, allowed + words, 0u);
    const int64_t token = mask.forced[count % mask.forced.size()];
    allowed[token / 32] |= 1u << (token % 32);
    break;
  }
  case Mask::Kind::Nothing:
    if (count >= mask.failAt)
      std::fill(allowed, allowed + words, 0u);
    break;
  case Mask::Kind::Fails:
    code = count >= mask.failAt ? 7 : 0;
    break;
  case Mask::Kind::Slow:
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    break;
  case Mask::Kind::Everything:
    break;
  }
  mask.lastReturn = std::chrono::steady_clock::now();
  mask.inside = false;
  return code;
}

// What a Forced mask makes a request of `count` tokens draw.
std::vector<int64_t> forcedTokens(const Mask &mask, int32_t count) {
  std::vector<int64_t> tokens;
  for (int32_t i = 0; i < count; ++i)
    tokens.push_back(mask.forced[static_cast<size_t>(i) % mask.forced.size()]);
  return tokens;
}

// Polls each request to its end, stepping the engine from this thread.
void runToEnd(dsrt_engine *engine, const std::vector<int64_t> &ids,
              std::vector<std::vector<int64_t>> &tokens, std::vector<dsrt_request_state> &states) {
  tokens.assign(ids.size(), {});
  states.assign(ids.size(), DSRT_REQUEST_RUNNING);
  for (int busy = 1; busy;) {
    check(dsrt_engine_step(engine, &busy), "step (masks)");
    for (size_t r = 0; r < ids.size(); ++r) {
      if (states[r] != DSRT_REQUEST_RUNNING)
        continue;
      int64_t got[64];
      size_t count = 0;
      check(dsrt_engine_poll(engine, ids[r], got, 64, &count, &states[r]), "poll (masks)");
      tokens[r].insert(tokens[r].end(), got, got + count);
    }
  }
}

} // namespace

int checkTokenMasks(dsrt_plan *plan, const std::vector<Request> &requests) {
  int failures = 0;
  auto fail = [&](const std::string &what) {
    ++failures;
    std::printf("MASK %s\n", what.c_str());
  };
  // Request 0 forced through tokens of its prompt, request 1 under a mask that allows
  // everything, request 2 allowed nothing from its third draw, request 3's mask failing at
  // its second; the others unmasked. Each unmasked or all-allowing request equals itself
  // alone; the forced one draws what it is told (sampled or not) and saw each draw before.
  dsrt_engine_options options = engineOptions(16);
  dsrt_engine *engine = nullptr;
  check(dsrt_engine_create(plan, &options, &engine), "engine (masks)");
  const size_t count = std::min<size_t>(requests.size(), 6);
  if (count < 4)
    die("the mask checks need 4 requests or more");
  std::vector<Mask> masks(4);
  masks[0].kind = Mask::Kind::Forced;
  for (size_t i = 0; i < requests[0].prompt.size(); ++i)
    masks[0].forced.push_back(requests[0].prompt[requests[0].prompt.size() - 1 - i]);
  masks[1].kind = Mask::Kind::Everything;
  masks[2].kind = Mask::Kind::Nothing;
  masks[2].failAt = 2;
  masks[3].kind = Mask::Kind::Fails;
  masks[3].failAt = 1;
  std::vector<int64_t> ids(count);
  for (size_t r = 0; r < count; ++r) {
    dsrt_request_options given = optionsOf(requests[r]);
    if (r < masks.size()) {
      given.token_mask = maskOf;
      given.token_mask_user_data = &masks[r];
    }
    if (r == 0)
      given.ignore_eos = 1;  // a forced token that is EOS must not end it early
    if (r == 2 || r == 3) {  // long enough to reach the draw their masks fail at
      given.max_new_tokens = std::max(given.max_new_tokens, 4);
      given.ignore_eos = 1;
    }
    check(dsrt_engine_add_request(engine, requests[r].prompt.data(), requests[r].prompt.size(),
                                  &given, &ids[r]),
          "add (masks)");
  }
  std::vector<std::vector<int64_t>> tokens;
  std::vector<dsrt_request_state> states;
  runToEnd(engine, ids, tokens, states);
  uint64_t drafts = 0, accepted = 0;
  check(dsrt_engine_draft_stats(engine, &drafts, &accepted), "draft stats (masks)");
  dsrt_engine_stats stats;
  check(dsrt_engine_stats_get(engine, &stats), "stats (masks)");
  dsrt_engine_destroy(engine);

  if (tokens[0] != forcedTokens(masks[0], requests[0].maxNewTokens))
    fail("forced: the request did not draw the one token its mask allowed");
  for (size_t call = 0; call < masks[0].seen.size(); ++call)
    if (masks[0].seen[call] !=
        std::vector<int64_t>(tokens[0].begin(), tokens[0].begin() + static_cast<long>(call)))
      fail("forced: call " + std::to_string(call) + " was not told the tokens drawn before it");
  if (masks[0].calls != requests[0].maxNewTokens)
    fail("forced: " + std::to_string(masks[0].calls.load()) + " calls for " +
         std::to_string(requests[0].maxNewTokens) + " draws");
  if (tokens[1] != requests[1].alone || states[1] != DSRT_REQUEST_LENGTH)
    fail("a mask that allows everything changed the request's tokens");
  if (states[2] != DSRT_REQUEST_CANCELLED || tokens[2].size() != 2)
    fail("a mask that allows nothing at the third draw: state " + std::to_string(states[2]) +
         " after " + std::to_string(tokens[2].size()) + " tokens (cancelled after 2 expected)");
  if (states[3] != DSRT_REQUEST_CANCELLED || tokens[3].size() != 1)
    fail("a mask failing at the second draw: state " + std::to_string(states[3]) + " after " +
         std::to_string(tokens[3].size()) + " tokens (cancelled after 1 expected)");
  for (size_t r = masks.size(); r < count; ++r)
    if (tokens[r] != requests[r].alone)
      fail("request " + std::to_string(r) + " (unmasked) differs from its tokens alone");
  if (stats.used_blocks != 0)
    fail(std::to_string(stats.used_blocks) + " blocks still in use");

  // A cancel while the mask runs returns after it, and no call comes after the cancel.
  check(dsrt_engine_create(plan, &options, &engine), "engine (mask cancel)");
  check(dsrt_engine_start(engine), "start (mask cancel)");
  Mask slow;
  slow.kind = Mask::Kind::Slow;
  dsrt_request_options given = optionsOf(requests[0]);
  int64_t maxBatch = 0, maxSeqLen = 0;
  check(dsrt_plan_limits(plan, &maxBatch, &maxSeqLen), "limits (mask cancel)");
  // Its whole context: 20 ms a draw outlasts the wait below.
  given.max_new_tokens =
      static_cast<int32_t>(maxSeqLen - static_cast<int64_t>(requests[0].prompt.size()));
  given.ignore_eos = 1;
  given.token_mask = maskOf;
  given.token_mask_user_data = &slow;
  int64_t id = 0;
  check(dsrt_engine_add_request(engine, requests[0].prompt.data(), requests[0].prompt.size(),
                                &given, &id),
        "add (mask cancel)");
  while (slow.calls < 2 || !slow.inside)
    std::this_thread::yield();
  check(dsrt_engine_cancel(engine, id), "cancel (mask cancel)");
  const auto cancelled = std::chrono::steady_clock::now();
  const int callsAtCancel = slow.calls;
  const bool wasInside = slow.inside;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  dsrt_engine_destroy(engine);
  if (wasInside || slow.lastReturn > cancelled || slow.calls != callsAtCancel)
    fail("a mask ran after its request's cancel had returned");

  std::printf("%s token masks: forced, all allowed, none allowed, failing, cancelled while "
              "masking (%llu drafts)\n",
              failures ? "FAIL" : "ok", static_cast<unsigned long long>(drafts));
  return failures;
}

int checkTokenMasksPreempted(dsrt_plan *plan, const std::vector<Request> &requests,
                             int32_t blockSize, int32_t tokensPerStep, uint64_t kvBytes,
                             bool needPreemptions) {
  // Every request forced through its prompt reversed, the tight scenario's tokens a step
  // (8, or fewer where the plan's step is shorter) in a pool of the longest request's
  // blocks: preempted requests compute their tokens again and must be asked their masks
  // with the tokens they had, not from the start.
  dsrt_engine_options options = engineOptions(blockSize);
  options.max_tokens_per_step = tokensPerStep;
  options.kv_cache_bytes = kvBytes;
  dsrt_engine *engine = nullptr;
  check(dsrt_engine_create(plan, &options, &engine), "engine (masks, preempted)");
  std::vector<Mask> masks(requests.size());
  std::vector<int64_t> ids(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    masks[r].kind = Mask::Kind::Forced;
    masks[r].forced.assign(requests[r].prompt.rbegin(), requests[r].prompt.rend());
    dsrt_request_options given = optionsOf(requests[r]);
    given.ignore_eos = 1;
    given.token_mask = maskOf;
    given.token_mask_user_data = &masks[r];
    check(dsrt_engine_add_request(engine, requests[r].prompt.data(), requests[r].prompt.size(),
                                  &given, &ids[r]),
          "add (masks, preempted)");
  }
  std::vector<std::vector<int64_t>> tokens;
  std::vector<dsrt_request_state> states;
  runToEnd(engine, ids, tokens, states);
  dsrt_engine_stats stats;
  check(dsrt_engine_stats_get(engine, &stats), "stats (masks, preempted)");
  dsrt_engine_destroy(engine);
  int failures = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    bool told = true;
    for (const std::vector<int64_t> &seen : masks[r].seen)
      told = told && seen.size() < tokens[r].size() + 1 &&
             std::equal(seen.begin(), seen.end(), tokens[r].begin());
    if (tokens[r] != forcedTokens(masks[r], requests[r].maxNewTokens) ||
        states[r] != DSRT_REQUEST_LENGTH || !told) {
      ++failures;
      std::printf("MASK preempted (block %d): request %zu %s\n", blockSize, r,
                  told ? "did not draw its forced tokens" : "was told tokens it had not drawn");
    }
  }
  if (needPreemptions && stats.preemptions == 0) {
    ++failures;
    std::printf("MASK preempted (block %d): nothing was preempted\n", blockSize);
  }
  std::printf("%s token masks under preemption (block %d): %llu preemptions\n",
              failures ? "FAIL" : "ok", blockSize,
              static_cast<unsigned long long>(stats.preemptions));
  return failures;
}

} // namespace engine_check
