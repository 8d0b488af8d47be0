// dsc-quantize-weights: int8 or int4 weight handles and their scales for the linear layers
// (docs/int8.md, docs/int4.md). The bytes are quantized by the plan writer (codegen/WeightTransforms),
// after each rank's shard is cut, so only the handles change here.
#include "compiler/quantize/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <numeric>
#include <string>

namespace dsc {
#define GEN_PASS_DEF_QUANTIZEWEIGHTS
#include "compiler/quantize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

bool isActivation(Operation *op) { return op && isa<tfm::ActivationOp, tfm::GatedActOp>(op); }

// DeepSpeed's mlp_extra_grouping applies to the MLP's projections: the ones that feed the
// activation (fc_in, gate, up) and the one that reads it (fc_out, down).
bool isMlpLinear(tfm::LinearOp linear) {
  if (isActivation(linear.getInput().getDefiningOp()))
    return true;
  for (Operation *user : linear.getOutput().getUsers())
    if (isActivation(user))
      return true;
  return false;
}

// Each rank's count of input features: a row-parallel shard (along axis 1 of the [out, in]
// result) gives each rank its own; otherwise every rank has the result's.
SmallVector<int64_t> inputFeaturesPerRank(tfm::WeightOp weight) {
  int64_t in = cast<RankedTensorType>(weight.getType()).getDimSize(1);
  if (auto transforms = weight.getTransforms())
    for (Attribute transform : *transforms)
      if (auto shard = dyn_cast<tfm::ShardAttr>(transform); shard && shard.getAxis() == 1) {
        SmallVector<int64_t> sizes;
        for (int64_t size : shard.getSizes())
          sizes.push_back(size * shard.getGroups());
        return sizes;
      }
  return {in};
}

struct QuantizeWeightsPass : impl::QuantizeWeightsBase<QuantizeWeightsPass> {
  using QuantizeWeightsBase::QuantizeWeightsBase;

  void runOnOperation() override {
    if (bits != 8 && bits != 4) {
      getOperation().emitError() << "weights are quantized to 8 or 4 bits, not "
                                 << int64_t(bits);
      return signalPassFailure();
    }
    if (lmHeadBits != 8 && lmHeadBits != 4) {
      getOperation().emitError() << "the LM head is quantized to 8 or 4 bits, not "
                                 << int64_t(lmHeadBits);
      return signalPassFailure();
    }
    if (bits == 4 && (groupSize <= 0 || groupSize % 2 != 0)) {
      getOperation().emitError() << "int4 weights need a positive, even group size (32, 64, "
                                    "128: a scale per group of inputs), not "
                                 << int64_t(groupSize);
      return signalPassFailure();
    }
    if (groupSize < 0) {
      getOperation().emitError() << "the int8 group size must be positive, or 0 for one group "
                                    "per output channel, not "
                                 << int64_t(groupSize);
      return signalPassFailure();
    }
    SmallVector<Operation *> layers;
    getOperation().walk([&](Operation *op) {
      if (isa<tfm::LinearOp>(op) || (lmHead && isa<tfm::LmHeadOp>(op)))
        layers.push_back(op);
    });
    for (Operation *layer : layers)
      if (failed(quantize(layer)))
        return signalPassFailure();
    SmallVector<tfm::MoeOp> moes;
    getOperation().walk([&](tfm::MoeOp moe) { moes.push_back(moe); });
    for (tfm::MoeOp moe : moes)
      if (failed(quantizeExperts(moe)))
        return signalPassFailure();
  }

