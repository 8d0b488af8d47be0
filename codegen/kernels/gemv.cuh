// tfm.linear and tfm.lm_head for a few rows (decode; rows <= GEMV_MAX_ROWS): y[r, n] =
// act(x[r, :]·w[n, :] + bias[n]) + residual[r, n], in one launch.
//
// Decode is bound by reading the weight once, so the kernel is organised around that read:
// one warp per output feature (warps stride over the features, so any grid size covers N),
// each lane reading 16 bytes of the weight row at a time (4 f32, 8 f16/bf16 or 16 int8) and
// multiplying them with every row of x; f32 accumulation, a warp-shuffle reduction, then
// the fused epilogue. The x rows are staged in shared memory as f32 when the launcher gives
// rows*k*4 bytes of it (`staged`), and read from global memory (through the caches)
// otherwise. The vector path needs every weight row 16-byte aligned (k a multiple of the
// vector width and an aligned base); otherwise every load is scalar.
//
// int8 and int4 weights (WT 8 and 9; docs/cuda-backend.md, "int8 linears" and "int4
// linears"; the weights section below reads them): w^[n, k] = q[n, k] * scales[n, k /
// group], scales [n, groups] of dtype SDT. The weights of one load (16 int8, 32 int4) share one scale when
// GS is a multiple of them, so a lane reads one scale per load, sums q·x over it and scales
// the sum; with one group per row (GS 0) the scale is applied once, after the warp's
// reduction. Any other GS takes the scalar path (one scale per element). int8 reads half
// the weight bytes of f16, int4 a quarter.
//
// Constants: K (the plan's in-feature count), WT (weight dtype: 1 f32, 2 f16, 3 bf16, 8
// int8, 9 int4 as its stored u8), ACT (DSC_ACT_*), HAS_BIAS (0/1), BIAS_DT (the bias dtype;
// 1 without a bias), HAS_RESIDUAL (0/1), GATED (0/1, present only when 1: w is a joined
// [gate; up] of 2 * n_out rows and y = act(gate) * up, tfm.linear's `gated`); int8 and int4
// weights only: SDT (the scales' dtype: 1 f32, 2 f16, 3 bf16) and GS (the group size along
// k, the same on every tensor-parallel rank; 0: one group per row, whatever the run's k);
// SPLIT_K (1, 2, 4 or 8 warps per output feature, in every plan's kernels since it exists;
// see gemv_features).
// x, residual and y are f32; x is [rows, k], y [rows, n_out]. blockDim.x must be a multiple
// of 32. XT (2 f16, 3 bf16; last, only where the step's input is the plan's half activation
// dtype, dsc-activation-dtype) is x's dtype: staged rows are widened into shared memory as
// they are copied, unstaged ones as they are read. OUT_DT (likewise, only for a gated
// linear's half result) is y's: each output is rounded into it.
//
// NORM (1 rms, 2 layer; present only when set, with NORM_SCALE_DT and NORM_BIAS_DT, 0 for
// no bias: tfm.linear's norm prologue): with `normalize` (and then 32 floats more of
// dynamic shared memory, after the rows) the block normalises each staged row of x there
// first, as rms_norm.cuh / layer_norm.cuh would (f32, two passes
// for the layer norm's mean and variance), so the norm launches nothing. Only staged rows
// are normalised here: otherwise the launcher runs the norm kernel into scratch first and
// passes normalize 0.
#include "dsc_common.cuh"

// ---- Reading the weight of dtype WT: a 16-byte load unpacked to f32 (the vector path) or
// one weight at a time (the scalar path). ----
//
// Quantized weights (GEMV_QUANTIZED; scales [n, groups] of dtype SDT, group size GS along k,
// 0 for one group per row):
//   int8 (WT 8): w^[n, k] = q[n, k] * scale; q is [n, k] of i8.
//   int4 (WT 9, the plan's u8 [n, k / 2]; docs/int4.md): two codes per byte, the even input
//     in the low nibble, w^[n, k] = (code - 8) * scale: ONNX Runtime's MatMulNBits layout
//     without zero points, so one 16-byte load is 32 weights and k must be even.
// The unpacked values are the integers (q, code - 8), unscaled: the callers scale each
// load's sum, or the row's once (GS 0).
#ifndef DSC_DT_I8
#define DSC_DT_I8 8
#endif
#ifndef DSC_DT_U4
#define DSC_DT_U4 9  // the stored dtype u8 (schemas/plan.fbs), read as two int4 codes a byte
#endif
#define GEMV_QUANTIZED (WT == DSC_DT_I8 || WT == DSC_DT_U4)

