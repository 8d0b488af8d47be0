// tfm.attention for one new token per sequence over the session's KV cache, split-KV: one
// block per (key split, head, sequence). Each split reduces its SPLIT_KEYS keys to a partial
// maximum, sum and unnormalised output (f32); attention_combine merges the splits. The grid
// is sized for the cache's capacity (a captured decode graph replays with growing lengths,
// read from the device), and splits at or beyond `total` return at once.
//
// Constants: HEAD_DIM, WARPS (block = WARPS * 32 threads), SPLIT_KEYS (a multiple of
// WARPS * 32: warp w takes the w-th contiguous SPLIT_KEYS / WARPS keys of its split, lane j
// its j-th key of each 32), CAUSAL, WINDOW (0 = none), ALIBI, MASK_DTYPE (0 none, 5 i64,
// 6 i32, 9 u8, 10 bool), and SOFTCAP_BITS only with soft-capping (attention_prefill.cuh).
// `query` is the step's output buffer, holding the rotated query.
//
// With FUSED_ROTARY (and then ROTARY_DIM, ROTARY_INTERLEAVED and POS_DTYPE as
// attention_rotary's), the kernel does attention_rotary's work for the one new token itself,
// so that a decode step launches two kernels, not three: each block rotates its head's
// query from the step's query input, and the blocks of the split that holds the new
// token's cache row (`past`) rotate its key, take its value, write both into the cache
// (every such block of a KV head writes the same values) and attend to them from shared
// memory. No other block reads that row: the other splits end before it. The query, key
// and value inputs are read at `query_stride` and `kv_stride` floats per token (a joined
// projection's row width when they are packed).
//
// With QK_NORM (only with FUSED_ROTARY; last, and only where the step has q/k norms), the
// query and the new key are RMS-normalised (`q_norm_scale`, `k_norm_scale`,
// `qk_norm_epsilon`) before they are rotated, as attention_rotary does: per head (1), or
// over all of the token's query or key heads (2, a step whose heads are the model's), or
// per head with the scales after the rotation (3).
//
// With FUSED_COMBINE (only with FUSED_ROTARY; then UNATTENDED_CAUSAL, and UNATTENDED_ZERO
// where the step asks for it, as attention_combine's), a decode step is one launch: each
// block counts its arrival in `arrivals` (one int per (head, sequence), zero before the
// launch) after writing its partials, and the last block of each (head, sequence) merges
// the splits into `out` and sets the count back to zero for the next launch or graph
// replay. The launcher passes the step's output as both `query` and `out`.
//
// With KV_DTYPE (2 f16, 3 bf16; last, only where the step's session cache is of that
// dtype), `keys` and `values` are that cache (dsc_kv_element): the new token's key and value
// are rounded to it when they are written, and its shared-memory copies hold them rounded,
// so that every key is attended as stored.
//
// With GROUP_HEADS (last, and only where it is more than 1: a GQA or MQA step), a block
// attends for up to GROUP_HEADS query heads of one KV head, so that each key and value it
// reads serves all of them: the cache is read once per group (or run of a group), not once
// per query head. Block y takes the (y mod runs)-th run of GROUP_HEADS query heads of the
// (y / runs)-th KV head from the rank's first, runs = ceil(group / GROUP_HEADS), and skips
// the heads that are not the rank's (a rank with fewer query heads than a group, when
// tensor parallelism replicates a KV head). Without it, block y is query head y.
// FUSED_COMBINE counts one arrival per (block y, sequence).
//
// With OUT_DT (2 f16, 3 bf16; only with FUSED_COMBINE, and only where the step's result is
// the plan's half activation dtype), `out` is of that dtype: the merge rounds into it.
//
// With PAGED (1; last, only in the serving plan's `step` program: docs/serving.md), the
// cache is the engine's block pool, [blocks, kv heads, block_size, HEAD_DIM] per layer
// (`kv_batch_stride` is a block's elements, `kv_head_stride` a head's in a block), and each
// sequence z is one row of the step: one new token of its own sequence, at its own position,
// whose blocks `paged_rows` lists ([rows][1 + table_width] ints: the position, then the
// block table). The row's key and value were written before the launch by attention_rotary
// (PAGED), for every row, so that the rows of one prompt chunk see each other: the kernel
// only rotates its query (FUSED_ROTARY) and attends to positions [0, position] through the
// table. `lengths` and `mask` are not read (the engine's sequences have no padding: an ALiBi
// key position is its position). Everything else is the dense kernel's code: only the
// address of a cache row differs (attention_decode_locate).
//
// With SINKS (1; last, only where the step has GPT-OSS's attention sinks, and only with
// FUSED_COMBINE), `sinks` (the last parameter) holds a logit per query head of the rank,
// local head h's at sinks[h]: a key without a value in every row's softmax. It joins the
// softmax once, in the merge of the splits (dsc_attention_merge_splits), not in each
// split's partials, so that the splits' maxima, sums and outputs are the ones without it.
#include "dsc_common.cuh"

