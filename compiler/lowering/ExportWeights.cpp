#include "compiler/lowering/ExportWeights.h"

#include "codegen/WeightTransforms.h"
#include "compiler/evaluate/Evaluator.h"
#include "compiler/lowering/RuntimeTypes.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <functional>

using namespace mlir;

namespace dsc {
namespace {

// The weight's name and the part of it a slice transform keeps (the Q, K or V rows of a
// fused projection), so that each quantized weight has its own line.
std::string quantizedWeightLabel(plan::WeightTensorOp op, int rank, int ranks) {
  std::string label;
  // The quantize pass gives the handle its layer's location: the ONNX node.
  if (auto layer = dyn_cast<NameLoc>(op.getLoc()); layer && layer.getName() != op.getName())
    label = layer.getName().str() + " ";
  label += op.getName().str();
  if (auto list = op.getTransforms())
    for (auto transform : list->getAsRange<DictionaryAttr>())
      if (transform.getAs<StringAttr>("kind").getValue() == "slice") {
        int64_t offset = transform.getAs<IntegerAttr>("offset").getInt();
        int64_t size = transform.getAs<IntegerAttr>("size").getInt();
        label += "[" + std::to_string(offset) + ":" + std::to_string(offset + size) + "]";
      }
  if (ranks > 1)
    label += " rank " + std::to_string(rank);
  return label;
}

// The op's transforms for `rank` (a shard keeps that rank's part), plus the conversion to
// the stored dtype that --dtype asks for.
dsrt::DType storedFloatDtype(const std::string &weightDtype) {
  if (weightDtype == "fp16")
    return dsrt::DType::F16;
  if (weightDtype == "bf16")
    return dsrt::DType::BF16;
  return dsrt::DType::F32;
}

// Linear biases are stored f32 whatever --dtype and the export's dtype: they are n values
// beside n x k, the prefill GEMM adds them in cuBLASLt's epilogue only in its f32 product's
// type (cublasLt.h: a bias has D's type), and the sum is not rounded twice.
// So is a row-parallel linear's (tp-shard adds it once, after the all-reduce of the ranks'
// partial products): stored otherwise, a plan at TP N would round a bias that TP 1 keeps.
bool rowParallelBias(OpOperand &use) {
  auto add = dyn_cast<plan::ExecOp>(use.getOwner());
  if (!add || add.getOp() != "Add" || add->getNumOperands() != 2)
    return false;
  auto reduce = add->getOperand(1 - use.getOperandNumber()).getDefiningOp<plan::ExecOp>();
  if (!reduce || reduce.getOp() != "tfm.all_reduce" || reduce->getNumOperands() != 1)
    return false;
  auto linear = reduce->getOperand(0).getDefiningOp<plan::ExecOp>();
  return linear && linear.getOp() == "tfm.linear";
}

bool onlyLinearBias(Value weight) {
  if (weight.use_empty())
    return false;
  for (OpOperand &use : weight.getUses()) {
    auto exec = dyn_cast<plan::ExecOp>(use.getOwner());
    if (!exec || ((exec.getOp() != "tfm.linear" || use.getOperandNumber() != 2) &&
                  !rowParallelBias(use)))
      return false;
  }
  return true;
}

FailureOr<std::vector<WeightTransform>> transformsOf(plan::WeightTensorOp op, int rank,
                                                     dsrt::DType resultDtype,
                                                     const std::string &weightDtype,
                                                     bool linearBias) {
  std::vector<WeightTransform> transforms;
  if (auto list = op.getTransforms()) {
    for (auto transform : list->getAsRange<DictionaryAttr>()) {
      llvm::StringRef kind = transform.getAs<StringAttr>("kind").getValue();
      if (kind == "transpose") {
        std::vector<int64_t> perm;
        for (Attribute p : transform.getAs<ArrayAttr>("perm"))
          perm.push_back(cast<IntegerAttr>(p).getInt());
        transforms.push_back(WeightTransform::transpose(std::move(perm)));
      } else if (kind == "slice") {
        auto groups = transform.getAs<IntegerAttr>("groups");
        transforms.push_back(WeightTransform::slice(transform.getAs<IntegerAttr>("axis").getInt(),
                                                    transform.getAs<IntegerAttr>("offset").getInt(),
                                                    transform.getAs<IntegerAttr>("size").getInt(),
                                                    groups ? groups.getInt() : 1));
      } else if (kind == "shard") {
        auto sizes = transform.getAs<ArrayAttr>("sizes");
        if (rank >= static_cast<int>(sizes.size()))
          return op.emitOpError() << "has a shard of " << sizes.size() << " ranks for rank "
                                  << rank;
        auto offsets = transform.getAs<ArrayAttr>("offsets");
        transforms.push_back(
            WeightTransform::slice(transform.getAs<IntegerAttr>("axis").getInt(),
                                   cast<IntegerAttr>(offsets[rank]).getInt(),
                                   cast<IntegerAttr>(sizes[rank]).getInt(),
                                   transform.getAs<IntegerAttr>("groups").getInt()));
      } else if (kind == "quantize_int8") {
        // Scales are stored like every other float weight of the plan; the int8 values are
        // chosen for the scales as stored.
        transforms.push_back(WeightTransform::quantizeInt8(
            transform.getAs<IntegerAttr>("group_size").getInt(), storedFloatDtype(weightDtype)));
      } else if (kind == "scale") {
        transforms.push_back(
            WeightTransform::scale(transform.getAs<FloatAttr>("factor").getValueAsDouble()));
      } else if (kind == "quant_scales") {
        transforms.push_back(
            WeightTransform::quantScales(transform.getAs<IntegerAttr>("group_size").getInt()));
      } else if (kind == "quantize_int4") {
        transforms.push_back(WeightTransform::quantizeInt4(
            transform.getAs<IntegerAttr>("group_size").getInt(), storedFloatDtype(weightDtype)));
      } else if (kind == "quant_scales_int4") {
        transforms.push_back(WeightTransform::quantScalesInt4(
            transform.getAs<IntegerAttr>("group_size").getInt()));
      } else {
        transforms.push_back(
            WeightTransform::convert(runtimeDType(transform.getAs<TypeAttr>("to").getValue())));
      }
    }
  }
  if (resultDtype == dsrt::DType::F32 && linearBias)
    transforms.push_back(WeightTransform::convert(dsrt::DType::F32));  // widens a half export's
  else if (resultDtype == dsrt::DType::F32 && storedFloatDtype(weightDtype) != dsrt::DType::F32)
    transforms.push_back(WeightTransform::convert(storedFloatDtype(weightDtype)));
  return transforms;
}

// A MatMulNBits weight (frontends/onnx/NBitsWeights.h) whose transforms for a rank are the
// transpose to [n, k], slices along whole blocks, and int4 quantization (or its scales) at
// the weight's own block size: the plan's int4 layout is MatMulNBits' (docs/int4.md), so the
// codes and scales are written as they are, sliced, and nothing is quantized again. 4-bit
// codes with zero points likewise as int8 (code - zero point) at their block size. The
// index of the quantization, or 0 when the transforms ask for anything else.
size_t keptCodesAt(const onnx_frontend::NBitsCoding &coding,
                   const std::vector<WeightTransform> &transforms) {
  using Kind = WeightTransform::Kind;
  const bool int4 = coding.keepsCodes();
  if (!(int4 || coding.keepsInt8Codes()) || coding.rows || transforms.size() < 2 ||
      transforms[0].kind != Kind::Transpose ||
      transforms[0].perm != std::vector<int64_t>{1, 0})
    return 0;
  const int64_t block = coding.blockSize;
  int64_t width = coding.k;
  size_t at = 1;
  for (; at < transforms.size() &&
         (transforms[at].kind == Kind::Slice || transforms[at].kind == Kind::Scale);
       ++at) {
    // A constant product folded into the layer (Granite's multipliers) scales the scales.
    const WeightTransform &slice = transforms[at];
    if (slice.kind == Kind::Scale || slice.axis != 1)
      continue;
    if (slice.offset % block || slice.size % block || (width / slice.groups) % block)
      return 0;
    width = slice.size * slice.groups;
  }
  const Kind codes = int4 ? Kind::QuantizeInt4 : Kind::QuantizeInt8;
  const Kind scales = int4 ? Kind::QuantScalesInt4 : Kind::QuantScales;
  // A rank's one block per row is int8's one group per output channel (group size 0).
  if (at == transforms.size() ||
      (transforms[at].kind != codes && transforms[at].kind != scales) ||
      !(transforms[at].groupSize == block || (transforms[at].groupSize == 0 && width == block)))
    return 0;
  for (size_t rest = at + 1; rest < transforms.size(); ++rest)
    if (transforms[at].kind == codes || transforms[rest].kind != Kind::Convert)
      return 0;
  return at;
}

dsrt::Status writeKeptCodes(const onnx_frontend::NBitsCoding &coding,
                            const std::vector<WeightTransform> &transforms, size_t at,
                            uint8_t *destination) {
  std::vector<WeightTransform> slices;
  double factor = 1;
  for (size_t i = 1; i < at; ++i) {
    if (transforms[i].kind == WeightTransform::Kind::Scale)
      factor *= transforms[i].factor;
    else
      slices.push_back(transforms[i]);
  }
  if (transforms[at].kind == WeightTransform::Kind::QuantizeInt8) {
    const dsrt::Shape shape{coding.n, coding.k};
    std::vector<int8_t> codes(static_cast<size_t>(coding.n * coding.k));
    onnx_frontend::nbitsInt8Codes(coding, codes.data());
    return applyWeightTransforms(reinterpret_cast<const uint8_t *>(codes.data()),
                                 dsrt::DType::I8, shape, slices, destination);
  }
  if (transforms[at].kind == WeightTransform::Kind::QuantizeInt4) {
    const dsrt::Shape shape{coding.n, coding.k};
    std::vector<uint8_t> codes(static_cast<size_t>(coding.n * coding.k));
    onnx_frontend::unpackNBitsCodes(coding, codes.data());
    dsrt::DType dtype;
    dsrt::Shape sliced;
    DSRT_RETURN_IF_ERROR(transformedType(dsrt::DType::U8, shape, slices, dtype, sliced));
    std::vector<uint8_t> kept(static_cast<size_t>(dsrt::elementCount(sliced)));
    DSRT_RETURN_IF_ERROR(
        applyWeightTransforms(codes.data(), dsrt::DType::U8, shape, slices, kept.data()));
    // Two codes a byte, the even input in the low nibble.
    const int64_t rows = sliced[0], columns = sliced[1];
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t pair = 0; pair < columns / 2; ++pair) {
        const uint8_t *two = kept.data() + row * columns + 2 * pair;
        destination[row * (columns / 2) + pair] = static_cast<uint8_t>(two[0] | (two[1] << 4));
      }
    return dsrt::Status::ok();
  }
  // The scales [n, blocks]: a slice of inputs is a slice of blocks.
  for (WeightTransform &slice : slices)
    if (slice.axis == 1) {
      slice.offset /= coding.blockSize;
      slice.size /= coding.blockSize;
    }
  if (factor != 1)
    slices.push_back(WeightTransform::scale(factor));
  slices.insert(slices.end(), transforms.begin() + at + 1, transforms.end());
  std::vector<float> scales(static_cast<size_t>(coding.n * coding.blocks()));
  onnx_frontend::nbitsScales(coding, scales.data());
  return applyWeightTransforms(reinterpret_cast<const uint8_t *>(scales.data()), dsrt::DType::F32,
                               dsrt::Shape{coding.n, coding.blocks()}, slices, destination);
}

} // namespace

