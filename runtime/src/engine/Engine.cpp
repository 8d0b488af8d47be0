#include "engine/Engine.h"

#include "comm/InProcessGroup.h"
#include "engine/Scheduler.h"
#include "generate/Generator.h"
#include "session/PlanChecks.h"
#include "session/RankAgreement.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace dsrt::engine {
namespace {

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

// Bytes of KV one position takes over every layer (keys and values).
Status bytesPerPosition(const PlanFile &plan, uint64_t &bytes) {
  std::vector<KvLayerShape> layers;
  DSRT_RETURN_IF_ERROR(kvCacheLayout(plan, 0, layers));
  bytes = 0;
  for (const KvLayerShape &layer : layers)
    bytes += 2 * static_cast<uint64_t>(layer.kvHeads * layer.headDim) * dtypeSize(layer.dtype);
  if (bytes == 0)
    return Status::error(plan.path() + ": the plan keeps no KV cache in the session (it has "
                                       "no prefill and decode programs), which the engine "
                                       "pages");
  return Status::ok();
}

uint64_t physicalMemory() {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size)
                               : uint64_t(1) << 32;
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
                         (model ? str(model->kind()) : std::string()) + "'");
  engine->vocab_ = model->vocab_size();
  if (model->eos_token_ids())
    engine->eosTokens_.assign(model->eos_token_ids()->begin(), model->eos_token_ids()->end());
  uint64_t perPosition = 0;
  DSRT_RETURN_IF_ERROR(bytesPerPosition(*plan, perPosition));
  const int64_t maxBatch = header.limits() ? header.limits()->max_batch() : 0;
  const int64_t maxSeq = header.limits() ? header.limits()->max_seq_len() : 0;
  EngineOptions &o = engine->options_;
  uint64_t blocks = 0;
  // The options are rank 0's (the only rank a user configures under MPI).
  auto validate = [&]() -> Status {
    if (o.blockSize < 1 || o.blockSize > maxSeq)
      return Status::error("the KV block size must be between 1 and the plan's max_seq_len "
                           "of " + std::to_string(maxSeq) + ", not " +
                           std::to_string(o.blockSize));
    if (o.maxTokensPerStep == 0)
      o.maxTokensPerStep = maxBatch;
    if (o.maxTokensPerStep < 1 || o.maxTokensPerStep > maxBatch)
      return Status::error("the tokens per step must be between 1 and the plan's max_batch "
                           "of " + std::to_string(maxBatch) + " (the rows of its decode "
                           "program; compile with a larger --max-batch to run more), not " +
                           std::to_string(o.maxTokensPerStep));
    if (o.maxRunningSequences == 0)
      o.maxRunningSequences = o.maxTokensPerStep;
    if (o.maxRunningSequences < 1)
      return Status::error("the running sequences must be at least 1, not " +
                           std::to_string(o.maxRunningSequences));
    const uint64_t perBlock = perPosition * static_cast<uint64_t>(o.blockSize);
    if (o.kvCacheBytes == 0)
      o.kvCacheBytes = std::min(perPosition * static_cast<uint64_t>(maxBatch) *
                                    static_cast<uint64_t>(maxSeq),
                                physicalMemory() / 4);
    blocks = o.kvCacheBytes / perBlock;
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
  // The followers take rank 0's layout, so that one block table means the same everywhere;
  // rank 0's refusal (0 blocks) stops them too.
  if (group && group->size() > 1) {
    int64_t layout[3] = {o.blockSize, valid.isOk() ? static_cast<int64_t>(blocks) : 0,
                         o.maxTokensPerStep};
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
    }
  }
  DSRT_RETURN_IF_ERROR(valid);
  const uint64_t perBlock = perPosition * static_cast<uint64_t>(o.blockSize);

  DSRT_RETURN_IF_ERROR(engine->createSessions(plan, static_cast<int64_t>(blocks)));
  DSRT_RETURN_IF_ERROR(engine->bindDecode());

  SchedulerOptions scheduling;
  scheduling.maxTokensPerStep = o.maxTokensPerStep;
  scheduling.maxRunningSequences = o.maxRunningSequences;
  scheduling.maxSequenceLength = maxSeq;
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
Status Engine::createSessions(std::shared_ptr<PlanFile> plan, int64_t blocks) {
  // Only the program the engine runs: its rows are tokens, bounded by max_batch, where the
  // plan's prefill needs max_batch x max_seq_len of arena.
  const dsp::Program *step = nullptr;
  if (const auto *programs = plan->plan().programs())
    for (const dsp::Program *program : *programs)
      if (program->name() && program->name()->string_view() == "step")
        step = program;
  PagedKvOptions paged{options_.blockSize, blocks, {step ? "step" : "decode"}};
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

// A step as rank 0 sends it: [T, R, ids, positions, logits rows, then per row its position
// and its block count and blocks]. Empty: the leader is gone.
Status Engine::sendStep(const std::vector<int64_t> &ids, const std::vector<int64_t> &positions,
                        const std::vector<ops::KvPagedRow> &rows,
                        const std::vector<int64_t> &logitsRows) {
  std::vector<int64_t> record = {static_cast<int64_t>(ids.size()),
                                 static_cast<int64_t>(logitsRows.size())};
  record.insert(record.end(), ids.begin(), ids.end());
  record.insert(record.end(), positions.begin(), positions.end());
  record.insert(record.end(), logitsRows.begin(), logitsRows.end());
  for (const ops::KvPagedRow &row : rows) {
    record.push_back(row.blockCount);
    record.insert(record.end(), row.blocks, row.blocks + row.blockCount);
  }
  std::vector<uint8_t> bytes(record.size() * sizeof(int64_t));
  std::memcpy(bytes.data(), record.data(), bytes.size());
  return group_->broadcastFromRank0(bytes);
}

Status Engine::follow() {
  if (leads())
    return Status::error("rank 0 leads the engine: it steps, the other ranks follow");
  for (;;) {
    std::vector<uint8_t> bytes;
    DSRT_RETURN_IF_ERROR(group_->broadcastFromRank0(bytes));
    if (bytes.empty())
      return Status::ok();
    std::vector<int64_t> record(bytes.size() / sizeof(int64_t));
    std::memcpy(record.data(), bytes.data(), record.size() * sizeof(int64_t));
    // Checked as it is read: a record that does not add up is rank 0's bug, not a crash.
    size_t at = 0;
    auto take = [&](int64_t count, std::vector<int64_t> &into) {
      if (count < 0 || at + static_cast<size_t>(count) > record.size())
        return false;
      into.assign(record.begin() + at, record.begin() + at + count);
      at += static_cast<size_t>(count);
      return true;
    };
    std::vector<int64_t> head, ids, positions, logitsRows;
    if (!take(2, head) || head[0] < 1 || !take(head[0], ids) || !take(head[0], positions) ||
        !take(head[1], logitsRows))
      return Status::error("rank 0's step record is malformed");
    std::vector<std::vector<int32_t>> tables(ids.size());
    std::vector<ops::KvPagedRow> rows(ids.size());
    for (size_t r = 0; r < ids.size(); ++r) {
      std::vector<int64_t> count, blocks;
      if (!take(1, count) || !take(count[0], blocks))
        return Status::error("rank 0's step record is malformed");
      tables[r].assign(blocks.begin(), blocks.end());
      rows[r] = {tables[r].data(), count[0], positions[r]};
    }
    // A failed step fails on rank 0 too, which ends the requests it ran.
    Status ran = runRows(ids, positions, rows, logitsRows);
    if (!ran.isOk())
      std::fprintf(stderr, "dsrt: engine rank %d: %s\n", group_->rank(), ran.message().c_str());
  }
}

Engine::~Engine() {
  stop();
  // The followers stop with the leader: an empty record.
  if (group_ && group_->size() > 1 && leads()) {
    std::vector<uint8_t> stop;
    (void)group_->broadcastFromRank0(stop);
  }
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

Status Engine::add(const std::vector<int64_t> &prompt, const RequestOptions &options,
                   int64_t &id) {
  if (!leads())
    return Status::error("rank " + std::to_string(group_->rank()) +
                         " follows rank 0, which takes the requests");
  if (options.maxNewTokens < 1)
    return Status::error("max_new_tokens must be at least 1, not " +
                         std::to_string(options.maxNewTokens));
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature) ||
      !(options.topP > 0 && options.topP <= 1) || options.topK < 0)
    return Status::error("sampling needs a finite temperature >= 0, 0 < top_p <= 1 and "
                         "top_k >= 0");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab_)
      return Status::error("prompt token " + std::to_string(i) + " is " +
                           std::to_string(prompt[i]) + ", outside the vocabulary [0, " +
                           std::to_string(vocab_) + ")");
  std::lock_guard<std::mutex> lock(mutex_);
  DSRT_RETURN_IF_ERROR(scheduler_->add(prompt, options.maxNewTokens, id));
  counters_.promptTokens += prompt.size();
  Live &live = live_[id];
  live.options = options;
  live.rng = options.seed;
  work_.notify_all();
  return Status::ok();
}