#ifndef SDT
#define SDT DSC_DT_F32  // float weights have no scales
#endif
#ifndef GS
#define GS 0
#endif
#if GEMV_QUANTIZED && !(SDT == DSC_DT_F32 || SDT == DSC_DT_F16 || SDT == DSC_DT_BF16)
#error "gemv: int8 weights need SDT 1 (f32), 2 (f16) or 3 (bf16) scales, as int4 weights do"
#endif
#if GS < 0
#error "gemv: GS must be 0 (one group per row) or the group size"
#endif
#if WT == DSC_DT_U4 && GS % 2 != 0
#error "gemv: int4 groups must be even (two codes share a byte)"
#endif

// Weights per 16-byte load.
#define GEMV_VEC (WT == DSC_DT_U4 ? 32 : WT == DSC_DT_I8 ? 16 : 16 / (WT == DSC_DT_F32 ? 4 : 2))

struct alignas(16) GemvWords {
  unsigned int a, b, c, d;
};

// Byte `b` of `word` (or one nibble of it) as the float 2^23 + value, exactly: the value as
// the low mantissa bits of 2^23 (0x4B000000, whose ulp is 1). The integer-to-float
// conversion runs at a quarter of the FP32 rate and would bound the kernel below the
// memory's rate; this is a logic op and a subtraction.
static __device__ __forceinline__ float gemv_biased(unsigned int bits) {
  return __uint_as_float(0x4B000000u | bits);
}

// A load's weights are unpacked in GEMV_PIECES pieces of GEMV_PIECE: int4's 32 codes in two
// halves of 16, so that only 16 unpacked weights are live at once, as for int8.
#define GEMV_PIECES (WT == DSC_DT_U4 ? 2 : 1)
#define GEMV_PIECE (GEMV_VEC / GEMV_PIECES)

// Piece `piece` of the GEMV_VEC weights of one 16-byte load, as f32 (int8 and int4: the
// integers, unscaled).
static __device__ __forceinline__ void gemv_unpack(const GemvWords &v, int piece, float *out) {
  const unsigned int all[4] = {v.a, v.b, v.c, v.d};
  const unsigned int *words = all + piece * (4 / GEMV_PIECES);
#pragma unroll
  for (int i = 0; i < 4 / GEMV_PIECES; ++i) {
    if constexpr (WT == DSC_DT_F32) {
      out[i] = __uint_as_float(words[i]);
    } else if constexpr (WT == DSC_DT_I8) {
      // Little endian: element 4i + b is byte b of word i, two's complement. Flipping each
      // byte's sign bit gives q + 128 in [0, 255]; 2^23 + 128 off leaves q.
      const unsigned int biased = words[i] ^ 0x80808080u;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        out[4 * i + b] = gemv_biased((biased >> (8 * b)) & 0xffu) - 8388736.0f;
    } else if constexpr (WT == DSC_DT_U4) {
      // Byte b of word i holds elements 2(4i + b) (low nibble) and 2(4i + b) + 1 (high);
      // each code is in [0, 15], so 2^23 + 8 off leaves code - 8.
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        out[8 * i + 2 * b] = gemv_biased((words[i] >> (8 * b)) & 0xfu) - 8388616.0f;
        out[8 * i + 2 * b + 1] = gemv_biased((words[i] >> (8 * b + 4)) & 0xfu) - 8388616.0f;
      }
    } else {
      // Little endian: element 2i is the low half of word i.
      out[2 * i] = dsc_half_of_word<WT>(words[i], 0);
      out[2 * i + 1] = dsc_half_of_word<WT>(words[i], 1);
    }
  }
}

