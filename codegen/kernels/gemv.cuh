// tfm.linear and tfm.lm_head for a few rows (decode; rows <= GEMV_MAX_ROWS): y[r, n] =
// act(x[r, :]·w[n, :] + bias[n]) + residual[r, n], in one launch.
//
// Decode is bound by reading the weight once, so the kernel is organised around that read:
// one warp per output feature (warps stride over the features, so any grid size covers N),
// each lane reading 16 bytes of the weight row at a time (4 f32 or 8 f16/bf16) and
// multiplying them with every row of x; f32 accumulation, a warp-shuffle reduction, then
// the fused epilogue. The x rows are staged in shared memory as f32 when the launcher gives
// rows*k*4 bytes of it (`staged`), and read from global memory (through the caches)
// otherwise. The vector path needs every weight row 16-byte aligned (k a multiple of the
// vector width and an aligned base); otherwise every load is scalar.
//
// Constants: K (the plan's in-feature count), WT (weight dtype: 1 f32, 2 f16, 3 bf16),
// ACT (DSC_ACT_*), HAS_BIAS (0/1), BIAS_DT (the bias dtype; 1 without a bias),
// HAS_RESIDUAL (0/1).
// x, residual and y are f32; x is [rows, k], y [rows, n_out]. blockDim.x must be a multiple
// of 32.
#include "dsc_common.cuh"

#define GEMV_MAX_ROWS 8
#define GEMV_VEC (16 / (WT == DSC_DT_F32 ? 4 : 2))

struct alignas(16) GemvWords {
  unsigned int a, b, c, d;
};

struct alignas(16) GemvFloat4 {
  float x, y, z, w;
};

// The GEMV_VEC weights of one 16-byte load, as f32.
static __device__ __forceinline__ void gemv_unpack(const GemvWords &v, float *out) {
  const unsigned int words[4] = {v.a, v.b, v.c, v.d};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (WT == DSC_DT_F32) {
      out[i] = __uint_as_float(words[i]);
    } else {
      // Little endian: element 2i is the low half of word i.
      const unsigned short low = static_cast<unsigned short>(words[i] & 0xffffu);
      const unsigned short high = static_cast<unsigned short>(words[i] >> 16);
      if (WT == DSC_DT_F16) {
        out[2 * i] = dsc_f16_to_f32(low);
        out[2 * i + 1] = dsc_f16_to_f32(high);
      } else {
        out[2 * i] = dsc_bf16_to_f32(low);
        out[2 * i + 1] = dsc_bf16_to_f32(high);
      }
    }
  }
}

// One block's share of the features, for in-feature count KK when it is a compile-time
// constant (the plan's K) or k (KK == 0): a tensor-parallel rank of an uneven split runs the
// plan's kernel with fewer in-features than rank 0, for which the plan was specialised.
template <int KK>
static __device__ __forceinline__ void gemv_features(const float *xs, const void *w,
                                                     const void *bias, const float *residual,
                                                     float *y, int rows, int n_out, int k_run) {
  const int k_in = KK > 0 ? KK : k_run;
  const int lane = threadIdx.x & 31;
  const int warps_per_block = blockDim.x >> 5;
  const long long first =
      static_cast<long long>(blockIdx.x) * warps_per_block + (threadIdx.x >> 5);
  const long long stride = static_cast<long long>(gridDim.x) * warps_per_block;
  // x rows start at multiples of k_in floats: 16-byte reads need k_in % 4 == 0 and an
  // aligned base (shared memory is aligned by its declaration).
  const bool x_vector = (k_in % 4 == 0) && dsc_aligned16(xs);
  const bool w_vector = (k_in % GEMV_VEC == 0) && dsc_aligned16(w);

  for (long long n = first; n < n_out; n += stride) {
    float acc[GEMV_MAX_ROWS];
#pragma unroll
    for (int r = 0; r < GEMV_MAX_ROWS; ++r)
      acc[r] = 0.0f;

    if (w_vector) {
      const GemvWords *wrow = reinterpret_cast<const GemvWords *>(
          static_cast<const char *>(w) + n * static_cast<long long>(k_in) * (16 / GEMV_VEC));
      // Unrolled so that each lane has several 16-byte loads in flight.
#pragma unroll 4
      for (int chunk = lane; chunk < k_in / GEMV_VEC; chunk += 32) {
        float wv[GEMV_VEC];
        gemv_unpack(wrow[chunk], wv);
        const int k = chunk * GEMV_VEC;
#pragma unroll
        for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
          if (r < rows) {
            const float *xr = xs + r * k_in + k;
            if (x_vector) {
#pragma unroll
              for (int j = 0; j < GEMV_VEC; j += 4) {
                const GemvFloat4 xv = *reinterpret_cast<const GemvFloat4 *>(xr + j);
                acc[r] += wv[j] * xv.x + wv[j + 1] * xv.y + wv[j + 2] * xv.z + wv[j + 3] * xv.w;
              }
            } else {
#pragma unroll
              for (int j = 0; j < GEMV_VEC; ++j)
                acc[r] += wv[j] * xr[j];
            }
          }
        }
      }
    } else {
      const long long row_start = n * static_cast<long long>(k_in);
      for (int k = lane; k < k_in; k += 32) {
        const float wk = dsc_load_float<WT>(w, row_start + k);
#pragma unroll
        for (int r = 0; r < GEMV_MAX_ROWS; ++r)
          if (r < rows)
            acc[r] += wk * xs[r * k_in + k];
      }
    }

#pragma unroll
    for (int r = 0; r < GEMV_MAX_ROWS; ++r)
      acc[r] = dsc_warp_sum(acc[r]);

    // Lane r writes row r: the epilogue's loads spread over the warp.
    float bias_n = 0.0f;
    if (HAS_BIAS)
      bias_n = dsc_load_float<BIAS_DT>(bias, n);
#pragma unroll
    for (int r = 0; r < GEMV_MAX_ROWS; ++r) {
      if (r < rows && lane == r) {
        const long long index = static_cast<long long>(r) * n_out + n;
        float value = dsc_activate(ACT, acc[r] + bias_n);
        if (HAS_RESIDUAL)
          value += residual[index];
        y[index] = value;
      }
    }
  }
}

// k: the in-feature count of this run (K, except on a rank of an uneven tensor-parallel
// split). staged: whether the launcher gave rows * k * 4 bytes of dynamic shared memory.
extern "C" __global__ void gemv(const float *x, const void *w, const void *bias,
                                const float *residual, float *y, int rows, int n_out, int k,
                                int staged) {
  extern __shared__ GemvFloat4 gemv_shared[];
  float *shared_x = reinterpret_cast<float *>(gemv_shared);

  if (rows > GEMV_MAX_ROWS)
    rows = GEMV_MAX_ROWS;  // the launcher never asks for more; never index past acc[]
  if (staged) {
    for (int i = threadIdx.x; i < rows * k; i += blockDim.x)
      shared_x[i] = x[i];
    __syncthreads();
  }
  const float *xs = staged ? shared_x : x;
  if (k == K)
    gemv_features<K>(xs, w, bias, residual, y, rows, n_out, k);
  else
    gemv_features<0>(xs, w, bias, residual, y, rows, n_out, k);
}
