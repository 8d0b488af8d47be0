#include "cpu/Session.h"
#include "cpu/SessionArena.h"

#include "session/PlanChecks.h"

#include <algorithm>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dsrt {
namespace {

constexpr size_t kArenaAlignment = 64;

Shape toShape(const flatbuffers::Vector<int64_t> *dims) {
  return dims ? Shape(dims->begin(), dims->end()) : Shape();
}

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }


} // namespace

Status decodeAttr(const dsp::Attr &attr, ops::Attr &out) {
  switch (attr.kind()) {
  case dsp::AttrKind::int_: out = ops::Attr::ofInt(attr.i()); break;
  case dsp::AttrKind::float_: out = ops::Attr::ofFloat(attr.f()); break;
  case dsp::AttrKind::string_: out = ops::Attr::ofString(str(attr.s())); break;
  case dsp::AttrKind::ints:
    out = ops::Attr::ofInts(attr.ints() ? std::vector<int64_t>(attr.ints()->begin(),
                                                               attr.ints()->end())
                                        : std::vector<int64_t>());
    break;
  case dsp::AttrKind::floats:
    out = ops::Attr::ofFloats(attr.floats() ? std::vector<float>(attr.floats()->begin(),
                                                                 attr.floats()->end())
                                            : std::vector<float>());
    break;
  case dsp::AttrKind::tensor: {
    // The plan verifier checked that the bytes match dtype and shape.
    OwnedTensor tensor(planDType(attr.tensor_dtype()), toShape(attr.tensor_shape()));
    if (attr.tensor_data() && attr.tensor_data()->size())
      std::memcpy(tensor.storage.data(), attr.tensor_data()->data(), attr.tensor_data()->size());
    out = ops::Attr::ofTensor(std::move(tensor));
    break;
  }
  case dsp::AttrKind::type: out = ops::Attr::ofType(planDType(attr.type())); break;
  default: return Status::error("attribute '" + str(attr.name()) + "' has an unknown kind");
  }
  return Status::ok();
}

// The inputs of the steps whose fast kernels read a weight in its stored dtype (f16, bf16,
// int8 and int4 with scales): the weight of the linear layers and the LM head and their
// scales (input 3 of both), the embedding table.
bool readsNarrow(std::string_view op, size_t input) {
  const bool linear = op == "tfm.linear" || op == "tfm.lm_head";
  return (input == 1 && (linear || op == "tfm.embedding")) || (input == 3 && linear);
}

std::vector<bool> CpuSession::narrowReaders() const {
  const dsp::Plan &header = plan_->plan();
  std::vector<bool> narrow(header.tensors() ? header.tensors()->size() : 0, true);
  auto notNarrow = [&](const flatbuffers::Vector<int32_t> *indices) {
    if (indices)
      for (int index : *indices)
        if (index >= 0 && static_cast<size_t>(index) < narrow.size())
          narrow[index] = false;
  };
  if (!header.programs())
    return narrow;
  for (const dsp::Program *program : *header.programs()) {
    notNarrow(program->outputs());
    notNarrow(program->branch_outputs());
    if (!program->steps())
      continue;
    for (const dsp::Step *step : *program->steps()) {
      if (!step->inputs())
        continue;
      std::string_view op = step->op() ? step->op()->string_view() : std::string_view();
      for (size_t i = 0; i < step->inputs()->size(); ++i) {
        int index = step->inputs()->Get(i);
        if (index >= 0 && static_cast<size_t>(index) < narrow.size() && !readsNarrow(op, i))
          narrow[index] = false;
      }
    }
  }
  return narrow;
}

