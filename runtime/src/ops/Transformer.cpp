// The recognised transformer ops (docs/transformer-ops.md): tfm.embedding, norms, linear,
// activations, residual add, attention with its two KV-cache modes, and the LM head.
// Every float dtype computes in fp32; outputs are stored in the dtype of the first float
// input.
#include "ops/Kernel.h"
#include "ops/ThreadPool.h"
#include "ops/TypeDispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

namespace dsrt::ops {
namespace {

constexpr int64_t kParallelGrainWork = 1 << 15;

// The elements of a float tensor as fp32: the tensor's own storage when it is fp32.
class FloatView {
public:
  explicit FloatView(const TensorRef &t) {
    if (t.dtype == DType::F32) {
      data_ = t.as<float>();
      return;
    }
    copy_.resize(static_cast<size_t>(t.elements()));
    convertFloats(t.dtype, t.data, DType::F32, copy_.data(), t.elements());
    data_ = copy_.data();
  }
  const float *data() const { return data_; }
  float operator[](int64_t i) const { return data_[i]; }

private:
  const float *data_ = nullptr;
  std::vector<float> copy_;
};

// Writes fp32 values into a float tensor of any float dtype.
void storeFloats(const std::vector<float> &values, const TensorRef &out) {
  convertFloats(DType::F32, values.data(), out.dtype, out.data, out.elements());
}

// An output computed in an fp32 buffer, or directly in the tensor when it is fp32.
class FloatOutput {
public:
  explicit FloatOutput(const TensorRef &t) : tensor_(t) {
    if (t.dtype != DType::F32)
      copy_.resize(static_cast<size_t>(t.elements()));
  }
  float *data() { return copy_.empty() ? tensor_.as<float>() : copy_.data(); }
  void finish() {
    if (!copy_.empty())
      storeFloats(copy_, tensor_);
  }

private:
  const TensorRef &tensor_;
  std::vector<float> copy_;
};

Status requireRankAtLeast(const KernelContext &ctx, size_t index, const char *name, size_t rank) {
  if (ctx.input(index)->shape.size() < rank)
    return ctx.error(name, " must have rank ", rank, " or more, not ",
                     shapeString(ctx.input(index)->shape));
  return Status::ok();
}

int64_t lastDim(const TensorRef &t) { return t.shape.empty() ? 1 : t.shape.back(); }

// ---- tfm.embedding -------------------------------------------------------------------

Status inferEmbedding(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "ids", kIndexTypes));
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "table", kFloatTypes));
  const TensorRef &table = *ctx.input(1);
  if (table.shape.size() != 2)
    return ctx.error("table must be [rows, hidden], not ", shapeString(table.shape));
  Shape shape = ctx.input(0)->shape;
  shape.push_back(table.shape[1]);
  outputs.push_back({table.dtype, shape});
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
  size_t element = dtypeSize(table.dtype);
  auto *out = static_cast<uint8_t *>(outputs[0]->data);
  const auto *src = static_cast<const uint8_t *>(table.data);
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t id = ids[i];
    if (id < 0 || id >= limit)
      return ctx.error("token id ", id, " is outside the vocabulary [0, ", limit, ")");
    uint8_t *row = out + i * hidden * element;
    int64_t local = id - offset;
    if (local < 0 || local >= rows) {
      if (!shard)
        return ctx.error("token id ", id, " is outside the table's rows");
      std::fill(row, row + hidden * element, uint8_t(0));
      continue;
    }
    std::copy(src + local * hidden * element, src + (local + 1) * hidden * element, row);
  }
  return Status::ok();
}

// ---- tfm.layer_norm, tfm.rms_norm ----------------------------------------------------

// Inputs: layer_norm (input, scale, bias?, residual?), rms_norm (input, scale, residual?).
// With a residual the norm is of input + residual, and output 1 is that sum.
size_t normResidualIndex(const KernelContext &ctx) { return ctx.op == "tfm.rms_norm" ? 2 : 3; }

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
  float *y = out.data();
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
  out.finish();
  return Status::ok();
}

// ---- activations (tfm.activation, tfm.gated_act and the linear epilogue) -------------

enum class Activation { GeluErf, GeluTanh, GeluQuick, Silu, Relu };

Status parseActivation(const KernelContext &ctx, const std::string &kind, Activation &out) {
  if (kind == "gelu_erf") out = Activation::GeluErf;
  else if (kind == "gelu_tanh") out = Activation::GeluTanh;
  else if (kind == "gelu_quick") out = Activation::GeluQuick;
  else if (kind == "silu") out = Activation::Silu;
  else if (kind == "relu") out = Activation::Relu;
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
  }
  return x;
}

