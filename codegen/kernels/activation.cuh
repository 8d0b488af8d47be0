// tfm.activation (GATED 0): y = act(a); tfm.gated_act (GATED 1): y = act(a) * b. f32,
// elementwise over `count` values, four at a time when the count and every pointer allow
// 16-byte accesses (the arena's slots are 64-byte aligned, so they normally do).
//
// Constants: ACT (a DSC_ACT_* code of dsc_common.cuh), GATED (0/1).
#include "dsc_common.cuh"

struct alignas(16) ActFloat4 {
  float x, y, z, w;
};

extern "C" __global__ void activation(const float *a, const float *b, float *y,
                                      long long count) {
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  if ((count & 3) == 0 && dsc_aligned16(a, GATED ? b : a, y)) {
    const ActFloat4 *a4 = reinterpret_cast<const ActFloat4 *>(a);
    const ActFloat4 *b4 = reinterpret_cast<const ActFloat4 *>(b);
    ActFloat4 *y4 = reinterpret_cast<ActFloat4 *>(y);
    for (long long i = first; i < count / 4; i += stride) {
      ActFloat4 v = a4[i];
      v.x = dsc_activate(ACT, v.x);
      v.y = dsc_activate(ACT, v.y);
      v.z = dsc_activate(ACT, v.z);
      v.w = dsc_activate(ACT, v.w);
      if (GATED) {
        const ActFloat4 g = b4[i];
        v.x *= g.x;
        v.y *= g.y;
        v.z *= g.z;
        v.w *= g.w;
      }
      y4[i] = v;
    }
    return;
  }
  for (long long i = first; i < count; i += stride) {
    float v = dsc_activate(ACT, a[i]);
    if (GATED)
      v *= b[i];
    y[i] = v;
  }
}
