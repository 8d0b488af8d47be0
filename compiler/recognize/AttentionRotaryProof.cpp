// dsc-recognize-attention: the query's proof, its rotary embedding above all (RoPE's
// base formula, a measured or fitted table, a half model's rounded one).
#include "compiler/recognize/AttentionMatch.h"

#include "compiler/evaluate/Evaluator.h"
#include "compiler/lowering/RuntimeTypes.h"
#include "compiler/lowering/SymbolicDims.h"
#include "ops/OpTraits.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace dsc::attention {

namespace {

// A RoPE base measured from a rounded (half) rotary table, to within about 1e-3: the nearest
// value of two significant digits (10000, 500000, 1000000, 150000: every published base is
// one) where it lies that close, else as measured.
double roundBase(double measured) {
  const double scale = std::pow(10.0, std::floor(std::log10(measured)) - 1);
  const double round = std::round(measured / scale) * scale;
  return std::abs(round - measured) <= 2e-3 * measured ? round : measured;
}

// A rotary table's rows fitted: each pair's frequency.
struct TableFit {
  std::vector<double> frequencies;
};

// The cos and sin tables [positions, half] that the query's rotation gathers rows of (ONNX
// Runtime's cos_cache and sin_cache, stored in the export), found among the weights a Gather
// of the query's region reads, and fitted: the phase atan2(sin, cos) of each column unwrapped
// over the rows and fitted through the origin, so that a table rounded to 2^-11 gives each
// frequency to about 2^-11 / rows. None without exactly two such tables.
std::optional<TableFit> fitRotaryTable(const probe::ProbeEvaluator &probe, const Candidate &c,
                                       int64_t half) {
  // The tables: stored weights, or values the probe computed (LongRoPE's table, which an If
  // chooses by the length: the probe's branch's).
  llvm::SmallVector<Value, 2> tables;
  for (Operation *op : c.region)
    for (Value operand : op->getOperands()) {
      Value value = operand;
      for (int depth = 0; depth < 6 && value; ++depth) {
        Operation *def = value.getDefiningOp();
        if (!def)
          break;
        if (auto gather = dyn_cast<onnx::GatherOp>(def)) {
          Value table = gather.getData();
          auto type = dyn_cast<RankedTensorType>(table.getType());
          if ((table.getDefiningOp<onnx::WeightOp>() || table.getDefiningOp<onnx::IfOp>()) &&
              type && type.getRank() == 2 && type.getDimSize(1) == half &&
              !llvm::is_contained(tables, table))
            tables.push_back(table);
          break;
        }
        if (!isOp(def, "onnx.Reshape") && !isOp(def, "onnx.Unsqueeze") &&
            !isOp(def, "onnx.Squeeze") && !isOp(def, "onnx.Cast") && !isOp(def, "onnx.Expand"))
          break;
        value = def->getOperand(0);
      }
    }
  if (tables.size() != 2)
    return std::nullopt;
  auto asF32 = [&](Value table) -> std::shared_ptr<dsrt::OwnedTensor> {
    if (auto weight = table.getDefiningOp<onnx::WeightOp>())
      return probe.weightAsF32(weight.getName());
    const probe::Info *info = probe.lookup(table);
    if (!info || !info->value)
      return nullptr;
    const dsrt::OwnedTensor &computed = *info->value;
    auto widened = std::make_shared<dsrt::OwnedTensor>(dsrt::DType::F32, computed.shape);
    if (!dsrt::convertFloats(computed.dtype, computed.storage.data(), dsrt::DType::F32,
                             widened->storage.data(), dsrt::elementCount(computed.shape)))
      return nullptr;
    return widened;
  };
  std::shared_ptr<dsrt::OwnedTensor> a = asF32(tables[0]), b = asF32(tables[1]);
  if (!a || !b || a->shape != b->shape || a->shape.size() != 2 || a->shape[0] < 2)
    return std::nullopt;
  const float *first = reinterpret_cast<const float *>(a->storage.data());
  const float *second = reinterpret_cast<const float *>(b->storage.data());
  // Row 0 (position 0): cos is the amplitude, sin is 0.
  const float *cosines = std::abs(first[0]) >= std::abs(second[0]) ? first : second;
  const float *sines = cosines == first ? second : first;
  const int64_t rows = a->shape[0];
  TableFit fit;
  for (int64_t i = 0; i < half; ++i) {
    double previous = 0, unwrapped = 0, numerator = 0, denominator = 0;
    for (int64_t p = 0; p < rows; ++p) {
      const double cosine = cosines[p * half + i], sine = sines[p * half + i];
      const double phase = std::atan2(sine, cosine);
      if (p > 0)
        unwrapped += std::remainder(phase - previous, 2 * M_PI);
      previous = phase;
      numerator += double(p) * unwrapped;
      denominator += double(p) * double(p);
    }
    fit.frequencies.push_back(numerator / denominator);
  }
  return fit;
}

} // namespace

