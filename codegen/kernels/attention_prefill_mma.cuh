// tfm.attention over any number of new tokens on the tensor cores: attention_prefill's
// flash-style algorithm (one block per query tile, head and sequence; key and value tiles
// through shared memory; an online softmax in f32), with Q·Kᵀ and P·V as warp-wide
// mma.sync.m16n8k16 products (dsc_common.cuh's dsc_mma_m16n8k16) instead of one f32 FMA
// per lane and key. Prefill attention is compute bound: 4·s²·d flops per head, about an
// H100's 60 f32 TFLOP/s on the CUDA cores against some 900 on its tensor cores.
//
// Only for a session cache of f16 or bf16 (KV_DTYPE 2 or 3, required): the keys and values
// are then the operands as stored. The queries are rounded to that dtype when staged, and
// each row's softmax weights when they multiply the values; scores, maxima, sums and the
// output accumulate in f32. So the result differs from attention_prefill's by those two
// roundings (about 2^-11 relative for f16, 2^-8 for bf16): the rule chooses this kernel
// only where the plan already keeps its KV cache in that dtype.
//
// Constants: HEAD_DIM (a multiple of 16, at most 512), WARPS (each warp owns 16 query rows),
// Q_TILE (= 16 * WARPS), K_TILE (keys per shared-memory tile, a multiple of 16), CAUSAL,
// WINDOW, ALIBI (must be 0), MASK_DTYPE, UNATTENDED_CAUSAL, and where the step has them
// SOFTCAP_BITS and UNATTENDED_ZERO, as attention_prefill.cuh defines them. No BIAS: a step
// with a bias or ALiBi takes attention_prefill. The parameters are attention_prefill's
// without a bias, so the one launcher runs either.
// Each lane keeps HEAD_DIM / FEATURE_PARTS / 2 f32 output accumulators, at most 128 (what
// ptxas keeps in registers beside the scores). Wider heads (Gemma-4's 512) set
// FEATURE_PARTS 2: the launcher gives each query tile that many blocks, each of which forms
// the whole Q·Kᵀ (half the flops) and its share of P·V and of the output. Tiles of more
// than 48 KiB (heads over 128) live in dynamic shared memory: SHARED_BYTES, the launcher's
// size, which must be this file's layout (checked below).
//
// `out` holds the rotated queries on entry and the attention output on exit, as for
// attention_prefill: a block stages every row it later writes before its first write. Where
// blocks share a row (FEATURE_PARTS > 1) or the output is half (OUT_DT), the queries come in
// `query_rows` instead, the last parameter.
//
// With PAGED (1; last, only in the serving plan's `step` program), sequence z is a prompt
// chunk of the step over the engine's block pool, as attention_prefill.cuh's PAGED says:
// `chunks`, `paged_rows`, `table_width` and `block_size` follow, the key and value tiles are
// read through the chunk's table, the rows are the step's rows, and attention is causal
// over [0, position].
//
// With SINKS (1; last, only where the step has attention sinks), attention_prefill's: the
// last parameter `sinks`, each row's online softmax starting at maximum the sink and sum 1.
// A row's sum is kept in parts by its 4 lanes and added at the end: the sink's 1 is lane
// t = 0's part, so that it counts once.
#include "dsc_common.cuh"

#ifndef PAGED
#define PAGED 0
#endif
#if PAGED && MASK_DTYPE != 0
#error "PAGED reads no mask"
#endif
#define ATTENTION_MMA_CAUSAL (CAUSAL || PAGED)

#ifndef FEATURE_PARTS
#define FEATURE_PARTS 1
#endif
#define ATTENTION_MMA_OUT_FEATURES (HEAD_DIM / FEATURE_PARTS)

// With OUT_DT (last, only where the step's result is the plan's half activation dtype):
// attention_prefill's, `out` of that dtype.
#ifdef OUT_DT
#define ATTENTION_MMA_OUT_DT OUT_DT
#else
#define ATTENTION_MMA_OUT_DT DSC_DT_F32
#endif
#if defined(OUT_DT) || FEATURE_PARTS > 1
#define ATTENTION_MMA_QUERY_ROWS 1
#define ATTENTION_MMA_QUERIES query_rows
#else
#define ATTENTION_MMA_QUERY_ROWS 0
#define ATTENTION_MMA_QUERIES out
#endif

