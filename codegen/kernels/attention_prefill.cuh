// tfm.attention over any number of new tokens, flash style: one block per (query tile, head,
// sequence); key and value tiles pass through shared memory and each query row keeps an
// online softmax (running maximum, sum and unnormalised output, all f32), so the score
// matrix never exists. Semantics are the CPU reference's (runtime/src/ops/Transformer.cpp,
// computeAttention), including its rule for rows with no key to attend.
//
// Constants: HEAD_DIM, WARPS (block = WARPS * 32 threads), Q_TILE (query rows per block, a
// multiple of WARPS: each warp owns Q_TILE / WARPS rows), K_TILE (keys per shared-memory
// tile), CAUSAL, WINDOW (0 = none), ALIBI, MASK_DTYPE (0 none, 5 i64, 6 i32, 9 u8, 10 bool:
// a padding mask whose last `total` columns are the keys), UNATTENDED_CAUSAL,
// UNATTENDED_ZERO (only where the step asks for zeros at rows with no key: sdpa's NaN
// guard; undefined keeps the code before it existed), and, only
// where the step has Gemma-2's logit soft-capping, SOFTCAP_BITS (the cap's f32 bits: scores
// become cap * tanh(scores / cap) before the ALiBi bias; undefined = off, and the code
// without it is the code before soft-capping existed), and, only where the step adds a
// bias computed in the graph (T5's relative positions), BIAS (1; undefined = none: the
// kernel then has neither the parameters nor the code). The bias is read at
// bias + sequence * bias_batch_stride + head * bias_head_stride + token * bias_row_stride
// + key: the launcher points it at this rank's first head and gives a stride of 0 where
// the bias broadcasts.
//
// A cross-attention (keys of another sequence, s_kv of them) runs in I/O mode with
// io_past = s_kv - fresh: its keys are io_past + fresh, and nothing else reads the past
// without a causal mask, a window or ALiBi, which it does not have.
//
// With KV_DTYPE (2 f16, 3 bf16; last, only where the step's session cache is of that
// dtype), `keys` and `values` are that cache, widened as they are read (dsc_kv_element).
//
// `out` holds the rotated queries on entry (attention_rotary wrote them there) and the
// attention output on exit: a block reads exactly the rows it later writes, and reads them
// all into shared memory before the first write. With OUT_DT (2 f16, 3 bf16; last, only
// where the step's result is the plan's half activation dtype) `out` is of that dtype and
// the f32 rotated queries are in `query_rows` (the kernel's last parameter), laid out as
// `out` would hold them.
//
// With PAGED (1; last, only in the serving plan's `step` program: docs/serving.md), the
// cache is the engine's block pool ([blocks, kv heads, block_size, HEAD_DIM] per layer:
// `kv_batch_stride` is a block's elements, `kv_head_stride` a head's in a block) and
// sequence z is a prompt chunk of the step: `chunks` holds [first row, rows] per chunk,
// consecutive rows of one sequence at consecutive positions, whose position and block table
// are `paged_rows`' ([rows][1 + table_width] ints: the position, then the table). The
// chunk's query tile shares each key and value tile, read through the first row's table
// (attention_decode_locate's addressing), so a prefix is read once per tile, not once per
// row. Query and output rows are the step's rows. Attention is over [0, position] (causal
// whatever CAUSAL says, as the CPU paged attention), `lengths`, `mask` (MASK_DTYPE 0),
// `io_past` and `fresh` are not read, and every row attends its own key, so none is
// unattended. attention_rotary (PAGED 2) has written every row's key and value, and its
// rotated (and q/k-normed) query into `out` (`query_rows` with OUT_DT), before this runs.
//
// With SINKS (1; last, only where the step has GPT-OSS's attention sinks), `sinks` (the
// last parameter) holds a logit per query head of the rank: a key without a value in every
// row's softmax. Each row's online softmax starts as if it had seen that key: maximum the
// sink, sum exp(sink - sink) = 1, output zero. A row with no key to attend then ends at
// 0 / 1 = 0, the CPU kernels' row (the sink takes all of its weight).
#include "dsc_common.cuh"

#ifndef PAGED
#define PAGED 0
#endif
#if PAGED && (MASK_DTYPE != 0 || defined(BIAS))
#error "PAGED reads no mask and adds no bias"
#endif
#define ATTENTION_PREFILL_CAUSAL (CAUSAL || PAGED)