Status CpuSession::create(std::shared_ptr<PlanFile> plan, int rank, std::unique_ptr<CpuSession> &out,
                       ops::Collectives *collectives, const CpuSessionOptions &options) {
  if (rank < 0 || rank >= plan->rankCount())
    return Status::error(plan->path() + ": rank " + std::to_string(rank) +
                         " does not exist; the plan has " + std::to_string(plan->rankCount()) +
                         " rank(s)");
  if (collectives && (collectives->size() != plan->rankCount() || collectives->rank() != rank))
    return Status::error(plan->path() + ": the plan was compiled for " +
                         std::to_string(plan->rankCount()) + " tensor-parallel rank(s), but " +
                         std::to_string(collectives->size()) + " process(es) or thread(s) run "
                         "it; run it with --tp " + std::to_string(plan->rankCount()) +
                         " ranks or recompile with --tp " +
                         std::to_string(collectives->size()));
  std::unique_ptr<CpuSession> session(new CpuSession());
  session->plan_ = plan;
  session->collectives_ = collectives;
  session->reference_ = options.reference;
  session->rowInvariant_ = options.rowInvariant;
  session->exactFloatRows_ = options.exactFloatRows;
  const char *profile = std::getenv("DSRT_PROFILE");
  session->profileLayers_ = profile && std::string(profile) == "layers";
  session->profile_ = profile && (std::string(profile) == "1" || session->profileLayers_);
  DSRT_RETURN_IF_ERROR(plan->section(rank, session->section_));
  std::vector<bool> narrow;
  if (!options.reference)
    narrow = session->narrowReaders();
  const dsp::Plan &header = plan->plan();

  uint64_t arenaBytes = header.arena_bytes();
  session->onlyPrograms_ = options.onlyPrograms;
  if (!options.onlyPrograms.empty())
    arenaBytes = arenaBytesOf(header, options.onlyPrograms);
  // A plan whose largest program needs more than the machine has cannot run it: refused
  // here with the numbers, not killed later. DSRT_MAX_ARENA_BYTES sets another bound (the
  // fuzz harnesses' smaller one).
  uint64_t arenaLimit = physicalMemoryBytes();
  if (const char *limit = std::getenv("DSRT_MAX_ARENA_BYTES"); limit && *limit)
    arenaLimit = std::strtoull(limit, nullptr, 10);
  if (arenaBytes > arenaLimit)
    return Status::error(plan->path() + ": the plan's activation arena of " +
                         std::to_string(arenaBytes) + " bytes is more than the " +
                         std::to_string(arenaLimit) + " bytes this machine has (or "
                         "DSRT_MAX_ARENA_BYTES allows); compile with a smaller --max-batch or "
                         "--max-seq-len");
  session->arenaStorage_.reset(new (std::nothrow) uint8_t[arenaBytes + kArenaAlignment]);
  if (!session->arenaStorage_)
    return Status::error(plan->path() + ": cannot allocate the " + std::to_string(arenaBytes) +
                         "-byte activation arena");
  session->memory_.arena = arenaBytes;
  session->memory_.weights = session->section_->size();
  auto base = reinterpret_cast<uintptr_t>(session->arenaStorage_.get());
  session->arena_ = session->arenaStorage_.get() + (kArenaAlignment - base % kArenaAlignment) %
                                                       kArenaAlignment;

  size_t count = header.tensors() ? header.tensors()->size() : 0;
  session->slots_.resize(count);
  session->inputStorage_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const dsp::Tensor &tensor = *header.tensors()->Get(i);
    Slot &slot = session->slots_[i];
    slot.dtype = planDType(tensor.dtype());
    switch (tensor.kind()) {
    case dsp::TensorKind::activation:
      slot.data = session->arena_ + tensor.arena_offset();
      slot.capacity = tensor.arena_bytes();
      break;
    case dsp::TensorKind::constant:
      // Copied: a FlatBuffers byte vector is only 4-byte aligned, and kernels read i64 and
      // f64 constants in place.
      slot.capacity = tensor.constant_data() ? tensor.constant_data()->size() : 0;
      session->converted_.emplace_back(new uint8_t[std::max<size_t>(slot.capacity, 1)]);
      slot.data = session->converted_.back().get();
      if (slot.capacity)
        std::memcpy(slot.data, tensor.constant_data()->data(), slot.capacity);
      if (tensor.shape())  // null for a scalar
        for (const dsp::Dim *dim : *tensor.shape())
          slot.shape.push_back(dim->size());
      slot.known = true;
      break;
    case dsp::TensorKind::weight: {
      TensorRef stored = session->section_->weight(tensor.weight_index());
      slot.shape = stored.shape;
      slot.known = true;
      bool keepNarrow = !narrow.empty() && narrow[i] &&
                        (stored.dtype == DType::F16 || stored.dtype == DType::BF16) &&
                        slot.dtype == DType::F32;
      if (keepNarrow)
        slot.dtype = stored.dtype;
      if (stored.dtype == slot.dtype) {
        // Read-only mapped bytes: kernels never write their inputs.
        slot.data = static_cast<uint8_t *>(stored.data);
        slot.capacity = stored.bytes();
        break;
      }
      size_t bytes = static_cast<size_t>(stored.elements()) * dtypeSize(slot.dtype);
      session->converted_.emplace_back(new uint8_t[std::max<size_t>(bytes, 1)]);
      slot.data = session->converted_.back().get();
      slot.capacity = bytes;
      session->memory_.other += bytes;
      if (!convertFloats(stored.dtype, stored.data, slot.dtype, slot.data, stored.elements()))
        return Status::error(plan->path() + ": weight '" + str(tensor.name()) +
                             "': cannot convert it from " + dtypeName(stored.dtype) + " to " +
                             dtypeName(slot.dtype));
      break;
    }
    case dsp::TensorKind::input:
    case dsp::TensorKind::dynamic:
      break;
    }
  }

  // Decode every step's attributes once.
  if (header.programs()) {
    for (const dsp::Program *program : *header.programs()) {
      std::vector<CompiledStep> steps;
      if (program->steps()) {
        for (const dsp::Step *step : *program->steps()) {
          CompiledStep compiled{str(step->op()), {}};
          if (compiled.op != "If" && !ops::isSupported(compiled.op))
            return Status::error(plan->path() + ": step op '" + compiled.op +
                                 "' is not one this runtime implements");
          if (step->attrs()) {
            for (const dsp::Attr *attr : *step->attrs()) {
              ops::Attr decoded;
              DSRT_RETURN_IF_ERROR(decodeAttr(*attr, decoded));
              compiled.attrs[str(attr->name())] = std::move(decoded);
            }
          }
          // An embedding table kept narrow gathers into the activation dtype the plan
          // declares (the kernel's output_dtype).
          if (compiled.op == "tfm.embedding" && step->inputs() && step->inputs()->size() > 1 &&
              step->outputs() && step->outputs()->size() == 1) {
            int table = step->inputs()->Get(1), result = step->outputs()->Get(0);
            if (table >= 0 && result >= 0 &&
                session->slots_[table].dtype != session->slots_[result].dtype)
              compiled.attrs["output_dtype"] = ops::Attr::ofType(session->slots_[result].dtype);
          }
          steps.push_back(std::move(compiled));
        }
      }
      if (session->profileLayers_) {
        // A step's layer: the k-th of an op that comes n times per tfm.attention step (n
        // whole) is in layer k / n; the others (embedding, final norm, head) in none.
        std::map<std::string, int64_t> count, seen;
        for (const CompiledStep &step : steps)
          ++count[step.op];
        const int64_t layers = count["tfm.attention"];
        std::vector<int64_t> layerOf;
        for (const CompiledStep &step : steps) {
          const int64_t k = seen[step.op]++, n = count[step.op];
          layerOf.push_back(layers > 0 && n % layers == 0 ? k / (n / layers) : -1);
        }
        session->stepLayer_.push_back(std::move(layerOf));
      }
      session->compiled_.push_back(std::move(steps));
    }
  }
  DSRT_RETURN_IF_ERROR(session->allocateKvCache(options));
  out = std::move(session);
  return Status::ok();
}

