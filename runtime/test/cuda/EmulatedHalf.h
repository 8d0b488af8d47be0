// dsc_common.cuh converts f16 with PTX (inline asm); on the host, the emulation tests
// replace those two instances with the runtime's conversions (exact f16 -> f32 and
// round-to-nearest-even f32 -> f16, as PTX's cvt). bf16 needs nothing: dsc_common.cuh
// converts it with integer arithmetic. Include after dsc_common.cuh, once per test.
#ifndef DSRT_TEST_CUDA_EMULATEDHALF_H
#define DSRT_TEST_CUDA_EMULATEDHALF_H

#include "core/Tensor.h"

#include <cstdint>

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

#endif
