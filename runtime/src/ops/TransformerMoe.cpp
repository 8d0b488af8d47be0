// tfm.moe on the CPU (docs/transformer-ops.md, "Mixture of experts"): each token's router
// scores choose its top-k experts, and only those run. The tokens are grouped by expert, so
// each chosen expert's weights are read once per step whatever its token count: a decode
// step reads k experts of E, a prompt each expert its tokens chose. The weights are read as
// stored (f32, f16, bf16): the fast kernels multiply in place, the reference widens one
// expert at a time.
#include "ops/FloatAccess.h"
#include "ops/Kernel.h"
#include "ops/MoeRouting.h"
#include "ops/ThreadPool.h"
#include "ops/TransformerCommon.h"
#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace dsrt::ops {
namespace {

using fast::Activation;

constexpr size_t kGateUpBias = 4, kDownBias = 5;
// A shared expert (Qwen2-MoE's): [gate; up], down, and its sigmoid gate's [1, hidden] weight.
constexpr size_t kSharedGateUp = 6, kSharedDown = 7, kSharedGate = 8;
// int8 experts' scales [rows, groups], stacked as their weights.
constexpr size_t kGateUpScales = 9, kDownScales = 10;

struct MoeShape {
  int64_t rows = 0, hidden = 0, experts = 0, inter = 0, topK = 0;
  // The experts this rank's weights hold: all, or under expert parallelism
  // [firstExpert, +heldExperts) (rank_experts, rank_expert_offsets).
  int64_t firstExpert = 0, heldExperts = 0;
  // GPT-OSS's clamped SwiGLU where both are set (NaN otherwise).
  float swigluAlpha = 0, swigluLimit = 0;
  bool addsDownBias = true;
  bool clamped() const { return !std::isnan(swigluLimit); }
};

// The rank's experts under expert parallelism; all of them otherwise.
Status rankExperts(const KernelContext &ctx, MoeShape &shape) {
  shape.firstExpert = 0;
  shape.heldExperts = shape.experts;
  std::vector<int64_t> counts, offsets;
  bool hasCounts = false, hasOffsets = false;
  DSRT_RETURN_IF_ERROR(getInts(ctx.attrs, "rank_experts", counts, hasCounts));
  DSRT_RETURN_IF_ERROR(getInts(ctx.attrs, "rank_expert_offsets", offsets, hasOffsets));
  if (!hasCounts && !hasOffsets)
    return Status::ok();
  const int rank = ctx.collectives ? ctx.collectives->rank() : 0;
  if (!hasCounts || !hasOffsets || counts.size() != offsets.size() || rank < 0 ||
      static_cast<size_t>(rank) >= counts.size())
    return ctx.error("rank_experts and rank_expert_offsets need an entry for rank ", rank);
  shape.heldExperts = counts[rank];
  shape.firstExpert = offsets[rank];
  if (shape.heldExperts < 1 || shape.firstExpert < 0 ||
      shape.firstExpert + shape.heldExperts > shape.experts)
    return ctx.error("rank ", rank, "'s experts [", shape.firstExpert, ", +", shape.heldExperts,
                     ") are not among the ", shape.experts);
  return Status::ok();
}

// The inputs of a stacked expert weight's rows: int4 codes (U8) are two to a byte.
int64_t expertInputs(const TensorRef &stacked) {
  return stacked.dtype == DType::U8 ? 2 * stacked.shape[1] : stacked.shape[1];
}

Status moeShape(const KernelContext &ctx, MoeShape &shape) {
  const TensorRef &x = *ctx.input(0), &logits = *ctx.input(1);
  const TensorRef &gateUp = *ctx.input(2), &down = *ctx.input(3);
  if (x.shape.empty() || logits.shape.size() != x.shape.size() ||
      !std::equal(x.shape.begin(), x.shape.end() - 1, logits.shape.begin()))
    return ctx.error("router logits ", shapeString(logits.shape),
                     " must have the input's leading dimensions ", shapeString(x.shape));
  shape.hidden = x.shape.back();
  shape.experts = logits.shape.back();
  shape.rows = shape.hidden == 0 ? 0 : x.elements() / shape.hidden;
  if (shape.experts < 1)
    return ctx.error("there are no experts");
  if (gateUp.shape.size() != 2 || down.shape.size() != 2 || gateUp.dtype != down.dtype)
    return ctx.error("gate_up and down must be 2-D weights of one dtype");
  const TensorRef *gateUpScales = ctx.input(kGateUpScales), *downScales = ctx.input(kDownScales);
  const bool quantized = gateUp.dtype == DType::I8 || gateUp.dtype == DType::U8;
  if (quantized != bool(gateUpScales) || quantized != bool(downScales))
    return ctx.error("int8 and int4 experts need their scales (inputs 9 and 10), float ones "
                     "none");
  for (auto [weights, scales] : {std::pair{&gateUp, gateUpScales}, std::pair{&down, downScales}})
    if (scales && (scales->shape.size() != 2 || scales->shape[0] != weights->shape[0] ||
                   scales->shape[1] < 1 || expertInputs(*weights) % scales->shape[1] != 0 ||
                   (weights->dtype == DType::U8 &&
                    (expertInputs(*weights) / scales->shape[1]) % 2 != 0)))
      return ctx.error("scales ", shapeString(scales->shape), " do not group the rows of ",
                       shapeString(weights->shape), " in whole ",
                       weights->dtype == DType::U8 ? "pairs of int4 codes" : "inputs");
  DSRT_RETURN_IF_ERROR(rankExperts(ctx, shape));
  shape.inter = expertInputs(down);
  const int64_t held = shape.heldExperts;
  if (gateUp.shape[0] != held * 2 * shape.inter || expertInputs(gateUp) != shape.hidden ||
      down.shape[0] != held * shape.hidden)
    return ctx.error("gate_up ", shapeString(gateUp.shape), " and down ",
                     shapeString(down.shape), " are not ", held, " experts of [2 * ",
                     shape.inter, ", ", shape.hidden, "] and [", shape.hidden, ", ",
                     shape.inter, "]");
  const TensorRef *gateUpBias = ctx.input(kGateUpBias), *downBias = ctx.input(kDownBias);
  if (bool(gateUpBias) != bool(downBias))
    return ctx.error("the experts have both biases or neither");
  if (gateUpBias) {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, kGateUpBias, "gate_up bias", kFloatTypes));
    DSRT_RETURN_IF_ERROR(checkDType(ctx, kDownBias, "down bias", kFloatTypes));
    if (gateUpBias->shape != Shape{gateUp.shape[0]} || downBias->shape != Shape{down.shape[0]})
      return ctx.error("the biases must be [", gateUp.shape[0], "] and [", down.shape[0],
                       "], not ", shapeString(gateUpBias->shape), " and ",
                       shapeString(downBias->shape));
  }
  const TensorRef *sharedGateUp = ctx.input(kSharedGateUp), *sharedDown = ctx.input(kSharedDown),
                  *sharedGate = ctx.input(kSharedGate);
  if (sharedGateUp || sharedDown || sharedGate) {
    if (!sharedGateUp || !sharedDown || !sharedGate)
      return ctx.error("a shared expert needs its gate_up, down and gate weights (inputs 6-8)");
    for (size_t index : {kSharedGateUp, kSharedDown, kSharedGate})
      DSRT_RETURN_IF_ERROR(checkDType(ctx, index, "shared expert weight", kFloatTypes));
    if (sharedGateUp->shape.size() != 2 || sharedDown->shape.size() != 2 ||
        sharedGateUp->shape[1] != shape.hidden || sharedDown->shape[0] != shape.hidden ||
        sharedGateUp->shape[0] != 2 * sharedDown->shape[1] ||
        sharedGate->shape != Shape{1, shape.hidden})
      return ctx.error("the shared expert ", shapeString(sharedGateUp->shape), ", ",
                       shapeString(sharedDown->shape), ", ", shapeString(sharedGate->shape),
                       " is not [2 * n, ", shape.hidden, "], [", shape.hidden, ", n], [1, ",
                       shape.hidden, "]");
  }
  // GPT-OSS's clamped SwiGLU: both or neither, as tfm.moe's verifier requires.
  const float none = std::numeric_limits<float>::quiet_NaN();
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "swiglu_alpha", none, shape.swigluAlpha));
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "swiglu_limit", none, shape.swigluLimit));
  if (std::isnan(shape.swigluAlpha) != std::isnan(shape.swigluLimit))
    return ctx.error("swiglu_alpha and swiglu_limit come together");
  if (shape.clamped() && (!std::isfinite(shape.swigluAlpha) ||
                          !std::isfinite(shape.swigluLimit) || !(shape.swigluLimit > 0)))
    return ctx.error("the clamped SwiGLU needs a finite alpha and a positive limit, not ",
                     shape.swigluAlpha, " and ", shape.swigluLimit);
  // Under tensor parallelism one rank adds the down biases, so that the reduce holds them once.
  int64_t biasRank = -1;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "down_bias_rank", -1, biasRank));
  const int rank = ctx.collectives ? ctx.collectives->rank() : 0;
  shape.addsDownBias = biasRank < 0 || biasRank == rank;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "top_k", 0, shape.topK));
  if (shape.topK < 1 || shape.topK > shape.experts)
    return ctx.error("top_k ", shape.topK, " must be between 1 and the ", shape.experts,
                     " experts");
  return Status::ok();
}

