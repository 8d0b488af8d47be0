// dsc-recognize-attention: see Passes.td.
//
// Structure only proposes: which values are Q, K, V, the past inputs, the presents and the
// output. Semantics are proven by running the graph's own ops on a probe with the
// runtime's kernels and comparing with what tfm.attention would compute from the proposed
// operands, so every exporter variant of masks, scales, rotary and head plumbing is
// covered by one matcher, and anything that does not compute the same numbers is declined.
#include "compiler/recognize/Passes.h"
#include "compiler/recognize/DeadOps.h"
#include "compiler/recognize/ImpliedPositions.h"
#include "compiler/recognize/ProbeEvaluator.h"
#include "compiler/recognize/RecognizeAttention.h"

#include "compiler/evaluate/Evaluator.h"
#include "compiler/lowering/RuntimeTypes.h"
#include "compiler/lowering/SymbolicDims.h"
#include "frontends/onnx/WeightStore.h"
#include "ops/OpTraits.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

namespace dsc {
#define GEN_PASS_DEF_RECOGNIZEATTENTION
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// The probe: large enough that a left-padded row, the causal triangle, a local window of
// up to 11 tokens and the rotary frequencies are all visible, small enough to be free.
constexpr int64_t kProbeBatch = 2;
constexpr int64_t kProbePast = 5;
constexpr int64_t kProbeNew = 7;
constexpr int64_t kProbePadding = 2;  // leading masked tokens of every row but the first
// Additive bias at or below this is a masked position (exp underflows to 0 in fp32).
constexpr float kMaskedBelow = -1e4f;
constexpr double kTolerance = 1e-4;

using namespace probe;

//===----------------------------------------------------------------------===//
// Numbers.
//===----------------------------------------------------------------------===//

std::vector<float> floats(const dsrt::OwnedTensor &tensor) {
  std::vector<float> out(dsrt::elementCount(tensor.shape));
  if (tensor.dtype == dsrt::DType::F32)
    std::memcpy(out.data(), tensor.storage.data(), out.size() * sizeof(float));
  else
    out.clear();
  return out;
}

std::vector<int64_t> integers(const dsrt::OwnedTensor &tensor) {
  int64_t n = dsrt::elementCount(tensor.shape);
  std::vector<int64_t> out(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (tensor.dtype) {
    case dsrt::DType::I64: out[i] = reinterpret_cast<const int64_t *>(tensor.storage.data())[i]; break;
    case dsrt::DType::I32: out[i] = reinterpret_cast<const int32_t *>(tensor.storage.data())[i]; break;
    case dsrt::DType::Bool:
    case dsrt::DType::U8: out[i] = tensor.storage[i]; break;
    default: return {};
    }
  }
  return out;
}

std::shared_ptr<dsrt::OwnedTensor> randomTensor(dsrt::Shape shape, uint64_t seed) {
  auto tensor = std::make_shared<dsrt::OwnedTensor>(dsrt::DType::F32, shape);
  float *data = reinterpret_cast<float *>(tensor->storage.data());
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0, n = dsrt::elementCount(shape); i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = float((state >> 40) & 0xFFFFFF) / float(1 << 23) - 1.0f;  // [-1, 1)
  }
  return tensor;
}

std::shared_ptr<dsrt::OwnedTensor> filledTensor(dsrt::Shape shape, float value) {
  auto tensor = std::make_shared<dsrt::OwnedTensor>(dsrt::DType::F32, shape);
  float *data = reinterpret_cast<float *>(tensor->storage.data());
  std::fill(data, data + dsrt::elementCount(shape), value);
  return tensor;
}

bool close(double actual, double expected) {
  return std::abs(actual - expected) <= kTolerance + kTolerance * std::abs(expected);
}

// BLOOM's build_alibi_tensor slopes.
std::vector<double> alibiSlopes(int64_t heads) {
  int64_t power = int64_t(1) << int64_t(std::floor(std::log2(double(heads))));
  double base = std::pow(2.0, -std::pow(2.0, -(std::log2(double(power)) - 3)));
  std::vector<double> slopes;
  for (int64_t i = 1; i <= power; ++i)
    slopes.push_back(std::pow(base, double(i)));
  if (power != heads) {
    double extra = std::pow(2.0, -std::pow(2.0, -(std::log2(double(2 * power)) - 3)));
    int64_t remaining = std::min(power, heads - power);
    for (int64_t i = 0; i < remaining; ++i)
      slopes.push_back(std::pow(extra, double(1 + 2 * i)));
  }
  return slopes;
}

struct Rotary {
  int64_t dim = 0;
  double base = 10000;
  bool interleaved = false;
  std::vector<float> invFreq;  // as transformers computes them, in fp32

  void setBase(double newBase) {
    base = newBase;
    invFreq.clear();
    for (int64_t i = 0; i < dim / 2; ++i)
      invFreq.push_back(1.0f / std::pow(float(base), float(2 * i) / float(dim)));
  }
  std::pair<int64_t, int64_t> pair(int64_t i) const {
    return interleaved ? std::pair{2 * i, 2 * i + 1} : std::pair{i, i + dim / 2};
  }
  // Rotates one head vector in place at `position`.
  void apply(float *x, int64_t position) const {
    for (int64_t i = 0; i < dim / 2; ++i) {
      auto [a, b] = pair(i);
      float angle = float(position) * invFreq[i];
      float c = std::cos(angle), s = std::sin(angle);
      float xa = x[a], xb = x[b];
      x[a] = xa * c - xb * s;
      x[b] = xb * c + xa * s;
    }
  }
};

//===----------------------------------------------------------------------===//
// The matcher.
//===----------------------------------------------------------------------===//

struct Candidate {
  // Structure.
  Operation *softmax = nullptr;
  Operation *scores = nullptr;   // MatMul(Q, K^T)
  Operation *context = nullptr;  // MatMul(P, V)
  Value root;                    // [b, s, heads * d], or [b * s, heads * d] when flatRoot
  bool flatRoot = false;         // merged straight into rows (GPT-2's Conv1D under dynamo)
  Value querySource, keySource, valueSource;  // [b, s, n * d] or [b, s, n, d]
  int64_t queryRank = 3, keyRank = 3, valueRank = 3;  // of the sources, on the probe
  // A source [b, n, s, d]: heads split off a fused projection after the heads were moved
  // first (GPT-NeoX's query_key_value under transformers 5).
  bool queryHeadsFirst = false, keyHeadsFirst = false, valueHeadsFirst = false;
  Value pastKey, pastValue;
  Value presentKey, presentValue;
  Value attentionMask, positionIds;  // the graph inputs, when the function has them
  std::string declined;              // set when a later check refutes the match
  // Proven semantics.
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  double scale = 1;
  bool causal = false, alibi = false, padding = false;
  int64_t window = 0;
  // Queries with no key to attend (left padding under a causal mask) average the values
  // of every key ("all") or of the causally visible ones ("causal"), as the export does.
  std::string unattended = "all";
  std::optional<Rotary> rotary;
  // Rotated at past + t, computed inside the graph (no position_ids input).
  bool impliedPositions = false;
  llvm::SetVector<Operation *> region;
};

class Matcher {
public:
  Matcher(const ProbeEvaluator &probe, Value attentionMask, Value positionIds,
          const llvm::DenseSet<Value> &tainted)
      : probe_(probe), attentionMask_(attentionMask), positionIds_(positionIds),
        tainted_(tainted) {}

