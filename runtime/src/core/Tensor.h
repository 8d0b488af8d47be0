// Tensors as the runtime sees them: a dtype, a shape and bytes somewhere (the arena, a
// weight section, a caller's buffer). Shared by the CPU backend, the plan loader and the
// compiler, which evaluates shapes and folds constants with the same kernels.
#ifndef DSRT_CORE_TENSOR_H
#define DSRT_CORE_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dsrt {

// The numbering is the plan file's (schemas/plan.fbs, enum DType).
enum class DType : uint8_t {
  Undefined = 0,
  F32 = 1,
  F16 = 2,
  BF16 = 3,
  F64 = 4,
  I64 = 5,
  I32 = 6,
  I16 = 7,
  I8 = 8,
  U8 = 9,
  Bool = 10,  // one byte per element, 0 or 1
  U16 = 11,
  U32 = 12,
  U64 = 13,
};

size_t dtypeSize(DType dtype);   // bytes per element, 0 for Undefined
const char *dtypeName(DType dtype);  // "f32", "bf16", "i64", "bool", ...
bool isFloat(DType dtype);       // F32 F16 BF16 F64
bool isInteger(DType dtype);     // signed and unsigned integers, not Bool

using Shape = std::vector<int64_t>;

// Product of the dimensions (1 for a scalar); -1 when a dimension is negative or the
// product overflows int64.
int64_t elementCount(const Shape &shape);
std::string shapeString(const Shape &shape);  // "[2, 3]"

// A non-owning view. `data` is null when only the shape is known (shape evaluation at
// compile time); kernels that need values say so instead of reading it.
struct TensorRef {
  DType dtype = DType::Undefined;
  Shape shape;
  void *data = nullptr;

  int64_t elements() const { return elementCount(shape); }
  size_t bytes() const { return static_cast<size_t>(elements()) * dtypeSize(dtype); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

// A tensor that owns its bytes (constants, test data, compile-time evaluation).
struct OwnedTensor {
  DType dtype = DType::Undefined;
  Shape shape;
  std::vector<uint8_t> storage;

  OwnedTensor() = default;
  OwnedTensor(DType dtype, Shape shape);  // zero-filled
  TensorRef ref() { return {dtype, shape, storage.data()}; }
  TensorRef ref() const { return {dtype, shape, const_cast<uint8_t *>(storage.data())}; }
};

// IEEE half and bfloat16 conversions (round to nearest even).
float halfToFloat(uint16_t bits);
uint16_t floatToHalf(float value);
float bfloat16ToFloat(uint16_t bits);
uint16_t floatToBfloat16(float value);

// Converts `count` elements between F32, F16 and BF16 (weights stored narrower than the
// program computes in). Returns false, converting nothing, for any other dtype.
bool convertFloats(DType from, const void *source, DType to, void *destination, int64_t count);

// The largest magnitude up to which every integer has an exact value of `dtype` (2^53 for
// f64, 256 for bf16, 1 for bool), the largest value for integer dtypes; 0 for Undefined.
uint64_t exactIntegerLimit(DType dtype);
// Writes `count` integers as `dtype` (any integer, bool or float dtype) to `destination`,
// which holds count * dtypeSize(dtype) bytes. Each value must be exact in that dtype
// (unsigned: not negative; bool: 0 or 1); otherwise returns the index of the first value
// that is not, and writes nothing. Returns `count` on success.
size_t encodeExactIntegers(const int64_t *values, size_t count, DType dtype, void *destination);

} // namespace dsrt

#endif
