// tfm.moe's experts on the device (docs/cuda-backend.md, "Mixture of experts"): a grouped
// gemv over the rows moe_route listed for each expert. Block (x, y) is expert y's output
// features [x * warps, +warps), a warp each; a block whose expert has no rows returns at once,
// so the grid is fixed (capturable) and a decode step reads the weights of its k experts
// only. Each weight row is read once per ROWS of the expert's rows, its values widened to
// f32 (int8 and int4 codes times their group's scale, as the CPU kernel dequantizes them)
// and multiplied with each row in f32.
//
// Where the rows allow it (their inputs a multiple of a 16-byte load's weights, an int8/int4
// group a multiple of it too, the weights and the input 16-byte aligned), each lane reads
// 16 bytes of a weight row at once: 4 f32, 8 f16/bf16, 16 int8 or 32 int4 codes, which share
// one scale; else one weight at a time.
//
// GATE_UP 1: in is x [rows, HIDDEN]; expert e's gate row j is weight row e * 2 * inter + j,
// its up row inter after it; out[(offsets[e] + i) * inter + j] = act(gate + b) * (up + b)
// for the expert's i-th row lists[offsets[e] + i] (CLAMPED: GPT-OSS's clamped SwiGLU,
// ops/MoeRouting.h's clampedSwiglu, from ALPHA_BITS and LIMIT_BITS, the f32 bits).
// GATE_UP 0: in is what GATE_UP 1 wrote, [places, inter]; down row e * HIDDEN + o gives
// out[(offsets[e] + i) * HIDDEN + o] (+ the down bias when add_bias: under tensor
// parallelism one rank adds it).
// SHARED 1: Qwen2-MoE's shared expert, one expert over every row in order (no lists).
//
// Constants: GATE_UP, HIDDEN, WT (the stored weights: 1 f32, 2 f16, 3 bf16, 8 int8, 9 int4
// codes two a byte, the even input low, code - 8), SDT (int8/int4 scales' dtype, 0 for float
// weights), ACT (a DSC_ACT_* code), CLAMPED with ALPHA_BITS and LIMIT_BITS, BIAS_DT (0 none),
// SHARED, BLOCK, ROWS. The inter size and the group size are parameters: they differ between
// the ranks of a tensor-parallel split.
#include "dsc_common.cuh"

#if !(WT == DSC_DT_F32 || WT == DSC_DT_F16 || WT == DSC_DT_BF16 || WT == 8 || WT == 9)
#error "moe_experts: WT must be 1, 2, 3, 8 or 9"
#endif
#if (WT == 8 || WT == 9) && !(SDT == DSC_DT_F32 || SDT == DSC_DT_F16 || SDT == DSC_DT_BF16)
#error "moe_experts: int8 and int4 weights need SDT 1, 2 or 3"
#endif
#if ROWS < 1 || ROWS > 8
#error "moe_experts: ROWS must be in [1, 8]"
#endif
#ifndef ALPHA_BITS
#define ALPHA_BITS 0
#define LIMIT_BITS 0
#endif

#define MOE_EXPERT_WARPS (BLOCK / 32)
// Weights per 16-byte load.
#define MOE_VECTOR (WT == DSC_DT_F32 ? 4 : WT == 8 ? 16 : WT == 9 ? 32 : 8)

struct alignas(16) MoeChunk {
  unsigned int word[4];
};
struct alignas(16) MoeFloat4 {
  float v[4];
};

// Weight `j` of a 16-byte load, as f32 (int8 and int4: the code, before its scale).
static __device__ __forceinline__ float moe_widen(const MoeChunk &chunk, int j) {
  if constexpr (WT == DSC_DT_F32) {
    return __uint_as_float(chunk.word[j]);
  } else if constexpr (WT == 8) {
    return static_cast<float>(
        static_cast<signed char>((chunk.word[j / 4] >> (8 * (j % 4))) & 0xffu));
  } else if constexpr (WT == 9) {
    return static_cast<float>(static_cast<int>((chunk.word[j / 8] >> (4 * (j % 8))) & 15u) - 8);
  } else {
    return dsc_half_of_word<WT>(chunk.word[j / 2], j % 2);
  }
}

// Load `chunk` of weight row `row` and its scale (1 for float weights).
static __device__ __forceinline__ MoeChunk moe_chunk(const void *w, const void *scales,
                                                     long long row, int in_features, int chunk,
                                                     int group_size, float &scale) {
  const long long row_bytes =
      WT == 9 ? in_features / 2 : static_cast<long long>(in_features) * (WT == 8 ? 1 : WT == 1 ? 4 : 2);
  const MoeChunk loaded =
      *reinterpret_cast<const MoeChunk *>(static_cast<const char *>(w) + row * row_bytes +
                                          16ll * chunk);
  if constexpr (WT == 8 || WT == 9)
    scale = dsc_load_float<SDT>(scales, row * (in_features / group_size) +
                                            chunk * MOE_VECTOR / group_size);
  else
    (void)scales, (void)group_size, scale = 1.0f;
  return loaded;
}

// Input k of weight row `row` of `in_features`, as f32.
static __device__ __forceinline__ float moe_weight(const void *w, const void *scales,
                                                   long long row, int in_features, int k,
                                                   int group_size) {
  if constexpr (WT == 8 || WT == 9) {
    int q;
    if constexpr (WT == 8) {
      q = static_cast<const signed char *>(w)[row * in_features + k];
    } else {
      const unsigned int byte =
          static_cast<const unsigned char *>(w)[row * (in_features / 2) + k / 2];
      q = static_cast<int>((k & 1) ? byte >> 4 : byte & 15u) - 8;
    }
    const int groups = in_features / group_size;
    return static_cast<float>(q) * dsc_load_float<SDT>(scales, row * groups + k / group_size);
  } else {
    (void)scales, (void)group_size;
    return dsc_load_float<WT>(w, row * in_features + k);
  }
}