Status Engine::cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(id);
  if (it == live_.end() || it->second.finish != RequestFinish::Running)
    return Status::error("request " + std::to_string(id) + " is unknown or finished");
  DSRT_RETURN_IF_ERROR(scheduler_->cancel(id));
  finishLocked(id, RequestFinish::Cancelled);
  return Status::ok();
}

void Engine::finishLocked(int64_t id, RequestFinish finish) {
  auto it = live_.find(id);
  if (it == live_.end())
    return;
  it->second.finish = finish;
  // With a callback, nobody polls: the callback hears of the finish and the record goes.
  if (callback_)
    live_.erase(it);
}

Status Engine::poll(int64_t id, size_t maxTokens, std::vector<int64_t> &tokens,
                    RequestFinish &finish) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(id);
  if (it == live_.end())
    return Status::error("request " + std::to_string(id) + " is unknown or already collected");
  std::vector<int64_t> &unread = it->second.unread;
  const size_t taken = std::min(maxTokens, unread.size());
  tokens.assign(unread.begin(), unread.begin() + taken);
  unread.erase(unread.begin(), unread.begin() + taken);
  // Finished once the last tokens are read, and then forgotten.
  finish = unread.empty() ? it->second.finish : RequestFinish::Running;
  if (finish != RequestFinish::Running)
    live_.erase(it);
  return Status::ok();
}

