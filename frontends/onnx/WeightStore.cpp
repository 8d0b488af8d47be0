#include "frontends/onnx/WeightStore.h"

#include "frontends/onnx/TensorConversion.h"

#include "core/Tensor.h"

#include "onnx/onnx_pb.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cstring>
#include <map>

#include <sys/mman.h>
#include <unistd.h>

namespace dsc::onnx_frontend {

using ::onnx::TensorProto;

size_t onnxElementSize(int32_t onnxType) {
  switch (onnxType) {
  case TensorProto::FLOAT: case TensorProto::INT32: case TensorProto::UINT32: return 4;
  case TensorProto::UINT8: case TensorProto::INT8: case TensorProto::BOOL: return 1;
  case TensorProto::UINT16: case TensorProto::INT16: case TensorProto::FLOAT16:
  case TensorProto::BFLOAT16: return 2;
  case TensorProto::INT64: case TensorProto::UINT64: case TensorProto::DOUBLE: return 8;
  default: return 0;
  }
}

bool isFourBitIntegerType(int32_t onnxType) {
  return onnxType == kOnnxUInt4 || onnxType == kOnnxInt4;
}

uint64_t onnxStorageBytes(int32_t onnxType, int64_t count) {
  if (isFourBitIntegerType(onnxType))
    return (static_cast<uint64_t>(count) + 1) / 2;  // two to a byte, the first low
  return static_cast<uint64_t>(count) * onnxElementSize(onnxType);
}

int64_t checkedElementCount(llvm::ArrayRef<int64_t> dims) {
  constexpr int64_t kLimit = int64_t(1) << 48;
  int64_t count = 1;
  for (int64_t dim : dims) {
    if (dim < 0)
      return -1;
    if (dim != 0 && count > kLimit / dim)
      return -1;
    count *= dim;
  }
  return count;
}

WeightStore::WeightStore(std::string modelDirectory)
    : modelDirectory_(std::move(modelDirectory)) {}
WeightStore::~WeightStore() = default;

void WeightStore::adoptModel(std::unique_ptr<::onnx::ModelProto> model) {
  models_.push_back(std::move(model));
}

void WeightStore::releasePages(const WeightRecord &record) const {
  const char *begin = reinterpret_cast<const char *>(record.bytes.data());
  const char *end = begin + record.bytes.size();
  for (auto [mapBegin, mapEnd] : mappedRanges_) {
    if (begin < mapBegin || end > mapEnd)
      continue;
    // Only whole pages inside the record: its neighbours may still be needed.
    uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
    uintptr_t last = reinterpret_cast<uintptr_t>(end) / page * page;
    if (last > first)
      madvise(reinterpret_cast<void *>(first), last - first, MADV_DONTNEED);
    return;
  }
}

const WeightRecord *WeightStore::lookup(llvm::StringRef name) const {
  auto it = records_.find(name);
  return it == records_.end() ? nullptr : &it->second;
}

const WeightRecord *WeightStore::addOwned(const std::string &name, int32_t onnxType,
                                          std::vector<int64_t> dims,
                                          std::vector<uint8_t> bytes, std::string &error) {
  if (records_.count(name)) {
    error = "weight '" + name + "' already exists";
    return nullptr;
  }
  // Readers size their reads by the dims: bytes that hold less would be read past.
  const int64_t count = checkedElementCount(dims);
  if (count < 0 || bytes.size() != onnxStorageBytes(onnxType, count)) {
    error = "weight '" + name + "' has " + std::to_string(bytes.size()) +
            " bytes, which its type and shape do not hold";
    return nullptr;
  }
  ownedBytes_.push_back(std::make_unique<std::vector<uint8_t>>(std::move(bytes)));
  WeightRecord record;
  record.name = name;
  record.onnxType = onnxType;
  record.dims = std::move(dims);
  record.bytes = llvm::ArrayRef<uint8_t>(*ownedBytes_.back());
  records_[name] = std::move(record);
  return &records_.find(name)->second;
}

const WeightRecord *WeightStore::addView(const std::string &name, const WeightRecord &parent,
                                         uint64_t byteOffset, std::vector<int64_t> dims,
                                         std::string &error) {
  if (records_.count(name)) {
    error = "weight '" + name + "' already exists";
    return nullptr;
  }
  const int64_t count = checkedElementCount(dims);
  const uint64_t size = count < 0 ? 0 : onnxStorageBytes(parent.onnxType, count);
  if (count < 0 || parent.coding || byteOffset > parent.bytes.size() ||
      size > parent.bytes.size() - byteOffset) {
    error = "weight '" + name + "' does not lie inside '" + parent.name + "'";
    return nullptr;
  }
  WeightRecord record;
  record.name = name;
  record.onnxType = parent.onnxType;
  record.dims = std::move(dims);
  record.bytes = parent.bytes.slice(byteOffset, size);
  record.externalFile = parent.externalFile;
  record.externalOffset = parent.externalFile.empty() ? 0 : parent.externalOffset + byteOffset;
  records_[name] = std::move(record);
  return &records_.find(name)->second;
}

bool WeightStore::addNBitsWeight(const std::string &name, NBitsCoding coding,
                                 int32_t floatType, std::string &error) {
  if (records_.count(name)) {
    error = "weight '" + name + "' already exists";
    return false;
  }
  WeightRecord record;
  record.name = name;
  record.onnxType = floatType;
  record.dims = coding.rows ? std::vector<int64_t>{coding.n, coding.k}
                            : std::vector<int64_t>{coding.k, coding.n};
  record.coding = std::make_shared<const NBitsCoding>(coding);
  records_[name] = std::move(record);
  return true;
}

NBitsSummary WeightStore::nbitsSummary() const {
  NBitsSummary summary;
  for (const auto &entry : records_) {
    const NBitsCoding *coding = entry.second.coding.get();
    if (!coding)
      continue;
    summary.bits = summary.weights == 0 || summary.bits == coding->bits ? coding->bits : 0;
    summary.blockSize =
        summary.weights == 0 || summary.blockSize == coding->blockSize ? coding->blockSize : 0;
    ++summary.weights;
  }
  return summary;
}

std::vector<const WeightRecord *> WeightStore::nbitsWeights() const {
  std::vector<const WeightRecord *> coded;
  for (const auto &entry : records_)
    if (entry.second.coding)
      coded.push_back(&entry.second);
  return coded;
}

llvm::ArrayRef<uint8_t> weightValues(const WeightRecord &record, std::vector<uint8_t> &storage) {
  if (!record.coding)
    return record.bytes;
  const NBitsCoding &coding = *record.coding;
  std::vector<float> values(static_cast<size_t>(coding.k * coding.n));
  dequantizeNBits(coding, values.data());
  dsrt::DType type = record.onnxType == TensorProto::FLOAT16    ? dsrt::DType::F16
                     : record.onnxType == TensorProto::BFLOAT16 ? dsrt::DType::BF16
                                                                : dsrt::DType::F32;
  storage.resize(values.size() * dsrt::dtypeSize(type));
  dsrt::convertFloats(dsrt::DType::F32, values.data(), type, storage.data(),
                      static_cast<int64_t>(values.size()));
  return storage;
}

int32_t WeightStore::dominantFloatType() const {
  std::map<int32_t, uint64_t> bytes;
  for (const auto &entry : records_) {
    int32_t type = entry.second.onnxType;
    if (type == ::onnx::TensorProto::FLOAT || type == ::onnx::TensorProto::FLOAT16 ||
        type == ::onnx::TensorProto::BFLOAT16 || type == ::onnx::TensorProto::DOUBLE)
      bytes[type] += entry.second.bytes.size();
  }
  int32_t dominant = 0;
  uint64_t most = 0;
  for (const auto &[type, count] : bytes)
    if (count > most) {
      dominant = type;
      most = count;
    }
  return dominant;
}

// Copies ONNX's typed-field storage into the raw little-endian layout.
template <typename Field>
static void appendTyped(const Field &values, size_t elementSize, std::vector<uint8_t> &out) {
  for (auto value : values) {
    uint8_t bytes[8] = {};
    if (elementSize == sizeof(value)) {
      std::memcpy(bytes, &value, elementSize);
    } else {
      // int32_data carries 8- and 16-bit types (and f16/bf16 bit patterns) in its low bits.
      uint64_t bits = static_cast<uint64_t>(value);
      std::memcpy(bytes, &bits, elementSize);
    }
    out.insert(out.end(), bytes, bytes + elementSize);
  }
}

static size_t typedFieldCount(const TensorProto &tensor, std::vector<uint8_t> &out,
                              size_t elementSize) {
  switch (tensor.data_type()) {
  case TensorProto::FLOAT:
    appendTyped(tensor.float_data(), elementSize, out);
    return tensor.float_data_size();
  case TensorProto::INT64:
    appendTyped(tensor.int64_data(), elementSize, out);
    return tensor.int64_data_size();
  case TensorProto::DOUBLE:
    appendTyped(tensor.double_data(), elementSize, out);
    return tensor.double_data_size();
  case TensorProto::UINT32: case TensorProto::UINT64:
    appendTyped(tensor.uint64_data(), elementSize, out);
    return tensor.uint64_data_size();
  default:
    appendTyped(tensor.int32_data(), elementSize, out);
    return tensor.int32_data_size();
  }
}

bool decodeInlineTensor(const TensorProto &tensor, std::vector<uint8_t> &out,
                        std::string &error) {
  const bool fourBit = isFourBitIntegerType(tensor.data_type());
  // 4-bit integers come two to a byte, in raw_data or one byte per int32_data value.
  size_t elementSize = fourBit ? 1 : onnxElementSize(tensor.data_type());
  if (elementSize == 0) {
    error = "has data type " + onnxTypeName(tensor.data_type()) + ", which is not supported";
    return false;
  }
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    error = "is stored externally, which only initializers may be";
    return false;
  }
  llvm::SmallVector<int64_t> dims(tensor.dims().begin(), tensor.dims().end());
  int64_t count = checkedElementCount(dims);
  if (count < 0) {
    error = "has an invalid shape";
    return false;
  }
  uint64_t expected = onnxStorageBytes(tensor.data_type(), count);
  out.clear();
  if (tensor.has_raw_data()) {
    if (tensor.raw_data().size() != expected) {
      error = "holds " + std::to_string(tensor.raw_data().size()) +
              " bytes of raw data, but its shape and type need " + std::to_string(expected);
      return false;
    }
    out.assign(tensor.raw_data().begin(), tensor.raw_data().end());
    return true;
  }
  size_t values = typedFieldCount(tensor, out, elementSize);
  if (values != (fourBit ? expected : static_cast<uint64_t>(count))) {
    error = "holds " + std::to_string(values) + " values, but its shape needs " +
            std::to_string(fourBit ? expected : static_cast<uint64_t>(count));
    return false;
  }
  return true;
}