// DSRT_PROFILE=layers: per program, milliseconds per run of each op in each layer.
void CpuSession::printLayerProfile() const {
  const auto &programs = *plan_->plan().programs();
  for (size_t p = 0; p < profileByLayer_.size(); ++p) {
    if (programRuns_[p] == 0 || profileByLayer_[p].empty())
      continue;
    const double perRun = 1e3 / static_cast<double>(programRuns_[p]);
    std::vector<std::string> ops;
    for (const auto &entry : profileByLayer_[p])
      if (std::find(ops.begin(), ops.end(), entry.first.second) == ops.end())
        ops.push_back(entry.first.second);
    std::fprintf(stderr, "dsrt profile by layer (program '%s', %lld runs): ms per run\n",
                 str(programs.Get(p)->name()).c_str(), static_cast<long long>(programRuns_[p]));
    std::fprintf(stderr, "  %-6s %10s", "layer", "total");
    for (const std::string &op : ops)
      std::fprintf(stderr, " %14s", op.c_str());
    std::fprintf(stderr, "\n");
    std::map<int64_t, std::map<std::string, double>> rows;
    for (const auto &[key, seconds] : profileByLayer_[p])
      rows[key.first][key.second] += seconds;
    for (const auto &[layer, byOp] : rows) {
      double total = 0;
      for (const auto &entry : byOp)
        total += entry.second;
      std::fprintf(stderr, "  %-6s %10.3f", layer < 0 ? "-" : std::to_string(layer).c_str(),
                   total * perRun);
      for (const std::string &op : ops) {
        auto found = byOp.find(op);
        std::fprintf(stderr, " %14.3f", found == byOp.end() ? 0.0 : found->second * perRun);
      }
      std::fprintf(stderr, "\n");
    }
  }
}

