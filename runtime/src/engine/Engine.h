// The serving engine (docs/serving.md): continuous batching over a paged KV cache. Requests
// come and go at any time; each step the scheduler (Scheduler.h) picks decode tokens first,
// then prompt chunks, under a token budget, and the engine runs them as one batch of the
// plan's `decode` program, one token per row, every row reading its own sequence's blocks.
// Full prompt blocks are shared across requests by a chained hash of their tokens (prefix
// caching); when blocks run out a sequence is preempted and recomputed later. A TP plan runs
// its ranks on threads of this process (an in-process group): rank 0 samples, every rank
// runs the same rows.
//
// Thread safety: add(), cancel(), poll() and stats() may be called from any thread, also
// while another thread runs step() (or the engine's own thread, start()). Callbacks run on
// the thread that steps.
#ifndef DSRT_ENGINE_ENGINE_H
#define DSRT_ENGINE_ENGINE_H

#include "core/Status.h"
#include "plan/PlanFile.h"
#include "session/Session.h"

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dsrt {
class InProcessGroup;
}

namespace dsrt::engine {

class Scheduler;

struct EngineOptions {
  DeviceKind device = DeviceKind::Cpu;
  // Positions per KV block.
  int64_t blockSize = 16;
  // The KV cache's bytes over all layers (and per rank under TP). 0: max_seq_len positions
  // for each of the plan's max_batch or max_tokens_per_step rows, whichever is more (a static
  // session reserves the first), at most a quarter of the machine's memory, or on CUDA at
  // most kDefaultGpuFraction of the GPU's memory the weights leave free.
  uint64_t kvCacheBytes = 0;
  // In (0, 1]: the KV budget is this fraction of the free memory, kvCacheBytes then 0: on
  // the CPU the host's at creation (availableMemoryBytes, shared by the ranks in the
  // process), on CUDA each GPU's once its session has placed the weights (the ranks then
  // agree on the fewest blocks any holds). 0: kvCacheBytes decides.
  double kvCacheMemoryFraction = 0;
  // Tokens computed per step, all sequences together: at most the rows of the program the
  // engine runs (0: that many), which are the plan's max_tokens_per_step where it has a step
  // program (`dsc --serving`: 256 unless --max-tokens-per-step), else its max_batch.
  int64_t maxTokensPerStep = 0;
  // Sequences holding KV blocks at once (0: maxTokensPerStep).
  int64_t maxRunningSequences = 0;
  bool prefixCaching = true;
  // Each request's tokens the same whatever else its steps compute (docs/serving.md, "Batch
  // invariance"): the CPU kernels give every row the arithmetic of a row alone
  // (ops::SessionState::rowInvariant). Off: long steps of half and quantized plans take the
  // bf16 GEMMs and AMX attention, faster, and a token may then differ from the request's
  // alone where two candidates nearly tie. 2: float weights too sum every row as a row
  // alone, bit for bit (ops::SessionState::exactFloatRows), where 1 leaves them within f32
  // rounding; slower on steps of many rows (docs/serving.md).
  int batchInvariant = 1;
  // Keys and values stored as int8 with a scale per 32 values (ops::KvCacheLayer), about
  // half an f16 cache's bytes: the attention of long decode steps reads half as much. The
  // CPU backends only; off, the plan's cache dtype.
  bool int8KvCache = false;
  // Speculative decoding by prompt lookup (vLLM's "ngram" method): each decode token also
  // computes up to this many drafts, the tokens that followed the latest earlier
  // occurrence of its sequence's last n tokens (n from promptLookupMax down to
  // promptLookupMin; Scheduler.h), from the step's spare budget. Each row is drawn as
  // without drafts (greedy or from the request's own stream, after the penalties and
  // min_tokens of the tokens before it) and a draft counts where the draw is the draft, so
  // a request's tokens are those it gets without: a request alone reads the weights once
  // for several tokens. 0: off. The CPU
  // backends only.
  int64_t speculativeTokens = 0;
  int64_t promptLookupMax = 3, promptLookupMin = 1;
  // Drafts only in steps of at most this many decode sequences (Scheduler.h says why).
  int64_t speculativeMaxBatch = 8;
};

struct RequestOptions {
  int64_t maxNewTokens = 16;
  float temperature = 0;  // 0: greedy
  int64_t topK = 0;       // 0: no limit
  float topP = 1;         // 1: no limit
  // Tokens below minP times the likeliest token's probability are dropped (vLLM's and
  // llama.cpp's min_p); 0: none.
  float minP = 0;
  // vLLM's penalties, applied to the logits before temperature and truncation: the
  // repetition penalty (CTRL's: a logit of a token already in the prompt or the output is
  // divided by it when positive, multiplied when negative; 1: none), then OpenAI's presence
  // and frequency penalties (subtracted once for a token the output holds, and once per
  // time it holds it; 0: none). Greedy requests take them too.
  float repetitionPenalty = 1;
  float presencePenalty = 0, frequencyPenalty = 0;
  // OpenAI's logit_bias: added to those tokens' logits before the penalties (vLLM's order),
  // each in [-100, 100]; -100 bans a token, 100 all but forces it.
  std::vector<std::pair<int64_t, float>> logitBias;
  // vLLM's min_tokens: until this many tokens are generated, the EOS and stop tokens cannot
  // be drawn (their logits are -infinity for the draw; the log-probabilities stay the
  // model's). At most maxNewTokens.
  int64_t minTokens = 0;
  // The request's own random stream: its tokens do not depend on what else runs.
  uint64_t seed = 0;
  std::vector<int64_t> stopTokens;  // besides the plan's EOS tokens
  bool ignoreEos = false;
  // -1: no log-probabilities; 0: each token's own; k (at most kMaxTopLogprobs): and the k
  // likeliest tokens', as OpenAI's logprobs/top_logprobs report them.
  int64_t logprobs = -1;
  // The same for each prompt token after the first (vLLM's prompt_logprobs, OpenAI's echo
  // with logprobs): its log-probability given the tokens before it, and the k likeliest, as
  // RequestFinish::Prompt events before the first generated token. Such a request computes
  // its whole prompt: it takes no prefix-cache hits (its blocks are still shared after).
  int64_t promptLogprobs = -1;
  // Scheduling priority (vLLM's): lower values are admitted first and preempted last;
  // equal priorities are first come, first served (Scheduler.h).
  int64_t priority = 0;
  // Structured output (dsrt_token_mask_fn): before each draw, the tokens the request may
  // draw, bit t % 32 of word t / 32 of `allowed` (all set on entry), given the tokens it
  // has generated. Called on the stepping thread outside the engine's lock; an error ends
  // the request as cancelled. Such a request takes no drafts.
  std::function<Status(int64_t request, const std::vector<int64_t> &generated,
                       std::vector<uint32_t> &allowed)>
      tokenMask;
};

inline constexpr int64_t kMaxTopLogprobs = 20;

// A generated token's log-probability under the model (log-softmax of its raw logits,
// before temperature and truncation, as vLLM and OpenAI report them), and the likeliest.
struct TokenLogprobs {
  float logprob = 0;
  // The likeliest tokens and theirs, likeliest first: two arrays, as the C API hands them out.
  std::vector<int64_t> topTokens;
  std::vector<float> topLogprobs;
};

// Prompt: the event is a prompt token's log-probability (RequestOptions::promptLogprobs), not
// a generated token.
enum class RequestFinish { Prompt = -2, Running = -1, Length = 0, Stop = 1, Cancelled = 3 };

// Called for each new token of a request, then once more with token -1 when it finishes
// (its reason is `finish`). `logprobs` is null unless the request asked for them.
using TokenCallback = std::function<void(int64_t request, int64_t token, RequestFinish finish,
                                         const TokenLogprobs *logprobs)>;

struct EngineStats {
  int64_t running = 0, waiting = 0, peakRunning = 0;
  int64_t usedBlocks = 0, totalBlocks = 0, peakUsedBlocks = 0;
  uint64_t prefixHits = 0, prefixMisses = 0, preemptions = 0;
  uint64_t steps = 0, promptTokens = 0, generatedTokens = 0;
  int64_t blockSize = 0, maxTokensPerStep = 0;
  uint64_t bytesPerBlock = 0;
  uint64_t draftTokens = 0, acceptedDraftTokens = 0;  // speculative decoding's
};

class Engine {
public:
  // Every rank of the plan in this process (an in-process group for a TP plan).
  static Status create(std::shared_ptr<PlanFile> plan, const EngineOptions &options,
                       std::unique_ptr<Engine> &out);
  // One rank per process (MPI): every rank of `group` (kept, not owned; its size the plan's
  // rank count) calls it. Rank 0 leads: it takes the requests, schedules and samples, and
  // sends each step's rows to the others (one broadcast per step); the others call
  // follow(). The followers take rank 0's block size and KV budget.
  static Status createRank(std::shared_ptr<PlanFile> plan, const EngineOptions &options,
                           ops::Collectives &group, std::unique_ptr<Engine> &out);
  // A follower's loop: runs every step rank 0 sends until rank 0's engine is destroyed.
  Status follow();
  bool leads() const { return !group_ || group_->rank() == 0; }
  ~Engine();

