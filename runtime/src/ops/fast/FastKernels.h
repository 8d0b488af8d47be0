// Internal to dsrt_ops: the CPU backend's fast kernels (docs/cpu-backend.md): the linear
// layers (tfm.linear, tfm.lm_head), the activations and attention's sums. Weights are
// read in the dtype the plan stores them in (f32, f16, bf16, or int8 with per-group scales),
// so a session keeps them narrow; products accumulate in fp32. The reference kernels in
// Transformer*.cpp stay the oracle they are tested against.
#ifndef DSRT_OPS_FAST_FASTKERNELS_H
#define DSRT_OPS_FAST_FASTKERNELS_H

#include "core/Tensor.h"

#include <cfloat>
#include <cstdint>
#include <cstring>
#include <functional>

namespace dsrt::ops::fast {

// Requests the cache line holding `address` into L1. An asm statement, not
// __builtin_prefetch: GCC deletes a loop that only prefetches (a loop without side effects
// may be assumed to end, and then removed), which it did to the decode attention's and the
// int8 dot kernel's requests, so that they never ran.
inline void requestLine(const void *address) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char *>(address)));
#else
  __builtin_prefetch(address);
#endif
}

// Requests the line into L2 only (prefetcht2). Where a kernel streams scattered runs that the
// hardware's prefetchers do not follow (the paged KV blocks), requests into L1 held the
// core's few L1 fill buffers until each line came, and the kernel's own loads queued behind
// them: the GPT-2 int8 engine's decode attention took 6-8% less with requests into L2.
inline void requestLineL2(const void *address) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht2 %0" : : "m"(*static_cast<const char *>(address)));
#else
  __builtin_prefetch(address, 0, 1);
#endif
}

// What takes a block of values onto int8 codes: 127 over its largest magnitude, or 0 where
// the block is zeros or so small (largest below 127 / FLT_MAX, about 3.7e-37) that the
// factor overflows: an infinite factor made every code a saturated -128 (and the VNNI
// kernels' surplus, summed in int32, wrapped). Every int8 quantizer of activations and of the
// KV cache takes it, so that they give the same codes.
inline float int8CodeFactor(float largest) {
  const float factor = largest > 0 ? 127.0f / largest : 0.0f;
  return factor <= FLT_MAX ? factor : 0.0f;
}

// The activations of tfm.activation, tfm.gated_act and the linear epilogue.
enum class Activation { GeluErf, GeluTanh, GeluQuick, Silu, Relu, Relu2 };

// y[i] = act(y[i]) for i < n, vectorised for the CPU's instruction set: exp within 2 ulp
// and erf within 1.2e-7 relative instead of libm's (the reference kernels use libm).
void activate(Activation kind, float *y, int64_t n);

// c[r * ldc + n] = Σ_k a[r * aRow + k * aDepth] b[k * ldb + n] for r < rows, n < cols,
// k < depth (or c += that, with `accumulate`), all f32, the sums in registers over the whole
// depth in k's order: the tiled attention's key-query and probability-value tiles (a may be
// a transposed tile: aRow 1).
void multiplyTile(const float *a, int64_t aRow, int64_t aDepth, const float *b, int64_t ldb,
                  int64_t rows, int64_t depth, int64_t cols, float *c, int64_t ldc,
                  bool accumulate);

// y[i] += x[i] for i < n, or y[i] = (y[i] + x[i]) + z[i] (in that order, each sum rounded
// once as the scalar loops round them), vectorised for the CPU's instruction set: the linear
// epilogue's bias and residual, which the baseline ISA that compiles the ops ran 4 floats at
// a time, a pass each (7% of a GPT-2 int8 prompt's profile, 4% with these).
void addTo(float *y, const float *x, int64_t n);
void addTo(float *y, const float *x, const float *z, int64_t n);

// y[i] = e^y[i] for i < n, vectorised, within 2 ulp where e^y is a normal float, 0 from -88
// down (attention's softmax).
void exponentiate(float *y, int64_t n);

// out[d] = Σ_t weights[t] rows[t * width + d] for d < width, t < count, in fp32, vectorised
// (attention's probabilities times the values): one FMA chain per d in t's order, from 0 or,
// with `accumulate`, from out[d] (a paged cache's blocks one after another).
void weightedSum(const float *weights, const float *rows, int64_t count, int64_t width,
                 float *out, bool accumulate = false);
// The same over rows stored as f32, f16 or bf16 (a half KV cache's values), widened as they
// are read.
void weightedSum(const float *weights, const void *rows, DType rowType, int64_t count,
                 int64_t width, float *out, bool accumulate = false);

// scores[t] = Σ_d query[d] keys[t * width + d] for t < count, keys stored as f32, f16 or
// bf16 (a decode step's query against a run of cached keys), in the attention's one score
// arithmetic (DotKernels.h's keyScoresBy), which scoreTile gives prompt tiles bit for bit
// (AVX-512 reduces sixteen keys' sums together).
void keyScores(const float *query, const void *keys, DType keyType, int64_t count,
               int64_t width, float *scores);