  // Empty on success, else the reason.
  std::string match(Operation *softmax, Candidate &c);

private:
  const dsrt::Shape *shapeOf(Value v) const {
    const Info *info = probe_.lookup(v);
    return info && !info->isNone ? &info->shape : nullptr;
  }
  bool isTainted(Value v) const { return tainted_.contains(v); }
  std::string findSources(Value from, int64_t exactHeads, int64_t maxHeads, bool allowPast,
                          Value &source, Value &past, int64_t &sourceHeads, bool &headsFirst);
  std::string proveQuery(Candidate &c, double &qscale);
  std::string proveKeyValue(Candidate &c, bool isKey, double &kscale);
  std::string proveScores(Candidate &c, double &chainScale);
  std::string proveOutput(Candidate &c);
  std::vector<int64_t> positions() const;

  const ProbeEvaluator &probe_;
  Value attentionMask_, positionIds_;
  std::vector<int64_t> impliedPositions_;  // past + t, while the query is tried at them
  const llvm::DenseSet<Value> &tainted_;
  int64_t batch_ = kProbeBatch, fresh_ = kProbeNew, total_ = 0, past_ = 0;
  int64_t heads_ = 0, headDim_ = 0;
};

std::vector<int64_t> Matcher::positions() const {
  if (!positionIds_)
    return impliedPositions_;
  const Info *info = probe_.lookup(positionIds_);
  if (!info || !info->value)
    return {};
  return integers(*info->value);
}

// Follows a Q/K/V operand of the attention back through the head plumbing (reshapes,
// transposes, rotary, repeat_kv, scales, casts, the past concat) to where it enters:
// a [b, s, n * d] projection, or a graph input (the past). Which ops these are does not
// matter for correctness: the probe proves what they compute.
std::string Matcher::findSources(Value from, int64_t exactHeads, int64_t maxHeads,
                                 bool allowPast, Value &source, Value &past,
                                 int64_t &sourceHeads, bool &headsFirst) {
  headsFirst = false;
  static const llvm::StringSet<> plumbing = {
      "onnx.Reshape",   "onnx.Transpose", "onnx.Mul",    "onnx.Div",    "onnx.Add",
      "onnx.Sub",       "onnx.Neg",       "onnx.Slice",  "onnx.Gather", "onnx.Concat",
      "onnx.Unsqueeze", "onnx.Squeeze",   "onnx.Expand", "onnx.Cast",   "onnx.Split",
      "onnx.Identity",  "onnx.Tile",      "onnx.Where",  "onnx.Flatten"};
  llvm::SetVector<Value> stops;
  llvm::SmallPtrSet<Operation *, 32> visited;
  SmallVector<Value> worklist = {from};
  SmallVector<Value> headViews;  // [b, s, n, d] values met on the way
  SmallVector<Value> headsFirstViews;  // and [b, n, s, d] ones
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    const dsrt::Shape *shape = shapeOf(value);
    if (!shape)
      return "a value on the Q/K/V path has no shape on the probe";
    if (isa<BlockArgument>(value)) {
      stops.insert(value);
      continue;
    }
    if (value != from && shape->size() == 3 && (*shape)[0] == batch_ &&
        (*shape)[1] == fresh_) {
      stops.insert(value);
      continue;
    }
    bool headView = shape->size() == 4 && (*shape)[0] == batch_ && (*shape)[1] == fresh_ &&
                    (*shape)[3] == headDim_;
    if (headView)
      headViews.push_back(value);
    else if (shape->size() == 4 && (*shape)[0] == batch_ && (*shape)[2] == fresh_ &&
             (*shape)[3] == headDim_)
      headsFirstViews.push_back(value);
    Operation *def = value.getDefiningOp();
    // A norm over each head (Qwen3's, OLMo's and Gemma-3's q/k norm) is where the heads
    // enter: the attention takes the normalised heads.
    if (headView && isa<tfm::RmsNormOp, tfm::LayerNormOp>(def)) {
      stops.insert(value);
      continue;
    }
    if (!plumbing.contains(def->getName().getStringRef()))
      return "'" + evaluate::describeLocation(def->getLoc()) + "' (" +
             def->getName().getStringRef().str() + ") on the Q/K/V path is not head plumbing";
    if (!visited.insert(def).second)
      continue;
    for (Value operand : def->getOperands())
      if (isTainted(operand))
        worklist.push_back(operand);
  }
  SmallVector<Value> fresh, pasts;
  for (Value stop : stops) {
    const dsrt::Shape *shape = shapeOf(stop);
    if (shape->size() == 3 && (*shape)[0] == batch_ && (*shape)[1] == fresh_)
      fresh.push_back(stop);
    else if (shape->size() == 4 && !isa<BlockArgument>(stop))
      fresh.push_back(stop);  // normalised heads
    else if (shape->size() == 4 && isa<BlockArgument>(stop))
      pasts.push_back(stop);
    else
      return "the Q/K/V path starts at a graph input that is neither the hidden state nor a "
             "past key/value";
  }
  if (fresh.size() != 1)
    return "the Q/K/V path does not start at exactly one [batch, seq, features] value";
  if (pasts.size() > 1 || (!pasts.empty() && !allowPast))
    return "the Q/K/V path reads more than one past input";
  source = fresh.front();
  past = pasts.empty() ? Value() : pasts.front();
  if (shapeOf(source)->size() == 4) {
    int64_t n = (*shapeOf(source))[2];
    if (exactHeads ? n != exactHeads : (n > maxHeads || maxHeads % n != 0))
      return "the normalised heads are not a whole number of the attention's heads";
    sourceHeads = n;
    return "";
  }
  int64_t features = (*shapeOf(source))[2];
  if (features % headDim_ == 0) {
    int64_t n = features / headDim_;
    if (exactHeads ? n == exactHeads : (n <= maxHeads && maxHeads % n == 0)) {
      sourceHeads = n;
      return "";
    }
  }
  // A fused projection (BLOOM's query_key_value): the earliest per-head view of this part.
  Value view;
  for (Value v : headViews) {
    int64_t n = (*shapeOf(v))[2];
    if (exactHeads ? n != exactHeads : (n > maxHeads || maxHeads % n != 0))
      continue;
    if (!view || v.getDefiningOp()->isBeforeInBlock(view.getDefiningOp()))
      view = v;
  }
  if (!view) {
    for (Value v : headsFirstViews) {
      int64_t n = (*shapeOf(v))[1];
      if (exactHeads ? n != exactHeads : (n > maxHeads || maxHeads % n != 0))
        continue;
      if (!view || v.getDefiningOp()->isBeforeInBlock(view.getDefiningOp()))
        view = v;
    }
    if (view) {
      source = view;
      sourceHeads = (*shapeOf(view))[1];
      headsFirst = true;
      return "";
    }
  }
  if (!view)
    return "the projection [batch, seq, " + std::to_string(features) +
           "] is not a whole number of heads and has no per-head view";
  source = view;
  sourceHeads = (*shapeOf(view))[2];
  return "";
}

