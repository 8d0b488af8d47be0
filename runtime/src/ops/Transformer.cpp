// The recognised transformer ops (docs/transformer-ops.md): tfm.embedding, norms,
// activations and residual add; the linear layers and the LM head are in
// TransformerLinear.cpp, attention and the collectives in TransformerAttention.cpp and
// TransformerCollectives.cpp.
// Every float dtype computes in fp32; outputs are stored in the dtype of the first float
// input.
#include "ops/FloatAccess.h"
#include "ops/Kernel.h"
#include "ops/ThreadPool.h"
#include "ops/TransformerCommon.h"
#include "ops/TypeDispatch.h"
#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

namespace dsrt::ops {
namespace {

// ---- tfm.embedding -------------------------------------------------------------------

Status inferEmbedding(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "ids", kIndexTypes));
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "table", kFloatTypes));
  const TensorRef &table = *ctx.input(1);
  if (table.shape.size() != 2)
    return ctx.error("table must be [rows, hidden], not ", shapeString(table.shape));
  Shape shape = ctx.input(0)->shape;
  shape.push_back(table.shape[1]);
  DType dtype;
  // A narrow table the CPU session keeps gathers into the plan's wider activations.
  if (Status status = floatOutputDType(ctx.attrs, ctx.input(1)->dtype, dtype); !status)
    return ctx.error(status.message());
  outputs.push_back({dtype, shape});
  return Status::ok();
}

Status computeEmbedding(const KernelContext &ctx, const Outputs &outputs) {
  std::vector<int64_t> ids;
  DSRT_RETURN_IF_ERROR(readIndexValues(ctx, 0, "ids", ids));
  const TensorRef &table = *ctx.input(1);
  int64_t rows = table.shape[0], hidden = table.shape[1];
  int64_t offset, vocab;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "vocab_offset", 0, offset));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "vocab_size", 0, vocab));
  bool shard = vocab > 0 && !(offset == 0 && vocab == rows);
  int64_t limit = vocab > 0 ? vocab : rows;
  float scale = 1.0f;  // dsc-fuse-embedding-scale's factor (Gemma's sqrt(hidden))
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "scale", 1.0f, scale));
  if (!std::isfinite(scale))
    return ctx.error("scale must be finite, not ", scale);
  size_t element = dtypeSize(table.dtype);
  const DType outType = outputs[0]->dtype;
  const size_t outElement = dtypeSize(outType);
  auto *out = static_cast<uint8_t *>(outputs[0]->data);
  const auto *src = static_cast<const uint8_t *>(table.data);
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t id = ids[i];
    if (id < 0 || id >= limit)
      return ctx.error("token id ", id, " is outside the vocabulary [0, ", limit, ")");
    uint8_t *row = out + i * hidden * outElement;
    int64_t local = id - offset;
    if (local < 0 || local >= rows) {
      if (!shard)
        return ctx.error("token id ", id, " is outside the table's rows");
      // Zero bits are 0.0 in every float dtype.
      std::fill(row, row + hidden * outElement, uint8_t(0));
      continue;
    }
    if (scale != 1.0f) {
      // Widened, scaled in f32 (as the unfused Mul of the f32 rows computes it), stored.
      std::vector<float> scaled(hidden);
      if (!convertFloats(table.dtype, src + local * hidden * element, DType::F32,
                         scaled.data(), hidden))
        return ctx.error("cannot gather a ", dtypeName(table.dtype), " table");
      for (float &value : scaled)
        value *= scale;
      if (!convertFloats(DType::F32, scaled.data(), outType, row, hidden))
        return ctx.error("cannot gather into ", dtypeName(outType));
    } else if (outType == table.dtype) {
      std::copy(src + local * hidden * element, src + (local + 1) * hidden * element, row);
    } else if (!convertFloats(table.dtype, src + local * hidden * element, outType, row,
                              hidden)) {
      return ctx.error("cannot gather a ", dtypeName(table.dtype), " table into ",
                       dtypeName(outType));
    }
  }
  return Status::ok();
}

} // namespace

// ---- shared with TransformerLinear.cpp (TransformerCommon.h) ------------------------

