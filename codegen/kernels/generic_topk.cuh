// ONNX TopK along one axis of a contiguous X viewed as [outer, length, inner], as on the host
// (runtime/src/ops/Routing.cpp): each line's K largest (LARGEST 1) or smallest elements in
// order with their indices; of equal values the lower index first, NaN above every number.
// One thread per line picks, K times, the best element that ranks after the one it picked
// last: the ranking is a strict total order (value, then index), so nothing is picked twice
// and no scratch memory is needed. A router's lines are short (the expert count) and its K
// small, so K passes over a line cost less than sorting it.
//
// Constants: DT, the plan dtype of X and the values (1 f32, 5 i64, 6 i32); LARGEST (0 or 1).
#if DT == 1
typedef float generic_topk_t;
#elif DT == 5
typedef long long generic_topk_t;
#elif DT == 6
typedef int generic_topk_t;
#else
#error "generic_topk: DT must be 1, 5 or 6"
#endif

__device__ __forceinline__ bool generic_topk_before(generic_topk_t a, long long ia,
                                                    generic_topk_t b, long long ib) {
#if DT == 1
  bool nanA = a != a, nanB = b != b;
  if (nanA || nanB)
    return nanA && nanB ? ia < ib : (LARGEST ? nanA : nanB);
#endif
  if (a != b)
    return LARGEST ? a > b : a < b;
  return ia < ib;
}

extern "C" __global__ void generic_topk(const generic_topk_t *x, generic_topk_t *values,
                                        long long *indices, long long outer, long long length,
                                        long long inner, long long k) {
  long long lines = outer * inner;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long line = (long long)blockIdx.x * blockDim.x + threadIdx.x; line < lines;
       line += stride) {
    long long o = line / inner, i = line % inner;
    const generic_topk_t *in = x + o * length * inner + i;
    long long out = o * k * inner + i;
    long long last = -1;
    generic_topk_t lastValue = 0;
    for (long long r = 0; r < k; ++r) {
      long long best = -1;
      generic_topk_t bestValue = 0;
      for (long long j = 0; j < length; ++j) {
        generic_topk_t v = in[j * inner];
        if (last >= 0 && !generic_topk_before(lastValue, last, v, j))
          continue;  // picked already
        if (best < 0 || generic_topk_before(v, j, bestValue, best)) {
          best = j;
          bestValue = v;
        }
      }
      values[out + r * inner] = bestValue;
      indices[out + r * inner] = best;
      last = best;
      lastValue = bestValue;
    }
  }
}