// A source's values in [b, s, n, d] order, the order the proofs index; a heads-first
// source holds them as [b, n, s, d].
std::vector<float> headsLast(std::vector<float> x, bool headsFirst, int64_t B, int64_t N,
                             int64_t S, int64_t D) {
  if (!headsFirst || int64_t(x.size()) != B * N * S * D)
    return x;
  std::vector<float> out(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t t = 0; t < S; ++t)
        std::copy_n(&x[((b * N + n) * S + t) * D], D, &out[((b * S + t) * N + n) * D]);
  return out;
}

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
  auto matches = [&](const Rotary *rotary, std::vector<int64_t> *pos) {
    std::vector<float> head(D);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t n = 0; n < H; ++n) {
          std::copy_n(&x[xi(b, t, n, 0)], D, head.begin());
          if (rotary)
            rotary->apply(head.data(), (*pos)[b * S + t]);
          for (int64_t e = 0; e < D; ++e)
            if (!close(z[xi(b, t, n, e)], head[e]))
              return false;
        }
    return true;
  };
  if (matches(nullptr, nullptr))
    return "";
  // Without position_ids, transformers rotates the new tokens at past + t.
  if (!positionIds_) {
    if (!attentionMask_)
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
  for (bool interleaved : {false, true}) {
    for (int64_t dim = D - D % 2; dim >= 2; dim -= 2) {
      Rotary rotary;
      rotary.dim = dim;
      rotary.interleaved = interleaved;
      bool passes = true;  // the features past `dim` are not rotated
      for (int64_t e = dim; e < D && passes; ++e)
        passes = close(z[xi(0, 0, 0, e)], x[xi(0, 0, 0, e)]);
      if (!passes)
        continue;
      // Each pair turns by position * inv_freq: the turn between two consecutive positions
      // of the first row gives inv_freq, and inv_freq[1] = base^(-2/dim) gives the base.
      auto angle = [&](int64_t t, int64_t i) {
        auto [a, b2] = rotary.pair(i);
        double xa = x[xi(0, t, 0, a)], xb = x[xi(0, t, 0, b2)];
        double za = z[xi(0, t, 0, a)], zb = z[xi(0, t, 0, b2)];
        return std::atan2(xa * zb - xb * za, xa * za + xb * zb);
      };
      double base = 10000;
      if (dim >= 4) {
        double turn = angle(1, 1) - angle(0, 1);
        turn = std::remainder(turn, 2 * M_PI) / double(pos[1] - pos[0]);
        if (!(turn > 0))
          continue;
        base = std::pow(turn, -double(dim) / 2);
        if (std::abs(base - std::round(base)) < 1e-3 * base)
          base = std::round(base);
      }
      rotary.setBase(base);
      if (matches(&rotary, &pos)) {
        c.rotary = rotary;
        return "";
      }
    }
  }
  return positionIds_ ? "query: the query is transformed in a way that is neither a scale nor "
                        "a half-split or interleaved rotary embedding at position_ids"
                      : "query: the query is transformed in a way that is neither a scale nor "
                        "a half-split or interleaved rotary embedding at past + t (there is "
                        "no position_ids input)";
}

std::string Matcher::proveKeyValue(Candidate &c, bool isKey, double &scale) {
  std::string why;
  const char *what = isKey ? "key" : "value";
  Value source = isKey ? c.keySource : c.valueSource;
  Value past = isKey ? c.pastKey : c.pastValue;
  Value target = isKey ? c.scores->getOperand(1) : c.context->getOperand(1);
  auto seed = randomTensor(*shapeOf(source), isKey ? 2 : 3);
  Seeds seeds = {{source, seed}};
  std::shared_ptr<dsrt::OwnedTensor> pastSeed;
  if (past) {
    pastSeed = randomTensor(*shapeOf(past), isKey ? 4 : 5);
    seeds.push_back({past, pastSeed});
  }
  llvm::SetVector<Operation *> region;
  auto out = evaluateSeeded(probe_, seeds, target, region, why);
  if (!out)
    return std::string(what) + ": " + why;
  const int64_t B = batch_, S = fresh_, H = c.heads, G = c.kvHeads, D = c.headDim;
  const int64_t T = total_, P = past_;
  if (past && (*shapeOf(past))[2] != P)
    return std::string(what) + ": the past input does not hold the cached tokens";
  if (!past && P != 0)
    return std::string(what) + ": keys cover more tokens than the new ones and the past input";
  std::vector<float> x = headsLast(floats(*seed), isKey ? c.keyHeadsFirst : c.valueHeadsFirst,
                                   B, G, S, D),
                     p = pastSeed ? floats(*pastSeed) : std::vector<float>();
  std::vector<int64_t> pos = positions();
  // full[b][g][j][e]: the past, then the new keys (rotated) or values.
  std::vector<float> full(B * G * T * D);
  std::vector<float> head(D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < T; ++j) {
        float *dst = &full[((b * G + g) * T + j) * D];
        if (j < P) {
          std::copy_n(&p[((b * G + g) * P + j) * D], D, dst);
          continue;
        }
        int64_t t = j - P;
        std::copy_n(&x[((b * S + t) * G + g) * D], D, head.begin());
        if (isKey && c.rotary)
          c.rotary->apply(head.data(), pos[b * S + t]);
        std::copy_n(head.begin(), D, dst);
      }
  std::vector<float> y = floats(*out);
  if (int64_t(y.size()) != B * H * T * D)
    return std::string(what) + ": the attention operand is not [batch, heads, total, head_dim]";
  int64_t group = H / G;
  auto expected = [&](int64_t b, int64_t n, int64_t j, int64_t e) {
    return full[((b * G + n / group) * T + j) * D + e];
  };
  // Keys are transposed: [b][n][e][j]; values are [b][n][j][e].
  auto yi = [&](int64_t b, int64_t n, int64_t j, int64_t e) {
    return isKey ? ((b * H + n) * D + e) * T + j : ((b * H + n) * T + j) * D + e;
  };
  double num = 0, den = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < H; ++n)
      for (int64_t j = 0; j < T; ++j)
        for (int64_t e = 0; e < D; ++e) {
          num += double(y[yi(b, n, j, e)]) * expected(b, n, j, e);
          den += double(expected(b, n, j, e)) * expected(b, n, j, e);
        }
  scale = num / den;
  if (!(scale > 0))
    return std::string(what) + ": not a positive multiple of the projection";
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < H; ++n)
      for (int64_t j = 0; j < T; ++j)
        for (int64_t e = 0; e < D; ++e)
          if (!close(y[yi(b, n, j, e)], scale * expected(b, n, j, e)))
            return std::string(what) + (isKey && !c.rotary && positionIds_
                                             ? ": the keys differ from the projection (a "
                                               "rotary embedding the query does not have?)"
                                             : ": the operand differs from the projected, "
                                               "cached and grouped heads");
  if (!isKey && std::abs(scale - 1) > kTolerance)
    return "value: the values are scaled";
  // The present output: a result of the block that the seeds reach through head plumbing
  // only (on the way to the product, or beside it).
  Operation *terminator = c.softmax->getBlock()->getTerminator();
  llvm::SmallPtrSet<Operation *, 32> plumbed;
  {
    static const llvm::StringSet<> plumbing = {
        "onnx.Reshape", "onnx.Transpose", "onnx.Concat", "onnx.Cast", "onnx.Identity",
        "onnx.Mul",     "onnx.Add",       "onnx.Neg",    "onnx.Slice", "onnx.Unsqueeze",
        "onnx.Squeeze", "onnx.Gather",    "onnx.Sub"};
    SmallVector<std::pair<Value, int>> worklist;
    for (auto &[value, data] : seeds)
      worklist.push_back({value, 0});
    while (!worklist.empty()) {
      auto [value, depth] = worklist.pop_back_val();
      if (depth > 12)
        continue;
      for (Operation *user : value.getUsers())
        if (plumbing.contains(user->getName().getStringRef()) && plumbed.insert(user).second)
          for (Value result : user->getResults())
            worklist.push_back({result, depth + 1});
    }
  }
  Value present;
  for (Value result : terminator->getOperands()) {
    Operation *def = result.getDefiningOp();
    if (!def || !(region.contains(def) || plumbed.contains(def)))
      continue;
    if (present && present != result)
      return std::string(what) + ": more than one graph output is computed from the " + what +
             "s";
    present = result;
  }
  if (present) {
    llvm::SetVector<Operation *> presentRegion;
    auto value = evaluateSeeded(probe_, seeds, present, presentRegion, why);
    if (!value)
      return std::string(what) + " present: " + why;
    std::vector<float> v = floats(*value);
    if (v.size() != full.size())
      return std::string(what) + ": the present output is not [batch, kv_heads, total, d]";
    for (size_t i = 0; i < v.size(); ++i)
      if (!close(v[i], full[i]))
        return std::string(what) + ": the present output is not the past and the new " +
               what + "s";
    region.insert(presentRegion.begin(), presentRegion.end());
  }
  (isKey ? c.presentKey : c.presentValue) = present;
  c.region.insert(region.begin(), region.end());
  return "";
}

