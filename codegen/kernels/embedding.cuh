// tfm.embedding: out[token, :] = table[id - VOCAB_OFFSET, :] as f32, one block per token.
// Semantics of the CPU kernel (runtime/src/ops/Transformer.cpp): a rank of a
// vocabulary-parallel table holds rows [vocab_offset, vocab_offset + rows) and gives zeros
// for ids outside them (the all-reduce that follows sums the ranks' rows). An id outside
// the vocabulary, which the CPU kernel reports as an error, also gives zeros here: a kernel
// cannot fail, and reading outside the table would be worse.
//
// Constants: HIDDEN (row length), TABLE_DT (1 f32, 2 f16, 3 bf16), ID_DT (5 i64, 6 i32),
// BLOCK (threads per block), and SCALE_BITS (the f32 bits of the step's `scale`: Gemma's
// sqrt(hidden)) only where the rows are scaled, so that other steps' kernels keep their
// names.
#include "dsc_common.cuh"

#ifdef SCALE_BITS
#define EMBEDDING_SCALED(x) ((x) * __uint_as_float(static_cast<unsigned int>(SCALE_BITS)))
#else
#define EMBEDDING_SCALED(x) (x)
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
embedding(const void *ids, const void *table, float *out, long long tokens, long long rows,
          long long vocab_offset, long long limit) {
  for (long long token = blockIdx.x; token < tokens; token += gridDim.x) {
    const long long id = dsc_load_index<ID_DT>(ids, token);
    const long long local = id - vocab_offset;
    const bool present = id >= 0 && id < limit && local >= 0 && local < rows;
    float *row = out + token * HIDDEN;
    for (int i = threadIdx.x; i < HIDDEN; i += BLOCK)
      row[i] = present ? EMBEDDING_SCALED(dsc_load_float<TABLE_DT>(table, local * HIDDEN + i))
                       : 0.0f;
  }
}
