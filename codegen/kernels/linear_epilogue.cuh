// The epilogue of tfm.linear on the cuBLASLt path: out[i] = act(in[i] + bias[i % n]) +
// residual[i] over the [rows, n] f32 product `in`. `out` may be `in` (in place); residual
// may be null (the launcher then has the GEMM accumulate onto it instead) and may be `out`.
// Each element is read and written by the same thread, so every aliasing of in, out and
// residual elementwise is safe.
//
// GATED (present only when 1; tfm.linear's `gated`): `in` is the [rows, 2n] product of a
// joined [gate; up] weight and out[r, j] = act(in[r, j] + bias[j]) * (in[r, n + j] +
// bias[n + j]), [rows, n]; `count` is the outputs' rows * n. `out` must not be `in` then.
//
// Constants: ACT (DSC_ACT_*), HAS_BIAS (0/1), BIAS_DT (the bias dtype; 1 without a bias),
// HAS_RESIDUAL (0/1), GATED (see above), and an LM head's LOGIT_SCALE_BITS / LOGIT_CAP_BITS
// (dsc_logit_epilogue, last); OUT_DT (2 f16, 3 bf16; last, only where a gated linear's
// result is the plan's half activation dtype) is out's dtype.
#include "dsc_common.cuh"

#ifdef OUT_DT
#define LINEAR_EPILOGUE_OUT_DT OUT_DT
#else
#define LINEAR_EPILOGUE_OUT_DT DSC_DT_F32
#endif

// An LM head's logit epilogue (LinearRules.cpp: only its kernels have the constants).
#ifndef LOGIT_SCALE_BITS
#define LOGIT_SCALE_BITS 0x3f800000
#endif
#ifndef LOGIT_CAP_BITS
#define LOGIT_CAP_BITS 0
#endif

#ifndef GATED
#define GATED 0
#endif

extern "C" __global__ void linear_epilogue(const float *in, const void *bias,
                                           const float *residual, void *out, long long count,
                                           long long n) {
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = first; i < count; i += stride) {
    if (GATED) {
      const long long j = i % n, at = (i / n) * 2 * n + j;
      float gate = in[at], up = in[at + n];
      if (HAS_BIAS) {
        gate += dsc_load_float<BIAS_DT>(bias, j);
        up += dsc_load_float<BIAS_DT>(bias, n + j);
      }
      dsc_store_float<LINEAR_EPILOGUE_OUT_DT>(out, i, dsc_activate(ACT, gate) * up);
      continue;
    }
    float value = in[i];
    if (HAS_BIAS)
      value += dsc_load_float<BIAS_DT>(bias, i % n);
    value = dsc_activate(ACT, value);
    if (HAS_RESIDUAL && residual)
      value += residual[i];
    dsc_store_float<LINEAR_EPILOGUE_OUT_DT>(
        out, i, dsc_logit_epilogue(value, LOGIT_SCALE_BITS, LOGIT_CAP_BITS));
  }
}