std::string Matcher::proveScores(Candidate &c, double &chainScale) {
  std::string why;
  Value scores = c.scores->getResult(0);
  Value logits = c.softmax->getOperand(0);
  const int64_t B = batch_, S = fresh_, H = c.heads, T = total_, P = past_;
  std::vector<std::vector<float>> bias;
  for (float seed : {0.0f, 1.0f, 2.0f}) {
    llvm::SetVector<Operation *> region;
    auto out = evaluateSeeded(probe_, {{scores, filledTensor(*shapeOf(scores), seed)}}, logits,
                              region, why);
    if (!out)
      return "mask: " + why;
    bias.push_back(floats(*out));
    if (int64_t(bias.back().size()) != B * H * S * T)
      return "mask: the scores are not [batch, heads, seq, total]";
    c.region.insert(region.begin(), region.end());
  }
  auto at = [&](int64_t b, int64_t n, int64_t i, int64_t j) {
    return ((b * H + n) * S + i) * T + j;
  };
  std::vector<char> attended(B * H * S * T);
  for (size_t k = 0; k < attended.size(); ++k) {
    float v = bias[0][k];
    if (std::isnan(v))
      return "mask: the bias is NaN";
    attended[k] = v > kMaskedBelow;
  }
  // scores -> scale * scores + bias wherever a key is attended.
  chainScale = 0;
  for (size_t k = 0; k < attended.size(); ++k) {
    if (!attended[k])
      continue;
    double one = double(bias[1][k]) - bias[0][k], two = double(bias[2][k]) - bias[0][k];
    if (chainScale == 0)
      chainScale = one;
    if (!close(one, chainScale) || !close(two, 2 * chainScale))
      return "mask: the scores are not scaled by one constant";
  }
  if (!(chainScale > 0))
    return "mask: the scores are not scaled by a positive constant";

  // Which keys each query attends: the padding mask, the causal triangle, a window.
  std::vector<int64_t> padding;
  if (attentionMask_) {
    const Info *info = probe_.lookup(attentionMask_);
    if (info && info->value && info->shape.size() == 2 && info->shape[1] == T)
      padding = integers(*info->value);
  }
  auto rowMasked = [&](int64_t b, int64_t n, int64_t i) {
    for (int64_t j = 0; j < T; ++j)
      if (attended[at(b, n, i, j)])
        return false;
    return true;
  };
  auto explains = [&](bool pad, bool causal, int64_t window) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < H; ++n)
        for (int64_t i = 0; i < S; ++i) {
          bool anyExpected = false;
          std::vector<char> expected(T);
          for (int64_t j = 0; j < T; ++j) {
            bool e = (!pad || padding[b * T + j] != 0) && (!causal || j <= P + i) &&
                     (window == 0 || j > P + i - window);
            expected[j] = e;
            anyExpected |= e;
          }
          // Rows with nothing to attend (padding queries) differ between exporters
          // (uniform, zero, or unmasked); their outputs are never used.
          if (!anyExpected)
            continue;
          if (rowMasked(b, n, i))
            return false;
          for (int64_t j = 0; j < T; ++j)
            if (expected[j] != attended[at(b, n, i, j)])
              return false;
        }
    return true;
  };
  // A window shows as the first attended key of the last query of the unpadded row.
  int64_t first = 0;
  while (first < T && !attended[at(0, 0, S - 1, first)])
    ++first;
  int64_t windowGuess = first > 0 && first < T ? P + S - 1 - first + 1 : 0;
  bool found = false;
  for (bool pad : {true, false}) {
    if (pad && padding.empty())
      continue;
    for (bool causal : {true, false})
      for (int64_t window : {int64_t(0), windowGuess}) {
        if (found || (window && !causal))
          continue;
        if (explains(pad, causal, window)) {
          c.padding = pad;
          c.causal = causal;
          c.window = window;
          found = true;
        }
      }
  }
  if (!found)
    return attentionMask_ ? "mask: the masked positions are not those of attention_mask, "
                            "a causal triangle or a window"
                          : "mask: the masked positions are not a causal triangle or a "
                            "window, and there is no attention_mask input";
  // Rows with nothing to attend: which keys share the largest bias (softmax averages them).
  for (int64_t b = 0; b < B && c.padding; ++b)
    for (int64_t i = 0; i < S; ++i) {
      bool anyExpected = false;
      for (int64_t j = 0; j < T; ++j)
        anyExpected |= padding[b * T + j] != 0 && (!c.causal || j <= P + i) &&
                       (c.window == 0 || j > P + i - c.window);
      if (anyExpected)
        continue;
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < T; ++j)
        top = std::max(top, bias[0][at(b, 0, i, j)]);
      bool visibleOnly = true;
      for (int64_t j = 0; j < T; ++j)
        visibleOnly &= (bias[0][at(b, 0, i, j)] == top) == (j <= P + i);
      if (visibleOnly && c.causal)
        c.unattended = "causal";
    }
  if (c.padding) {
    // Padding must matter on the probe, else the mask input is not what masks.
    bool matters = false;
    for (int64_t v : padding)
      matters |= v == 0;
    if (!matters)
      return "mask: the probe's attention_mask masks nothing";
  }

  // The values at attended positions: zero, or BLOOM's ALiBi (up to a per-row constant,
  // which softmax ignores).
  bool zero = true;
  for (size_t k = 0; k < attended.size(); ++k)
    zero &= !attended[k] || std::abs(bias[0][k]) <= 1e-6f;
  if (zero)
    return "";
  if (padding.empty())
    return "mask: the bias is not zero at attended positions and there is no attention_mask "
           "for ALiBi";
  std::vector<double> slopes = alibiSlopes(H);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> keyPosition(T);
    int64_t count = 0;
    for (int64_t j = 0; j < T; ++j) {
      count += padding[b * T + j] != 0;
      keyPosition[j] = padding[b * T + j] != 0 ? count - 1 : 0;
    }
    for (int64_t n = 0; n < H; ++n)
      for (int64_t i = 0; i < S; ++i) {
        int64_t ref = -1;
        for (int64_t j = 0; j < T; ++j) {
          if (!attended[at(b, n, i, j)])
            continue;
          if (ref < 0) {
            ref = j;
            continue;
          }
          double expected = slopes[n] * double(keyPosition[j] - keyPosition[ref]);
          double actual = double(bias[0][at(b, n, i, j)]) - bias[0][at(b, n, i, ref)];
          if (!close(actual, expected))
            return "mask: the bias at attended positions is neither zero nor ALiBi";
        }
      }
  }
  c.alibi = true;
  return "";
}

std::string Matcher::proveOutput(Candidate &c) {
  std::string why;
  const int64_t B = batch_, S = fresh_, H = c.heads, D = c.headDim;
  // Softmax -> [NaN guard, casts] -> the probabilities operand: unchanged values.
  {
    Value probs = c.softmax->getResult(0);
    auto seed = randomTensor(*shapeOf(probs), 6);
    llvm::SetVector<Operation *> region;
    auto out = evaluateSeeded(probe_, {{probs, seed}}, c.context->getOperand(0), region, why);
    if (!out)
      return "probabilities: " + why;
    std::vector<float> a = floats(*seed), b = floats(*out);
    if (a.size() != b.size())
      return "probabilities: reshaped between softmax and the product with V";
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i])
        return "probabilities: changed between softmax and the product with V";
    c.region.insert(region.begin(), region.end());
  }
  Value context = c.context->getResult(0);
  auto seed = randomTensor(*shapeOf(context), 7);
  llvm::SetVector<Operation *> region;
  auto out = evaluateSeeded(probe_, {{context, seed}}, c.root, region, why);
  if (!out)
    return "output: " + why;
  std::vector<float> x = floats(*seed), y = floats(*out);
  if (int64_t(y.size()) != B * S * H * D || int64_t(x.size()) != B * S * H * D)
    return "output: not [batch, seq, heads * head_dim]";
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < H; ++n)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t e = 0; e < D; ++e)
          if (x[((b * H + n) * S + t) * D + e] != y[((b * S + t) * H + n) * D + e])
            return "output: the heads are not merged back into [batch, seq, heads * head_dim]";
  c.region.insert(region.begin(), region.end());
  return "";
}