// ---- tfm.linear, tfm.lm_head ---------------------------------------------------------

Status inferLinear(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "input", kFloatTypes));
  const bool hasScales = ctx.inputs.size() > 3 && ctx.input(3);
  DSRT_RETURN_IF_ERROR(
      checkDType(ctx, 1, "weight", hasScales ? maskOf({DType::I8}) : kFloatTypes));
  DSRT_RETURN_IF_ERROR(requireRankAtLeast(ctx, 0, "input", 1));
  const TensorRef &x = *ctx.input(0), &w = *ctx.input(1);
  if (w.shape.size() != 2 || w.shape[1] != lastDim(x))
    return ctx.error("weight must be [out, ", lastDim(x), "], not ", shapeString(w.shape));
  // int8 weights (docs/int8.md): scales [out, groups], each group a run of in / groups
  // input features.
  if (hasScales) {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 3, "scales", kFloatTypes));
    const Shape &scales = ctx.input(3)->shape;
    if (scales.size() != 2 || scales[0] != w.shape[0] || scales[1] <= 0 ||
        w.shape[1] % scales[1] != 0)
      return ctx.error("scales must be [", w.shape[0], ", groups] with groups dividing ",
                       w.shape[1], ", not ", shapeString(scales));
  }
  if (ctx.inputs.size() > 2 && ctx.input(2)) {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 2, "bias", kFloatTypes));
    if (ctx.input(2)->shape != Shape{w.shape[0]})
      return ctx.error("bias must be [", w.shape[0], "], not ", shapeString(ctx.input(2)->shape));
  }
  Shape shape = x.shape;
  shape.back() = w.shape[0];
  // The fused epilogue: act(x . w^T + bias) + residual, the residual of the result's shape.
  if (ctx.inputs.size() > 4 && ctx.input(4)) {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 4, "residual", kFloatTypes));
    if (ctx.input(4)->shape != shape)
      return ctx.error("residual must have the result's shape ", shapeString(shape), ", not ",
                       shapeString(ctx.input(4)->shape));
  }
  std::optional<Activation> activation;
  DSRT_RETURN_IF_ERROR(epilogueActivation(ctx, activation));
  outputs.push_back({x.dtype, shape});
  return Status::ok();
}

// An int8 weight as f32: q[o, k] * scales[o, k / (in / groups)] (docs/int8.md).
std::vector<float> dequantizeInt8(const TensorRef &w, const TensorRef &scales) {
  const int64_t out = w.shape[0], in = w.shape[1], groups = scales.shape[1];
  const int64_t groupSize = in / groups;
  FloatView scale(scales);
  const int8_t *q = w.as<int8_t>();
  std::vector<float> values(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k)
      values[o * in + k] = static_cast<float>(q[o * in + k]) * scale[o * groups + k / groupSize];
  return values;
}