// y = norm(row) * scale (+ bias) for each of `rows` rows of n values: RMS (rms) or layer
// normalisation, as tfm.rms_norm / tfm.layer_norm and a linear's norm prologue compute it.
// The fast kernels take the rows over the thread pool, each vectorised in fp32; the
// reference accumulates in double.
void normalizeRows(const float *source, int64_t rows, int64_t n, const FloatView &scale,
                   const FloatView *bias, bool rms, float epsilon, bool fastKernels, float *y) {
  if (fastKernels) {
    const float *scaleData = scale.data(), *biasData = bias ? bias->data() : nullptr;
    parallelFor(rows, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(n, 1)),
                [&](int64_t begin, int64_t end) {
                  for (int64_t r = begin; r < end; ++r)
                    fast::normalizeRow(source + r * n, n, scaleData, biasData, rms, epsilon,
                                       y + r * n);
                });
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = source + r * n;
    double mean = 0;
    if (!rms) {
      for (int64_t i = 0; i < n; ++i)
        mean += row[i];
      mean /= n;
    }
    double variance = 0;
    for (int64_t i = 0; i < n; ++i)
      variance += (row[i] - mean) * (row[i] - mean);
    variance /= n;
    float inverse = static_cast<float>(1.0 / std::sqrt(variance + epsilon));
    for (int64_t i = 0; i < n; ++i) {
      float value = static_cast<float>(row[i] - mean) * inverse * scale[i];
      y[r * n + i] = bias ? value + (*bias)[i] : value;
    }
  }
}

Status parseActivation(const KernelContext &ctx, const std::string &kind, Activation &out) {
  if (kind == "gelu_erf") out = Activation::GeluErf;
  else if (kind == "gelu_tanh") out = Activation::GeluTanh;
  else if (kind == "gelu_quick") out = Activation::GeluQuick;
  else if (kind == "silu") out = Activation::Silu;
  else if (kind == "relu") out = Activation::Relu;
  else if (kind == "relu2") out = Activation::Relu2;
  else return ctx.error("unknown activation kind '", kind, "'");
  return Status::ok();
}

// The `kind` of tfm.activation and tfm.gated_act.
Status activationKind(const KernelContext &ctx, Activation &out) {
  std::string kind;
  DSRT_RETURN_IF_ERROR(stringAttr(ctx, "kind", "", kind));
  return parseActivation(ctx, kind, out);
}

// A fused linear's epilogue activation: the `activation` attribute, absent or "none" for
// none.
Status epilogueActivation(const KernelContext &ctx, std::optional<Activation> &out) {
  std::string kind;
  DSRT_RETURN_IF_ERROR(stringAttr(ctx, "activation", "none", kind));
  out.reset();
  if (kind == "none")
    return Status::ok();
  Activation parsed;
  DSRT_RETURN_IF_ERROR(parseActivation(ctx, kind, parsed));
  out = parsed;
  return Status::ok();
}

float activate(Activation kind, float x) {
  switch (kind) {
  case Activation::GeluErf: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
  case Activation::GeluTanh:
    return 0.5f * x * (1.0f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  case Activation::GeluQuick: return x / (1.0f + std::exp(-1.702f * x));
  case Activation::Silu: return x / (1.0f + std::exp(-x));
  case Activation::Relu: return x > 0 ? x : 0.0f;
  case Activation::Relu2: return x > 0 ? x * x : 0.0f;
  }
  return x;
}

namespace {

// ---- tfm.layer_norm, tfm.rms_norm ----------------------------------------------------

// Inputs: layer_norm (input, scale, bias?, residual?), rms_norm (input, scale, residual?,
// post_residual?). With a residual the norm is of input + residual, and output 1 is that
// sum. With a post_residual (rms_norm only: Gemma's sandwich norms) the output is
// post_residual + the norm.
size_t normResidualIndex(const KernelContext &ctx) { return ctx.op == "tfm.rms_norm" ? 2 : 3; }
constexpr size_t kPostResidualIndex = 3;

const TensorRef *postResidual(const KernelContext &ctx) {
  return ctx.op == "tfm.rms_norm" ? ctx.input(kPostResidualIndex) : nullptr;
}

Status inferNorm(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "input", kFloatTypes));
  DSRT_RETURN_IF_ERROR(requireRankAtLeast(ctx, 0, "input", 1));
  const TensorRef &x = *ctx.input(0);
  int64_t n = lastDim(x);
  size_t residualIndex = normResidualIndex(ctx);
  for (size_t i = 1; i < residualIndex; ++i) {
    if (!ctx.input(i))
      continue;
    DSRT_RETURN_IF_ERROR(checkDType(ctx, i, i == 1 ? "scale" : "bias", kFloatTypes));
    if (ctx.input(i)->shape != Shape{n})
      return ctx.error(i == 1 ? "scale" : "bias", " must be [", n, "], not ",
                       shapeString(ctx.input(i)->shape));
  }
  const TensorRef *residual = ctx.input(residualIndex);
  if (residual) {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, residualIndex, "residual", kFloatTypes));
    if (residual->shape != x.shape)
      return ctx.error("residual must have the input's shape ", shapeString(x.shape), ", not ",
                       shapeString(residual->shape));
  }
  if (const TensorRef *post = postResidual(ctx)) {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, kPostResidualIndex, "post_residual", kFloatTypes));
    if (residual)
      return ctx.error("takes a residual or a post_residual, not both");
    if (post->shape != x.shape)
      return ctx.error("post_residual must have the input's shape ", shapeString(x.shape),
                       ", not ", shapeString(post->shape));
  }
  size_t expected = residual ? 2 : 1;
  if (ctx.numOutputs != expected)
    return ctx.error(residual ? "with a residual the step has 2 outputs (norm, sum), not "
                              : "without a residual the step has 1 output, not ",
                     ctx.numOutputs);
  outputs.push_back({x.dtype, x.shape});
  if (residual)
    outputs.push_back({x.dtype, x.shape});
  return Status::ok();
}