bool WeightStore::add(const TensorProto &tensor, const std::string &name, std::string &error) {
  if (name.empty()) {
    error = "a tensor has no name";
    return false;
  }
  if (records_.count(name)) {
    error = "tensor '" + name + "' is defined twice";
    return false;
  }
  WeightRecord record;
  record.name = name;
  record.onnxType = tensor.data_type();
  record.dims.assign(tensor.dims().begin(), tensor.dims().end());
  if (onnxElementSize(record.onnxType) == 0 && !isFourBitIntegerType(record.onnxType)) {
    error = "tensor '" + name + "' has data type " + onnxTypeName(record.onnxType) +
            ", which is not supported";
    return false;
  }
  int64_t count = checkedElementCount(record.dims);
  if (count < 0) {
    error = "tensor '" + name + "' has an invalid shape";
    return false;
  }
  uint64_t expected = onnxStorageBytes(record.onnxType, count);

  if (tensor.data_location() == TensorProto::EXTERNAL) {
    if (!mapExternal(tensor, record, expected, error))
      return false;
  } else if (tensor.has_raw_data()) {
    if (tensor.raw_data().size() != expected) {
      error = "tensor '" + name + "' holds " + std::to_string(tensor.raw_data().size()) +
              " bytes of raw data, but its shape and type need " + std::to_string(expected);
      return false;
    }
    record.bytes = {reinterpret_cast<const uint8_t *>(tensor.raw_data().data()),
                    tensor.raw_data().size()};
  } else {
    auto owned = std::make_unique<std::vector<uint8_t>>();
    std::string decodeError;
    if (!decodeInlineTensor(tensor, *owned, decodeError)) {
      error = "tensor '" + name + "' " + decodeError;
      return false;
    }
    record.bytes = *owned;
    ownedBytes_.push_back(std::move(owned));
  }
  records_[name] = std::move(record);
  return true;
}