#ifdef OUT_DT
#ifndef FUSED_COMBINE
#error "OUT_DT needs FUSED_COMBINE: the merge writes the output"
#endif
#define ATTENTION_DECODE_OUT_DT OUT_DT
#else
#define ATTENTION_DECODE_OUT_DT DSC_DT_F32
#endif

#ifndef KV_DTYPE
#define KV_DTYPE DSC_DT_F32
#endif
#ifndef GROUP_HEADS
#define GROUP_HEADS 1
#endif
#if GROUP_HEADS < 1
#error "GROUP_HEADS must be at least 1"
#endif
typedef dsc_kv_element<KV_DTYPE>::type attention_kv_t;

#if defined(FUSED_COMBINE) && !defined(FUSED_ROTARY)
#error "FUSED_COMBINE's parameters follow FUSED_ROTARY's"
#endif
#if defined(QK_NORM) && !(defined(FUSED_ROTARY) && defined(FUSED_COMBINE))
#error "QK_NORM's parameters follow FUSED_COMBINE's"
#endif
#ifdef UNATTENDED_ZERO
#define ATTENTION_DECODE_ZERO 1
#else
#define ATTENTION_DECODE_ZERO 0
#endif

#ifndef PAGED
#define PAGED 0
#endif
#if PAGED && !(defined(FUSED_ROTARY) && defined(FUSED_COMBINE))
#error "PAGED's parameters follow FUSED_COMBINE's"
#endif
#ifdef SINKS
#ifndef FUSED_COMBINE
#error "SINKS needs FUSED_COMBINE: the sinks join the softmax in the merge"
#endif
#define ATTENTION_DECODE_SINK true
#define ATTENTION_DECODE_SINK_OF(head) (sinks + (head))
#else
#define ATTENTION_DECODE_SINK false
#define ATTENTION_DECODE_SINK_OF(head) nullptr
#endif

#if PAGED
// Where position t of a row's sequence is: its block (through the row's table) and its slot
// in that block.
static __device__ __forceinline__ void attention_decode_locate(const int *table, int block_size,
                                                               int t, int &block, int &slot) {
  const int index = t / block_size;
  block = table[index];
  slot = t - index * block_size;
}
#endif

// The keys a row with nothing to attend averages (dsc_unattended_row reads them as
// contiguous rows). A paged row always attends its own key, so it has none.
#if PAGED
#define ATTENTION_DECODE_UNATTENDED_KEYS 0
#else
#define ATTENTION_DECODE_UNATTENDED_KEYS total
#endif

#if SPLIT_KEYS % (WARPS * 32) != 0
#error "SPLIT_KEYS must be a multiple of WARPS * 32"
#endif

#define ATTENTION_DECODE_WARP_KEYS (SPLIT_KEYS / WARPS)
#define ATTENTION_DECODE_FEATURES ((HEAD_DIM + 31) / 32)
// A lane reads its key 16 bytes at a time (4 f32 or 8 f16/bf16 elements) where rows are
// 16-byte aligned: HEAD_DIM a multiple of that, and a cache whose base is (every cache the
// runtime allocates; the kernel checks). Otherwise element by element.
#define ATTENTION_DECODE_VEC (KV_DTYPE == DSC_DT_F32 ? 4 : 8)
#define ATTENTION_DECODE_VECTOR_KEYS (HEAD_DIM % ATTENTION_DECODE_VEC == 0)

struct alignas(16) attention_decode_words {
  unsigned int a, b, c, d;
};

