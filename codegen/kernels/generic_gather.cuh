// ONNX Gather: output[o, i, r] = data[o, indices[i], r] over [outer, count, inner] with the
// gathered axis of size axisDim, negative indices counting from the end (numpy), as on the
// host (runtime/src/ops/Gather.cpp). The host reports an index out of range as an error; a
// kernel cannot stop the program, so such rows are written as zeros instead of reading
// outside `data`.
//
// Constants: ES, the element size of data and output (1, 2, 4 or 8); IDX, the plan dtype
// of indices (5 i64, 6 i32).
#if ES == 1
typedef unsigned char generic_gather_t;
#elif ES == 2
typedef unsigned short generic_gather_t;
#elif ES == 4
typedef unsigned int generic_gather_t;
#elif ES == 8
typedef unsigned long long generic_gather_t;
#else
#error "generic_gather: ES must be 1, 2, 4 or 8"
#endif

#if IDX == 5
typedef long long generic_gather_index_t;
#elif IDX == 6
typedef int generic_gather_index_t;
#else
#error "generic_gather: IDX must be 5 (i64) or 6 (i32)"
#endif

extern "C" __global__ void generic_gather(generic_gather_t *output,
                                          const generic_gather_t *data,
                                          const generic_gather_index_t *indices,
                                          long long outer, long long axisDim, long long count,
                                          long long inner) {
  long long total = outer * count * inner;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    long long r = i % inner;
    long long k = (i / inner) % count;
    long long o = i / (inner * count);
    long long index = (long long)indices[k];
    if (index < 0)
      index += axisDim;
    output[i] = (index >= 0 && index < axisDim) ? data[(o * axisDim + index) * inner + r]
                                                : (generic_gather_t)0;
  }
}
