// The largest COUNT-at-run-time logits of each row, for the generator's greedy and top-k
// sampling (Session::topLogits): only the candidates leave the device, not the vocabulary.
// Order: value descending, equal values by lower index (the host's std::stable_sort), -0
// equal to +0, NaN above +inf (as torch.argmax; the host's order of NaN is unspecified).
//
// One block per row. Each of the `count` rounds picks the maximum, in that order, among the
// elements strictly after the previous round's pick. Every element has a distinct 64-bit
// key that orders like (value, -index), so "after the pick" is "key below the pick's key":
// no state but the last key, and no marking of the logits. The row is read once per round,
// which for the few candidates sampling asks for stays in L2.
//
// Constants: BLOCK, the threads per block (a power of two in [32, 1024]), which the launcher
// must launch with.
#include "dsc_common.cuh"

#if BLOCK < 32 || BLOCK > 1024 || (BLOCK & (BLOCK - 1)) != 0
#error "sample_topk: BLOCK must be a power of two in [32, 1024]"
#endif

static __device__ __forceinline__ unsigned long long sample_topk_key(float value,
                                                                     long long index) {
  unsigned bits;
  if (value != value) {
    bits = 0xFFFFFFFFu;
  } else {
    bits = value == 0.0f ? 0u : __float_as_uint(value);
    // Negative floats order backwards as integers: flip all their bits; set the sign bit of
    // the others so that they come above every negative one.
    bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  }
  return (static_cast<unsigned long long>(bits) << 32) |
         static_cast<unsigned long long>(0xFFFFFFFFu - static_cast<unsigned>(index));
}

// logits: row r's last position starts at logits + r * rowStride + offset, `vocab` f32
// wide (vocab < 2^32). values [rows, count] f32, ids [rows, count] int64; count <= vocab.
extern "C" __global__ void __launch_bounds__(BLOCK)
    sample_topk(const float *logits, long long rowStride, long long offset, long long vocab,
                int count, float *values, long long *ids) {
  __shared__ unsigned long long sample_topk_keys[BLOCK];
  const int thread = static_cast<int>(threadIdx.x);
  const long long row = static_cast<long long>(blockIdx.x);
  const float *source = logits + row * rowStride + offset;
  // Key 0 is no element's (its index part would be 2^32 - 1): "nothing left".
  unsigned long long bound = 0;
  for (int round = 0; round < count; ++round) {
    unsigned long long best = 0;
    for (long long i = thread; i < vocab; i += BLOCK) {
      unsigned long long key = sample_topk_key(source[i], i);
      if ((round == 0 || key < bound) && key > best)
        best = key;
    }
    sample_topk_keys[thread] = best;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
      if (thread < half && sample_topk_keys[thread + half] > sample_topk_keys[thread])
        sample_topk_keys[thread] = sample_topk_keys[thread + half];
      __syncthreads();
    }
    bound = sample_topk_keys[0];
    if (thread == 0) {
      long long index = static_cast<long long>(0xFFFFFFFFu - static_cast<unsigned>(bound));
      values[row * count + round] = source[index];
      ids[row * count + round] = index;
    }
    // Every thread has read the pick before the next round overwrites the keys.
    __syncthreads();
  }
}