std::string weightKey(plan::WeightTensorOp op) {
  std::string key = op.getName().str();
  if (auto list = op.getTransforms()) {
    std::string printed;
    llvm::raw_string_ostream os(printed);
    list->print(os);
    key += " " + printed;
  }
  return key;
}

FailureOr<dsrt::DType> storedWeightDType(Operation *op, const onnx_frontend::WeightStore *weights,
                                         const std::string &weightDtype) {
  bool linearBias = onlyLinearBias(op->getResult(0));
  // Joined parts are stored alike (WeightShards::of checks it as it joins them).
  if (auto concat = dyn_cast<plan::WeightConcatOp>(op)) {
    if (concat.getParts().empty())
      return concat.emitOpError("joins no weights");
    op = concat.getParts().front().getDefiningOp();
  }
  auto weight = dyn_cast_or_null<plan::WeightTensorOp>(op);
  if (!weight)
    return failure();
  auto type = cast<RankedTensorType>(weight.getType());
  auto sourceType =
      weight.getSourceType() ? cast<RankedTensorType>(*weight.getSourceType()) : type;
  dsrt::DType sourceDtype = runtimeDType(sourceType);
  if (weights)
    if (const onnx_frontend::WeightRecord *record = weights->lookup(weight.getName()))
      sourceDtype = evaluate::storedWeightDType(*record, sourceDtype);
  FailureOr<std::vector<WeightTransform>> transforms =
      transformsOf(weight, /*rank=*/0, runtimeDType(type), weightDtype, linearBias);
  if (failed(transforms))
    return failure();
  dsrt::DType stored;
  dsrt::Shape storedShape;
  dsrt::Status status =
      transformedType(sourceDtype, dsrt::Shape(sourceType.getShape().begin(),
                                               sourceType.getShape().end()),
                      *transforms, stored, storedShape);
  if (!status.isOk())
    return weight.emitOpError() << "weight '" << weight.getName() << "': " << status.message();
  return stored;
}

