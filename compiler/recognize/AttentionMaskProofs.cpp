// dsc-recognize-attention: proofs of the scores: scale, cap, masks and the rows with nothing to attend.
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
#include <cstdlib>
#include <cstring>
#include <limits>

namespace dsc::attention {

// What the export computes at rows with nothing to attend (left padding with nothing cached
// before it), from the bias its score chain adds to zero scores ([b, h, s, T]): softmax
// averages the keys that share the largest bias (every key: "all"; GPT-Neo's causally
// visible ones: "causal"), or, with every key at -inf, gives NaN that sdpa's guard turns
// into zeros ("zero"). None when the probe has no such row.
std::optional<std::string> unattendedRule(const Candidate &c, const std::vector<float> &bias,
                                          const std::vector<int64_t> &padding, int64_t B,
                                          int64_t S, int64_t T, int64_t P) {
  const int64_t H = c.heads;
  auto at = [&](int64_t b, int64_t i, int64_t j) { return ((b * H + 0) * S + i) * T + j; };
  if (int64_t(padding.size()) != B * T || int64_t(bias.size()) != B * H * S * T)
    return std::nullopt;
  std::optional<std::string> rule;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i) {
      bool anyExpected = false;
      for (int64_t j = 0; j < T; ++j)
        anyExpected |= padding[b * T + j] != 0 && (!c.causal || j <= P + i) &&
                       (c.window == 0 || j > P + i - c.window);
      if (anyExpected)
        continue;
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < T; ++j)
        top = std::max(top, bias[at(b, i, j)]);
      bool visibleOnly = true;
      for (int64_t j = 0; j < T; ++j)
        visibleOnly &= (bias[at(b, i, j)] == top) == (j <= P + i);
      rule = visibleOnly && c.causal ? "causal" : "all";
      if (top == -std::numeric_limits<float>::infinity() && c.nanGuard)
        return std::string("zero");
    }
  return rule;
}

// Gemma-2's capped scores: scores -> cap * tanh(scale * scores / cap) + bias. On a constant
// seed x, g(x) = cap * tanh(u) and g(2x) = cap * tanh(2u) = 2 g(x) / (1 + (g(x) / cap)^2)
// give cap = g(x) / sqrt(2 g(x) / g(2x) - 1) and scale = cap * atanh(g(x) / cap) / x, read
// at the first seed where tanh bends measurably; then every attended score of three more
// seeds must follow that curve.
std::string Matcher::proveSoftcap(Candidate &c, const std::vector<char> &attended,
                                  const std::vector<float> &bias, double &chainScale) {
  Value scores = c.scores->getResult(0);
  Value logits = c.logits;
  std::string why;
  auto chainAt = [&](double x) -> std::optional<std::vector<float>> {
    llvm::SetVector<Operation *> region;
    auto out = evaluateSeeded(probe_, {{scores, filledTensor(*shapeOf(scores), float(x))}},
                              logits, region, why);
    if (!out)
      return std::nullopt;
    c.region.insert(region.begin(), region.end());
    return floats(*out);
  };
  size_t k0 = 0;
  while (k0 < attended.size() && !attended[k0])
    ++k0;
  if (k0 == attended.size())
    return "mask: no score is attended on the probe";
  double cap = 0, scale = 0;
  for (double x = 1; x <= 65536 && cap == 0; x *= 4) {
    auto one = chainAt(x), two = chainAt(2 * x);
    if (!one || !two)
      return "mask: " + why;
    double a = double((*one)[k0]) - bias[k0], b = double((*two)[k0]) - bias[k0];
    if (!(a > 0) || !(b > a))
      return "mask: the capped scores do not grow with the scores";
    double bend = 2 * a / b - 1;
    if (bend < 0.02)
      continue;  // still nearly straight: a larger seed reads the cap more precisely
    if (b / a < 1.05)
      return "mask: the capped scores saturate before the cap can be read";
    cap = a / std::sqrt(bend);
    scale = cap * std::atanh(a / cap) / x;
  }
  if (!(cap > 0) || !std::isfinite(cap) || !(scale > 0))
    return "mask: the scores pass a Tanh, but not as cap * tanh(scores / cap)";
  // Exporters keep the cap as written in the config: a round number within rounding.
  if (std::abs(cap - std::round(cap)) <= 1e-3 * cap)
    cap = std::round(cap);
  for (double y : {0.37, 3.1 * cap / scale / 10, 2.3 * cap / scale}) {
    auto out = chainAt(y);
    if (!out)
      return "mask: " + why;
    double expected = cap * std::tanh(scale * y / cap);
    for (size_t k = 0; k < attended.size(); ++k)
      if (attended[k] && std::abs(((*out)[k] - bias[k]) - expected) > 2e-4 * cap)
        return "mask: the scores pass a Tanh, but not as cap * tanh(scale * scores / cap)";
  }
  c.softcap = cap;
  chainScale = scale;
  return "";
}

