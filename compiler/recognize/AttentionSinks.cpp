// dsc-recognize-attention: GPT-OSS's attention sinks. HF's eager attention appends a learned
// logit per head to every row of scores, subtracts the row's maximum, takes the softmax and
// drops the appended column before the product with V:
//   combined = Concat(scores, Expand(sinks [1, H, 1, 1]), axis -1)
//   probs = Softmax(combined - ReduceMax(combined))[..., :-1]
// Structure proposes the Concat and the Slice; the probe proves the rest: the subtraction
// shifts each row by one value (which the softmax ignores), the column is an initializer
// broadcast over the batch and the queries with one value per head, and the Slice keeps
// exactly the scores' columns (proveOutput).
#include "compiler/recognize/AttentionMatch.h"

#include "compiler/evaluate/Evaluator.h"

#include "mlir/IR/Matchers.h"

#include <cmath>

namespace dsc::attention {
namespace {

std::string where(Operation *op) {
  return "'" + evaluate::describeLocation(op->getLoc()) + "' (" +
         op->getName().getStringRef().str() + ")";
}

// Ops that only move or broadcast their first operand's values (the shapes they read come
// from elsewhere): the way from an initializer to the column.
bool broadcasts(Operation *op) {
  return isOp(op, "onnx.Expand") || isOp(op, "onnx.Reshape") || isOp(op, "onnx.Unsqueeze") ||
         isOp(op, "onnx.Cast") || isOp(op, "onnx.Identity") || isOp(op, "onnx.Tile");
}

} // namespace

std::string Matcher::peelSinks(Candidate &c) {
  c.logits = c.softmax->getOperand(0);
  c.probs = c.softmax->getResult(0);
  Operation *def = c.logits.getDefiningOp();
  Operation *shift = nullptr;
  if (def && isOp(def, "onnx.Sub") && def->getOperand(0).getDefiningOp() &&
      isOp(def->getOperand(0).getDefiningOp(), "onnx.Concat")) {
    shift = def;
    def = def->getOperand(0).getDefiningOp();
  }
  if (!def || !isOp(def, "onnx.Concat"))
    return "";  // no sinks: the score chain starts at the softmax
  const dsrt::Shape *combined = shapeOf(def->getResult(0));
  auto axis = def->getAttrOfType<IntegerAttr>("axis");
  if (!combined || combined->size() != 4 || !axis ||
      (axis.getInt() != -1 && axis.getInt() != 3) || def->getNumOperands() != 2)
    return "sinks: the softmax reads " + where(def) +
           ", which does not append one column to [batch, heads, seq, total] scores";
  Value scores = def->getOperand(0), column = def->getOperand(1);
  if (!isTainted(scores) || isTainted(column))
    return "sinks: " + where(def) + " does not append a constant column after the scores";
  const dsrt::Shape *columnShape = shapeOf(column);
  const Info *info = probe_.lookup(column);
  if (!columnShape || columnShape->size() != 4 || (*columnShape)[3] != 1 || !info ||
      !info->value)
    return "sinks: the column " + where(def) + " appends is not [batch, heads, seq, 1]";
  // An initializer, broadcast: nothing that varies with the inputs' values.
  Value source = column;
  for (Operation *op = source.getDefiningOp(); op; op = source.getDefiningOp()) {
    if (isa<tfm::WeightOp, onnx::WeightOp>(op) || matchPattern(source, m_Constant()))
      break;
    if (!broadcasts(op))
      return "sinks: the column " + where(def) + " appends is not an initializer broadcast "
             "over the batch and the queries (" + where(op) + " on its way)";
    source = op->getOperand(0);
  }
  if (isa<BlockArgument>(source))
    return "sinks: the column " + where(def) + " appends is read from a graph input";
  // One value per head: the same for every sequence and every query.
  const int64_t B = (*columnShape)[0], H = (*columnShape)[1], S = (*columnShape)[2];
  std::vector<float> values = floats(*info->value);
  if (int64_t(values.size()) != B * H * S)
    return "sinks: the appended column has no values on the probe";
  std::vector<float> sinks(H);
  for (int64_t h = 0; h < H; ++h)
    sinks[h] = values[h * S];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        if (values[(b * H + h) * S + s] != sinks[h])
          return "sinks: the column " + where(def) + " appends varies over the batch or the "
                 "queries, not one logit per head";
  c.region.insert(def);
  // The subtraction before the softmax: each row shifted by one value of its own (the
  // maximum of scores and sink), which the softmax does not see.
  if (shift) {
    std::string why;
    auto seed = randomTensor(*combined, 11);
    llvm::SetVector<Operation *> region;
    auto out = evaluateSeeded(probe_, {{def->getResult(0), seed}}, c.logits, region, why);
    if (!out)
      return "sinks: " + why;
    std::vector<float> x = floats(*seed), y = floats(*out);
    const int64_t T = combined->back();
    if (x.size() != y.size())
      return "sinks: the subtraction before the softmax changes the shape";
    for (size_t row = 0; row < x.size() / T; ++row)
      for (int64_t j = 1; j < T; ++j) {
        const size_t k = row * T + j;
        if (std::abs((y[k] - x[k]) - (y[row * T] - x[row * T])) > kTolerance)
          return "sinks: " + where(shift) + " before the softmax does not shift each row by "
                 "one value";
      }
    c.region.insert(region.begin(), region.end());
  }
  // The probabilities, through casts, to the Slice that drops the sink's column (which
  // columns it keeps, proveOutput proves).
  Value probs = c.softmax->getResult(0);
  while (probs.hasOneUse()) {
    Operation *user = *probs.getUsers().begin();
    if (isOp(user, "onnx.Cast") || isOp(user, "onnx.Identity")) {
      c.region.insert(user);
      probs = user->getResult(0);
      continue;
    }
    if (!isOp(user, "onnx.Slice"))
      break;
    c.region.insert(user);
    c.logits = scores;
    c.probs = user->getResult(0);
    c.sinks = std::move(sinks);
    return "";
  }
  return "sinks: the probabilities of the scores and the sink are not sliced before the "
         "product with V";
}

} // namespace dsc::attention