Status inferMoe(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "input", kFloatTypes));
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "router logits", kFloatTypes));
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 2, "gate_up", kFloatTypes | maskOf({DType::I8, DType::U8})));
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 3, "down", kFloatTypes | maskOf({DType::I8, DType::U8})));
  for (size_t index : {kGateUpScales, kDownScales})
    if (ctx.input(index))
      DSRT_RETURN_IF_ERROR(checkDType(ctx, index, "scales", kFloatTypes));
  MoeShape shape;
  DSRT_RETURN_IF_ERROR(moeShape(ctx, shape));
  outputs.push_back({ctx.input(0)->dtype, ctx.input(0)->shape});
  return Status::ok();
}

// Each row's chosen experts and their weights: scores (softmax over the experts or a sigmoid
// of each), the top k (the lower expert first among equal scores), divided by their sum
// with `normalize`.
using Route = std::pair<int64_t, float>;  // (expert, weight)

Status routeTokens(const KernelContext &ctx, const MoeShape &shape,
                   std::vector<std::vector<Route>> &routes) {
  std::string scoring;
  int64_t normalize = 0;
  DSRT_RETURN_IF_ERROR(stringAttr(ctx, "scoring", "softmax", scoring));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "normalize", 0, normalize));
  if (scoring != "softmax" && scoring != "sigmoid")
    return ctx.error("scoring must be softmax or sigmoid, not '", scoring, "'");
  const bool sigmoid = scoring == "sigmoid";
  FloatView logits(*ctx.input(1));
  routes.assign(shape.rows, {});
  std::vector<float> scores;
  std::vector<int64_t> order;
  for (int64_t r = 0; r < shape.rows; ++r) {
    routeToken(logits.data() + r * shape.experts, shape.experts, shape.topK,
               sigmoid, normalize != 0, scores, order, routes[r]);
    for (const Route &route : routes[r])
      if (!std::isfinite(route.second))
        return ctx.error("row ", r, "'s router scores are not finite");
  }
  return Status::ok();
}