static bool escapesDirectory(llvm::StringRef location) {
  if (location.empty() || llvm::sys::path::is_absolute(location) ||
      llvm::sys::path::is_absolute(location, llvm::sys::path::Style::windows))
    return true;
  for (auto it = llvm::sys::path::begin(location), end = llvm::sys::path::end(location);
       it != end; ++it)
    if (*it == "..")
      return true;
  return false;
}

llvm::MemoryBuffer *WeightStore::openExternalFile(const std::string &location,
                                                  std::string &error) {
  if (escapesDirectory(location) || location.find('\0') != std::string::npos) {
    error = "external data location '" + location + "' escapes the model's folder";
    return nullptr;
  }
  llvm::SmallString<256> path(modelDirectory_);
  llvm::sys::path::append(path, location);
  // By path: the two models of an encoder-decoder may sit in different folders.
  auto cached = externalFiles_.find(path);
  if (cached != externalFiles_.end())
    return cached->second.get();
  // A symbolic link inside the folder may still point outside it.
  llvm::SmallString<256> realDirectory, realPath;
  if (llvm::sys::fs::real_path(modelDirectory_, realDirectory) ||
      llvm::sys::fs::real_path(path, realPath)) {
    error = "external data file '" + location + "' cannot be opened: " +
            std::string(path.str()) + " does not exist";
    return nullptr;
  }
  if (!llvm::StringRef(realPath).starts_with((realDirectory + "/").str())) {
    error = "external data location '" + location + "' escapes the model's folder";
    return nullptr;
  }
  auto buffer = llvm::MemoryBuffer::getFile(realPath, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    error = "external data file '" + location + "' cannot be opened: " +
            buffer.getError().message();
    return nullptr;
  }
  auto *raw = buffer->get();
  if (raw->getBufferKind() == llvm::MemoryBuffer::MemoryBuffer_MMap)
    mappedRanges_.emplace_back(raw->getBufferStart(), raw->getBufferEnd());
  externalFiles_[path] = std::move(*buffer);
  return raw;
}