CpuSession::~CpuSession() {
  if (profileLayers_)
    printLayerProfile();
  if (!profile_ || profileByOp_.empty())
    return;
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(profileByOp_.begin(),
                                                                       profileByOp_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto &a, const auto &b) { return a.second.first > b.second.first; });
  double total = 0;
  for (const auto &row : rows)
    total += row.second.first;
  std::fprintf(stderr, "dsrt profile (%s, %s): %.3f s in steps\n", plan_->path().c_str(),
               deviceName().c_str(), total);
  for (const auto &[op, timing] : rows)
    std::fprintf(stderr, "  %-24s %10.3f ms %5.1f%% %8lld runs\n", op.c_str(),
                 timing.first * 1e3, total > 0 ? 100 * timing.first / total : 0.0,
                 static_cast<long long>(timing.second));
}

// The cache layers kvCacheLayout finds, zeroed: max_batch sequences of max_seq_len each,
// or the serving engine's pool of blocks.
Status CpuSession::allocateKvCache(const CpuSessionOptions &options) {
  std::vector<KvLayerShape> layers;
  DSRT_RETURN_IF_ERROR(
      kvCacheLayout(*plan_, collectives_ ? collectives_->rank() : 0, layers));
  if (options.kvBlockSize != 0 || options.kvBlocks != 0) {
    if (layers.empty())
      return Status::error(plan_->path() + ": the plan has no session KV cache to page (no "
                                           "prefill and decode programs)");
    if (options.kvBlockSize < 1 || options.kvBlocks < 1)
      return Status::error("a paged KV cache needs a block size and a block count of at least "
                           "1, not " + std::to_string(options.kvBlockSize) + " and " +
                           std::to_string(options.kvBlocks));
    // Blocks of [kvHeads, blockSize, headDim]: KvCacheLayer's batch and capacity.
    for (KvLayerShape &shape : layers) {
      shape.batch = options.kvBlocks;
      shape.capacity = options.kvBlockSize;
    }
    kvCache_.blockSize = options.kvBlockSize;
  } else if (options.kvInt8) {
    return Status::error("an int8 KV cache is the serving engine's (a paged cache)");
  }
  kvCache_.layers.resize(layers.size());
  for (size_t layer = 0; layer < layers.size(); ++layer) {
    KvLayerShape &shape = layers[layer];
    if (options.kvInt8)
      shape.dtype = DType::I8;
    // In floats, rounded up: an f16/bf16 layer's elements are half as many floats' bytes.
    size_t elements = (shape.bytes() + sizeof(float) - 1) / sizeof(float);
    kvStorage_.emplace_back(static_cast<float *>(std::calloc(elements, sizeof(float))));
    kvStorage_.emplace_back(static_cast<float *>(std::calloc(elements, sizeof(float))));
    if (!kvStorage_[kvStorage_.size() - 2] || !kvStorage_.back())
      return Status::error(plan_->path() + ": cannot allocate the KV cache (" +
                           std::to_string(2 * shape.bytes()) + " bytes per layer)");
    kvCache_.layers[layer] = {shape.dtype, shape.batch, shape.kvHeads, shape.capacity,
                              shape.headDim, kvStorage_[kvStorage_.size() - 2].get(),
                              kvStorage_.back().get()};
    memory_.kvCache += 2 * shape.bytes();
    if (options.kvInt8) {
      const size_t scales = static_cast<size_t>(shape.batch * shape.kvHeads * shape.capacity *
                                                ops::kvInt8Groups(shape.headDim));
      kvStorage_.emplace_back(static_cast<float *>(std::calloc(scales, sizeof(float))));
      kvStorage_.emplace_back(static_cast<float *>(std::calloc(scales, sizeof(float))));
      if (!kvStorage_[kvStorage_.size() - 2] || !kvStorage_.back())
        return Status::error(plan_->path() + ": cannot allocate the int8 KV cache's scales (" +
                             std::to_string(2 * scales * sizeof(float)) + " bytes per layer)");
      kvCache_.layers[layer].keyScales = kvStorage_[kvStorage_.size() - 2].get();
      kvCache_.layers[layer].valueScales = kvStorage_.back().get();
      memory_.kvCache += 2 * scales * sizeof(float);
    }
  }
  return Status::ok();
}

