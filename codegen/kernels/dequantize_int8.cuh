// The int8 linear's GEMM path (rows > GEMV_MAX_ROWS; docs/cuda-backend.md, "int8 linears"):
// the weight dequantized once per GEMM into step scratch, w^[n, k] = q[n, k] *
// scales[n, k / group], stored in the scales' dtype SDT, which is the dtype cuBLASLt then
// multiplies in (f16/bf16 on the tensor cores, f32 in f32). Prefill is compute bound: this
// pass reads n*k bytes and writes n*k*sizeof(SDT) against the GEMM's 2*m*n*k flops.
//
// Constants: SDT (the scales' dtype and the output's: 1 f32, 2 f16, 3 bf16), GS (the group
// size along k; 0: one group per row, whatever the run's k).
// q is [n, k] int8, scales [n, groups] with groups = GS ? k / GS : 1 (the launcher checked
// that GS divides k), out [n, k]. Blocks stride over the rows, threads over a row.
#include "dsc_common.cuh"

#if !(SDT == DSC_DT_F32 || SDT == DSC_DT_F16 || SDT == DSC_DT_BF16)
#error "dequantize_int8: SDT must be 1 (f32), 2 (f16) or 3 (bf16)"
#endif
#if GS < 0
#error "dequantize_int8: GS must be 0 (one group per row) or the group size"
#endif

extern "C" __global__ void dequantize_int8(const signed char *q, const void *scales, void *out,
                                           long long n, long long k) {
  const long long groups = GS > 0 ? k / (GS > 0 ? GS : 1) : 1;
  for (long long row = blockIdx.x; row < n; row += gridDim.x) {
    const long long row_start = row * k, scale_row = row * groups;
    for (long long col = threadIdx.x; col < k; col += blockDim.x) {
      const long long group = GS > 0 ? col / (GS > 0 ? GS : 1) : 0;
      const float scale = dsc_load_float<SDT>(scales, scale_row + group);
      dsc_store_float<SDT>(out, row_start + col,
                           static_cast<float>(q[row_start + col]) * scale);
    }
  }
}