bool WeightStore::mapExternal(const TensorProto &tensor, WeightRecord &record,
                              uint64_t expected, std::string &error) {
  const std::string &name = record.name;
  std::string location;
  uint64_t offset = 0, length = expected;
  bool hasLength = false;
  for (const auto &entry : tensor.external_data()) {
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset" || entry.key() == "length") {
      uint64_t value;
      if (!llvm::to_integer(entry.value(), value, 10)) {
        error = "tensor '" + name + "': external data " + entry.key() + " '" + entry.value() +
                "' is not a number";
        return false;
      }
      (entry.key() == "offset" ? offset : length) = value;
      hasLength |= entry.key() == "length";
    }
  }
  if (location.empty()) {
    error = "tensor '" + name + "' is stored externally but names no location";
    return false;
  }
  if (hasLength && length != expected) {
    error = "tensor '" + name + "': external data length " + std::to_string(length) +
            " differs from the " + std::to_string(expected) + " bytes its shape and type need";
    return false;
  }
  std::string openError;
  llvm::MemoryBuffer *file = openExternalFile(location, openError);
  if (!file) {
    error = "tensor '" + name + "': " + openError;
    return false;
  }
  uint64_t fileSize = file->getBufferSize();
  if (offset > fileSize || expected > fileSize - offset) {
    error = "tensor '" + name + "': external data '" + location + "' is truncated: bytes " +
            std::to_string(offset) + " to " + std::to_string(offset + expected) +
            " are needed but the file has " + std::to_string(fileSize);
    return false;
  }
  record.bytes = {reinterpret_cast<const uint8_t *>(file->getBufferStart()) + offset,
                  static_cast<size_t>(expected)};
  record.externalFile = location;
  record.externalOffset = offset;
  return true;
}

} // namespace dsc::onnx_frontend