Status computeLinear(const KernelContext &ctx, const Outputs &outputs) {
  const TensorRef &x = *ctx.input(0), &w = *ctx.input(1);
  int64_t in = w.shape[1], out = w.shape[0];
  int64_t rows = out == 0 ? 0 : outputs[0]->elements() / out;
  std::vector<float> dequantized;
  TensorRef floatWeight = w;
  if (ctx.inputs.size() > 3 && ctx.input(3)) {
    dequantized = dequantizeInt8(w, *ctx.input(3));
    floatWeight = {DType::F32, w.shape, dequantized.data()};
  }
  FloatView a(x), weight(floatWeight);
  std::optional<FloatView> bias, residual;
  if (ctx.inputs.size() > 2 && ctx.input(2))
    bias.emplace(*ctx.input(2));
  if (ctx.inputs.size() > 4 && ctx.input(4))
    residual.emplace(*ctx.input(4));
  std::optional<Activation> activation;
  DSRT_RETURN_IF_ERROR(epilogueActivation(ctx, activation));
  FloatOutput result(*outputs[0]);
  float *y = result.data();
  // Each output element is a dot product of two contiguous rows; the work splits over
  // (row, output feature) pairs, so a decode step with one row still uses every thread.
  int64_t grain = std::max<int64_t>(1, kParallelGrainWork / std::max<int64_t>(1, in));
  parallelFor(rows * out, grain, [&](int64_t begin, int64_t end) {
    for (int64_t index = begin; index < end; ++index) {
      int64_t r = index / out, o = index % out;
      const float *xr = a.data() + r * in;
      const float *wr = weight.data() + o * in;
      float sum = 0;
      for (int64_t k = 0; k < in; ++k)
        sum += xr[k] * wr[k];
      float value = bias ? sum + (*bias)[o] : sum;
      if (activation)
        value = activate(*activation, value);
      y[index] = residual ? value + (*residual)[index] : value;
    }
  });
  result.finish();
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

Status computeElementwise(const KernelContext &ctx, const Outputs &outputs) {
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

// ---- tfm.attention -------------------------------------------------------------------

enum AttentionInput { kQuery, kKey, kValue, kMask, kPastKey, kPastValue, kPositions };

struct AttentionConfig {
  // This rank's query and KV heads (all of them without tensor parallelism).
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  // The model's heads, and the global index of this rank's first query and KV head: they
  // map a local query head to its KV head (GQA groups) and to its ALiBi slope.
  int64_t globalHeads = 0, globalKvHeads = 0, headOffset = 0, kvHeadOffset = 0;
  float scale = 1;
  bool causal = false, alibi = false;
  int64_t window = 0, rotaryDim = 0, cacheLayer = -1;
  double rotaryBase = 10000;
  bool interleaved = false;
  bool unattendedCausal = false;
  // Shapes of this call.
  int64_t batch = 0, fresh = 0, past = 0, total = 0;
  bool sessionCache = false;
  int64_t pastHeads = 0, pastHeadOffset = 0;
};

// Under tensor parallelism, rank_heads/rank_head_offsets and rank_kv_heads/
// rank_kv_head_offsets list each rank's heads; num_heads and num_kv_heads are the model's.
Status readRankHeads(const KernelContext &ctx, AttentionConfig &c) {
  int rank = ctx.collectives ? ctx.collectives->rank() : 0;
  struct Entry {
    const char *name;
    int64_t *out;
  };
  for (Entry entry : {Entry{"rank_heads", &c.heads}, Entry{"rank_head_offsets", &c.headOffset},
                      Entry{"rank_kv_heads", &c.kvHeads},
                      Entry{"rank_kv_head_offsets", &c.kvHeadOffset}}) {
    std::vector<int64_t> values;
    bool present = false;
    DSRT_RETURN_IF_ERROR(getInts(ctx.attrs, entry.name, values, present));
    if (!present)
      continue;
    if (rank < 0 || static_cast<size_t>(rank) >= values.size())
      return ctx.error(entry.name, " has ", values.size(), " entries, none for rank ", rank);
    *entry.out = values[rank];
  }
  return Status::ok();
}

Status readAttentionConfig(const KernelContext &ctx, AttentionConfig &c) {
  int64_t flag;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "num_heads", 0, c.heads));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "num_kv_heads", c.heads, c.kvHeads));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "head_dim", 0, c.headDim));
  c.globalHeads = c.heads;
  c.globalKvHeads = c.kvHeads;
  DSRT_RETURN_IF_ERROR(readRankHeads(ctx, c));
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "scale", 1.0f, c.scale));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "causal", 0, flag));
  c.causal = flag != 0;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "alibi", 0, flag));
  c.alibi = flag != 0;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "window", 0, c.window));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "rotary_dim", 0, c.rotaryDim));
  float base;
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "rotary_base", 10000.0f, base));
  c.rotaryBase = base;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "rotary_interleaved", 0, flag));
  c.interleaved = flag != 0;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "cache_layer", -1, c.cacheLayer));
  std::string unattended;
  DSRT_RETURN_IF_ERROR(stringAttr(ctx, "unattended", "all", unattended));
  if (unattended != "all" && unattended != "causal")
    return ctx.error("unattended must be 'all' or 'causal', not '", unattended, "'");
  c.unattendedCausal = unattended == "causal";
  if (c.globalHeads <= 0 || c.globalKvHeads <= 0 || c.headDim <= 0 ||
      c.globalHeads % c.globalKvHeads != 0)
    return ctx.error("needs num_heads a positive multiple of num_kv_heads and head_dim > 0 "
                     "(got ", c.globalHeads, ", ", c.globalKvHeads, ", ", c.headDim, ")");
  {
    // Every local query head's KV head must be one of this rank's.
    int64_t group = c.globalHeads / c.globalKvHeads;
    bool fits = c.heads > 0 && c.kvHeads > 0 && c.headOffset >= 0 && c.kvHeadOffset >= 0 &&
                c.headOffset + c.heads <= c.globalHeads &&
                c.kvHeadOffset + c.kvHeads <= c.globalKvHeads &&
                c.headOffset / group >= c.kvHeadOffset &&
                (c.headOffset + c.heads - 1) / group < c.kvHeadOffset + c.kvHeads;
    if (!fits)
      return ctx.error("query heads [", c.headOffset, ", +", c.heads, ") and KV heads [",
                       c.kvHeadOffset, ", +", c.kvHeads, ") of ", c.globalHeads, " and ",
                       c.globalKvHeads, " do not form whole groups");
  }
  if (c.window < 0 || c.rotaryDim < 0 || c.rotaryDim > c.headDim || c.rotaryDim % 2 != 0)
    return ctx.error("window must be >= 0 and rotary_dim even and at most head_dim");

  const TensorRef &q = *ctx.input(kQuery), &k = *ctx.input(kKey), &v = *ctx.input(kValue);
  if (q.shape.size() != 3 || q.shape[2] != c.heads * c.headDim)
    return ctx.error("query must be [batch, sequence, ", c.heads * c.headDim, "], not ",
                     shapeString(q.shape));
  c.batch = q.shape[0];
  c.fresh = q.shape[1];
  Shape kvShape{c.batch, c.fresh, c.kvHeads * c.headDim};
  if (k.shape != kvShape || v.shape != kvShape)
    return ctx.error("key and value must be ", shapeString(kvShape), ", not ",
                     shapeString(k.shape), " and ", shapeString(v.shape));
  const TensorRef *pastKey = ctx.input(kPastKey), *pastValue = ctx.input(kPastValue);
  if (!pastKey != !pastValue)
    return ctx.error("past key and past value must be given together");
  if (pastKey) {
    // A tensor-parallel rank reads its KV heads out of a past that holds all of them.
    bool sharded = pastKey->shape.size() == 4 && pastKey->shape[1] == c.globalKvHeads &&
                   c.globalKvHeads != c.kvHeads;
    if (pastKey->shape.size() != 4 || pastKey->shape[0] != c.batch ||
        (pastKey->shape[1] != c.kvHeads && !sharded) || pastKey->shape[3] != c.headDim ||
        pastValue->shape != pastKey->shape)
      return ctx.error("past key/value must be [", c.batch, ", ", c.kvHeads, ", past, ",
                       c.headDim, "], not ", shapeString(pastKey->shape), " and ",
                       shapeString(pastValue->shape));
    c.past = pastKey->shape[2];
    c.pastHeads = pastKey->shape[1];
    c.pastHeadOffset = sharded ? c.kvHeadOffset : 0;
  }
  c.sessionCache = !pastKey && c.cacheLayer >= 0 && ctx.numOutputs == 1;
  const TensorRef *mask = ctx.input(kMask);
  if (c.sessionCache) {
    // The padding mask is the only thing that says how many tokens the cache holds.
    if (!mask || mask->shape.size() != 2 || isFloat(mask->dtype))
      return ctx.error("with the session's KV cache (cache_layer ", c.cacheLayer,
                       ") needs a padding mask [batch, past + sequence]");
    c.past = mask->shape[1] - c.fresh;
    if (c.past < 0)
      return ctx.error("padding mask width ", mask->shape[1], " is shorter than the ",
                       c.fresh, " new tokens");
  }
  c.total = c.past + c.fresh;
  if (mask) {
    if (isFloat(mask->dtype)) {
      const Shape &m = mask->shape;
      bool fits = m.size() == 4 && (m[0] == 1 || m[0] == c.batch) &&
                  (m[1] == 1 || m[1] == c.heads || m[1] == c.globalHeads) &&
                  m[2] == c.fresh && m[3] == c.total;
      if (!fits)
        return ctx.error("an additive mask must broadcast to [", c.batch, ", ", c.heads, ", ",
                         c.fresh, ", ", c.total, "], not ", shapeString(m));
    } else if (mask->shape != Shape{c.batch, c.total}) {
      return ctx.error("the padding mask must be [", c.batch, ", ", c.total, "], not ",
                       shapeString(mask->shape));
    }
  }
  if (c.rotaryDim > 0 || c.alibi) {
    const TensorRef *positions = ctx.input(kPositions);
    if (c.rotaryDim > 0 && !positions)
      return ctx.error("rotary embeddings need the positions input");
    if (c.alibi && (!mask || isFloat(mask->dtype)))
      return ctx.error("ALiBi needs the padding mask (key positions count attended tokens)");
    if (positions && positions->shape != Shape{c.batch, c.fresh})
      return ctx.error("positions must be [", c.batch, ", ", c.fresh, "], not ",
                       shapeString(positions->shape));
  }
  if (!c.sessionCache && ctx.numOutputs != 1 && ctx.numOutputs != 3)
    return ctx.error("has 1 output, or 3 with the present key and value, not ",
                     ctx.numOutputs);
  return Status::ok();
}

