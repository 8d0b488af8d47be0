// The kernels with AVX-512 (F): compiled for AVX-512F and AVX2 (a target region:
// TargetRegion.h), and run only where the CPU has AVX-512F. 16 lanes halve the instructions per
// weight, which is what bounds the narrow dtypes' decode.
#include "ops/fast/TargetRegion.h"

DSRT_TARGET_REGION_BEGIN("avx512f,avx2,fma,f16c")
#include "ops/fast/VecAvx512.h"

namespace dsrt::ops::fast {

detail::IsaKernels avx512Kernels() { return detail::kernelsOf<Avx512>("avx512"); }

} // namespace dsrt::ops::fast

DSRT_TARGET_REGION_END