// Whether `op` only contributes shapes (Shape/Size, or ops whose results only reach
// Shape/Size), so that it dies with the masks and reshapes it sizes.
bool readsOnlyShapes(Operation *op, int depth = 0) {
  if (isOp(op, "onnx.Shape") || isOp(op, "onnx.Size"))
    return true;
  if (depth > 4 || !isOnnx(op) || op->getNumRegions() != 0 || op->getNumResults() == 0 ||
      !isMemoryEffectFree(op))
    return false;
  for (Value result : op->getResults())
    for (Operation *user : result.getUsers())
      if (!readsOnlyShapes(user, depth + 1))
        return false;
  return true;
}

// sdpa's guard for rows with nothing to attend, Where(IsNaN(P), 0, P), reads P twice; the
// Where, or null when `probs` has other users. The probe proves the guard leaves the
// probabilities unchanged.
Operation *nanGuardOf(Value probs) {
  Operation *isNaN = nullptr, *where = nullptr;
  for (Operation *user : probs.getUsers()) {
    if (isOp(user, "onnx.IsNaN") && !isNaN)
      isNaN = user;
    else if (isOp(user, "onnx.Where") && !where && user->getOperand(2) == probs &&
             user->getOperand(1) != probs)
      where = user;
    else
      return nullptr;
  }
  if (!isNaN || !where || !isNaN->getResult(0).hasOneUse() ||
      where->getOperand(0) != isNaN->getResult(0))
    return nullptr;
  return where;
}

std::string Matcher::match(Operation *softmax, Candidate &c) {
  c.softmax = softmax;
  c.region.insert(softmax);
  const dsrt::Shape *probsShape = shapeOf(softmax->getResult(0));
  if (!probsShape || probsShape->size() < 3)
    return "the softmax has no [.., seq, total] shape on the probe" +
           (probe_.firstFailure.empty() ? std::string()
                                        : " (the probe stopped at " + probe_.firstFailure + ")");
  auto axis = softmax->getAttrOfType<IntegerAttr>("axis");
  if (axis && axis.getInt() != -1 && axis.getInt() != int64_t(probsShape->size()) - 1)
    return "the softmax is not over the last axis";
  // Back from the softmax through the score chain (scales, additive and Where masks) to
  // MatMul(Q, K^T); the chain's effect is proven on the probe.
  static const llvm::StringSet<> chainOps = {"onnx.Add", "onnx.Sub", "onnx.Mul", "onnx.Div",
                                             "onnx.Where", "onnx.Cast", "onnx.Reshape"};
  Value value = softmax->getOperand(0);
  while (true) {
    Operation *def = value.getDefiningOp();
    if (!def)
      return "the scores are a graph input";
    if (isOp(def, "onnx.MatMul")) {
      c.scores = def;
      break;
    }
    if (!chainOps.contains(def->getName().getStringRef()))
      return "the scores come from '" + evaluate::describeLocation(def->getLoc()) + "' (" +
             def->getName().getStringRef().str() + "), not MatMul(Q, K^T) under masks and "
             "scales";
    SmallVector<Value> next;
    for (Value operand : def->getOperands())
      if (isTainted(operand))
        next.push_back(operand);
    if (next.size() != 1)
      return "the score chain at '" + evaluate::describeLocation(def->getLoc()) +
             "' combines two activations";
    value = next.front();
  }
  // Forward from the softmax to MatMul(P, V).
  Value probs = softmax->getResult(0);
  while (true) {
    Operation *user = probs.hasOneUse() ? *probs.getUsers().begin() : nanGuardOf(probs);
    if (!user)
      return "the attention probabilities are used more than once";
    if (isOp(user, "onnx.MatMul") && user->getOperand(0) == probs) {
      c.context = user;
      break;
    }
    bool nanGuard = isOp(user, "onnx.Where") && user->getOperand(2) == probs;
    if (!nanGuard && !isOp(user, "onnx.Cast") && !isOp(user, "onnx.Dropout") &&
        !isOp(user, "onnx.Identity") && !isOp(user, "onnx.Reshape"))
      return "the probabilities go to '" + evaluate::describeLocation(user->getLoc()) +
             "', not to MatMul(P, V)";
    probs = user->getResult(0);
  }
  // Dimensions.
  const dsrt::Shape *q = shapeOf(c.scores->getOperand(0));
  const dsrt::Shape *k = shapeOf(c.scores->getOperand(1));
  const dsrt::Shape *v = shapeOf(c.context->getOperand(1));
  if (!q || !k || !v || q->size() < 3 || k->size() != q->size() || v->size() != q->size())
    return "Q, K and V have no consistent shapes on the probe";
  headDim_ = q->back();
  int64_t leading = 1;
  for (size_t i = 0; i + 2 < q->size(); ++i)
    leading *= (*q)[i];
  if ((*q)[q->size() - 2] != fresh_ || leading % batch_ != 0)
    return "the query is not [batch, heads, seq, head_dim]";
  heads_ = leading / batch_;
  total_ = k->back();
  past_ = total_ - fresh_;
  if ((*k)[k->size() - 2] != headDim_ || (*v)[v->size() - 1] != headDim_ ||
      (*v)[v->size() - 2] != total_ || past_ < 0)
    return "K^T is not [.., head_dim, total] or V not [.., total, head_dim]";
  c.heads = heads_;
  c.headDim = headDim_;
  // The output: forward through the head merge to [b, s, heads * d].
  Value out = c.context->getResult(0);
  for (int steps = 0; steps < 4; ++steps) {
    const dsrt::Shape *shape = shapeOf(out);
    if (shape && shape->size() == 3 && (*shape)[0] == batch_ && (*shape)[1] == fresh_ &&
        (*shape)[2] == heads_ * headDim_) {
      c.root = out;
      break;
    }
    if (shape && shape->size() == 2 && (*shape)[0] == batch_ * fresh_ &&
        (*shape)[1] == heads_ * headDim_) {
      c.root = out;
      c.flatRoot = true;
      break;
    }
    SmallVector<Operation *> dataUsers;
    for (Operation *user : out.getUsers())
      if (!isOp(user, "onnx.Shape") && !isOp(user, "onnx.Size"))
        dataUsers.push_back(user);
    if (dataUsers.size() != 1)
      break;
    Operation *user = dataUsers.front();
    if (!isOp(user, "onnx.Transpose") && !isOp(user, "onnx.Reshape") &&
        !isOp(user, "onnx.Cast"))
      break;
    out = user->getResult(0);
  }
  if (!c.root)
    return "the attention output is not merged back into [batch, seq, heads * head_dim]";

  // Sources.
  Value unused;
  int64_t n = 0;
  std::string why = findSources(c.scores->getOperand(0), heads_, heads_, false, c.querySource,
                                unused, n, c.queryHeadsFirst);
  if (!why.empty())
    return "query: " + why;
  why = findSources(c.scores->getOperand(1), 0, heads_, true, c.keySource, c.pastKey, n,
                    c.keyHeadsFirst);
  if (!why.empty())
    return "key: " + why;
  c.kvHeads = n;
  why = findSources(c.context->getOperand(1), 0, heads_, true, c.valueSource, c.pastValue, n,
                    c.valueHeadsFirst);
  if (!why.empty())
    return "value: " + why;
  if (n != c.kvHeads)
    return "keys and values have different head counts";
  c.queryRank = shapeOf(c.querySource)->size();
  c.keyRank = shapeOf(c.keySource)->size();
  c.valueRank = shapeOf(c.valueSource)->size();
  if (bool(c.pastKey) != bool(c.pastValue))
    return "only one of the keys and values has a past input";

  c.region.insert(c.scores);
  c.region.insert(c.context);
  double qscale = 1, kscale = 1, vscale = 1, chainScale = 1;
  if (!(why = proveQuery(c, qscale)).empty() || !(why = proveKeyValue(c, true, kscale)).empty() ||
      !(why = proveKeyValue(c, false, vscale)).empty() ||
      !(why = proveScores(c, chainScale)).empty() || !(why = proveOutput(c)).empty())
    return why;
  c.scale = qscale * kscale * chainScale;
  // Exporters split or fold the scale into rounded constants: within float rounding of
  // 1/sqrt(head_dim) or 1 it is that value.
  for (double exact : {1.0 / std::sqrt(double(c.headDim)), 1.0})
    if (std::abs(c.scale - exact) <= 1e-6 * exact)
      c.scale = exact;
  if (bool(c.presentKey) != bool(c.presentValue))
    return "only one of the keys and values is a graph output";

  // Nothing computed inside may be used outside but the output, the presents, and shape
  // reads (which die with the masks they size).
  Operation *terminator = softmax->getBlock()->getTerminator();
  for (Operation *op : c.region)
    for (Value result : op->getResults())
      for (OpOperand &use : result.getUses()) {
        Operation *user = use.getOwner();
        if (c.region.contains(user) || result == c.root)
          continue;
        if (user == terminator && (result == c.presentKey || result == c.presentValue))
          continue;
        if (readsOnlyShapes(user))
          continue;
        return "'" + evaluate::describeLocation(op->getLoc()) + "' (" +
               op->getName().getStringRef().str() + ") inside the attention is also used by '" +
               evaluate::describeLocation(user->getLoc()) + "'";
      }
  return "";
}