Status inferAttention(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  for (int i : {kQuery, kKey, kValue})
    DSRT_RETURN_IF_ERROR(checkDType(ctx, i, "query/key/value", kFloatTypes));
  if (ctx.input(kPositions))
    DSRT_RETURN_IF_ERROR(checkDType(ctx, kPositions, "positions", kIndexTypes));
  AttentionConfig c;
  DSRT_RETURN_IF_ERROR(readAttentionConfig(ctx, c));
  DType dtype = ctx.input(kQuery)->dtype;
  outputs.push_back({dtype, ctx.input(kQuery)->shape});
  if (ctx.numOutputs == 3) {
    outputs.push_back({dtype, {c.batch, c.kvHeads, c.total, c.headDim}});
    outputs.push_back({dtype, {c.batch, c.kvHeads, c.total, c.headDim}});
  }
  return Status::ok();
}

// transformers' get_slopes (BLOOM's build_alibi_tensor): a geometric sequence per power of
// two of heads, interleaved with the next power's for the rest.
std::vector<float> alibiSlopes(int64_t heads) {
  int64_t closest = 1;
  while (closest * 2 <= heads)
    closest *= 2;
  std::vector<float> slopes;
  float base = std::pow(2.0f, -std::pow(2.0f, -(std::log2(float(closest)) - 3)));
  for (int64_t i = 1; i <= closest; ++i)
    slopes.push_back(std::pow(base, float(i)));
  if (closest != heads) {
    float extra = std::pow(2.0f, -std::pow(2.0f, -(std::log2(float(2 * closest)) - 3)));
    for (int64_t i = 0; i < heads - closest; ++i)
      slopes.push_back(std::pow(extra, float(1 + 2 * i)));
  }
  return slopes;
}

