// What dsrt-engine-check's files share: its requests and options (EngineCheck.cpp), the
// checks of the API's promises to callers (EngineClientChecks.cpp) and the option refusals
// (EngineOptionChecks.cpp).
#pragma once

#include "dsrt/dsrt.h"

#include <cstdint>
#include <string>
#include <vector>

namespace engine_check {

// Prints `what` with dsrt_last_error() and exits 2.
[[noreturn]] void die(const std::string &what);
void check(dsrt_status status, const std::string &what);

struct Request {
  std::vector<int64_t> prompt;
  int32_t maxNewTokens = 0;
  uint64_t seed = 0;
  std::vector<int64_t> alone;  // the reference's tokens
};

// The command line's choices, which every engine of the check takes.
extern dsrt_device device;
extern bool mpi;
extern dsrt_dtype kvCacheDType;
extern float temperature;  // 0: greedy
extern int32_t speculativeTokens;  // --speculative-tokens: drafts per decode token
extern uint64_t draftTokens, acceptedDraftTokens;  // over every engine of the check

// A request's options: greedy, or sampled from its own seed (--temperature).
dsrt_request_options optionsOf(const Request &request);
// An engine's options on the check's device and cache dtype, at `blockSize`.
dsrt_engine_options engineOptions(int32_t blockSize);

// Four client threads against a started engine; cached tokens asked from callbacks. Each
// returns its failures.
int runThreadedClients(dsrt_plan *plan, const std::vector<Request> &requests, int clients);
int checkCachedTokensInCallbacks(dsrt_plan *plan);
// Token masks (EngineMaskChecks.cpp): forced tokens, all allowed, none allowed, a failing
// mask, a cancel while a mask runs. Returns the failures.
int checkTokenMasks(dsrt_plan *plan, const std::vector<Request> &requests);
// Every request under a forcing mask in the tight scenario's pool, 8 tokens a step: the
// tokens as forced and each mask told the tokens drawn, through preemptions.
int checkTokenMasksPreempted(dsrt_plan *plan, const std::vector<Request> &requests,
                             int32_t blockSize, int32_t tokensPerStep, uint64_t kvBytes,
                             bool needPreemptions);

// With `options` an engine's defaults and `stats` that engine's: one token per step more
// than the plan's rows, and a KV budget of one byte less than a block, are refused by name.
void checkRefusals(dsrt_plan *plan, dsrt_engine_options options, const dsrt_engine_stats &stats);

// kv_cache_memory_fraction on the options' device: a budget of that fraction of the free
// memory (the host's, or a GPU's once the weights are on it), and the fractions out of
// (0, 1], beside kv_cache_bytes, or below a block, refused by name.
void checkMemoryFraction(dsrt_plan *plan, const dsrt_engine_options &options,
                         uint64_t bytesPerBlock);

} // namespace engine_check
