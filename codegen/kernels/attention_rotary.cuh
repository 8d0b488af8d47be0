// tfm.attention, first kernel: the rotary embedding of the new tokens' queries and keys, and
// the keys and values of every attended position placed where the attention kernels read
// them (docs/transformer-ops.md; the CPU reference is runtime/src/ops/Transformer.cpp).
//
// Constants: HEAD_DIM, ROTARY_DIM (0 = no rotary), ROTARY_INTERLEAVED (GPT-J's pairs, else
// the half-split rotate_half form), POS_DTYPE (5 i64, 6 i32; 0 without rotary), and, only
// where the step's query, key and value are one joined projection (`packed_qkv`),
// PACKED_QKV (1): each token's row then holds its (heads + 2 kv_heads) * HEAD_DIM queries,
// keys and values, and `query`, `key` and `value` point at the row's three parts.
//
// Blocks of grid x: one per (sequence, row); of grid y: heads, strided (any grid y covers
// them; the launcher gives one block per head). Session cache (lengths != 0): the rows are
// the `fresh` new tokens, written at cache positions past + row, past read from the device
// (a captured decode graph replays with new lengths). I/O mode (lengths == 0): the rows are the
// past + fresh positions of the presents; a row below `io_past` copies the rank's KV heads
// of the past inputs, a row at or above it is new token row − io_past. The rotated queries
// go to `q_out` (the step's output buffer, which the attention kernels read and then
// overwrite row by row; f32 scratch where the output is the plan's half activation dtype).
// Rotation is out of place, so no element is read after it is written.
//
// With QK_NORM (last, only where the step has q/k norms), each head of the new queries and
// keys is RMS-normalised (scales `q_norm_scale` and `k_norm_scale`, `qk_norm_epsilon`) in
// shared memory before it is rotated: over its own features with QK_NORM 1 (Qwen3's,
// Gemma-3's; scales [HEAD_DIM]), over all of its token's query or key heads with QK_NORM 2
// (OLMo-2's; scales [heads * HEAD_DIM] and [kv_heads * HEAD_DIM]); with QK_NORM 3
// (HunYuan-Dense's) over its own features without the scale, which then multiplies each
// rotated feature.
//
// With KV_DTYPE (2 f16, 3 bf16; last, only where the step's session cache is of that
// dtype: cache_dtype), `key_dst` and `value_dst` are that cache, and the keys and values
// are rounded to it (dsc_common.cuh, dsc_kv_element). Absent: f32, as I/O mode's presents.
//
// With PAGED (1; last, only in the serving plan's `step` program: docs/serving.md), the
// destination is the engine's block pool ([blocks, kv heads, block_size, HEAD_DIM] per
// layer: `dst_batch_stride` is a block's elements, `dst_head_stride` a head's in a block)
// and sequence z is one row of the step, one new token (`fresh` and `rows_per_sequence` 1)
// at the position `paged_rows` gives ([rows][1 + table_width] ints: the position, then the
// block table), written at its block's slot. `lengths` is not read, and no query is
// written: attention_decode (PAGED) rotates the queries itself. Every row's key and value
// are written by this launch before any row attends, so the rows of a prompt chunk see each
// other. PAGED 2 (a step that also carries attention_prefill with PAGED, for its prompt
// chunks) writes every row's rotated query to `q_out` as well, as the dense kernel does:
// the prefill kernel reads them, the decode kernel still rotates its rows' own. A step
// without chunks passes a null `q_out`, and no query is written.
#include "dsc_common.cuh"

#ifndef PAGED
#define PAGED 0
#endif

#ifndef KV_DTYPE
#define KV_DTYPE DSC_DT_F32
#endif
typedef dsc_kv_element<KV_DTYPE>::type attention_kv_t;

#if ROTARY_DIM % 2 != 0 || ROTARY_DIM > HEAD_DIM
#error "ROTARY_DIM must be even and at most HEAD_DIM"
#endif

// The by-value frequencies and the rotation itself: dsc_common.cuh (attention_decode rotates
// with the same code when it takes a decode step's token itself).
typedef dsc_rotary_frequencies_of<ROTARY_DIM> dsc_rotary_frequencies;

static __device__ __forceinline__ float
attention_rotary_feature(const float *head, int feature, float position,
                         const dsc_rotary_frequencies &frequencies) {
  return dsc_rotary_feature<ROTARY_DIM, ROTARY_INTERLEAVED>(head, feature, position,
                                                              frequencies);
}

