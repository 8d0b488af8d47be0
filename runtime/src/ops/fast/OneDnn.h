// Internal to the fast kernels: oneDNN, opened at run time (libdsrt needs no oneDNN to build
// or load), for the long prompts' GEMMs that Linear.cpp hands it.
#ifndef DSRT_OPS_FAST_ONEDNN_H
#define DSRT_OPS_FAST_ONEDNN_H

#include <cstdint>

namespace dsrt::ops::fast {

// oneDNN's row-major sgemm and bf16 x bf16 -> f32 GEMM, and libgomp's thread count where
// oneDNN runs on OpenMP.
using SgemmFn = int (*)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                        const float *, int64_t, float, float *, int64_t);
using GemmBf16Fn = int (*)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *,
                           int64_t, const uint16_t *, int64_t, float, float *, int64_t);
struct OneDnn {
  SgemmFn sgemm = nullptr;
  GemmBf16Fn gemmBf16 = nullptr;
  int (*ompMaxThreads)() = nullptr;
  void (*ompSetThreads)(int) = nullptr;
};

// The library, loaded once; every pointer null where it is missing. DSRT_DNNL names it;
// DSRT_DNNL=none turns it off (the kernels then use dotRows).
const OneDnn &oneDnn();

// One single-threaded sgemm: C[M, N] = A[M, K] . B[N, K]^T, row-major. The pool already
// runs one call per thread, so OpenMP must not start a team of its own inside.
void sgemmNT(const OneDnn &dnn, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
             const float *b, int64_t ldb, float *c, int64_t ldc);

// The same product in bf16 (f32 sums): a and b are bf16 rows.
void gemmBf16NT(const OneDnn &dnn, int64_t M, int64_t N, int64_t K, const uint16_t *a,
                int64_t lda, const uint16_t *b, int64_t ldb, float *c, int64_t ldc);

} // namespace dsrt::ops::fast

#endif