FailureOr<std::vector<WeightShard>> WeightShards::of(plan::WeightTensorOp op) const {
  return of(op, onlyLinearBias(op.getOutput()));
}

FailureOr<std::vector<WeightShard>> WeightShards::of(plan::WeightTensorOp op,
                                                     bool linearBias) const {
  auto type = cast<RankedTensorType>(op.getType());
  const onnx_frontend::WeightRecord *record = weights_.lookup(op.getName());
  if (!record)
    return op.emitOpError() << "names weight '" << op.getName()
                            << "', which the model does not have";
  auto sourceType = op.getSourceType() ? cast<RankedTensorType>(*op.getSourceType()) : type;
  // The transforms read a widened half weight's bytes as they are (and a plan of an f16
  // model stores f16).
  dsrt::DType sourceDtype = evaluate::storedWeightDType(*record, runtimeDType(sourceType));
  dsrt::Shape sourceShape(sourceType.getShape().begin(), sourceType.getShape().end());
  uint64_t expected = static_cast<uint64_t>(sourceType.getNumElements()) *
                      dsrt::dtypeSize(sourceDtype);
  if (!record->coding && record->bytes.size() != expected)
    return op.emitOpError() << "weight '" << op.getName() << "' has " << record->bytes.size()
                            << " bytes, but its type needs " << expected;
  FailureOr<std::vector<WeightTransform>> transforms =
      transformsOf(op, /*rank=*/0, runtimeDType(type), options_.weightDtype, linearBias);
  if (failed(transforms))
    return failure();
  dsrt::DType stored;
  dsrt::Shape storedShape;
  dsrt::Status status =
      transformedType(sourceDtype, sourceShape, *transforms, stored, storedShape);
  if (!status.isOk())
    return op.emitOpError() << "weight '" << op.getName() << "': " << status.message();
  if (storedShape != dsrt::Shape(type.getShape().begin(), type.getShape().end()))
    return op.emitOpError() << "weight '" << op.getName() << "': its transforms give "
                            << dsrt::shapeString(storedShape) << ", not the result's shape";

  llvm::ArrayRef<uint8_t> bytes = record->bytes;
  const onnx_frontend::WeightStore *store = &weights_;
  // Every rank gets its own part of a sharded weight and the whole of any other.
  std::vector<WeightShard> shards;
  for (int rank = 0; rank < ranks_; ++rank) {
    FailureOr<std::vector<WeightTransform>> rankTransforms =
        transformsOf(op, rank, runtimeDType(type), options_.weightDtype, linearBias);
    if (failed(rankTransforms))
      return failure();
    WeightShard shard;
    status = transformedType(sourceDtype, sourceShape, *rankTransforms, shard.dtype,
                             shard.shape);
    if (!status.isOk())
      return op.emitOpError() << "weight '" << op.getName() << "' (rank " << rank
                              << "): " << status.message();
    // Streams from the mmapped model (or its external data) straight into the plan file.
    std::string label = quantizedWeightLabel(op, rank, ranks_);
    const bool int4 = llvm::any_of(*rankTransforms, [](const WeightTransform &t) {
      return t.kind == WeightTransform::Kind::QuantizeInt4;
    });
    shard.fill = [bytes, sourceDtype, sourceShape, transforms = *rankTransforms, store, record,
                  label, int4, shape = shard.shape, verbose = options_.verbose,
                  summary = &quantization_](uint8_t *destination) {
      llvm::scope_exit release([&] {
        store->releasePages(record->coding ? *record->coding->codes : *record);
      });
      QuantizationError error;
      std::vector<uint8_t> decoded;
      dsrt::Status status = dsrt::Status::ok();
      if (record->coding) {
        if (size_t at = keptCodesAt(*record->coding, transforms))
          return writeKeptCodes(*record->coding, transforms, at, destination);
        status = applyWeightTransforms(onnx_frontend::weightValues(*record, decoded).data(),
                                       sourceDtype, sourceShape, transforms, destination, &error);
      } else {
        status = applyWeightTransforms(bytes.data(), sourceDtype, sourceShape, transforms,
                                       destination, &error);
      }
      if (status.isOk() && error.measured) {
        ++summary->weights;
        summary->maxRelative = std::max(summary->maxRelative, error.maxRelative);
        summary->sumMeanRelative += error.meanRelative;
        if (verbose)
          llvm::errs() << llvm::format(
              "dsc: %s %s %s, %lld groups: max error %.3f%% of its group's max |w|, "
              "mean %.3f%% of |w|\n",
              int4 ? "int4" : "int8", label.c_str(), dsrt::shapeString(shape).c_str(),
              static_cast<long long>(error.groups), 100 * error.maxRelative,
              100 * error.meanRelative);
      }
      return status;
    };
    shards.push_back(std::move(shard));
  }
  return shards;
}

