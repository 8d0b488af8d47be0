// Internal to the fast kernels: which instruction set's kernels (DotKernels.h's IsaKernels)
// the CPU runs, for the files outside the target regions (Linear.cpp, IsaKernels.cpp).
#ifndef DSRT_OPS_FAST_ISACHOICE_H
#define DSRT_OPS_FAST_ISACHOICE_H

#include "ops/fast/DotKernels.h"

namespace dsrt::ops::fast::detail {

// The widest kernels the CPU has, capped by DSRT_CPU_ISA (scalar, avx2 or avx512: to compare
// them, or on a CPU that misreports). int8 and int4 weights meet int8-quantized activations
// up to 64 rows wherever AVX-512 VNNI is there (Linear.cpp's int8QuantizesActivations and
// int4QuantizesActivations); DSRT_CPU_ISA=avx512-vnni names the same kernels.
const IsaKernels &isa();

} // namespace dsrt::ops::fast::detail

#endif
