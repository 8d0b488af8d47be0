#include "io/TensorProto.h"

#include <cstring>
#include <fstream>
#include <sstream>

namespace dsrt::io {
namespace {

enum Field : uint32_t {
  kDims = 1, kDataType = 2, kSegment = 3, kFloatData = 4, kInt32Data = 5, kStringData = 6,
  kInt64Data = 7, kName = 8, kRawData = 9, kDoubleData = 10, kUint64Data = 11,
  kExternalData = 13, kDataLocation = 14,
};

class Reader {
public:
  explicit Reader(const std::string &bytes)
      : at_(reinterpret_cast<const uint8_t *>(bytes.data())), end_(at_ + bytes.size()) {}
  Reader(const uint8_t *begin, const uint8_t *end) : at_(begin), end_(end) {}

  bool done() const { return at_ >= end_; }

  bool varint(uint64_t &value) {
    value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= end_)
        return false;
      uint8_t byte = *at_++;
      value |= uint64_t(byte & 0x7f) << shift;
      if (!(byte & 0x80))
        return true;
    }
    return false;
  }
  bool fixed(void *out, size_t size) {
    if (static_cast<size_t>(end_ - at_) < size)
      return false;
    std::memcpy(out, at_, size);
    at_ += size;
    return true;
  }
  bool bytes(const uint8_t *&begin, size_t &size) {
    uint64_t length;
    if (!varint(length) || length > static_cast<uint64_t>(end_ - at_))
      return false;
    begin = at_;
    size = static_cast<size_t>(length);
    at_ += size;
    return true;
  }
  bool skip(uint32_t wireType) {
    uint64_t ignored;
    const uint8_t *begin;
    size_t size;
    switch (wireType) {
    case 0: return varint(ignored);
    case 1: return fixed(&ignored, 8);
    case 2: return bytes(begin, size);
    case 5: return fixed(&ignored, 4);
    default: return false;
    }
  }

private:
  const uint8_t *at_, *end_;
};

// A repeated numeric field, packed (wire type 2) or one element at a time.
template <typename T, bool IsVarint>
bool readRepeated(Reader &reader, uint32_t wireType, std::vector<T> &out) {
  auto one = [&](Reader &r) -> bool {
    if constexpr (IsVarint) {
      uint64_t v;
      if (!r.varint(v))
        return false;
      out.push_back(static_cast<T>(v));
    } else {
      T v;
      if (!r.fixed(&v, sizeof v))
        return false;
      out.push_back(v);
    }
    return true;
  };
  if (wireType != 2)
    return one(reader);
  const uint8_t *begin;
  size_t size;
  if (!reader.bytes(begin, size))
    return false;
  Reader packed(begin, begin + size);
  while (!packed.done())
    if (!one(packed))
      return false;
  return true;
}

} // namespace

DType dtypeFromOnnx(int32_t onnxType) {
  switch (onnxType) {
  case 1: return DType::F32;
  case 2: return DType::U8;
  case 3: return DType::I8;
  case 4: return DType::U16;
  case 5: return DType::I16;
  case 6: return DType::I32;
  case 7: return DType::I64;
  case 9: return DType::Bool;
  case 10: return DType::F16;
  case 11: return DType::F64;
  case 12: return DType::U32;
  case 13: return DType::U64;
  case 16: return DType::BF16;
  default: return DType::Undefined;
  }
}

int32_t onnxFromDtype(DType dtype) {
  for (int32_t onnxType = 1; onnxType <= 16; ++onnxType)
    if (dtypeFromOnnx(onnxType) == dtype && dtype != DType::Undefined)
      return onnxType;
  return 0;
}

