// ReduceSum, ReduceMean and ReduceMax over any set of axes, as on the host
// (runtime/src/ops/Reduce.cpp): f32 accumulates in f32, integers in 64 bits (wrapping);
// Max starts at -inf (integers: the 64-bit minimum) and lets NaN win. One thread per output
// element visits its reduced elements in the input's row-major order, the host's order, so
// the results are bit-identical.
//
// Constants: OP (1 sum, 2 mean, 3 max); DT, the plan dtype (1 f32, 5 i64, 6 i32); RANK
// (0..6), the input's rank. The launcher passes, per input dimension, the kept extent (1
// where reduced) and the reduced extent (1 where kept), with the input's strides;
// outputCount and reducedCount must be the products of the kept and reduced extents.
#define GENERIC_REDUCE_SUM 1
#define GENERIC_REDUCE_MEAN 2
#define GENERIC_REDUCE_MAX 3

#if RANK < 0 || RANK > 6
#error "generic_reduce: RANK must be in [0, 6]"
#endif

#if DT == 1
typedef float generic_reduce_t;
typedef float generic_reduce_sum_t;
#elif DT == 5
typedef long long generic_reduce_t;
typedef long long generic_reduce_sum_t;
#elif DT == 6
typedef int generic_reduce_t;
typedef long long generic_reduce_sum_t;
#else
#error "generic_reduce: DT must be 1, 5 or 6"
#endif

struct GenericReduceShape {
  long long keptDims[6];
  long long reducedDims[6];
  long long strides[6];
};

static __device__ __forceinline__ generic_reduce_sum_t generic_reduce_initial() {
#if OP == GENERIC_REDUCE_MAX
#if DT == 1
  return -__int_as_float(0x7f800000);
#else
  return (-9223372036854775807LL - 1);
#endif
#else
  return 0;
#endif
}

extern "C" __global__ void generic_reduce(const generic_reduce_t *input,
                                          generic_reduce_t *output, GenericReduceShape shape,
                                          long long outputCount, long long reducedCount) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < outputCount;
       i += stride) {
    long long rest = i, base = 0;
#pragma unroll
    for (int d = RANK - 1; d > 0; --d) {
      base += (rest % shape.keptDims[d]) * shape.strides[d];
      rest /= shape.keptDims[d];
    }
#if RANK > 0
    // i < outputCount = the product of keptDims: what is left is the outermost coordinate.
    base += rest * shape.strides[0];
#endif
    generic_reduce_sum_t acc = generic_reduce_initial();
    for (long long r = 0; r < reducedCount; ++r) {
      long long inner = r, at = base;
#pragma unroll
      for (int d = RANK - 1; d > 0; --d) {
        at += (inner % shape.reducedDims[d]) * shape.strides[d];
        inner /= shape.reducedDims[d];
      }
#if RANK > 0
      at += inner * shape.strides[0];
#endif
      generic_reduce_sum_t value = (generic_reduce_sum_t)input[at];
#if OP == GENERIC_REDUCE_MAX && DT == 1
      if (value != value || value > acc)  // NaN propagates, as numpy's max
        acc = acc != acc ? acc : value;
#elif OP == GENERIC_REDUCE_MAX
      if (value > acc)
        acc = value;
#elif DT == 1
      acc += value;
#else
      acc = (long long)((unsigned long long)acc + (unsigned long long)value);
#endif
    }
#if OP == GENERIC_REDUCE_MEAN
#if DT == 1
    acc = acc / (float)reducedCount;
#else
    acc = reducedCount > 0 ? acc / reducedCount : 0;
#endif
#endif
    output[i] = (generic_reduce_t)acc;
  }
}