// Rotates the first rotaryDim features of each head of `x` ([tokens, heads * d]) in place,
// at `positions[token]`. The angles are computed in fp32 as transformers does.
void applyRotary(float *x, int64_t tokens, int64_t heads, const AttentionConfig &c,
                 const std::vector<int64_t> &positions) {
  int64_t half = c.rotaryDim / 2;
  std::vector<float> inverseFrequency(half);
  for (int64_t i = 0; i < half; ++i)
    inverseFrequency[i] = static_cast<float>(
        1.0 / std::pow(c.rotaryBase, double(2 * i) / double(c.rotaryDim)));
  for (int64_t t = 0; t < tokens; ++t) {
    float position = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      float angle = position * inverseFrequency[i];
      float cosine = std::cos(angle), sine = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float *head = x + (t * heads + h) * c.headDim;
        int64_t a = c.interleaved ? 2 * i : i, b = c.interleaved ? 2 * i + 1 : i + half;
        float first = head[a], second = head[b];
        head[a] = first * cosine - second * sine;
        head[b] = second * cosine + first * sine;
      }
    }
  }
}

Status computeAttention(const KernelContext &ctx, const Outputs &outputs) {
  AttentionConfig c;
  DSRT_RETURN_IF_ERROR(readAttentionConfig(ctx, c));
  const int64_t B = c.batch, S = c.fresh, P = c.past, T = c.total, H = c.heads,
                KH = c.kvHeads, D = c.headDim, group = c.globalHeads / c.globalKvHeads;
  std::vector<float> q, kNew, vNew;
  {
    FloatView query(*ctx.input(kQuery)), k(*ctx.input(kKey)), v(*ctx.input(kValue));
    q.assign(query.data(), query.data() + B * S * H * D);
    kNew.assign(k.data(), k.data() + B * S * KH * D);
    vNew.assign(v.data(), v.data() + B * S * KH * D);
  }
  std::vector<int64_t> positions;
  if (ctx.input(kPositions))
    DSRT_RETURN_IF_ERROR(readIndexValues(ctx, kPositions, "positions", positions));
  if (c.rotaryDim > 0) {
    applyRotary(q.data(), B * S, H, c, positions);
    applyRotary(kNew.data(), B * S, KH, c, positions);
  }

  // Keys and values of every attended position, [B, KH, T, D]: in the session's cache, or
  // assembled from the past inputs and the new tokens.
  std::vector<float> kAllStorage, vAllStorage;
  const float *kAll = nullptr, *vAll = nullptr;
  int64_t batchStride = KH * T * D, headStride = T * D;
  auto placeNew = [&](float *keys, float *values, int64_t bStride, int64_t hStride) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < KH; ++h) {
          const float *ks = &kNew[((b * S + s) * KH + h) * D];
          const float *vs = &vNew[((b * S + s) * KH + h) * D];
          std::copy(ks, ks + D, keys + b * bStride + h * hStride + (P + s) * D);
          std::copy(vs, vs + D, values + b * bStride + h * hStride + (P + s) * D);
        }
  };
  if (c.sessionCache) {
    if (!ctx.cache || c.cacheLayer >= static_cast<int64_t>(ctx.cache->layers.size()))
      return ctx.error("needs the session's KV cache layer ", c.cacheLayer,
                       ", which this caller does not provide");
    const KvCacheLayer &layer = ctx.cache->layers[c.cacheLayer];
    if (layer.dtype != DType::F32 || layer.kvHeads != KH || layer.headDim != D)
      return ctx.error("KV cache layer ", c.cacheLayer, " does not match the attention");
    if (B > layer.batch || T > layer.capacity)
      return ctx.error("batch ", B, " with ", T, " tokens does not fit the KV cache (batch ",
                       layer.batch, ", ", layer.capacity, " tokens)");
    batchStride = KH * layer.capacity * D;
    headStride = layer.capacity * D;
    auto *keys = static_cast<float *>(layer.key), *values = static_cast<float *>(layer.value);
    placeNew(keys, values, batchStride, headStride);
    kAll = keys;
    vAll = values;
  } else {
    kAllStorage.resize(B * KH * T * D);
    vAllStorage.resize(B * KH * T * D);
    if (P > 0) {
      FloatView pk(*ctx.input(kPastKey)), pv(*ctx.input(kPastValue));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < KH; ++h) {
          int64_t from = (b * c.pastHeads + c.pastHeadOffset + h) * P * D;
          int64_t to = (b * KH + h) * T * D;
          std::copy(pk.data() + from, pk.data() + from + P * D, kAllStorage.data() + to);
          std::copy(pv.data() + from, pv.data() + from + P * D, vAllStorage.data() + to);
        }
    }
    placeNew(kAllStorage.data(), vAllStorage.data(), batchStride, headStride);
    kAll = kAllStorage.data();
    vAll = vAllStorage.data();
  }

  // Which keys each row may attend, and the additive terms.
  const TensorRef *mask = ctx.input(kMask);
  std::vector<int64_t> padding;
  std::optional<FloatView> additive;
  if (mask && !isFloat(mask->dtype)) {
    if (mask->dtype == DType::Bool) {
      padding.resize(B * T);
      for (int64_t i = 0; i < B * T; ++i)
        padding[i] = static_cast<const uint8_t *>(mask->data)[i] != 0;
    } else {
      DSRT_RETURN_IF_ERROR(readIndexValues(ctx, kMask, "mask", padding));
    }
  } else if (mask) {
    additive.emplace(*mask);
  }
  std::vector<float> slopes;
  if (c.alibi) {
    std::vector<float> all = alibiSlopes(c.globalHeads);
    slopes.assign(all.begin() + c.headOffset, all.begin() + c.headOffset + H);
  }
  // ALiBi's key position counts the attended tokens before it (cumsum of the mask - 1).
  std::vector<float> keyPosition;
  if (c.alibi) {
    keyPosition.resize(B * T);
    for (int64_t b = 0; b < B; ++b) {
      int64_t count = 0;
      for (int64_t t = 0; t < T; ++t) {
        bool on = padding[b * T + t] != 0;
        count += on;
        keyPosition[b * T + t] = on ? float(count - 1) : 0.0f;
      }
    }
  }

  FloatOutput out(*outputs[0]);
  float *y = out.data();
  parallelFor(B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(T);
    std::vector<char> allowed(T), visible(T);
    for (int64_t bh = begin; bh < end; ++bh) {
      int64_t b = bh / H, h = bh % H, kh = (c.headOffset + h) / group - c.kvHeadOffset;
      const float *keys = kAll + b * batchStride + kh * headStride;
      const float *values = vAll + b * batchStride + kh * headStride;
      for (int64_t s = 0; s < S; ++s) {
        const float *query = &q[((b * S + s) * H + h) * D];
        int64_t position = P + s;
        float maximum = -std::numeric_limits<float>::infinity();
        bool any = false;
        for (int64_t t = 0; t < T; ++t) {
          bool causalOk = !c.causal || t <= position;
          bool windowOk = c.window == 0 || t > position - c.window;
          bool paddingOk = padding.empty() || padding[b * T + t] != 0;
          visible[t] = causalOk;
          allowed[t] = causalOk && windowOk && paddingOk;
          float dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += query[d] * keys[t * D + d];
          float score = dot * c.scale;
          if (c.alibi)
            score += slopes[h] * keyPosition[b * T + t];
          if (additive) {
            int64_t mb = mask->shape[0] == 1 ? 0 : b;
            int64_t mh = mask->shape[1] == 1 ? 0 : mask->shape[1] == H ? h : c.headOffset + h;
            score += (*additive)[((mb * mask->shape[1] + mh) * S + s) * T + t];
          }
          scores[t] = score;
          if (allowed[t]) {
            any = true;
            maximum = std::max(maximum, score);
          }
        }
        float *row = y + ((b * S + s) * H + h) * D;
        std::fill(row, row + D, 0.0f);
        if (!any) {
          // No key to attend (a padding query): transformers' finfo.min masks leave every
          // masked score equal, so the row averages the values; GPT-Neo's doubled mask
          // leaves only the causally visible ones equal.
          int64_t count = 0;
          for (int64_t t = 0; t < T; ++t)
            if (!c.unattendedCausal || visible[t]) {
              ++count;
              for (int64_t d = 0; d < D; ++d)
                row[d] += values[t * D + d];
            }
          for (int64_t d = 0; d < D && count > 0; ++d)
            row[d] /= float(count);
          continue;
        }
        float sum = 0;
        for (int64_t t = 0; t < T; ++t) {
          scores[t] = allowed[t] ? std::exp(scores[t] - maximum) : 0.0f;
          sum += scores[t];
        }
        for (int64_t t = 0; t < T; ++t) {
          if (scores[t] == 0.0f)
            continue;
          float weight = scores[t] / sum;
          for (int64_t d = 0; d < D; ++d)
            row[d] += weight * values[t * D + d];
        }
      }
    }
  });
  out.finish();
  if (outputs.size() == 3) {
    for (int which = 0; which < 2; ++which) {
      const float *all = which == 0 ? kAll : vAll;
      std::vector<float> present(B * KH * T * D);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < KH; ++h)
          std::copy(all + b * batchStride + h * headStride,
                    all + b * batchStride + h * headStride + T * D,
                    present.data() + (b * KH + h) * T * D);
      storeFloats(present, *outputs[1 + which]);
    }
  }
  return Status::ok();
}

