// What the plan writer does to a weight on its way from the model to a rank's section
// (docs/design.md §3.1: the IR refers to weights by handle with "the transforms to apply"):
// transpose, slice (a tensor-parallel shard), scale (a constant product folded into a
// linear), convert (the stored dtype) and int8 quantization. They run one weight at a time while the plan streams, so no weight is
// transformed in the IR or held longer than its own write. Plain C++17.
#ifndef DSC_CODEGEN_WEIGHTTRANSFORMS_H
#define DSC_CODEGEN_WEIGHTTRANSFORMS_H

#include "core/Status.h"
#include "core/Tensor.h"

#include <cstdint>
#include <vector>

namespace dsc {

struct WeightTransform {
  // QuantizeInt8 and QuantScales (docs/int8.md) take a 2-D float [out, in] weight and give
  // its symmetric int8 values and their f32 scales [out, in / groupSize] (groupSize 0: one
  // group per row). The int8 values are computed with the scales as `scaleDtype` will store
  // them, so that q * stored scale is what the quantization chose.
  // QuantizeInt4 and QuantScalesInt4 (docs/int4.md) do the same in 4 bits per group
  // (groupSize positive and even), each group's scale the one of max|w| / d, d in [6, 9],
  // that loses the least squared error: the codes q + 8 in [0, 15] packed two to a byte, the
  // even input in the low nibble, u8 [out, in / 2].
  // Scale multiplies every element by `factor` (in f64, rounded to the weight's dtype).
  enum class Kind {
    Transpose,
    Slice,
    Convert,
    QuantizeInt8,
    QuantScales,
    QuantizeInt4,
    QuantScalesInt4,
    Scale
  };
  Kind kind = Kind::Convert;
  std::vector<int64_t> perm;  // Transpose: output dim i is input dim perm[i]
  int64_t axis = 0;           // Slice: [offset, offset + size) along axis
  int64_t offset = 0;
  int64_t size = 0;
  // Slice: the axis is `groups` equal blocks and [offset, offset + size) is kept from each,
  // concatenated (a TP shard of fused [q|k|v] columns; BLOOM's per-head Q, K or V rows).
  int64_t groups = 1;
  dsrt::DType to = dsrt::DType::Undefined;  // Convert: between f32, f16 and bf16
  int64_t groupSize = 0;                      // QuantizeInt8/Int4, QuantScales/Int4
  dsrt::DType scaleDtype = dsrt::DType::F32;  // QuantizeInt8, QuantizeInt4
  double factor = 1;                          // Scale

  static WeightTransform transpose(std::vector<int64_t> perm);
  static WeightTransform slice(int64_t axis, int64_t offset, int64_t size,
                               int64_t groups = 1);
  static WeightTransform convert(dsrt::DType to);
  static WeightTransform quantizeInt8(int64_t groupSize, dsrt::DType scaleDtype);
  static WeightTransform quantScales(int64_t groupSize);
  static WeightTransform quantizeInt4(int64_t groupSize, dsrt::DType scaleDtype);
  static WeightTransform quantScalesInt4(int64_t groupSize);
  static WeightTransform scale(double factor);
};

// What QuantizeInt8 or QuantizeInt4 lost: per element, |w - q * scale| relative to the
// largest |w| of its group (int8: at most 1/254 plus the scale's rounding; int4 clips some
// groups' extremes, so more), and the mean: sum |w - q * scale| / sum |w|.
struct QuantizationError {
  double maxRelative = 0;
  double meanRelative = 0;
  int64_t groups = 0;  // groups of the weight (rows * groups per row)
  bool measured = false;
};

// The dtype and shape that `transforms` make of a weight of `dtype` and `shape`, or an error
// naming the transform that does not apply.
dsrt::Status transformedType(dsrt::DType dtype, const dsrt::Shape &shape,
                             const std::vector<WeightTransform> &transforms,
                             dsrt::DType &outDtype, dsrt::Shape &outShape);

// Applies `transforms` in order to the dense row-major `source` and writes the result to
// `destination` (sized by transformedType). Uses one scratch buffer per transform.
// With `error`, a QuantizeInt8 transform reports what it lost there.
dsrt::Status applyWeightTransforms(const uint8_t *source, dsrt::DType dtype,
                                   const dsrt::Shape &shape,
                                   const std::vector<WeightTransform> &transforms,
                                   uint8_t *destination, QuantizationError *error = nullptr);

} // namespace dsc

#endif
