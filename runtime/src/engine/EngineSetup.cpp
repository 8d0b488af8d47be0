// The serving engine's construction (Engine.h): the options checked against the plan, the
// KV budget in blocks, the sessions of every rank (or of this MPI rank), and the program's
// inputs the engine writes. Stepping is Engine.cpp's; the MPI followers', EngineRanks.cpp's.
#include "engine/Engine.h"

#include "comm/InProcessGroup.h"
#include "cpu/SessionArena.h"
#include "engine/Scheduler.h"
#include "ops/Ops.h"
#include "session/PlanChecks.h"
#include "session/RankAgreement.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace dsrt::engine {
namespace {

// The default KV budget's share of a GPU's memory left free by the weights: what is left
// over is for the scratch, the graphs and cuBLASLt.
constexpr double kDefaultGpuFraction = 0.9;
// Drafts per decode token at most (vLLM's num_speculative_tokens is of this order; more rows
// of guesses cost more than they save), and the longest n-gram looked up.
constexpr int64_t kMaxSpeculativeTokens = 16;

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

const dsp::Program *findProgram(const dsp::Plan &plan, std::string_view name) {
  if (const auto *programs = plan.programs())
    for (const dsp::Program *program : *programs)
      if (program->name() && program->name()->string_view() == name)
        return program;
  return nullptr;
}

// Bytes of KV one position takes over every layer (keys and values; an int8 cache's rows
// with their scales).
Status bytesPerPosition(const PlanFile &plan, bool int8, uint64_t &bytes) {
  std::vector<KvLayerShape> layers;
  DSRT_RETURN_IF_ERROR(kvCacheLayout(plan, 0, layers));
  bytes = 0;
  for (const KvLayerShape &layer : layers) {
    const uint64_t row = int8 ? static_cast<uint64_t>(layer.headDim) +
                                    sizeof(float) * ops::kvInt8Groups(layer.headDim)
                              : static_cast<uint64_t>(layer.headDim) * dtypeSize(layer.dtype);
    bytes += 2 * static_cast<uint64_t>(layer.kvHeads) * row;
  }
  if (bytes == 0)
    return Status::error(plan.path() + ": the plan keeps no KV cache in the session (it has "
                                       "no prefill and decode programs), which the engine "
                                       "pages");
  return Status::ok();
}

} // namespace

Status Engine::create(std::shared_ptr<PlanFile> plan, const EngineOptions &options,
                      std::unique_ptr<Engine> &out) {
  std::unique_ptr<Engine> engine(new Engine());
  Engine &configured = *engine;
  return configured.configure(std::move(plan), options, nullptr, out, std::move(engine));
}

Status Engine::createRank(std::shared_ptr<PlanFile> plan, const EngineOptions &options,
                          ops::Collectives &group, std::unique_ptr<Engine> &out) {
  if (group.size() != plan->rankCount())
    return Status::error(plan->path() + ": the plan has " + std::to_string(plan->rankCount()) +
                         " ranks, the MPI group " + std::to_string(group.size()));
  // Before anything else: every rank must run this plan.
  DSRT_RETURN_IF_ERROR(checkRanksRunOnePlan(group, *plan));
  std::unique_ptr<Engine> engine(new Engine());
  Engine &configured = *engine;
  return configured.configure(std::move(plan), options, &group, out, std::move(engine));
}