// weightedSum, accumulating, of `heads` heads at once: weights[h] times the `count` rows at
// rows[h] into out[h], each head's sums weightedSum's bits (a paged block's value slices of
// every head in one call, two heads' chains interleaved).
void weightedSumHeads(const float *const *weights, const void *const *rows, DType rowType,
                      int64_t heads, int64_t count, int64_t width, float *const *out);

// keyScores and weightedSum over an int8 KV cache's rows (codes [count, width], `groups`
// f32 scales a row): bit for bit what they compute over the rows widened to f32 (each value
// q * its group's scale, widenRows' products), without writing the widened rows. `width` a
// multiple of 16: a scalar tail's product and sum are the compiler's to fuse or not, and it
// chose differently for the two (at width 40).
void keyScoresInt8(const float *query, const int8_t *codes, const float *scales,
                   int64_t groups, int64_t count, int64_t width, float *scores);
void weightedSumInt8(const float *weights, const int8_t *codes, const float *scales,
                     int64_t groups, int64_t count, int64_t width, float *out,
                     bool accumulate = false);

// y = (x - mean) / sqrt(var + epsilon) * scale + bias over one row of n, in fp32
// (vectorised; the reference accumulates in fp64). With `rms`, mean = 0 and var is the mean
// square (RMS norm); `bias` may be null.
void normalizeRow(const float *x, int64_t n, const float *scale, const float *bias, bool rms,
                  float epsilon, float *y);

// A [out, in] weight matrix as stored. int8: value[o, k] = q[o, k] * scales[o, k / (in /
// groups)]. int4 (dtype U8, docs/int4.md): q the code at nibble k of the
// row (two to a byte, the even k low) minus 8, the rows in / 2 bytes, groups of even size.
// The scales are read as the plan stores them (f32, f16 or bf16: the compute dtype), so a
// session keeps them narrow too: at one scale per 32 int4 weights, f32 scales are a fifth
// of the bytes a decode step reads, f16 ones a ninth.
struct LinearWeights {
  DType dtype = DType::F32;  // F32, F16, BF16, I8, or U8 for int4
  const void *data = nullptr;
  int64_t out = 0, in = 0;
  const void *scales = nullptr;      // int8 and int4: [out, groups]
  DType scaleType = DType::F32;      // F32, F16 or BF16
  int64_t groups = 1;
  // int8 weights whose plan asks for int8 activations (an int4 plan's int8 layers, its LM
  // head: `int8_activations`): they take them as its int4 layers do (int4VnniAvailable).
  bool int8Activations = false;

  float scale(int64_t index) const {
    if (scaleType == DType::F32)
      return static_cast<const float *>(scales)[index];
    const uint16_t bits = static_cast<const uint16_t *>(scales)[index];
    return scaleType == DType::F16 ? halfBitsToFloat(bits) : bfloat16BitsToFloat(bits);
  }

