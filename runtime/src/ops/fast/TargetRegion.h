// Internal to dsrt_ops: how a file compiles its kernels for one instruction set (DotAvx2.cpp,
// DotVnni.cpp, GemmInt8Amx.cpp, ...).
//
// Not with -mavx512f and the like on the whole file: then every inline function and template
// instantiation the file emits out of line (std::vector<int>::_M_fill_assign, say) is
// compiled for that set too, under the same weak symbol as every other file's copy, and the
// linker keeps one copy for the whole program. On 2026-12-04 an AMD EPYC without AVX-512
// (Zen 2) died of SIGILL in std::vector<int>::assign, called from the AVX2 kernel's file,
// whose copy came from DotInt4Vnni.cpp.
//
// Instead a file includes this header, and every header it needs from outside fast/'s
// kernel headers, first; then it opens a region:
//   DSRT_TARGET_REGION_BEGIN("avx2,fma,f16c")
//   #include "ops/fast/DotKernels.h"
//   ... the kernels, in an anonymous namespace, and the entry points ...
//   DSRT_TARGET_REGION_END
// Only the functions defined in the region are compiled for the set. Functions and templates
// declared before it (the standard library's, FastKernels.h's) keep the baseline where the
// file instantiates or emits them, and still inline into the region's functions. A header
// first included inside the region would declare its templates for the set: that is why the
// standard headers the kernel headers use are included here. The test
// dsrt-ops.SharedCodeIsBaseline (runtime/test/ops/check_shared_code.py) disassembles every
// object of the runtime and fails on a weak function with an instruction past x86-64's
// baseline.
#ifndef DSRT_OPS_FAST_TARGETREGION_H
#define DSRT_OPS_FAST_TARGETREGION_H

#include "ops/fast/AmxTileConfig.h"
#include "ops/fast/FastKernels.h"
#include "ops/fast/QuantizedActivations.h"

#include "core/Tensor.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <immintrin.h>
#include <type_traits>
#include <vector>

#define DSRT_TARGET_STRINGIFY(text) #text
#if defined(__clang__)
#define DSRT_TARGET_REGION_BEGIN(features)                                                       \
  _Pragma(DSRT_TARGET_STRINGIFY(                                                                 \
      clang attribute push(__attribute__((target(features))), apply_to = function)))
#define DSRT_TARGET_REGION_END _Pragma("clang attribute pop")
#else
#define DSRT_TARGET_REGION_BEGIN(features)                                                       \
  _Pragma("GCC push_options") _Pragma(DSRT_TARGET_STRINGIFY(GCC target(features)))
#define DSRT_TARGET_REGION_END _Pragma("GCC pop_options")
#endif

#endif
