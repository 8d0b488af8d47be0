// tfm.moe's launcher (docs/cuda-backend.md, "Mixture of experts"): the kernels of
// codegen/kernels/TransformerRules.cpp's moeRule, in its slot order: moe_route (routing and
// the per-expert row lists, on the device), moe_experts over the chosen experts' gate-up
// rows, then over their down rows, moe_combine (the weighted sum in expert order), and a
// shared expert's gate-up and down before the combine where the step has one. Every grid is
// fixed by shapes and attributes; the kernels read the counts the routing wrote, so nothing
// here reads device data and the launches may be captured into a graph.
#include "cuda/GpuOps.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dsrt::cuda {
namespace {

constexpr size_t kGateUp = 2, kDown = 3, kGateUpBias = 4, kDownBias = 5, kSharedGateUp = 6,
                 kSharedDown = 7, kSharedGate = 8, kGateUpScales = 9, kDownScales = 10;
constexpr size_t kRouteSlot = 0, kGateUpSlot = 1, kDownSlot = 2, kCombineSlot = 3,
                 kSharedGateUpSlot = 4, kSharedDownSlot = 5;
constexpr int64_t kMaxGridX = 2147483647;

bool isStoredFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

const DeviceTensor *optionalInput(StepContext &context, size_t index) {
  return index < context.inputCount() ? context.input(index) : nullptr;
}

// The inputs of a stacked expert weight's rows: int4 codes (u8) are two a byte.
int64_t rowInputs(const DeviceTensor &weights) {
  return weights.dtype == DType::U8 ? 2 * weights.shape[1] : weights.shape[1];
}

// A moe_experts slot against the weights (and scales, bias) it runs with: the code's shape
// depends on each dtype. `groupSize` gets the int8/int4 group size (the row's inputs for
// float weights).
Status checkExperts(StepContext &context, size_t slot, const DeviceTensor &weights,
                    const DeviceTensor *scales, const DeviceTensor *bias, int64_t hidden,
                    int64_t &groupSize, int &block) {
  const char *what = slot == kGateUpSlot || slot == kSharedGateUpSlot ? "gate_up" : "down";
  if (context.kernelConstant(slot, "WT", -1) != static_cast<int64_t>(weights.dtype) ||
      context.kernelConstant(slot, "HIDDEN", -1) != hidden ||
      context.kernelConstant(slot, "BIAS_DT", -1) !=
          (bias ? static_cast<int64_t>(bias->dtype) : 0))
    return context.error("kernel ", slot, " was generated for other ", what,
                         " weights, hidden size or bias than ", dtypeName(weights.dtype), ", ",
                         hidden, (bias ? " with a bias" : " without a bias"));
  const bool quantized = weights.dtype == DType::I8 || weights.dtype == DType::U8;
  if (!quantized && !isStoredFloat(weights.dtype))
    return context.error(what, " is stored as ", dtypeName(weights.dtype));
  if (quantized != (scales != nullptr))
    return context.error(what, quantized ? " is quantized without scales" : " has scales");
  const int64_t inputs = rowInputs(weights);
  groupSize = inputs;
  if (scales) {
    if (!isStoredFloat(scales->dtype) ||
        context.kernelConstant(slot, "SDT", -1) != static_cast<int64_t>(scales->dtype))
      return context.error(what, "'s scales are ", dtypeName(scales->dtype),
                           ", not the kernel's float dtype");
    if (scales->shape.size() != 2 || scales->shape[0] != weights.shape[0] ||
        scales->shape[1] < 1 || inputs % scales->shape[1] != 0 ||
        (weights.dtype == DType::U8 && (inputs / scales->shape[1]) % 2 != 0))
      return context.error(what, "'s scales do not group its rows in whole ",
                           weights.dtype == DType::U8 ? "pairs of int4 codes" : "inputs");
    groupSize = inputs / scales->shape[1];
  }
  if (bias && (!isStoredFloat(bias->dtype) || bias->elements() != weights.shape[0]))
    return context.error(what, "'s bias must be ", weights.shape[0], " floats");
  const int64_t threads = context.kernelConstant(slot, "BLOCK", -1);
  if (threads < 32 || threads > 1024 || threads % 32 != 0)
    return context.error("kernel ", slot, "'s BLOCK ", threads, " is not a multiple of 32");
  block = static_cast<int>(threads);
  return Status::ok();
}

// The rank's experts under expert parallelism (rank_experts, rank_expert_offsets), else all.
Status rankExperts(StepContext &context, int64_t experts, int64_t &first, int64_t &held) {
  first = 0;
  held = experts;
  std::vector<int64_t> counts, offsets;
  bool hasCounts = false, hasOffsets = false;
  DSRT_RETURN_IF_ERROR(ops::getInts(context.attrs(), "rank_experts", counts, hasCounts));
  DSRT_RETURN_IF_ERROR(ops::getInts(context.attrs(), "rank_expert_offsets", offsets, hasOffsets));
  if (!hasCounts && !hasOffsets)
    return Status::ok();
  const int rank = context.rank();
  if (!hasCounts || !hasOffsets || counts.size() != offsets.size() || rank < 0 ||
      static_cast<size_t>(rank) >= counts.size())
    return context.error("rank_experts and rank_expert_offsets need an entry for rank ", rank);
  held = counts[rank];
  first = offsets[rank];
  if (held < 1 || first < 0 || first + held > experts)
    return context.error("rank ", rank, "'s experts [", first, ", +", held,
                         ") are not among the ", experts);
  return Status::ok();
}

Status launchExperts(StepContext &context, size_t slot, int block, int64_t features,
                     int64_t expertsInGrid, DevicePtr in, const DeviceTensor &weights,
                     const DeviceTensor *scales, const DeviceTensor *bias, DevicePtr counts,
                     DevicePtr offsets, DevicePtr lists, DevicePtr out, long long rows,
                     int inter, int groupSize, int addBias) {
  DevicePtr weightData = weights.data, scaleData = scales ? scales->data : 0,
            biasData = bias ? bias->data : 0;
  void *args[] = {&in,     &weightData, &scaleData, &biasData, &counts, &offsets,
                  &lists,  &out,        &rows,      &inter,    &groupSize, &addBias};
  const int64_t warps = block / 32;
  Dim3 grid;
  grid.x = static_cast<unsigned>(std::min<int64_t>((features + warps - 1) / warps, kMaxGridX));
  grid.y = static_cast<unsigned>(expertsInGrid);
  Dim3 threads;
  threads.x = static_cast<unsigned>(block);
  return context.launch(slot, grid, threads, 0, args);
}

Status runMoe(StepContext &context) {
  const DeviceTensor *x = context.input(0), *logits = context.input(1);
  const DeviceTensor *gateUp = optionalInput(context, kGateUp),
                     *down = optionalInput(context, kDown);
  if (!x || !logits || !gateUp || !down)
    return context.error("needs x, router logits, gate_up and down");
  const DeviceTensor *sharedGateUp = optionalInput(context, kSharedGateUp),
                     *sharedDown = optionalInput(context, kSharedDown),
                     *sharedGate = optionalInput(context, kSharedGate);
  const bool shared = sharedGateUp || sharedDown || sharedGate;
  if (context.kernelCount() != (shared ? 6u : 4u))
    return context.error("the plan has ", context.kernelCount(), " kernels for this step, not ",
                         shared ? 6 : 4);
  const DeviceTensor &out = context.output(0);
  if (x->dtype != DType::F32 || logits->dtype != DType::F32 || out.dtype != DType::F32)
    return context.error("x, the router logits and the output must be f32");
  if (x->shape.empty() || logits->shape.empty() || gateUp->shape.size() != 2 ||
      down->shape.size() != 2)
    return context.error("x, the logits and the 2-D weights have the wrong ranks");
  const int64_t hidden = x->shape.back(), experts = logits->shape.back();
  const int64_t rows = hidden == 0 ? 0 : x->elements() / hidden;
  if (logits->elements() != rows * experts || out.elements() != rows * hidden)
    return context.error("the router logits must be [", rows, ", ", experts,
                         "] and the output like x");
  const int64_t topK = context.kernelConstant(kRouteSlot, "TOP_K", -1);
  if (context.kernelConstant(kRouteSlot, "EXPERTS", -1) != experts ||
      context.kernelConstant(kCombineSlot, "HIDDEN", -1) != hidden ||
      context.kernelConstant(kCombineSlot, "TOP_K", -1) != topK)
    return context.error("the kernels were generated for other experts, top_k or hidden size");
  int64_t attrTopK = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "top_k", 0, attrTopK));
  if (attrTopK != topK || topK < 1 || topK > experts)
    return context.error("top_k ", attrTopK, " is not the kernels' ", topK);
  int64_t first = 0, held = 0;
  DSRT_RETURN_IF_ERROR(rankExperts(context, experts, first, held));
  const int64_t inter = rowInputs(*down);
  if (gateUp->shape[0] != held * 2 * inter || rowInputs(*gateUp) != hidden ||
      down->shape[0] != held * hidden)
    return context.error("gate_up and down are not ", held, " experts of [2 * ", inter, ", ",
                         hidden, "] and [", hidden, ", ", inter, "]");
  const DeviceTensor *gateUpBias = optionalInput(context, kGateUpBias),
                     *downBias = optionalInput(context, kDownBias);
  if (bool(gateUpBias) != bool(downBias))
    return context.error("the experts have both biases or neither");
  int64_t gateUpGroup = 0, downGroup = 0, sharedGroup = 0;
  int block = 0, combineBlock = 0, routeBlock = 0;
  DSRT_RETURN_IF_ERROR(checkExperts(context, kGateUpSlot, *gateUp,
                                    optionalInput(context, kGateUpScales), gateUpBias, hidden,
                                    gateUpGroup, block));
  DSRT_RETURN_IF_ERROR(checkExperts(context, kDownSlot, *down,
                                    optionalInput(context, kDownScales), downBias, hidden,
                                    downGroup, block));
  // The clamped SwiGLU is compiled in: its attributes must be the kernel's.
  float alpha = NAN, limit = NAN;
  DSRT_RETURN_IF_ERROR(ops::getFloat(context.attrs(), "swiglu_alpha", NAN, alpha));
  DSRT_RETURN_IF_ERROR(ops::getFloat(context.attrs(), "swiglu_limit", NAN, limit));
  uint32_t alphaBits = 0, limitBits = 0;
  std::memcpy(&alphaBits, &alpha, sizeof alphaBits);
  std::memcpy(&limitBits, &limit, sizeof limitBits);
  const bool clamped = !std::isnan(limit);
  if (context.kernelConstant(kGateUpSlot, "CLAMPED", -1) != (clamped ? 1 : 0) ||
      (clamped && (context.kernelConstant(kGateUpSlot, "ALPHA_BITS", -1) != alphaBits ||
                   context.kernelConstant(kGateUpSlot, "LIMIT_BITS", -1) != limitBits)))
    return context.error("the kernel was generated for another clamped SwiGLU");
  int64_t sharedInter = 0;
  int sharedBlock = 0;
  if (shared) {
    if (!sharedGateUp || !sharedDown || !sharedGate)
      return context.error("a shared expert needs its gate_up, down and gate (inputs 6-8)");
    if (sharedGateUp->shape.size() != 2 || sharedDown->shape.size() != 2 ||
        sharedGateUp->shape[1] != hidden || sharedDown->shape[0] != hidden ||
        sharedGateUp->shape[0] != 2 * sharedDown->shape[1] ||
        sharedGate->elements() != hidden || !isStoredFloat(sharedGate->dtype))
      return context.error("the shared expert is not [2 * n, ", hidden, "], [", hidden,
                           ", n], [1, ", hidden, "] floats");
    if (context.kernelConstant(kCombineSlot, "SHARED_GATE_DT", -1) !=
        static_cast<int64_t>(sharedGate->dtype))
      return context.error("the kernel was generated for another shared gate dtype");
    sharedInter = sharedDown->shape[1];
    DSRT_RETURN_IF_ERROR(checkExperts(context, kSharedGateUpSlot, *sharedGateUp, nullptr,
                                      nullptr, hidden, sharedGroup, sharedBlock));
    DSRT_RETURN_IF_ERROR(checkExperts(context, kSharedDownSlot, *sharedDown, nullptr, nullptr,
                                      hidden, sharedGroup, sharedBlock));
  } else if (context.kernelConstant(kCombineSlot, "SHARED", -1) != 0) {
    return context.error("the kernels were generated for a shared expert");
  }
  for (size_t slot : {kRouteSlot, kCombineSlot}) {
    const int64_t threads = context.kernelConstant(slot, "BLOCK", -1);
    if (threads < 32 || threads > 1024 || threads % 32 != 0)
      return context.error("kernel ", slot, "'s BLOCK ", threads, " is not a multiple of 32");
    (slot == kRouteSlot ? routeBlock : combineBlock) = static_cast<int>(threads);
  }
  int64_t biasRank = -1;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "down_bias_rank", -1, biasRank));
  const int addDownBias = biasRank < 0 || biasRank == context.rank() ? 1 : 0;
  if (rows == 0)
    return Status::ok();

  // Scratch: the routes, weights and places [rows, k]; the rank's counts and offsets; the
  // lists; each chosen (row, expert)'s activations [places, inter] and result [places,
  // hidden] (places = rows * k at most); the shared expert's [rows, n] and [rows, hidden].
  const int64_t places = rows * topK;
  DevicePtr routes, weights, slots, counts, offsets, lists, activations, results;
  DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(places) * 4, routes));
  DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(places) * 4, weights));
  DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(places) * 4, slots));
  DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(held) * 4, counts));
  DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(held + 1) * 4, offsets));
  DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(places) * 4, lists));
  DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(places * inter) * 4, activations));
  DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(places * hidden) * 4, results));

  long long rowCount = rows;
  int firstExpert = static_cast<int>(first), heldExperts = static_cast<int>(held);
  DevicePtr logitData = logits->data;
  void *routeArgs[] = {&logitData, &rowCount, &firstExpert, &heldExperts, &routes,
                       &weights,   &slots,    &counts,      &offsets,     &lists};
  Dim3 one, routeThreads;
  routeThreads.x = static_cast<unsigned>(routeBlock);
  DSRT_RETURN_IF_ERROR(context.launch(kRouteSlot, one, routeThreads, 0, routeArgs));
  DSRT_RETURN_IF_ERROR(launchExperts(
      context, kGateUpSlot, block, inter, held, x->data, *gateUp,
      optionalInput(context, kGateUpScales), gateUpBias, counts, offsets, lists, activations,
      rowCount, static_cast<int>(inter), static_cast<int>(gateUpGroup), 1));
  DSRT_RETURN_IF_ERROR(launchExperts(
      context, kDownSlot, block, hidden, held, activations, *down,
      optionalInput(context, kDownScales), downBias, counts, offsets, lists, results, rowCount,
      static_cast<int>(inter), static_cast<int>(downGroup), addDownBias));
  DevicePtr sharedResults = 0, sharedGateData = 0;
  if (shared) {
    DevicePtr sharedActivations;
    DSRT_RETURN_IF_ERROR(
        context.scratch(static_cast<size_t>(rows * sharedInter) * 4, sharedActivations));
    DSRT_RETURN_IF_ERROR(
        context.scratch(static_cast<size_t>(rows * hidden) * 4, sharedResults));
    DSRT_RETURN_IF_ERROR(launchExperts(context, kSharedGateUpSlot, sharedBlock, sharedInter, 1,
                                       x->data, *sharedGateUp, nullptr, nullptr, 0, 0, 0,
                                       sharedActivations, rowCount,
                                       static_cast<int>(sharedInter), static_cast<int>(hidden),
                                       0));
    DSRT_RETURN_IF_ERROR(launchExperts(context, kSharedDownSlot, sharedBlock, hidden, 1,
                                       sharedActivations, *sharedDown, nullptr, nullptr, 0, 0,
                                       0, sharedResults, rowCount,
                                       static_cast<int>(sharedInter),
                                       static_cast<int>(sharedInter), 0));
    sharedGateData = sharedGate->data;
  }
  DevicePtr xData = x->data, outData = out.data;
  void *combineArgs[] = {&results,       &routes,         &weights, &slots,   &sharedResults,
                         &sharedGateData, &xData,          &outData, &rowCount};
  Dim3 grid, combineThreads;
  grid.x = static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridX));
  combineThreads.x = static_cast<unsigned>(combineBlock);
  return context.launch(kCombineSlot, grid, combineThreads, 0, combineArgs);
}

} // namespace

void addMoeGpuOps(std::vector<GpuOpInfo> &ops) { ops.push_back({"tfm.moe", runMoe}); }

} // namespace dsrt::cuda
