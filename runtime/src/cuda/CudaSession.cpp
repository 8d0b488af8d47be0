// The CUDA session's setup and I/O: device, context and stream, the programs' steps, the
// tensors' places, inputs and outputs. The weights, kernels and KV cache are
// CudaResources.cpp, the executor CudaExecutor.cpp (its StepContext CudaStepContext.*),
// the inputs' padding and the graphs CudaGraphs.cpp.
#include "cuda/CudaSession.h"

#include "cpu/Session.h"
#include "cuda/CublasLt.h"
#include "cuda/StagedCollectives.h"
#include "plan/PlanArena.h"
#include "session/PlanChecks.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dsrt::cuda {
namespace {

// cudaMalloc's alignment: every kernel may use vector loads on any tensor it gets.
constexpr uint64_t kDeviceAlignment = 256;

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

bool isCollective(std::string_view op) {
  return op == "tfm.all_reduce" || op == "tfm.all_gather";
}

} // namespace

bool strictDeviceFromEnvironment() {
  const char *value = std::getenv("DSRT_STRICT_DEVICE");
  return value && std::string(value) == "1";
}

Status CudaSession::check(CUresult result, const char *call) const {
  if (result == kCudaSuccess)
    return Status::ok();
  return Status::error(deviceLabel_ + ": " + driverErrorText(*driver_, result, call));
}

Status CudaSession::allocate(size_t bytes, DevicePtr &out, const char *what) {
  out = 0;
  if (bytes == 0)
    bytes = kDeviceAlignment;  // a valid, distinct address for empty tensors
  CUdeviceptr pointer = 0;
  CUresult result = driver_->cuMemAlloc(&pointer, bytes);
  if (result != kCudaSuccess)
    return Status::error(deviceLabel_ + ": cannot allocate " + std::to_string(bytes) +
                         " bytes for " + what + ": " +
                         driverErrorText(*driver_, result, "cuMemAlloc"));
  allocations_.push_back(pointer);
  out = pointer;
  return Status::ok();
}

Status CudaSession::copyToDevice(DevicePtr dst, const void *src, size_t bytes) {
  DSRT_RETURN_IF_ERROR(
      check(driver_->cuMemcpyHtoDAsync(dst, src, bytes, stream_), "cuMemcpyHtoDAsync"));
  stats_.bytesUploaded += bytes;
  return Status::ok();
}

Status CudaSession::copyToHost(void *dst, DevicePtr src, size_t bytes) {
  DSRT_RETURN_IF_ERROR(
      check(driver_->cuMemcpyDtoHAsync(dst, src, bytes, stream_), "cuMemcpyDtoHAsync"));
  stats_.bytesDownloaded += bytes;
  return Status::ok();
}

Status CudaSession::sync() {
  auto wait = [this] {
    return check(driver_->cuStreamSynchronize(stream_), "cuStreamSynchronize");
  };
  if (!collectivesPending_ || !deviceCollectives_)
    return wait();
  // Once the wait returns the stream is empty, whether it succeeded or not.
  collectivesPending_ = false;
  return deviceCollectives_->guard(runningProgram_.c_str(), wait);
}

