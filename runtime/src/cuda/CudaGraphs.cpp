// Program inputs and the decode program's CUDA graphs (docs/cuda-backend.md), and the
// serving engine's decode-only steps' over the paged cache: one graph per batch bucket and
// mask-width bucket, captured at the first use of the bucket (after an
// eager run of the same padded shapes, which sizes the scratch pool and uploads the host
// values the graph reads) and replayed after copying the inputs and sequence lengths in.
#include "cuda/CudaSession.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace dsrt::cuda {
namespace {

constexpr int64_t kMaskWidthStep = 64;

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

bool graphsAllowedByEnvironment() {
  const char *value = std::getenv("DSRT_CUDA_GRAPHS");
  return !(value && std::string(value) == "0");
}

} // namespace

int64_t batchBucket(int64_t batch, int64_t maxBatch) {
  int64_t bucket = 1;
  while (bucket < batch)
    bucket *= 2;
  return std::max(batch, std::min(bucket, maxBatch));
}

int64_t maskWidthBucket(int64_t width, int64_t maxWidth) {
  int64_t bucket = std::max<int64_t>((width + kMaskWidthStep - 1) / kMaskWidthStep, 1) *
                   kMaskWidthStep;
  return std::max(width, std::min(bucket, maxWidth));
}

bool CudaSession::graphCandidate(const ProgramState &state, const dsp::Program &program) const {
  if (!options_.graphs || !graphsAllowedByEnvironment() || !state.usesCache ||
      state.idsInput < 0 || state.maskInput < 0)
    return false;
  const std::string name = str(program.name());
  if (name == "decode" || name == "decode_greedy")
    return true;
  // The engine's step over the paged cache, where every row is sampled (a decode-only step):
  // padded to a bucket of rows like decode. A step with prompt chunks samples some rows
  // only, which padding cannot follow, and runs eagerly.
  if (name != "step" || !pagedRowsSet_ || !program.inputs())
    return false;
  const Shape &ids = slots_[program.inputs()->Get(state.idsInput)].inputShape;
  for (size_t i = 0; i < program.inputs()->size(); ++i)
    if (str(plan_->plan().tensors()->Get(program.inputs()->Get(i))->name()) == "logits_rows") {
      const Shape &sampled = slots_[program.inputs()->Get(i)].inputShape;
      return !ids.empty() && sampled.size() == 1 && sampled[0] == ids[0];
    }
  return false;
}

// After the first eager run of a candidate: a graph only when every step ran on the host
// or the device, and the inputs can be padded.
Status CudaSession::decideGraphs(const dsp::Program &program, ProgramState &state) {
  std::string why;
  bool expected = true;  // staged collectives are never captured: no graph is expected
  const auto *tensors = plan_->plan().tensors();
  for (size_t i = 0; i < state.placements.size() && why.empty(); ++i) {
    const dsp::Step &step = *program.steps()->Get(i);
    const std::string &op = compiled_[programIndex(program)][i].op;
    if (state.placements[i] == StepPlacement::Fallback)
      why = "step " + std::to_string(i) + " (" + op + ") runs through the host fallback";
    else if (state.placements[i] == StepPlacement::If)
      why = "step " + std::to_string(i) + " is an If, whose condition is read on the host";
    else if (state.placements[i] != StepPlacement::Host &&
             state.placements[i] != StepPlacement::Device)
      why = "step " + std::to_string(i) + " did not run";
    else if ((op == "tfm.all_reduce" || op == "tfm.all_gather") && deviceCollectives_ &&
             !deviceCollectives_->capturable()) {
      why = "its collectives are staged through host memory";
      expected = false;
    } else if (op == "tfm.attention" &&
               compiled_[programIndex(program)][i].attrs.count("cross") != 0) {
      // The launcher reads the encoder's length on the host; a graph would replay the
      // first request's.
      why = "step " + std::to_string(i) + " is a cross-attention over the encoder's cached "
            "keys, whose count is read on the host";
      expected = false;
    } else if (op == "tfm.attention" && step.inputs() && step.inputs()->size() > 7 &&
               step.inputs()->Get(7) >= 0) {
      // T5's bias is computed for the mask's width, which a graph's bucket pads.
      why = "step " + std::to_string(i) + " adds a bias computed for the mask's width";
      expected = false;
    }
  }
  for (size_t i = 0; program.inputs() && i < program.inputs()->size() && why.empty(); ++i) {
    const dsp::Tensor &tensor = *tensors->Get(program.inputs()->Get(i));
    bool batched = tensor.shape() && tensor.shape()->size() >= 1 &&
                   tensor.shape()->Get(0)->size() < 0 && tensor.max_shape() &&
                   tensor.max_shape()->size() == tensor.shape()->size();
    if (!batched || (static_cast<int>(i) == state.maskInput &&
                     (tensor.shape()->size() != 2 || tensor.shape()->Get(1)->size() >= 0)))
      why = "input '" + str(tensor.name()) + "' cannot be padded to a bucket";
  }
  for (size_t i = 0; program.outputs() && i < program.outputs()->size() && why.empty(); ++i)
    if (slots_[program.outputs()->Get(i)].shape.empty())
      why = "an output has no batch dimension";
  if (!why.empty() && expected && strict_)  // undecided: every run says so
    return Status::error("strict device mode: program '" + str(program.name()) +
                         "' would run without CUDA graphs: " + why);
  state.eligible = why.empty() ? 1 : 0;
  state.noGraphWhy = why;
  state.graphExpected = expected;
  if (!why.empty() && !state.saidEager) {
    state.saidEager = true;
    std::cerr << "dsrt: " << deviceLabel_ << ": program '" << str(program.name())
              << "' runs without CUDA graphs: " << why << "\n";
  }
  return Status::ok();
}