Status CpuSession::reorderKvRows(const std::vector<int64_t> &sources, int64_t positions) {
  if (kvCache_.blockSize != 0)
    return Status::error("a paged KV cache's rows are the serving engine's blocks");
  for (const ops::KvCacheLayer &layer : kvCache_.layers)
    if (layer.key)
      DSRT_RETURN_IF_ERROR(checkKvRowSources(sources, layer.batch));
  // Each head's first `positions` rows are one contiguous run of [capacity, headDim].
  std::vector<uint8_t> held;
  for (const ops::KvCacheLayer &layer : kvCache_.layers) {
    if (!layer.key)
      continue;
    const size_t element = dtypeSize(layer.dtype);
    const size_t run = static_cast<size_t>(std::min(positions, layer.capacity) * layer.headDim) *
                       element;
    const size_t head = static_cast<size_t>(layer.capacity * layer.headDim) * element;
    const size_t row = static_cast<size_t>(layer.kvHeads) * head;
    for (void *tensor : {layer.key, layer.value}) {
      auto *base = static_cast<uint8_t *>(tensor);
      held.resize(sources.size() * static_cast<size_t>(layer.kvHeads) * run);
      for (size_t b = 0; b < sources.size(); ++b)
        for (int64_t h = 0; h < layer.kvHeads; ++h)
          std::memcpy(held.data() + (b * layer.kvHeads + h) * run,
                      base + static_cast<size_t>(sources[b]) * row + h * head, run);
      for (size_t b = 0; b < sources.size(); ++b)
        if (sources[b] != static_cast<int64_t>(b))
          for (int64_t h = 0; h < layer.kvHeads; ++h)
            std::memcpy(base + b * row + h * head,
                        held.data() + (b * layer.kvHeads + h) * run, run);
    }
  }
  return Status::ok();
}

Status CpuSession::setPagedRows(const std::vector<ops::KvPagedRow> &rows) {
  if (kvCache_.blockSize == 0)
    return Status::error(plan_->path() + ": this session was created without a paged KV "
                                         "cache");
  kvCache_.pagedRows = rows;
  return Status::ok();
}

Status CpuSession::findProgram(std::string_view name, const dsp::Program *&out) const {
  out = program(name);
  if (!out)
    return Status::error(plan_->path() + ": the plan has no program '" + std::string(name) +
                         "'");
  return Status::ok();
}

SessionMemory CpuSession::memory() const { return memory_; }

Status CpuSession::measureCopyBandwidth(uint64_t bytes, double &bytesPerSecond) {
  std::vector<uint8_t> source(bytes, 1), destination(bytes);
  std::memcpy(destination.data(), source.data(), bytes);  // first touch outside the timing
  constexpr int kRepeats = 5;
  double best = 0;
  for (int i = 0; i < kRepeats; ++i) {
    source[i % bytes] = static_cast<uint8_t>(i);
    auto start = std::chrono::steady_clock::now();
    std::memcpy(destination.data(), source.data(), bytes);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 0)
      best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds);
  }
  if (bytes == 0 || destination[bytes / 2] != source[bytes / 2])
    return Status::error("the copy measuring memory bandwidth did not copy");
  bytesPerSecond = best;
  return Status::ok();
}

const dsp::Program *CpuSession::program(std::string_view name) const {
  const auto *programs = plan_->plan().programs();
  if (!programs || name.empty())
    return nullptr;
  for (const dsp::Program *program : *programs)
    if (program->name() && program->name()->string_view() == name)
      return program;
  return nullptr;
}

Status CpuSession::setInput(std::string_view programName, size_t index, const TensorRef &value) {
  const dsp::Program *program;
  DSRT_RETURN_IF_ERROR(findProgram(programName, program));
  int tensorIndex = -1;
  DSRT_RETURN_IF_ERROR(
      checkProgramInput(*plan_, *program, programName, index, value, tensorIndex));
  Slot &slot = slots_[tensorIndex];
  std::vector<uint8_t> &storage = inputStorage_[tensorIndex];
  storage.assign(static_cast<const uint8_t *>(value.data),
                 static_cast<const uint8_t *>(value.data) + value.bytes());
  slot.shape = value.shape;
  slot.data = storage.data();
  slot.capacity = storage.size();
  slot.known = true;
  return Status::ok();
}

