// ONNX MatMul of f32 on the generic path: C[..., M, N] = A[..., M, K] · B[..., K, N], the
// batch dimensions broadcast as numpy does (the launcher gives a broadcast operand a batch
// stride of 0; a 1-D operand arrives as [1, K] or [K, 1]). What reaches it is what
// recognition left generic, such as T5's attention scores and weighted sums, so it is a plain
// shared-memory tiling, not a tensor-core GEMM: recognised projections go to gemv and
// cuBLASLt.
//
// One block of 256 threads per 16x16 tile of C; the blocks' 1-D index runs over (batch, tile
// row, tile column), N's tiles fastest. Each output accumulates its K products in ascending
// order with fused multiply-adds.
//
// Constants: BATCH_RANK (0..4), the output's batch dimensions.
#if BATCH_RANK < 0 || BATCH_RANK > 4
#error "generic_matmul: BATCH_RANK must be in [0, 4]"
#endif
#define GENERIC_MATMUL_TILE 16

struct GenericMatMulShape {
  long long batchDims[4];
  long long batchStridesA[4];  // elements; 0 where A is broadcast
  long long batchStridesB[4];
  long long m, n, k;
};

extern "C" __global__ void __launch_bounds__(256)
    generic_matmul(const float *a, const float *b, float *c, GenericMatMulShape shape,
                   long long tiles) {
  __shared__ float tileA[GENERIC_MATMUL_TILE][GENERIC_MATMUL_TILE + 1];
  __shared__ float tileB[GENERIC_MATMUL_TILE][GENERIC_MATMUL_TILE + 1];
  const int tx = threadIdx.x % GENERIC_MATMUL_TILE, ty = threadIdx.x / GENERIC_MATMUL_TILE;
  const long long tilesN = (shape.n + GENERIC_MATMUL_TILE - 1) / GENERIC_MATMUL_TILE;
  const long long tilesM = (shape.m + GENERIC_MATMUL_TILE - 1) / GENERIC_MATMUL_TILE;
  // Every thread of a block takes the same trip count, so the barriers below are uniform.
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    const long long tileCol = t % tilesN, tileRow = (t / tilesN) % tilesM;
    long long batch = t / (tilesN * tilesM), offsetA = 0, offsetB = 0;
#pragma unroll
    for (int d = BATCH_RANK - 1; d >= 0; --d) {
      const long long coordinate = batch % shape.batchDims[d];
      batch /= shape.batchDims[d];
      offsetA += coordinate * shape.batchStridesA[d];
      offsetB += coordinate * shape.batchStridesB[d];
    }
    const long long outputBatch = t / (tilesN * tilesM);
    const long long row = tileRow * GENERIC_MATMUL_TILE + ty;
    const long long col = tileCol * GENERIC_MATMUL_TILE + tx;
    float acc = 0.0f;
    for (long long k0 = 0; k0 < shape.k; k0 += GENERIC_MATMUL_TILE) {
      const long long ka = k0 + tx, kb = k0 + ty;
      tileA[ty][tx] = row < shape.m && ka < shape.k ? a[offsetA + row * shape.k + ka] : 0.0f;
      tileB[ty][tx] = kb < shape.k && col < shape.n ? b[offsetB + kb * shape.n + col] : 0.0f;
      __syncthreads();
      const long long depth =
          shape.k - k0 < GENERIC_MATMUL_TILE ? shape.k - k0 : GENERIC_MATMUL_TILE;
      for (int kk = 0; kk < depth; ++kk)
        acc = fmaf(tileA[ty][kk], tileB[kk][tx], acc);
      __syncthreads();
    }
    if (row < shape.m && col < shape.n)
      c[(outputBatch * shape.m + row) * shape.n + col] = acc;
  }
}