void Engine::setCallback(TokenCallback callback) {
  std::lock_guard<std::mutex> lock(mutex_);
  callback_ = std::move(callback);
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return scheduler_->runningCount() == 0 && scheduler_->waitingCount() == 0;
}

Status Engine::runRows(const std::vector<int64_t> &ids, const std::vector<int64_t> &positions,
                       const std::vector<ops::KvPagedRow> &rows,
                       const std::vector<int64_t> &logitsRows) {
  const int64_t T = static_cast<int64_t>(ids.size());
  // One column of ones, or, where the program reads positions off the mask, each row as
  // generate's left-padded batch has it: padding, then a one for every token up to the
  // row's (OPT counts its positions from the mask's last column).
  int64_t maskWidth = 1;
  if (maskSpansPositions_)
    maskWidth = 1 + *std::max_element(positions.begin(), positions.end());
  std::vector<int64_t> mask(static_cast<size_t>(T * maskWidth), 1);
  if (maskSpansPositions_)
    for (int64_t r = 0; r < T; ++r)
      std::fill(mask.begin() + r * maskWidth,
                mask.begin() + (r + 1) * maskWidth - (positions[r] + 1), 0);
  auto runRank = [&](int rank) -> Status {
    Session &session = *sessions_[rank];
    DSRT_RETURN_IF_ERROR(session.setPagedRows(rows));
    for (const Binding &binding : bindings_) {
      const std::vector<int64_t> &values =
          binding.role == Binding::Role::Ids          ? ids
          : binding.role == Binding::Role::Mask       ? mask
          : binding.role == Binding::Role::LogitsRows ? logitsRows
                                                      : positions;
      std::vector<uint8_t> bytes(values.size() * dtypeSize(binding.dtype));
      if (encodeExactIntegers(values.data(), values.size(), binding.dtype, bytes.data()) !=
          values.size())
        return Status::error("input '" + binding.name + "' (" + dtypeName(binding.dtype) +
                             ") cannot hold the engine's values exactly");
      Shape shape = binding.role == Binding::Role::LogitsRows
                        ? Shape{static_cast<int64_t>(logitsRows.size())}
                        : Shape{T, binding.role == Binding::Role::Mask ? maskWidth : 1};
      DSRT_RETURN_IF_ERROR(session.setInput(program_, binding.index,
                                            TensorRef{binding.dtype, shape, bytes.data()}));
    }
    return session.run(program_);
  };
  if (sessions_.size() == 1)
    return runRank(0);
  // Every rank on a thread of its own (rank 0 on this one); a failing rank wakes the others
  // out of their collectives.
  std::vector<Status> results(sessions_.size(), Status::ok());
  std::vector<std::thread> threads;
  auto runOne = [&](int rank) {
    results[rank] = runRank(rank);
    if (!results[rank].isOk())
      inProcess_->abort();
  };
  for (int rank = 1; rank < static_cast<int>(sessions_.size()); ++rank)
    threads.emplace_back(runOne, rank);
  runOne(0);
  for (std::thread &thread : threads)
    thread.join();
  inProcess_->reset();
  for (size_t rank = 0; rank < results.size(); ++rank)
    if (!results[rank].isOk())
      return Status::error("rank " + std::to_string(rank) + ": " + results[rank].message());
  return Status::ok();
}