Status computeNorm(const KernelContext &ctx, const Outputs &outputs) {
  bool rms = ctx.op == "tfm.rms_norm";
  float epsilon;
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "epsilon", rms ? 1e-6f : 1e-5f, epsilon));
  const TensorRef &x = *ctx.input(0);
  int64_t n = lastDim(x), rows = n == 0 ? 0 : x.elements() / n;
  FloatView scale(*ctx.input(1));
  std::optional<FloatView> bias;
  if (!rms && ctx.input(2))
    bias.emplace(*ctx.input(2));
  // The fused form normalises input + residual as stored in output 1 (rounded to its dtype,
  // as the unfused residual add stores it), so both forms compute the same norm.
  std::optional<FloatView> summed;
  if (const TensorRef *residual = ctx.input(normResidualIndex(ctx))) {
    FloatView a(x), b(*residual);
    FloatOutput sum(*outputs[1]);
    float *s = sum.data();
    for (int64_t i = 0, total = x.elements(); i < total; ++i)
      s[i] = a[i] + b[i];
    sum.finish();
    summed.emplace(*outputs[1]);
  }
  std::optional<FloatView> plain;
  if (!summed)
    plain.emplace(x);
  const float *source = summed ? summed->data() : plain->data();
  FloatOutput out(*outputs[0]);
  normalizeRows(source, rows, n, scale, bias ? &*bias : nullptr, rms, epsilon, ctx.fastKernels,
                out.data());
  out.finish();
  if (const TensorRef *post = postResidual(ctx)) {
    // The norm as stored (in the output's dtype, as the unfused norm stores it), then the
    // add, rounded as the unfused add rounds.
    FloatView normalized(*outputs[0]), added(*post);
    std::vector<float> sum(static_cast<size_t>(x.elements()));
    for (size_t i = 0; i < sum.size(); ++i)
      sum[i] = added[i] + normalized[i];
    storeFloats(sum, *outputs[0]);
  }
  return Status::ok();
}

// ---- tfm.activation, tfm.gated_act, tfm.residual_add ---------------------------------

Status inferSameAsFirst(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, i, "input", kFloatTypes));
    if (i > 0 && ctx.input(i)->shape != ctx.input(0)->shape)
      return ctx.error("inputs must have one shape, not ", shapeString(ctx.input(0)->shape),
                       " and ", shapeString(ctx.input(i)->shape));
  }
  if (ctx.op == "tfm.activation" || ctx.op == "tfm.gated_act") {
    Activation kind;
    DSRT_RETURN_IF_ERROR(activationKind(ctx, kind));
  }
  outputs.push_back({ctx.input(0)->dtype, ctx.input(0)->shape});
  return Status::ok();
}

// y = act(a), times `b` where there is one (gated), over n values on the fast kernels.
void activateRange(Activation kind, const float *a, const float *b, float *y, int64_t n) {
  std::copy(a, a + n, y);
  fast::activate(kind, y, n);
  if (b)
    for (int64_t i = 0; i < n; ++i)
      y[i] *= b[i];
}