// Weight k of row `row_start / k_in` (row_start = row * k_in) as f32, scale included (the
// scalar path; with one group per row the scale is applied after the reduction).
static __device__ __forceinline__ float gemv_weight(const void *w, const void *scales,
                                                    long long row_start, long long scale_row,
                                                    int k) {
  if constexpr (GEMV_QUANTIZED) {
    float q;
    if constexpr (WT == DSC_DT_I8) {
      q = static_cast<float>(static_cast<const signed char *>(w)[row_start + k]);
    } else {
      // k_in is even, so row_start is too: the byte of element row_start + k.
      const unsigned int byte = static_cast<const unsigned char *>(w)[(row_start + k) >> 1];
      q = static_cast<float>(static_cast<int>((byte >> ((k & 1) * 4)) & 0xfu) - 8);
    }
    if (GS == 0)
      return q;
    return q * dsc_load_float<SDT>(scales, scale_row + k / (GS > 0 ? GS : 1));
  } else {
    return dsc_load_float<WT>(w, row_start + k);
  }
}

// An LM head's logit epilogue (LinearRules.cpp: only its kernels have the constants).
#ifndef LOGIT_SCALE_BITS
#define LOGIT_SCALE_BITS 0x3f800000
#endif
#ifndef LOGIT_CAP_BITS
#define LOGIT_CAP_BITS 0
#endif

// Only the kernels of gated linears have the constant (plans from before it keep theirs).
#ifndef GATED
#define GATED 0
#endif

#ifndef NORM
#define NORM 0
#endif
#if NORM != 0 && !(defined(NORM_SCALE_DT) && defined(NORM_BIAS_DT))
#error "gemv: a norm prologue needs NORM_SCALE_DT and NORM_BIAS_DT"
#endif
#if NORM < 0 || NORM > 2
#error "gemv: NORM must be 0 (none), 1 (rms) or 2 (layer)"
#endif


#ifdef XT
#define GEMV_XT XT
#else
#define GEMV_XT DSC_DT_F32
#endif
#ifdef OUT_DT
#define GEMV_OUT_DT OUT_DT
#else
#define GEMV_OUT_DT DSC_DT_F32
#endif

#define GEMV_MAX_ROWS 8
// Split-K's partial sums: GEMV_MAX_ROWS floats per warp of a block of at most 8 warps, twice
// for a gated linear (LinearOps.cpp's kGemvSplitSumsBytes).
#define GEMV_SPLIT_SUMS_BYTES (8 * GEMV_MAX_ROWS * 2 * 4)
// The warps per output feature: SPLIT_K, a compile-time constant so that each warp's part of
// the row has a known length (a runtime count cost the int8 kernel 25 registers).
#ifdef SPLIT_K
#define GEMV_SPLITS SPLIT_K
#else
#define GEMV_SPLITS 1
#endif
#if GEMV_SPLITS != 1 && GEMV_SPLITS != 2 && GEMV_SPLITS != 4 && GEMV_SPLITS != 8
#error "gemv: SPLIT_K must be 1, 2, 4 or 8 (it divides the block's 8 warps)"
#endif

struct alignas(16) GemvFloat4 {
  float x, y, z, w;
};

