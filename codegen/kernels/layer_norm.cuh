// tfm.layer_norm over the last axis: y = (v - mean) / sqrt(var + epsilon) * scale + bias,
// where v = input (+ residual in the fused form, which also stores v as its second output).
// One block per row; the row stays in registers (HIDDEN is a constant), mean and variance
// in two passes in f32, as the CPU kernel does them (there in double).
//
// Constants: HIDDEN, SCALE_DT and BIAS_DT (the weights' stored dtypes: 1 f32, 2 f16,
// 3 bf16; BIAS_DT 0 = no bias), RESIDUAL (0/1), BLOCK (a multiple of 32, at most 1024).
// Activations (input, residual, outputs) are f32, except with OUT_DT (2 f16, 3 bf16; last,
// only for the second norm kernel of a linear's norm prologue, LinearRules.cpp): `out` is
// then written in that dtype, the operand of the linear's f16/bf16 GEMM.
#include "dsc_common.cuh"

#ifndef OUT_DT
#define OUT_DT DSC_DT_F32
#endif

#define LN_PER_THREAD ((HIDDEN + BLOCK - 1) / BLOCK)
#define LN_BIAS_LOAD_DT (BIAS_DT == 0 ? DSC_DT_F32 : BIAS_DT)

extern "C" __global__ void __launch_bounds__(BLOCK)
layer_norm(const float *input, const void *scale, const void *bias, const float *residual,
           void *out, float *sum_out, long long rows, float epsilon) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long base = row * HIDDEN;
    float values[LN_PER_THREAD], scales[LN_PER_THREAD], biases[LN_PER_THREAD];
    float sum = 0.0f;
    // The scale and bias are loaded with the row, before the two reductions, so that their
    // trip to memory overlaps the row's instead of following the reductions.
#pragma unroll
    for (int j = 0; j < LN_PER_THREAD; ++j) {
      const int i = threadIdx.x + j * BLOCK;
      values[j] = 0.0f;
      scales[j] = 0.0f;
      biases[j] = 0.0f;
      if (i < HIDDEN) {
        scales[j] = dsc_load_float<SCALE_DT>(scale, i);
        if (BIAS_DT != 0)
          biases[j] = dsc_load_float<LN_BIAS_LOAD_DT>(bias, i);
        float v = input[base + i];
        if (RESIDUAL) {
          v += residual[base + i];
          if (sum_out)
            sum_out[base + i] = v;
        }
        values[j] = v;
        sum += v;
      }
    }
    const float mean = dsc_block_sum(sum, scratch) / HIDDEN;
    float squares = 0.0f;
#pragma unroll
    for (int j = 0; j < LN_PER_THREAD; ++j) {
      const int i = threadIdx.x + j * BLOCK;
      if (i < HIDDEN) {
        const float d = values[j] - mean;
        squares += d * d;
      }
    }
    const float variance = dsc_block_sum(squares, scratch) / HIDDEN;
    const float inverse = 1.0f / sqrtf(variance + epsilon);
#pragma unroll
    for (int j = 0; j < LN_PER_THREAD; ++j) {
      const int i = threadIdx.x + j * BLOCK;
      if (i < HIDDEN) {
        float y = (values[j] - mean) * inverse * scales[j];
        if (BIAS_DT != 0)
          y += biases[j];
        dsc_store_float<OUT_DT>(out, base + i, y);
      }
    }
  }
}