  // A tfm.moe's routed experts, int8 or int4 in groups as linear layers are (each expert's
  // parts quantized, then stacked again with their scales beside them). Under int4 a group
  // size that does not divide every part's inputs on every rank (or is odd) leaves the
  // experts int8 per output channel, as before int4 experts were read by the MoE kernel.
  // The router is a tfm.linear and the shared expert stays float.
  LogicalResult quantizeExperts(tfm::MoeOp moe) {
    if (moe.getGateUpScales())
      return success();
    auto gateUp = moe.getGateUp().getDefiningOp<tfm::ConcatWeightsOp>();
    auto down = moe.getDown().getDefiningOp<tfm::ConcatWeightsOp>();
    if (!gateUp || !down) {
      decline(moe, "its experts' weights are not stacked model weights");
      return success();
    }
    Type scaleElement = cast<RankedTensorType>(moe.getInput().getType()).getElementType();
    MLIRContext *context = moe.getContext();
    // Experts whose codes the model's publisher wrote (QMoE's) keep them: int4 (or int8
    // codes, code - zero point) at the published group size, which must divide every part's
    // inputs on every rank (a TP split of a block would need them quantized again); else,
    // as for a linear layer, they stay float.
    int published = 0, parts = 0;
    bool publishedInt8Codes = false, divides = true;
    for (tfm::ConcatWeightsOp concat : {gateUp, down})
      for (Value part : concat.getParts())
        if (auto weight = part.getDefiningOp<tfm::WeightOp>()) {
          ++parts;
          const std::string name = weight.getName().str();
          if (llvm::is_contained(keepFloat, name)) {
            decline(moe, "its experts' weights were quantized by the model's publisher in a "
                         "layout the plan cannot keep as it is; they stay float rather than "
                         "be quantized again");
            return success();
          }
          const bool asInt8 = llvm::is_contained(publishedInt8, name);
          if (asInt8 || llvm::is_contained(publishedInt4, name)) {
            ++published;
            publishedInt8Codes |= asInt8;
          }
          for (int64_t in : inputFeaturesPerRank(weight))
            divides &= groupSize > 0 && in % groupSize == 0;
        }
    if (publishedOnly && published == 0) {
      decline(moe, "the model's publisher left its experts float");
      return success();
    }
    if (published > 0 && (published != parts || !divides)) {
      decline(moe, published != parts
                       ? "only some of its experts' weights are the model's own codes; they "
                         "stay float rather than be quantized again"
                       : "its experts' codes (the model's own) come in groups that do not "
                         "divide each rank's inputs; they stay float rather than be "
                         "quantized again");
      return success();
    }
    int expertBits = 8;
    if (published > 0 && publishedInt8Codes) {
      expertBits = 8;
    } else if (bits == 4 && groupSize > 0 && groupSize % 2 == 0) {
      expertBits = 4;
      for (tfm::ConcatWeightsOp concat : {gateUp, down})
        for (Value part : concat.getParts())
          if (auto weight = part.getDefiningOp<tfm::WeightOp>())
            for (int64_t in : inputFeaturesPerRank(weight))
              if (in % groupSize != 0)
                expertBits = 8;
      if (expertBits == 8)
        decline(moe, "the int4 group size does not divide its experts' inputs on every rank: "
                     "its experts are int8 per output channel");
    }
    SmallVector<Value> stacked;
    for (tfm::ConcatWeightsOp concat : {gateUp, down}) {
      SmallVector<Value> codes, scales;
      int64_t groups = 0;
      for (Value part : concat.getParts()) {
        auto weight = part.getDefiningOp<tfm::WeightOp>();
        if (!weight)
          return moe.emitOpError("an expert's weight is not a model weight");
        FailureOr<int64_t> size = layerGroupSize(
            moe, inputFeaturesPerRank(weight), expertBits,
            published > 0 || bits == 8 || expertBits == 4 ? groupSize : 0);
        if (failed(size))
          return failure();
        auto [code, scale] =
            quantizedWeight(weight, expertBits, *size, scaleElement, moe.getLoc());
        codes.push_back(code);
        int64_t partGroups = cast<RankedTensorType>(scale.getType()).getDimSize(1);
        if (groups != 0 && partGroups != groups)
          return moe.emitOpError("the experts' weights quantize to different groups");
        groups = partGroups;
        scales.push_back(scale);
      }
      OpBuilder builder(concat);
      auto type = cast<RankedTensorType>(concat.getType());
      auto codesType = RankedTensorType::get(
          type.getShape(), expertBits == 4
                               ? IntegerType::get(context, 4, IntegerType::Unsigned)
                               : IntegerType::get(context, 8));
      auto scalesType = RankedTensorType::get({type.getDimSize(0), groups}, scaleElement);
      stacked.push_back(tfm::ConcatWeightsOp::create(builder, concat.getLoc(), codesType, codes,
                                                     concat.getRankPartsAttr()));
      stacked.push_back(tfm::ConcatWeightsOp::create(builder, concat.getLoc(), scalesType, scales,
                                                     concat.getRankPartsAttr()));
    }
    moe.getGateUpMutable().assign(stacked[0]);
    moe.getGateUpScalesMutable().assign(stacked[1]);
    moe.getDownMutable().assign(stacked[2]);
    moe.getDownScalesMutable().assign(stacked[3]);
    // The float stacks and their parts are read by nothing now.
    for (tfm::ConcatWeightsOp concat : {gateUp, down}) {
      if (!concat->use_empty())
        continue;
      SmallVector<Operation *> parts;
      for (Value part : concat.getParts())
        parts.push_back(part.getDefiningOp());
      concat->erase();
      for (Operation *part : parts)
        if (part->use_empty())
          part->erase();
    }
    return success();
  }