std::string Matcher::proveScores(Candidate &c, double &chainScale) {
  std::string why;
  Value scores = c.scores->getResult(0);
  Value logits = c.logits;
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
  if (c.chainHasTanh) {
    if (std::string why = proveSoftcap(c, attended, bias[0], chainScale); !why.empty())
      return why;
  } else {
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
  }
  if (!(chainScale > 0))
    return "mask: the scores are not scaled by a positive constant";

  // Which keys each query attends: the padding mask, the causal triangle, a window.
  std::vector<int64_t> padding;
  // A cross-attention's keys are masked by the encoder's padding mask.
  Value paddingMask = c.cross ? crossMask_ : attentionMask_;
  if (paddingMask) {
    const Info *info = probe_.lookup(paddingMask);
    // [batch, total] on the probe, or it is not the padding of these scores' rows (a mask
    // of another batch had been read past its end: found by fuzzing).
    if (info && info->value && info->shape.size() == 2 && info->shape[0] == B &&
        info->shape[1] == T)
      padding = integers(*info->value);
    if (int64_t(padding.size()) != B * T)
      padding.clear();
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
                     (window == 0 || std::abs(P + i - j) < window);
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
  // A window shows as the first attended key of the last query of the unpadded row; without
  // the causal mask it reaches as far after each query (ModernBERT's local layers).
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
        if (found || (window && c.cross) || (causal && c.cross))
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
    return c.cross ? "mask: the masked keys of another sequence are not those of its "
                     "padding mask"
           : attentionMask_ ? "mask: the masked positions are not those of attention_mask, "
                              "a causal triangle or a window"
                            : "mask: the masked positions are not a causal triangle or a "
                              "window, and there is no attention_mask input";
  if (c.padding)
    if (std::optional<std::string> rule = unattendedRule(c, bias[0], padding, B, S, T, P))
      c.unattended = *rule;
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
  if (padding.empty() || !isAlibi(c, attended, bias[0], padding))
    return proveBias(c, attended, bias[0]);
  c.alibi = true;
  return "";
}

// Whether the bias at attended positions is BLOOM's ALiBi (up to a per-row constant).
bool Matcher::isAlibi(const Candidate &c, const std::vector<char> &attended,
                      const std::vector<float> &bias, const std::vector<int64_t> &padding) {
  const int64_t B = batch_, S = fresh_, H = c.heads, T = total_;
  auto at = [&](int64_t b, int64_t n, int64_t i, int64_t j) {
    return ((b * H + n) * S + i) * T + j;
  };
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
          double actual = double(bias[at(b, n, i, j)]) - bias[at(b, n, i, ref)];
          if (!close(actual, expected))
            return false;
        }
      }
  }
  return true;
}