Status CudaSession::create(std::shared_ptr<PlanFile> plan, int rank,
                           const CudaSessionOptions &options, std::unique_ptr<CudaSession> &out) {
  if (rank < 0 || rank >= plan->rankCount())
    return Status::error(plan->path() + ": rank " + std::to_string(rank) +
                         " does not exist; the plan has " + std::to_string(plan->rankCount()) +
                         " rank(s)");
  ops::Collectives *group = options.collectives;
  if (group && (group->size() != plan->rankCount() || group->rank() != rank))
    return Status::error(plan->path() + ": the plan was compiled for " +
                         std::to_string(plan->rankCount()) + " tensor-parallel rank(s), but " +
                         std::to_string(group->size()) + " process(es) or thread(s) run it");
  std::unique_ptr<CudaSession> session(new CudaSession());
  session->plan_ = std::move(plan);
  session->options_ = options;
  session->rank_ = rank;
  if (const char *sync = std::getenv("DSRT_CUDA_SYNC_STEPS"))
    session->syncEachStep_ = std::string(sync) == "1";
  if (const char *counts = std::getenv("DSRT_CUDA_LAUNCH_COUNTS"); counts && *counts == '1') {
    const auto *kernels = session->plan_->plan().kernels();
    session->launchCounts_.assign(kernels ? kernels->size() : 0, 0);
  }
  session->strict_ = options.strict || strictDeviceFromEnvironment();
  session->driver_ = options.driver;
  if (!session->driver_) {
    std::string whyNot;
    session->driver_ = processDriver(&whyNot);
    if (!session->driver_)
      return Status::error(whyNot);
  }
  DSRT_RETURN_IF_ERROR(session->initDevice(rank));
  DSRT_RETURN_IF_ERROR(session->plan_->section(rank, session->section_));
  DSRT_RETURN_IF_ERROR(session->compilePrograms());
  DSRT_RETURN_IF_ERROR(session->prepareTensors());
  DSRT_RETURN_IF_ERROR(session->uploadWeights());
  DSRT_RETURN_IF_ERROR(session->loadKernels());
  DSRT_RETURN_IF_ERROR(session->allocateKvCache());
  session->deviceCollectives_ = options.deviceCollectives;
  if (!session->deviceCollectives_ && group && group->size() > 1) {
    session->stagedCollectives_ =
        std::make_unique<StagedCollectives>(*session->driver_, *group);
    session->deviceCollectives_ = session->stagedCollectives_.get();
  }
  DSRT_RETURN_IF_ERROR(session->sync());
  out = std::move(session);
  return Status::ok();
}