// Weight row n's dot product with every row of x, reduced over the warp and scaled
// (quantized weights),
// into acc[r] on every lane, for in-feature count k_in: over all of k_in, or (split-K) over
// the part-th of `splits` contiguous parts of it.
// x is of dtype XD: f32 (staged rows, or an f32 input), or the half input (XT) read where
// it lies; x_vector then means pairs of halves in one 4-byte load.
template <int XD>
static __device__ __forceinline__ void gemv_row(const void *x_rows, const void *w,
                                                const void *scales, long long n, int rows,
                                                int k_in, bool x_vector, bool w_vector,
                                                int groups, int part, int splits, float *acc) {
  const float *xs = static_cast<const float *>(x_rows);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < GEMV_MAX_ROWS; ++r)
    acc[r] = 0.0f;
  const long long scale_row = n * groups;

  if (w_vector) {
    const GemvWords *wrow = reinterpret_cast<const GemvWords *>(
        static_cast<const char *>(w) + n * static_cast<long long>(k_in) * 16 / GEMV_VEC);
    // Unrolled so that each lane has several 16-byte loads in flight.
    // Part `part` of `splits` contiguous runs of the row's loads.
    const int chunks = k_in / GEMV_VEC;
    const int chunk_end = static_cast<int>((static_cast<long long>(part) + 1) * chunks / splits);
#pragma unroll 4
    for (int chunk = static_cast<int>(static_cast<long long>(part) * chunks / splits) + lane;
         chunk < chunk_end; chunk += 32) {
      const GemvWords loaded = wrow[chunk];
      // The chunk's scale (int8 and int4 with groups; 1 otherwise: the weights are the
      // values).
      float chunk_scale = 1.0f;
      if (GEMV_QUANTIZED && GS > 0)
        chunk_scale =
            dsc_load_float<SDT>(scales, scale_row + chunk * GEMV_VEC / (GS > 0 ? GS : 1));
#pragma unroll
      for (int piece = 0; piece < GEMV_PIECES; ++piece) {
        float wv[GEMV_PIECE];
        gemv_unpack(loaded, piece, wv);
        const int k = chunk * GEMV_VEC + piece * GEMV_PIECE;
#pragma unroll
        for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
          if (r < rows) {
            // Quantized groups: the piece's own sum, scaled; otherwise straight into acc[r].
            float dot = (GEMV_QUANTIZED && GS > 0) ? 0.0f : acc[r];
            if constexpr (XD == DSC_DT_F32) {
              const float *xr = xs + r * k_in + k;
              if (x_vector) {
#pragma unroll
                for (int j = 0; j < GEMV_PIECE; j += 4) {
                  const GemvFloat4 xv = *reinterpret_cast<const GemvFloat4 *>(xr + j);
                  dot += wv[j] * xv.x + wv[j + 1] * xv.y + wv[j + 2] * xv.z + wv[j + 3] * xv.w;
                }
              } else {
#pragma unroll
                for (int j = 0; j < GEMV_PIECE; ++j)
                  dot += wv[j] * xr[j];
              }
            } else {
              const long long at = static_cast<long long>(r) * k_in + k;
              if (x_vector) {
                const unsigned int *xr = reinterpret_cast<const unsigned int *>(
                    static_cast<const unsigned short *>(x_rows) + at);
#pragma unroll
                for (int j = 0; j < GEMV_PIECE; j += 2) {
                  const unsigned int pair = xr[j / 2];
                  dot += wv[j] * dsc_half_of_word<XD>(pair, 0) +
                         wv[j + 1] * dsc_half_of_word<XD>(pair, 1);
                }
              } else {
#pragma unroll
                for (int j = 0; j < GEMV_PIECE; ++j)
                  dot += wv[j] * dsc_load_float<XD>(x_rows, at + j);
              }
            }
            if (GEMV_QUANTIZED && GS > 0)
              acc[r] += chunk_scale * dot;
            else
              acc[r] = dot;
          }
        }
      }
    }
  } else {
    const long long row_start = n * static_cast<long long>(k_in);
    const int k_end = static_cast<int>((static_cast<long long>(part) + 1) * k_in / splits);
    for (int k = static_cast<int>(static_cast<long long>(part) * k_in / splits) + lane; k < k_end;
         k += 32) {
      const float wk = gemv_weight(w, scales, row_start, scale_row, k);
#pragma unroll
      for (int r = 0; r < GEMV_MAX_ROWS; ++r)
        if (r < rows)
          acc[r] += wk * dsc_load_float<XD>(x_rows, static_cast<long long>(r) * k_in + k);
    }
  }

#pragma unroll
  for (int r = 0; r < GEMV_MAX_ROWS; ++r)
    acc[r] = dsc_warp_sum(acc[r]);

  // Quantized with one group per row: q·x, scaled once.
  if (GEMV_QUANTIZED && GS == 0) {
    const float row_scale = dsc_load_float<SDT>(scales, n);
#pragma unroll
    for (int r = 0; r < GEMV_MAX_ROWS; ++r)
      acc[r] *= row_scale;
  }
}