// y [rows, out] = x [rows, in] . w^T (+ bias), w `out` rows of `in` starting at row
// `first` of the stacked weight.
void expertLinear(const KernelContext &ctx, const TensorRef &stacked, int64_t first,
                  int64_t out, const float *x, int64_t rows, const TensorRef *bias, float *y,
                  const TensorRef *scales = nullptr) {
  const int64_t in = expertInputs(stacked);
  const uint8_t *base = static_cast<const uint8_t *>(stacked.data) +
                        first * stacked.shape[1] * static_cast<int64_t>(dtypeSize(stacked.dtype));
  // int8 and int4 rows: their scales' rows, from the same first row.
  const int64_t groups = scales ? scales->shape[1] : 1;
  const uint8_t *scaleBase =
      scales ? static_cast<const uint8_t *>(scales->data) +
                   first * groups * static_cast<int64_t>(dtypeSize(scales->dtype))
             : nullptr;
  std::vector<float> widenedBias;
  if (bias) {
    widenedBias.resize(out);
    TensorRef part{bias->dtype, {out},
                   const_cast<uint8_t *>(static_cast<const uint8_t *>(bias->data) +
                                         first * static_cast<int64_t>(dtypeSize(bias->dtype)))};
    FloatView view(part);
    std::copy(view.data(), view.data() + out, widenedBias.begin());
  }
  std::vector<float> wideScales;
  if (scales && scales->dtype == DType::F64) {  // the fast kernels read f32, f16 or bf16
    TensorRef part{scales->dtype, {out, groups}, const_cast<uint8_t *>(scaleBase)};
    FloatView view(part);
    wideScales.assign(view.data(), view.data() + out * groups);
  }
  if (ctx.fastKernels && stacked.dtype != DType::F64) {
    fast::LinearWeights weights;
    weights.dtype = stacked.dtype;
    weights.data = base;
    weights.out = out;
    weights.in = in;
    if (scales) {
      weights.scales = wideScales.empty() ? static_cast<const void *>(scaleBase)
                                          : static_cast<const void *>(wideScales.data());
      weights.scaleType = wideScales.empty() ? scales->dtype : DType::F32;
      weights.groups = groups;
    }
    fast::linear(x, rows, weights, y, [&](int64_t begin, int64_t end) {
      if (bias)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t o = begin; o < end; ++o)
            y[r * out + o] += widenedBias[o];
    }, nullptr, ctx.rowInvariant, ctx.exactFloatRows);
    return;
  }
  std::vector<float> dequantized;
  TensorRef part{stacked.dtype, {out, in}, const_cast<uint8_t *>(base)};
  if (scales) {  // q * scale of its group, as tfm.linear's reference reads int8 and int4
    TensorRef scalePart{scales->dtype, {out, groups}, const_cast<uint8_t *>(scaleBase)};
    FloatView scale(scalePart);
    const int64_t groupSize = in / groups;
    dequantized.resize(out * in);
    const auto *codes = reinterpret_cast<const int8_t *>(base);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < in; ++k) {
        // int4: two codes a byte, the even input low, (code - 8) * scale (docs/int4.md).
        const int q = stacked.dtype == DType::U8
                          ? ((k % 2 == 0 ? base[o * (in / 2) + k / 2] & 0xF
                                         : base[o * (in / 2) + k / 2] >> 4) - 8)
                          : codes[o * in + k];
        dequantized[o * in + k] = q * scale[o * groups + k / groupSize];
      }
    part = {DType::F32, {out, in}, dequantized.data()};
  }
  FloatView weight(part);
  int64_t grain = std::max<int64_t>(1, kParallelGrainWork / std::max<int64_t>(1, in));
  parallelFor(rows * out, grain, [&](int64_t begin, int64_t end) {
    for (int64_t index = begin; index < end; ++index) {
      const int64_t r = index / out, o = index % out;
      const float *xr = x + r * in, *wr = weight.data() + o * in;
      float sum = 0;
      for (int64_t k = 0; k < in; ++k)
        sum += xr[k] * wr[k];
      y[index] = bias ? sum + widenedBias[o] : sum;
    }
  });
}

