// tfm.residual_add: y = a + b, f32, elementwise over `count` values, four at a time when
// the count and every pointer allow 16-byte accesses. No constants.
#include "dsc_common.cuh"

struct alignas(16) ResidualFloat4 {
  float x, y, z, w;
};

extern "C" __global__ void residual_add(const float *a, const float *b, float *y,
                                        long long count) {
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  if ((count & 3) == 0 && dsc_aligned16(a, b, y)) {
    const ResidualFloat4 *a4 = reinterpret_cast<const ResidualFloat4 *>(a);
    const ResidualFloat4 *b4 = reinterpret_cast<const ResidualFloat4 *>(b);
    ResidualFloat4 *y4 = reinterpret_cast<ResidualFloat4 *>(y);
    for (long long i = first; i < count / 4; i += stride) {
      const ResidualFloat4 u = a4[i], v = b4[i];
      y4[i] = ResidualFloat4{u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w};
    }
    return;
  }
  for (long long i = first; i < count; i += stride)
    y[i] = a[i] + b[i];
}
