// FastKernels.h's entry points to the instruction set's kernels (the activations, the norms,
// the attention's pieces, the rows' widening), and the choice of that set. Linear.cpp chooses
// among the linear kernels.
#include "ops/fast/IsaChoice.h"
#include "ops/fast/VecScalar.h"

#include <cstdlib>
#include <string>

namespace dsrt::ops::fast {

detail::IsaKernels avx2Kernels();        // DotAvx2.cpp
detail::IsaKernels avx512Kernels();      // DotAvx512.cpp
detail::IsaKernels avx512VnniKernels();  // DotVnni.cpp

namespace detail {

const IsaKernels &isa() {
  static const IsaKernels chosen = [] {
    const char *cap = std::getenv("DSRT_CPU_ISA");
    const std::string order[] = {"scalar", "avx2", "avx512", "avx512-vnni"};
    int limit = 2;
    for (int i = 0; cap && i < 4; ++i)
      if (order[i] == cap)
        limit = i;
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("f16c");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
    bool vnni = avx512 && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vnni");
    if (limit >= 3 && vnni)
      return avx512VnniKernels();
    if (limit >= 2 && avx512)
      return avx512Kernels();
    if (limit >= 1 && avx2)
      return avx2Kernels();
    return kernelsOf<Scalar>("scalar");
  }();
  return chosen;
}

} // namespace detail

using detail::isa;

const char *cpuIsa() { return isa().name; }

void activate(Activation kind, float *y, int64_t n) { isa().activate(kind, y, n); }

void exponentiate(float *y, int64_t n) { isa().exponentiate(y, n); }

void addTo(float *y, const float *x, int64_t n) { isa().addTo(y, x, nullptr, n); }

void addTo(float *y, const float *x, const float *z, int64_t n) { isa().addTo(y, x, z, n); }

void multiplyTile(const float *a, int64_t aRow, int64_t aDepth, const float *b, int64_t ldb,
                  int64_t rows, int64_t depth, int64_t cols, float *c, int64_t ldc,
                  bool accumulate) {
  if (rows > 0 && cols > 0)
    isa().multiplyTile(a, aRow, aDepth, b, ldb, rows, depth, cols, c, ldc, accumulate);
}

void scoreTile(const float *keys, int64_t count, int64_t width, const float *queriesT,
               int64_t ld, float *scores) {
  isa().scoreTile(keys, count, width, queriesT, ld, scores);
}

void columnMaxima(const float *scores, int64_t keys, int64_t ld, float *maximum) {
  isa().columnMaxima(scores, keys, ld, maximum);
}

void softmaxColumns(float *scores, int64_t keys, int64_t ld, const float *maximum, float *sum) {
  isa().softmaxColumns(scores, keys, ld, maximum, sum);
}

void widenRows(const LinearWeights &w, int64_t first, int64_t count, float *out) {
  isa().widenRows(w, first, count, out);
}

void keyScores(const float *query, const void *keys, DType keyType, int64_t count,
               int64_t width, float *scores) {
  if (count > 0)
    isa().keyScores(query, keys, keyType, count, width, scores);
}

void weightedSumHeads(const float *const *weights, const void *const *rows, DType rowType,
                      int64_t heads, int64_t count, int64_t width, float *const *out) {
  isa().weightedSumHeads(weights, rows, rowType, heads, count, width, out);
}

void keyScoresInt8(const float *query, const int8_t *codes, const float *scales,
                   int64_t groups, int64_t count, int64_t width, float *scores) {
  if (count > 0)
    isa().keyScoresInt8(query, codes, scales, groups, count, width, scores);
}

void weightedSumInt8(const float *weights, const int8_t *codes, const float *scales,
                     int64_t groups, int64_t count, int64_t width, float *out,
                     bool accumulate) {
  isa().weightedSumInt8(weights, codes, scales, groups, count, width, out, accumulate);
}

void normalizeRow(const float *x, int64_t n, const float *scale, const float *bias, bool rms,
                  float epsilon, float *y) {
  isa().normalizeRow(x, n, scale, bias, rms, epsilon, y);
}

void weightedSum(const float *weights, const float *rows, int64_t count, int64_t width,
                 float *out, bool accumulate) {
  isa().weightedSum(weights, rows, DType::F32, count, width, out, accumulate);
}

void weightedSum(const float *weights, const void *rows, DType rowType, int64_t count,
                 int64_t width, float *out, bool accumulate) {
  isa().weightedSum(weights, rows, rowType, count, width, out, accumulate);
}


void dotRowsPortable(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                     int64_t end, float *y, int64_t ldy) {
  detail::dotRowsWith<Scalar>(x, rows, w, begin, end, y, ldy);
}

} // namespace dsrt::ops::fast
