// The int8 and int4 linear's tile GEMM (rows > GEMV_MAX_ROWS, up to the launcher's
// threshold; docs/cuda-backend.md, "int8 linears" and "int4 linears"):
//   y[m, n] = x[m, k] · ŵ[n, k]ᵀ (+ addend), f32, rows `ldc` apart,
// where ŵ is dequantized tile by tile in shared memory and never written to memory: int8
// (WT 8) ŵ = q · scale, int4 (WT 9, u8 [n, k / 2], two codes a byte, the even input in the
// low nibble: MatMulNBits' packing, as dequantize_int4.cuh reads it) ŵ = (code - 8) · scale,
// with scales [n, groups] in SDT, rounded to SDT as dequantize_int8/int4 round it. So the
// operands are exactly those the dequantize + cuBLASLt path multiplies; only the f32
// summation order differs. x is the GEMM's operand in SDT (convert_activations' output, the
// norm prologue's OUT_DT kernel's, or the plan's half activations as they are). Each block
// reads its weight tile's codes once per tile of 64 rows (and part of k): the weight's n·k
// (int8) or n·k / 2 (int4) bytes instead of the dequantize path's write and re-read of 2·n·k.
//
// The product is mma.sync m16n8k16 (dsc_common.cuh's dsc_mma_m16n8k16; f16/bf16 operands,
// f32 accumulators): a block of 4 warps owns a 64 x 64 tile of y, each warp 32 x 32 (2 x 4
// fragments, 32 accumulators a lane), over k in steps of 32 staged in shared memory as the
// attention_prefill_mma kernel stages its queries and keys (rows of 16 words padded by 4, so
// a fragment's 32 words fall in 32 banks). The next step's codes and rows are loaded into
// registers while the tensor cores work on this one.
//
// Split-K (`splits` > 1, for prompts whose tiles leave most of the GPU idle: a 16-row prompt
// through a 2048-feature layer is 32 tiles): each tile's k steps are cut into `splits`
// contiguous parts, each a work item of its own, which writes its f32 partial product into
// `partials` ([splits, m, n]); the part that arrives last at the tile (an atomic count in
// `counters`, one per tile, zero before the launch and left at zero: StepContext's arrival
// counters) adds the parts in split order, so the sum does not depend on the arrival order,
// and writes y. With `splits` 1, `partials` and `counters` are unused.
//
// `addend` (null: none) is laid out as y and may be y itself: each element is read and
// written by the same thread (the launcher's residual where the epilogue has nothing else to
// do after the residual). Tails in m, n and k are zeros in the tiles. The 16-byte loads need
// k a multiple of 16 and 16-byte aligned x and q; otherwise every element is read alone
// (correct, slow; dsc never writes such layers for real models). Blocks stride over the
// tiles, the row tiles of one column tile next to each other so that they share its codes
// through L2.
//
// Constants: WT (8 int8, 9 int4), SDT (2 f16, 3 bf16: the scales', the operand's and the
// tensor cores' dtype), GS (the group size along k; 0: one group per row, whatever the run's
// k), TILE_M and TILE_N (64 and 64: the launcher's grid is counted in these tiles).
#include "dsc_common.cuh"

#if WT != 8 && WT != 9
#error "gemm_dequant: WT must be 8 (int8) or 9 (int4, u8 two codes a byte)"
#endif
#if SDT != DSC_DT_F16 && SDT != DSC_DT_BF16
#error "gemm_dequant: SDT must be 2 (f16) or 3 (bf16): the tensor cores' operand dtype"
#endif
#if GS < 0 || (WT == 9 && GS % 2 != 0)
#error "gemm_dequant: GS must be 0 (one group per row) or the group size (even for int4)"
#endif
#if TILE_M != 64 || TILE_N != 64
#error "gemm_dequant: the tile is 64 x 64 (TILE_M, TILE_N)"
#endif

#define GEMM_DQ_THREADS 128
#define GEMM_DQ_BK 32
// A staged row: 16 words of two halves, padded by 4 words.
#define GEMM_DQ_ROW_WORDS (GEMM_DQ_BK / 2 + 4)
// Each thread dequantizes 16 consecutive codes of one weight row per step; their scale is
// one where every group boundary falls on a multiple of 16.
#define GEMM_DQ_ONE_SCALE (GS == 0 || GS % 16 == 0)