Status computeMoe(const KernelContext &ctx, const Outputs &outputs) {
  MoeShape shape;
  DSRT_RETURN_IF_ERROR(moeShape(ctx, shape));
  std::string kindName;
  DSRT_RETURN_IF_ERROR(stringAttr(ctx, "activation", "", kindName));
  Activation kind;
  DSRT_RETURN_IF_ERROR(parseActivation(ctx, kindName, kind));
  std::vector<std::vector<Route>> routes;
  DSRT_RETURN_IF_ERROR(routeTokens(ctx, shape, routes));
  // The tokens of each expert this rank holds, in row order, with their weights (indexed
  // by the expert's place in the rank's weights).
  std::vector<std::vector<std::pair<int64_t, float>>> tokens(shape.heldExperts);
  for (int64_t r = 0; r < shape.rows; ++r)
    for (const auto &[expert, weight] : routes[r]) {
      const int64_t local = expert - shape.firstExpert;
      if (local >= 0 && local < shape.heldExperts)
        tokens[local].push_back({r, weight});
    }

  const int64_t hidden = shape.hidden, inter = shape.inter;
  FloatView x(*ctx.input(0));
  FloatOutput result(*outputs[0]);
  float *out = result.data();
  std::fill(out, out + shape.rows * hidden, 0.0f);
  const TensorRef &gateUp = *ctx.input(2), &down = *ctx.input(3);
  const TensorRef *gateUpBias = ctx.input(kGateUpBias), *downBias = ctx.input(kDownBias);
  std::vector<float> gathered, product, gated, expertOut;
  // y [n, hidden] = down(act(gate(x)) * up(x)) for n rows x [n, hidden], the expert's
  // weights at rows `gateUpRow` and `downRow` of the stacked ones. The clamped SwiGLU is the
  // routed experts' (a shared expert is Qwen2-MoE's, plain).
  auto runExpert = [&](const TensorRef &gateUpWeights, int64_t gateUpRow,
                       const TensorRef &downWeights, int64_t downRow, int64_t width,
                       const TensorRef *gateUpBiases, const TensorRef *downBiases,
                       const float *rows, int64_t n, const TensorRef *gateUpScales,
                       const TensorRef *downScales, bool routed) {
    product.resize(n * 2 * width);
    expertLinear(ctx, gateUpWeights, gateUpRow, 2 * width, rows, n, gateUpBiases,
                 product.data(), gateUpScales);
    gated.resize(n * width);
    for (int64_t i = 0; i < n; ++i) {
      const float *gates = product.data() + i * 2 * width, *ups = gates + width;
      float *row = gated.data() + i * width;
      if (shape.clamped() && routed) {
        for (int64_t j = 0; j < width; ++j)
          row[j] = clampedSwiglu(gates[j], ups[j], shape.swigluAlpha, shape.swigluLimit);
        continue;
      }
      if (ctx.fastKernels) {
        std::copy_n(gates, width, row);
        fast::activate(kind, row, width);
      } else {
        for (int64_t j = 0; j < width; ++j)
          row[j] = activate(kind, gates[j]);
      }
      for (int64_t j = 0; j < width; ++j)
        row[j] *= ups[j];
    }
    expertOut.resize(n * hidden);
    expertLinear(ctx, downWeights, downRow, hidden, gated.data(), n, downBiases,
                 expertOut.data(), downScales);
  };
  // Experts in order, so that each row adds its experts' terms in the order the export's
  // sum does.
  for (int64_t e = 0; e < shape.heldExperts; ++e) {
    const auto &chosen = tokens[e];
    const int64_t n = static_cast<int64_t>(chosen.size());
    if (n == 0)
      continue;
    gathered.resize(n * hidden);
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(x.data() + chosen[i].first * hidden, hidden, gathered.data() + i * hidden);
    runExpert(gateUp, e * 2 * inter, down, e * hidden, inter, gateUpBias,
              shape.addsDownBias ? downBias : nullptr, gathered.data(), n,
              ctx.input(kGateUpScales), ctx.input(kDownScales), /*routed=*/true);
    for (int64_t i = 0; i < n; ++i) {
      float *row = out + chosen[i].first * hidden;
      const float *values = expertOut.data() + i * hidden, weight = chosen[i].second;
      for (int64_t j = 0; j < hidden; ++j)
        row[j] += values[j] * weight;
    }
  }
  // The shared expert, on every row, scaled by the sigmoid of its gate.
  if (const TensorRef *sharedGateUp = ctx.input(kSharedGateUp)) {
    const TensorRef &sharedDown = *ctx.input(kSharedDown);
    std::vector<float> gateValues(shape.rows);
    expertLinear(ctx, *ctx.input(kSharedGate), 0, 1, x.data(), shape.rows, nullptr,
                 gateValues.data());
    runExpert(*sharedGateUp, 0, sharedDown, 0, sharedDown.shape[1], nullptr, nullptr, x.data(),
              shape.rows, nullptr, nullptr, /*routed=*/false);
    for (int64_t r = 0; r < shape.rows; ++r) {
      const float scale = 1.0f / (1.0f + std::exp(-gateValues[r]));
      float *row = out + r * hidden;
      const float *values = expertOut.data() + r * hidden;
      for (int64_t j = 0; j < hidden; ++j)
        row[j] += scale * values[j];
    }
  }
  result.finish();
  return Status::ok();
}

} // namespace

void routeToken(const float *logits, int64_t experts, int64_t topK, bool sigmoid,
                bool normalize, std::vector<float> &scores, std::vector<int64_t> &order,
                std::vector<std::pair<int64_t, float>> &chosen) {
  scores.resize(experts);
  order.resize(experts);
  if (sigmoid) {
    for (int64_t e = 0; e < experts; ++e)
      scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  } else {
    float top = *std::max_element(logits, logits + experts), sum = 0;
    for (int64_t e = 0; e < experts; ++e)
      sum += (scores[e] = std::exp(logits[e] - top));
    for (float &score : scores)
      score /= sum;
  }
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + topK, order.end(), [&](int64_t a, int64_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  float sum = 0;
  for (int64_t i = 0; i < topK; ++i)
    sum += scores[order[i]];
  chosen.clear();
  for (int64_t i = 0; i < topK; ++i)
    chosen.push_back({order[i], normalize ? scores[order[i]] / sum : scores[order[i]]});
}

void addMoeKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"tfm.moe", 4, 11, 4, 1, 1, inferMoe, computeMoe});
}

} // namespace dsrt::ops