// The ATTENTION_DECODE_VEC cache elements of one 16-byte load, as f32 (little endian: in
// a half cache, element 2i is the low half of word i).
static __device__ __forceinline__ void attention_decode_unpack(const attention_decode_words &v,
                                                               float *out) {
  const unsigned int words[4] = {v.a, v.b, v.c, v.d};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (KV_DTYPE == DSC_DT_F32) {
      out[i] = __uint_as_float(words[i]);
    } else {
      const unsigned short low = static_cast<unsigned short>(words[i] & 0xffffu);
      const unsigned short high = static_cast<unsigned short>(words[i] >> 16);
      out[2 * i] = dsc_load_float<KV_DTYPE>(&low, 0);
      out[2 * i + 1] = dsc_load_float<KV_DTYPE>(&high, 0);
    }
  }
}

static __device__ __forceinline__ float attention_decode_negative_infinity() {
  return __int_as_float(0xff800000);
}

#ifdef SOFTCAP_BITS
// Gemma-2's attn_logit_softcapping: cap * tanh(score / cap), as the CPU kernel computes it.
static __device__ __forceinline__ float attention_decode_softcap(float score) {
  const float cap = __int_as_float(SOFTCAP_BITS);
  return cap * tanhf(score / cap);
}
#endif

#if ALIBI
// BLOOM's slope of global head `head` of `heads`: see attention_prefill.cuh.
static __device__ float attention_decode_alibi_slope(int head, int heads) {
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

#ifdef QK_NORM
// `head` RMS-normalised into shared `staged` (every thread of the block calls it): over the
// head (QK_NORM 1), or over the `span_features` of the token's heads from `span` (2).
static __device__ __forceinline__ void
attention_decode_stage(const float *span, int span_features, const float *head,
                       const float *scale, float epsilon, float *staged, float *scratch) {
#if QK_NORM == 2
  dsc_stage_rms_normalized_span<HEAD_DIM>(span, span_features, head, scale, epsilon, staged,
                                          scratch);
#else
  (void)span;
  (void)span_features;
  // QK_NORM 3: the scale multiplies the rotated features instead.
  dsc_stage_rms_normalized<HEAD_DIM>(head, QK_NORM == 3 ? nullptr : scale, epsilon, staged,
                                     scratch);
#endif
}
#endif

extern "C" __global__ void __launch_bounds__(WARPS * 32)
    attention_decode(const float *query, attention_kv_t *keys, attention_kv_t *values,
                     long long kv_batch_stride, long long kv_head_stride, int kv_rows,
                     const void *mask, const int *lengths, float *partial_out,
                     float *partial_max, float *partial_sum, int max_splits, int heads,
                     int head_offset, int kv_head_offset, int group, int global_heads,
                     float scale
#ifdef FUSED_ROTARY
                     ,
                     const float *new_query, const float *new_key, const float *new_value,
                     long long query_stride, long long kv_stride, const void *positions,
                     dsc_rotary_frequencies_of<ROTARY_DIM> frequencies
#endif
#ifdef FUSED_COMBINE
                     ,
                     float *out, int *arrivals
#endif
#ifdef QK_NORM
                     ,
                     const float *q_norm_scale, const float *k_norm_scale,
                     float qk_norm_epsilon
#endif
#if PAGED
                     ,
                     const int *paged_rows, int table_width, int block_size
#endif
#ifdef SINKS
                     ,
                     const float *sinks
#endif
    ) {
  __shared__ float query_row[GROUP_HEADS][HEAD_DIM];
  __shared__ float warp_max[GROUP_HEADS][WARPS], warp_sum[GROUP_HEADS][WARPS];
  __shared__ float warp_out[GROUP_HEADS][WARPS][HEAD_DIM];
  if (blockDim.x != WARPS * 32 || static_cast<int>(blockIdx.x) >= max_splits)
    return;

  const float negative_infinity = attention_decode_negative_infinity();
  const int split = blockIdx.x, sequence = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // This block's query heads: the rank's [first_head, first_head + head_count), all of KV
  // head kv_head.
#if GROUP_HEADS == 1
  const int first_head = blockIdx.y, head_count = 1;
  const int kv_head = (head_offset + first_head) / group - kv_head_offset;
#else
  const int runs = (group + GROUP_HEADS - 1) / GROUP_HEADS;
  const int global_kv_head = head_offset / group + static_cast<int>(blockIdx.y) / runs;
  const int run_begin =
      global_kv_head * group + (static_cast<int>(blockIdx.y) % runs) * GROUP_HEADS;
  const int run_end = min(run_begin + GROUP_HEADS, (global_kv_head + 1) * group);
  const int first_head = max(run_begin, head_offset) - head_offset;
  const int head_count = min(run_end, head_offset + heads) - head_offset - first_head;
  if (head_count <= 0)
    return;  // the whole block, in every split: no head of the rank's
  const int kv_head = global_kv_head - kv_head_offset;
#endif
#if PAGED
  // The row's position; its key and value are in the cache already. Its table is found
  // after the query's rotation, so that no pointer to it is live across that.
  const int past = paged_rows[static_cast<long long>(sequence) * (table_width + 1)];
  const int mask_width = 1;
  const int total = min(past + 1, kv_rows);
  attention_kv_t *key_base = keys + kv_head * kv_head_stride;
  attention_kv_t *value_base = values + kv_head * kv_head_stride;
#else
  const int past = lengths[0], mask_width = lengths[2];
  const int total = min(lengths[1], kv_rows);
  // Written only by FUSED_ROTARY's blocks that hold the new token's row.
  attention_kv_t *key_base = keys + sequence * kv_batch_stride + kv_head * kv_head_stride;
  attention_kv_t *value_base = values + sequence * kv_batch_stride + kv_head * kv_head_stride;
#endif
  const int split_begin = split * SPLIT_KEYS;
  const int position = past;  // the one new token
  // Head g of the block's partials start at first_slot + g * max_splits.
  const long long first_slot =
      (static_cast<long long>(sequence) * heads + first_head) * max_splits;
#ifdef FUSED_COMBINE
  // The block's first output row's element: an offset, not a pointer, so that nothing
  // 64-bit stays live across the attention loop.
  const long long out_first = (static_cast<long long>(sequence) * heads + first_head) * HEAD_DIM;
#endif
  if (split_begin >= total) {
#ifdef FUSED_COMBINE
    // No block holds a key (nothing cached, no new token): the first still writes the
    // outputs, as attention_combine does with no split.
    if (split == 0)
      for (int g = 0; g < head_count; ++g)
        dsc_attention_merge_splits<HEAD_DIM, CAUSAL, UNATTENDED_CAUSAL, ATTENTION_DECODE_ZERO,
                                   KV_DTYPE, ATTENTION_DECODE_OUT_DT, ATTENTION_DECODE_SINK>(
            dsc_element_address<ATTENTION_DECODE_OUT_DT>(out, out_first + g * HEAD_DIM), partial_out,
            partial_max, partial_sum, first_slot + g * max_splits, 0, value_base,
            ATTENTION_DECODE_UNATTENDED_KEYS, position, ATTENTION_DECODE_SINK_OF(first_head + g));
#endif
    return;  // the whole block: the merge reads only the splits below total
  }
  const int split_end = min(total, split_begin + SPLIT_KEYS);
  const long long mask_row = static_cast<long long>(sequence) * mask_width + (mask_width - total);
#if PAGED
  // No mask: every key of the sequence is its own (MASK_DTYPE is 0).
  static_assert(MASK_DTYPE == 0, "a paged step has no padding mask to read");
#endif

#ifdef FUSED_ROTARY
  __shared__ float fresh_key[HEAD_DIM], fresh_value[HEAD_DIM];
  float rotary_position = 0.0f;
#if ROTARY_DIM > 0
  rotary_position = static_cast<float>(dsc_load_index<POS_DTYPE>(positions, sequence));
#endif
  // Paged: attention_rotary wrote every row's key and value, so no block here does.
  const bool holds_new = !PAGED && past >= split_begin && past < split_end;
  {
    const float *key_in = new_key + sequence * kv_stride + kv_head * HEAD_DIM;
    const float *value_in = new_value + sequence * kv_stride + kv_head * HEAD_DIM;
#ifdef QK_NORM
    // QK_NORM 3: the scales multiply the rotated features.
    const float *q_rotated_scale = QK_NORM == 3 ? q_norm_scale : nullptr;
    const float *k_rotated_scale = QK_NORM == 3 ? k_norm_scale : nullptr;
#else
    const float *q_rotated_scale = nullptr, *k_rotated_scale = nullptr;
#endif
#ifdef QK_NORM
    // holds_new and head_count are the block's alike: every thread stages.
    __shared__ float query_staged[HEAD_DIM], key_staged[HEAD_DIM], norm_scratch[32];
    if (holds_new) {
      // QK_NORM 2: over all of the token's key heads (heads / group of them).
      attention_decode_stage(new_key + sequence * kv_stride, heads / group * HEAD_DIM, key_in,
                             k_norm_scale, qk_norm_epsilon, key_staged, norm_scratch);
      key_in = key_staged;
    }
#endif
    if (holds_new)
      for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x) {
        const float key = dsc_kv_rounded<KV_DTYPE>(
            dsc_rotary_feature<ROTARY_DIM, ROTARY_INTERLEAVED>(key_in, feature, rotary_position,
                                                               frequencies) *
            (k_rotated_scale ? k_rotated_scale[feature] : 1.0f));
        const float value = dsc_kv_rounded<KV_DTYPE>(value_in[feature]);
        fresh_key[feature] = key;
        fresh_value[feature] = value;
        // The dense cache's row (a paged block holds no new token: see holds_new).
        const long long row = static_cast<long long>(past) * HEAD_DIM + feature;
        dsc_store_float<KV_DTYPE>(key_base, row, key);
        dsc_store_float<KV_DTYPE>(value_base, row, value);
      }
    for (int g = 0; g < head_count; ++g) {
      const float *query_in = new_query + sequence * query_stride + (first_head + g) * HEAD_DIM;
#ifdef QK_NORM
      // The staging waits for the block first: the previous head's reads are done. QK_NORM
      // 2: over all of the token's query heads.
      attention_decode_stage(new_query + sequence * query_stride, heads * HEAD_DIM, query_in,
                             q_norm_scale, qk_norm_epsilon, query_staged, norm_scratch);
      query_in = query_staged;
#endif
      for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x)
        query_row[g][feature] = dsc_rotary_feature<ROTARY_DIM, ROTARY_INTERLEAVED>(
                                    query_in, feature, rotary_position, frequencies) *
                                (q_rotated_scale ? q_rotated_scale[feature] : 1.0f);
    }
  }