struct alignas(16) gemm_dq_words4 {
  unsigned int w[4];
};
struct alignas(8) gemm_dq_words2 {
  unsigned int w[2];
};

// Code `col` of a weight row (int4: `row` is the row's bytes), widened, for the element path.
static __device__ __forceinline__ float gemm_dq_code(const unsigned char *row, long long col) {
#if WT == 8
  return static_cast<float>(static_cast<signed char>(row[col]));
#else
  const unsigned int byte = row[col >> 1];
  return static_cast<float>(static_cast<int>((byte >> ((col & 1) * 4)) & 0xfu) - 8);
#endif
}

// Code i (0..15) of the 16 a thread loaded (int8: 4 words of 4 bytes; int4: 2 words of 8
// nibbles), widened.
static __device__ __forceinline__ float gemm_dq_loaded(const unsigned int *words, int i) {
#if WT == 8
  return static_cast<float>(static_cast<signed char>((words[i >> 2] >> ((i & 3) * 8)) & 0xffu));
#else
  return static_cast<float>(static_cast<int>((words[i >> 3] >> ((i & 7) * 4)) & 0xfu) - 8);
#endif
}

extern "C" __global__ void __launch_bounds__(GEMM_DQ_THREADS)
    gemm_dequant(const void *x, const void *q, const void *scales, float *y,
                 const float *addend, int m, int n, int k, int ldc, float *partials,
                 int *counters, int splits) {
  // Declared as 16-byte pieces, so that the tiles are 16-byte aligned for the vector stores
  // (rows of 20 words are 80 bytes: every row and every 4-word piece of one stays aligned).
  typedef unsigned int gemm_dq_row[GEMM_DQ_ROW_WORDS];
  __shared__ gemm_dq_words4 gemm_dq_x_pieces[TILE_M * GEMM_DQ_ROW_WORDS / 4];
  __shared__ gemm_dq_words4 gemm_dq_w_pieces[TILE_N * GEMM_DQ_ROW_WORDS / 4];
  gemm_dq_row *gemm_dq_x = reinterpret_cast<gemm_dq_row *>(gemm_dq_x_pieces);
  gemm_dq_row *gemm_dq_w = reinterpret_cast<gemm_dq_row *>(gemm_dq_w_pieces);
  __shared__ int gemm_dq_last;  // this block's part is the tile's last (split-K)
  if (blockDim.x != GEMM_DQ_THREADS || splits < 1)
    return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // the fragments' groupID and threadID_in_group
  const int warp_m = (warp >> 1) * 32, warp_n = (warp & 1) * 32;
  const long long groups = GS > 0 ? k / (GS > 0 ? GS : 1) : 1;
  const long long row_bytes = WT == 8 ? k : k / 2;
  const unsigned char *codes = static_cast<const unsigned char *>(q);
  const unsigned short *rows = static_cast<const unsigned short *>(x);
  // Uniform over the grid: every load of a step is whole 16-byte (x, int8) or 8-byte (int4)
  // pieces, each wholly inside k or wholly past it.
  const bool vector = k % 16 == 0 && dsc_aligned16(x, q);
  const int m_tiles = (m + TILE_M - 1) / TILE_M, n_tiles = (n + TILE_N - 1) / TILE_N;
  const int k_steps = (k + GEMM_DQ_BK - 1) / GEMM_DQ_BK;
  const int split_steps = (k_steps + splits - 1) / splits;
  // This thread's weight row of the tile and its 16 codes' first column in a step.
  const int w_row = tid >> 1, w_col = (tid & 1) * 16;

  for (long long item = blockIdx.x; item < static_cast<long long>(m_tiles) * n_tiles * splits;
       item += gridDim.x) {
    // Row tiles fastest, then the parts of k, then column tiles: the items in flight together
    // share their column tile's codes.
    const int m_tile = static_cast<int>(item % m_tiles);
    const int split = static_cast<int>(item / m_tiles % splits);
    const int n_tile = static_cast<int>(item / m_tiles / splits);
    const int m0 = m_tile * TILE_M, n0 = n_tile * TILE_N;
    const int first_step = split * split_steps;
    const int end_step = first_step + split_steps < k_steps ? first_step + split_steps : k_steps;
    const int feature = n0 + w_row;
    const unsigned char *w_codes = codes + static_cast<long long>(feature) * row_bytes;
    // A warp's rows past m do no products (a 9-row prompt: one of the tile's 4 m16 blocks).
    const bool warp_rows = m0 + warp_m < m, second_rows = m0 + warp_m + 16 < m;

    // The vector path's next step, in registers: two 16-byte pieces of x rows, the codes,
    // and their scale.
    gemm_dq_words4 x_next[2];
    unsigned int w_next[4] = {0u, 0u, 0u, 0u};
    float scale_next = 0.0f;
    auto load = [&](int step) {
      const int k0 = step * GEMM_DQ_BK;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int piece = tid + i * GEMM_DQ_THREADS;
        const int row = m0 + (piece >> 2), col = k0 + (piece & 3) * 8;
        x_next[i].w[0] = x_next[i].w[1] = x_next[i].w[2] = x_next[i].w[3] = 0u;
        if (row < m && col < k)
          x_next[i] = *reinterpret_cast<const gemm_dq_words4 *>(
              rows + static_cast<long long>(row) * k + col);
      }
      const int col = k0 + w_col;
      w_next[0] = w_next[1] = w_next[2] = w_next[3] = 0u;
      if (feature < n && col < k) {
#if WT == 8
        const gemm_dq_words4 piece = *reinterpret_cast<const gemm_dq_words4 *>(w_codes + col);
        w_next[0] = piece.w[0], w_next[1] = piece.w[1], w_next[2] = piece.w[2],
        w_next[3] = piece.w[3];
#else
        const gemm_dq_words2 piece =
            *reinterpret_cast<const gemm_dq_words2 *>(w_codes + col / 2);
        w_next[0] = piece.w[0], w_next[1] = piece.w[1];
#endif
        if (GEMM_DQ_ONE_SCALE)
          scale_next = dsc_load_float<SDT>(
              scales, static_cast<long long>(feature) * groups + (GS > 0 ? col / (GS > 0 ? GS : 1) : 0));
      }
    };
    // Step `step` into the tiles: the vector path from the registers `load` filled, the
    // element path straight from memory.
    auto stage = [&](int step) {
      const int k0 = step * GEMM_DQ_BK;
      if (vector) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int piece = tid + i * GEMM_DQ_THREADS;
          *reinterpret_cast<gemm_dq_words4 *>(&gemm_dq_x[piece >> 2][(piece & 3) * 4]) =
              x_next[i];
        }
      } else {
        for (int index = tid; index < TILE_M * (GEMM_DQ_BK / 2); index += GEMM_DQ_THREADS) {
          const int row = m0 + index / (GEMM_DQ_BK / 2), pair = index % (GEMM_DQ_BK / 2);
          const int col = k0 + 2 * pair;
          unsigned int word = 0u;
          if (row < m && col < k) {
            const unsigned short *at = rows + static_cast<long long>(row) * k + col;
            word = at[0] | (col + 1 < k ? static_cast<unsigned int>(at[1]) << 16 : 0u);
          }
          gemm_dq_x[index / (GEMM_DQ_BK / 2)][pair] = word;
        }
      }
      const int col = k0 + w_col;
      gemm_dq_words4 words[2];
