// tfm.activation (GATED 0): y = act(a); tfm.gated_act (GATED 1): y = act(a) * b;
// tfm.gated_act_packed (GATED 1, half > 0): a is [rows, 2 * half], each row the gate then
// the up projection (a joined gate-up linear), b is unused, y = act(gate) * up, [rows, half].
// f32, elementwise over `count` results, four at a time when the row length, the count and
// every pointer allow 16-byte accesses (the arena's slots are 64-byte aligned, so they
// normally do).
//
// Constants: ACT (a DSC_ACT_* code of dsc_common.cuh), GATED (0/1).
#include "dsc_common.cuh"

struct alignas(16) ActFloat4 {
  float x, y, z, w;
};

extern "C" __global__ void activation(const float *a, const float *b, float *y,
                                      long long count, long long half) {
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const bool packed = GATED && half > 0;
  // Result i reads the gate at gate_at(i) and the up projection `half` after it (packed), or
  // a[i] and b[i].
  const bool vector = (count & 3) == 0 && (!packed || (half & 3) == 0) &&
                      dsc_aligned16(a, GATED && !packed ? b : a, y);
  if (vector) {
    ActFloat4 *y4 = reinterpret_cast<ActFloat4 *>(y);
    for (long long i = first; i < count / 4; i += stride) {
      const long long at = packed ? (4 * i / half) * 2 * half + (4 * i) % half : 4 * i;
      ActFloat4 v = *reinterpret_cast<const ActFloat4 *>(a + at);
      v.x = dsc_activate(ACT, v.x);
      v.y = dsc_activate(ACT, v.y);
      v.z = dsc_activate(ACT, v.z);
      v.w = dsc_activate(ACT, v.w);
      if (GATED) {
        const ActFloat4 g = *reinterpret_cast<const ActFloat4 *>(packed ? a + at + half : b + at);
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
    const long long at = packed ? (i / half) * 2 * half + i % half : i;
    float v = dsc_activate(ACT, a[at]);
    if (GATED)
      v *= packed ? a[at + half] : b[at];
    y[i] = v;
  }
}
