// The attributes of the tfm dialect: weight transforms, rotary embeddings, enums.
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/TypeSwitch.h" // for the generated attribute parser and printer

#include <cmath>

using namespace mlir;

#include "dialects/tfm/IR/TfmEnums.cpp.inc"

namespace dsc::tfm {

FailureOr<APFloat> parseF64Parameter(AsmParser &parser) {
  double value;
  if (parser.parseFloat(value))
    return failure();
  return APFloat(value);
}

void printF64Parameter(AsmPrinter &printer, const APFloat &value) { printer.printFloat(value); }

LogicalResult SliceAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t axis,
                                int64_t offset, int64_t size) {
  if (axis < 0)
    return emitError() << "slice axis must not be negative";
  if (offset < 0)
    return emitError() << "slice offset must not be negative";
  if (size <= 0)
    return emitError() << "slice size must be positive";
  return success();
}

LogicalResult BlocksAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t axis,
                                 int64_t groups, int64_t offset, int64_t size) {
  if (axis < 0 || groups < 1 || offset < 0 || size <= 0)
    return emitError() << "blocks needs axis >= 0, groups >= 1, offset >= 0 and size > 0";
  return success();
}

LogicalResult ShardAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t axis,
                                ArrayRef<int64_t> offsets, ArrayRef<int64_t> sizes,
                                int64_t groups) {
  if (axis < 0 || groups < 1 || sizes.empty() || offsets.size() != sizes.size())
    return emitError() << "shard needs axis >= 0, groups >= 1 and one offset and size per rank";
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] <= 0 || offsets[r] < 0)
      return emitError() << "shard sizes must be positive and offsets not negative";
    if (sizes[r] > sizes[0])
      return emitError() << "shard sizes must not exceed rank 0's, whose type the IR carries";
  }
  return success();
}

LogicalResult ScaleAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                FloatAttr factor) {
  if (!factor || !factor.getType().isF64() || !std::isfinite(factor.getValueAsDouble()) ||
      factor.getValueAsDouble() == 0)
    return emitError() << "scale needs a finite, nonzero f64 factor, not " << factor;
  return success();
}

LogicalResult ConvertAttr::verify(function_ref<InFlightDiagnostic()> emitError, Type dtype) {
  if (!isa<FloatType>(dtype))
    return emitError() << "convert needs a floating-point type, not " << dtype;
  return success();
}

LogicalResult QuantizeInt8Attr::verify(function_ref<InFlightDiagnostic()> emitError,
                                       int64_t groupSize) {
  if (groupSize < 0)
    return emitError() << "group_size must be positive, or 0 for one group per row";
  return success();
}

LogicalResult QuantScalesAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                      int64_t groupSize, Type dtype) {
  if (groupSize < 0)
    return emitError() << "group_size must be positive, or 0 for one group per row";
  if (!isa<FloatType>(dtype))
    return emitError() << "scales must have a floating-point type, not " << dtype;
  return success();
}

static LogicalResult verifyInt4GroupSize(function_ref<InFlightDiagnostic()> emitError,
                                         int64_t groupSize) {
  // Two codes share a byte, and a group never splits one.
  if (groupSize <= 0 || groupSize % 2 != 0)
    return emitError() << "int4 group_size must be positive and even, not " << groupSize;
  return success();
}

LogicalResult QuantizeInt4Attr::verify(function_ref<InFlightDiagnostic()> emitError,
                                       int64_t groupSize) {
  return verifyInt4GroupSize(emitError, groupSize);
}

LogicalResult QuantScalesInt4Attr::verify(function_ref<InFlightDiagnostic()> emitError,
                                          int64_t groupSize, Type dtype) {
  if (failed(verifyInt4GroupSize(emitError, groupSize)))
    return failure();
  if (!isa<FloatType>(dtype))
    return emitError() << "scales must have a floating-point type, not " << dtype;
  return success();
}

LogicalResult RotaryAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t dim,
                                 APFloat base, RotaryLayout layout, DenseF32ArrayAttr invFreq,
                                 FloatAttr attentionFactor) {
  if (dim <= 0 || dim % 2 != 0)
    return emitError() << "rotary dim must be positive and even, not " << dim;
  if (!base.isFiniteNonZero() || !(base.convertToDouble() > 1.0))
    return emitError() << "rotary base must be greater than 1";
  if (invFreq) {
    if (int64_t(invFreq.size()) != dim / 2)
      return emitError() << "rotary inv_freq must list dim / 2 = " << dim / 2
                         << " frequencies, not " << invFreq.size();
    for (float frequency : invFreq.asArrayRef())
      // Zero: a pair that does not turn (Gemma-4's proportional RoPE).
      if (!std::isfinite(frequency))
        return emitError() << "rotary inv_freq must be finite, not " << frequency;
  }
  if (attentionFactor) {
    double factor = attentionFactor.getValueAsDouble();
    if (!(factor > 0) || !std::isfinite(factor))
      return emitError() << "rotary attention_factor must be finite and positive, not "
                         << factor;
  }
  return success();
}

// Checks that quantize_int8 or quant_scales applies to a weight of `shape` and `element`.
static LogicalResult checkQuantizable(ArrayRef<int64_t> shape, Type element, int64_t groupSize,
                                      StringRef what, llvm::raw_ostream &error) {
  if (shape.size() != 2) {
    error << what << " needs a 2-D [out, in] weight, not rank " << shape.size();
    return failure();
  }
  if (!isa<FloatType>(element)) {
    error << what << " needs a floating-point weight, not '" << element << "'";
    return failure();
  }
  if (groupSize > 0 && shape[1] % groupSize != 0) {
    error << what << " group_size " << groupSize << " does not divide the input dimension "
          << shape[1];
    return failure();
  }
  return success();
}

