// Where with numpy broadcasting over three operands: output = condition ? x : y. Only
// element sizes matter, as on the host (runtime/src/ops/Binary.cpp); a condition byte that
// is not zero reads as true.
//
// Constants: ES, the element size of x, y and the output (1, 2, 4 or 8); RANK (0..6), the
// output's rank. The launcher passes the output's dims and each operand's strides in
// elements, right aligned to the output (0 along broadcast dimensions); `count` must be the
// product of dims[0, RANK).
#if ES == 1
typedef unsigned char generic_where_t;
#elif ES == 2
typedef unsigned short generic_where_t;
#elif ES == 4
typedef unsigned int generic_where_t;
#elif ES == 8
typedef unsigned long long generic_where_t;
#else
#error "generic_where: ES must be 1, 2, 4 or 8"
#endif

#if RANK < 0 || RANK > 6
#error "generic_where: RANK must be in [0, 6]"
#endif

struct GenericWhereShape {
  long long dims[6];
  long long stridesCondition[6];
  long long stridesX[6];
  long long stridesY[6];
};

extern "C" __global__ void generic_where(const unsigned char *condition,
                                         const generic_where_t *x, const generic_where_t *y,
                                         generic_where_t *output, GenericWhereShape shape,
                                         long long count) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    long long rest = i, offsetCondition = 0, offsetX = 0, offsetY = 0;
#pragma unroll
    for (int d = RANK - 1; d > 0; --d) {
      long long coordinate = rest % shape.dims[d];
      rest /= shape.dims[d];
      offsetCondition += coordinate * shape.stridesCondition[d];
      offsetX += coordinate * shape.stridesX[d];
      offsetY += coordinate * shape.stridesY[d];
    }
#if RANK > 0
    // i < count = the product of the dims, so what is left is the outermost coordinate.
    offsetCondition += rest * shape.stridesCondition[0];
    offsetX += rest * shape.stridesX[0];
    offsetY += rest * shape.stridesY[0];
#endif
    output[i] = condition[offsetCondition] != 0 ? x[offsetX] : y[offsetY];
  }
}