Status CudaSession::initDevice(int rank) {
  std::string whyNot;
  int count = availableDeviceCount(*driver_, &whyNot);
  if (count == 0)
    return Status::error(whyNot);
  ordinal_ = rank % count;
  deviceCount_ = count;
  if (const char *chosen = std::getenv("DSRT_CUDA_DEVICE"); chosen && *chosen) {
    char *end = nullptr;
    long value = std::strtol(chosen, &end, 10);
    if (*end || value < 0 || value >= count)
      return Status::error("DSRT_CUDA_DEVICE=" + std::string(chosen) + " is not a device: " +
                           std::to_string(count) + " are visible");
    ordinal_ = static_cast<int>(value);
    devicePinned_ = true;
  }
  deviceLabel_ = "cuda:" + std::to_string(ordinal_);
  DSRT_RETURN_IF_ERROR(check(driver_->cuDeviceGet(&device_, ordinal_), "cuDeviceGet"));
  char name[256] = {};
  DSRT_RETURN_IF_ERROR(
      check(driver_->cuDeviceGetName(name, sizeof name - 1, device_), "cuDeviceGetName"));
  deviceLabel_ += std::string(" (") + name + ")";
  int major = 0, minor = 0;
  DSRT_RETURN_IF_ERROR(check(driver_->cuDeviceGetAttribute(
                                 &major, kDeviceAttributeComputeCapabilityMajor, device_),
                             "cuDeviceGetAttribute"));
  DSRT_RETURN_IF_ERROR(check(driver_->cuDeviceGetAttribute(
                                 &minor, kDeviceAttributeComputeCapabilityMinor, device_),
                             "cuDeviceGetAttribute"));
  DSRT_RETURN_IF_ERROR(check(driver_->cuDeviceGetAttribute(
                                 &multiprocessors_, kDeviceAttributeMultiprocessorCount, device_),
                             "cuDeviceGetAttribute"));
  computeCapability_ = major * 10 + minor;
  DSRT_RETURN_IF_ERROR(
      check(driver_->cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain"));
  contextRetained_ = true;
  DSRT_RETURN_IF_ERROR(check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  DSRT_RETURN_IF_ERROR(
      check(driver_->cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate"));
  DSRT_RETURN_IF_ERROR(allocate(kDeviceAlignment, sequenceLengths_, "the sequence lengths"));
  DSRT_RETURN_IF_ERROR(check(driver_->cuMemsetD8Async(sequenceLengths_, 0, kDeviceAlignment,
                                                      stream_),
                             "cuMemsetD8Async"));
  memory_.other += kDeviceAlignment;
  return Status::ok();
}

CudaSession::~CudaSession() {
  if (!driver_)
    return;
  if (const auto *kernels = plan_->plan().kernels(); kernels)
    for (size_t k = 0; k < launchCounts_.size() && k < kernels->size(); ++k)
      if (launchCounts_[k] > 0)
        std::fprintf(stderr, "dsrt: %lld launches of %s\n",
                     static_cast<long long>(launchCounts_[k]),
                     kernels->Get(k)->name() ? kernels->Get(k)->name()->c_str() : "?");
  if (context_)
    driver_->cuCtxSetCurrent(context_);
  if (stream_)
    driver_->cuStreamSynchronize(stream_);
  destroyGraphs();
  cublas_.reset();
  for (CUmodule module : modules_)
    if (module)
      driver_->cuModuleUnload(module);
  for (DevicePtr pointer : allocations_)
    driver_->cuMemFree(pointer);
  if (stream_)
    driver_->cuStreamDestroy(stream_);
  if (contextRetained_)
    driver_->cuDevicePrimaryCtxRelease(device_);
}

void CudaSession::destroyGraphs() {
  for (auto &entry : graphs_) {
    if (entry.second->exec)
      driver_->cuGraphExecDestroy(entry.second->exec);
    if (entry.second->graph)
      driver_->cuGraphDestroy(entry.second->graph);
  }
  graphs_.clear();
}

std::string CudaSession::deviceName() const { return deviceLabel_; }

const dsp::Program *CudaSession::program(std::string_view name) const {
  const auto *programs = plan_->plan().programs();
  if (!programs || name.empty())
    return nullptr;
  for (const dsp::Program *program : *programs)
    if (program->name() && program->name()->string_view() == name)
      return program;
  return nullptr;
}

int CudaSession::programIndex(const dsp::Program &program) const {
  const auto &programs = *plan_->plan().programs();
  for (size_t i = 0; i < programs.size(); ++i)
    if (programs.Get(i) == &program)
      return static_cast<int>(i);
  return -1;
}

Status CudaSession::compilePrograms() {
  const dsp::Plan &header = plan_->plan();
  if (!header.programs())
    return Status::ok();
  GpuOpFn (*find)(std::string_view) = options_.findOp ? options_.findOp : findGpuOp;
  bool (*withoutKernels)(std::string_view) =
      options_.launchesWithoutKernels ? options_.launchesWithoutKernels : isCollective;
  const dsp::ModelInfo *model = header.model();
  for (const dsp::Program *program : *header.programs()) {
    std::vector<CompiledStep> steps;
    ProgramState state;
    size_t count = program->steps() ? program->steps()->size() : 0;
    state.placements.assign(count, StepPlacement::NotRun);
    for (size_t i = 0; i < count; ++i) {
      const dsp::Step &step = *program->steps()->Get(i);
      CompiledStep compiled;
      compiled.op = str(step.op());
      if (compiled.op != "If" && !ops::isSupported(compiled.op))
        return Status::error(plan_->path() + ": step op '" + compiled.op +
                             "' is not one this runtime implements");
      if (step.attrs())
        for (const dsp::Attr *attr : *step.attrs()) {
          ops::Attr decoded;
          DSRT_RETURN_IF_ERROR(decodeAttr(*attr, decoded));
          compiled.attrs[str(attr->name())] = std::move(decoded);
        }
      if (compiled.op != "If")
        compiled.launcher = find(compiled.op);
      bool hasKernels = step.kernels() && step.kernels()->size() > 0;
      if (compiled.launcher && !hasKernels && !withoutKernels(compiled.op))
        compiled.fallbackOnly = true;
      compiled.readsStoredWeights = compiled.op.rfind("tfm.", 0) == 0;
      bool hasPast = step.inputs() && step.inputs()->size() > 4 && step.inputs()->Get(4) >= 0;
      int64_t layer = -1;
      if (compiled.op == "tfm.attention" && !hasPast)
        DSRT_RETURN_IF_ERROR(ops::getInt(compiled.attrs, "cache_layer", -1, layer));
      if (layer >= 0)
        state.usesCache = true;
      steps.push_back(std::move(compiled));
    }
    // The roles that give a session-cache program its lengths (docs/transformer-ops.md).
    if (model && program->inputs()) {
      for (size_t i = 0; i < program->inputs()->size(); ++i) {
        std::string name = str(header.tensors()->Get(program->inputs()->Get(i))->name());
        if (!name.empty() && name == str(model->input_ids()))
          state.idsInput = static_cast<int>(i);
        if (!name.empty() && name == str(model->attention_mask()))
          state.maskInput = static_cast<int>(i);
      }
    }
    compiled_.push_back(std::move(steps));
    programs_.push_back(std::move(state));
  }
  return Status::ok();
}

// Places every tensor: activations in the arena, inputs in their own buffers, constants
// on the host (uploaded when a device step reads them); weights are placed by
// uploadWeights.
Status CudaSession::prepareTensors() {
  const dsp::Plan &header = plan_->plan();
  // At first, the arena of the programs a generation runs: with session programs (prefill,
  // decode), every program but `forward`; without them, every program.
  const uint32_t programCount = header.programs() ? header.programs()->size() : 0;
  bool generates = false;
  for (uint32_t p = 0; p < programCount; ++p)
    generates |= str(header.programs()->Get(p)->name()) == "prefill";
  uint64_t initial = 0;
  for (uint32_t p = 0; p < programCount; ++p) {
    arenaUse_.push_back(programArenaUse(header, p));
    const std::string name = str(header.programs()->Get(p)->name());
    const auto &only = options_.onlyPrograms;
    // The chosen programs alone where the session has some (the engine's `step`).
    if (only.empty() ? !generates || name != "forward"
                     : std::find(only.begin(), only.end(), name) != only.end())
      initial = std::max(initial, arenaUse_.back());
  }
  DSRT_RETURN_IF_ERROR(allocate(initial, arena_, "the activation arena"));
  arenaBytes_ = initial;
  memory_.arena = initial;
  size_t count = header.tensors() ? header.tensors()->size() : 0;
  slots_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const dsp::Tensor &tensor = *header.tensors()->Get(i);
    Slot &slot = slots_[i];
    slot.kind = tensor.kind();
    slot.dtype = planDType(tensor.dtype());
    slot.deviceDType = slot.dtype;
    switch (tensor.kind()) {
    case dsp::TensorKind::activation:
      break;  // placeActivations
    case dsp::TensorKind::constant:
      // Copied: a FlatBuffers byte vector is only 4-byte aligned, and the host kernels read
      // i64 and f64 constants in place.
      if (tensor.constant_data() && tensor.constant_data()->size()) {
        constantStorage_.emplace_back(new uint8_t[tensor.constant_data()->size()]);
        std::memcpy(constantStorage_.back().get(), tensor.constant_data()->data(),
                    tensor.constant_data()->size());
        slot.host = constantStorage_.back().get();
      } else {
        slot.host = nullptr;
      }
      if (tensor.shape())
        for (const dsp::Dim *dim : *tensor.shape())
          slot.shape.push_back(dim->size());
      slot.known = slot.hostKnown = true;
      break;
    case dsp::TensorKind::input:
      // Sized for the plan's limits now, so that the buffer a graph reads never moves.
      if (tensor.max_shape()) {
        Shape max(tensor.max_shape()->begin(), tensor.max_shape()->end());
        uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(elementCount(max), 0)) *
                         dtypeSize(slot.dtype);
        DSRT_RETURN_IF_ERROR(allocate(bytes, slot.device, "a program input"));
        slot.deviceCapacity = bytes;
        memory_.other += bytes;
      }
      break;
    case dsp::TensorKind::weight: {
      TensorRef stored = section_->weight(tensor.weight_index());
      slot.shape = stored.shape;
      slot.deviceDType = stored.dtype;
      slot.known = true;
      break;
    }
    case dsp::TensorKind::dynamic:
      break;
    }
  }
  placeActivations();
  return Status::ok();
}

// Activations in the arena at their slots; those past its end (a program not run yet) get
// no place until ensureArena grows it.
void CudaSession::placeActivations() {
  const dsp::Plan &header = plan_->plan();
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].kind != dsp::TensorKind::activation)
      continue;
    const dsp::Tensor &tensor = *header.tensors()->Get(static_cast<uint32_t>(i));
    bool fits = tensor.arena_offset() + tensor.arena_bytes() <= arenaBytes_;
    slots_[i].device = fits ? arena_ + tensor.arena_offset() : 0;
    slots_[i].deviceCapacity = fits ? tensor.arena_bytes() : 0;
  }
}