// Applies one transform to (shape, element); on failure, says why on `error`.
static LogicalResult applyTransform(Attribute transform, SmallVectorImpl<int64_t> &shape,
                                    Type &element, llvm::raw_ostream &error) {
  int64_t rank = shape.size();
  if (auto transpose = dyn_cast<TransposeAttr>(transform)) {
    ArrayRef<int64_t> perm = transpose.getPerm();
    if (static_cast<int64_t>(perm.size()) != rank) {
      error << "transpose has " << perm.size() << " entries for rank " << rank;
      return failure();
    }
    llvm::SmallBitVector seen(rank);
    for (int64_t p : perm) {
      if (p < 0 || p >= rank || seen.test(p)) {
        error << "transpose perm is not a permutation";
        return failure();
      }
      seen.set(p);
    }
    SmallVector<int64_t> permuted;
    for (int64_t p : perm)
      permuted.push_back(shape[p]);
    shape.assign(permuted.begin(), permuted.end());
    return success();
  }
  if (auto slice = dyn_cast<SliceAttr>(transform)) {
    if (slice.getAxis() >= rank) {
      error << "slice axis " << slice.getAxis() << " is out of range for rank " << rank;
      return failure();
    }
    int64_t dim = shape[slice.getAxis()];
    if (slice.getOffset() + slice.getSize() > dim) {
      error << "slice [" << slice.getOffset() << ", " << slice.getOffset() + slice.getSize()
            << ") exceeds dimension " << slice.getAxis() << " of size " << dim;
      return failure();
    }
    shape[slice.getAxis()] = slice.getSize();
    return success();
  }
  if (auto blocks = dyn_cast<BlocksAttr>(transform)) {
    int64_t axis = blocks.getAxis();
    if (axis >= rank || shape[axis] % blocks.getGroups() != 0 ||
        blocks.getOffset() + blocks.getSize() > shape[axis] / blocks.getGroups()) {
      error << "blocks [" << blocks.getOffset() << ", +" << blocks.getSize() << ") of "
            << blocks.getGroups() << " do not fit dimension " << axis;
      return failure();
    }
    shape[axis] = blocks.getGroups() * blocks.getSize();
    return success();
  }
  if (auto shard = dyn_cast<ShardAttr>(transform)) {
    int64_t axis = shard.getAxis();
    if (axis >= rank || shape[axis] % shard.getGroups() != 0) {
      error << "shard of " << shard.getGroups() << " group(s) does not fit dimension " << axis;
      return failure();
    }
    int64_t block = shape[axis] / shard.getGroups();
    for (auto [offset, size] : llvm::zip(shard.getOffsets(), shard.getSizes()))
      if (offset + size > block) {
        error << "shard part [" << offset << ", +" << size << ") exceeds the block of "
              << block << " along dimension " << axis;
        return failure();
      }
    shape[axis] = shard.getGroups() * shard.getSizes()[0];
    return success();
  }
  if (isa<ScaleAttr>(transform)) {
    if (!isa<FloatType>(element)) {
      error << "scale needs a floating-point weight, not '" << element << "'";
      return failure();
    }
    return success();
  }
  if (auto convert = dyn_cast<ConvertAttr>(transform)) {
    if (!isa<FloatType>(element)) {
      error << "convert needs a floating-point weight, not '" << element << "'";
      return failure();
    }
    element = convert.getDtype();
    return success();
  }
  if (auto quantize = dyn_cast<QuantizeInt8Attr>(transform)) {
    if (failed(checkQuantizable(shape, element, quantize.getGroupSize(), "quantize_int8",
                                error)))
      return failure();
    element = IntegerType::get(transform.getContext(), 8);
    return success();
  }
  if (auto scales = dyn_cast<QuantScalesAttr>(transform)) {
    if (failed(checkQuantizable(shape, element, scales.getGroupSize(), "quant_scales", error)))
      return failure();
    shape[1] = scales.getGroupSize() == 0 ? 1 : shape[1] / scales.getGroupSize();
    element = scales.getDtype();
    return success();
  }
  if (auto quantize = dyn_cast<QuantizeInt4Attr>(transform)) {
    if (failed(checkQuantizable(shape, element, quantize.getGroupSize(), "quantize_int4",
                                error)))
      return failure();
    element = IntegerType::get(transform.getContext(), 4, IntegerType::Unsigned);
    return success();
  }
  if (auto scales = dyn_cast<QuantScalesInt4Attr>(transform)) {
    if (failed(checkQuantizable(shape, element, scales.getGroupSize(), "quant_scales_int4",
                                error)))
      return failure();
    shape[1] /= scales.getGroupSize();
    element = scales.getDtype();
    return success();
  }
  error << transform << " is not a weight transform";
  return failure();
}

FailureOr<RankedTensorType> inferWeightType(RankedTensorType source,
                                            ArrayRef<Attribute> transforms,
                                            function_ref<InFlightDiagnostic()> emitError) {
  SmallVector<int64_t> shape(source.getShape());
  Type element = source.getElementType();
  for (auto [index, transform] : llvm::enumerate(transforms)) {
    std::string message;
    llvm::raw_string_ostream error(message);
    error << "transform #" << index << ": ";
    if (failed(applyTransform(transform, shape, element, error))) {
      if (emitError)
        emitError() << message;
      return failure();
    }
  }
  return RankedTensorType::get(shape, element);
}

} // namespace dsc::tfm

#define GET_ATTRDEF_CLASSES
#include "dialects/tfm/IR/TfmAttrs.cpp.inc"

void dsc::tfm::TfmDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/tfm/IR/TfmAttrs.cpp.inc"
      >();
}