static __device__ __forceinline__ float moe_bias(const void *bias, long long index) {
  if constexpr (BIAS_DT != 0)
    return dsc_load_float<BIAS_DT>(bias, index);
  (void)bias, (void)index;
  return 0.0f;
}

// No __launch_bounds__: with it, ptxas held the 16-byte int4 and bf16 paths to 64 registers
// and spilled; without, they take 72-80 and nothing spills (3 blocks of 256 per SM).
extern "C" __global__ void moe_experts(const float *in, const void *w, const void *scales, const void *bias,
            const int *counts, const int *offsets, const int *lists, float *out,
            long long rows, int inter, int group_size, int add_bias) {
  const int lane = threadIdx.x % 32;
  const long long expert = blockIdx.y;
  const long long count = SHARED ? rows : counts[expert];
  if (count == 0)
    return;
  const long long offset = SHARED ? 0 : offsets[expert];
  const int features = GATE_UP ? inter : HIDDEN, in_features = GATE_UP ? HIDDEN : inter;
  const int feature = blockIdx.x * MOE_EXPERT_WARPS + threadIdx.x / 32;
  if (feature >= features)
    return;
  // Weight rows: the gate's and the up's, or the down projection's.
  const long long row_a = GATE_UP ? expert * 2 * inter + feature : expert * HIDDEN + feature;
  const long long row_b = row_a + inter;
  // The 16-byte path: whole loads per row, one scale per load, aligned rows of weights and
  // of the input (every input row starts a multiple of 16 bytes after `in`).
  const bool vector = in_features % MOE_VECTOR == 0 &&
                      (!(WT == 8 || WT == 9) || group_size % MOE_VECTOR == 0) &&
                      dsc_aligned16(w, in);
  for (long long first = 0; first < count; first += ROWS) {
    const float *x[ROWS];
#pragma unroll
    for (int t = 0; t < ROWS; ++t) {
      // Past the expert's rows, the last again (its sums are not written).
      const long long place = offset + (first + t < count ? first + t : count - 1);
      const long long source = GATE_UP && !SHARED ? lists[place] : place;
      x[t] = in + source * in_features;
    }
    float acc_a[ROWS], acc_b[ROWS];
#pragma unroll
    for (int t = 0; t < ROWS; ++t)
      acc_a[t] = acc_b[t] = 0.0f;
    if (vector) {
      for (int c = lane; c < in_features / MOE_VECTOR; c += 32) {
        float scale_a, scale_b = 1.0f;
        const MoeChunk a = moe_chunk(w, scales, row_a, in_features, c, group_size, scale_a);
        const MoeChunk b = GATE_UP ? moe_chunk(w, scales, row_b, in_features, c, group_size,
                                               scale_b)
                                   : a;
#pragma unroll
        for (int j = 0; j < MOE_VECTOR; j += 4) {
          MoeFloat4 values[ROWS];
#pragma unroll
          for (int t = 0; t < ROWS; ++t)
            values[t] = *reinterpret_cast<const MoeFloat4 *>(x[t] + c * MOE_VECTOR + j);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float wa = moe_widen(a, j + i) * scale_a;
            const float wb = GATE_UP ? moe_widen(b, j + i) * scale_b : 0.0f;
#pragma unroll
            for (int t = 0; t < ROWS; ++t) {
              acc_a[t] += wa * values[t].v[i];
              if (GATE_UP)
                acc_b[t] += wb * values[t].v[i];
            }
          }
        }
      }
    } else {
      for (int k = lane; k < in_features; k += 32) {
        const float wa = moe_weight(w, scales, row_a, in_features, k, group_size);
        const float wb =
            GATE_UP ? moe_weight(w, scales, row_b, in_features, k, group_size) : 0.0f;
#pragma unroll
        for (int t = 0; t < ROWS; ++t) {
          const float value = x[t][k];
          acc_a[t] += wa * value;
          if (GATE_UP)
            acc_b[t] += wb * value;
        }
      }
    }
#pragma unroll
    for (int t = 0; t < ROWS; ++t) {
      acc_a[t] = dsc_warp_sum(acc_a[t]);
      if (GATE_UP)
        acc_b[t] = dsc_warp_sum(acc_b[t]);
    }
    if (lane != 0)
      continue;
#pragma unroll
    for (int t = 0; t < ROWS; ++t) {
      if (first + t >= count)
        break;
      float value;
      if (GATE_UP) {
        const float gate = acc_a[t] + moe_bias(bias, row_a), up = acc_b[t] + moe_bias(bias, row_b);
        if (CLAMPED) {
          const float alpha = __uint_as_float(ALPHA_BITS), limit = __uint_as_float(LIMIT_BITS);
          const float g = fminf(gate, limit), u = fminf(fmaxf(up, -limit), limit);
          value = (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
        } else {
          value = dsc_activate(ACT, gate) * up;
        }
      } else {
        value = acc_a[t] + (add_bias ? moe_bias(bias, row_a) : 0.0f);
      }
      out[(offset + first + t) * features + feature] = value;
    }
  }
}