  // Queues a request; its id comes back in `id`. Bad options, an empty prompt, ids outside
  // the vocabulary, or a prompt + max_new_tokens over the plan's positions are errors, and
  // the engine goes on serving the others.
  Status add(const std::vector<int64_t> &prompt, const RequestOptions &options, int64_t &id);
  // Stops a request wherever it is (waiting, mid-prompt, mid-decode) and frees its blocks.
  Status cancel(int64_t id);
  // Scheduler::resetPrefixCache: between runs, when no request is live (else an error).
  Status resetPrefixCache();
  // Up to `maxTokens` of the tokens `id` generated since the last poll, and whether it has
  // finished (once its last tokens are read; it is then forgotten). An unknown or already
  // collected id is an error.
  Status poll(int64_t id, size_t maxTokens, std::vector<int64_t> &tokens,
              RequestFinish &finish);
  void setCallback(TokenCallback callback);
  // The prompt tokens `id` found in the prefix cache when it was first scheduled
  // (Scheduler::cachedPromptTokens), -1 before that. Known while the engine keeps the
  // request: until the poll that collects its finish, or, with a callback, until its last
  // callback has returned (a callback may ask). An unknown id is an error.
  Status cachedPromptTokens(int64_t id, int64_t &cached) const;

  // One iteration: schedule, run the rows on every rank, sample, commit. Does nothing when
  // no request is live. A failure of the model run fails the requests of that step (they
  // finish as Cancelled with the error in lastError()) and the engine keeps serving.
  Status step();
  bool idle() const;
  // Steps on a thread of the engine's own while there is work, until stop() (or the
  // destructor).
  void start();
  void stop();