Status CudaSession::uploadInputs(const dsp::Program &program, ProgramState &state,
                                 int64_t padBatch, int64_t padWidth) {
  size_t count = program.inputs() ? program.inputs()->size() : 0;
  for (size_t i = 0; i < count; ++i) {
    Slot &slot = slots_[program.inputs()->Get(i)];
    const uint8_t *data = slot.inputValue.data();
    Shape shape = slot.inputShape;
    std::vector<uint8_t> padded;
    if (padBatch > 0 && !shape.empty()) {
      // Extra rows repeat row 0: valid ids and positions, and a mask row that attends to
      // real keys, so no kernel meets an out-of-range value. They write only cache rows
      // no real sequence reads (rows past the caller's batch) and are dropped by output().
      size_t element = dtypeSize(slot.dtype);
      int64_t rows = shape[0];
      if (rows <= 0 || rows > padBatch)
        return Status::error("cannot pad a batch of " + std::to_string(rows) + " to " +
                             std::to_string(padBatch));
      int64_t width = elementCount(shape) / rows, paddedWidth = width;
      Shape paddedShape = shape;
      paddedShape[0] = padBatch;
      if (static_cast<int>(i) == state.maskInput && padWidth > 0) {
        // Zeros on the left: neither the attention (which aligns the mask's last `total`
        // columns with the keys) nor a cumulative sum over the mask sees them.
        if (shape.size() != 2 || padWidth < width)
          return Status::error("cannot pad the attention mask " + shapeString(shape) +
                               " to width " + std::to_string(padWidth));
        paddedShape[1] = padWidth;
        paddedWidth = padWidth;
      }
      padded.assign(static_cast<size_t>(padBatch * paddedWidth) * element, 0);
      for (int64_t r = 0; r < padBatch; ++r) {
        int64_t source = r < rows ? r : 0;
        std::memcpy(padded.data() + static_cast<size_t>(r * paddedWidth + paddedWidth - width) *
                                        element,
                    data + static_cast<size_t>(source * width) * element,
                    static_cast<size_t>(width) * element);
      }
      data = padded.data();
      shape = paddedShape;
    }
    uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(elementCount(shape), 0)) *
                     dtypeSize(slot.dtype);
    if (bytes > slot.deviceCapacity || !slot.device) {
      // An input without a bound in the plan: the old buffer stays (a graph may read it).
      DSRT_RETURN_IF_ERROR(allocate(bytes, slot.device, "a program input"));
      slot.deviceCapacity = bytes;
      memory_.other += bytes;
    }
    if (bytes)
      DSRT_RETURN_IF_ERROR(copyToDevice(slot.device, data, bytes));
    slot.shape = shape;
    slot.known = slot.deviceValid = true;
    slot.hostKnown = false;
    slot.host = nullptr;
  }
  if (padBatch < 0 && state.usesCache && state.idsInput >= 0 && state.maskInput >= 0) {
    const Shape &ids = slots_[program.inputs()->Get(state.idsInput)].inputShape;
    const Shape &mask = slots_[program.inputs()->Get(state.maskInput)].inputShape;
    if (ids.size() != 2 || mask.empty())
      return Status::error("input_ids must be [batch, tokens] and the mask [batch, width]");
    int64_t total = mask.back();
    DSRT_RETURN_IF_ERROR(writeSequenceLengths(static_cast<int32_t>(total - ids[1]),
                                              static_cast<int32_t>(total),
                                              static_cast<int32_t>(total)));
  }
  return Status::ok();
}