  // Inline, exact for every half (subnormals included): a scale is read once per group.
  static float halfBitsToFloat(uint16_t half) {
    uint32_t bits = static_cast<uint32_t>(half & 0x7FFFu) << 13;
    const uint32_t exponent = bits & 0x0F800000u;
    bits += (127u - 15u) << 23;
    float value;
    if (exponent == 0x0F800000u) {  // infinity or NaN
      bits += (128u - 16u) << 23;
    } else if (exponent == 0) {  // zero or subnormal: let the FPU normalise it
      bits += 1u << 23;
      std::memcpy(&value, &bits, sizeof value);
      value -= 6.103515625e-05f;  // 2^-14
      std::memcpy(&bits, &value, sizeof value);
    }
    bits |= static_cast<uint32_t>(half & 0x8000u) << 16;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  static float bfloat16BitsToFloat(uint16_t half) {
    const uint32_t bits = static_cast<uint32_t>(half) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
};

// The prompt tiles' attention in the decode rows' arithmetic, so that a token's attention does
// not depend on how its sequence was cut into steps (TransformerTiledAttention.cpp):
// scoreTile: scores[j * ld + r] = keyScores(query r, key j) for keys [count, width] (f32 rows)
// and queriesT [width, ld] (query r in column r; ld a multiple of 16), bit for bit.
void scoreTile(const float *keys, int64_t count, int64_t width, const float *queriesT,
               int64_t ld, float *scores);
// columnMaxima: maximum[r] = max(maximum[r], scores[j * ld + r] for j < keys), as a decode
// row's std::max picks. softmaxColumns: scores[j * ld + r] = e^(s - maximum[r]) (0 for -inf),
// added onto sum[r] in j's order, then divided by the sum: the decode row's exponentiate, sum
// and division, element for element.
void columnMaxima(const float *scores, int64_t keys, int64_t ld, float *maximum);
void softmaxColumns(float *scores, int64_t keys, int64_t ld, const float *maximum, float *sum);

// Rows [first, first + count) of `w` as f32 at out ([count, w.in]), int8 and int4 scaled.
void widenRows(const LinearWeights &w, int64_t first, int64_t count, float *out);

// y[r, o] = sum_k x[r, k] * w[o, k] for r < rows and o in [begin, end), written at
// y[r * ldy + o]: each weight row is read once for every row of x (the decode kernel, where
// reading the weights is the cost).
void dotRows(const float *x, int64_t rows, const LinearWeights &w, int64_t begin, int64_t end,
             float *y, int64_t ldy);

// dotRows with the portable (scalar) kernel, whatever the CPU has: what the tests compare
// the AVX2 kernel with.
void dotRowsPortable(const float *x, int64_t rows, const LinearWeights &w, int64_t begin,
                     int64_t end, float *y, int64_t ldy);

// y = x . w^T for x [rows, in] and y [rows, out], over the thread pool; after each range
// [begin, end) of output features is computed for every row, `epilogue(begin, end)` runs on
// the same thread (bias, activation, residual while the values are in cache). Where the
// caller holds x in bf16 (a bf16 plan's activations), `xBf16` gives it: the bf16 GEMM reads
// it as it is, and x may then be null when bf16PromptGemm(w.dtype, rows) holds.
// `rowInvariant` (ops::SessionState::rowInvariant): every row multiplied as it would be
// alone, whatever `rows` is: no bf16 GEMM, and int8 activations at any row count where one
// row takes them; sgemm still replaces the dot kernels from the same thresholds, which
// changes only the order of f32 sums, except for integer weights whose x stays f32 for the
// layer's shape alone (shapeKeepsIntegerXFloat): those rows are summed as each alone, since
// in a plan whose other layers quantize x they would be its only rows that vary with the
// step. `exactFloatRows` (ops::SessionState::exactFloatRows)
// takes that too: float weights' rows of x are each summed in the order of one row alone
// (dotRowsAsAlone, and no bf16 GEMM), the same bits at any row count.
void linear(const float *x, int64_t rows, const LinearWeights &w, float *y,
            const std::function<void(int64_t, int64_t)> &epilogue,
            const uint16_t *xBf16 = nullptr, bool rowInvariant = false,
            bool exactFloatRows = false);

// What linear() runs on this machine, for logs and benchmarks: "onednn sgemm + avx512".
const char *linearKernelsDescription();

// Whether dotRows multiplies int4 weights in groups of `groupSize` by int8-quantized
// activations for `rows` rows of x (DotInt4Vnni.cpp where the CPU has AVX-512 VNNI, else
// DotInt4Avx2.cpp with AVX2): up to 64 rows, groups of whole 32-input blocks, unless
// DSRT_INT4_ACTIVATIONS=f32 (docs/int4.md); any number of rows where `rowInvariant`.
bool int4QuantizesActivations(int64_t groupSize, int64_t rows, bool rowInvariant = false);
// The same for int8 weights (DotVnni.cpp): up to 64 rows, groups of whole 64-input chunks or
// of 32 (over whole chunks), where DSRT_INT8_ACTIVATIONS=int8 (or DSRT_CPU_ISA=avx512-vnni)
// asks for it (docs/int8.md), or the weights do (LinearWeights::int8Activations) and the
// CPU takes int4's.
bool int8QuantizesActivations(const LinearWeights &w, int64_t rows, bool rowInvariant = false);
// Whether integer weights keep x in f32 only because of their shape, where the kernels would
// quantize it to int8 otherwise: int8 groups that are not whole 64-input chunks (nor 32s
// over whole chunks), int4 groups that are not whole blocks of 32.
bool shapeKeepsIntegerXFloat(const LinearWeights &w);

// Whether linear() multiplies `rows` rows of x by weights of this dtype in bf16 (oneDNN's
// bf16 GEMM: x, and weights not stored in bf16, rounded to bf16; sums in f32): prompts of
// bf16, f16, int8 and int4 weights where the CPU has AVX-512 BF16 or AMX, or of any float
// weights with DSRT_PREFILL_GEMM=bf16 (docs/cpu-backend.md, "bf16 GEMMs"). Where
// `rowInvariant`, only bf16 weights against an x given in bf16 (`xInBf16`), which round
// nothing.
bool bf16PromptGemm(DType weights, int64_t rows, bool rowInvariant = false,
                    bool xInBf16 = false);

// The instruction set of the kernels that run here: "avx512" (AVX-512F), "avx2"
// (AVX2+FMA+F16C) or "scalar", the widest the CPU has unless DSRT_CPU_ISA caps it; or
// "avx512-vnni" (AVX-512F+BW+VNNI, DotVnni.cpp) where DSRT_CPU_ISA asks for it.
const char *cpuIsa();

} // namespace dsrt::ops::fast

#endif