// ---- tfm.all_reduce, tfm.all_gather --------------------------------------------------

Status groupOf(const KernelContext &ctx, int64_t &ranks) {
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "ranks", 1, ranks));
  if (ranks < 1)
    return ctx.error("ranks must be positive, not ", ranks);
  if (ranks > 1 && !ctx.collectives)
    return ctx.error("the plan has ", ranks, " tensor-parallel ranks: run them together "
                     "(dsrun --ranks inprocess, or mpirun -np ", ranks, ")");
  if (ranks > 1 && ctx.collectives->size() != ranks)
    return ctx.error("the plan has ", ranks, " ranks but the group has ",
                     ctx.collectives->size());
  return Status::ok();
}

Status inferAllReduce(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "input", kFloatTypes));
  outputs.push_back({ctx.input(0)->dtype, ctx.input(0)->shape});
  return Status::ok();
}

Status computeAllReduce(const KernelContext &ctx, const Outputs &outputs) {
  int64_t ranks;
  DSRT_RETURN_IF_ERROR(groupOf(ctx, ranks));
  FloatView in(*ctx.input(0));
  std::vector<float> sum(in.data(), in.data() + ctx.input(0)->elements());
  if (ranks > 1)
    DSRT_RETURN_IF_ERROR(ctx.collectives->allReduceSum(sum.data(), sum.size()));
  storeFloats(sum, *outputs[0]);
  return Status::ok();
}