Status CudaSession::runWithGraphs(const dsp::Program &program, ProgramState &state) {
  const auto *tensors = plan_->plan().tensors();
  int index = programIndex(program);
  int maskTensor = program.inputs()->Get(state.maskInput);
  const Shape &ids = slots_[program.inputs()->Get(state.idsInput)].inputShape;
  const Shape &mask = slots_[maskTensor].inputShape;
  if (ids.size() != 2 || mask.size() != 2 || ids[0] != mask[0])
    return Status::error("input_ids must be [batch, tokens] and the mask [batch, width]");
  // The program's rows: max_batch, or the engine's step's own bound where it has one.
  const dsp::Limits *limits = plan_->plan().limits();
  int64_t maxBatch =
      limits ? std::max(limits->max_batch(), limits->max_tokens_per_step()) : ids[0];
  for (int tensor : *program.inputs())
    maxBatch = std::min(maxBatch, tensors->Get(tensor)->max_shape()->Get(0));
  int64_t batch = batchBucket(ids[0], maxBatch);
  int64_t width = maskWidthBucket(mask[1], tensors->Get(maskTensor)->max_shape()->Get(1));
  std::unique_ptr<Graph> &graph = graphs_[{index, batch, width}];
  if (!graph)
    graph = std::make_unique<Graph>();
  state.realBatch = ids[0];
  DSRT_RETURN_IF_ERROR(uploadInputs(program, state, batch, width));
  if (pagedRowsSet_)
    DSRT_RETURN_IF_ERROR(padPagedRows(batch));
  DSRT_RETURN_IF_ERROR(writeSequenceLengths(static_cast<int32_t>(mask[1] - ids[1]),
                                            static_cast<int32_t>(mask[1]),
                                            static_cast<int32_t>(width)));
  if (graph->exec) {
    // The capture did not run the launchers again for this replay: its collectives, if any,
    // are in the graph.
    if (graph->hasCollectives)
      collectivesPending_ = true;
    DSRT_RETURN_IF_ERROR(check(driver_->cuGraphLaunch(graph->exec, stream_), "cuGraphLaunch"));
    ++graphReplays_;
    ++stats_.graphReplays;
    for (size_t o = 0; o < program.outputs()->size(); ++o) {
      Slot &slot = slots_[program.outputs()->Get(o)];
      slot.shape = graph->outputShapes[o];
      slot.known = slot.deviceValid = true;
      slot.hostKnown = false;
      slot.host = nullptr;
    }
    return Status::ok();
  }
  // First use of the bucket: this run's results come from an eager run of the padded
  // shapes, which also prepares everything the capture must not do itself.
  DSRT_RETURN_IF_ERROR(runProgram(program));
  std::string bucket = "batch " + std::to_string(batch) + " and mask width " + std::to_string(width);
  if (graph->failed)
    return strict_ ? Status::error("strict device mode: program '" + str(program.name()) +
                                   "' would run eagerly for " + bucket +
                                   ": its CUDA graph could not be captured")
                   : Status::ok();
  Status captured = capture(program, state, *graph);
  if (!captured.isOk()) {
    graph->failed = true;
    if (strict_)
      return Status::error("strict device mode: the CUDA graph of program '" +
                           str(program.name()) + "' for " + bucket +
                           " could not be captured: " + captured.message());
    std::cerr << "dsrt: " << deviceLabel_ << ": program '" << str(program.name())
              << "' runs eagerly for batch " << batch << " and mask width " << width
              << ": its CUDA graph could not be captured: " << captured.message() << "\n";
  }
  return Status::ok();
}

Status CudaSession::capture(const dsp::Program &program, ProgramState &state, Graph &graph) {
  (void)state;
  captureProblem_.clear();
  DSRT_RETURN_IF_ERROR(check(driver_->cuStreamBeginCapture(stream_, kStreamCaptureModeThreadLocal),
                             "cuStreamBeginCapture"));
  // What the launchers flag now is in the graph; the eager run before may still be on the
  // stream, so its flag is kept for the next wait.
  bool eagerCollectives = collectivesPending_;
  collectivesPending_ = false;
  capturing_ = true;
  Status status = runProgram(program);
  capturing_ = false;
  graph.hasCollectives = collectivesPending_;
  collectivesPending_ = collectivesPending_ || eagerCollectives;
  CUgraph captured = nullptr;
  CUresult ended = driver_->cuStreamEndCapture(stream_, &captured);
  if (status.isOk() && ended != kCudaSuccess)
    status = check(ended, "cuStreamEndCapture");
  CUgraphExec exec = nullptr;
  if (status.isOk())
    status = check(driver_->cuGraphInstantiateWithFlags(&exec, captured, 0),
                   "cuGraphInstantiateWithFlags");
  if (!status.isOk()) {
    if (captured)
      driver_->cuGraphDestroy(captured);
    return status;
  }
  graph.graph = captured;
  graph.exec = exec;
  ++stats_.graphCaptures;
  // Another bucket's host values (shapes differ) must not overwrite what this graph reads.
  for (Slot &slot : slots_)
    if (slot.hostCopy)
      slot.hostCopyCaptured = true;
  graph.outputShapes.clear();
  for (int tensor : *program.outputs())
    graph.outputShapes.push_back(slots_[tensor].shape);
  return Status::ok();
}

bool CudaSession::hasGraph(std::string_view name, int64_t batch, int64_t maskWidth) const {
  const dsp::Program *found = program(name);
  if (!found)
    return false;
  auto it = graphs_.find({programIndex(*found), batch, maskWidth});
  return it != graphs_.end() && it->second->exec;
}

} // namespace dsrt::cuda
