#include "compiler/lowering/RuntimeTypes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;

namespace dsc {

dsrt::DType runtimeDType(Type type) {
  type = getElementTypeOrSelf(type);
  if (type.isF32()) return dsrt::DType::F32;
  if (type.isF16()) return dsrt::DType::F16;
  if (type.isBF16()) return dsrt::DType::BF16;
  if (type.isF64()) return dsrt::DType::F64;
  if (auto integer = dyn_cast<IntegerType>(type)) {
    bool isUnsigned = integer.isUnsigned();
    switch (integer.getWidth()) {
    case 1: return dsrt::DType::Bool;
    case 8: return isUnsigned ? dsrt::DType::U8 : dsrt::DType::I8;
    case 16: return isUnsigned ? dsrt::DType::U16 : dsrt::DType::I16;
    case 32: return isUnsigned ? dsrt::DType::U32 : dsrt::DType::I32;
    case 64: return isUnsigned ? dsrt::DType::U64 : dsrt::DType::I64;
    }
  }
  return dsrt::DType::Undefined;
}

dsrt::OwnedTensor tensorFromAttr(DenseElementsAttr value) {
  auto type = cast<RankedTensorType>(value.getType());
  dsrt::OwnedTensor tensor(runtimeDType(type), dsrt::Shape(type.getShape().begin(),
                                                           type.getShape().end()));
  size_t width = dsrt::dtypeSize(tensor.dtype);
  uint8_t *out = tensor.storage.data();
  auto put = [&](const APInt &bits) {
    for (size_t i = 0; i < width; ++i)
      *out++ = static_cast<uint8_t>(bits.getBitWidth() == 1 ? (i == 0 ? bits.getZExtValue() : 0)
                                                            : bits.extractBitsAsZExtValue(8, 8 * i));
  };
  if (isa<FloatType>(value.getElementType()))
    for (APFloat v : value.getValues<APFloat>())
      put(v.bitcastToAPInt());
  else
    for (APInt v : value.getValues<APInt>())
      put(v);
  return tensor;
}

FailureOr<dsrt::ops::AttrMap> kernelAttributes(Operation *op) {
  dsrt::ops::AttrMap attrs;
  for (StringAttr name : op->getName().getRegisteredInfo()->getAttributeNames()) {
    std::optional<Attribute> inherent = op->getInherentAttr(name);
    if (!inherent || !*inherent)
      continue;
    Attribute value = *inherent;
    dsrt::ops::Attr attr;
    if (auto integer = dyn_cast<IntegerAttr>(value)) {
      // A 1-bit attribute is a bool (0 or 1), not a signed -1.
      const APInt &bits = integer.getValue();
      attr = dsrt::ops::Attr::ofInt(bits.getBitWidth() == 1 ? bits.getZExtValue()
                                                            : bits.getSExtValue());
    } else if (auto real = dyn_cast<FloatAttr>(value)) {
      attr = dsrt::ops::Attr::ofFloat(static_cast<float>(real.getValueAsDouble()));
    } else if (auto text = dyn_cast<StringAttr>(value)) {
      attr = dsrt::ops::Attr::ofString(text.str());
    } else if (auto type = dyn_cast<TypeAttr>(value)) {
      attr = dsrt::ops::Attr::ofType(runtimeDType(type.getValue()));
    } else if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
      attr = dsrt::ops::Attr::ofTensor(tensorFromAttr(dense));
    } else if (auto array = dyn_cast<ArrayAttr>(value)) {
      if (!array.empty() && isa<FloatAttr>(array[0])) {
        std::vector<float> floats;
        for (Attribute element : array)
          floats.push_back(static_cast<float>(cast<FloatAttr>(element).getValueAsDouble()));
        attr = dsrt::ops::Attr::ofFloats(std::move(floats));
      } else {
        std::vector<int64_t> ints;
        for (Attribute element : array)
          ints.push_back(cast<IntegerAttr>(element).getValue().getSExtValue());
        attr = dsrt::ops::Attr::ofInts(std::move(ints));
      }
    } else {
      return op->emitOpError() << "attribute '" << name.str() << "' has no kernel form";
    }
    attrs[name.str()] = std::move(attr);
  }
  return attrs;
}

Type mlirElementType(MLIRContext *context, dsrt::DType dtype) {
  Builder b(context);
  switch (dtype) {
  case dsrt::DType::F32: return b.getF32Type();
  case dsrt::DType::F16: return b.getF16Type();
  case dsrt::DType::BF16: return b.getBF16Type();
  case dsrt::DType::F64: return b.getF64Type();
  case dsrt::DType::I64: return b.getI64Type();
  case dsrt::DType::I32: return b.getI32Type();
  case dsrt::DType::I16: return b.getI16Type();
  case dsrt::DType::I8: return b.getI8Type();
  case dsrt::DType::Bool: return b.getI1Type();
  case dsrt::DType::U8: return b.getIntegerType(8, false);
  case dsrt::DType::U16: return b.getIntegerType(16, false);
  case dsrt::DType::U32: return b.getIntegerType(32, false);
  case dsrt::DType::U64: return b.getIntegerType(64, false);
  default: return nullptr;
  }
}

DenseElementsAttr attrFromTensor(MLIRContext *context, const dsrt::OwnedTensor &tensor) {
  auto type = RankedTensorType::get(tensor.shape, mlirElementType(context, tensor.dtype));
  if (tensor.dtype == dsrt::DType::Bool) {
    SmallVector<bool> values(tensor.storage.begin(), tensor.storage.end());
    return DenseElementsAttr::get(type, ArrayRef<bool>(values));
  }
  return DenseElementsAttr::getFromRawBuffer(
      type, ArrayRef<char>(reinterpret_cast<const char *>(tensor.storage.data()),
                           tensor.storage.size()));
}

} // namespace dsc
