// One projection per part of a fused Q/K/V projection that the export takes apart with
// reshapes, transposes, splits, slices and gathers (BLOOM's and GPT-NeoX's per-head [q, k, v]
// rows, GPTBigCode's [q | kv] split twice, Falcon's grouped heads): each part reads the rows
// of the weight (and bias) it takes (ProjectionTrace.h, as tp-shard does for each rank), so
// the plumbing between the projection and the attention goes, and dsc-fuse-projections and
// dsc-fuse-packed-qkv then join the parts again as Q, K and V rows read packed (issue 14).
#include "compiler/parallel/Passes.h"
#include "compiler/parallel/ProjectionTrace.h"

#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

#include <string>

namespace dsc {
#define GEN_PASS_DEF_UNPACKQKV
#include "compiler/parallel/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

using parallel::Projection;

// Whether dsc-fuse-packed-qkv reads the three operands packed as they are: parts of one
// Split, or Slices of one value (GPT-2's c_attn, Phi-3's qkv_proj).
bool alreadyPackable(tfm::AttentionOp attention) {
  Value source;
  for (Value operand : {attention.getQuery(), attention.getKey(), attention.getValue()}) {
    Operation *def = operand.getDefiningOp();
    if (!isa_and_nonnull<onnx::SplitOp, onnx::SliceOp>(def))
      return false;
    if (source && def->getOperand(0) != source)
      return false;
    source = def->getOperand(0);
  }
  return true;
}

// Empty when `attention`'s Q, K and V are parts of one fused projection that can be
// unpacked (in `parts`); else why not.
std::string whyNotUnpacked(tfm::AttentionOp attention, Projection (&parts)[3]) {
  if (attention.getPackedQkv())
    return "already packed";
  if (alreadyPackable(attention))
    return "already packable";
  Value operands[3] = {attention.getQuery(), attention.getKey(), attention.getValue()};
  for (int part = 0; part < 3; ++part)
    if (std::string why = parallel::traceProjection(operands[part], attention, part, parts[part]);
        !why.empty())
      return why;
  if (llvm::none_of(parts, [](const Projection &p) { return p.fused; }))
    return "not fused";
  for (const Projection &p : parts)
    if (!p.fused || p.allHeads || p.linear != parts[0].linear)
      return "Q, K and V are not parts of one fused projection";
  tfm::LinearOp linear = parts[0].linear;
  if (linear.getScales() || linear.getParallel() != tfm::Parallelism::replicated ||
      linear.getActivation() || linear.getResidual() || linear.getNorm() || linear.getGated())
    return "the fused projection is quantized, parallel or fused already";
  return "";
}

// The ops that die when nothing reads `roots` any more, users before what they read; the
// defining ops of `roots` first. Only onnx ops, tfm.linear and the norms: the plumbing, the
// projection and a part's per-head norm.
SmallVector<Operation *> deadAfter(ArrayRef<Value> roots) {
  llvm::SetVector<Operation *> dead;
  SmallVector<Operation *> worklist;
  for (Value root : roots)
    if (Operation *def = root.getDefiningOp())
      worklist.push_back(def);
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    const bool plumbing = isa<tfm::LinearOp, tfm::LayerNormOp, tfm::RmsNormOp>(op) ||
                          (op->getDialect() && op->getDialect()->getNamespace() == "onnx");
    if (dead.contains(op) || !plumbing)
      continue;
    if (!llvm::all_of(op->getUsers(), [&](Operation *user) { return dead.contains(user); }))
      continue;
    dead.insert(op);
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        worklist.push_back(def);
  }
  return dead.takeVector();
}

struct UnpackQkvPass : impl::UnpackQkvBase<UnpackQkvPass> {
  using UnpackQkvBase::UnpackQkvBase;

  void runOnOperation() override {
    SmallVector<tfm::AttentionOp> attentions;
    getOperation().walk([&](tfm::AttentionOp op) { attentions.push_back(op); });
    for (tfm::AttentionOp attention : attentions)
      if (failed(unpack(attention)))
        return signalPassFailure();
  }

  LogicalResult unpack(tfm::AttentionOp attention) {
    Projection parts[3];
    if (std::string why = whyNotUnpacked(attention, parts); !why.empty()) {
      if (remarks && why != "already packed" && why != "already packable" && why != "not fused")
        attention.emitRemark() << "Q, K and V not unpacked: " << why;
      return success();
    }
    tfm::LinearOp linear = parts[0].linear;
    Value input = parallel::unflattenedInput(linear);
    auto inputType = cast<RankedTensorType>(input.getType());
    const int64_t headDim = static_cast<int64_t>(attention.getHeadDim());
    const int64_t queryFeatures = static_cast<int64_t>(attention.getNumHeads()) * headDim;
    const int64_t kvFeatures = static_cast<int64_t>(attention.getNumKvHeads()) * headDim;
    const int64_t sizes[3] = {queryFeatures, kvFeatures, kvFeatures};
    OpBuilder builder(linear);
    SmallVector<Value> old = {attention.getQuery(), attention.getKey(), attention.getValue()};
    SmallVector<tfm::LinearOp> created;
    for (int part = 0; part < 3; ++part) {
      FailureOr<Value> weight = parallel::transformedWeight(linear.getWeight(), parts[part].select);
      FailureOr<Value> bias = Value();
      if (Value oldBias = linear.getBias())
        bias = parallel::transformedWeight(oldBias, parts[part].select);
      if (failed(weight) || failed(bias))
        return linear.emitOpError("dsc-unpack-qkv: the weight or bias is not a tfm.weight");
      SmallVector<int64_t> shape(inputType.getShape());
      shape.back() = sizes[part];
      auto type = RankedTensorType::get(shape, inputType.getElementType());
      created.push_back(tfm::LinearOp::create(builder, linear.getLoc(), type, input, *weight,
                                              *bias, Value(), linear.getParallelAttr()));
    }
    for (int part = 0; part < 3; ++part)
      attention->setOperand(part, created[part].getOutput());
    SmallVector<Operation *> dead = deadAfter(old);
    if (!llvm::is_contained(dead, linear.getOperation())) {
      // Something else reads the fused projection's result (a shape, another part): the
      // parts would be computed twice. Leave it as it was.
      for (int part = 0; part < 3; ++part)
        attention->setOperand(part, old[part]);
      for (tfm::LinearOp part : created) {
        SmallVector<Value> parameters(part->getOperands().drop_front());
        part->erase();
        for (Value parameter : parameters)
          if (Operation *def = parameter ? parameter.getDefiningOp() : nullptr;
              def && def->use_empty() && isa<tfm::WeightOp>(def))
            def->erase();
      }
      if (remarks)
        attention.emitRemark() << "Q, K and V not unpacked: the fused projection's result "
                                  "has other readers";
      return success();
    }
    // A part the export normalised per head is normalised so again (the norm's clone reads
    // the norm's scale, which therefore stays).
    for (int part = 0; part < 3; ++part)
      if (Operation *norm = parts[part].headNorm)
        attention->setOperand(part, parallel::normalisedPerHead(created[part].getOutput(), norm,
                                                                headDim, attention));
    // The fused weight and bias go with the projection (the parts read them through
    // tfm.weight ops of their own).
    SmallVector<Value> parameters(linear->getOperands().drop_front());
    for (Operation *op : dead)
      op->erase();
    for (Value parameter : parameters)
      if (Operation *def = parameter.getDefiningOp(); def && def->use_empty() &&
                                                      isa<tfm::WeightOp>(def))
        def->erase();
    return success();
  }
};

} // namespace
} // namespace dsc
