// tfm.rms_norm over the last axis: y = v / sqrt(mean(v²) + epsilon) * scale, where
// v = input (+ residual in the fused form, which also stores v as its second output).
// One block per row, the row in registers (HIDDEN is a constant), f32 accumulation.
//
// Constants: HIDDEN, SCALE_DT (the scale's stored dtype: 1 f32, 2 f16, 3 bf16),
// RESIDUAL (0/1), BLOCK (a multiple of 32, at most 1024), and POST_RESIDUAL (1) only for a
// sandwich norm's step: then RESIDUAL is 0 and `residual` is added to the normalised row
// (y = residual + norm(input) * scale, Gemma-2's and Gemma-3's post-sublayer norms).
// Activations are f32, except with OUT_DT (2 f16, 3 bf16; last, only for the second norm
// kernel of a linear's norm prologue, LinearRules.cpp): `out` is then written in that
// dtype, the operand of the linear's f16/bf16 GEMM, rounded once as convert_activations
// would round it.
#include "dsc_common.cuh"

#ifndef OUT_DT
#define OUT_DT DSC_DT_F32
#endif

#define RMS_PER_THREAD ((HIDDEN + BLOCK - 1) / BLOCK)
#if defined(POST_RESIDUAL) && RESIDUAL
#error "a norm takes a residual or a post_residual, not both"
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
rms_norm(const float *input, const void *scale, const float *residual, void *out,
         float *sum_out, long long rows, float epsilon) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long base = row * HIDDEN;
    float values[RMS_PER_THREAD], scales[RMS_PER_THREAD];
    float squares = 0.0f;
    // The scale is loaded with the row, so that its trip to memory overlaps the row's
    // instead of following the reduction.
#pragma unroll
    for (int j = 0; j < RMS_PER_THREAD; ++j) {
      const int i = threadIdx.x + j * BLOCK;
      values[j] = 0.0f;
      scales[j] = 0.0f;
      if (i < HIDDEN) {
        scales[j] = dsc_load_float<SCALE_DT>(scale, i);
        float v = input[base + i];
        if (RESIDUAL) {
          v += residual[base + i];
          if (sum_out)
            sum_out[base + i] = v;
        }
        values[j] = v;
        squares += v * v;
      }
    }
    const float meanSquare = dsc_block_sum(squares, scratch) / HIDDEN;
    const float inverse = 1.0f / sqrtf(meanSquare + epsilon);
#pragma unroll
    for (int j = 0; j < RMS_PER_THREAD; ++j) {
      const int i = threadIdx.x + j * BLOCK;
      if (i < HIDDEN) {
#ifdef POST_RESIDUAL
        // The norm rounded to f32 first, as the unfused norm stores it.
        const float normalised = values[j] * inverse * scales[j];
        dsc_store_float<OUT_DT>(out, base + i, residual[base + i] + normalised);
#else
        dsc_store_float<OUT_DT>(out, base + i, values[j] * inverse * scales[j]);
#endif
      }
    }
  }
}
