// CumSum along one axis of a contiguous tensor viewed as [outer, length, inner], with the
// host's accumulation (runtime/src/ops/Reduce.cpp): f32 sums in f32, integers in 64 bits,
// wrapping, in the same sequential order, so the results are bit-identical. One thread per
// (outer, inner) line: the lines are short (sequence lengths) and many.
//
// Constants: DT, the plan dtype (1 f32, 5 i64, 6 i32); EXCLUSIVE and REVERSE, the op's
// attributes (0 or 1).
#if DT == 1
typedef float generic_cumsum_t;
typedef float generic_cumsum_sum_t;
#elif DT == 5
typedef long long generic_cumsum_t;
typedef unsigned long long generic_cumsum_sum_t;
#elif DT == 6
typedef int generic_cumsum_t;
typedef unsigned long long generic_cumsum_sum_t;
#else
#error "generic_cumsum: DT must be 1, 5 or 6"
#endif

extern "C" __global__ void generic_cumsum(const generic_cumsum_t *input,
                                          generic_cumsum_t *output, long long outer,
                                          long long length, long long inner) {
  long long lines = outer * inner;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long line = (long long)blockIdx.x * blockDim.x + threadIdx.x; line < lines;
       line += stride) {
    long long o = line / inner, i = line % inner;
    // Integers sum as unsigned 64-bit: the same bits as the host's wrapping int64 sum.
    generic_cumsum_sum_t sum = 0;
    for (long long step = 0; step < length; ++step) {
      long long k = REVERSE ? length - 1 - step : step;
      long long at = (o * length + k) * inner + i;
#if DT == 1
      generic_cumsum_sum_t value = input[at];
#else
      generic_cumsum_sum_t value = (generic_cumsum_sum_t)(long long)input[at];
#endif
#if !EXCLUSIVE
      sum += value;
#endif
      output[at] = (generic_cumsum_t)sum;
#if EXCLUSIVE
      sum += value;
#endif
    }
  }
}