#ifdef OUT_DT
#define ATTENTION_PREFILL_OUT_DT OUT_DT
#define ATTENTION_PREFILL_QUERIES query_rows
#else
#define ATTENTION_PREFILL_OUT_DT DSC_DT_F32
#define ATTENTION_PREFILL_QUERIES out
#endif

#ifndef KV_DTYPE
#define KV_DTYPE DSC_DT_F32
#endif
typedef dsc_kv_element<KV_DTYPE>::type attention_kv_t;

#if Q_TILE % WARPS != 0
#error "Q_TILE must be a multiple of WARPS"
#endif

#define ATTENTION_PREFILL_ROWS (Q_TILE / WARPS)
#define ATTENTION_PREFILL_CHUNKS ((K_TILE + 31) / 32)
#define ATTENTION_PREFILL_FEATURES ((HEAD_DIM + 31) / 32)
// One float of padding per key row: lane j reads row j, and the padded stride puts the 32
// rows' elements of one feature in 32 different banks.
#define ATTENTION_PREFILL_K_STRIDE (HEAD_DIM + 1)
#if defined(UNATTENDED_ZERO) || defined(SINKS)
// With SINKS only a sink of -inf leaves a row here: it weighs nothing, and the row is zero.
#define ATTENTION_PREFILL_UNATTENDED_ZERO true
#else
#define ATTENTION_PREFILL_UNATTENDED_ZERO false
#endif

static __device__ __forceinline__ float attention_prefill_negative_infinity() {
  return __int_as_float(0xff800000);
}

#ifdef SOFTCAP_BITS
// Gemma-2's attn_logit_softcapping: cap * tanh(score / cap), as the CPU kernel computes it.
static __device__ __forceinline__ float attention_prefill_softcap(float score) {
  const float cap = __int_as_float(SOFTCAP_BITS);
  return cap * tanhf(score / cap);
}
#endif