#else
  for (int g = 0; g < head_count; ++g)
    for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x)
      query_row[g][feature] =
          query[(static_cast<long long>(sequence) * heads + first_head + g) * HEAD_DIM + feature];
#endif
  // A run cut short (by the group's end or the rank's heads) attends with zero queries in
  // its other rows, whose results nobody reads: the loops below stay free of branches.
  for (int g = head_count; g < GROUP_HEADS; ++g)
    for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x)
      query_row[g][feature] = 0.0f;
  __syncthreads();

#if PAGED
  const int *table = paged_rows + static_cast<long long>(sequence) * (table_width + 1) + 1;
#endif
#if ATTENTION_DECODE_VECTOR_KEYS
  // Every row of an aligned cache is: HEAD_DIM elements are a whole number of loads.
  const bool vector_keys = (reinterpret_cast<unsigned long long>(key_base) & 15u) == 0;
#endif
  const int warp_begin = split_begin + warp * ATTENTION_DECODE_WARP_KEYS;
  const int warp_end = min(split_end, warp_begin + ATTENTION_DECODE_WARP_KEYS);

  float slope[GROUP_HEADS];
#pragma unroll
  for (int g = 0; g < GROUP_HEADS; ++g)
    slope[g] = 0.0f;
#if ALIBI
  int attended_before = 0;  // attended keys before the current chunk
