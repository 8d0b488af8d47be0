// ONNX GatherND, as on the host (runtime/src/ops/Gather.cpp): data [batch..., rest...],
// indices [batch..., tuples..., k]; each k-tuple picks the slice data[batch..., i_1, ...,
// i_k, :...], negative indices counting from the end. The host reports an index out of
// range as an error; a kernel cannot stop the program, so such slices are written as zeros
// instead of reading outside `data`. One thread per output element.
//
// Constants: ES, the element size of data and output (1, 2, 4 or 8). Indices are i64 (the
// only type ONNX allows).
#if ES == 1
typedef unsigned char generic_gather_nd_t;
#elif ES == 2
typedef unsigned short generic_gather_nd_t;
#elif ES == 4
typedef unsigned int generic_gather_nd_t;
#elif ES == 8
typedef unsigned long long generic_gather_nd_t;
#else
#error "generic_gather_nd: ES must be 1, 2, 4 or 8"
#endif

struct GenericGatherNDShape {
  long long indexedDims[6];  // data's dims after the batch dims, the k the tuples index
  long long k;               // the tuple length, 1..6
  long long tuples;          // tuples per batch
  long long slice;           // elements per slice
  long long batchStride;     // data's elements per batch
};

extern "C" __global__ void generic_gather_nd(generic_gather_nd_t *output,
                                             const generic_gather_nd_t *data,
                                             const long long *indices,
                                             GenericGatherNDShape shape, long long total) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const long long tuple = i / shape.slice, within = i % shape.slice;
    const long long batch = tuple / shape.tuples;
    const long long *index = indices + tuple * shape.k;
    long long offset = 0;  // in slices, within the batch
    bool inside = true;
    for (int j = 0; j < shape.k; ++j) {
      long long value = index[j];
      if (value < 0)
        value += shape.indexedDims[j];
      inside = inside && value >= 0 && value < shape.indexedDims[j];
      offset = offset * shape.indexedDims[j] + value;
    }
    output[i] = inside ? data[batch * shape.batchStride + offset * shape.slice + within]
                       : (generic_gather_nd_t)0;
  }
}
