// Per-head q/k norms (Qwen3's and Gemma-3's q_norm and k_norm), and norms over all of the
// query's or key's heads (OLMo-2's), moved into the attention that reads them. Per head,
// the query and key projections' results are split into heads, RMS-normalised over each
// head's features and merged again, which on the GPU is a norm launch each and, for
// Gemma-3's [b, heads, s, d] layout, two Transposes each, per layer; over all heads, a norm
// launch each. The attention kernels normalise each head as they load it for the rotary
// embedding instead (issue 14), and the projections then join and pack as Llama's do.
#include "compiler/fuse/Passes.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"

#include <optional>
#include <string>

namespace dsc {
#define GEN_PASS_DEF_FUSEQKNORM
#include "compiler/fuse/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// A projection's result normalised per head: source [.., heads * d] reshaped so that its
// last dimension is d, optionally transposed (a permutation that keeps the last axis), an
// RMS norm over that last dimension, the inverse transpose, and a reshape back to
// [.., heads * d]. Every step keeps the elements' order or undoes a permutation, so the
// whole is the norm of each consecutive group of d features of `source`.
struct HeadNorm {
  Value source;
  tfm::RmsNormOp norm;
  // From the attention's operand back to the source: what dies once the attention reads
  // the source.
  SmallVector<Operation *, 5> chain;
};

bool staticDim(Value value, int64_t fromEnd, int64_t &size) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || type.getRank() < fromEnd)
    return false;
  size = type.getDimSize(type.getRank() - fromEnd);
  return !ShapedType::isDynamic(size);
}

// The permutation of a Transpose that keeps its last axis last; none otherwise.
std::optional<SmallVector<int64_t>> lastAxisKeepingPerm(onnx::TransposeOp transpose) {
  auto type = dyn_cast<RankedTensorType>(transpose->getOperand(0).getType());
  std::optional<ArrayAttr> perm = transpose.getPerm();
  if (!type || !perm || static_cast<int64_t>(perm->size()) != type.getRank())
    return std::nullopt;
  SmallVector<int64_t> values;
  for (Attribute entry : *perm)
    values.push_back(cast<IntegerAttr>(entry).getInt());
  if (values.empty() || values.back() != type.getRank() - 1)
    return std::nullopt;
  return values;
}

// The readers of `value` that read more than its shape.
bool onlyReader(Value value, Operation *reader) {
  return llvm::all_of(value.getUsers(), [&](Operation *user) {
    return user == reader || isa<onnx::ShapeOp>(user);
  });
}

// `operand` as an RMS norm over all `heads` heads of a [batch, seq, heads * headDim]
// projection (OLMo-2's q_norm and k_norm), read by the attention alone; otherwise nothing.
std::optional<HeadNorm> allHeadsNormOf(Value operand, int64_t heads, int64_t headDim) {
  auto norm = operand.getDefiningOp<tfm::RmsNormOp>();
  auto type = dyn_cast<RankedTensorType>(operand.getType());
  int64_t width = 0, scaleSize = 0;
  if (!norm || heads < 2 || norm.getResidual() || norm.getPostResidual() || norm.getSum() ||
      !type || type.getRank() != 3 || !staticDim(operand, 1, width) ||
      width != heads * headDim || !staticDim(norm.getScale(), 1, scaleSize) ||
      scaleSize != width || cast<RankedTensorType>(norm.getScale().getType()).getRank() != 1 ||
      !operand.hasOneUse())
    return std::nullopt;
  HeadNorm found;
  found.source = norm.getInput();
  found.norm = norm;
  found.chain.push_back(norm);
  return found;
}

