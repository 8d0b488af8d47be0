// tfm.attention, split-KV decode's second kernel: merges attention_decode's per-split
// partial maxima, sums and unnormalised outputs into the output row of each (head,
// sequence), and gives a query with no key to attend the CPU reference's average of the
// values (runtime/src/ops/Transformer.cpp). One block per (head, sequence); the number of
// splits in use follows `total`, read from the device like the decode kernel does.
//
// Constants: HEAD_DIM, SPLIT_KEYS (attention_decode's), CAUSAL, UNATTENDED_CAUSAL, and,
// only where the step asks for zeros at rows with no key (sdpa's NaN guard),
// UNATTENDED_ZERO (defined = on; undefined keeps the code before it existed).
#include "dsc_common.cuh"

extern "C" __global__ void attention_combine(float *out, const float *partial_out,
                                             const float *partial_max,
                                             const float *partial_sum, int max_splits,
                                             const float *values, long long kv_batch_stride,
                                             long long kv_head_stride, int kv_rows,
                                             const int *lengths, int heads, int head_offset,
                                             int kv_head_offset, int group) {
  const float negative_infinity = __int_as_float(0xff800000);
  const int head = blockIdx.x, sequence = blockIdx.y;
  const int past = lengths[0];
  const int total = min(lengths[1], kv_rows);
  const int splits = min(max_splits, (total + SPLIT_KEYS - 1) / SPLIT_KEYS);
  const long long first_slot = (static_cast<long long>(sequence) * heads + head) * max_splits;
  float *out_row = out + (static_cast<long long>(sequence) * heads + head) * HEAD_DIM;

  float overall_max = negative_infinity;
  for (int split = 0; split < splits; ++split)
    overall_max = fmaxf(overall_max, partial_max[first_slot + split]);

  if (overall_max == negative_infinity) {
#ifdef UNATTENDED_ZERO
    // sdpa's guard: the NaN softmax of a row with no key becomes zeros.
    for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x)
      out_row[feature] = 0.0f;
    return;
#endif
    // No key to attend (a padding query): average the values of every key, or (GPT-Neo's
    // doubled mask) of the causally visible ones, which for the one new token are all.
    const int kv_head = (head_offset + head) / group - kv_head_offset;
    const float *value_base = values + sequence * kv_batch_stride + kv_head * kv_head_stride;
    const int position = past;
    for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x) {
      float sum = 0.0f;
      int count = 0;
      for (int key = 0; key < total; ++key)
        if (!UNATTENDED_CAUSAL || !CAUSAL || key <= position) {
          sum += value_base[static_cast<long long>(key) * HEAD_DIM + feature];
          ++count;
        }
      out_row[feature] = count > 0 ? sum / static_cast<float>(count) : 0.0f;
    }
    return;
  }

  float denominator = 0.0f;
  for (int split = 0; split < splits; ++split)
    denominator += expf(partial_max[first_slot + split] - overall_max) *
                   partial_sum[first_slot + split];
  for (int feature = threadIdx.x; feature < HEAD_DIM; feature += blockDim.x) {
    float numerator = 0.0f;
    for (int split = 0; split < splits; ++split)
      numerator += expf(partial_max[first_slot + split] - overall_max) *
                   partial_out[(first_slot + split) * HEAD_DIM + feature];
    out_row[feature] = numerator / denominator;
  }
}