std::string Matcher::proveQuery(Candidate &c, double &qscale) {
  std::string why;
  auto seed = randomTensor(*shapeOf(c.querySource), 1);
  auto out = evaluateSeeded(probe_, {{c.querySource, seed}}, c.scores->getOperand(0),
                            c.region, why);
  if (!out)
    return "query: " + why;
  const int64_t B = batch_, S = fresh_, H = c.heads, D = c.headDim;
  std::vector<float> x = headsLast(floats(*seed), c.queryHeadsFirst, B, H, S, D),
                     y = floats(*out);
  if (int64_t(y.size()) != B * H * S * D)
    return "query: the scores' first operand is not [batch, heads, seq, head_dim]";
  if (c.queryNorm) {
    applyHeadNorm(c, c.queryNorm, x, D);
    scaleRotatedHeads(c, c.queryNorm, y.data(), y.size(), D, /*divide=*/true);
  }
  // y[b][n][t][e] against x[b][t][n][e].
  auto xi = [&](int64_t b, int64_t t, int64_t n, int64_t e) { return ((b * S + t) * H + n) * D + e; };
  auto yi = [&](int64_t b, int64_t n, int64_t t, int64_t e) { return ((b * H + n) * S + t) * D + e; };
  double sx = 0, sy = 0;
  for (float v : x) sx += double(v) * v;
  for (float v : y) sy += double(v) * v;
  qscale = std::sqrt(sy / sx);
  if (!(qscale > 0) || !std::isfinite(qscale))
    return "query: the query is not a positive multiple of the projection";
  std::vector<float> z(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t n = 0; n < H; ++n)
        for (int64_t e = 0; e < D; ++e)
          z[xi(b, t, n, e)] = float(y[yi(b, n, t, e)] / qscale);
  // An export of a half model (dsc-widen-half-precision's dsc.half_export) may hold its
  // rotary tables in that type (ONNX Runtime GenAI's CUDA exports: fp16 cos and sin
  // caches): each cos and sin is then rounded to 2^-11 (f16) or 2^-8 (bf16) of itself, and a
  // rotated feature to that of its pair's magnitude. dsc computes the rotation the rounded
  // table stands for, in f32.
  // The rotary is looked for exactly first, and only then, in a half model's export, within
  // its table's rounding: a table the graph computes in f32 is matched as it is.
  const double halfRounding = halfTableRounding(c);
  double tableRounding = 0;
  auto matches = [&](const Rotary *rotary, std::vector<int64_t> *pos) {
    std::vector<float> head(D);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t n = 0; n < H; ++n) {
          std::copy_n(&x[xi(b, t, n, 0)], D, head.begin());
          double magnitude = 0;
          for (float v : head)
            magnitude = std::max(magnitude, double(std::abs(v)));
          if (rotary)
            rotary->apply(head.data(), (*pos)[b * S + t]);
          const double rounded = rotary ? 4 * tableRounding * magnitude : 0;
          for (int64_t e = 0; e < D; ++e)
            if (!close(z[xi(b, t, n, e)], head[e]) &&
                !(rounded > 0 && std::abs(z[xi(b, t, n, e)] - head[e]) <= rounded))
              return false;
        }
    return true;
  };
  if (matches(nullptr, nullptr))
    return "";
  // Without position_ids, transformers rotates the new tokens at past + t; with neither a
  // past nor a mask (an export of the ids alone) that is t.
  if (!positionIds_) {
    if (!attentionMask_ && c.pastKey)
      return "query: the query is rotated, and there is neither a position_ids input nor "
             "an attention_mask to count the cached tokens by";
    impliedPositions_.clear();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < S; ++t)
        impliedPositions_.push_back(past_ + t);
    c.impliedPositions = true;
  }
  std::vector<int64_t> pos = positions();
  if (int64_t(pos.size()) != B * S)
    return "query: the query is rotated, but the probe has no positions for it";
  if (pos[1] == pos[0])
    return "query: the probe's positions do not advance";
  const double wholeScale = qscale;
  // A table with pairs that do not turn is the answer only where no narrower rotation is
  // (Gemma-4's proportional RoPE): an interleaved partial rotary is its rotated features.
  std::optional<std::pair<Rotary, double>> withStillPairs;
  for (int pass = 0; pass < (halfRounding > 0 ? 2 : 1) && !withStillPairs; ++pass) {
    tableRounding = pass == 0 ? 0 : halfRounding;
    for (bool interleaved : {false, true}) {
      for (int64_t dim = D - D % 2; dim >= 2; dim -= 2) {
        Rotary rotary;
        rotary.dim = dim;
        rotary.interleaved = interleaved;
        // The query's scale is the pass-through features' where there are some: an attention
        // factor (yarn, longrope) scales the rotated ones only.
        double scale = wholeScale;
        if (dim < D) {
          double px = 0, py = 0;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < S; ++t)
              for (int64_t n = 0; n < H; ++n)
                for (int64_t e = dim; e < D; ++e) {
                  px += double(x[xi(b, t, n, e)]) * x[xi(b, t, n, e)];
                  py += double(y[yi(b, n, t, e)]) * y[yi(b, n, t, e)];
                }
          scale = std::sqrt(py / px);
          if (!(scale > 0) || !std::isfinite(scale))
            continue;
        }
        if (scale != qscale) {
          qscale = scale;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < S; ++t)
              for (int64_t n = 0; n < H; ++n)
                for (int64_t e = 0; e < D; ++e)
                  z[xi(b, t, n, e)] = float(y[yi(b, n, t, e)] / qscale);
        }
        bool passes = true;  // the features past `dim` are not rotated
        for (int64_t e = dim; e < D && passes; ++e)
          passes = close(z[xi(0, 0, 0, e)], x[xi(0, 0, 0, e)]);
        if (!passes)
          continue;
        std::optional<Frequencies> measured = measureFrequencies(c, rotary, qscale, pos);
        if (!measured)
          continue;
        const std::vector<double> *frequencies = &measured->inverse;
        // inv_freq[1] = base^(-2/dim) gives the base; where the base formula reproduces every
        // measured frequency the rotation is the default RoPE, else the measured table is it.
        double base = 10000;
        if (dim >= 4) {
          base = std::pow((*frequencies)[1], -double(dim) / 2);
          if (!(base > 1) || !std::isfinite(base)) {
            base = 10000;
          } else {
            if (tableRounding > 0)
              base = roundBase(base);
            if (std::abs(base - std::round(base)) < 1e-4 * base)
              base = std::round(base);
          }
        }
        rotary.setBase(base);
        // A rounded table's frequencies are measured to about twice its rounding over the
        // probe's last position; a formula that far off at some pair is another rotation
        // (a scaled RoPE's slow pairs differ by whole factors).
        const double relative = tableRounding > 0 ? 1e-2 : 1e-5;
        const double absolute =
            tableRounding > 0 ? 2 * tableRounding / std::max<double>(1, pos[S - 1]) : 0;
        bool formula = true;
        for (int64_t i = 0; i < dim / 2 && formula; ++i)
          formula = std::abs(rotary.invFreq[i] - (*frequencies)[i]) <=
                    relative * rotary.invFreq[i] + absolute;
        const double amplitude = measured->attentionFactor;
        if (!formula && tableRounding > 0) {
          // A rounded table that is not the base formula (Llama 3's scaled RoPE, yarn) read
          // as measured on the probe would be about 1e-4 per pair off, which drifts over long
          // contexts: its frequencies are fitted over every row of the table the graph
          // gathers instead (the exported cos and sin caches), to about its rounding over
          // the table's length.
          std::optional<TableFit> fit = fitRotaryTable(probe_, c, dim / 2);
          if (!fit)
            continue;
          rotary.invFreq.assign(fit->frequencies.begin(), fit->frequencies.end());
          rotary.explicitTable = true;
          // The amplitude stays the probe's, relative to the query's scale (which absorbed
          // a whole head's attention factor, yarn's): the table's own is absolute.
        } else if (!formula) {
          rotary.invFreq.assign(frequencies->begin(), frequencies->end());
          rotary.explicitTable = true;
        }
        // A half model's table has an amplitude of 1 to within its rounding.
        if (std::abs(amplitude - 1) > std::max(1e-6, 4 * halfRounding))
          rotary.attentionFactor = float(amplitude);
        if (matches(&rotary, &pos)) {
          if (llvm::is_contained(rotary.invFreq, 0.0f)) {
            if (!withStillPairs) {
              withStillPairs = {rotary, qscale};
              c.rotaryTableRounding = tableRounding;
            }
            continue;
          }
          c.rotary = rotary;
          c.rotaryTableRounding = tableRounding;
          return "";
        }
      }
    }
  }
  if (withStillPairs) {
    c.rotary = withStillPairs->first;
    qscale = withStillPairs->second;
    return "";
  }
  return positionIds_ ? "query: the query is transformed in a way that is neither a scale nor "
                        "a half-split or interleaved rotary embedding at position_ids"
                      : "query: the query is transformed in a way that is neither a scale nor "
                        "a half-split or interleaved rotary embedding at past + t (there is "
                        "no position_ids input)";
}