Status Engine::step() {
  if (!leads())
    return Status::error("rank " + std::to_string(group_->rank()) +
                         " follows rank 0's steps (follow), it does not step");
  StepPlan plan;
  std::vector<int64_t> ids, positions;
  std::vector<ops::KvPagedRow> rows;
  // The rows whose logits are sampled: each sampling chunk's last.
  std::vector<int64_t> logitsRows;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (scheduler_->runningCount() == 0 && scheduler_->waitingCount() == 0)
      return Status::ok();
    DSRT_RETURN_IF_ERROR(scheduler_->schedule(plan));
    counters_.peakRunning = std::max(counters_.peakRunning, scheduler_->runningCount());
    // What each step runs, for tuning the scheduler (DSRT_TRACE_ENGINE=1).
    static const bool trace = [] {
      const char *value = std::getenv("DSRT_TRACE_ENGINE");
      return value && *value && *value != '0';
    }();
    if (trace)
      std::fprintf(stderr, "dsrt: engine step %llu: %zu chunks, %lld tokens, %lld running, "
                           "%lld waiting, %lld blocks used\n",
                   static_cast<unsigned long long>(counters_.steps), plan.chunks.size(),
                   static_cast<long long>(plan.scheduledTokens()),
                   static_cast<long long>(scheduler_->runningCount()),
                   static_cast<long long>(scheduler_->waitingCount()),
                   static_cast<long long>(scheduler_->usedBlocks()));
    for (const ScheduledChunk &chunk : plan.chunks) {
      const std::vector<int64_t> &tokens = scheduler_->tokens(chunk.requestId);
      for (int64_t i = 0; i < chunk.count; ++i) {
        ids.push_back(tokens[chunk.start + i]);
        positions.push_back(chunk.start + i);
        rows.push_back({chunk.blockTable.data(), static_cast<int64_t>(chunk.blockTable.size()),
                        chunk.start + i});
      }
      if (chunk.samples)
        logitsRows.push_back(static_cast<int64_t>(ids.size()) - 1);
    }
  }
  std::vector<std::pair<int64_t, int64_t>> sampled;
  // Nothing to sample (every chunk a prompt's middle): @step still needs one row to gather.
  const bool selectRows = hasLogitsRows_;
  if (selectRows && logitsRows.empty() && !ids.empty())
    logitsRows.push_back(0);
  Status ran = Status::ok();
  if (!ids.empty() && group_ && group_->size() > 1)
    ran = sendStep(ids, positions, rows, logitsRows);
  if (ran.isOk() && !ids.empty())
    ran = runRows(ids, positions, rows, logitsRows);
  if (ran.isOk() && !ids.empty()) {
    TensorRef logits;
    ran = sessions_[0]->output(program_, logitsOutput_, logits);
    const int64_t width = logits.shape.empty() ? 0 : logits.shape.back();
    const int64_t expected = selectRows ? static_cast<int64_t>(logitsRows.size())
                                        : static_cast<int64_t>(ids.size());
    if (ran.isOk() &&
        (width != vocab_ || logits.elements() != width * expected || !isFloat(logits.dtype)))
      ran = Status::error("the " + program_ + " program's logits are " +
                          shapeString(logits.shape) + ", not " + std::to_string(expected) +
                          " rows of " + std::to_string(vocab_));
    int64_t row = 0, sampledRow = 0;
    std::vector<float> values(static_cast<size_t>(vocab_));
    std::lock_guard<std::mutex> lock(mutex_);
    for (const ScheduledChunk &chunk : plan.chunks) {
      row += chunk.count;
      // Where this chunk's last row's logits are: its row of every row's, or its place
      // among the gathered ones.
      const int64_t at = selectRows ? sampledRow : row - 1;
      sampledRow += chunk.samples ? 1 : 0;
      auto live = live_.find(chunk.requestId);
      if (!ran.isOk() || !chunk.samples || live == live_.end() ||
          live->second.finish != RequestFinish::Running)
        continue;
      const auto *bytes = static_cast<const uint8_t *>(logits.data) +
                          static_cast<size_t>(at * width) * dtypeSize(logits.dtype);
      convertFloats(logits.dtype, bytes, DType::F32, values.data(), width);
      GenerateOptions sampling;
      sampling.temperature = live->second.options.temperature;
      sampling.topK = live->second.options.topK;
      sampling.topP = live->second.options.topP;
      sampled.push_back({chunk.requestId, sampleToken(values, sampling, live->second.rng)});
    }
  }
  struct Event {
    int64_t request, token;
    RequestFinish finish;
  };
  std::vector<Event> events;
  TokenCallback callback;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!ran.isOk()) {
      // The step's requests cannot go on with KV that was never written: they fail, the
      // others do not.
      lastError_ = ran.message();
      for (const ScheduledChunk &chunk : plan.chunks)
        if (scheduler_->contains(chunk.requestId)) {
          (void)scheduler_->cancel(chunk.requestId);
          events.push_back({chunk.requestId, -1, RequestFinish::Cancelled});
        }
      DSRT_RETURN_IF_ERROR(scheduler_->commit({}));
    } else {
      DSRT_RETURN_IF_ERROR(scheduler_->commit(sampled));
      ++counters_.steps;
      std::vector<int64_t> stopped;
      for (const auto &[request, token] : sampled) {
        auto live = live_.find(request);
        if (live == live_.end())
          continue;
        ++counters_.generatedTokens;
        live->second.unread.push_back(token);
        events.push_back({request, token, RequestFinish::Running});
        const RequestOptions &options = live->second.options;
        bool stop = std::find(options.stopTokens.begin(), options.stopTokens.end(), token) !=
                        options.stopTokens.end() ||
                    (!options.ignoreEos &&
                     std::find(eosTokens_.begin(), eosTokens_.end(), token) != eosTokens_.end());
        if (stop) {
          // A stop token as the last allowed one still finishes by Stop, as generate says.
          stopped.push_back(request);
          if (scheduler_->contains(request))
            (void)scheduler_->finish(request);
          events.push_back({request, -1, RequestFinish::Stop});
        }
      }
      for (const FinishedRequest &finished : scheduler_->lastFinished())
        if (std::find(stopped.begin(), stopped.end(), finished.id) == stopped.end())
          events.push_back({finished.id, -1, RequestFinish::Length});
    }
    for (const Event &event : events)
      if (event.token < 0) {
        auto live = live_.find(event.request);
        if (live != live_.end() && live->second.finish == RequestFinish::Running)
          live->second.finish = event.finish;
      }
    callback = callback_;
    if (callback)
      for (const Event &event : events)
        if (event.token < 0)
          live_.erase(event.request);
  }
  if (callback)
    for (const Event &event : events)
      callback(event.request, event.token, event.finish);
  return ran.isOk() ? Status::ok() : Status::error("engine step: " + ran.message());
}

void Engine::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (thread_.joinable())
    return;
  stopping_ = false;
  thread_ = std::thread([this] {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [&] {
          return stopping_ || scheduler_->runningCount() > 0 || scheduler_->waitingCount() > 0;
        });
        if (stopping_)
          return;
      }
      (void)step();  // a failed step has failed its own requests and said why
    }
  });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    work_.notify_all();
  }
  if (thread_.joinable())
    thread_.join();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineStats stats = counters_;
  stats.running = scheduler_->runningCount();
  stats.waiting = scheduler_->waitingCount();
  stats.usedBlocks = scheduler_->usedBlocks();
  stats.totalBlocks = scheduler_->pool().totalBlocks();
  stats.peakUsedBlocks = scheduler_->peakUsedBlocks();
  stats.prefixHits = scheduler_->prefixHits();
  stats.prefixMisses = scheduler_->prefixMisses();
  stats.preemptions = scheduler_->preemptions();
  return stats;
}

std::string Engine::lastError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lastError_;
}

} // namespace dsrt::engine
