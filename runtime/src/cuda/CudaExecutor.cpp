// The CUDA session's executor (docs/cuda-backend.md): per step, output shapes from the
// reference kernels' shape functions, then the host (values known from constants and shapes
// alone), the device (a GpuOps.h launcher), or the fallback (inputs downloaded, the
// reference kernel, outputs uploaded).
#include "cuda/CudaSession.h"

#include "cuda/CudaStepContext.h"
#include "ops/OpTraits.h"
#include "plan/PlanViews.h"

#include <algorithm>
#include <cstring>

namespace dsrt::cuda {
namespace {

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

size_t bytesOf(DType dtype, const Shape &shape) {
  int64_t elements = elementCount(shape);
  return elements > 0 ? static_cast<size_t>(elements) * dtypeSize(dtype) : 0;
}

bool isSessionAttention(const std::string &op, const dsp::Step &step, const ops::AttrMap &attrs) {
  if (op != "tfm.attention")
    return false;
  bool hasPast = step.inputs() && step.inputs()->size() > 4 && step.inputs()->Get(4) >= 0;
  int64_t layer = -1;
  return !hasPast && ops::getInt(attrs, "cache_layer", -1, layer).isOk() && layer >= 0;
}

} // namespace

std::string CudaSession::describe(const dsp::Step &step, size_t index) const {
  std::string where = "step " + std::to_string(index) + " (" + str(step.op());
  if (step.location() && step.location()->size())
    where += " '" + step.location()->str() + "'";
  return where + ")";
}

Status CudaSession::run(std::string_view programName) {
  const dsp::Program *found = program(programName);
  if (!found)
    return Status::error(plan_->path() + ": the plan has no program '" +
                         std::string(programName) + "'");
  const auto &only = options_.onlyPrograms;
  if (!only.empty() && std::find(only.begin(), only.end(), programName) == only.end())
    return Status::error(plan_->path() + ": this session runs only its chosen programs (its "
                                         "arena is sized for them), not '" +
                         std::string(programName) + "'");
  if (found->inputs())
    for (int tensorIndex : *found->inputs())
      if (!slots_[tensorIndex].inputSet)
        return Status::error("input '" +
                             str(plan_->plan().tensors()->Get(tensorIndex)->name()) +
                             "' of program '" + std::string(programName) + "' is not set");
  ProgramState &state = programs_[programIndex(*found)];
  Status status = check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  if (status.isOk())
    status = ensureArena(*found);
  // Activations of an earlier run are stale.
  for (Slot &slot : slots_)
    if (slot.kind == dsp::TensorKind::activation || slot.kind == dsp::TensorKind::dynamic) {
      slot.known = slot.deviceValid = slot.hostKnown = false;
      slot.host = nullptr;
    }
  state.realBatch = -1;
  sequenceLengthsSet_ = false;
  currentUsesCache_ = state.usesCache;
  runningProgram_.assign(programName.data(), programName.size());
  if (status.isOk()) {
    bool candidate = graphCandidate(state, *found);
    if (candidate && state.eligible == 0 && strict_ && state.graphExpected) {
      // Decided before strict mode was turned on.
      status = Status::error("strict device mode: program '" + std::string(programName) +
                             "' would run without CUDA graphs: " + state.noGraphWhy);
    } else if (candidate && state.eligible == 1) {
      status = runWithGraphs(*found, state);
    } else {
      status = uploadInputs(*found, state, -1, -1);
      if (status.isOk())
        status = runProgram(*found);
      // The first run says whether the program can be captured at all.
      if (status.isOk() && candidate && state.eligible < 0)
        status = decideGraphs(*found, state);
    }
  }
  // Returns when the outputs can be read; an error leaves nothing in flight either.
  Status synced = sync();
  if (status.isOk())
    status = synced;
  return status.isOk() ? status
                       : Status::error(plan_->path() + ": program '" +
                                       std::string(programName) + "' (" + deviceLabel_ +
                                       "): " + status.message());
}

Status CudaSession::runProgram(const dsp::Program &program) {
  int index = programIndex(program);
  std::vector<CompiledStep> &compiled = compiled_[index];
  std::vector<StepPlacement> &placements = programs_[index].placements;
  if (!program.steps())
    return Status::ok();
  for (size_t i = 0; i < program.steps()->size(); ++i) {
    const dsp::Step &step = *program.steps()->Get(i);
    for (ScratchBlock &block : scratch_)
      block.used = 0;
    Status status = compiled[i].op == "If" ? runIf(step, placements[i])
                                           : runStep(step, compiled[i], placements[i]);
    // Kernel faults surface at the next synchronisation; DSRT_CUDA_SYNC_STEPS=1 makes that
    // the step's own, so the error names the step that faulted.
    if (status.isOk() && syncEachStep_ && !capturing_)
      status = sync();
    if (!status.isOk())
      return Status::error(describe(step, i) + ": " + status.message());
  }
  return Status::ok();
}

Status CudaSession::runStep(const dsp::Step &step, CompiledStep &compiled,
                            StepPlacement &placement) {
  size_t inputCount = step.inputs() ? step.inputs()->size() : 0;
  std::vector<TensorRef> inputRefs(inputCount);
  ops::Inputs inputs;
  bool allHost = true;
  bool readsValues = ops::readsInputValues(compiled.op);
  for (size_t i = 0; i < inputCount; ++i) {
    int tensor = step.inputs()->Get(i);
    if (tensor < 0) {
      inputs.push_back(nullptr);
      continue;
    }
    const Slot &slot = slots_[tensor];
    if (!slot.known)
      return Status::error("input " + std::to_string(i) + " has no value yet");
    inputRefs[i] = {slot.dtype, slot.shape,
                    slot.hostKnown ? const_cast<uint8_t *>(slot.host) : nullptr};
    if (!slot.hostKnown && readsValues)
      allHost = false;
    inputs.push_back(&inputRefs[i]);
  }
  size_t outputCount = step.outputs() ? step.outputs()->size() : 0;
  ops::SessionState state;
  state.cache = hostKvMirror_.layers.empty() ? nullptr : &hostKvMirror_;
  state.collectives = options_.collectives;
  std::vector<ops::OutputSpec> specs;
  Status inferred =
      ops::inferShapes(compiled.op, compiled.attrs, inputs, outputCount, specs, &state);
  if (inferred.isOk() && specs.size() != outputCount)
    return Status::error("the kernel gives " + std::to_string(specs.size()) + " outputs for " +
                         std::to_string(outputCount));
  bool unknownValue =
      !inferred.isOk() && inferred.message().find(ops::kUnknownValue) != std::string::npos;
  if (!inferred.isOk() && (!unknownValue || allHost))
    return inferred;

  if (allHost) {
    // Shape arithmetic on constants: the values depend on shapes alone, so a captured
    // graph may bake them in.
    ops::Outputs outputs;
    std::vector<TensorRef> outputRefs(outputCount);
    for (size_t o = 0; o < outputCount; ++o) {
      int tensor = step.outputs()->Get(o);
      Slot &slot = slots_[tensor];
      if (specs[o].dtype != slot.dtype)
        return Status::error("output " + std::to_string(o) + " is " +
                             dtypeName(specs[o].dtype) + " but the plan expects " +
                             dtypeName(slot.dtype));
      if (elementCount(specs[o].shape) < 0)
        return Status::error("output " + std::to_string(o) + " has an invalid shape " +
                             shapeString(specs[o].shape));
      slot.hostStorage.assign(std::max<size_t>(bytesOf(slot.dtype, specs[o].shape), 1), 0);
      slot.shape = specs[o].shape;
      slot.host = slot.hostStorage.data();
      slot.known = slot.hostKnown = true;
      slot.deviceValid = false;
      outputRefs[o] = {slot.dtype, slot.shape, slot.hostStorage.data()};
      outputs.push_back(&outputRefs[o]);
    }
    // Shape and Size read no values: their device inputs need no download.
    std::vector<uint8_t> placeholder(1);
    for (size_t i = 0; i < inputCount; ++i)
      if (inputs[i] && !inputRefs[i].data)
        inputRefs[i].data = placeholder.data();
    DSRT_RETURN_IF_ERROR(ops::compute(compiled.op, compiled.attrs, inputs, outputs, &state));
    placement = StepPlacement::Host;
    return Status::ok();
  }

  if (inferred.isOk() && compiled.launcher && !compiled.fallbackOnly) {
    CudaStepContext context(*this, step, compiled, currentUsesCache_);
    context.inputs.resize(inputCount);
    context.present.assign(inputCount, false);
    context.hostInputs.resize(inputCount);
    context.hostPresent.assign(inputCount, false);
    for (size_t i = 0; i < inputCount; ++i) {
      int tensor = step.inputs()->Get(i);
      if (tensor < 0)
        continue;
      DSRT_RETURN_IF_ERROR(deviceView(tensor, compiled.readsStored(i), context.inputs[i]));
      context.present[i] = true;
      if (slots_[tensor].hostKnown) {
        context.hostInputs[i] = inputRefs[i];
        context.hostPresent[i] = true;
      }
    }
    // A view of a program input (GPT-2's Reshape of input_ids) is the input's buffer: the
    // plan aliases views inside the arena only, and a program input has a buffer of its
    // own. Set at every run, since a larger input moves to a new buffer; runContiguousCopy
    // then launches nothing.
    if (outputCount == 1 && viewsProgramInput(plan_->plan(), step)) {
      const Slot &in = slots_[step.inputs()->Get(0)];
      Slot &out = slots_[step.outputs()->Get(0)];
      if (in.deviceValid && !in.hostKnown) {
        out.device = in.device;
        out.deviceCapacity = in.deviceCapacity;
      }
    }
    for (size_t o = 0; o < outputCount; ++o) {
      int tensor = step.outputs()->Get(o);
      DSRT_RETURN_IF_ERROR(placeDeviceOutput(tensor, specs[o]));
      const Slot &slot = slots_[tensor];
      context.outputs.push_back({slot.dtype, slot.shape, slot.device});
    }
    if (isSessionAttention(compiled.op, step, compiled.attrs) && !sequenceLengthsSet_) {
      // No mask and ids roles in the plan's model table: the attention's own inputs say.
      if (capturing_)
        return Status::error("the sequence lengths are unknown while capturing");
      const TensorRef *query = inputs[0];
      const TensorRef *mask = inputCount > 3 ? inputs[3] : nullptr;
      if (!query || query->shape.size() < 2 || !mask || mask->shape.empty())
        return Status::error("a session-cache attention needs a query and a padding mask");
      int64_t fresh = query->shape[1], total = mask->shape.back();
      DSRT_RETURN_IF_ERROR(writeSequenceLengths(static_cast<int32_t>(total - fresh),
                                                static_cast<int32_t>(total),
                                                static_cast<int32_t>(total)));
    }
    Status launched = compiled.launcher(context);
    if (launched.isOk()) {
      for (size_t o = 0; o < outputCount; ++o)
        slots_[step.outputs()->Get(o)].deviceValid = true;
      placement = StepPlacement::Device;
      return Status::ok();
    }
    if (!context.missingKernel)
      return launched;
    // The plan has no kernel for this step: from now on it is a fallback step.
    compiled.fallbackOnly = true;
  }
  if (capturing_) {
    captureProblem_ = "a step runs through the host fallback";
    return Status::error(captureProblem_);
  }
  if (strict_)
    return Status::error(
        std::string("strict device mode: the step would run through the host fallback (") +
        (!compiled.launcher       ? "no GPU launcher implements the op"
         : compiled.fallbackOnly ? "the plan has no GPU kernel for it"
                                 : "its output shapes depend on values on the device") +
        ")");
  DSRT_RETURN_IF_ERROR(runFallback(step, compiled, inputs, inputRefs, specs));
  ++stats_.fallbackSteps;
  placement = StepPlacement::Fallback;
  return Status::ok();
}

Status CudaSession::runFallback(const dsp::Step &step, CompiledStep &compiled,
                                ops::Inputs &inputs, std::vector<TensorRef> &inputRefs,
                                std::vector<ops::OutputSpec> &specs) {
  size_t inputCount = inputRefs.size();
  std::vector<std::vector<uint8_t>> downloads(inputCount);
  for (size_t i = 0; i < inputCount; ++i) {
    int tensor = step.inputs()->Get(i);
    if (tensor >= 0)
      DSRT_RETURN_IF_ERROR(hostView(tensor, inputRefs[i], downloads[i]));
  }
  DSRT_RETURN_IF_ERROR(sync());  // the downloads have landed
  ops::SessionState state;
  state.cache = hostKvMirror_.layers.empty() ? nullptr : &hostKvMirror_;
  state.collectives = options_.collectives;
  size_t outputCount = step.outputs() ? step.outputs()->size() : 0;
  specs.clear();
  DSRT_RETURN_IF_ERROR(
      ops::inferShapes(compiled.op, compiled.attrs, inputs, outputCount, specs, &state));
  if (specs.size() != outputCount)
    return Status::error("the kernel gives " + std::to_string(specs.size()) + " outputs for " +
                         std::to_string(outputCount));
  std::vector<std::vector<uint8_t>> results(outputCount);
  std::vector<TensorRef> outputRefs(outputCount);
  ops::Outputs outputs;
  for (size_t o = 0; o < outputCount; ++o) {
    int tensor = step.outputs()->Get(o);
    DSRT_RETURN_IF_ERROR(placeDeviceOutput(tensor, specs[o]));
    results[o].assign(std::max<size_t>(bytesOf(specs[o].dtype, specs[o].shape), 1), 0);
    outputRefs[o] = {specs[o].dtype, specs[o].shape, results[o].data()};
    outputs.push_back(&outputRefs[o]);
  }
  int64_t layer = -1;
  if (isSessionAttention(compiled.op, step, compiled.attrs)) {
    DSRT_RETURN_IF_ERROR(ops::getInt(compiled.attrs, "cache_layer", -1, layer));
    DSRT_RETURN_IF_ERROR(downloadKvLayer(layer));
  }
  DSRT_RETURN_IF_ERROR(ops::compute(compiled.op, compiled.attrs, inputs, outputs, &state));
  if (layer >= 0)
    DSRT_RETURN_IF_ERROR(uploadKvLayer(layer));
  for (size_t o = 0; o < outputCount; ++o) {
    Slot &slot = slots_[step.outputs()->Get(o)];
    size_t bytes = bytesOf(slot.dtype, slot.shape);
    if (bytes)
      DSRT_RETURN_IF_ERROR(copyToDevice(slot.device, results[o].data(), bytes));
    slot.deviceValid = true;
  }
  // The results' host buffers die here: the pageable copies above have already staged
  // them, but a sync keeps that independent of the driver's staging policy.
  return sync();
}

Status CudaSession::placeDeviceOutput(int tensor, const ops::OutputSpec &spec) {
  Slot &slot = slots_[tensor];
  if (spec.dtype != slot.dtype)
    return Status::error("output tensor " + std::to_string(tensor) + " is " +
                         dtypeName(spec.dtype) + " but the plan expects " +
                         dtypeName(slot.dtype));
  if (elementCount(spec.shape) < 0)
    return Status::error("output shape " + shapeString(spec.shape) + " is invalid");
  uint64_t bytes = bytesOf(spec.dtype, spec.shape);
  if (slot.kind == dsp::TensorKind::dynamic && bytes > slot.deviceCapacity) {
    // Not bounded at compile time: sized now. The old buffer is kept (a graph may read it).
    if (capturing_) {
      captureProblem_ = "a dynamic tensor grows";
      return Status::error(captureProblem_);
    }
    DSRT_RETURN_IF_ERROR(allocate(bytes, slot.device, "a dynamic tensor"));
    slot.deviceCapacity = bytes;
    memory_.other += bytes;
  }
  if (bytes > slot.deviceCapacity || (!slot.device && bytes))
    return Status::error("output of shape " + shapeString(spec.shape) + " needs " +
                         std::to_string(bytes) + " bytes, more than the " +
                         std::to_string(slot.deviceCapacity) +
                         " its arena slot has under the plan's limits");
  slot.shape = spec.shape;
  slot.known = true;
  slot.deviceValid = false;
  slot.hostKnown = false;
  slot.host = nullptr;
  return Status::ok();
}

Status CudaSession::deviceView(int tensor, bool storedWeights, DeviceTensor &out) {
  Slot &slot = slots_[tensor];
  if (slot.kind == dsp::TensorKind::weight) {
    if (!storedWeights && slot.deviceDType != slot.dtype && slot.converted)
      out = {slot.dtype, slot.shape, slot.converted};
    else
      out = {slot.deviceDType, slot.shape, slot.device};
    return Status::ok();
  }
  if (slot.hostKnown) {
    DSRT_RETURN_IF_ERROR(uploadHostValue(slot));
    out = {slot.dtype, slot.shape, slot.hostCopy};
    return Status::ok();
  }
  if (!slot.deviceValid)
    return Status::error("tensor " + std::to_string(tensor) + " has no value on the device");
  out = {slot.dtype, slot.shape, slot.device};
  return Status::ok();
}

Status CudaSession::uploadHostValue(Slot &slot) {
  size_t bytes = bytesOf(slot.dtype, slot.shape);
  if (slot.hostCopy && slot.hostCopyBytes.size() == bytes &&
      (bytes == 0 || std::memcmp(slot.hostCopyBytes.data(), slot.host, bytes) == 0))
    return Status::ok();
  if (capturing_) {
    captureProblem_ = "a host value changed between the runs before and in the capture";
    return Status::error(captureProblem_);
  }
  if (bytes > slot.hostCopyCapacity || !slot.hostCopy || slot.hostCopyCaptured) {
    DSRT_RETURN_IF_ERROR(allocate(std::max<size_t>(bytes, 1), slot.hostCopy, "a host value"));
    slot.hostCopyCapacity = std::max<size_t>(bytes, 1);
    slot.hostCopyCaptured = false;
    memory_.other += slot.hostCopyCapacity;
  }
  if (bytes)
    DSRT_RETURN_IF_ERROR(copyToDevice(slot.hostCopy, slot.host, bytes));
  slot.hostCopyBytes.assign(slot.host, slot.host + bytes);
  return Status::ok();
}

Status CudaSession::hostView(int tensor, TensorRef &out, std::vector<uint8_t> &download) {
  Slot &slot = slots_[tensor];
  if (slot.hostKnown) {
    out = {slot.dtype, slot.shape, const_cast<uint8_t *>(slot.host)};
    return Status::ok();
  }
  if (slot.kind == dsp::TensorKind::weight) {
    const dsp::Tensor &entry = *plan_->plan().tensors()->Get(tensor);
    TensorRef stored = section_->weight(entry.weight_index());
    if (stored.dtype == slot.dtype) {
      out = stored;
      return Status::ok();
    }
    if (slot.hostConverted.empty()) {
      slot.hostConverted.resize(std::max<size_t>(bytesOf(slot.dtype, stored.shape), 1));
      if (!convertFloats(stored.dtype, stored.data, slot.dtype, slot.hostConverted.data(),
                         stored.elements()))
        return Status::error("cannot convert weight '" + str(entry.name()) + "' from " +
                             dtypeName(stored.dtype) + " to " + dtypeName(slot.dtype));
    }
    out = {slot.dtype, stored.shape, slot.hostConverted.data()};
    return Status::ok();
  }
  if (!slot.deviceValid)
    return Status::error("tensor " + std::to_string(tensor) + " has no value on the device");
  size_t bytes = bytesOf(slot.dtype, slot.shape);
  download.assign(std::max<size_t>(bytes, 1), 0);
  if (bytes)
    DSRT_RETURN_IF_ERROR(copyToHost(download.data(), slot.device, bytes));
  out = {slot.dtype, slot.shape, download.data()};
  return Status::ok();
}

Status CudaSession::downloadKvLayer(int64_t layer) {
  if (layer < 0 || static_cast<size_t>(layer) >= kvLayers_.size())
    return Status::error("KV cache layer " + std::to_string(layer) + " does not exist");
  const DeviceKvLayer &device = kvLayers_[layer];
  ops::KvCacheLayer &host = hostKvMirror_.layers[layer];
  const size_t bytes = static_cast<size_t>(device.batch * device.kvHeads * device.capacity *
                                           device.headDim) *
                       dtypeSize(device.dtype);
  // Floats as storage, whatever the cache's dtype (f16/bf16 layers use half of them).
  std::vector<float> &keys = hostKvStorage_[2 * layer], &values = hostKvStorage_[2 * layer + 1];
  keys.resize((bytes + sizeof(float) - 1) / sizeof(float));
  values.resize(keys.size());
  host.key = keys.data();
  host.value = values.data();
  DSRT_RETURN_IF_ERROR(copyToHost(keys.data(), device.key, bytes));
  DSRT_RETURN_IF_ERROR(copyToHost(values.data(), device.value, bytes));
  return sync();
}

Status CudaSession::uploadKvLayer(int64_t layer) {
  const DeviceKvLayer &device = kvLayers_[layer];
  const std::vector<float> &keys = hostKvStorage_[2 * layer];
  const std::vector<float> &values = hostKvStorage_[2 * layer + 1];
  const size_t bytes = static_cast<size_t>(device.batch * device.kvHeads * device.capacity *
                                           device.headDim) *
                       dtypeSize(device.dtype);
  DSRT_RETURN_IF_ERROR(copyToDevice(device.key, keys.data(), bytes));
  DSRT_RETURN_IF_ERROR(copyToDevice(device.value, values.data(), bytes));
  return sync();
}

Status CudaSession::writeSequenceLengths(int32_t past, int32_t total, int32_t maskWidth) {
  if (past < 0 || total < past || maskWidth < total)
    return Status::error("invalid sequence lengths: past " + std::to_string(past) +
                         ", total " + std::to_string(total) + ", mask width " +
                         std::to_string(maskWidth));
  hostSequenceLengths_[kPast] = past;
  hostSequenceLengths_[kTotal] = total;
  hostSequenceLengths_[kMaskWidth] = maskWidth;
  // Staged from pageable memory: the source may change as soon as the call returns.
  DSRT_RETURN_IF_ERROR(
      copyToDevice(sequenceLengths_, hostSequenceLengths_, sizeof hostSequenceLengths_));
  sequenceLengthsSet_ = true;
  return Status::ok();
}

Status CudaSession::runIf(const dsp::Step &step, StepPlacement &placement) {
  if (!step.inputs() || step.inputs()->size() != 1 || !step.branches() ||
      step.branches()->size() != 2)
    return Status::error("If needs one condition input and two branches");
  Slot &cond = slots_[step.inputs()->Get(0)];
  if (!cond.known || cond.dtype != DType::Bool || elementCount(cond.shape) != 1)
    return Status::error("the condition must be a single bool");
  uint8_t value = 0;
  if (cond.hostKnown) {
    value = cond.host[0];
  } else {
    // Reading the condition is a sync: programs with an If are never captured.
    if (capturing_) {
      captureProblem_ = "an If reads its condition on the host";
      return Status::error(captureProblem_);
    }
    std::vector<uint8_t> download;
    TensorRef view;
    DSRT_RETURN_IF_ERROR(hostView(step.inputs()->Get(0), view, download));
    DSRT_RETURN_IF_ERROR(sync());
    value = static_cast<const uint8_t *>(view.data)[0];
  }
  const dsp::Program &branch = *plan_->plan().programs()->Get(step.branches()->Get(value ? 0 : 1));
  DSRT_RETURN_IF_ERROR(runProgram(branch));
  size_t outputs = step.outputs() ? step.outputs()->size() : 0;
  if (!branch.branch_outputs() || branch.branch_outputs()->size() != outputs)
    return Status::error("the branch yields a different number of values than If has outputs");
  for (size_t o = 0; o < outputs; ++o) {
    int fromIndex = branch.branch_outputs()->Get(o), toIndex = step.outputs()->Get(o);
    if (fromIndex == toIndex)
      continue;
    Slot &from = slots_[fromIndex];
    if (!from.known || from.dtype != slots_[toIndex].dtype)
      return Status::error("branch output " + std::to_string(o) + " does not fit the If's slot");
    if (from.hostKnown) {
      Slot &to = slots_[toIndex];
      to.hostStorage.assign(from.host, from.host + bytesOf(from.dtype, from.shape));
      to.host = to.hostStorage.data();
      to.shape = from.shape;
      to.known = to.hostKnown = true;
      to.deviceValid = false;
      continue;
    }
    DeviceTensor source;
    DSRT_RETURN_IF_ERROR(deviceView(fromIndex, false, source));
    DSRT_RETURN_IF_ERROR(placeDeviceOutput(toIndex, {from.dtype, from.shape}));
    Slot &to = slots_[toIndex];
    if (size_t bytes = bytesOf(to.dtype, to.shape))
      DSRT_RETURN_IF_ERROR(copy2D(to.device, bytes, source.data, bytes, bytes, 1));
    to.deviceValid = true;
  }
  placement = StepPlacement::If;
  return Status::ok();
}

} // namespace dsrt::cuda