#if !defined(KV_DTYPE) || (KV_DTYPE != DSC_DT_F16 && KV_DTYPE != DSC_DT_BF16)
#error "attention_prefill_mma needs KV_DTYPE 2 (f16) or 3 (bf16)"
#endif
#if HEAD_DIM % 16 != 0 || HEAD_DIM > 512
#error "attention_prefill_mma needs HEAD_DIM a multiple of 16, at most 512"
#endif
#if FEATURE_PARTS < 1 || HEAD_DIM % FEATURE_PARTS != 0 || ATTENTION_MMA_OUT_FEATURES % 8 != 0 || \
    ATTENTION_MMA_OUT_FEATURES > 256
#error "attention_prefill_mma: each block's HEAD_DIM / FEATURE_PARTS features must be a multiple of 8, at most 256"
#endif
#if Q_TILE != 16 * WARPS
#error "attention_prefill_mma: each warp owns 16 query rows (Q_TILE = 16 * WARPS)"
#endif
#if K_TILE % 16 != 0
#error "attention_prefill_mma: K_TILE must be a multiple of 16"
#endif
#if ALIBI
#error "attention_prefill_mma has no ALiBi (the rule gives such steps attention_prefill)"
#endif

// Shared-memory rows in 32-bit words (two halves each), padded by 4 words: the 8 rows a
// fragment load touches then start in 8 different 4-bank groups, so its 32 words fall in 32
// banks for every HEAD_DIM the kernel takes. Query and key rows hold the whole head, value
// rows the block's part of it.
#define ATTENTION_MMA_ROW_WORDS (HEAD_DIM / 2 + 4)
#define ATTENTION_MMA_VALUE_WORDS (ATTENTION_MMA_OUT_FEATURES / 2 + 4)
#define ATTENTION_MMA_SHARED_WORDS \
  (ATTENTION_MMA_ROW_WORDS * (Q_TILE + K_TILE) + ATTENTION_MMA_VALUE_WORDS * K_TILE)
#define ATTENTION_MMA_KEY_TILES (K_TILE / 8)
#define ATTENTION_MMA_FEATURE_TILES (ATTENTION_MMA_OUT_FEATURES / 8)
#ifdef SHARED_BYTES
#if SHARED_BYTES != 4 * ATTENTION_MMA_SHARED_WORDS
#error "attention_prefill_mma: SHARED_BYTES is not the size of its q, k and v tiles"
#endif
#elif 4 * ATTENTION_MMA_SHARED_WORDS > 48 * 1024
#error "attention_prefill_mma: tiles over 48 KiB need dynamic shared memory (SHARED_BYTES)"
#endif
#if defined(UNATTENDED_ZERO) || defined(SINKS)
// With SINKS only a sink of -inf leaves a row here: it weighs nothing, and the row is zero.
#define ATTENTION_MMA_UNATTENDED_ZERO true
#else
#define ATTENTION_MMA_UNATTENDED_ZERO false
#endif

typedef dsc_kv_element<KV_DTYPE>::type attention_mma_kv_t;

static __device__ __forceinline__ float attention_mma_negative_infinity() {
  return __int_as_float(0xff800000);
}

