// The strided copy behind the generic path's data movement (Reshape and its kin, Transpose,
// Slice, Expand, Concat, Split): for each index of a copy shape of rank RANK,
//   destination[dstBase + sum_d index_d * dstStrides[d]] =
//       source[srcBase + sum_d index_d * srcStrides[d]],
// in elements, with `count` the product of dims[0, RANK). Element values are never looked
// at, only their size, as on the host (runtime/src/ops/Movement.cpp).
//
// Constants: ES, the element size (1, 2, 4 or 8); RANK (0..6), the copy shape's rank.
#if ES == 1
typedef unsigned char generic_copy_t;
#elif ES == 2
typedef unsigned short generic_copy_t;
#elif ES == 4
typedef unsigned int generic_copy_t;
#elif ES == 8
typedef unsigned long long generic_copy_t;
#else
#error "generic_copy: ES must be 1, 2, 4 or 8"
#endif

#if RANK < 0 || RANK > 6
#error "generic_copy: RANK must be in [0, 6]"
#endif

struct GenericCopyShape {
  long long dims[6];
  long long srcStrides[6];
  long long dstStrides[6];
  long long srcBase;
  long long dstBase;
};

extern "C" __global__ void generic_copy(generic_copy_t *destination,
                                        const generic_copy_t *source, GenericCopyShape shape,
                                        long long count) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    long long rest = i, from = shape.srcBase, to = shape.dstBase;
#pragma unroll
    for (int d = RANK - 1; d > 0; --d) {
      long long coordinate = rest % shape.dims[d];
      rest /= shape.dims[d];
      from += coordinate * shape.srcStrides[d];
      to += coordinate * shape.dstStrides[d];
    }
#if RANK > 0
    // i < count = the product of the dims, so what is left is the outermost coordinate.
    from += rest * shape.srcStrides[0];
    to += rest * shape.dstStrides[0];
#endif
    destination[to] = source[from];
  }
}