// One block's share of the features, for in-feature count KK when it is a compile-time
// constant (the plan's K) or k (KK == 0): a tensor-parallel rank of an uneven split runs the
// plan's kernel with fewer in-features than rank 0, for which the plan was specialised.
// GATED: output feature n is act(row n + bias[n]) * (row n_out + n + bias[n_out + n]) of a
// [gate; up] weight of 2 * n_out rows; the warp reads both rows.
// Split-K (SPLITS 2, 4 or 8 warps per feature, for layers with fewer features than the
// grid has warps): each of a feature's warps sums its part of k, the parts meet in
// `split_sums` (shared, warps per block * GEMV_MAX_ROWS floats, twice that when GATED), and
// the first warp adds them and applies the epilogue. The loop's bound is the block's, so
// that every warp reaches each barrier.
// XD: x's dtype (gemv_row's).
template <int KK, int SPLITS, int XD>
static __device__ __forceinline__ void gemv_features(const void *xs, const void *w,
                                                     const void *scales, const void *bias,
                                                     const float *residual, void *y, int rows,
                                                     int n_out, int k_run, float *split_sums) {
  const int k_in = KK > 0 ? KK : k_run;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps_per_block = blockDim.x >> 5;
  constexpr int splits = SPLITS;
  const int features_per_block = warps_per_block / splits;
  const int part = warp % splits;
  // x rows start at multiples of k_in floats: 16-byte reads need k_in % 4 == 0 and an
  // aligned base (shared memory is aligned by its declaration); a half input's pairs need
  // k_in even and a 4-byte aligned base.
  const bool x_vector =
      XD == DSC_DT_F32 ? (k_in % 4 == 0) && dsc_aligned16(xs)
                       : (k_in % 2 == 0) && (reinterpret_cast<unsigned long long>(xs) & 3ull) == 0;
  // Quantized groups must not split a load (one scale per load).
  const bool groups_whole = !GEMV_QUANTIZED || GS == 0 || GS % GEMV_VEC == 0;
  const bool w_vector = (k_in % GEMV_VEC == 0) && dsc_aligned16(w) && groups_whole;
  // Quantized: scales are [n_out, groups]; the launcher checked that GS divides k_in.
  const int groups = (GEMV_QUANTIZED && GS > 0) ? k_in / (GS > 0 ? GS : 1) : 1;

  for (long long base = static_cast<long long>(blockIdx.x) * features_per_block; base < n_out;
       base += static_cast<long long>(gridDim.x) * features_per_block) {
    const long long n = base + warp / splits;
    const bool active = n < n_out;
    float acc[GEMV_MAX_ROWS], up[GEMV_MAX_ROWS];
    if (active) {
      gemv_row<XD>(xs, w, scales, n, rows, k_in, x_vector, w_vector, groups, part, splits,
                   acc);
      if (GATED)
        gemv_row<XD>(xs, w, scales, n + n_out, rows, k_in, x_vector, w_vector, groups, part,
                     splits, up);
    }
    if (splits > 1) {
      float *mine = split_sums + warp * GEMV_MAX_ROWS * (GATED ? 2 : 1);
#pragma unroll
      for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
        if (active && r < rows && lane == r) {
          mine[r] = acc[r];
          if (GATED)
            mine[GEMV_MAX_ROWS + r] = up[r];
        }
      }
      __syncthreads();
      if (active && part == 0) {
        for (int other = 1; other < splits; ++other) {
          const float *theirs = mine + other * GEMV_MAX_ROWS * (GATED ? 2 : 1);
#pragma unroll
          for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
            if (r < rows) {
              acc[r] += theirs[r];
              if (GATED)
                up[r] += theirs[GEMV_MAX_ROWS + r];
            }
          }
        }
      }
      __syncthreads();  // every part read before the next features' parts are written
    }
    if (!active || part != 0)
      continue;

    // Lane r writes row r: the epilogue's loads spread over the warp.
    float bias_n = 0.0f, bias_up = 0.0f;
    if (HAS_BIAS) {
      bias_n = dsc_load_float<BIAS_DT>(bias, n);
      if (GATED)
        bias_up = dsc_load_float<BIAS_DT>(bias, n + n_out);
    }
