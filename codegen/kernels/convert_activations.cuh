// f32 activations converted to the weight dtype for cuBLASLt, which multiplies equal types
// (f16/bf16 weights on the tensor cores): dst[i] = (WT) src[i], round to nearest even.
//
// Constants: WT (2 f16, 3 bf16).
#include "dsc_common.cuh"

static_assert(WT == DSC_DT_F16 || WT == DSC_DT_BF16, "convert_activations: WT must be f16 or bf16");

extern "C" __global__ void convert_activations(const float *src, unsigned short *dst,
                                               long long count) {
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = first; i < count; i += stride)
    dsc_store_float<WT>(dst, i, src[i]);
}