// Half `index` (0 low, 1 high) of a shared-memory word, as the low half of a word.
static __device__ __forceinline__ unsigned int attention_mma_half(unsigned int word, int index) {
  return index ? word >> 16 : word & 0xffffu;
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    attention_prefill_mma(float *out, const attention_mma_kv_t *keys,
                          const attention_mma_kv_t *values, long long kv_batch_stride,
                          long long kv_head_stride, int kv_rows, const void *mask,
                          const int *lengths, int io_past, int fresh, int heads, int head_offset,
                          int kv_head_offset, int group, int global_heads, float scale
#if ATTENTION_MMA_QUERY_ROWS
                          ,
                          const float *query_rows
#endif
#if PAGED
                          ,
                          const int *paged_rows, int table_width, int block_size,
                          const int *chunks
#endif
#ifdef SINKS
                          ,
                          const float *sinks
#endif
    ) {
#ifdef SHARED_BYTES
  extern __shared__ unsigned int attention_mma_shared[];
#else
  __shared__ unsigned int attention_mma_shared[ATTENTION_MMA_SHARED_WORDS];
#endif
  typedef unsigned int attention_mma_row[ATTENTION_MMA_ROW_WORDS];
  typedef unsigned int attention_mma_value_row[ATTENTION_MMA_VALUE_WORDS];
  attention_mma_row *q_tile = reinterpret_cast<attention_mma_row *>(attention_mma_shared);
  attention_mma_row *k_tile = q_tile + Q_TILE;
  attention_mma_value_row *v_tile = reinterpret_cast<attention_mma_value_row *>(k_tile + K_TILE);
  if (blockDim.x != WARPS * 32)
    return;
  (void)global_heads;

  const float negative_infinity = attention_mma_negative_infinity();
  // A query tile's FEATURE_PARTS blocks are neighbours along x: they read the same keys.
  const int part = blockIdx.x % FEATURE_PARTS, first_feature = part * ATTENTION_MMA_OUT_FEATURES;
  const int sequence = blockIdx.z, head = blockIdx.y;
  const int q_begin = blockIdx.x / FEATURE_PARTS * Q_TILE;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;  // the fragments' groupID and threadID_in_group
#if PAGED
  // The chunk's rows stand for the dense kernel's `fresh` new tokens of a sequence.
  long long row_base;
  const int *table;
  int past;
  dsc_paged_chunk(chunks, paged_rows, table_width, sequence, row_base, fresh, table, past);
  if (q_begin >= fresh)
    return;  // the block's alike: before any barrier
  int total = past + fresh;
  const int mask_width = total;
  const attention_mma_kv_t *key_base = keys, *value_base = values;
#else
  const long long row_base = static_cast<long long>(sequence) * fresh;
  const int past = lengths ? lengths[0] : io_past;
  int total = lengths ? lengths[1] : io_past + fresh;
  const int mask_width = lengths ? lengths[2] : io_past + fresh;
  const attention_mma_kv_t *key_base = keys + sequence * kv_batch_stride;
  const attention_mma_kv_t *value_base = values + sequence * kv_batch_stride;
#endif
  if (total > kv_rows)
    total = kv_rows;
  const long long mask_row = static_cast<long long>(sequence) * mask_width + (mask_width - total);
  const int kv_head = (head_offset + head) / group - kv_head_offset;
  key_base += kv_head * kv_head_stride;
  value_base += kv_head * kv_head_stride;
  // A key's first word: its row of the cache, or (PAGED) its block's slot through the table.
  auto key_row_word = [&](int key) -> long long {
#if PAGED
    const int index = key / block_size;
    return (table[index] * kv_batch_stride +
            static_cast<long long>(key - index * block_size) * HEAD_DIM) /
           2;
#else
    return static_cast<long long>(key) * (HEAD_DIM / 2);
#endif
  };

  // The block's queries, rounded to the cache's dtype, two features per word.
  for (int index = threadIdx.x; index < Q_TILE * (HEAD_DIM / 2); index += blockDim.x) {
    const int row = index / (HEAD_DIM / 2), pair = index % (HEAD_DIM / 2);
    const int token = q_begin + row;
    float low = 0.0f, high = 0.0f;
    if (token < fresh) {
      const float *query =
          ATTENTION_MMA_QUERIES + ((row_base + token) * heads + head) * HEAD_DIM;
      low = query[2 * pair];
      high = query[2 * pair + 1];
    }
    q_tile[row][pair] = dsc_pack_half2<KV_DTYPE>(low, high);
  }
  __syncthreads();

  const int q_end = min(fresh, q_begin + Q_TILE);
  int key_end = total;
  if (ATTENTION_MMA_CAUSAL)
    key_end = min(total, past + q_end);
  int key_begin = 0;
  if (WINDOW > 0) {
    key_begin = max(0, past + q_begin - WINDOW + 1);
    key_begin -= key_begin % K_TILE;
  }

  // This lane's two rows of its warp's 16: g and g + 8.
  const int row_token[2] = {q_begin + warp * 16 + g, q_begin + warp * 16 + g + 8};
#ifdef SINKS
  const float sink = sinks[head];
  float row_max[2] = {sink, sink};
  // this lane's part; the group of 4 adds them at the end
  float row_sum[2] = {t == 0 ? 1.0f : 0.0f, t == 0 ? 1.0f : 0.0f};
#else
  float row_max[2] = {negative_infinity, negative_infinity};
  float row_sum[2] = {0.0f, 0.0f};  // this lane's part; the group of 4 adds them at the end
#endif
  float o[ATTENTION_MMA_FEATURE_TILES][4];
#pragma unroll
  for (int n = 0; n < ATTENTION_MMA_FEATURE_TILES; ++n)
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  for (int tile = key_begin; tile < key_end; tile += K_TILE) {
    __syncthreads();  // every warp is done with the previous tile
    for (int index = threadIdx.x; index < K_TILE * (HEAD_DIM / 2); index += blockDim.x) {
      const int row = index / (HEAD_DIM / 2), pair = index % (HEAD_DIM / 2);
      const int key = tile + row;
      unsigned int key_word = 0, value_word = 0;  // zeros past the last key: 0 · v stays 0
      if (key < key_end) {
        // One 32-bit load per pair: a cache row is HEAD_DIM (a multiple of 16) halves, and
        // its batch and head strides are whole rows, so every pair is 4-byte aligned.
        const long long word = key_row_word(key) + pair;
        key_word = reinterpret_cast<const unsigned int *>(key_base)[word];
        if (FEATURE_PARTS == 1)
          value_word = reinterpret_cast<const unsigned int *>(value_base)[word];
      }
      k_tile[row][pair] = key_word;
      if (FEATURE_PARTS == 1)
        v_tile[row][pair] = value_word;
    }
    // The block's share of each value row (first_feature is even: whole words).
    for (int index = threadIdx.x; FEATURE_PARTS > 1 && index < K_TILE * (ATTENTION_MMA_OUT_FEATURES / 2);
         index += blockDim.x) {
      const int row = index / (ATTENTION_MMA_OUT_FEATURES / 2);
      const int pair = index % (ATTENTION_MMA_OUT_FEATURES / 2);
      const int key = tile + row;
      unsigned int value_word = 0;
      if (key < key_end)
        value_word = reinterpret_cast<const unsigned int *>(value_base)
            [key_row_word(key) + first_feature / 2 + pair];
      v_tile[row][pair] = value_word;
    }
    __syncthreads();

    // S[16 x K_TILE] = Q·Kᵀ: Q is A (row-major [query][feature]), K is B "col" ([feature]
    // [key] read along a key's row), so both fragments are whole words of the tiles.
    float s[ATTENTION_MMA_KEY_TILES][4];
#pragma unroll
    for (int j = 0; j < ATTENTION_MMA_KEY_TILES; ++j)
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int step = 0; step < HEAD_DIM / 16; ++step) {
      const int word = step * 8 + t;  // features 16·step + 2t, + 1
      unsigned int a[4];
      a[0] = q_tile[warp * 16 + g][word];
      a[1] = q_tile[warp * 16 + g + 8][word];
      a[2] = q_tile[warp * 16 + g][word + 4];
      a[3] = q_tile[warp * 16 + g + 8][word + 4];
#pragma unroll
      for (int j = 0; j < ATTENTION_MMA_KEY_TILES; ++j) {
        unsigned int b[2];
        b[0] = k_tile[j * 8 + g][word];
        b[1] = k_tile[j * 8 + g][word + 4];
        dsc_mma_m16n8k16<KV_DTYPE>(s[j], a, b);
      }
    }

    // Scale, cap and mask; s[j][e] is row g (e < 2) or g + 8, key tile + 8j + 2t + (e & 1).
    float tile_max[2] = {negative_infinity, negative_infinity};
#pragma unroll
    for (int j = 0; j < ATTENTION_MMA_KEY_TILES; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, key = tile + j * 8 + 2 * t + (e & 1);
        const int position = past + row_token[r];
        const bool allowed = row_token[r] < fresh && key < key_end &&
                             (!ATTENTION_MMA_CAUSAL || key <= position) &&
                             (WINDOW == 0 || (key > position - WINDOW && key < position + WINDOW)) &&
                             dsc_mask_on<MASK_DTYPE>(mask, mask_row + key);
        float score = s[j][e] * scale;
#ifdef SOFTCAP_BITS
        const float cap = __int_as_float(SOFTCAP_BITS);
        score = cap * tanhf(score / cap);
#endif
        s[j][e] = allowed ? score : negative_infinity;
        tile_max[r] = fmaxf(tile_max[r], s[j][e]);
      }
    }

    // Each row's maximum over the 4 lanes that hold it, then the online softmax.
    unsigned int p[ATTENTION_MMA_KEY_TILES][2];  // the weights as the next product's A
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);
      // Nothing attended yet: the weights are zeros and nothing needs correcting.
      const bool none = new_max == negative_infinity;
      const float correction = none ? 1.0f : expf(row_max[r] - new_max);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < ATTENTION_MMA_KEY_TILES; ++j) {
        const float low = none ? 0.0f : expf(s[j][2 * r] - new_max);
        const float high = none ? 0.0f : expf(s[j][2 * r + 1] - new_max);
        sum += low + high;
        p[j][r] = dsc_pack_half2<KV_DTYPE>(low, high);
      }
      row_sum[r] = row_sum[r] * correction + sum;
      row_max[r] = new_max;
