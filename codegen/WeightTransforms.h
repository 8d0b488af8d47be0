// What the plan writer does to a weight on its way from the model to a rank's section
// (DESIGN.md §3.1: the IR refers to weights by handle with "the transforms to apply"):
// transpose, slice (a tensor-parallel shard) and convert (the stored dtype). They run one
// weight at a time while the plan streams, so no weight is transformed in the IR or held
// longer than its own write. Plain C++17.
#ifndef DSC_CODEGEN_WEIGHTTRANSFORMS_H
#define DSC_CODEGEN_WEIGHTTRANSFORMS_H

#include "core/Status.h"
#include "core/Tensor.h"

#include <cstdint>
#include <vector>

namespace dsc {

struct WeightTransform {
  enum class Kind { Transpose, Slice, Convert };
  Kind kind = Kind::Convert;
  std::vector<int64_t> perm;  // Transpose: output dim i is input dim perm[i]
  int64_t axis = 0;           // Slice: [offset, offset + size) along axis
  int64_t offset = 0;
  int64_t size = 0;
  // Slice: the axis is `groups` equal blocks and [offset, offset + size) is kept from each,
  // concatenated (a TP shard of fused [q|k|v] columns; BLOOM's per-head Q, K or V rows).
  int64_t groups = 1;
  dsrt::DType to = dsrt::DType::Undefined;  // Convert: between f32, f16 and bf16

  static WeightTransform transpose(std::vector<int64_t> perm);
  static WeightTransform slice(int64_t axis, int64_t offset, int64_t size,
                               int64_t groups = 1);
  static WeightTransform convert(dsrt::DType to);
};

// The dtype and shape that `transforms` make of a weight of `dtype` and `shape`, or an error
// naming the transform that does not apply.
dsrt::Status transformedType(dsrt::DType dtype, const dsrt::Shape &shape,
                             const std::vector<WeightTransform> &transforms,
                             dsrt::DType &outDtype, dsrt::Shape &outShape);

// Applies `transforms` in order to the dense row-major `source` and writes the result to
// `destination` (sized by transformedType). Uses one scratch buffer per transform.
dsrt::Status applyWeightTransforms(const uint8_t *source, dsrt::DType dtype,
                                   const dsrt::Shape &shape,
                                   const std::vector<WeightTransform> &transforms,
                                   uint8_t *destination);

} // namespace dsc

#endif