// A query of ones at the first element of every pair turns, at position p, into
// qscale * (cos p·f, sin p·f) on each pair: the graph's own cosine and sine, read back with
// the relative precision of fp32 even for the slowest pairs (sin p·f ~ p·f). Consecutive
// positions of the unpadded first row give each f to about 1e-7; the last position, with
// the whole turns it has made, refines it to what the graph's fp32 arithmetic holds.
std::optional<Matcher::Frequencies>
Matcher::measureFrequencies(const Candidate &c, const Rotary &shape, double qscale,
                            const std::vector<int64_t> &pos) {
  const int64_t B = batch_, S = fresh_, H = c.heads, D = c.headDim, half = shape.dim / 2;
  if (S < 2 || int64_t(pos.size()) < S)
    return std::nullopt;
  for (int64_t t = 1; t < S; ++t)
    if (pos[t] != pos[t - 1] + 1)
      return std::nullopt;
  // Ones in [b, s, n, d] order, laid out as the source holds them.
  auto seed = filledTensor(*shapeOf(c.querySource), 0.0f);
  float *data = reinterpret_cast<float *>(seed->storage.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t n = 0; n < H; ++n)
        for (int64_t i = 0; i < half; ++i) {
          int64_t e = shape.pair(i).first;
          data[c.queryHeadsFirst ? ((b * H + n) * S + t) * D + e : ((b * S + t) * H + n) * D + e] =
              1.0f;
        }
  std::string why;
  llvm::SetVector<Operation *> region;
  auto out = evaluateSeeded(probe_, {{c.querySource, seed}}, c.scores->getOperand(0), region, why);
  if (!out)
    return std::nullopt;
  std::vector<float> y = floats(*out);  // [b, n, s, d]
  if (int64_t(y.size()) != B * H * S * D)
    return std::nullopt;
  scaleRotatedHeads(c, c.queryNorm, y.data(), y.size(), D, /*divide=*/true);
  // A norm the rotation commutes with scales each head of ones by one gain.
  if (c.queryNorm) {
    std::vector<float> head(D, 0.0f);
    for (int64_t i = 0; i < half; ++i)
      head[shape.pair(i).first] = 1.0f;
    applyHeadNorm(c, c.queryNorm, head, D);
    // A scale after the rotation divides the graph's values below.
    qscale *= head[shape.pair(0).first];
  }
  Frequencies measured;
  std::vector<double> &frequencies = measured.inverse;
  frequencies.resize(half);
  {
    auto [a, b] = shape.pair(0);
    measured.attentionFactor = std::hypot(y[a], y[b]) / qscale;
  }
  for (int64_t i = 0; i < half; ++i) {
    auto [a, b] = shape.pair(i);
    std::vector<double> turn(S);
    for (int64_t t = 0; t < S; ++t) {
      double za = y[t * D + a] / qscale, zb = y[t * D + b] / qscale;
      if (std::abs(std::hypot(za, zb) - measured.attentionFactor) >
          1e-3 * measured.attentionFactor)
        return std::nullopt;  // not a rotation of this pair (every pair has one amplitude)
      turn[t] = std::atan2(zb, za);
    }
    double coarse = 0;
    for (int64_t t = 1; t < S; ++t)
      coarse += std::remainder(turn[t] - turn[t - 1], 2 * M_PI);
    coarse /= double(S - 1);
    double last = double(pos[S - 1]);
    double frequency = coarse;
    if (last > 0) {
      double whole = std::round((last * coarse - turn[S - 1]) / (2 * M_PI));
      frequency = (turn[S - 1] + 2 * M_PI * whole) / last;
    }
    // Negative where the export turns the other way (nanochat's rotate_half with flipped
    // signs): the same rotation at angle -p·f. Zero for a pair that does not turn (Gemma-4's
    // proportional RoPE rotates a part of the pairs of the whole head).
    if (!std::isfinite(frequency))
      return std::nullopt;
    frequencies[i] = frequency;
  }
  if (!(measured.attentionFactor > 0) || !std::isfinite(measured.attentionFactor))
    return std::nullopt;
  return measured;
}

} // namespace dsc::attention
