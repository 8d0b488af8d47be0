// MLIR attributes and types as the runtime's attributes, dtypes and tensors.
#include "compiler/evaluate/Evaluator.h"

#include "frontends/onnx/WeightStore.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/Support/raw_ostream.h"

#include <cstring>

namespace dsc::evaluate {

using dsrt::DType;
using dsrt::Status;
using dsrt::ops::Attr;

DType toDType(mlir::Type type) {
  if (type.isF32()) return DType::F32;
  if (type.isF16()) return DType::F16;
  if (type.isBF16()) return DType::BF16;
  if (type.isF64()) return DType::F64;
  auto integer = mlir::dyn_cast<mlir::IntegerType>(type);
  if (!integer)
    return DType::Undefined;
  unsigned width = integer.getWidth();
  if (width == 1)
    return DType::Bool;
  if (integer.isUnsigned()) {
    switch (width) {
    case 8: return DType::U8;
    case 16: return DType::U16;
    case 32: return DType::U32;
    case 64: return DType::U64;
    default: return DType::Undefined;
    }
  }
  switch (width) {
  case 8: return DType::I8;
  case 16: return DType::I16;
  case 32: return DType::I32;
  case 64: return DType::I64;
  default: return DType::Undefined;
  }
}

DType storedWeightDType(const onnx_frontend::WeightRecord &record, DType declared) {
  if (declared != DType::F32)
    return declared;
  constexpr int32_t onnxFloat16 = 10, onnxBfloat16 = 16;  // onnx::TensorProto::DataType
  if (record.onnxType == onnxFloat16)
    return DType::F16;
  if (record.onnxType == onnxBfloat16)
    return DType::BF16;
  return declared;
}

std::string describeLocation(mlir::Location loc) {
  if (auto name = mlir::dyn_cast<mlir::NameLoc>(loc))
    return "'" + name.getName().str() + "'";
  if (auto fused = mlir::dyn_cast<mlir::FusedLoc>(loc))
    for (mlir::Location inner : fused.getLocations())
      if (mlir::isa<mlir::NameLoc>(inner))
        return describeLocation(inner);
  std::string text;
  llvm::raw_string_ostream stream(text);
  stream << loc;
  return text;
}

Status toTensor(mlir::ElementsAttr attr, dsrt::OwnedTensor &out) {
  auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(attr);
  if (!dense)
    return Status::error("only dense elements attributes can be evaluated");
  auto type = mlir::cast<mlir::ShapedType>(dense.getType());
  DType dtype = toDType(type.getElementType());
  if (dtype == DType::Undefined || !type.hasStaticShape())
    return Status::error("elements attribute of unsupported type");
  out = dsrt::OwnedTensor(dtype, dsrt::Shape(type.getShape().begin(), type.getShape().end()));
  if (dtype == DType::Bool) {
    // MLIR packs i1 its own way; read element by element.
    size_t i = 0;
    for (bool value : dense.getValues<bool>())
      out.storage[i++] = value ? 1 : 0;
    return Status::ok();
  }
  llvm::ArrayRef<char> raw = dense.getRawData();
  size_t elementSize = dsrt::dtypeSize(dtype);
  if (dense.isSplat()) {
    if (raw.size() < elementSize)
      return Status::error("malformed splat elements attribute");
    for (size_t at = 0; at < out.storage.size(); at += elementSize)
      std::memcpy(out.storage.data() + at, raw.data(), elementSize);
    return Status::ok();
  }
  if (raw.size() != out.storage.size())
    return Status::error("elements attribute holds " + std::to_string(raw.size()) +
                         " bytes, its type needs " + std::to_string(out.storage.size()));
  if (!raw.empty())
    std::memcpy(out.storage.data(), raw.data(), raw.size());
  return Status::ok();
}

static Status convertAttribute(mlir::Attribute attr, Attr &out) {
  if (auto integer = mlir::dyn_cast<mlir::IntegerAttr>(attr)) {
    // i1 (BoolAttr) reads as 0 or 1, not as a sign-extended -1.
    bool isUnsigned = integer.getType().isUnsignedInteger() || integer.getType().isInteger(1);
    const llvm::APInt &value = integer.getValue();
    if (value.getBitWidth() > 64)
      return Status::error("integer attribute wider than 64 bits");
    out = Attr::ofInt(isUnsigned ? static_cast<int64_t>(value.getZExtValue())
                                 : value.getSExtValue());
    return Status::ok();
  }
  if (auto real = mlir::dyn_cast<mlir::FloatAttr>(attr)) {
    out = Attr::ofFloat(static_cast<float>(real.getValueAsDouble()));
    return Status::ok();
  }
  if (auto string = mlir::dyn_cast<mlir::StringAttr>(attr)) {
    out = Attr::ofString(string.str());
    return Status::ok();
  }
  if (auto type = mlir::dyn_cast<mlir::TypeAttr>(attr)) {
    DType dtype = toDType(type.getValue());
    if (dtype == DType::Undefined)
      return Status::error("type attribute of a type the runtime does not support");
    out = Attr::ofType(dtype);
    return Status::ok();
  }
  if (auto elements = mlir::dyn_cast<mlir::ElementsAttr>(attr)) {
    dsrt::OwnedTensor tensor;
    DSRT_RETURN_IF_ERROR(toTensor(elements, tensor));
    out = Attr::ofTensor(std::move(tensor));
    return Status::ok();
  }
  if (auto array = mlir::dyn_cast<mlir::ArrayAttr>(attr)) {
    std::vector<int64_t> ints;
    std::vector<float> floats;
    for (mlir::Attribute element : array) {
      if (auto integer = mlir::dyn_cast<mlir::IntegerAttr>(element))
        ints.push_back(integer.getValue().getSExtValue());
      else if (auto real = mlir::dyn_cast<mlir::FloatAttr>(element))
        floats.push_back(static_cast<float>(real.getValueAsDouble()));
      else
        return Status::error("array attribute with elements other than numbers");
    }
    if (!ints.empty() && !floats.empty())
      return Status::error("array attribute mixes integers and floats");
    out = floats.empty() ? Attr::ofInts(std::move(ints)) : Attr::ofFloats(std::move(floats));
    return Status::ok();
  }
  return Status::error("attribute of a kind the kernels do not take");
}

// The inherent attributes of a registered op, all attributes of an unregistered one.
static llvm::SmallVector<mlir::NamedAttribute> attributesOf(mlir::Operation *op) {
  llvm::SmallVector<mlir::NamedAttribute> attrs;
  if (auto info = op->getRegisteredInfo()) {
    for (mlir::StringAttr name : info->getAttributeNames())
      if (std::optional<mlir::Attribute> value = op->getInherentAttr(name.getValue()))
        if (*value)
          attrs.emplace_back(name, *value);
    return attrs;
  }
  attrs.assign(op->getAttrs().begin(), op->getAttrs().end());
  return attrs;
}

Status convertAttributes(mlir::Operation *op, dsrt::ops::AttrMap &out) {
  out.clear();
  for (const mlir::NamedAttribute &named : attributesOf(op)) {
    Attr attr;
    Status status = convertAttribute(named.getValue(), attr);
    if (!status.isOk())
      return Status::error("attribute '" + named.getName().str() + "': " + status.message());
    out.emplace(named.getName().str(), std::move(attr));
  }
  return Status::ok();
}

dsrt::ops::AttrMap toAttrMap(mlir::Operation *op) {
  dsrt::ops::AttrMap out;
  for (const mlir::NamedAttribute &named : attributesOf(op)) {
    Attr attr;
    if (convertAttribute(named.getValue(), attr).isOk())
      out.emplace(named.getName().str(), std::move(attr));
  }
  return out;
}

} // namespace dsc::evaluate