Status parseTensorProto(const std::string &bytes, NamedTensor &out) {
  Reader reader(bytes);
  std::vector<int64_t> dims, int64s;
  std::vector<int32_t> int32s;
  std::vector<float> floats;
  std::vector<double> doubles;
  std::vector<uint64_t> uint64s;
  int32_t dataType = 0;
  const uint8_t *raw = nullptr;
  size_t rawSize = 0;
  bool hasRaw = false;
  while (!reader.done()) {
    uint64_t key;
    if (!reader.varint(key))
      return Status::error("TensorProto: truncated field key");
    uint32_t field = static_cast<uint32_t>(key >> 3), wire = key & 7;
    bool ok = true;
    const uint8_t *begin;
    size_t size;
    uint64_t value;
    switch (field) {
    case kDims: ok = readRepeated<int64_t, true>(reader, wire, dims); break;
    case kDataType:
      ok = wire == 0 && reader.varint(value);
      dataType = static_cast<int32_t>(value);
      break;
    case kFloatData: ok = readRepeated<float, false>(reader, wire, floats); break;
    case kInt32Data: ok = readRepeated<int32_t, true>(reader, wire, int32s); break;
    case kInt64Data: ok = readRepeated<int64_t, true>(reader, wire, int64s); break;
    case kDoubleData: ok = readRepeated<double, false>(reader, wire, doubles); break;
    case kUint64Data: ok = readRepeated<uint64_t, true>(reader, wire, uint64s); break;
    case kName:
      ok = wire == 2 && reader.bytes(begin, size);
      if (ok)
        out.name.assign(reinterpret_cast<const char *>(begin), size);
      break;
    case kRawData:
      ok = wire == 2 && reader.bytes(raw, rawSize);
      hasRaw = ok;
      break;
    case kSegment: case kStringData: case kExternalData:
      return Status::error("TensorProto: segments, strings and external data are not supported");
    case kDataLocation:
      ok = wire == 0 && reader.varint(value);
      if (ok && value != 0)
        return Status::error("TensorProto: external data is not supported");
      break;
    default: ok = reader.skip(wire); break;
    }
    if (!ok)
      return Status::error("TensorProto: field " + std::to_string(field) + " is malformed");
  }

  DType dtype = dtypeFromOnnx(dataType);
  if (dtype == DType::Undefined)
    return Status::error("TensorProto '" + out.name + "': data type " +
                         std::to_string(dataType) + " is not supported");
  int64_t count = elementCount(dims);
  if (count < 0)
    return Status::error("TensorProto '" + out.name + "': invalid dims " + shapeString(dims));
  size_t elementSize = dtypeSize(dtype);
  if (hasRaw && rawSize != static_cast<uint64_t>(count) * elementSize)
    return Status::error("TensorProto '" + out.name + "': raw_data has " +
                         std::to_string(rawSize) + " bytes for " + std::to_string(count) +
                         " elements of " + dtypeName(dtype));
  if (!hasRaw && count > static_cast<int64_t>(bytes.size()))
    return Status::error("TensorProto '" + out.name + "': too few values for " +
                         shapeString(dims));
  out.tensor = OwnedTensor(dtype, dims);
  uint8_t *data = out.tensor.storage.data();
  if (hasRaw) {
    if (rawSize)
      std::memcpy(data, raw, rawSize);
    return Status::ok();
  }
  auto copyTyped = [&](const auto &values) -> Status {
    if (static_cast<int64_t>(values.size()) != count)
      return Status::error("TensorProto '" + out.name + "': " + std::to_string(values.size()) +
                           " values for " + std::to_string(count) + " elements");
    for (size_t i = 0; i < values.size(); ++i) {
      uint64_t bits = 0;
      auto v = values[i];
      std::memcpy(&bits, &v, std::min(sizeof v, sizeof bits));
      std::memcpy(data + i * elementSize, &bits, elementSize);  // little-endian low bytes
    }
    return Status::ok();
  };
  switch (dtype) {
  case DType::F32: return copyTyped(floats);
  case DType::F64: return copyTyped(doubles);
  case DType::I64: return copyTyped(int64s);
  case DType::U32: case DType::U64: return copyTyped(uint64s);
  default: return copyTyped(int32s);  // 8/16/32-bit ints, bool, f16 and bf16 bit patterns
  }
}

Status readTensorProto(const std::string &path, NamedTensor &out) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return Status::error(path + ": cannot be opened");
  std::stringstream contents;
  contents << file.rdbuf();
  Status status = parseTensorProto(contents.str(), out);
  return status.isOk() ? status : Status::error(path + ": " + status.message());
}

namespace {
void putVarint(std::string &out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void putKey(std::string &out, uint32_t field, uint32_t wire) { putVarint(out, field << 3 | wire); }
} // namespace

std::string serializeTensorProto(const std::string &name, const TensorRef &tensor) {
  std::string out;
  for (int64_t dim : tensor.shape) {
    putKey(out, kDims, 0);
    putVarint(out, static_cast<uint64_t>(dim));
  }
  putKey(out, kDataType, 0);
  putVarint(out, static_cast<uint64_t>(onnxFromDtype(tensor.dtype)));
  putKey(out, kName, 2);
  putVarint(out, name.size());
  out += name;
  putKey(out, kRawData, 2);
  putVarint(out, tensor.bytes());
  out.append(static_cast<const char *>(tensor.data), tensor.bytes());
  return out;
}

Status writeTensorProto(const std::string &path, const std::string &name,
                        const TensorRef &tensor) {
  std::ofstream file(path, std::ios::binary);
  std::string bytes = serializeTensorProto(name, tensor);
  if (!file.write(bytes.data(), bytes.size()))
    return Status::error(path + ": cannot be written");
  return Status::ok();
}

} // namespace dsrt::io