Status CudaSession::ensureArena(const dsp::Program &program) {
  int index = programIndex(program);
  uint64_t need = index >= 0 && static_cast<size_t>(index) < arenaUse_.size()
                      ? arenaUse_[static_cast<size_t>(index)]
                      : plan_->plan().arena_bytes();
  if (need <= arenaBytes_)
    return Status::ok();
  // Nothing in flight may still use the old arena, and no captured graph its addresses.
  DSRT_RETURN_IF_ERROR(sync());
  destroyGraphs();
  DevicePtr grown = 0;
  DSRT_RETURN_IF_ERROR(allocate(need, grown, "the activation arena"));
  allocations_.erase(std::remove(allocations_.begin(), allocations_.end(), arena_),
                     allocations_.end());
  DSRT_RETURN_IF_ERROR(check(driver_->cuMemFree(arena_), "cuMemFree"));
  arena_ = grown;
  arenaBytes_ = need;
  memory_.arena = need;
  placeActivations();
  return Status::ok();
}

Status CudaSession::setInput(std::string_view programName, size_t index,
                             const TensorRef &value) {
  const dsp::Program *found = program(programName);
  if (!found)
    return Status::error(plan_->path() + ": the plan has no program '" +
                         std::string(programName) + "'");
  int tensorIndex = -1;
  DSRT_RETURN_IF_ERROR(
      checkProgramInput(*plan_, *found, programName, index, value, tensorIndex));
  Slot &slot = slots_[tensorIndex];
  // Copied now, uploaded when the program runs: a decode graph pads it first.
  slot.inputValue.assign(static_cast<const uint8_t *>(value.data),
                         static_cast<const uint8_t *>(value.data) + value.bytes());
  slot.inputShape = value.shape;
  slot.inputSet = true;
  return Status::ok();
}