Status Engine::configure(std::shared_ptr<PlanFile> plan, const EngineOptions &options,
                         ops::Collectives *group, std::unique_ptr<Engine> &out,
                         std::unique_ptr<Engine> self) {
  Engine *engine = this;
  engine->plan_ = plan;
  engine->options_ = options;
  engine->group_ = group;
  const dsp::Plan &header = plan->plan();
  const dsp::ModelInfo *model = header.model();
  // What the plan says is the same on every rank (checkRanksRunOnePlan): every rank reaches
  // these verdicts alike.
  if (!model || str(model->kind()) != "decoder")
    return Status::error(plan->path() + ": the engine serves decoders; this plan's model is '" +
                         (model ? str(model->kind()) : std::string()) + "'" +
                         (model && str(model->kind()) == "encoder-decoder"
                              ? ": generate with it in static batches (dsrt_generate, dsrun "
                                "--prompt, Python's dsrt.Session(plan).generate)"
                              : ""));
  engine->vocab_ = model->vocab_size();
  if (model->eos_token_ids())
    engine->eosTokens_.assign(model->eos_token_ids()->begin(), model->eos_token_ids()->end());
  uint64_t perPosition = 0;
  DSRT_RETURN_IF_ERROR(bytesPerPosition(*plan, options.int8KvCache, perPosition));
  const int64_t maxBatch = header.limits() ? header.limits()->max_batch() : 0;
  const int64_t maxSeq = header.limits() ? header.limits()->max_seq_len() : 0;
  // A plan compiled with --max-tokens-per-step bounds its step program's rows apart from the
  // static programs' batch.
  const int64_t ownStepRows = header.limits() ? header.limits()->max_tokens_per_step() : 0;
  const bool ownStepBound = ownStepRows > 0 && findProgram(header, "step");
  const int64_t stepRows = ownStepBound ? ownStepRows : maxBatch;
  EngineOptions &o = engine->options_;
  uint64_t blocks = 0;
  // On a GPU the sessions size their pools (PagedKvOptions::memoryFraction): its free memory
  // is known only once the weights are on it; gpuMostBlocks is the most they may hold, and
  // `blocks` what a session that fell back to the CPU takes.
  double sessionFraction = 0;
  uint64_t gpuMostBlocks = 0;
  // A fraction of the host's memory below one block, which refuses the engine only where
  // its CUDA sessions fell back to the CPU.
  Status hostRefusal = Status::ok();
  // The options are rank 0's (the only rank a user configures under MPI).
  auto validate = [&]() -> Status {
    if (o.blockSize < 1 || o.blockSize > maxSeq)
      return Status::error("the KV block size must be between 1 and the plan's max_seq_len "
                           "of " + std::to_string(maxSeq) + ", not " +
                           std::to_string(o.blockSize));
    if (o.maxTokensPerStep == 0)
      o.maxTokensPerStep = stepRows;
    if (o.maxTokensPerStep < 1 || o.maxTokensPerStep > stepRows)
      return Status::error(
          "the tokens per step must be between 1 and the " + std::to_string(stepRows) +
          " rows of the plan's " + (ownStepBound ? "step program (compile with a larger "
                                                   "--max-tokens-per-step to run more), not "
                                                 : "decode program (its max_batch; compile "
                                                   "with --max-tokens-per-step to run more), "
                                                   "not ") +
          std::to_string(o.maxTokensPerStep));
    if (o.speculativeTokens < 0 || o.speculativeTokens > kMaxSpeculativeTokens)
      return Status::error("speculative_tokens must be between 0 (off) and " +
                           std::to_string(kMaxSpeculativeTokens) + ", not " +
                           std::to_string(o.speculativeTokens));
    if (o.speculativeTokens > 0 &&
        (o.promptLookupMin < 1 || o.promptLookupMax < o.promptLookupMin ||
         o.promptLookupMax > kMaxSpeculativeTokens))
      return Status::error("prompt_lookup_min and prompt_lookup_max must satisfy 1 <= min <= "
                           "max <= " + std::to_string(kMaxSpeculativeTokens) + ", not " +
                           std::to_string(o.promptLookupMin) + " and " +
                           std::to_string(o.promptLookupMax));
    if (o.speculativeTokens > 0 && o.speculativeMaxBatch < 1)
      return Status::error("speculative_max_batch must be at least 1, not " +
                           std::to_string(o.speculativeMaxBatch));
    // The CUDA engine's paged kernels and graphs are checked for a decode row per sequence
    // and for prompt chunks, not for a sequence's drafts in a decode step.
    if (o.speculativeTokens > 0 && o.device == DeviceKind::Cuda)
      return Status::error("speculative decoding (speculative_tokens " +
                           std::to_string(o.speculativeTokens) +
                           ") runs on the CPU devices only, not cuda");
    if (o.maxRunningSequences == 0)
      o.maxRunningSequences = o.maxTokensPerStep;
    if (o.maxRunningSequences < 1)
      return Status::error("the running sequences must be at least 1, not " +
                           std::to_string(o.maxRunningSequences));
    const uint64_t perBlock = perPosition * static_cast<uint64_t>(o.blockSize);
    // By default a full sequence for every row a step may run (as many as may be running by
    // default), and no less than what a static session of the plan reserves, within a
    // quarter of the host's memory; on a GPU within kDefaultGpuFraction of what the weights
    // leave free (vLLM's gpu_memory_utilization is 0.9 of the whole GPU, weights included).
    const uint64_t fullReservation = perPosition *
                                     static_cast<uint64_t>(std::max(maxBatch, stepRows)) *
                                     static_cast<uint64_t>(maxSeq);
    const bool byDefault = o.kvCacheBytes == 0 && o.kvCacheMemoryFraction == 0;
    if (o.kvCacheMemoryFraction != 0) {
      if (!(o.kvCacheMemoryFraction > 0 && o.kvCacheMemoryFraction <= 1))
        return Status::error("kv_cache_memory_fraction must be more than 0 and at most 1, not " +
                             numberText(o.kvCacheMemoryFraction));
      if (o.kvCacheBytes != 0)
        return Status::error("kv_cache_bytes (" + std::to_string(o.kvCacheBytes) +
                             ") and kv_cache_memory_fraction (" +
                             numberText(o.kvCacheMemoryFraction) +
                             ") both set the KV budget: give one");
      if (o.device == DeviceKind::Cuda) {
        sessionFraction = o.kvCacheMemoryFraction;
        gpuMostBlocks = 0x7FFFFFFF;
      }
      // The ranks this process holds (a TP plan's, without MPI) share it: each rank's pool
      // holds its own shard of every block. On CUDA, what a session that fell back to the
      // CPU takes.
      const uint64_t available = availableMemoryBytes();
      const int localRanks = group ? 1 : std::max(1, plan->rankCount());
      o.kvCacheBytes = static_cast<uint64_t>(o.kvCacheMemoryFraction *
                                             static_cast<double>(available)) /
                       static_cast<uint64_t>(localRanks);
      if (o.kvCacheBytes < perBlock) {
        hostRefusal = Status::error(
            "kv_cache_memory_fraction " + numberText(o.kvCacheMemoryFraction) + " of the " +
            std::to_string(available) + " bytes free" +
            (localRanks > 1 ? " over " + std::to_string(localRanks) + " ranks" : std::string()) +
            " is " + std::to_string(o.kvCacheBytes) + " bytes, less than one block of " +
            std::to_string(o.blockSize) + " positions (" + std::to_string(perBlock) +
            " bytes over every layer)");
        if (o.device != DeviceKind::Cuda)
          return hostRefusal;
      }
    }
    if (byDefault && o.device == DeviceKind::Cuda) {
      sessionFraction = kDefaultGpuFraction;
      gpuMostBlocks = std::max<uint64_t>(1, std::min<uint64_t>(fullReservation / perBlock,
                                                                0x7FFFFFFF));
    }
    if (byDefault)
      o.kvCacheBytes = std::min(fullReservation, physicalMemoryBytes() / 4);
    blocks = std::max<uint64_t>(o.kvCacheBytes / perBlock, sessionFraction > 0 ? 1 : 0);
    if (blocks < 1)
      return Status::error("a KV budget of " + std::to_string(o.kvCacheBytes) +
                           " bytes is less than one block of " + std::to_string(o.blockSize) +
                           " positions (" + std::to_string(perBlock) +
                           " bytes over every layer)");
    if (blocks > 0x7FFFFFFF)
      return Status::error("a KV budget of " + std::to_string(o.kvCacheBytes) +
                           " bytes is more blocks than the engine numbers");
    return Status::ok();
  };
  Status valid = !group || group->rank() == 0 ? validate() : Status::ok();
  // The followers take rank 0's layout, so that one block table means the same everywhere,
  // and its arithmetic (batch invariance), so that every rank's shard of a row is computed
  // alike; rank 0's refusal (0 blocks) stops them too.
  if (group && group->size() > 1) {
    int64_t fractionBits = 0;
    std::memcpy(&fractionBits, &sessionFraction, sizeof fractionBits);
    int64_t layout[7] = {o.blockSize, valid.isOk() ? static_cast<int64_t>(blocks) : 0,
                         o.maxTokensPerStep, o.batchInvariant,
                         o.int8KvCache ? 1 : 0, fractionBits,
                         static_cast<int64_t>(gpuMostBlocks)};
    std::vector<uint8_t> bytes(sizeof layout);
    std::memcpy(bytes.data(), layout, sizeof layout);
    DSRT_RETURN_IF_ERROR(group->broadcastFromRank0(bytes));
    if (bytes.size() != sizeof layout)
      return Status::error("rank 0 sent no KV layout");
    std::memcpy(layout, bytes.data(), sizeof layout);
    if (group->rank() != 0) {
      if (layout[1] < 1)
        return Status::error("rank 0 refused its engine options; its error says why");
      o.blockSize = layout[0];
      blocks = static_cast<uint64_t>(layout[1]);
      o.maxTokensPerStep = o.maxRunningSequences = layout[2];
      o.batchInvariant = static_cast<int>(layout[3]);
      o.int8KvCache = layout[4] != 0;
      std::memcpy(&sessionFraction, &layout[5], sizeof sessionFraction);
      gpuMostBlocks = static_cast<uint64_t>(layout[6]);
      DSRT_RETURN_IF_ERROR(bytesPerPosition(*plan, o.int8KvCache, perPosition));
    }
  }
  DSRT_RETURN_IF_ERROR(valid);
  const uint64_t perBlock = perPosition * static_cast<uint64_t>(o.blockSize);

  Status created = engine->createSessions(plan, static_cast<int64_t>(blocks), sessionFraction,
                                          static_cast<int64_t>(gpuMostBlocks));
  if (sessionFraction > 0)
    DSRT_RETURN_IF_ERROR(engine->agreeOnBlocks(created, blocks));
  DSRT_RETURN_IF_ERROR(created);
  if (!hostRefusal.isOk() && engine->sessions_.front()->device() != DeviceKind::Cuda)
    return hostRefusal;
  DSRT_RETURN_IF_ERROR(engine->bindDecode());

  SchedulerOptions scheduling;
  scheduling.maxTokensPerStep = o.maxTokensPerStep;
  scheduling.maxRunningSequences = o.maxRunningSequences;
  scheduling.maxSequenceLength = maxSeq;
  if (o.speculativeTokens > 0) {
    scheduling.draftNgramMax = o.promptLookupMax;
    scheduling.draftNgramMin = o.promptLookupMin;
    scheduling.draftMaxSequences = o.speculativeMaxBatch;
  }
  engine->scheduler_ = std::make_unique<Scheduler>(
      scheduling, BlockPool(o.blockSize, static_cast<int64_t>(blocks), o.prefixCaching));
  DSRT_RETURN_IF_ERROR(engine->scheduler_->validate());
  engine->counters_.blockSize = o.blockSize;
  engine->counters_.maxTokensPerStep = o.maxTokensPerStep;
  engine->counters_.bytesPerBlock = perBlock;
  out = std::move(self);
  return Status::ok();
}

