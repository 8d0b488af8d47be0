// The int4 linear's GEMM path (rows > GEMV_MAX_ROWS; docs/cuda-backend.md, "int4 linears"),
// as dequantize_int8.cuh's: the weight dequantized once per GEMM (part) into step scratch,
// w^[n, k] = (code[n, k] - 8) * scales[n, k / group], stored in the scales' dtype SDT, which
// cuBLASLt then multiplies in. The codes are the plan's u8 [n, k / 2], two per byte, the
// even input in the low nibble (docs/int4.md).
//
// Constants: SDT (the scales' dtype and the output's: 1 f32, 2 f16, 3 bf16), GS (the group
// size along k, even; 0: one group per row, whatever the run's k).
// q is [n, k / 2] bytes, scales [n, groups] with groups = GS ? k / GS : 1 (the launcher
// checked that k is even and GS divides it), out [n, k]. Blocks stride over the rows,
// threads over a row's bytes, each writing the byte's two weights: an even group size keeps
// both in one group.
#include "dsc_common.cuh"

#if !(SDT == DSC_DT_F32 || SDT == DSC_DT_F16 || SDT == DSC_DT_BF16)
#error "dequantize_int4: SDT must be 1 (f32), 2 (f16) or 3 (bf16)"
#endif
#if GS < 0 || GS % 2 != 0
#error "dequantize_int4: GS must be 0 (one group per row) or the group size, even"
#endif

extern "C" __global__ void dequantize_int4(const unsigned char *q, const void *scales,
                                           void *out, long long n, long long k) {
  const long long groups = GS > 0 ? k / (GS > 0 ? GS : 1) : 1;
  const long long row_bytes = k / 2;
  for (long long row = blockIdx.x; row < n; row += gridDim.x) {
    const long long scale_row = row * groups;
    for (long long byte = threadIdx.x; byte < row_bytes; byte += blockDim.x) {
      const unsigned int codes = q[row * row_bytes + byte];
      const long long col = 2 * byte;
      const long long group = GS > 0 ? col / (GS > 0 ? GS : 1) : 0;
      const float scale = dsc_load_float<SDT>(scales, scale_row + group);
      const long long at = row * k + col;
      dsc_store_float<SDT>(out, at, static_cast<float>(static_cast<int>(codes & 0xfu) - 8) * scale);
      dsc_store_float<SDT>(out, at + 1,
                           static_cast<float>(static_cast<int>(codes >> 4) - 8) * scale);
    }
  }
}
