// The dot-product kernel with AVX2, FMA and F16C: compiled for them (a target region:
// TargetRegion.h), and run only where isa() says the CPU has them.
#include "ops/fast/TargetRegion.h"

DSRT_TARGET_REGION_BEGIN("avx2,fma,f16c")
#include "ops/fast/DotKernels.h"

namespace dsrt::ops::fast {
namespace {

struct Avx2 {
  static constexpr int kWidth = 8;
  static constexpr int kBlockRows = 3;
  using V = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  static V broadcast(float v) { return _mm256_set1_ps(v); }
  static V load(const float *p) { return _mm256_loadu_ps(p); }
  static V load(const uint16_t *p, detail::F16Tag) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  }
  static V load(const uint16_t *p, detail::BF16Tag) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static V load(const int8_t *p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))));
  }
  // Each byte twice, widened to a lane each, then the even lanes keep the low nibble and the
  // odd ones shift the high one down.
  static V loadInt4(const uint8_t *p) {
    int32_t bytes;
    std::memcpy(&bytes, p, sizeof bytes);
    __m128i packed = _mm_cvtsi32_si128(bytes);
    __m256i lanes = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(packed, packed));
    lanes = _mm256_srlv_epi32(lanes, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
    lanes = _mm256_sub_epi32(_mm256_and_si256(lanes, _mm256_set1_epi32(0xF)),
                             _mm256_set1_epi32(8));
    return _mm256_cvtepi32_ps(lanes);
  }
  static V lowNibbles(const uint8_t *p) {
    __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(bytes, _mm_set1_epi8(0xF))));
  }
  static V highNibbles(const uint8_t *p) {
    __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0xF))));
  }
  static V fma(V a, V b, V acc) { return _mm256_fmadd_ps(a, b, acc); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static void store(float *p, V v) { _mm256_storeu_ps(p, v); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V floor(V a) { return _mm256_floor_ps(a); }
  static V powerOfTwo(V n) {
    __m256i bits = _mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(bits, 23));
  }
  static float sum(V v) {
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    half = _mm_add_ss(half, _mm_movehdup_ps(half));
    return _mm_cvtss_f32(half);
  }
};

} // namespace

detail::IsaKernels avx2Kernels() { return detail::kernelsOf<Avx2>("avx2"); }

} // namespace dsrt::ops::fast

DSRT_TARGET_REGION_END