// One session per rank of the plan in this process, or this process's rank alone (MPI).
Status Engine::createSessions(std::shared_ptr<PlanFile> plan, int64_t blocks,
                              double memoryFraction, int64_t gpuMostBlocks) {
  // Only the program the engine runs: its rows are tokens, bounded by max_batch, where the
  // plan's prefill needs max_batch x max_seq_len of arena.
  const dsp::Program *step = findProgram(plan->plan(), "step");
  PagedKvOptions paged;
  paged.blockSize = options_.blockSize;
  paged.blocks = blocks;
  paged.memoryFraction = memoryFraction;
  paged.gpuMostBlocks = gpuMostBlocks;
  paged.programs = {step ? "step" : "decode"};
  paged.rowInvariant = options_.batchInvariant > 0;
  paged.exactFloatRows = options_.batchInvariant > 1;
  paged.int8Cache = options_.int8KvCache;
  if (group_) {
    std::unique_ptr<Session> session;
    DSRT_RETURN_IF_ERROR(
        createPagedSession(plan, group_->rank(), options_.device, group_, paged, session));
    sessions_.push_back(std::move(session));
    return Status::ok();
  }
  const int ranks = plan->rankCount();
  if (ranks > 1)
    inProcess_ = std::make_unique<InProcessGroup>(ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    std::unique_ptr<Session> session;
    DSRT_RETURN_IF_ERROR(createPagedSession(
        plan, rank, options_.device, inProcess_ ? &inProcess_->member(rank) : nullptr, paged,
        session));
    sessions_.push_back(std::move(session));
  }
  return Status::ok();
}