std::string CpuSession::describe(const dsp::Step &step, size_t index) const {
  std::string where = "step " + std::to_string(index) + " (" + str(step.op());
  if (step.location() && step.location()->size())
    where += " '" + step.location()->str() + "'";
  return where + ")";
}

Status CpuSession::run(std::string_view programName) {
  const dsp::Program *program;
  DSRT_RETURN_IF_ERROR(findProgram(programName, program));
  if (!onlyPrograms_.empty() &&
      std::find(onlyPrograms_.begin(), onlyPrograms_.end(), programName) == onlyPrograms_.end())
    return Status::error(plan_->path() + ": this session runs only its chosen programs (its "
                                         "arena is sized for them), not '" +
                         std::string(programName) + "'");
  if (program->inputs())
    for (int tensorIndex : *program->inputs())
      if (!slots_[tensorIndex].known)
        return Status::error("input '" +
                             str(plan_->plan().tensors()->Get(tensorIndex)->name()) +
                             "' of program '" + std::string(programName) + "' is not set");
  // Activations of an earlier run are stale.
  const auto *tensors = plan_->plan().tensors();
  for (size_t i = 0; i < slots_.size(); ++i)
    if (tensors->Get(i)->kind() == dsp::TensorKind::activation ||
        tensors->Get(i)->kind() == dsp::TensorKind::dynamic)
      slots_[i].known = false;
  Status status = runProgram(*program);
  return status.isOk() ? status
                       : Status::error(plan_->path() + ": program '" +
                                       std::string(programName) + "': " + status.message());
}

Status CpuSession::runProgram(const dsp::Program &program) {
  const auto &programs = *plan_->plan().programs();
  size_t programIndex = 0;
  while (programs.Get(programIndex) != &program)
    ++programIndex;
  const std::vector<CompiledStep> &compiled = compiled_[programIndex];
  if (!program.steps())
    return Status::ok();
  const size_t caller = runningProgram_;
  runningProgram_ = programIndex;
  if (profileLayers_) {
    programRuns_.resize(programs.size(), 0);
    profileByLayer_.resize(programs.size());
    ++programRuns_[programIndex];
  }
  for (size_t i = 0; i < program.steps()->size(); ++i) {
    const dsp::Step &step = *program.steps()->Get(i);
    Status status = compiled[i].op == "If" ? runIf(step) : runStep(step, compiled[i], i);
    if (!status.isOk()) {
      runningProgram_ = caller;
      return Status::error(describe(step, i) + ": " + status.message());
    }
  }
  runningProgram_ = caller;
  return Status::ok();
}

