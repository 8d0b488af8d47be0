// dsc-recognize-attention: proofs of the keys, values and output on the probe (the query's,
// with its rotary embedding, are in AttentionRotaryProof.cpp).
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

// The relative rounding of a rotary table stored in the half type of a half model's export
// (dsc-widen-half-precision's dsc.half_export): 2^-11 for f16, 2^-8 for bf16; 0 otherwise.
double halfTableRounding(const Candidate &c) {
  auto half = c.softmax->getParentOfType<ModuleOp>()->getAttrOfType<StringAttr>(
      "dsc.half_export");
  return !half ? 0 : half.getValue() == "bf16" ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
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
  // A cross-attention's keys are the other sequence's tokens, all of them new.
  const int64_t B = batch_, S = c.cross ? c.crossLength : fresh_, H = c.heads,
                G = c.kvHeads, D = c.headDim;
  const int64_t T = total_, P = past_;
  if (c.cross && c.rotary)
    return std::string(what) + ": the keys of another sequence are rotated";
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
  auto fill = [&] {
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
          if (isKey && c.keyNorm)
            applyHeadNorm(c, c.keyNorm, head, D);
          if (isKey && c.rotary)
            c.rotary->apply(head.data(), pos[b * S + t]);
          if (isKey)
            scaleRotatedHeads(c, c.keyNorm, head.data(), head.size(), D, /*divide=*/false);
          std::copy_n(head.begin(), D, dst);
        }
  };
  fill();
  std::vector<float> y = floats(*out);
  // One KV head that the MatMul broadcasts over the query heads (Falcon's multi-query
  // attention under sdpa) is an operand of one head.
  const int64_t operandHeads = int64_t(y.size()) == B * T * D && G == 1 ? 1 : H;
  if (int64_t(y.size()) != B * operandHeads * T * D)
    return std::string(what) + ": the attention operand is not [batch, heads, total, head_dim]";
  int64_t group = H / G;
  auto expected = [&](int64_t b, int64_t n, int64_t j, int64_t e) {
    return full[((b * G + n / group) * T + j) * D + e];
  };
  // Keys are transposed: [b][n][e][j]; values are [b][n][j][e].
  auto yi = [&](int64_t b, int64_t n, int64_t j, int64_t e) {
    n %= operandHeads;
    return isKey ? ((b * operandHeads + n) * D + e) * T + j
                 : ((b * operandHeads + n) * T + j) * D + e;
  };
  // The fitted scale over the cached rows [0, P) and over the new ones [P, T).
  auto fit = [&](int64_t first, int64_t last) {
    double num = 0, den = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < H; ++n)
        for (int64_t j = first; j < last; ++j)
          for (int64_t e = 0; e < D; ++e) {
            num += double(y[yi(b, n, j, e)]) * expected(b, n, j, e);
            den += double(expected(b, n, j, e)) * expected(b, n, j, e);
          }
    return num / den;
  };
  scale = fit(0, T);
  if (isKey && c.rotary && c.rotary->dim == D && P > 0) {
    // A whole head rotated with an attention factor: the query's scale absorbed it, but
    // the new keys carry it and the cached ones (the past input, as given) do not.
    double cached = fit(0, P), fresh = fit(P, T), factor = fresh / cached;
    // (In a half model's export, a factor within its rounding of 1 is 1.)
    if (cached > 0 && factor > 0 && std::isfinite(factor) &&
        std::abs(factor - 1) > std::max(1e-5, 4 * halfTableRounding(c))) {
      c.rotary->attentionFactor *= float(factor);
      c.absorbedFactor = factor;
      fill();
      scale = cached;
    }
  }
  if (!(scale > 0))
    return std::string(what) + ": not a positive multiple of the projection";
  // New keys rotated by a half model's rounded table (proveQuery says why) may be off by
  // that rounding of their head's magnitude.
  const double tableRounding = isKey && c.rotary ? c.rotaryTableRounding : 0;
  auto headMagnitude = [&](int64_t b, int64_t n, int64_t j) {
    double magnitude = 0;
    for (int64_t e = 0; e < D; ++e)
      magnitude = std::max(magnitude, std::abs(scale * expected(b, n, j, e)));
    return magnitude;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < H; ++n)
      for (int64_t j = 0; j < T; ++j)
        for (int64_t e = 0; e < D; ++e)
          if (!close(y[yi(b, n, j, e)], scale * expected(b, n, j, e)) &&
              !(tableRounding > 0 && j >= P &&
                std::abs(y[yi(b, n, j, e)] - scale * expected(b, n, j, e)) <=
                    4 * tableRounding * headMagnitude(b, n, j)))
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
    // An output declared in half precision leaves through an interface Cast
    // (dsc-widen-half-precision): the present is the f32 value it casts.
    if (Value cast = interfaceCastInput(result))
      result = cast;
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
    for (size_t i = 0; i < v.size(); ++i) {
      // full is [b, g, T, d]: row i / D, position (i / D) % T.
      const size_t row = i / size_t(D);
      double magnitude = 0;
      if (tableRounding > 0 && int64_t(row % size_t(T)) >= P)
        for (int64_t e = 0; e < D; ++e)
          magnitude = std::max(magnitude, double(std::abs(full[row * D + e])));
      if (!close(v[i], full[i]) &&
          !(magnitude > 0 && std::abs(v[i] - full[i]) <= 4 * tableRounding * magnitude))
        return std::string(what) + ": the present output is not the past and the new " +
               what + "s";
    }
    region.insert(presentRegion.begin(), presentRegion.end());
  }
  (isKey ? c.presentKey : c.presentValue) = present;
  c.region.insert(region.begin(), region.end());
  return "";
}

std::string Matcher::proveOutput(Candidate &c) {
  std::string why;
  const int64_t B = batch_, S = fresh_, H = c.heads, D = c.headDim;
  // Softmax -> [NaN guard, casts] -> the probabilities operand: unchanged values; with
  // sinks, every column but the last (the sink's), which the Slice drops.
  {
    Value probs = c.softmax->getResult(0);
    auto seed = randomTensor(*shapeOf(probs), 6);
    llvm::SetVector<Operation *> region;
    auto out = evaluateSeeded(probe_, {{probs, seed}}, c.context->getOperand(0), region, why);
    if (!out)
      return "probabilities: " + why;
    std::vector<float> a = floats(*seed), b = floats(*out);
    const size_t width = shapeOf(probs)->back(), kept = c.sinks.empty() ? width : width - 1;
    if (a.size() / width * kept != b.size())
      return c.sinks.empty() ? "probabilities: reshaped between softmax and the product with V"
                             : "sinks: the Slice after the softmax does not drop one column";
    for (size_t i = 0; i < b.size(); ++i)
      if (a[i / kept * width + i % kept] != b[i])
        return c.sinks.empty() ? "probabilities: changed between softmax and the product with V"
                               : "sinks: the Slice after the softmax does not keep the scores' "
                                 "columns and drop the sink's";
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

} // namespace dsc::attention