// `operand` as a per-head norm of a projection of `headDim` features per head, or a norm
// over all of its `heads` heads; otherwise nothing, with `reason` saying why and `sawNorm`
// whether there was a norm at all.
std::optional<HeadNorm> headNormOf(Value operand, int64_t heads, int64_t headDim,
                                   std::string &reason, bool &sawNorm) {
  if (std::optional<HeadNorm> found = allHeadsNormOf(operand, heads, headDim)) {
    sawNorm = true;
    return found;
  }
  HeadNorm found;
  auto merge = operand.getDefiningOp<onnx::ReshapeOp>();
  if (!merge) {
    reason = "is not a reshape of a norm";
    return std::nullopt;
  }
  found.chain.push_back(merge);
  Value current = merge->getOperand(0);
  auto back = current.getDefiningOp<onnx::TransposeOp>();
  if (back) {
    found.chain.push_back(back);
    current = back->getOperand(0);
  }
  found.norm = current.getDefiningOp<tfm::RmsNormOp>();
  if (!found.norm) {
    reason = "is not a reshape of a tfm.rms_norm";
    return std::nullopt;
  }
  found.chain.push_back(found.norm);
  sawNorm = true;
  if (found.norm.getResidual() || found.norm.getSum()) {
    reason = "its norm adds a residual";
    return std::nullopt;
  }
  if (!onlyReader(found.norm.getOutput(), found.chain[found.chain.size() - 2])) {
    reason = "its norm's result has other readers";
    return std::nullopt;
  }
  int64_t normalised = 0, scaleSize = 0;
  if (!staticDim(found.norm.getInput(), 1, normalised) || normalised != headDim ||
      !staticDim(found.norm.getScale(), 1, scaleSize) || scaleSize != headDim ||
      cast<RankedTensorType>(found.norm.getScale().getType()).getRank() != 1) {
    reason = "its norm is not over the head's " + std::to_string(headDim) + " features";
    return std::nullopt;
  }
  current = found.norm.getInput();
  auto there = current.getDefiningOp<onnx::TransposeOp>();
  if (!there != !back) {
    reason = "a transpose around its norm is not undone";
    return std::nullopt;
  }
  if (there) {
    std::optional<SmallVector<int64_t>> forward = lastAxisKeepingPerm(there);
    std::optional<SmallVector<int64_t>> backward = lastAxisKeepingPerm(back);
    bool inverse = forward && backward && forward->size() == backward->size();
    for (size_t axis = 0; inverse && axis < forward->size(); ++axis)
      inverse = (*forward)[(*backward)[axis]] == static_cast<int64_t>(axis);
    if (!inverse) {
      reason = "the transposes around its norm move the features or do not undo each other";
      return std::nullopt;
    }
    found.chain.push_back(there);
    current = there->getOperand(0);
  }
  auto split = current.getDefiningOp<onnx::ReshapeOp>();
  if (!split) {
    reason = "its norm does not read a reshape of the projection";
    return std::nullopt;
  }
  found.chain.push_back(split);
  found.source = split->getOperand(0);
  // Both reshapes keep the elements' order; groups of head_dim consecutive features are
  // heads when the source's and the operand's rows are whole heads, and the reshape back
  // gives the source's row length (and the operand the source's shape: the attention reads
  // one or the other as [batch, seq, features]).
  auto sourceType = dyn_cast<RankedTensorType>(found.source.getType());
  auto operandType = dyn_cast<RankedTensorType>(operand.getType());
  int64_t width = 0;
  if (!sourceType || !operandType || sourceType.getRank() != 3 ||
      !staticDim(found.source, 1, width) || width % headDim != 0 ||
      operandType.getRank() != 3 || operandType.getDimSize(2) != width ||
      merge->getOperand(0).getType() != split->getResult(0).getType()) {
    reason = "its reshapes do not split whole heads of a [batch, seq, features] projection";
    return std::nullopt;
  }
  for (int64_t axis = 0; axis < 2; ++axis) {
    int64_t a = sourceType.getDimSize(axis), b = operandType.getDimSize(axis);
    if (!ShapedType::isDynamic(a) && !ShapedType::isDynamic(b) && a != b) {
      reason = "its reshapes change the projection's batch or sequence dimensions";
      return std::nullopt;
    }
  }
  return found;
}

// Empty when `attention` can take the norms of its query and key (set in `query` and
// `key`); else why not, and `sawNorm` whether either reads a norm at all.
std::string whyNotFused(tfm::AttentionOp attention, std::optional<HeadNorm> &query,
                        std::optional<HeadNorm> &key, bool &sawNorm) {
  if (attention.getQueryNormScale())
    return "already normalises its query and key";
  if (attention.getPackedQkv())
    return "its query, key and value are packed";
  if (attention->hasAttr("tfm.cross_keys"))
    return "it is a cross-attention";
  std::string reason;
  const int64_t headDim = attention.getHeadDim();
  query = headNormOf(attention.getQuery(), attention.getNumHeads(), headDim, reason, sawNorm);
  if (!query)
    return "its query " + reason;
  key = headNormOf(attention.getKey(), attention.getNumKvHeads(), headDim, reason, sawNorm);
  if (!key)
    return "its key " + reason;
  if (query->norm == key->norm)
    return "its query and key are one norm";
  // The kernels normalise both per head or both over all heads (QK_NORM 1 or 2).
  auto overAllHeads = [&](const HeadNorm &norm, int64_t heads) {
    return heads > 1 && norm.chain.size() == 1;
  };
  if (overAllHeads(*query, attention.getNumHeads()) !=
          overAllHeads(*key, attention.getNumKvHeads()) &&
      attention.getNumHeads() > 1 && attention.getNumKvHeads() > 1)
    return "its query is normalised per head and its key over all heads, or the other way";
  if (query->norm.getEpsilonAttr() != key->norm.getEpsilonAttr())
    return "its query's and key's norms differ in epsilon";
  return "";
}

// Removes `chain`'s ops that nothing reads any more, the attention's operand first; a
// norm's remaining shape readers read its input instead.
void eraseDeadChain(ArrayRef<Operation *> chain) {
  for (Operation *op : chain) {
    if (auto norm = dyn_cast<tfm::RmsNormOp>(op))
      norm.getOutput().replaceAllUsesWith(norm.getInput());
    if (op->use_empty())
      op->erase();
  }
}

struct FuseQkNormPass : impl::FuseQkNormBase<FuseQkNormPass> {
  using FuseQkNormBase::FuseQkNormBase;

  void runOnOperation() override {
    SmallVector<tfm::AttentionOp> attentions;
    getOperation().walk([&](tfm::AttentionOp op) { attentions.push_back(op); });
    for (tfm::AttentionOp attention : attentions) {
      std::optional<HeadNorm> query, key;
      bool sawNorm = false;
      std::string why = whyNotFused(attention, query, key, sawNorm);
      if (!why.empty()) {
        // Only attentions that read a norm are candidates worth a remark.
        if (remarks && sawNorm)
          attention.emitRemark() << "q/k norms not fused: " << why;
        continue;
      }
      attention.getQueryMutable().assign(query->source);
      attention.getKeyMutable().assign(key->source);
      attention.getQueryNormScaleMutable().assign(query->norm.getScale());
      attention.getKeyNormScaleMutable().assign(key->norm.getScale());
      attention.setQkNormEpsilonAttr(query->norm.getEpsilonAttr());
      eraseDeadChain(query->chain);
      eraseDeadChain(key->chain);
    }
  }
};

} // namespace
} // namespace dsc
