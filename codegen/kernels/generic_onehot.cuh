// ONNX OneHot of integer indices, as on the host (runtime/src/ops/Routing.cpp): the output
// is indices' shape with the depth inserted at the axis, viewed as [outer, depth, inner];
// an element is values[1] where its index (negative ones counting from the depth) names
// its position along the depth, else values[0]. An index outside [-depth, depth) names
// none. One thread per output element.
//
// Constants: ES, the element size of values and the output (1, 2, 4 or 8); IDX, the plan
// dtype of indices (5 i64, 6 i32).
#if ES == 1
typedef unsigned char generic_onehot_t;
#elif ES == 2
typedef unsigned short generic_onehot_t;
#elif ES == 4
typedef unsigned int generic_onehot_t;
#elif ES == 8
typedef unsigned long long generic_onehot_t;
#else
#error "generic_onehot: ES must be 1, 2, 4 or 8"
#endif
#if IDX == 5
typedef long long generic_onehot_index_t;
#elif IDX == 6
typedef int generic_onehot_index_t;
#else
#error "generic_onehot: IDX must be 5 (i64) or 6 (i32)"
#endif

extern "C" __global__ void generic_onehot(const generic_onehot_index_t *indices,
                                          const generic_onehot_t *values,
                                          generic_onehot_t *output, long long depth,
                                          long long inner, long long total) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    long long i = e % inner, d = (e / inner) % depth, o = e / (inner * depth);
    long long index = (long long)indices[o * inner + i];
    if (index < 0)
      index += depth;
    output[e] = index == d ? values[1] : values[0];
  }
}