#pragma unroll
  for (int g = 0; g < GROUP_HEADS; ++g)
    if (g < head_count)
      slope[g] = attention_decode_alibi_slope(head_offset + first_head + g, global_heads);
  for (int chunk = 0; chunk < warp_begin; chunk += 32) {
    const int key = chunk + lane;
    const bool on = key < warp_begin && dsc_mask_on<MASK_DTYPE>(mask, mask_row + key);
    attended_before += __popc(__ballot_sync(0xffffffffu, on));
  }
#endif

  float running_max[GROUP_HEADS], running_sum[GROUP_HEADS];
  float running_out[GROUP_HEADS][ATTENTION_DECODE_FEATURES];
#pragma unroll
  for (int g = 0; g < GROUP_HEADS; ++g) {
    running_max[g] = negative_infinity;
    running_sum[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < ATTENTION_DECODE_FEATURES; ++i)
      running_out[g][i] = 0.0f;
  }

  for (int chunk = warp_begin; chunk < warp_end; chunk += 32) {
    const int key = chunk + lane;
    const bool on = key < warp_end && dsc_mask_on<MASK_DTYPE>(mask, mask_row + key);
    float key_position = 0.0f;
#if ALIBI
    const unsigned on_bits = __ballot_sync(0xffffffffu, on);
    if (on)
      key_position = static_cast<float>(attended_before + __popc(on_bits & ((1u << lane) - 1u)));
    attended_before += __popc(on_bits);
#endif
#if PAGED
    // Keys below warp_end are the row's positions, whose blocks its table holds.
    int key_block = 0, key_slot = 0;
    if (key < warp_end)
      attention_decode_locate(table, block_size, key, key_block, key_slot);
#endif
    const bool allowed = on && (!CAUSAL || key <= position) &&
                         (WINDOW == 0 || (key > position - WINDOW && key < position + WINDOW));
    float score[GROUP_HEADS];
#pragma unroll
    for (int g = 0; g < GROUP_HEADS; ++g)
      score[g] = negative_infinity;
    if (allowed) {
      // Each element of the key is read once for every head of the block.
#if PAGED
      const attention_kv_t *key_row = key_base + key_block * kv_batch_stride +
                                      static_cast<long long>(key_slot) * HEAD_DIM;
#else
      const attention_kv_t *key_row = key_base + static_cast<long long>(key) * HEAD_DIM;
#endif
      float dot[GROUP_HEADS];
#pragma unroll
      for (int g = 0; g < GROUP_HEADS; ++g)
        dot[g] = 0.0f;
#ifdef FUSED_ROTARY
      if (!PAGED && key == past) {
        // Computed above: shared memory, not the cache row.
#pragma unroll 8
        for (int feature = 0; feature < HEAD_DIM; ++feature) {
          const float element = fresh_key[feature];
#pragma unroll
          for (int g = 0; g < GROUP_HEADS; ++g)
            dot[g] += query_row[g][feature] * element;
        }
      } else
#endif
#if ATTENTION_DECODE_VECTOR_KEYS
      if (vector_keys) {
        // 16 bytes per load, several in flight; the sum in the scalar loop's order.
        const attention_decode_words *words =
            reinterpret_cast<const attention_decode_words *>(key_row);
#pragma unroll 2
        for (int load = 0; load < HEAD_DIM / ATTENTION_DECODE_VEC; ++load) {
          float element[ATTENTION_DECODE_VEC];
          attention_decode_unpack(words[load], element);
#pragma unroll
          for (int j = 0; j < ATTENTION_DECODE_VEC; ++j)
#pragma unroll
            for (int g = 0; g < GROUP_HEADS; ++g)
              dot[g] += query_row[g][load * ATTENTION_DECODE_VEC + j] * element[j];
        }
      } else
#endif
      {
#pragma unroll 8
        for (int feature = 0; feature < HEAD_DIM; ++feature) {
          const float element = dsc_load_float<KV_DTYPE>(key_row, feature);
#pragma unroll
          for (int g = 0; g < GROUP_HEADS; ++g)
            dot[g] += query_row[g][feature] * element;
        }
      }
#pragma unroll
      for (int g = 0; g < GROUP_HEADS; ++g)
#ifdef SOFTCAP_BITS
        score[g] = attention_decode_softcap(dot[g] * scale) + slope[g] * key_position;
#else
        score[g] = dot[g] * scale + slope[g] * key_position;
#endif
    }
    float probability[GROUP_HEADS];
    bool any = false;
#pragma unroll
    for (int g = 0; g < GROUP_HEADS; ++g) {
      probability[g] = 0.0f;
      const float chunk_max = dsc_warp_max(score[g]);
      if (chunk_max == negative_infinity)
        continue;  // warp-uniform after the reduction
      any = true;
      const float new_max = fmaxf(running_max[g], chunk_max);
      const float correction = expf(running_max[g] - new_max);  // 0 while running_max is −inf
      probability[g] = expf(score[g] - new_max);                 // 0 for keys not attended
      running_sum[g] = running_sum[g] * correction + dsc_warp_sum(probability[g]);
#pragma unroll
      for (int i = 0; i < ATTENTION_DECODE_FEATURES; ++i)
        running_out[g][i] *= correction;
      running_max[g] = new_max;
    }
    if (!any)
      continue;  // warp-uniform
    for (int slot = 0; slot < 32; ++slot) {
      float weight[GROUP_HEADS];
      bool attended = false;
#pragma unroll
      for (int g = 0; g < GROUP_HEADS; ++g) {
        weight[g] = __shfl_sync(0xffffffffu, probability[g], slot);
        attended |= weight[g] != 0.0f;
      }
      if (!attended)
        continue;  // warp-uniform: a key not attended (its value need not be read)
#if PAGED
      // The slot's lane found its block: a division per key, not per key and lane.
      const attention_kv_t *value_row =
          value_base + __shfl_sync(0xffffffffu, key_block, slot) * kv_batch_stride +
          static_cast<long long>(__shfl_sync(0xffffffffu, key_slot, slot)) * HEAD_DIM;
#else
      const attention_kv_t *value_row =
          value_base + static_cast<long long>(chunk + slot) * HEAD_DIM;
#endif
#ifdef FUSED_ROTARY
      const bool fresh_row = !PAGED && chunk + slot == past;  // warp-uniform
#endif
#pragma unroll
      for (int i = 0; i < ATTENTION_DECODE_FEATURES; ++i) {
        const int feature = lane + 32 * i;
        if (feature < HEAD_DIM) {
          // Each element of the value is read once for every head of the block.
#ifdef FUSED_ROTARY
          const float element =
              fresh_row ? fresh_value[feature] : dsc_load_float<KV_DTYPE>(value_row, feature);
#else
          const float element = dsc_load_float<KV_DTYPE>(value_row, feature);
#endif
#pragma unroll
          for (int g = 0; g < GROUP_HEADS; ++g)
            running_out[g][i] += weight[g] * element;
        }
      }
    }
  }

