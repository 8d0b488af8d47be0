// dsc-derive-step-program: see Passes.td.
#include "compiler/recognize/Passes.h"
#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace dsc {
#define GEN_PASS_DEF_DERIVESTEPPROGRAM
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

// The batch dimension's symbol of @decode's token ids, which bounds the sampled rows too.
StringRef batchSymbol(func::FuncOp decode) {
  for (unsigned i = 0; i < decode.getNumArguments(); ++i) {
    auto name = decode.getArgAttrOfType<StringAttr>(i, "onnx.name");
    auto dims = decode.getArgAttrOfType<ArrayAttr>(i, "onnx.dims");
    if (name && name.getValue() == "input_ids" && dims && !dims.empty())
      if (auto symbol = dyn_cast<StringAttr>(dims[0]); symbol && !symbol.getValue().empty())
        return symbol.getValue();
  }
  return "batch";
}

struct DeriveStepProgramPass : impl::DeriveStepProgramBase<DeriveStepProgramPass> {
  using DeriveStepProgramBase::DeriveStepProgramBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto decode = module.lookupSymbol<func::FuncOp>("decode");
    if (!decode || module.lookupSymbol("step"))
      return;
    SmallVector<tfm::LmHeadOp> heads;
    decode.walk([&](tfm::LmHeadOp head) { heads.push_back(head); });
    if (heads.size() != 1)
      return;
    auto step = cast<func::FuncOp>(decode->clone());
    step.setSymName("step");
    tfm::LmHeadOp head;
    step.walk([&](tfm::LmHeadOp op) { head = op; });
    // Gather before the final norm where only the head reads it: the norm then runs on the
    // sampled rows alone, and the norm prologue fusion still joins it to the head.
    Value hidden = head.getHidden();
    Operation *norm = hidden.getDefiningOp();
    OpOperand *gathered = &head.getHiddenMutable();
    if (norm && hidden.hasOneUse() && isa<tfm::RmsNormOp, tfm::LayerNormOp>(norm))
      gathered = &norm->getOpOperand(0);
    auto rowsType = dyn_cast<RankedTensorType>(gathered->get().getType());
    if (!rowsType || rowsType.getRank() != 3) {
      step.erase();
      return;
    }
    Builder builder(module.getContext());
    SmallVector<NamedAttribute> attrs = {
        builder.getNamedAttr("onnx.name", builder.getStringAttr("logits_rows")),
        builder.getNamedAttr("onnx.dims", builder.getStrArrayAttr({batchSymbol(decode)}))};
    auto indexType = RankedTensorType::get({ShapedType::kDynamic}, builder.getI64Type());
    unsigned index = step.getNumArguments();
    (void)step.insertArgument(index, indexType, builder.getDictionaryAttr(attrs), step.getLoc());
    OpBuilder at(gathered->getOwner());
    auto rows = onnx::GatherOp::create(
        at, head.getLoc(),
        RankedTensorType::get({ShapedType::kDynamic, rowsType.getDimSize(1),
                               rowsType.getDimSize(2)},
                              rowsType.getElementType()),
        gathered->get(), step.getArgument(index), at.getI64IntegerAttr(0));
    gathered->set(rows);
    OpBuilder after(module.getContext());
    after.setInsertionPointAfter(decode);
    after.insert(step);
  }
};

} // namespace
} // namespace dsc