#pragma unroll
    for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
      if (r < rows && lane == r) {
        const long long index = static_cast<long long>(r) * n_out + n;
        float value = dsc_activate(ACT, acc[r] + bias_n);
        if (GATED)
          value *= up[r] + bias_up;
        if (HAS_RESIDUAL)
          value += residual[index];
        dsc_store_float<GEMV_OUT_DT>(
            y, index, dsc_logit_epilogue(value, LOGIT_SCALE_BITS, LOGIT_CAP_BITS));
      }
    }
  }
}

#if NORM != 0
#define GEMV_NORM_BIAS_LOAD_DT (NORM_BIAS_DT == 0 ? DSC_DT_F32 : NORM_BIAS_DT)

// Each of the `rows` staged rows of k floats normalised in place, every thread of the block
// taking the same features in each pass; `reduction` is 32 floats of shared memory (the
// launcher's, after the rows: a kernel with dynamic shared memory declares no other).
static __device__ __forceinline__ void gemv_normalize(float *xs, int rows, int k,
                                                      const void *scale, const void *bias,
                                                      float epsilon, float *reduction) {
  for (int r = 0; r < rows; ++r) {
    float *row = xs + r * k;
    float mean = 0.0f;
    if (NORM == 2) {
      float sum = 0.0f;
      for (int i = threadIdx.x; i < k; i += blockDim.x)
        sum += row[i];
      mean = dsc_block_sum(sum, reduction) / k;
    }
    float squares = 0.0f;
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
      const float d = row[i] - mean;
      squares += d * d;
    }
    const float inverse = 1.0f / sqrtf(dsc_block_sum(squares, reduction) / k + epsilon);
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
      float value = (row[i] - mean) * inverse * dsc_load_float<NORM_SCALE_DT>(scale, i);
      if (NORM_BIAS_DT != 0)
        value += dsc_load_float<GEMV_NORM_BIAS_LOAD_DT>(bias, i);
      row[i] = value;
    }
  }
  __syncthreads();  // every row whole before any warp reads it
}
#endif

// The loads of each warp's first feature start before x is staged: each lane asks L2 for
// the first GEMV_PREFETCH of its 16-byte loads of that row (and of its up row when GATED),
// as many as the main loop's unrolling keeps in flight, so that the weight's first bytes
// are on their way from memory while the block copies (and normalises) x.
#define GEMV_PREFETCH 4
static __device__ __forceinline__ void gemv_prefetch_first_row(const void *w, int n_out,
                                                               int k_in) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int features_per_block = (blockDim.x >> 5) / GEMV_SPLITS;
  const long long n =
      static_cast<long long>(blockIdx.x) * features_per_block + warp / GEMV_SPLITS;
  if (n >= n_out || k_in % GEMV_VEC != 0)
    return;
  const int part = warp % GEMV_SPLITS, chunks = k_in / GEMV_VEC;
  const int first = static_cast<int>(static_cast<long long>(part) * chunks / GEMV_SPLITS);
  const int end = static_cast<int>((static_cast<long long>(part) + 1) * chunks / GEMV_SPLITS);
  const long long row_bytes = static_cast<long long>(k_in) * 16 / GEMV_VEC;
  const char *row = static_cast<const char *>(w) + n * row_bytes;
#pragma unroll
  for (int i = 0; i < GEMV_PREFETCH; ++i) {
    const int chunk = first + lane + 32 * i;
    if (chunk < end) {
      dsc_prefetch_l2(row + chunk * 16ll);
      if (GATED)
        dsc_prefetch_l2(row + n_out * row_bytes + chunk * 16ll);
    }
  }
}