  EngineStats stats() const;
  std::string lastError() const;
  const EngineOptions &options() const { return options_; }

private:
  struct Binding {
    size_t index = 0;
    DType dtype = DType::Undefined;
    enum class Role { Ids, Mask, Positions, LogitsRows } role = Role::Ids;
    std::string name;
  };
  struct Live {
    RequestOptions options;
    uint64_t rng = 0;
    std::vector<int64_t> unread;  // generated tokens not polled yet
    // For the penalties only (empty without them): how often each token was generated, and
    // the prompt's distinct tokens (the repetition penalty's).
    std::unordered_map<int64_t, int64_t> generatedCounts;
    std::vector<int64_t> promptTokens;
    // With promptLogprobs: the prompt's length, and the next position whose log-probability
    // is due (a preempted request computes its prompt again; nothing is reported twice).
    int64_t promptLength = 0, nextPromptLogprob = 1;
    int64_t generated = 0;  // tokens sampled so far (min_tokens)
    int64_t cachedPromptTokens = -1;  // Scheduler::cachedPromptTokens, once scheduled
    RequestFinish finish = RequestFinish::Running;
  };

  Engine() = default;
  Status configure(std::shared_ptr<PlanFile> plan, const EngineOptions &options,
                   ops::Collectives *group, std::unique_ptr<Engine> &out,
                   std::unique_ptr<Engine> self);
  Status createSessions(std::shared_ptr<PlanFile> plan, int64_t blocks, double memoryFraction,
                        int64_t gpuMostBlocks);
  Status agreeOnBlocks(const Status &created, uint64_t &blocks);
  Status bindDecode();
  // Rank 0 of an MPI group: the step's rows to every follower (the destructor sends an
  // empty record: stop).
  Status sendStep(const std::vector<int64_t> &ids, const std::vector<int64_t> &positions,
                  const std::vector<ops::KvPagedRow> &rows,
                  const std::vector<int64_t> &logitsRows);
  Status runRows(const std::vector<int64_t> &ids, const std::vector<int64_t> &positions,
                 const std::vector<ops::KvPagedRow> &rows, const std::vector<int64_t> &logitsRows);
  void finishLocked(int64_t id, RequestFinish finish);
  // Whether `token` ends a request of `options` (its stop tokens, or EOS unless ignored).
  bool stopsAt(const RequestOptions &options, int64_t token) const;