Status CudaSession::output(std::string_view programName, size_t index, TensorRef &out) {
  const dsp::Program *found = program(programName);
  if (!found)
    return Status::error(plan_->path() + ": the plan has no program '" +
                         std::string(programName) + "'");
  size_t count = found->outputs() ? found->outputs()->size() : 0;
  if (index >= count)
    return Status::error("program '" + std::string(programName) + "' has " +
                         std::to_string(count) + " outputs; there is no output " +
                         std::to_string(index));
  int tensorIndex = found->outputs()->Get(index);
  Slot &slot = slots_[tensorIndex];
  if (!slot.known)
    return Status::error("output " + std::to_string(index) + " has no value: run the program");
  Shape shape = slot.shape;
  // A padded decode graph's extra rows are not the caller's.
  const ProgramState &state = programs_[programIndex(*found)];
  if (state.realBatch >= 0 && !shape.empty() && shape[0] > state.realBatch)
    shape[0] = state.realBatch;
  size_t bytes = static_cast<size_t>(std::max<int64_t>(elementCount(shape), 0)) *
                 dtypeSize(slot.dtype);
  if (outputs_.size() < slots_.size())
    outputs_.resize(slots_.size());
  std::vector<uint8_t> &storage = outputs_[tensorIndex];
  storage.resize(std::max<size_t>(bytes, 1));
  if (slot.hostKnown && slot.host) {
    std::memcpy(storage.data(), slot.host, bytes);
  } else if (bytes) {
    if (!slot.deviceValid)
      return Status::error("output " + std::to_string(index) + " is not on the device");
    DSRT_RETURN_IF_ERROR(check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
    DSRT_RETURN_IF_ERROR(copyToHost(storage.data(), slot.device, bytes));
    DSRT_RETURN_IF_ERROR(sync());
  }
  out = {slot.dtype, shape, storage.data()};
  return Status::ok();
}

Status CudaSession::topLogits(std::string_view programName, size_t index, int64_t count,
                              std::vector<std::vector<float>> &values,
                              std::vector<std::vector<int64_t>> &ids) {
  const dsp::ModelInfo *model = plan_->plan().model();
  int32_t kernel = model ? model->sampling_kernel() : -1;
  const dsp::Program *found = program(programName);
  if (kernel < 0 || static_cast<size_t>(kernel) >= functions_.size() || !functions_[kernel] ||
      !found || !found->outputs() || index >= found->outputs()->size() || count < 1 ||
      count > kMaxDeviceTopLogits)
    return Session::topLogits(programName, index, count, values, ids);
  int tensorIndex = found->outputs()->Get(index);
  const Slot &slot = slots_[tensorIndex];
  // A value the host holds (a fallback step's, a constant) is selected where it is.
  if (!slot.known || (slot.hostKnown && slot.host) || !slot.deviceValid ||
      slot.dtype != DType::F32 || slot.shape.size() < 2)
    return Session::topLogits(programName, index, count, values, ids);
  int64_t vocab = slot.shape.back(), paddedRows = slot.shape[0];
  int64_t rows = paddedRows;
  const ProgramState &state = programs_[programIndex(*found)];
  if (state.realBatch >= 0 && rows > state.realBatch)
    rows = state.realBatch;
  if (vocab < count || vocab >= 0xFFFFFFFFll || rows <= 0)
    return Session::topLogits(programName, index, count, values, ids);
  int64_t rowStride = elementCount(slot.shape) / paddedRows;
  int64_t offset = rowStride - vocab;  // the last position of the row
  size_t pairs = static_cast<size_t>(rows * count);
  size_t valueBytes = (pairs * sizeof(float) + 7) / 8 * 8;
  size_t bytes = valueBytes + pairs * sizeof(int64_t);
  DSRT_RETURN_IF_ERROR(check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  if (bytes > topLogitsCapacity_) {
    // The old buffer stays with allocations_ until the session ends; it grows rarely.
    DSRT_RETURN_IF_ERROR(allocate(bytes, topLogitsBuffer_, "the sampling candidates"));
    topLogitsCapacity_ = bytes;
  }
  CUdeviceptr logits = slot.device, valuesOut = topLogitsBuffer_,
              idsOut = topLogitsBuffer_ + valueBytes;
  long long stride = rowStride, first = offset, width = vocab;
  int picks = static_cast<int>(count);
  void *args[] = {&logits, &stride, &first, &width, &picks, &valuesOut, &idsOut};
  int64_t block = 1024;
  if (const auto *constants = plan_->plan().kernels()->Get(kernel)->constants())
    for (const dsp::Attr *constant : *constants)
      if (str(constant->name()) == "BLOCK")
        block = constant->i();
  ++stats_.kernelLaunches;
  DSRT_RETURN_IF_ERROR(check(driver_->cuLaunchKernel(functions_[kernel],
                                                     static_cast<unsigned>(rows), 1, 1,
                                                     static_cast<unsigned>(block), 1, 1, 0,
                                                     stream_, args, nullptr),
                             "cuLaunchKernel (sample_topk)"));
  std::vector<float> hostValues(pairs);
  std::vector<int64_t> hostIds(pairs);
  DSRT_RETURN_IF_ERROR(copyToHost(hostValues.data(), valuesOut, pairs * sizeof(float)));
  DSRT_RETURN_IF_ERROR(copyToHost(hostIds.data(), idsOut, pairs * sizeof(int64_t)));
  DSRT_RETURN_IF_ERROR(sync());
  values.assign(static_cast<size_t>(rows), {});
  ids.assign(static_cast<size_t>(rows), {});
  for (int64_t r = 0; r < rows; ++r) {
    values[r].assign(hostValues.begin() + r * count, hostValues.begin() + (r + 1) * count);
    ids[r].assign(hostIds.begin() + r * count, hostIds.begin() + (r + 1) * count);
  }
  return Status::ok();
}

Status CudaSession::measureCopyBandwidth(uint64_t bytes, double &bytesPerSecond) {
  if (bytes == 0)
    return Status::error("the copy measuring memory bandwidth needs a size");
  DSRT_RETURN_IF_ERROR(check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  CUdeviceptr source = 0, destination = 0;
  CUevent start = nullptr, stop = nullptr;
  Status status = check(driver_->cuMemAlloc(&source, bytes), "cuMemAlloc");
  if (status.isOk())
    status = check(driver_->cuMemAlloc(&destination, bytes), "cuMemAlloc");
  if (status.isOk())
    status = check(driver_->cuEventCreate(&start, kEventDefault), "cuEventCreate");
  if (status.isOk())
    status = check(driver_->cuEventCreate(&stop, kEventDefault), "cuEventCreate");
  if (status.isOk())
    status = check(driver_->cuMemsetD8Async(source, 1, bytes, stream_), "cuMemsetD8Async");
  if (status.isOk())  // the first copy outside the timing
    status = check(driver_->cuMemcpyDtoDAsync(destination, source, bytes, stream_),
                   "cuMemcpyDtoDAsync");
  constexpr int kRepeats = 5;
  double best = 0;
  for (int i = 0; i < kRepeats && status.isOk(); ++i) {
    status = check(driver_->cuEventRecord(start, stream_), "cuEventRecord");
    if (status.isOk())
      status = check(driver_->cuMemcpyDtoDAsync(destination, source, bytes, stream_),
                     "cuMemcpyDtoDAsync");
    if (status.isOk())
      status = check(driver_->cuEventRecord(stop, stream_), "cuEventRecord");
    if (status.isOk())
      status = check(driver_->cuEventSynchronize(stop), "cuEventSynchronize");
    float milliseconds = 0;
    if (status.isOk())
      status = check(driver_->cuEventElapsedTime(&milliseconds, start, stop),
                     "cuEventElapsedTime");
    if (status.isOk() && milliseconds > 0)
      best = std::max(best, 2.0 * static_cast<double>(bytes) / (milliseconds * 1e-3));
  }
  uint8_t probe = 0;
  if (status.isOk())
    status = copyToHost(&probe, destination + bytes / 2, 1);
  if (status.isOk())
    status = sync();
  if (status.isOk() && probe != 1)
    status = Status::error("the copy measuring memory bandwidth did not copy");
  if (start)
    driver_->cuEventDestroy(start);
  if (stop)
    driver_->cuEventDestroy(stop);
  if (source)
    driver_->cuMemFree(source);
  if (destination)
    driver_->cuMemFree(destination);
  if (status.isOk())
    bytesPerSecond = best;
  return status;
}

const std::vector<StepPlacement> &CudaSession::lastPlacements(std::string_view name) const {
  static const std::vector<StepPlacement> none;
  const dsp::Program *found = program(name);
  return found ? programs_[programIndex(*found)].placements : none;
}

} // namespace dsrt::cuda