// k: the in-feature count of this run (K, except on a rank of an uneven tensor-parallel
// split). scales: quantized weights' [n_out, groups] scales, null for float weights. staged:
// whether the launcher gave rows * k * 4 bytes of dynamic shared memory (and, with SPLIT_K
// above 1, GEMV_SPLIT_SUMS_BYTES more after it, whether it staged or not).
extern "C" __global__ void gemv(const void *x, const void *w, const void *scales,
                                const void *bias, const float *residual, void *y, int rows,
                                int n_out, int k, int staged
#if NORM != 0
                                ,
                                const void *norm_scale, const void *norm_bias,
                                float norm_epsilon, int normalize
#endif
) {
  extern __shared__ GemvFloat4 gemv_shared[];
  float *shared_x = reinterpret_cast<float *>(gemv_shared);

  if (rows > GEMV_MAX_ROWS)
    rows = GEMV_MAX_ROWS;  // the launcher never asks for more; never index past acc[]
  if (staged) {
    gemv_prefetch_first_row(w, n_out, k);
    // 16 bytes per thread and several loads in flight: a scalar loop was a chain of
    // dependent trips to memory, most of the down projection's 14.8 us (k 3072) in an
    // H200's profile of GPT-2 decode.
    const int count = rows * k;
#if GEMV_XT == DSC_DT_F32
    if (count % 4 == 0 && dsc_aligned16(x)) {
      const GemvFloat4 *x4 = reinterpret_cast<const GemvFloat4 *>(x);
#pragma unroll 4
      for (int i = threadIdx.x; i < count / 4; i += blockDim.x)
        gemv_shared[i] = x4[i];
    } else {
#pragma unroll 4
      for (int i = threadIdx.x; i < count; i += blockDim.x)
        shared_x[i] = static_cast<const float *>(x)[i];
    }
#else
    // A half input: 8 elements per 16-byte load, widened into shared memory.
    if (count % 8 == 0 && dsc_aligned16(x)) {
      const GemvWords *x8 = reinterpret_cast<const GemvWords *>(x);
#pragma unroll 4
      for (int i = threadIdx.x; i < count / 8; i += blockDim.x) {
        const GemvWords words = x8[i];
        const unsigned int parts[4] = {words.a, words.b, words.c, words.d};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          shared_x[8 * i + 2 * j] = dsc_half_of_word<GEMV_XT>(parts[j], 0);
          shared_x[8 * i + 2 * j + 1] = dsc_half_of_word<GEMV_XT>(parts[j], 1);
        }
      }
    } else {
#pragma unroll 4
      for (int i = threadIdx.x; i < count; i += blockDim.x)
        shared_x[i] = dsc_load_float<GEMV_XT>(x, i);
    }
#endif
    __syncthreads();
#if NORM != 0
    if (normalize)
      gemv_normalize(shared_x, rows, k, norm_scale, norm_bias, norm_epsilon,
                     shared_x + rows * k);
#endif
  }
  // Split-K's partial sums after the staged rows and the norm's reduction.
  float *split_sums = shared_x + (staged ? rows * k + (NORM != 0 ? 32 : 0) : 0);
#if GEMV_XT == DSC_DT_F32
  const void *xs = staged ? static_cast<const void *>(shared_x) : x;
  if (k == K)
    gemv_features<K, GEMV_SPLITS, DSC_DT_F32>(xs, w, scales, bias, residual, y, rows, n_out, k,
                                              split_sums);
  else
    gemv_features<0, GEMV_SPLITS, DSC_DT_F32>(xs, w, scales, bias, residual, y, rows, n_out, k,
                                              split_sums);
#else
  // Staged rows are f32; unstaged ones are read as the half input they are.
  if (staged && k == K)
    gemv_features<K, GEMV_SPLITS, DSC_DT_F32>(shared_x, w, scales, bias, residual, y, rows,
                                              n_out, k, split_sums);
  else if (staged)
    gemv_features<0, GEMV_SPLITS, DSC_DT_F32>(shared_x, w, scales, bias, residual, y, rows,
                                              n_out, k, split_sums);
  else
    gemv_features<0, GEMV_SPLITS, GEMV_XT>(x, w, scales, bias, residual, y, rows, n_out, k,
                                           split_sums);
#endif
}
