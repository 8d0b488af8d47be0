// The kernels with AVX-512 (F): this file alone is compiled with -mavx512f (and AVX2's
// flags), and runs only where the CPU has AVX-512F. 16 lanes halve the instructions per
// weight, which is what bounds the narrow dtypes' decode.
#include "ops/fast/VecAvx512.h"

namespace dsrt::ops::fast {

detail::IsaKernels avx512Kernels() { return detail::kernelsOf<Avx512>("avx512"); }

} // namespace dsrt::ops::fast