  void decline(Operation *layer, const Twine &reason) {
    if (remarks)
      layer->emitRemark() << "not quantized: " << reason;
  }

  // The layer's group size: 0 (one group per row) when the requested size covers every
  // rank's inputs (int8 only: int4 keeps its groups). Fails, naming the layer, when it does
  // not divide some rank's share.
  FailureOr<int64_t> layerGroupSize(Operation *layer, ArrayRef<int64_t> inputsPerRank,
                                    int layerBits, int64_t requested) {
    auto linear = dyn_cast<tfm::LinearOp>(layer);
    const bool finer = mlpExtraGrouping && linear && isMlpLinear(linear);
    int64_t size = requested;
    int64_t largest = *llvm::max_element(inputsPerRank);
    if (layerBits == 8 && (size == 0 || size >= largest)) {
      if (!finer)
        return int64_t(0);
      // Two groups per row: half of each rank's inputs, which must then be one size.
      size = largest;
    }
    if (finer)
      size /= 2;
    for (auto [rank, in] : llvm::enumerate(inputsPerRank)) {
      if (size > 0 && in % size == 0)
        continue;
      InFlightDiagnostic error = layer->emitError()
                                 << (layerBits == 4 ? "int4" : "int8") << " group size " << size
                                 << (finer ? " (halved for the MLP by --int8-mlp-extra-grouping)"
                                           : "")
                                 << " does not divide the " << in << " input features of this "
                                 << (linear                   ? "linear layer"
                                     : isa<tfm::MoeOp>(layer) ? "mixture of experts' expert"
                                                              : "LM head");
      if (inputsPerRank.size() > 1)
        error << " on rank " << rank << " of " << inputsPerRank.size();
      error << (layerBits == 4 ? "; choose an even group size that divides it"
                               : "; choose a group size that divides it, or 0 for one group "
                                 "per output channel");
      return failure();
    }
    return size;
  }

  // `weight` as `bits`-bit codes in groups of `size` inputs, and their scales in
  // `scaleElement`: two handles on the same model tensor, each with the weight's transforms
  // and then its own (the plan writer quantizes each rank's shard).
  std::pair<Value, Value> quantizedWeight(tfm::WeightOp weight, int bits, int64_t size,
                                          Type scaleElement, Location where) {
    OpBuilder builder(weight);
    MLIRContext *context = builder.getContext();
    auto withLast = [&](Attribute last) {
      SmallVector<Attribute> list;
      if (auto existing = weight.getTransforms())
        list.append(existing->begin(), existing->end());
      list.push_back(last);
      return list;
    };
    Attribute quantize = bits == 4 ? Attribute(tfm::QuantizeInt4Attr::get(context, size))
                                   : Attribute(tfm::QuantizeInt8Attr::get(context, size));
    Attribute scaleTransform =
        bits == 4 ? Attribute(tfm::QuantScalesInt4Attr::get(context, size, scaleElement))
                  : Attribute(tfm::QuantScalesAttr::get(context, size, scaleElement));
    auto sourceType = cast<RankedTensorType>(weight.getSourceType());
    Value codes =
        tfm::WeightOp::create(builder, where, weight.getName(), sourceType, withLast(quantize));
    Value scales = tfm::WeightOp::create(builder, where, weight.getName(), sourceType,
                                         withLast(scaleTransform));
    return {codes, scales};
  }