// On a probe with many cached tokens: whether the unpadded first row's last query attends
// exactly the keys of the candidate's window (all keys without one); nullopt when the
// mask cannot be computed on this probe.
std::optional<bool> checkLongWindow(const ProbeEvaluator &probe, Candidate &c) {
  Value scores = c.scores->getResult(0);
  const Info *info = probe.lookup(scores);
  if (!info || info->shape.size() < 3)
    return std::nullopt;
  std::string why;
  llvm::SetVector<Operation *> region;
  auto bias = evaluateSeeded(probe, {{scores, filledTensor(info->shape, 0.0f)}},
                             c.softmax->getOperand(0), region, why);
  if (!bias)
    return std::nullopt;
  const int64_t T = info->shape.back(), S = info->shape[info->shape.size() - 2];
  std::vector<float> b = floats(*bias);
  if (int64_t(b.size()) < S * T || T <= kProbePast + kProbeNew)
    return std::nullopt;
  // Row 0, head 0, query S - 1: the first S * T block of the [b, h, s, T] bias.
  const float *row = &b[(S - 1) * T];
  for (int64_t j = 0; j < T; ++j) {
    bool expected = c.window == 0 || j > T - 1 - c.window;
    if ((row[j] > kMaskedBelow) != expected)
      return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// The probe inputs and the rewrite.
//===----------------------------------------------------------------------===//


llvm::StringRef argName(func::FuncOp func, unsigned index) {
  auto name = func.getArgAttrOfType<StringAttr>(index, "onnx.name");
  return name ? name.getValue() : "";
}

// Fills the probe's graph inputs: shapes from the symbolic dimensions, values for the
// integer inputs (a left-padded attention mask, positions as transformers' generate
// computes them, token ids), none for float inputs (the past).
LogicalResult setUpProbe(func::FuncOp func, int64_t past, ProbeEvaluator &probe,
                         Value &attentionMask, Value &positionIds, std::string &why,
                         bool lengthen = false) {
  std::vector<int64_t> mask;
  int64_t maskWidth = 0;
  // The padding mask covers the cached and the new tokens whatever its dimension is called
  // (Optimum names it "past_sequence_length + 1").
  InputDims inputDims = InputDims::of(func);
  bool hasPast = inputDims.hasPast();
  // A long probe of a graph without a cache makes the new tokens many instead.
  int64_t fresh = kProbeNew;
  if (lengthen && !hasPast) {
    if (past > 256 - kProbeNew) {
      why = "too long for a graph without a cache";
      return failure();
    }
    fresh += past;
    past = 0;
  }
  for (auto [index, argument] : llvm::enumerate(func.getArguments())) {
    auto type = dyn_cast<RankedTensorType>(argument.getType());
    if (!type) {
      why = "graph input " + std::to_string(index) + " has no rank";
      return failure();
    }
    Info info;
    info.dtype = evaluate::toDType(type.getElementType());
    for (int64_t size : inputDims.shapeAt(index, {kProbeBatch, past, fresh}))
      info.shape.push_back(size);
    llvm::StringRef name = argName(func, index);
    if (name == "attention_mask" && info.shape.size() == 2 && type.isDynamicDim(1))
      info.shape[1] = (hasPast ? past : 0) + fresh;
    if (name == "attention_mask" && info.shape.size() == 2 && !dsrt::isFloat(info.dtype)) {
      attentionMask = argument;
      maskWidth = info.shape[1];
      mask.assign(info.shape[0] * maskWidth, 1);
      for (int64_t b = 1; b < info.shape[0]; ++b)
        for (int64_t j = 0; j < std::min(kProbePadding, maskWidth - 1); ++j)
          mask[b * maskWidth + j] = 0;
    }
    probe.define(argument, info);
  }
  for (auto [index, argument] : llvm::enumerate(func.getArguments())) {
    Info info = *probe.lookup(argument);
    if (!dsrt::isInteger(info.dtype) && info.dtype != dsrt::DType::Bool)
      continue;
    llvm::StringRef name = argName(func, index);
    if (info.dtype == dsrt::DType::Bool && name != "attention_mask")
      continue;  // use_cache_branch: both branches are probed
    int64_t count = dsrt::elementCount(info.shape);
    std::vector<int64_t> values(count, 1);
    if (argument == attentionMask) {
      values = mask;
    } else if (name == "position_ids" && info.shape.size() == 2) {
      positionIds = argument;
      int64_t rows = info.shape[0], cols = info.shape[1];
      for (int64_t b = 0; b < rows; ++b) {
        int64_t width = maskWidth ? maskWidth : cols;
        int64_t cumsum = 0;
        for (int64_t j = 0; j < width; ++j) {
          bool attend = maskWidth ? mask[b * width + j] != 0 : true;
          cumsum += attend;
          int64_t position = attend ? cumsum - 1 : 1;
          int64_t t = j - (width - cols);
          if (t >= 0)
            values[b * cols + t] = position;
        }
      }
    } else if (name.contains("token_type")) {
      values.assign(count, 0);
    } else {
      for (int64_t i = 0; i < count; ++i)
        values[i] = 1 + i % 5;
    }
    auto tensor = std::make_shared<dsrt::OwnedTensor>(info.dtype, info.shape);
    for (int64_t i = 0; i < count; ++i) {
      switch (info.dtype) {
      case dsrt::DType::I64: reinterpret_cast<int64_t *>(tensor->storage.data())[i] = values[i]; break;
      case dsrt::DType::I32: reinterpret_cast<int32_t *>(tensor->storage.data())[i] = int32_t(values[i]); break;
      case dsrt::DType::Bool:
      case dsrt::DType::U8: tensor->storage[i] = uint8_t(values[i] != 0); break;
      default: break;
      }
    }
    info.value = tensor;
    probe.define(argument, info);
  }
  return success();
}

// Activations: what the token ids and the float inputs flow into, through data (not
// through Shape/Size, which read only shapes). Masks and rotary tables are not tainted.
llvm::DenseSet<Value> activations(func::FuncOp func) {
  llvm::DenseSet<Value> tainted;
  SmallVector<Value> worklist;
  for (auto [index, argument] : llvm::enumerate(func.getArguments())) {
    auto type = cast<TensorType>(argument.getType());
    llvm::StringRef name = argName(func, index);
    // A float input called a mask or bias is one (an additive mask), not an activation.
    bool maskLike = name.contains("mask") || name.contains("bias");
    if ((isa<FloatType>(type.getElementType()) && !maskLike) || name == "input_ids" ||
        name == "inputs_embeds")
      worklist.push_back(argument);
  }
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    if (!tainted.insert(value).second)
      continue;
    for (Operation *user : value.getUsers()) {
      if (isOp(user, "onnx.Shape") || isOp(user, "onnx.Size"))
        continue;
      if (isOp(user, "onnx.Yield")) {
        llvm::append_range(worklist, user->getParentOp()->getResults());
        continue;
      }
      llvm::append_range(worklist, user->getResults());
    }
  }
  return tainted;
}

// An operand of [b, s, n * d] with a ranked type, reshaping a per-head view or a value of
// unknown type.
Value asProjection(OpBuilder &builder, Value source, int64_t probeRank, int64_t features) {
  Type element = cast<TensorType>(source.getType()).getElementType();
  auto type = dyn_cast<RankedTensorType>(source.getType());
  if (type && type.getRank() == 3 && type.getDimSize(2) == features)
    return source;
  // The importer leaves many intermediate types unranked; the probe proved this one is
  // [b, s, features], so its type is refined in place rather than reshaped.
  if (!type && probeRank == 3 && isa<OpResult>(source) && isOnnx(source.getDefiningOp())) {
    source.setType(RankedTensorType::get(
        {ShapedType::kDynamic, ShapedType::kDynamic, features}, element));
    return source;
  }
  // onnx.Reshape with 0 copying batch and sequence, -1 the features.
  if (probeRank == 4) {
    if (auto reshape = source.getDefiningOp(); isOp(reshape, "onnx.Reshape")) {
      auto inner = dyn_cast<RankedTensorType>(reshape->getOperand(0).getType());
      if (inner && inner.getRank() == 3 && inner.getDimSize(2) == features)
        return reshape->getOperand(0);
    }
  }
  Location loc = source.getLoc();
  auto shapeType = RankedTensorType::get({3}, builder.getI64Type());
  Value shape = onnx::ConstantOp::create(
      builder, loc, shapeType,
      DenseElementsAttr::get(shapeType, ArrayRef<int64_t>{0, 0, -1}));
  SmallVector<int64_t> dims = {ShapedType::kDynamic, ShapedType::kDynamic, features};
  if (type && type.getRank() >= 2) {
    dims[0] = type.getDimSize(0);
    dims[1] = type.getDimSize(1);
  }
  return onnx::ReshapeOp::create(builder, loc, RankedTensorType::get(dims, element), source,
                                 shape, builder.getI64IntegerAttr(0));
}

// A heads-first source [b, n, s, d] as [b, s, n, d].
Value headsSecond(OpBuilder &builder, Value source, bool headsFirst) {
  if (!headsFirst)
    return source;
  auto type = dyn_cast<RankedTensorType>(source.getType());
  Type element = cast<TensorType>(source.getType()).getElementType();
  SmallVector<int64_t> dims(4, ShapedType::kDynamic);
  if (type && type.getRank() == 4)
    dims = {type.getDimSize(0), type.getDimSize(2), type.getDimSize(1), type.getDimSize(3)};
  return onnx::TransposeOp::create(builder, source.getLoc(), RankedTensorType::get(dims, element),
                                   source, builder.getI64ArrayAttr({0, 2, 1, 3}));
}

std::string rewrite(Candidate &c, int64_t layer, Value attentionMask, Value positionIds) {
  Operation *rootOp = c.root.getDefiningOp();
  OpBuilder builder(rootOp);
  Location loc = c.softmax->getLoc();
  MLIRContext *context = builder.getContext();
  int64_t qFeatures = c.heads * c.headDim, kvFeatures = c.kvHeads * c.headDim;
  auto rootType = dyn_cast<RankedTensorType>(c.root.getType());
  if (!rootType || c.flatRoot)
    rootType = RankedTensorType::get({ShapedType::kDynamic, ShapedType::kDynamic, qFeatures},
                                     cast<TensorType>(c.root.getType()).getElementType());
  if (rootType.getRank() != 3 || rootType.getDimSize(2) != qFeatures)
    return "the attention output has no [batch, seq, heads * head_dim] type";
  SmallVector<Type> presentTypes;
  if (c.presentKey) {
    if (c.presentKey.getType() != c.presentValue.getType())
      return "the present key and value have different types";
    presentTypes = {c.presentKey.getType(), c.presentValue.getType()};
  }
  SmallVector<Value> past;
  if (c.pastKey) {
    if (c.pastKey.getType() != c.pastValue.getType())
      return "the past key and value have different types";
    past = {c.pastKey, c.pastValue};
  }
  Value query = asProjection(builder, headsSecond(builder, c.querySource, c.queryHeadsFirst),
                             c.queryRank, qFeatures);
  Value key = asProjection(builder, headsSecond(builder, c.keySource, c.keyHeadsFirst),
                           c.keyRank, kvFeatures);
  Value value = asProjection(builder, headsSecond(builder, c.valueSource, c.valueHeadsFirst),
                             c.valueRank, kvFeatures);
  if (key.getType() != value.getType())
    return "the key and value projections have different types";
  tfm::RotaryAttr rotary;
  if (c.rotary)
    rotary = tfm::RotaryAttr::get(context, c.rotary->dim, llvm::APFloat(c.rotary->base),
                                  c.rotary->interleaved ? tfm::RotaryLayout::interleaved
                                                        : tfm::RotaryLayout::half_split);
  Value positions = positionIds;
  if (c.rotary && c.impliedPositions) {
    if (!attentionMask)
      return "the positions are computed in the graph, and there is no attention_mask";
    positions = buildImpliedPositions(builder, loc, attentionMask, query);
  }
  auto attention = tfm::AttentionOp::create(
      builder, loc, rootType, presentTypes, query, key, value,
      c.padding ? attentionMask : Value(), past, c.rotary ? positions : Value(),
      builder.getI64IntegerAttr(c.heads), builder.getI64IntegerAttr(c.kvHeads),
      builder.getI64IntegerAttr(c.headDim), builder.getF32FloatAttr(float(c.scale)),
      c.causal ? builder.getUnitAttr() : UnitAttr(),
      c.alibi ? builder.getUnitAttr() : UnitAttr(),
      c.window ? builder.getI64IntegerAttr(c.window) : IntegerAttr(), rotary,
      builder.getI64IntegerAttr(layer));
  if (c.unattended != "all")
    attention->setAttr("tfm.unattended", builder.getStringAttr(c.unattended));
  if (failed(verify(attention))) {
    attention->erase();
    return "the recognised tfm.attention does not verify";
  }
  Value output = attention.getOutput();
  if (c.flatRoot) {
    auto shapeType = RankedTensorType::get({2}, builder.getI64Type());
    Value shape = onnx::ConstantOp::create(
        builder, loc, shapeType, DenseElementsAttr::get(shapeType, ArrayRef<int64_t>{-1, qFeatures}));
    auto flatType = dyn_cast<RankedTensorType>(c.root.getType());
    if (!flatType)
      flatType = RankedTensorType::get({ShapedType::kDynamic, qFeatures}, rootType.getElementType());
    output = onnx::ReshapeOp::create(builder, loc, flatType, output, shape,
                                     builder.getI64IntegerAttr(0));
  }
  c.root.replaceAllUsesWith(output);
  if (c.presentKey) {
    Operation *terminator = c.softmax->getBlock()->getTerminator();
    for (OpOperand &operand : terminator->getOpOperands()) {
      if (operand.get() == c.presentKey)
        operand.set(attention.getPresent()[0]);
      else if (operand.get() == c.presentValue)
        operand.set(attention.getPresent()[1]);
    }
  }
  return "";
}


// Learned position tables (GPT-2's wpe) that the graph indexes by positions it computes:
// on the probe, every row's indices are past + t.
SmallVector<tfm::EmbeddingOp> tablesAtImpliedPositions(func::FuncOp func,
                                                       const ProbeEvaluator &probe,
                                                       int64_t past) {
  SmallVector<tfm::EmbeddingOp> tables;
  func.walk([&](tfm::EmbeddingOp embedding) {
    Value ids = embedding.getIds();
    if (isa<BlockArgument>(ids))
      return;
    const Info *info = probe.lookup(ids);
    if (!info || !info->value || info->shape.size() != 2 || info->shape[1] != kProbeNew ||
        (info->shape[0] != 1 && info->shape[0] != kProbeBatch))
      return;
    std::vector<int64_t> values = integers(*info->value);
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] != past + int64_t(i) % kProbeNew)
        return;
    // The lookup's users must take [batch, new, hidden] where they took [1, new, hidden].
    for (Operation *user : embedding->getUsers())
      if (!isOnnx(user))
        return;
    tables.push_back(embedding);
  });
  return tables;
}