#pragma unroll
  for (int g = 0; g < GROUP_HEADS; ++g) {
    if (lane == 0) {
      warp_max[g][warp] = running_max[g];
      warp_sum[g][warp] = running_sum[g];
    }
#pragma unroll
    for (int i = 0; i < ATTENTION_DECODE_FEATURES; ++i) {
      const int feature = lane + 32 * i;
      if (feature < HEAD_DIM)
        warp_out[g][warp][feature] = running_out[g][i];
    }
  }
  __syncthreads();

  for (int g = 0; g < head_count; ++g) {
    float split_max = negative_infinity;
#pragma unroll
    for (int w = 0; w < WARPS; ++w)
      split_max = fmaxf(split_max, warp_max[g][w]);
    const long long slot_index = first_slot + static_cast<long long>(g) * max_splits + split;
    if (split_max == negative_infinity) {
      // Nothing attended in this split: it adds nothing to the combined sum.
      for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x)
        partial_out[slot_index * HEAD_DIM + feature] = 0.0f;
      if (threadIdx.x == 0) {
        partial_max[slot_index] = negative_infinity;
        partial_sum[slot_index] = 0.0f;
      }
    } else {
      for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w)
          sum += expf(warp_max[g][w] - split_max) * warp_out[g][w][feature];
        partial_out[slot_index * HEAD_DIM + feature] = sum;
      }
      if (threadIdx.x == 0) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w)
          sum += expf(warp_max[g][w] - split_max) * warp_sum[g][w];
        partial_max[slot_index] = split_max;
        partial_sum[slot_index] = sum;
      }
    }
  }