  LogicalResult quantize(Operation *layer) {
    auto linear = dyn_cast<tfm::LinearOp>(layer);
    auto head = dyn_cast<tfm::LmHeadOp>(layer);
    if (linear ? bool(linear.getScales()) : bool(head.getScales())) {
      decline(layer, "it is already quantized");
      return success();
    }
    Value weightValue = linear ? linear.getWeight() : head.getWeight();
    auto weight = weightValue.getDefiningOp<tfm::WeightOp>();
    if (!weight) {
      decline(layer, "its weight is computed, not a model weight");
      return success();
    }
    const bool publishedAsInt8 = llvm::is_contained(publishedInt8, weight.getName().str());
    if (publishedOnly && !publishedAsInt8 &&
        !llvm::is_contained(publishedInt4, weight.getName().str())) {
      decline(layer, "the model's publisher left its weight float");
      return success();
    }
    if (llvm::is_contained(keepFloat, weight.getName().str())) {
      decline(layer, "its weight was quantized by the model's publisher in a layout the plan "
                     "cannot keep as it is; it stays float rather than be quantized again");
      return success();
    }
    auto type = cast<RankedTensorType>(weight.getType());
    auto inputType =
        cast<RankedTensorType>((linear ? linear.getInput() : head.getHidden()).getType());
    if (!isa<FloatType>(type.getElementType()) || type.getRank() != 2) {
      decline(layer, "its weight is not a float [out, in] matrix");
      return success();
    }
    // Scales have the type of the activations (the ops' verifiers).
    Type scaleElement = inputType.getElementType();
    if (!isa<FloatType>(scaleElement)) {
      decline(layer, "its input is not float");
      return success();
    }
    // The LM head stays int8 under int4 (the pass's description says why).
    int layerBits =
        linear ? static_cast<int>(bits) : bits == 4 ? static_cast<int>(lmHeadBits) : 8;
    SmallVector<int64_t> inputsPerRank = inputFeaturesPerRank(weight);
    // A default int4 group size (not the user's) bends to a layer it does not divide: the
    // largest even size below it that divides every rank's inputs, or, where the inputs are
    // odd, int8 per output channel. A user who asks for nothing gets a plan that works.
    // (groupSize is positive whenever bits is 4: runOnOperation checked it.)
    int64_t requested = groupSize;
    int64_t common = 0;
    for (int64_t in : inputsPerRank)
      common = std::gcd(common, in);
    // The int8 LM head of an int4 plan takes the default size where it divides, else one
    // group per output channel.
    if (layerBits == 8 && defaultGroupSize && common % groupSize != 0)
      requested = 0;
    if (layerBits == 4 && defaultGroupSize) {
      int64_t fitting = 0;
      for (int64_t size = std::min<int64_t>(groupSize, common); size >= 2 && !fitting; --size)
        if (size % 2 == 0 && common % size == 0)
          fitting = size;
      if (fitting == 0) {
        layerBits = 8;
        requested = 0;
        decline(layer, "its input features are odd: int4 pairs them, so it is int8");
      } else {
        requested = fitting;
      }
    }
    // 4-bit codes with zero points, and 8-bit codes: int8 at their own block size (0: one
    // group per output channel), so that the writer stores code - zero point as it is.
    if (publishedAsInt8) {
      if (groupSize == 0 ? inputsPerRank.size() > 1 : common % groupSize != 0) {
        decline(layer, groupSize == 0
                           ? "its weight's codes (the model's own) have a scale per output "
                             "channel over all its inputs, which the ranks split; it stays "
                             "float rather than be quantized again"
                           : "its weight's codes (the model's own) come in groups that do not "
                             "divide each rank's inputs; it stays float rather than be "
                             "quantized again");
        return success();
      }
      layerBits = 8;
      requested = groupSize;
    }
    if (llvm::is_contained(publishedInt4, weight.getName().str()) &&
        (layerBits != 4 || requested != groupSize)) {
      decline(layer, "its weight's 4-bit codes (the model's own) come in groups that do not "
                     "divide each rank's inputs; it stays float rather than be quantized "
                     "again");
      return success();
    }
    FailureOr<int64_t> size = layerGroupSize(layer, inputsPerRank, layerBits, requested);
    if (failed(size))
      return failure();

    // The layer's location, so that what quantization lost is reported per layer (an
    // exporter's weight names, onnx::MatMul_846, often say nothing).
    auto [quantized, scales] =
        quantizedWeight(weight, layerBits, *size, scaleElement, layer->getLoc());
    // An int4 plan's int8 layers take int8 activations where its int4 layers do: at most
    // half a step of x per block of 32 (docs/int4.md); its head was 1/3 of an int4 decode
    // step with f32 activations. An int8 plan's take them unless the user keeps x exact.
    const bool int8Inputs = layerBits == 8 && (bits == 4 || int8Activations);
    if (linear) {
      linear.getWeightMutable().assign(quantized);
      linear.getScalesMutable().assign(scales);
      if (int8Inputs)
        linear.setInt8Activations(true);
    } else {
      head.getWeightMutable().assign(quantized);
      head.getScalesMutable().assign(scales);
      if (int8Inputs)
        head.setInt8Activations(true);
    }
    if (weight->use_empty())
      weight->erase();
    return success();
  }
};

} // namespace
} // namespace dsc