Status CpuSession::runStep(const dsp::Step &step, const CompiledStep &compiled, size_t index) {
  std::vector<TensorRef> inputRefs(step.inputs() ? step.inputs()->size() : 0);
  ops::Inputs inputs;
  for (size_t i = 0; i < inputRefs.size(); ++i) {
    int tensorIndex = step.inputs()->Get(i);
    if (tensorIndex < 0) {
      inputs.push_back(nullptr);
      continue;
    }
    const Slot &slot = slots_[tensorIndex];
    if (!slot.known)
      return Status::error("input " + std::to_string(i) + " has no value yet");
    inputRefs[i] = {slot.dtype, slot.shape, slot.data};
    inputs.push_back(&inputRefs[i]);
  }
  size_t numOutputs = step.outputs() ? step.outputs()->size() : 0;
  std::vector<ops::OutputSpec> specs;
  ops::SessionState state;
  state.cache = &kvCache_;
  state.collectives = collectives_;
  state.fastKernels = !reference_;
  state.rowInvariant = rowInvariant_;
  state.exactFloatRows = exactFloatRows_;
  DSRT_RETURN_IF_ERROR(
      ops::inferShapes(compiled.op, compiled.attrs, inputs, numOutputs, specs, &state));
  if (specs.size() != numOutputs)
    return Status::error("the kernel gives " + std::to_string(specs.size()) + " outputs for " +
                         std::to_string(numOutputs));
  std::vector<TensorRef> outputRefs(numOutputs);
  ops::Outputs outputs;
  for (size_t o = 0; o < numOutputs; ++o) {
    Slot &slot = slots_[step.outputs()->Get(o)];
    const ops::OutputSpec &spec = specs[o];
    uint64_t bytes = static_cast<uint64_t>(elementCount(spec.shape)) * dtypeSize(spec.dtype);
    if (spec.dtype != slot.dtype)
      return Status::error("output " + std::to_string(o) + " is " + dtypeName(spec.dtype) +
                           " but the plan expects " + dtypeName(slot.dtype));
    if (elementCount(spec.shape) >= 0 &&
        plan_->plan().tensors()->Get(step.outputs()->Get(o))->kind() == dsp::TensorKind::dynamic) {
      // Not bounded at compile time: sized now, kept for the next run.
      std::vector<uint8_t> &storage = inputStorage_[step.outputs()->Get(o)];
      if (storage.size() < bytes)
        storage.resize(bytes);
      slot.data = storage.data();
      slot.capacity = storage.size();
    }
    if (elementCount(spec.shape) < 0 || bytes > slot.capacity)
      return Status::error("output " + std::to_string(o) + " of shape " +
                           shapeString(spec.shape) + " needs " + std::to_string(bytes) +
                           " bytes, more than the " + std::to_string(slot.capacity) +
                           " its arena slot has under the plan's limits");
    slot.shape = spec.shape;
    slot.known = true;
    outputRefs[o] = {slot.dtype, slot.shape, slot.data};
    outputs.push_back(&outputRefs[o]);
  }
  (void)index;
  if (!profile_)
    return ops::compute(compiled.op, compiled.attrs, inputs, outputs, &state);
  auto start = std::chrono::steady_clock::now();
  Status status = ops::compute(compiled.op, compiled.attrs, inputs, outputs, &state);
  auto &timing = profileByOp_[compiled.op];
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  timing.first += seconds;
  ++timing.second;
  if (profileLayers_)
    profileByLayer_[runningProgram_][{stepLayer_[runningProgram_][index], compiled.op}] += seconds;
  return status;
}

Status CpuSession::runIf(const dsp::Step &step) {
  if (!step.inputs() || step.inputs()->size() != 1 || !step.branches() ||
      step.branches()->size() != 2)
    return Status::error("If needs one condition input and two branches");
  const Slot &cond = slots_[step.inputs()->Get(0)];
  if (!cond.known || cond.dtype != DType::Bool || elementCount(cond.shape) != 1)
    return Status::error("the condition must be a single bool");
  const dsp::Program &branch =
      *plan_->plan().programs()->Get(step.branches()->Get(cond.data[0] ? 0 : 1));
  DSRT_RETURN_IF_ERROR(runProgram(branch));
  size_t outputs = step.outputs() ? step.outputs()->size() : 0;
  if (!branch.branch_outputs() || branch.branch_outputs()->size() != outputs)
    return Status::error("the branch yields a different number of values than If has outputs");
  for (size_t o = 0; o < outputs; ++o) {
    const Slot &from = slots_[branch.branch_outputs()->Get(o)];
    Slot &to = slots_[step.outputs()->Get(o)];
    uint64_t bytes = static_cast<uint64_t>(elementCount(from.shape)) * dtypeSize(from.dtype);
    int toIndex = step.outputs()->Get(o);
    if (plan_->plan().tensors()->Get(toIndex)->kind() == dsp::TensorKind::dynamic) {
      std::vector<uint8_t> &storage = inputStorage_[toIndex];
      if (storage.size() < bytes)
        storage.resize(bytes);
      to.data = storage.data();
      to.capacity = storage.size();
    }
    if (!from.known || from.dtype != to.dtype || bytes > to.capacity)
      return Status::error("branch output " + std::to_string(o) + " does not fit the If's slot");
    std::memmove(to.data, from.data, bytes);
    to.shape = from.shape;
    to.known = true;
  }
  return Status::ok();
}

Status CpuSession::output(std::string_view programName, size_t index, TensorRef &out) {
  const dsp::Program *program;
  DSRT_RETURN_IF_ERROR(findProgram(programName, program));
  size_t outputs = program->outputs() ? program->outputs()->size() : 0;
  if (index >= outputs)
    return Status::error("program '" + std::string(programName) + "' has " +
                         std::to_string(outputs) + " outputs; there is no output " +
                         std::to_string(index));
  const Slot &slot = slots_[program->outputs()->Get(index)];
  if (!slot.known)
    return Status::error("output " + std::to_string(index) + " has no value: run the program");
  out = {slot.dtype, slot.shape, slot.data};
  return Status::ok();
}

} // namespace dsrt
