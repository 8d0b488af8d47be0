// dsc_common.cuh converts f16 with PTX (inline asm); on the host, the emulation tests
// replace those two instances with the runtime's conversions (exact f16 -> f32 and
// round-to-nearest-even f32 -> f16, as PTX's cvt). bf16 needs nothing: dsc_common.cuh
// converts it with integer arithmetic. It also defines the tensor cores' warp-wide product
// (dsc_mma_m16n8k16) from the PTX ISA's fragment layouts, written here apart from the
// kernels that use them. Include after dsc_common.cuh (and CudaEmulation.h), once per test.
#ifndef DSRT_TEST_CUDA_EMULATEDHALF_H
#define DSRT_TEST_CUDA_EMULATEDHALF_H

#include "core/Tensor.h"

#include <cstdint>
#include <cstring>

template <> inline float dsc_load_float<DSC_DT_F16>(const void *data, long long index) {
  float value = 0;
  dsrt::convertFloats(dsrt::DType::F16, static_cast<const uint16_t *>(data) + index,
                      dsrt::DType::F32, &value, 1);
  return value;
}
template <>
inline void dsc_store_float<DSC_DT_F16>(void *data, long long index, float value) {
  dsrt::convertFloats(dsrt::DType::F32, &value, dsrt::DType::F16,
                      static_cast<uint16_t *>(data) + index, 1);
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: the warp's fragments gathered, the
// 16 x 8 product summed in double from the exact products of the halves (the hardware sums
// in f32 in an order of its own) and added to each lane's accumulators. Fragment layouts
// (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), lane l, g = l / 4,
// t = l % 4: A's register r holds row g + 8 (r & 1), columns 2t + 8 (r >> 1) and the next;
// B's register r holds rows 2t + 8r and the next, column g; D's element e is row g + 8 (e >> 1),
// column 2t + (e & 1).
template <int DT>
void dsc_emulated_mma_m16n8k16(float *d, const unsigned int *a, const unsigned int *b) {
  uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  uint32_t all[32][cuda_emulation::kGatherWords];
  cuda_emulation::gatherWarp(mine, 6, all);
  auto widen = [](uint32_t word, int half) {
    const uint16_t bits = static_cast<uint16_t>(half ? word >> 16 : word & 0xffffu);
    return static_cast<double>(dsc_load_float<DT>(&bits, 0));
  };
  double A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r)
      for (int half = 0; half < 2; ++half)
        A[g + 8 * (r & 1)][2 * t + 8 * (r >> 1) + half] = widen(all[lane][r], half);
    for (int r = 0; r < 2; ++r)
      for (int half = 0; half < 2; ++half)
        B[2 * t + 8 * r + half][g] = widen(all[lane][4 + r], half);
  }
  const int lane = static_cast<int>(cuda_emulation::threadIdx.x % 32), g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), column = 2 * t + (e & 1);
    double sum = d[e];
    for (int k = 0; k < 16; ++k)
      sum += A[row][k] * B[k][column];
    d[e] = static_cast<float>(sum);
  }
}

#endif
