// Activations converted to the dtype cuBLASLt multiplies in, which must be the weight's
// (f16/bf16 weights on the tensor cores): dst[i] = (WT) src[i], round to nearest even.
//
// Constants: WT (2 f16, 3 bf16; 1 f32 only with XT), and XT (2 f16, 3 bf16; last, only where
// the step's input is the plan's half activation dtype and not WT) the source's dtype, f32
// without it.
#include "dsc_common.cuh"

#ifdef XT
#define CONVERT_ACTIVATIONS_XT XT
#else
#define CONVERT_ACTIVATIONS_XT DSC_DT_F32
#endif

static_assert(WT == DSC_DT_F16 || WT == DSC_DT_BF16 || (WT == DSC_DT_F32 && CONVERT_ACTIVATIONS_XT != DSC_DT_F32),
              "convert_activations: WT must be f16 or bf16, or f32 from a half XT");

extern "C" __global__ void convert_activations(const void *src, void *dst, long long count) {
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = first; i < count; i += stride)
    dsc_store_float<WT>(dst, i, dsc_load_float<CONVERT_ACTIVATIONS_XT>(src, i));
}