#ifdef FUSED_COMBINE
  // The last block of this (block row, sequence) to arrive merges every split of its heads
  // (the threadFenceReduction pattern): each thread's partials are visible device-wide
  // before its block arrives, and the merging block reads them past L1.
  __shared__ int merges;
  const int splits = min(max_splits, (total + SPLIT_KEYS - 1) / SPLIT_KEYS);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int *count = arrivals + (static_cast<long long>(sequence) * gridDim.y + blockIdx.y);
    merges = atomicAdd(count, 1) == splits - 1;
    if (merges)
      *count = 0;  // every other split has arrived: nobody else touches it this launch
  }
  __syncthreads();
  if (!merges)
    return;
  __threadfence();
  for (int g = 0; g < head_count; ++g)
    dsc_attention_merge_splits<HEAD_DIM, CAUSAL, UNATTENDED_CAUSAL, ATTENTION_DECODE_ZERO,
                               KV_DTYPE, ATTENTION_DECODE_OUT_DT, ATTENTION_DECODE_SINK>(
        dsc_element_address<ATTENTION_DECODE_OUT_DT>(out, out_first + g * HEAD_DIM), partial_out,
        partial_max, partial_sum, first_slot + g * max_splits, splits, value_base,
        ATTENTION_DECODE_UNATTENDED_KEYS, position, ATTENTION_DECODE_SINK_OF(first_head + g));
#endif
}