struct GatherLayout {
  int64_t axis = 0, outer = 1, inner = 1;
  std::vector<int64_t> sizes;  // per rank, along the axis
};

Status gatherLayout(const KernelContext &ctx, GatherLayout &layout) {
  const TensorRef &x = *ctx.input(0);
  int64_t ranks, axis;
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "ranks", 1, ranks));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "axis", 0, axis));
  if (ranks < 1)
    return ctx.error("ranks must be positive, not ", ranks);
  DSRT_RETURN_IF_ERROR(normalizeAxis(ctx, axis, x.shape.size(), "axis", layout.axis));
  bool present = false;
  DSRT_RETURN_IF_ERROR(getInts(ctx.attrs, "sizes", layout.sizes, present));
  if (!present)
    layout.sizes.assign(ranks, x.shape[layout.axis]);
  if (static_cast<int64_t>(layout.sizes.size()) != ranks)
    return ctx.error("sizes has ", layout.sizes.size(), " entries for ", ranks, " ranks");
  if (std::find(layout.sizes.begin(), layout.sizes.end(), x.shape[layout.axis]) ==
      layout.sizes.end())
    return ctx.error("the input's extent ", x.shape[layout.axis], " along axis ", layout.axis,
                     " is none of the ranks' sizes");
  layout.outer = product(x.shape, 0, layout.axis);
  layout.inner = product(x.shape, layout.axis + 1, x.shape.size());
  return Status::ok();
}