#pragma unroll
      for (int n = 0; n < ATTENTION_MMA_FEATURE_TILES; ++n) {
        o[n][2 * r] *= correction;
        o[n][2 * r + 1] *= correction;
      }
    }

    // O[16 x the block's features] += P·V: S's accumulator layout over keys 16·step .. + 15 is A's
    // layout (its key tiles 2·step and 2·step + 1); V is B "col", [key][feature] read down a
    // feature's column, so each register joins two keys' halves.
#pragma unroll
    for (int step = 0; step < K_TILE / 16; ++step) {
      unsigned int a[4];
      a[0] = p[2 * step][0];
      a[1] = p[2 * step][1];
      a[2] = p[2 * step + 1][0];
      a[3] = p[2 * step + 1][1];
      const int key = step * 16 + 2 * t;
#pragma unroll
      for (int n = 0; n < ATTENTION_MMA_FEATURE_TILES; ++n) {
        const int feature = n * 8 + g, word = feature >> 1, half = feature & 1;
        unsigned int b[2];
        b[0] = attention_mma_half(v_tile[key][word], half) |
               (attention_mma_half(v_tile[key + 1][word], half) << 16);
        b[1] = attention_mma_half(v_tile[key + 8][word], half) |
               (attention_mma_half(v_tile[key + 9][word], half) << 16);
        dsc_mma_m16n8k16<KV_DTYPE>(o[n], a, b);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    const int token = row_token[r];
    if (token >= fresh)
      continue;
    const int position = past + token;
    void *out_row = dsc_element_address<ATTENTION_MMA_OUT_DT>(
        out, ((row_base + token) * heads + head) * HEAD_DIM);
    if (row_max[r] == negative_infinity) {
      // No key to attend: attention_prefill's rule, the row's 4 lanes sharing the block's
      // features (never a paged row, which attends its own key).
      dsc_unattended_row<KV_DTYPE, false, ATTENTION_MMA_OUT_DT>(
          out_row, value_base, HEAD_DIM, PAGED ? 0 : total, position, ATTENTION_MMA_UNATTENDED_ZERO,
          UNATTENDED_CAUSAL && CAUSAL, first_feature + t, 4,
          first_feature + ATTENTION_MMA_OUT_FEATURES);
      continue;
    }
#pragma unroll
    for (int n = 0; n < ATTENTION_MMA_FEATURE_TILES; ++n) {
      const float first = o[n][2 * r] / row_sum[r], second = o[n][2 * r + 1] / row_sum[r];
      const int feature = first_feature + n * 8 + 2 * t;
      if constexpr (ATTENTION_MMA_OUT_DT == DSC_DT_F32) {
        static_cast<float *>(out_row)[feature] = first;
        static_cast<float *>(out_row)[feature + 1] = second;
      } else {
        // The pair as one word: HEAD_DIM is even, so every row starts 4-byte aligned.
        static_cast<unsigned int *>(out_row)[feature / 2] =
            dsc_pack_half2<ATTENTION_MMA_OUT_DT>(first, second);
      }
    }
  }
}