// T5's relative position bias (and any other bias the graph computes from positions and
// masks, not from the activations) is an operand of the attention: the value added in the
// score chain, or, where the chain adds Where(mask, bias, min), the bias inside it, which
// the proven padding and causal masks then complete. It must equal the scores' bias at
// every attended position of the probe.
std::string Matcher::proveBias(Candidate &c, const std::vector<char> &attended,
                               const std::vector<float> &bias) {
  const int64_t B = batch_, S = fresh_, H = c.heads, T = total_;
  SmallVector<Value> added;
  for (Value value = c.logits; value && value != c.scores->getResult(0);) {
    Operation *def = value.getDefiningOp();
    Value next;
    for (Value operand : def->getOperands()) {
      if (isTainted(operand))
        next = operand;
      else if (isOp(def, "onnx.Add"))
        added.push_back(operand);
    }
    value = next;
  }
  SmallVector<Value> candidates;
  for (Value value : added) {
    Operation *def = value.getDefiningOp();
    if (isOp(def, "onnx.Where"))
      candidates.append({def->getOperand(1), def->getOperand(2)});
    candidates.push_back(value);
  }
  for (Value candidate : candidates) {
    const Info *info = probe_.lookup(candidate);
    if (!info || info->isNone || !info->value || info->shape.size() != 4 ||
        !isa<FloatType>(cast<TensorType>(candidate.getType()).getElementType()))
      continue;
    const dsrt::Shape &shape = info->shape;
    if ((shape[0] != 1 && shape[0] != B) || (shape[1] != 1 && shape[1] != H) ||
        shape[2] != S || shape[3] != T)
      continue;
    std::vector<float> values = floats(*info->value);
    if (int64_t(values.size()) != shape[0] * shape[1] * S * T)
      continue;
    bool equal = true;
    for (int64_t b = 0; b < B && equal; ++b)
      for (int64_t n = 0; n < H && equal; ++n)
        for (int64_t i = 0; i < S && equal; ++i)
          for (int64_t j = 0; j < T && equal; ++j) {
            int64_t k = ((b * H + n) * S + i) * T + j;
            if (!attended[k])
              continue;
            int64_t vb = shape[0] == 1 ? 0 : b, vn = shape[1] == 1 ? 0 : n;
            equal = close(values[((vb * shape[1] + vn) * S + i) * T + j], bias[k]);
          }
    if (equal) {
      c.bias = candidate;
      return "";
    }
  }
  return "mask: the bias at attended positions is neither zero, nor ALiBi, nor a value "
         "computed outside the attention from positions and masks";
}

// On a probe with nothing cached, where the left-padded row's first queries have no key to
// attend (the main probe caches tokens, so its padding lies before every query).
void classifyUnattended(const ProbeEvaluator &probe, Value attentionMask, Candidate &c) {
  Value scores = c.scores->getResult(0);
  const Info *info = probe.lookup(scores);
  Value paddingMask = c.cross ? c.crossMask : attentionMask;
  const Info *mask = paddingMask ? probe.lookup(paddingMask) : nullptr;
  if (!c.padding || !info || info->shape.size() < 3 || !mask || !mask->value)
    return;
  std::string why;
  llvm::SetVector<Operation *> region;
  auto bias = evaluateSeeded(probe, {{scores, filledTensor(info->shape, 0.0f)}},
                             c.logits, region, why);
  if (!bias)
    return;
  const int64_t T = info->shape.back(), S = info->shape[info->shape.size() - 2];
  if (std::optional<std::string> rule = unattendedRule(c, floats(*bias), integers(*mask->value),
                                                       kProbeBatch, S, T, T - S))
    c.unattended = *rule;
}

std::optional<bool> checkLongWindow(const ProbeEvaluator &probe, Candidate &c) {
  Value scores = c.scores->getResult(0);
  const Info *info = probe.lookup(scores);
  if (!info || info->shape.size() < 3)
    return std::nullopt;
  std::string why;
  llvm::SetVector<Operation *> region;
  auto bias = evaluateSeeded(probe, {{scores, filledTensor(info->shape, 0.0f)}},
                             c.logits, region, why);
  if (!bias)
    return std::nullopt;
  const int64_t T = info->shape.back(), S = info->shape[info->shape.size() - 2];
  std::vector<float> b = floats(*bias);
  if (int64_t(b.size()) < S * T || T <= kProbePast + kProbeNew)
    return std::nullopt;
  // Row 0 (unpadded), head 0: the first S * T block of the [b, h, s, T] bias. Query i is
  // at position T - S + i.
  auto holds = [&](int64_t window) {
    for (int64_t i = 0; i < S; ++i) {
      const int64_t position = T - S + i;
      for (int64_t j = 0; j < T; ++j) {
        bool expected = (!c.causal || j <= position) &&
                        (window == 0 || std::abs(position - j) < window);
        if ((b[i * T + j] > kMaskedBelow) != expected)
          return false;
      }
    }
    return true;
  };
  if (holds(c.window))
    return true;
  // A window longer than the short probe (ModernBERT's 128) shows here first: measured as
  // there, from the last query's first attended key, and then checked for every query.
  int64_t first = 0;
  while (first < T && !(b[(S - 1) * T + first] > kMaskedBelow))
    ++first;
  const int64_t window = first > 0 && first < T ? T - first : 0;
  if (window > c.window && holds(window)) {
    c.window = window;
    return true;
  }
  return false;
}


} // namespace dsc::attention
