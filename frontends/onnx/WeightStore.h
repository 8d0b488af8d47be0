// Where the bytes of a model's initializers live after import: the parsed model (inline
// raw_data), mmapped external-data files, or a small owned copy for tensors stored in
// ONNX's typed fields. The IR refers to weights by name only.
#ifndef DSC_FRONTENDS_ONNX_WEIGHTSTORE_H
#define DSC_FRONTENDS_ONNX_WEIGHTSTORE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"

#include "frontends/onnx/NBitsWeights.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace onnx {
class ModelProto;
class TensorProto;
} // namespace onnx

namespace dsc::onnx_frontend {

struct WeightRecord {
  std::string name;
  int32_t onnxType = 0;            // onnx::TensorProto::DataType
  std::vector<int64_t> dims;
  llvm::ArrayRef<uint8_t> bytes;   // little-endian, one byte per bool
  std::string externalFile;        // empty when the bytes are inside the model file
  uint64_t externalOffset = 0;
  // A MatMulNBits weight: `bytes` is empty and the values are these codes, dequantized
  // (NBitsWeights.h); onnxType and dims are the float weight's.
  std::shared_ptr<const NBitsCoding> coding;
};

// The MatMulNBits weights of a model: how many, and their bits and block size when all share
// them (0 when they differ).
struct NBitsSummary {
  int64_t weights = 0, bits = 0, blockSize = 0;
};

// The record's values in its own type and shape: its bytes, or for a MatMulNBits weight its
// codes dequantized into `storage`.
llvm::ArrayRef<uint8_t> weightValues(const WeightRecord &record, std::vector<uint8_t> &storage);

class WeightStore {
public:
  explicit WeightStore(std::string modelDirectory);
  ~WeightStore();
  WeightStore(const WeightStore &) = delete;
  WeightStore &operator=(const WeightStore &) = delete;

  // Takes ownership of a parsed model so that its inline raw_data stays valid. An
  // encoder-decoder adopts two; `modelDirectory` is where the next model's external data
  // is looked up.
  void adoptModel(std::unique_ptr<::onnx::ModelProto> model);
  void setModelDirectory(std::string modelDirectory) {
    modelDirectory_ = std::move(modelDirectory);
  }

  // Validates `tensor` (data type, dimensions, data size, external-data location and
  // bounds) and records where its bytes are. On failure returns false and sets `error`.
  bool add(const ::onnx::TensorProto &tensor, const std::string &name, std::string &error);

  const WeightRecord *lookup(llvm::StringRef name) const;

  // Records a tensor whose bytes the importer computed (codes laid out anew), owned here.
  // Fails, saying why, when the name is taken; else returns the record.
  const WeightRecord *addOwned(const std::string &name, int32_t onnxType,
                               std::vector<int64_t> dims, std::vector<uint8_t> bytes,
                               std::string &error);

  // Records `name`, `dims` of the parent's type whose bytes are the parent's from
  // `byteOffset` on (an expert's rows of a stacked weight), without copying them. Fails,
  // saying why, when the name is taken or the bytes run past the parent's; else the record.
  const WeightRecord *addView(const std::string &name, const WeightRecord &parent,
                              uint64_t byteOffset, std::vector<int64_t> dims,
                              std::string &error);

  // Records the float [k, n] weight `name` (of ONNX float type `floatType`) that the codes
  // of `coding` stand for. Fails, saying why, when the name is taken.
  bool addNBitsWeight(const std::string &name, NBitsCoding coding, int32_t floatType,
                      std::string &error);

  // Tells the kernel that the record's bytes will not be read again soon: the pages of an
  // mmapped external-data file are dropped from this process's resident set (they stay in
  // the page cache). Streaming a plan calls it after each weight, so compiling a model never
  // holds all of its weights in memory.
  void releasePages(const WeightRecord &record) const;
  size_t size() const { return records_.size(); }
  NBitsSummary nbitsSummary() const;
  std::vector<const WeightRecord *> nbitsWeights() const;

  // The float type most of the float weights' bytes are stored in (ONNX's 1 f32, 10 f16,
  // 16 bf16, ...), 0 when there are none: the dtype the model was exported in.
  int32_t dominantFloatType() const;

private:
  bool mapExternal(const ::onnx::TensorProto &tensor, WeightRecord &record, uint64_t expected,
                   std::string &error);
  llvm::MemoryBuffer *openExternalFile(const std::string &location, std::string &error);

  std::string modelDirectory_;
  std::vector<std::unique_ptr<::onnx::ModelProto>> models_;
  llvm::StringMap<std::unique_ptr<llvm::MemoryBuffer>> externalFiles_;  // by path
  std::vector<std::pair<const char *, const char *>> mappedRanges_;  // mmapped files
  std::vector<std::unique_ptr<std::vector<uint8_t>>> ownedBytes_;
  llvm::StringMap<WeightRecord> records_;
};

// Bytes per element of an ONNX data type we accept, or 0 for types we do not
// (strings, complex, sub-byte and 8-bit float formats).
size_t onnxElementSize(int32_t onnxType);

// ONNX's 4-bit integers (ONNX 1.16; newer than the onnx.proto dsc is built with). The store
// holds them packed, two to a byte, the first low: a QDQ export's weight codes, which only
// DequantizeLinear reads (BlockedDequantization.cpp), and a quantized embedding's, which
// GatherBlockQuantized reads (MicrosoftOps.cpp).
constexpr int32_t kOnnxUInt4 = 21, kOnnxInt4 = 22;
bool isFourBitIntegerType(int32_t onnxType);
// The bytes `count` elements of the type take in raw data (0 for a type we do not accept).
uint64_t onnxStorageBytes(int32_t onnxType, int64_t count);

// Copies a tensor stored inside the model (raw_data or ONNX's typed fields) into `out` in
// the raw little-endian layout. Returns false with `error` set when the data does not match
// the tensor's type and shape, or when the tensor is stored externally.
bool decodeInlineTensor(const ::onnx::TensorProto &tensor, std::vector<uint8_t> &out,
                        std::string &error);

// The element count of `dims`, or -1 when a dimension is negative or the count
// exceeds 2^48 (no real tensor is that large; it guards the size arithmetic).
int64_t checkedElementCount(llvm::ArrayRef<int64_t> dims);

} // namespace dsc::onnx_frontend

#endif