// Each rank's parts one after the other: [q_r; k_r; v_r].
FailureOr<std::vector<WeightShard>> WeightShards::of(plan::WeightConcatOp op) const {
  std::vector<std::vector<WeightShard>> parts;
  const bool linearBias = onlyLinearBias(op.getOutput());
  for (Value part : op.getParts()) {
    FailureOr<std::vector<WeightShard>> shards =
        of(part.getDefiningOp<plan::WeightTensorOp>(), linearBias);
    if (failed(shards))
      return failure();
    parts.push_back(std::move(*shards));
  }
  std::vector<WeightShard> joined(static_cast<size_t>(ranks_));
  std::optional<ArrayRef<int64_t>> rankParts = op.getRankParts();
  if (rankParts && static_cast<int64_t>(rankParts->size()) != 2 * ranks_)
    return op.emitOpError() << "rank_parts names " << rankParts->size() / 2 << " ranks, the plan "
                            << ranks_;
  for (int rank = 0; rank < ranks_; ++rank) {
    WeightShard &out = joined[static_cast<size_t>(rank)];
    std::vector<std::pair<uint64_t, std::function<dsrt::Status(uint8_t *)>>> fills;
    uint64_t offset = 0;
    // With rank_parts (expert parallelism), the rank's whole experts only.
    const size_t first = rankParts ? static_cast<size_t>((*rankParts)[2 * rank]) : 0;
    const size_t end = rankParts ? static_cast<size_t>((*rankParts)[2 * rank + 1]) : parts.size();
    for (size_t index = first; index < end; ++index) {
      WeightShard &part = parts[index][static_cast<size_t>(rank)];
      if (out.shape.empty()) {
        out.dtype = part.dtype;
        out.shape = part.shape;
      } else if (part.dtype != out.dtype || part.shape.size() != out.shape.size() ||
                 !std::equal(part.shape.begin() + 1, part.shape.end(), out.shape.begin() + 1)) {
        return op.emitOpError() << "rank " << rank << "'s parts differ in dtype or in a "
                                   "dimension after the first";
      } else {
        out.shape[0] += part.shape[0];
      }
      fills.emplace_back(offset, std::move(part.fill));
      offset += static_cast<uint64_t>(dsrt::elementCount(part.shape)) * dsrt::dtypeSize(part.dtype);
    }
    out.fill = [fills = std::move(fills)](uint8_t *destination) {
      for (const auto &[offset, fill] : fills)
        DSRT_RETURN_IF_ERROR(fill(destination + offset));
      return dsrt::Status::ok();
    };
  }
  return joined;
}

} // namespace dsc
