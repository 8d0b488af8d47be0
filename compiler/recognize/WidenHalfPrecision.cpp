// dsc-widen-half-precision: see Passes.td. A model exported in f16 or bf16 (the graph's own
// dtype: `model.half()` before torch.onnx.export) computes what the f32 model computes, with
// rounding; the recognisers and their probes reason about f32 graphs. The graph is widened
// to f32 inside, keeping its interface: f16/bf16 inputs are cast to f32 where they enter and
// f16/bf16 outputs cast back where they leave. The weights keep their stored bytes (the
// evaluator and the plan writer convert), so a plan of an f16 model stores f16 weights.
#include "compiler/recognize/Passes.h"

#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/APFloat.h"

namespace dsc {
#define GEN_PASS_DEF_WIDENHALFPRECISION
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

bool isHalf(Type element) { return element.isF16() || element.isBF16(); }

// `type` with an f32 element where it had f16 or bf16 (tensors ranked or not, and the
// element types of Cast's `to`).
Type widened(Type type) {
  Builder b(type.getContext());
  if (isHalf(type))
    return b.getF32Type();
  if (auto ranked = dyn_cast<RankedTensorType>(type); ranked && isHalf(ranked.getElementType()))
    return RankedTensorType::get(ranked.getShape(), b.getF32Type());
  if (auto unranked = dyn_cast<UnrankedTensorType>(type);
      unranked && isHalf(unranked.getElementType()))
    return UnrankedTensorType::get(b.getF32Type());
  return type;
}

bool hasHalf(Type type) { return widened(type) != type; }

// A half constant's values as f32 (exact: every f16 and bf16 value is an f32 one); none
// for attributes whose values cannot be read here (resources).
std::optional<Attribute> widenedAttribute(Attribute attribute) {
  if (auto type = dyn_cast<TypeAttr>(attribute))
    return hasHalf(type.getValue()) ? Attribute(TypeAttr::get(widened(type.getValue())))
                                    : attribute;
  auto elements = dyn_cast<ElementsAttr>(attribute);
  if (!elements || !isHalf(elements.getElementType()))
    return attribute;
  auto dense = dyn_cast<DenseFPElementsAttr>(attribute);
  if (!dense)
    return std::nullopt;
  SmallVector<float> values;
  for (const APFloat &value : dense.getValues<APFloat>())
    values.push_back(value.convertToFloat());
  return Attribute(DenseElementsAttr::get(
      RankedTensorType::get(dense.getType().getShape(), Builder(attribute.getContext()).getF32Type()),
      ArrayRef<float>(values)));
}

struct WidenHalfPrecisionPass : impl::WidenHalfPrecisionBase<WidenHalfPrecisionPass> {
  using WidenHalfPrecisionBase::WidenHalfPrecisionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Nothing changes unless everything can: a half constant that cannot be read leaves
    // the graph as it is (it then runs generic, in its own dtypes).
    bool any = false, bf16 = false, readable = true;
    module.walk([&](Operation *op) {
      for (Type type : op->getResultTypes()) {
        any |= hasHalf(type);
        bf16 |= getElementTypeOrSelf(type).isBF16();
      }
      for (NamedAttribute attribute : op->getAttrs())
        readable &= widenedAttribute(attribute.getValue()).has_value();
    });
    if (!any || !readable)
      return;
    // What the export rounded to its half type (an attention's scale split over q and k)
    // may be read as the value it rounds: the recognisers learn by how much (bf16 where
    // any result is bf16: the coarser rounding).
    module->setAttr("dsc.half_export", StringAttr::get(&getContext(), bf16 ? "bf16" : "f16"));
    for (auto func : module.getOps<func::FuncOp>())
      widen(func);
  }

  void widen(func::FuncOp func) {
    if (func.isExternal())
      return;
    OpBuilder builder(func.getContext());
    Block &entry = func.front();
    builder.setInsertionPointToStart(&entry);
    for (BlockArgument argument : entry.getArguments()) {
      if (!hasHalf(argument.getType()))
        continue;
      Type wide = widened(argument.getType());
      auto cast = onnx::CastOp::create(builder, argument.getLoc(), wide, argument,
                                       TypeAttr::get(widened(getElementTypeOrSelf(wide))),
                                       IntegerAttr());
      // Shape reads stay on the input (its shape is the same): the session programs replace
      // a past's shape reads by the mask's.
      argument.replaceUsesWithIf(cast.getOutput(), [&](OpOperand &use) {
        return use.getOwner() != cast &&
               !isa<onnx::ShapeOp, onnx::SizeOp>(use.getOwner());
      });
    }
    func.walk([&](Operation *op) {
      if (isa<func::FuncOp>(op))
        return;
      for (Value result : op->getResults())
        if (hasHalf(result.getType()))
          result.setType(widened(result.getType()));
      for (NamedAttribute attribute : op->getAttrs())
        if (std::optional<Attribute> wide = widenedAttribute(attribute.getValue());
            wide && *wide != attribute.getValue())
          op->setAttr(attribute.getName(), *wide);
    });
    // A Cast between two types that are now both f32 (the export's casts up to f32 for a
    // norm or a softmax, and back down) is no conversion any more: the recognisers see the
    // value itself, a weight where the export cast one.
    SmallVector<onnx::CastOp> identities;
    func.walk([&](onnx::CastOp cast) {
      if (cast.getInput().getType() == cast.getOutput().getType())
        identities.push_back(cast);
    });
    for (onnx::CastOp cast : identities) {
      cast.getOutput().replaceAllUsesWith(cast.getInput());
      cast->erase();
    }
    // Outputs leave in the dtypes the interface declares.
    func.walk([&](func::ReturnOp ret) {
      builder.setInsertionPoint(ret);
      for (auto [index, resultType] : llvm::enumerate(func.getResultTypes())) {
        Value operand = ret.getOperand(index);
        if (operand.getType() == resultType)
          continue;
        auto cast = onnx::CastOp::create(builder, ret.getLoc(), resultType, operand,
                                         TypeAttr::get(getElementTypeOrSelf(resultType)),
                                         IntegerAttr());
        ret->setOperand(index, cast.getOutput());
      }
    });
  }
};

} // namespace
} // namespace dsc