  // One request's rows of a step's logits to read (EngineSampling.cpp).
  struct RowWork {
    int64_t request;
    Live *live;
    int64_t logitsRow;
    int64_t promptToken;  // the prompt token whose log-probability is due; -1: sample
    int64_t token = -1;
    std::optional<TokenLogprobs> logprobs;
    // A chunk's drafts: the rows after logitsRow give the tokens after each confirmed one.
    const std::vector<int64_t> *drafts = nullptr;
    std::vector<int64_t> more;
    std::vector<std::optional<TokenLogprobs>> moreLogprobs;
    // The request's token mask for this draw (RequestOptions::tokenMask), or null. A draw
    // it leaves no token for sets `token` to -1.
    const std::vector<uint32_t> *allowed = nullptr;
  };
  // Row `at` of the step's logits, as f32.
  using LogitsReader = std::function<void(int64_t at, std::vector<float> &values)>;
  // A prompt token's log-probability, or the request's next token (its penalties,
  // min_tokens, sampling and log-probabilities) and the drafts' tokens the model confirms.
  // Only the request's own state changes: items run on the pool's threads.
  void sampleRow(RowWork &item, const LogitsReader &readRow) const;
  // A sampling request's token mask to ask this step: what it has generated, taken under
  // mutex_ when the step is laid out.
  struct MaskJob {
    int64_t request;
    std::vector<int64_t> generated;
    decltype(RequestOptions::tokenMask) mask;
  };
  // The jobs' masks (EngineSampling.cpp), by request, asked outside mutex_; a request whose
  // mask failed is cancelled here and listed in `failed`.
  using TokenMasks = std::unordered_map<int64_t, std::vector<uint32_t>>;
  void computeTokenMasks(std::vector<MaskJob> &jobs, TokenMasks &masks,
                         std::vector<int64_t> &failed);
  // Under mutex_: ends a request whose draw cannot go on (its token mask) as cancelled, with
  // the reason as the engine's last error.
  void failRequestLocked(int64_t id, const std::string &why);

  std::shared_ptr<PlanFile> plan_;
  EngineOptions options_;
  std::unique_ptr<InProcessGroup> inProcess_;
  ops::Collectives *group_ = nullptr;  // MPI: this process's rank among the plan's
  std::vector<std::unique_ptr<Session>> sessions_;  // one per rank
  std::vector<Binding> bindings_;
  // "step" (dsc --serving: the LM head on the sampled rows) or "decode" (on every row).
  std::string program_ = "decode";
  size_t logitsOutput_ = 0;
  bool hasLogitsRows_ = false;
  bool maskSpansPositions_ = false;
  int64_t vocab_ = 0;
  std::vector<int64_t> eosTokens_;

  mutable std::mutex mutex_;
  // Held while token masks are computed (outside mutex_; taken before it): cancel() waits for
  // it, so that no mask is asked for a request after its cancel has returned.
  std::mutex maskMutex_;
  std::condition_variable work_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<int64_t, Live> live_;
  TokenCallback callback_;
  EngineStats counters_;
  std::string lastError_;
  std::thread thread_;
  bool stopping_ = false;
};

} // namespace dsrt::engine

#endif
