// Softmax and LogSoftmax of f32 over the last axis of a contiguous [rows, cols] tensor, as
// on the host (runtime/src/ops/Normalization.cpp): subtract the row's maximum, exponentiate,
// divide by the sum (LogSoftmax: shifted - log(sum)). One block per row; the sum's order
// differs from the host's sequential one, so results agree to float rounding, not bits.
//
// Constants: LOG (0 Softmax, 1 LogSoftmax); BLOCK, the threads per block (a multiple of 32,
// at most 1024), which the launcher must launch with.
#if BLOCK % 32 != 0 || BLOCK < 32 || BLOCK > 1024
#error "generic_softmax: BLOCK must be a multiple of 32 in [32, 1024]"
#endif

static __device__ __forceinline__ float generic_softmax_warp_max(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

static __device__ __forceinline__ float generic_softmax_warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// The block's reduction, returned to every thread. `partials` holds one value per warp;
// the trailing barrier lets the caller reuse it.
template <bool IsMax>
static __device__ __forceinline__ float generic_softmax_block_reduce(float value,
                                                                     float *partials) {
  const int warps = BLOCK / 32;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  value = IsMax ? generic_softmax_warp_max(value) : generic_softmax_warp_sum(value);
  if (lane == 0)
    partials[warp] = value;
  __syncthreads();
  float total = IsMax ? -__int_as_float(0x7f800000) : 0.0f;
  for (int w = 0; w < warps; ++w)
    total = IsMax ? fmaxf(total, partials[w]) : total + partials[w];
  __syncthreads();
  return total;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
    generic_softmax(const float *input, float *output, long long rows, long long cols) {
  __shared__ float partials[BLOCK / 32];
  const float negativeInfinity = -__int_as_float(0x7f800000);
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const float *x = input + row * cols;
    float *y = output + row * cols;
    // fmaxf ignores NaN as the host's std::max(maximum, x) does; a NaN still reaches the
    // sum through exp and makes the row NaN, as there.
    float maximum = negativeInfinity;
    for (long long k = threadIdx.x; k < cols; k += BLOCK)
      maximum = fmaxf(maximum, x[k]);
    maximum = generic_softmax_block_reduce<true>(maximum, partials);
    float sum = 0.0f;
    for (long long k = threadIdx.x; k < cols; k += BLOCK)
      sum += expf(x[k] - maximum);
    sum = generic_softmax_block_reduce<false>(sum, partials);
#if LOG
    float logSum = logf(sum);
    for (long long k = threadIdx.x; k < cols; k += BLOCK)
      y[k] = (x[k] - maximum) - logSum;
#else
    for (long long k = threadIdx.x; k < cols; k += BLOCK)
      y[k] = expf(x[k] - maximum) / sum;
#endif
  }
}
