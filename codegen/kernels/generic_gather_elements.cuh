// ONNX GatherElements, as on the host (runtime/src/ops/Gather.cpp): output[c] = data[c with
// its `axis` coordinate replaced by indices[c]], the output shaped like indices, negative
// indices counting from the end. An index out of range (the host's error) writes a zero
// instead of reading outside `data`. One thread per output element.
//
// Constants: ES, the element size of data and output (1, 2, 4 or 8); IDX, the plan dtype of
// indices (5 i64, 6 i32); RANK (1..6).
#if ES == 1
typedef unsigned char generic_gather_elements_t;
#elif ES == 2
typedef unsigned short generic_gather_elements_t;
#elif ES == 4
typedef unsigned int generic_gather_elements_t;
#elif ES == 8
typedef unsigned long long generic_gather_elements_t;
#else
#error "generic_gather_elements: ES must be 1, 2, 4 or 8"
#endif
#if IDX == 5
typedef long long generic_gather_elements_index_t;
#elif IDX == 6
typedef int generic_gather_elements_index_t;
#else
#error "generic_gather_elements: IDX must be 5 (i64) or 6 (i32)"
#endif
#if RANK < 1 || RANK > 6
#error "generic_gather_elements: RANK must be in [1, 6]"
#endif

struct GenericGatherElementsShape {
  long long indexDims[6];    // the output's (and indices') dims
  long long dataStrides[6];  // data's contiguous strides, 0 at the axis
  long long axisStride;      // data's stride along the axis
  long long axisDim;         // data's extent along the axis
};

extern "C" __global__ void generic_gather_elements(
    generic_gather_elements_t *output, const generic_gather_elements_t *data,
    const generic_gather_elements_index_t *indices, GenericGatherElementsShape shape,
    long long total) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    long long rest = i, offset = 0;
#pragma unroll
    for (int d = RANK - 1; d >= 0; --d) {
      offset += (rest % shape.indexDims[d]) * shape.dataStrides[d];
      rest /= shape.indexDims[d];
    }
    long long index = (long long)indices[i];
    if (index < 0)
      index += shape.axisDim;
    output[i] = index >= 0 && index < shape.axisDim ? data[offset + index * shape.axisStride]
                                                    : (generic_gather_elements_t)0;
  }
}