extern "C" __global__ void attention_rotary(
    const float *query, const float *key, const float *value, const void *positions,
    float *q_out, attention_kv_t *key_dst, attention_kv_t *value_dst, const float *past_key,
    const float *past_value, const int *lengths, int io_past, int fresh, int rows_per_sequence,
    long long dst_batch_stride, long long dst_head_stride, int dst_capacity, int heads,
    int kv_heads, int past_heads, int past_head_offset, dsc_rotary_frequencies frequencies
#ifdef QK_NORM
    ,
    const float *q_norm_scale, const float *k_norm_scale, float qk_norm_epsilon
#endif
#if PAGED
    ,
    const int *paged_rows, int table_width, int block_size
#endif
    ) {
  const int sequence = blockIdx.x / rows_per_sequence;
  const int row = blockIdx.x % rows_per_sequence;
#if PAGED
  const int *table = paged_rows + static_cast<long long>(sequence) * (table_width + 1) + 1;
  const bool session = true;
  const int past = table[-1];
#else
  const bool session = lengths != 0;
  const int past = session ? lengths[0] : io_past;
#endif

  int token;         // the new token's index in [0, fresh), or -1 for a copied past row
  int cache_row;     // where its key and value go
  if (session) {
    token = row;
    cache_row = past + row;
  } else {
    token = row < past ? -1 : row - past;
    cache_row = row;
  }
  if (token >= fresh || cache_row < 0 || cache_row >= dst_capacity)
    return;

#if PAGED
  // The slot of its position in its block.
  const long long row_offset = table[cache_row / block_size] * dst_batch_stride +
                               static_cast<long long>(cache_row % block_size) * HEAD_DIM;
#else
  const long long row_offset = sequence * dst_batch_stride + cache_row * (long long)HEAD_DIM;
#endif
  attention_kv_t *key_row = key_dst + row_offset;
  attention_kv_t *value_row = value_dst + row_offset;

  if (token < 0) {
    // I/O mode, a past position: the rank's heads out of a past that may hold every head.
    const long long past_rows = past;
    for (int head = blockIdx.y; head < kv_heads; head += gridDim.y)
      for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x) {
        const long long from =
            ((static_cast<long long>(sequence) * past_heads + past_head_offset + head) *
                 past_rows +
             cache_row) *
                HEAD_DIM +
            feature;
        dsc_store_float<KV_DTYPE>(key_row, head * dst_head_stride + feature, past_key[from]);
        dsc_store_float<KV_DTYPE>(value_row, head * dst_head_stride + feature,
                                  past_value[from]);
      }
    return;
  }

  const long long token_index = static_cast<long long>(sequence) * fresh + token;
  float position = 0.0f;
#if ROTARY_DIM > 0
  position = static_cast<float>(dsc_load_index<POS_DTYPE>(positions, token_index));
#endif

#ifdef PACKED_QKV
  const long long row_width = static_cast<long long>(heads + 2 * kv_heads) * HEAD_DIM;
  const float *query_token = query + token_index * row_width;
  const float *key_token = key + token_index * row_width;
  const float *value_token = value + token_index * row_width;
#else
  const float *query_token = query + token_index * heads * HEAD_DIM;
  const float *key_token = key + token_index * kv_heads * HEAD_DIM;
  const float *value_token = value + token_index * kv_heads * HEAD_DIM;
#endif
  float *q_out_token = q_out + token_index * heads * HEAD_DIM;
  // Head by head over the grid's y blocks, so that a decode step's one token spreads over
  // as many blocks as it has heads, each thread's query, key and value loads in flight
  // together (one block looping over every head was a chain of dependent memory trips:
  // 9.7 us of an H200's decode step for GPT-2's 12 heads).
#if PAGED
  // The queries are attention_decode's (PAGED) to rotate, but for the prefill kernel's
  // (PAGED 2, q_out given): else `heads` only sizes a packed row.
  const int rotated_heads = PAGED == 2 && q_out ? heads : 0;
#else
  const int rotated_heads = heads;
#endif
  const int head_count = rotated_heads > kv_heads ? rotated_heads : kv_heads;
#ifdef QK_NORM
  __shared__ float query_staged[HEAD_DIM], key_staged[HEAD_DIM], norm_scratch[32];
  // QK_NORM 3: the scales multiply the rotated features.
  const float *q_rotated_scale = QK_NORM == 3 ? q_norm_scale : nullptr;
  const float *k_rotated_scale = QK_NORM == 3 ? k_norm_scale : nullptr;
#else
  const float *q_rotated_scale = nullptr, *k_rotated_scale = nullptr;
#endif
  for (int head = blockIdx.y; head < head_count; head += gridDim.y) {
    const float *query_head = query_token + head * HEAD_DIM;
    const float *key_head = key_token + head * HEAD_DIM;
#ifdef QK_NORM
    // `head < rotated_heads` and `head < kv_heads` are the block's alike: every thread
    // stages.
    if (head < rotated_heads) {
#if QK_NORM == 2
      dsc_stage_rms_normalized_span<HEAD_DIM>(query_token, heads * HEAD_DIM, query_head,
                                              q_norm_scale, qk_norm_epsilon, query_staged,
                                              norm_scratch);
#else
      dsc_stage_rms_normalized<HEAD_DIM>(query_head, QK_NORM == 3 ? nullptr : q_norm_scale,
                                         qk_norm_epsilon, query_staged, norm_scratch);
#endif
      query_head = query_staged;
    }
    if (head < kv_heads) {
#if QK_NORM == 2
      dsc_stage_rms_normalized_span<HEAD_DIM>(key_token, kv_heads * HEAD_DIM, key_head,
                                              k_norm_scale, qk_norm_epsilon, key_staged,
                                              norm_scratch);
#else
      dsc_stage_rms_normalized<HEAD_DIM>(key_head, QK_NORM == 3 ? nullptr : k_norm_scale,
                                         qk_norm_epsilon, key_staged, norm_scratch);
#endif
      key_head = key_staged;
    }
#endif
    for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x) {
      if (head < rotated_heads)
        q_out_token[head * HEAD_DIM + feature] =
            attention_rotary_feature(query_head, feature, position, frequencies) *
            (q_rotated_scale ? q_rotated_scale[feature] : 1.0f);
      if (head < kv_heads) {
        dsc_store_float<KV_DTYPE>(
            key_row, head * dst_head_stride + feature,
            attention_rotary_feature(key_head, feature, position, frequencies) *
                (k_rotated_scale ? k_rotated_scale[feature] : 1.0f));
        dsc_store_float<KV_DTYPE>(value_row, head * dst_head_stride + feature,
                                  value_token[head * HEAD_DIM + feature]);
      }
    }
  }
}