#pragma unroll
      for (int pair = 0; pair < 8; ++pair) {
        const int c = col + 2 * pair;
        float low = 0.0f, high = 0.0f;
        if (feature < n && c < k) {
          const long long scale_row = static_cast<long long>(feature) * groups;
          auto scale_of = [&](int column) {
            return GEMM_DQ_ONE_SCALE && vector
                       ? scale_next
                       : dsc_load_float<SDT>(scales,
                                             scale_row + (GS > 0 ? column / (GS > 0 ? GS : 1) : 0));
          };
          if (vector) {
            low = gemm_dq_loaded(w_next, 2 * pair) * scale_of(c);
            high = gemm_dq_loaded(w_next, 2 * pair + 1) * scale_of(c + 1);
          } else {
            low = gemm_dq_code(w_codes, c) * scale_of(c);
            if (c + 1 < k)
              high = gemm_dq_code(w_codes, c + 1) * scale_of(c + 1);
          }
        }
        words[pair >> 2].w[pair & 3] = dsc_pack_half2<SDT>(low, high);
      }
      *reinterpret_cast<gemm_dq_words4 *>(&gemm_dq_w[w_row][w_col / 2]) = words[0];
      *reinterpret_cast<gemm_dq_words4 *>(&gemm_dq_w[w_row][w_col / 2 + 4]) = words[1];
    };

    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    __syncthreads();  // the previous tile's products are done with the staged tiles
    if (first_step < end_step) {
      if (vector)
        load(first_step);
      stage(first_step);
    }
    __syncthreads();
    for (int step = first_step; step < end_step; ++step) {
      const bool more = step + 1 < end_step;
      if (vector && more)
        load(step + 1);
      if (warp_rows) {
#pragma unroll
        for (int half = 0; half < GEMM_DQ_BK / 16; ++half) {
          const int word = half * 8 + t;  // k 16·half + 2t, + 1 (and + 8, + 9 at word + 4)
          unsigned int a[2][4];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int r = warp_m + i * 16 + g;
            a[i][0] = gemm_dq_x[r][word];
            a[i][1] = gemm_dq_x[r + 8][word];
            a[i][2] = gemm_dq_x[r][word + 4];
            a[i][3] = gemm_dq_x[r + 8][word + 4];
          }
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            unsigned int b[2];
            b[0] = gemm_dq_w[warp_n + j * 8 + g][word];
            b[1] = gemm_dq_w[warp_n + j * 8 + g][word + 4];
            dsc_mma_m16n8k16<SDT>(acc[0][j], a[0], b);
            if (second_rows)
              dsc_mma_m16n8k16<SDT>(acc[1][j], a[1], b);
          }
        }
      }
      if (more) {
        __syncthreads();  // every warp has read this step's tiles
        stage(step + 1);
        __syncthreads();
      }
    }

    // acc[i][j][e]: row warp_m + 16i + g (+ 8 for e >= 2), column warp_n + 8j + 2t (+ 1 for
    // odd e). Into y, or this part's partial product.
    float *part = splits > 1 ? partials + static_cast<long long>(split) * m * n : y;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = m0 + warp_m + i * 16 + g + (e >> 1) * 8;
          const int col = n0 + warp_n + j * 8 + 2 * t + (e & 1);
          if (row >= m || col >= n)
            continue;
          if (splits > 1) {
            part[static_cast<long long>(row) * n + col] = acc[i][j][e];
            continue;
          }
          const long long at = static_cast<long long>(row) * ldc + col;
          float value = acc[i][j][e];
          if (addend)
            value += addend[at];
          y[at] = value;
        }
    if (splits == 1)
      continue;
    // The tile's last part to arrive adds them all (read through L2: other blocks wrote them).
    __threadfence();
    __syncthreads();
    const int tile = n_tile * m_tiles + m_tile;
    if (tid == 0)
      gemm_dq_last = atomicAdd(&counters[tile], 1) == splits - 1;
    __syncthreads();
    if (!gemm_dq_last)
      continue;
    __threadfence();
    for (int index = tid; index < TILE_M * TILE_N; index += GEMM_DQ_THREADS) {
      const int row = m0 + index / TILE_N, col = n0 + index % TILE_N;
      if (row >= m || col >= n)
        continue;
      const long long at = static_cast<long long>(row) * ldc + col;
      float value = 0.0f;
      for (int s = 0; s < splits; ++s)
        value += __ldcg(partials + (static_cast<long long>(s) * m + row) * n + col);
      if (addend)
        value += addend[at];
      y[at] = value;
    }
    if (tid == 0)
      counters[tile] = 0;  // for the next launch
  }
}