// The tables' indices become the implied positions, which the session programs take as
// their position_ids input (takePositionsAsInput).
void takeImpliedPositions(func::FuncOp func, llvm::ArrayRef<tfm::EmbeddingOp> tables,
                          Value mask) {
  Value ids;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (argName(func, i) == "input_ids")
      ids = func.getArgument(i);
  if (!ids || !mask)
    return;
  for (tfm::EmbeddingOp embedding : tables) {
    OpBuilder builder(embedding);
    Value positions = buildImpliedPositions(builder, embedding.getLoc(), mask, ids);
    embedding.getIdsMutable().assign(positions);
    auto type = cast<RankedTensorType>(embedding.getOutput().getType());
    embedding.getOutput().setType(RankedTensorType::get(
        {ShapedType::kDynamic, ShapedType::kDynamic, type.getDimSize(2)}, type.getElementType()));
  }
}

void recognizeInFunction(func::FuncOp func, const onnx_frontend::WeightStore *weights,
                         bool reportDeclines) {
  std::string why;
  SmallVector<Operation *> softmaxes;
  func.walk([&](Operation *op) {
    if (isOp(op, "onnx.Softmax"))
      softmaxes.push_back(op);
  });
  if (softmaxes.empty())
    return;
  llvm::DenseSet<Value> tainted = activations(func);
  llvm::DenseMap<Operation *, int64_t> layerOf;
  llvm::DenseMap<Block *, int64_t> layers;
  for (Operation *softmax : softmaxes)
    layerOf[softmax] = layers[softmax->getBlock()]++;

  // Match everything first: the probe's values stay valid while nothing is rewritten. A
  // softmax the first probe cannot reach (Optimum's merged decoder: the branch without a
  // cache runs only without cached tokens) gets a second probe with none.
  std::vector<std::pair<Candidate, int64_t>> matched;
  llvm::DenseMap<Operation *, std::string> reasons;
  SmallVector<tfm::EmbeddingOp> impliedTables;
  Value maskArgument;
  SmallVector<Operation *> pending = softmaxes;
  for (int64_t past : {kProbePast, int64_t(0)}) {
    ProbeEvaluator probe(weights);
    Value attentionMask, positionIds;
    if (failed(setUpProbe(func, past, probe, attentionMask, positionIds, why))) {
      if (reportDeclines)
        func.emitRemark() << "attention not recognised: " << why;
      return;
    }
    probe.runBlock(func.getBody().front());
    if (past == kProbePast && !positionIds && attentionMask)
      impliedTables = tablesAtImpliedPositions(func, probe, past);
    SmallVector<Operation *> unreached;
    maskArgument = attentionMask;
    for (Operation *softmax : pending) {
      Candidate candidate;
      Matcher matcher(probe, attentionMask, positionIds, tainted);
      std::string reason = matcher.match(softmax, candidate);
      if (reason.empty()) {
        candidate.attentionMask = attentionMask;
        candidate.positionIds = positionIds;
        matched.push_back({std::move(candidate), layerOf[softmax]});
        reasons.erase(softmax);
        continue;
      }
      if (!reasons.count(softmax) || probe.lookup(softmax->getResult(0)))
        reasons[softmax] = reason;
      if (!probe.lookup(softmax->getResult(0)))
        unreached.push_back(softmax);
    }
    pending = unreached;
    if (pending.empty())
      break;
  }
  // The small probe sees windows shorter than its 12 keys only: a causal attention is
  // probed again with many cached tokens, and its last query must see exactly the keys the
  // window (or its absence) says. Masks sliced from a buffer of the model's length run on
  // the longest probe that fits.
  SmallVector<Candidate *> unchecked;
  for (auto &[candidate, layer] : matched)
    if (candidate.causal)
      unchecked.push_back(&candidate);
  for (int64_t past : {int64_t(2041), int64_t(505), int64_t(121), int64_t(57)}) {
    if (unchecked.empty())
      break;
    ProbeEvaluator probe(weights);
    Value attentionMask, positionIds;
    if (failed(setUpProbe(func, past, probe, attentionMask, positionIds, why,
                          /*lengthen=*/true)))
      continue;
    probe.runBlock(func.getBody().front());
    SmallVector<Candidate *> later;
    for (Candidate *c : unchecked) {
      std::optional<bool> windowHolds = checkLongWindow(probe, *c);
      if (!windowHolds) {
        later.push_back(c);
        continue;
      }
      if (!*windowHolds)
        c->declined = "mask: on a probe " + std::to_string(past) +
                      " tokens longer, the last query's keys are not those of " +
                      (c->window ? "a window of " + std::to_string(c->window)
                                 : std::string("a causal mask without a window"));
    }
    unchecked = later;
  }
  for (auto &[candidate, layer] : matched)
    if (!candidate.declined.empty())
      reasons[candidate.softmax] = candidate.declined;
  if (reportDeclines)
    for (Operation *softmax : softmaxes)
      if (reasons.count(softmax))
        softmax->emitRemark() << "attention not recognised: " << reasons[softmax];
  for (auto &[candidate, layer] : matched) {
    if (!candidate.declined.empty())
      continue;
    std::string reason =
        rewrite(candidate, layer, candidate.attentionMask, candidate.positionIds);
    if (!reason.empty() && reportDeclines)
      candidate.softmax->emitRemark() << "attention not recognised: " << reason;
  }
  takeImpliedPositions(func, impliedTables, maskArgument);
  if (!matched.empty() || !impliedTables.empty())
    eraseDeadOps(func);
}

struct RecognizeAttentionPass : impl::RecognizeAttentionBase<RecognizeAttentionPass> {
  using RecognizeAttentionBase::RecognizeAttentionBase;
  RecognizeAttentionPass(const onnx_frontend::WeightStore *weights, bool report)
      : weights_(weights) {
    reportDeclines = report;
  }

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      recognizeInFunction(func, weights_, reportDeclines);
  }

  const onnx_frontend::WeightStore *weights_ = nullptr;
};

} // namespace

std::unique_ptr<Pass> createRecognizeAttentionWithWeights(const onnx_frontend::WeightStore *weights,
                                                          bool reportDeclines) {
  return std::make_unique<RecognizeAttentionPass>(weights, reportDeclines);
}

} // namespace dsc
