// tfm.attention, split-KV decode's second kernel, in plans from before attention_decode's
// FUSED_COMBINE (which merges in the decode kernel's last block of each (head, sequence)):
// merges attention_decode's per-split partial maxima, sums and unnormalised outputs into
// the output row of each (head, sequence) (dsc_attention_merge_splits). One block per
// (head, sequence); the number of splits in use follows `total`, read from the device like
// the decode kernel does.
//
// Constants: HEAD_DIM, SPLIT_KEYS (attention_decode's), CAUSAL, UNATTENDED_CAUSAL, and,
// only where the step asks for zeros at rows with no key (sdpa's NaN guard),
// UNATTENDED_ZERO (defined = on; undefined keeps the code before it existed).
#include "dsc_common.cuh"

#ifdef UNATTENDED_ZERO
#define ATTENTION_COMBINE_ZERO 1
#else
#define ATTENTION_COMBINE_ZERO 0
#endif

extern "C" __global__ void attention_combine(float *out, const float *partial_out,
                                             const float *partial_max,
                                             const float *partial_sum, int max_splits,
                                             const float *values, long long kv_batch_stride,
                                             long long kv_head_stride, int kv_rows,
                                             const int *lengths, int heads, int head_offset,
                                             int kv_head_offset, int group) {
  const int head = blockIdx.x, sequence = blockIdx.y;
  const int past = lengths[0];
  const int total = min(lengths[1], kv_rows);
  const int splits = min(max_splits, (total + SPLIT_KEYS - 1) / SPLIT_KEYS);
  const long long first_slot = (static_cast<long long>(sequence) * heads + head) * max_splits;
  float *out_row = out + (static_cast<long long>(sequence) * heads + head) * HEAD_DIM;

  const int kv_head = (head_offset + head) / group - kv_head_offset;
  const float *value_base = values + sequence * kv_batch_stride + kv_head * kv_head_stride;
  dsc_attention_merge_splits<HEAD_DIM, CAUSAL, UNATTENDED_CAUSAL, ATTENTION_COMBINE_ZERO>(
      out_row, partial_out, partial_max, partial_sum, first_slot, splits, value_base, total,
      past);
}