// tfm.gated_act_packed: [..., 2n] -> [..., n], the gate the first half of each row.
Status inferGatedPacked(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "input", kFloatTypes));
  DSRT_RETURN_IF_ERROR(requireRankAtLeast(ctx, 0, "input", 1));
  Activation kind;
  DSRT_RETURN_IF_ERROR(activationKind(ctx, kind));
  Shape shape = ctx.input(0)->shape;
  if (shape.back() % 2 != 0)
    return ctx.error("the joined gate and up need an even last dimension, not ", shape.back());
  shape.back() /= 2;
  outputs.push_back({ctx.input(0)->dtype, shape});
  return Status::ok();
}

Status computeGatedPacked(const KernelContext &ctx, const Outputs &outputs) {
  Activation kind;
  DSRT_RETURN_IF_ERROR(activationKind(ctx, kind));
  FloatView x(*ctx.input(0));
  FloatOutput out(*outputs[0]);
  float *y = out.data();
  const int64_t half = outputs[0]->shape.back();
  const int64_t rows = half == 0 ? 0 : outputs[0]->elements() / half;
  if (ctx.fastKernels) {
    parallelFor(rows, std::max<int64_t>(1, kParallelGrainWork / std::max<int64_t>(half, 1)),
                [&](int64_t begin, int64_t end) {
                  for (int64_t r = begin; r < end; ++r) {
                    const float *gate = x.data() + r * 2 * half;
                    activateRange(kind, gate, gate + half, y + r * half, half);
                  }
                });
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < half; ++i)
        y[r * half + i] = activate(kind, x[r * 2 * half + i]) * x[r * 2 * half + half + i];
  }
  out.finish();
  return Status::ok();
}

// The fast form: the activation vectorised over the thread pool (gated: times the second
// input after it).
Status computeElementwiseFast(const KernelContext &ctx, const Outputs &outputs, Activation kind) {
  FloatView a(*ctx.input(0));
  std::optional<FloatView> b;
  if (ctx.inputs.size() > 1)
    b.emplace(*ctx.input(1));
  FloatOutput out(*outputs[0]);
  float *y = out.data();
  int64_t n = outputs[0]->elements();
  parallelFor(n, kParallelGrainWork, [&](int64_t begin, int64_t end) {
    activateRange(kind, a.data() + begin, b ? b->data() + begin : nullptr, y + begin,
                  end - begin);
  });
  out.finish();
  return Status::ok();
}

Status computeElementwise(const KernelContext &ctx, const Outputs &outputs) {
  if (ctx.fastKernels && ctx.op != "tfm.residual_add") {
    Activation kind;
    DSRT_RETURN_IF_ERROR(activationKind(ctx, kind));
    return computeElementwiseFast(ctx, outputs, kind);
  }
  FloatView a(*ctx.input(0));
  std::optional<FloatView> b;
  if (ctx.inputs.size() > 1)
    b.emplace(*ctx.input(1));
  Activation kind = Activation::Relu;
  bool residual = ctx.op == "tfm.residual_add";
  if (!residual)
    DSRT_RETURN_IF_ERROR(activationKind(ctx, kind));
  FloatOutput out(*outputs[0]);
  float *y = out.data();
  int64_t n = outputs[0]->elements();
  for (int64_t i = 0; i < n; ++i) {
    if (residual)
      y[i] = a[i] + (*b)[i];
    else if (b)
      y[i] = activate(kind, a[i]) * (*b)[i];
    else
      y[i] = activate(kind, a[i]);
  }
  out.finish();
  return Status::ok();
}

} // namespace

void addTransformerKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"tfm.embedding", 2, 2, 2, 1, 1, inferEmbedding, computeEmbedding});
  kernels.push_back({"tfm.layer_norm", 2, 4, 2, 1, 2, inferNorm, computeNorm});
  kernels.push_back({"tfm.rms_norm", 2, 4, 2, 1, 2, inferNorm, computeNorm});
  addLinearKernels(kernels);
  kernels.push_back({"tfm.activation", 1, 1, 1, 1, 1, inferSameAsFirst, computeElementwise});
  kernels.push_back({"tfm.gated_act", 2, 2, 2, 1, 1, inferSameAsFirst, computeElementwise});
  kernels.push_back(
      {"tfm.gated_act_packed", 1, 1, 1, 1, 1, inferGatedPacked, computeGatedPacked});
  kernels.push_back({"tfm.residual_add", 2, 2, 2, 1, 1, inferSameAsFirst, computeElementwise});
  addAttentionKernels(kernels);
  addCollectiveKernels(kernels);
  addMoeKernels(kernels);
}

} // namespace dsrt::ops
