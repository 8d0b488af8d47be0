// The largest COUNT-at-run-time logits of each row, for the generator's greedy and top-k
// sampling (Session::topLogits): only the candidates leave the device, not the vocabulary.
// Order: value descending, equal values by lower index (the host's std::stable_sort), -0
// equal to +0, NaN above +inf (as torch.argmax; the host's order of NaN is unspecified).
//
// One block per row, reading the row once. Every element has a distinct 64-bit key that
// orders like (value, -index). Each thread keeps, in one pass over its elements (i = thread
// mod BLOCK), its LOCAL largest keys; then each of the `count` rounds takes the largest of
// the threads' next keys, and the thread it came from moves on to its next. A thread whose
// LOCAL keys are all taken while it left others out reads its elements again for the next
// LOCAL below the last taken: the only reread, and only for a thread that holds more than
// LOCAL of the winners (top-50 over 128k tokens in 1024 threads: rarely any). The previous
// form read the whole row once per round, 25 MB a token for top-50 over 128k (issue 14).
//
// Constants: BLOCK, the threads per block (a power of two in [32, 1024]), which the launcher
// must launch with; LOCAL (default 8), the keys a thread holds.
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

#ifndef LOCAL
#define LOCAL 8
#endif
#if LOCAL < 1
#error "sample_topk: LOCAL must be 1 or more"
#endif

// held[0, LOCAL) = this thread's largest keys (descending, 0 after the last) among its
// elements, below `below` when `bounded`; returns whether any such key was left out. Key 0
// is no element's (its index part would be 2^32 - 1).
static __device__ __forceinline__ bool sample_topk_gather(const float *source, long long vocab,
                                                          int thread, bool bounded,
                                                          unsigned long long below,
                                                          unsigned long long *held) {
  for (int j = 0; j < LOCAL; ++j)
    held[j] = 0;
  bool more = false;
  for (long long i = thread; i < vocab; i += BLOCK) {
    const unsigned long long key = sample_topk_key(source[i], i);
    if (bounded && key >= below)
      continue;
    if (key <= held[LOCAL - 1]) {  // the list is full and holds larger ones
      more = true;
      continue;
    }
    if (held[LOCAL - 1] != 0)
      more = true;  // the smallest held one drops out
    int j = LOCAL - 1;
    while (j > 0 && held[j - 1] < key) {
      held[j] = held[j - 1];
      --j;
    }
    held[j] = key;
  }
  return more;
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
  unsigned long long held[LOCAL];
  bool more = sample_topk_gather(source, vocab, thread, false, 0, held);
  int next = 0;
  for (int round = 0; round < count; ++round) {
    if (next == LOCAL && more) {
      more = sample_topk_gather(source, vocab, thread, true, held[LOCAL - 1], held);
      next = 0;
    }
    const unsigned long long mine = next < LOCAL ? held[next] : 0;
    sample_topk_keys[thread] = mine;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half >>= 1) {
      if (thread < half && sample_topk_keys[thread + half] > sample_topk_keys[thread])
        sample_topk_keys[thread] = sample_topk_keys[thread + half];
      __syncthreads();
    }
    const unsigned long long pick = sample_topk_keys[0];
    if (mine == pick)  // keys are distinct: this thread's was taken
      ++next;
    if (thread == 0) {
      long long index = static_cast<long long>(0xFFFFFFFFu - static_cast<unsigned>(pick));
      values[row * count + round] = source[index];
      ids[row * count + round] = index;
    }
    // Every thread has read the pick before the next round overwrites the keys.
    __syncthreads();
  }
}