Status inferAllGather(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(requireRankAtLeast(ctx, 0, "input", 1));
  GatherLayout layout;
  DSRT_RETURN_IF_ERROR(gatherLayout(ctx, layout));
  Shape shape = ctx.input(0)->shape;
  shape[layout.axis] = std::accumulate(layout.sizes.begin(), layout.sizes.end(), int64_t(0));
  outputs.push_back({ctx.input(0)->dtype, shape});
  return Status::ok();
}

Status computeAllGather(const KernelContext &ctx, const Outputs &outputs) {
  int64_t ranks;
  DSRT_RETURN_IF_ERROR(groupOf(ctx, ranks));
  GatherLayout layout;
  DSRT_RETURN_IF_ERROR(gatherLayout(ctx, layout));
  const TensorRef &x = *ctx.input(0);
  size_t element = dtypeSize(x.dtype);
  int rank = ranks > 1 ? ctx.collectives->rank() : 0;
  if (x.shape[layout.axis] != layout.sizes[rank])
    return ctx.error("rank ", rank, " holds ", x.shape[layout.axis], " along axis ",
                     layout.axis, ", not its size ", layout.sizes[rank]);
  // Each rank's whole tensor arrives contiguously; the axis interleaves them.
  std::vector<int64_t> bytes;
  for (int64_t size : layout.sizes)
    bytes.push_back(layout.outer * size * layout.inner * static_cast<int64_t>(element));
  std::vector<uint8_t> gathered(std::accumulate(bytes.begin(), bytes.end(), int64_t(0)));
  if (ranks > 1)
    DSRT_RETURN_IF_ERROR(ctx.collectives->allGather(x.data, bytes, gathered.data()));
  else if (!gathered.empty())
    std::copy_n(static_cast<const uint8_t *>(x.data), gathered.size(), gathered.data());
  auto *out = static_cast<uint8_t *>(outputs[0]->data);
  int64_t total = outputs[0]->shape[layout.axis];
  int64_t rowBytes = layout.inner * static_cast<int64_t>(element);
  int64_t source = 0, offset = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    int64_t block = layout.sizes[r] * rowBytes;
    for (int64_t o = 0; o < layout.outer; ++o)
      std::copy_n(gathered.data() + source + o * block, block,
                  out + (o * total + offset) * rowBytes);
    source += bytes[r];
    offset += layout.sizes[r];
  }
  return Status::ok();
}

// ---- tfm.lm_head ---------------------------------------------------------------------

Status inferLmHead(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  return inferLinear(ctx, outputs);
}

} // namespace

void addTransformerKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"tfm.embedding", 2, 2, 2, 1, 1, inferEmbedding, computeEmbedding});
  kernels.push_back({"tfm.layer_norm", 2, 4, 2, 1, 2, inferNorm, computeNorm});
  kernels.push_back({"tfm.rms_norm", 2, 3, 2, 1, 2, inferNorm, computeNorm});
  kernels.push_back({"tfm.linear", 2, 5, 2, 1, 1, inferLinear, computeLinear});
  // An int8 head has tfm.linear's positions: (hidden, weight, none, scales).
  kernels.push_back({"tfm.lm_head", 2, 4, 2, 1, 1, inferLmHead, computeLinear});
  kernels.push_back({"tfm.activation", 1, 1, 1, 1, 1, inferSameAsFirst, computeElementwise});
  kernels.push_back({"tfm.gated_act", 2, 2, 2, 1, 1, inferSameAsFirst, computeElementwise});
  kernels.push_back({"tfm.residual_add", 2, 2, 2, 1, 1, inferSameAsFirst, computeElementwise});
  kernels.push_back({"tfm.attention", 3, 7, 3, 1, 3, inferAttention, computeAttention});
  kernels.push_back({"tfm.all_reduce", 1, 1, 1, 1, 1, inferAllReduce, computeAllReduce});
  kernels.push_back({"tfm.all_gather", 1, 1, 1, 1, 1, inferAllGather, computeAllGather});
}

} // namespace dsrt::ops