#if ALIBI
// BLOOM's slope of global head `head` of `heads` (transformers' get_slopes), as the CPU
// kernel computes it in float: each power is taken in double and rounded once, which is
// the correctly rounded float power whatever math flags the kernel was compiled with.
static __device__ float attention_prefill_alibi_slope(int head, int heads) {
  int closest = 1, closest_log2 = 0;
  while (closest * 2 <= heads) {
    closest *= 2;
    ++closest_log2;
  }
  if (head < closest) {
    const float base = static_cast<float>(pow(2.0, -pow(2.0, -(closest_log2 - 3.0))));
    return static_cast<float>(pow(static_cast<double>(base), static_cast<double>(head + 1)));
  }
  const float extra = static_cast<float>(pow(2.0, -pow(2.0, -(closest_log2 + 1 - 3.0))));
  return static_cast<float>(
      pow(static_cast<double>(extra), static_cast<double>(1 + 2 * (head - closest))));
}
#endif

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    attention_prefill(float *out, const attention_kv_t *keys, const attention_kv_t *values,
                      long long kv_batch_stride, long long kv_head_stride, int kv_rows,
                      const void *mask, const int *lengths, int io_past, int fresh, int heads,
                      int head_offset, int kv_head_offset, int group, int global_heads,
                      float scale
#ifdef BIAS
                      ,
                      const float *bias, long long bias_batch_stride, long long bias_head_stride,
                      long long bias_row_stride
#endif
#ifdef OUT_DT
                      ,
                      const float *query_rows
#endif
#if PAGED
                      ,
                      const int *paged_rows, int table_width, int block_size, const int *chunks
#endif
#ifdef SINKS
                      ,
                      const float *sinks
#endif
    ) {
  __shared__ float q_tile[Q_TILE][HEAD_DIM];
  __shared__ float k_tile[K_TILE][ATTENTION_PREFILL_K_STRIDE];
  __shared__ float v_tile[K_TILE][HEAD_DIM];
  if (blockDim.x != WARPS * 32)
    return;

  const float negative_infinity = attention_prefill_negative_infinity();
  const int sequence = blockIdx.z, head = blockIdx.y, q_begin = blockIdx.x * Q_TILE;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
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
  const attention_kv_t *key_base = keys, *value_base = values;
#else
  // Session cache: the lengths of this run from the device. I/O mode: the presents hold
  // exactly past + fresh rows and the mask (if any) is [batch, past + fresh].
  const long long row_base = static_cast<long long>(sequence) * fresh;
  const int past = lengths ? lengths[0] : io_past;
  int total = lengths ? lengths[1] : io_past + fresh;
  const int mask_width = lengths ? lengths[2] : io_past + fresh;
  const attention_kv_t *key_base = keys + sequence * kv_batch_stride;
  const attention_kv_t *value_base = values + sequence * kv_batch_stride;
#endif
  if (total > kv_rows)
    total = kv_rows;
  const long long mask_row = static_cast<long long>(sequence) * mask_width + (mask_width - total);
  const int kv_head = (head_offset + head) / group - kv_head_offset;
  key_base += kv_head * kv_head_stride;
  value_base += kv_head * kv_head_stride;

  for (int index = threadIdx.x; index < Q_TILE * HEAD_DIM; index += blockDim.x) {
    const int row = index / HEAD_DIM, feature = index % HEAD_DIM;
    const int token = q_begin + row;
    q_tile[row][feature] =
        token < fresh
            ? ATTENTION_PREFILL_QUERIES[((row_base + token) * heads + head) * HEAD_DIM +
                                        feature]
            : 0.0f;
  }
  __syncthreads();

  // Keys past the last query's position are never attended under the causal mask, and keys
  // at or before the first query's position − WINDOW never under the window. ALiBi counts
  // attended keys from the first one, so it always starts at key 0.
  const int q_end = min(fresh, q_begin + Q_TILE);
  int key_end = total;
  if (ATTENTION_PREFILL_CAUSAL)
    key_end = min(total, past + q_end);
  int key_begin = 0;
  if (WINDOW > 0 && !ALIBI) {
    key_begin = max(0, past + q_begin - WINDOW + 1);
    key_begin -= key_begin % K_TILE;
  }

  float slope = 0.0f;
#if ALIBI
  slope = attention_prefill_alibi_slope(head_offset + head, global_heads);
#endif
#ifdef BIAS
  const float *bias_base = bias + sequence * bias_batch_stride + head * bias_head_stride;
#endif

  float row_max[ATTENTION_PREFILL_ROWS], row_sum[ATTENTION_PREFILL_ROWS];
  float row_out[ATTENTION_PREFILL_ROWS][ATTENTION_PREFILL_FEATURES];
#ifdef SINKS
  const float sink = sinks[head];
#endif
#pragma unroll
  for (int r = 0; r < ATTENTION_PREFILL_ROWS; ++r) {
#ifdef SINKS
    row_max[r] = sink;
    row_sum[r] = 1.0f;
#else
    row_max[r] = negative_infinity;
    row_sum[r] = 0.0f;
#endif
#pragma unroll
    for (int i = 0; i < ATTENTION_PREFILL_FEATURES; ++i)
      row_out[r][i] = 0.0f;
  }
#if ALIBI
  int attended_before = 0;  // attended keys before the current tile
#endif

  for (int tile = key_begin; tile < key_end; tile += K_TILE) {
    __syncthreads();  // every warp is done with the previous tile
    for (int index = threadIdx.x; index < K_TILE * HEAD_DIM; index += blockDim.x) {
      const int row = index / HEAD_DIM, feature = index % HEAD_DIM;
      const int key = tile + row;
      const bool present = key < key_end;
#if PAGED
      // Through the chunk's table (attention_decode_locate's addressing), and only for keys
      // it names.
      long long element = 0;
      if (present) {
        const int index = key / block_size;
        element = table[index] * kv_batch_stride +
                  static_cast<long long>(key - index * block_size) * HEAD_DIM + feature;
      }
#else
      const long long element = static_cast<long long>(key) * HEAD_DIM + feature;
#endif
      k_tile[row][feature] = present ? dsc_load_float<KV_DTYPE>(key_base, element) : 0.0f;
      v_tile[row][feature] = present ? dsc_load_float<KV_DTYPE>(value_base, element) : 0.0f;
    }
    __syncthreads();

    bool key_on[ATTENTION_PREFILL_CHUNKS];
    float key_position[ATTENTION_PREFILL_CHUNKS];
#pragma unroll
    for (int c = 0; c < ATTENTION_PREFILL_CHUNKS; ++c) {
      const int slot = c * 32 + lane, key = tile + slot;
      key_on[c] = slot < K_TILE && key < key_end && dsc_mask_on<MASK_DTYPE>(mask, mask_row + key);
      key_position[c] = 0.0f;
#if ALIBI
      // transformers' cumsum(mask) − 1 over the attended keys.
      const unsigned on_bits = __ballot_sync(0xffffffffu, key_on[c]);
      if (key_on[c])
        key_position[c] = static_cast<float>(attended_before + __popc(on_bits & ((1u << lane) - 1u)));
      attended_before += __popc(on_bits);
#endif
    }

#pragma unroll
    for (int r = 0; r < ATTENTION_PREFILL_ROWS; ++r) {
      const int local_row = warp * ATTENTION_PREFILL_ROWS + r;
      const int token = q_begin + local_row;
      if (token >= fresh)
        continue;  // the same for the whole warp
      const int position = past + token;
      float score[ATTENTION_PREFILL_CHUNKS];
      float tile_max = negative_infinity;
#pragma unroll
      for (int c = 0; c < ATTENTION_PREFILL_CHUNKS; ++c) {
        const int slot = c * 32 + lane, key = tile + slot;
        const bool allowed = key_on[c] && (!ATTENTION_PREFILL_CAUSAL || key <= position) &&
                             (WINDOW == 0 || (key > position - WINDOW && key < position + WINDOW));
        score[c] = negative_infinity;
        if (allowed) {
          float dot = 0.0f;
#pragma unroll 8
          for (int feature = 0; feature < HEAD_DIM; ++feature)
            dot += q_tile[local_row][feature] * k_tile[slot][feature];
#ifdef SOFTCAP_BITS
          score[c] = attention_prefill_softcap(dot * scale) + slope * key_position[c];
#else
          score[c] = dot * scale + slope * key_position[c];
#endif
#ifdef BIAS
          score[c] += bias_base[token * bias_row_stride + key];
#endif
        }
        tile_max = fmaxf(tile_max, score[c]);
      }
      tile_max = dsc_warp_max(tile_max);
      if (tile_max == negative_infinity)
        continue;  // nothing attended in this tile (warp-uniform after the reduction)
      const float new_max = fmaxf(row_max[r], tile_max);
      const float correction = expf(row_max[r] - new_max);  // 0 while row_max is −inf
      float probability_sum = 0.0f;
#pragma unroll
      for (int c = 0; c < ATTENTION_PREFILL_CHUNKS; ++c) {
        score[c] = expf(score[c] - new_max);  // 0 for keys not attended
        probability_sum += score[c];
      }
      row_sum[r] = row_sum[r] * correction + dsc_warp_sum(probability_sum);
#pragma unroll
      for (int i = 0; i < ATTENTION_PREFILL_FEATURES; ++i)
        row_out[r][i] *= correction;
#pragma unroll 4
      for (int slot = 0; slot < K_TILE; ++slot) {
        const float probability = __shfl_sync(0xffffffffu, score[slot / 32], slot % 32);
#pragma unroll
        for (int i = 0; i < ATTENTION_PREFILL_FEATURES; ++i) {
          const int feature = lane + 32 * i;
          if (feature < HEAD_DIM)
            row_out[r][i] += probability * v_tile[slot][feature];
        }
      }
      row_max[r] = new_max;
    }
  }

#pragma unroll
  for (int r = 0; r < ATTENTION_PREFILL_ROWS; ++r) {
    const int token = q_begin + warp * ATTENTION_PREFILL_ROWS + r;
    if (token >= fresh)
      continue;
    const int position = past + token;
    void *out_row = dsc_element_address<ATTENTION_PREFILL_OUT_DT>(
        out, ((row_base + token) * heads + head) * HEAD_DIM);
    if (row_max[r] == negative_infinity) {
      // A paged row's keys are not contiguous rows, but it always attends its own key.
      dsc_unattended_row<KV_DTYPE, false, ATTENTION_PREFILL_OUT_DT>(
          out_row, value_base, HEAD_DIM, PAGED ? 0 : total, position,
          ATTENTION_PREFILL_UNATTENDED_ZERO, UNATTENDED_CAUSAL && CAUSAL, lane, 32);
      continue;
    }
#pragma unroll
    for (int i = 0; i < ATTENTION_PREFILL_FEATURES; ++i) {
      const int feature = lane + 32 * i;
      if (feature < HEAD_DIM)
        dsc_store_float<ATTENTION_PREFILL_OUT_DT>(out_row, feature, row_out[r][i] / row_sum[r]);
    }
  }
}