// Where the sessions sized their own pools (a fraction of each GPU's free memory), the
// scheduler numbers the blocks every rank holds: the fewest any rank's pool has. Every rank
// takes part, the one whose session failed too, so that none waits for it.
Status Engine::agreeOnBlocks(const Status &created, uint64_t &blocks) {
  int64_t fewest = 0;
  if (created.isOk()) {
    fewest = sessions_.front()->pagedKvBlocks();
    for (const auto &session : sessions_)
      fewest = std::min(fewest, session->pagedKvBlocks());
  }
  if (group_ && group_->size() > 1) {
    std::vector<int64_t> all;
    DSRT_RETURN_IF_ERROR(group_->allGatherRecords(fewest, all));
    for (size_t rank = 0; rank < all.size(); ++rank) {
      if (all[rank] < 1 && created.isOk())
        return Status::error("rank " + std::to_string(rank) +
                             " could not place its KV cache; its error says why");
      fewest = std::min(fewest, all[rank]);
    }
  }
  if (!created.isOk())
    return created;
  if (fewest < 1)
    return Status::error("the sessions placed no KV cache blocks");
  blocks = static_cast<uint64_t>(fewest);
  return Status::ok();
}

// The decode program's inputs the engine writes: the token ids, the positions, and a
// padding mask of one column (the paged attention reads each row's position instead).
Status Engine::bindDecode() {
  const Session &session = *sessions_[0];
  // @step (dsc --serving) is @decode whose LM head reads the sampled rows alone.
  program_ = session.program("step") ? "step" : "decode";
  const dsp::Program *program = session.program(program_);
  if (!program || !session.hasKvCache())
    return Status::error(plan_->path() + ": the engine needs the plan's decode program with "
                                         "the session's KV cache, which recognition did not "
                                         "derive for this model (see dsc's report)");
  const dsp::ModelInfo &model = *plan_->plan().model();
  const auto &tensors = *plan_->plan().tensors();
  bool positions = false;
  for (size_t i = 0; program->inputs() && i < program->inputs()->size(); ++i) {
    const dsp::Tensor &tensor = *tensors.Get(program->inputs()->Get(i));
    Binding binding;
    binding.index = i;
    binding.name = str(tensor.name());
    binding.dtype = planDType(tensor.dtype());
    if (binding.name == str(model.input_ids()))
      binding.role = Binding::Role::Ids;
    else if (binding.name == str(model.attention_mask()))
      binding.role = Binding::Role::Mask;
    else if (binding.name == str(model.position_ids()))
      binding.role = Binding::Role::Positions, positions = true;
    else if (binding.name == "logits_rows")
      binding.role = Binding::Role::LogitsRows;
    else
      return Status::error("the " + program_ + " program's input '" + binding.name +
                           "' is none the engine writes (ids, mask, positions, logits rows)");
    bindings_.push_back(binding);
  }
  hasLogitsRows_ = std::any_of(bindings_.begin(), bindings_.end(), [](const Binding &b) {
    return b.role == Binding::Role::LogitsRows;
  });
  // Without a positions input (ALiBi models, OPT's positions counted from the mask), the
  // mask must say where each row is: ones up to its position.
  maskSpansPositions_ = !positions;
  const auto *outputs = program->outputs();
  for (size_t o = 0; outputs && o < outputs->size(); ++o)
    if (str(tensors.Get(outputs->Get(o))->name()) == str(model.logits()))
      logitsOutput_ = o;
  return Status::ok();
}


} // namespace dsrt::engine
