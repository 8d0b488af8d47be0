// Helpers shared by every kernel template (docs/cuda-backend.md). Templates are compiled by
// NVRTC with no include path, so this header includes no CUDA toolkit header: f16 and bf16
// values are their `unsigned short` bits, converted here. NVRTC declares the device math
// functions (erff, tanhf, expf, sqrtf, ...) and the warp intrinsics itself.
//
// Dtype constants are schemas/plan.fbs's numbering, as the specialisation's #defines give
// them: 1 f32, 2 f16, 3 bf16, 5 i64, 6 i32.
#ifndef DSC_KERNELS_DSC_COMMON_CUH
#define DSC_KERNELS_DSC_COMMON_CUH

#define DSC_DT_F32 1
#define DSC_DT_F16 2
#define DSC_DT_BF16 3
#define DSC_DT_I64 5
#define DSC_DT_I32 6

// Activation codes (KernelRules.h activationCode): the same formulas as the CPU kernels
// of runtime/src/ops/Transformer.cpp, so that both backends agree.
#define DSC_ACT_NONE (-1)
#define DSC_ACT_GELU_ERF 0
#define DSC_ACT_GELU_TANH 1
#define DSC_ACT_GELU_QUICK 2
#define DSC_ACT_SILU 3
#define DSC_ACT_RELU 4
#define DSC_ACT_RELU2 5

// ---- f16 and bf16 as bits ---------------------------------------------------------------

// PTX's own conversions: exact for f16 -> f32, round-to-nearest-even for f32 -> f16
// (subnormals, infinities and NaN included).
static __device__ __forceinline__ float dsc_f16_to_f32(unsigned short bits) {
  float value;
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
  return value;
}

static __device__ __forceinline__ unsigned short dsc_f32_to_f16(float value) {
  unsigned short bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return bits;
}

// bf16 is the high half of an f32: widening is a shift.
static __device__ __forceinline__ float dsc_bf16_to_f32(unsigned short bits) {
  return __uint_as_float(static_cast<unsigned int>(bits) << 16);
}

// Round to nearest even on the dropped 16 bits; NaN stays a (quiet) NaN rather than being
// rounded into an infinity.
static __device__ __forceinline__ unsigned short dsc_f32_to_bf16(float value) {
  unsigned int bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<unsigned short>((bits >> 16) | 0x0040u);
  unsigned int rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<unsigned short>((bits + rounding) >> 16);
}

// ---- loads and stores by dtype constant -------------------------------------------------

// Element `index` of a float array of dtype DT (1 f32, 2 f16, 3 bf16), as f32. `if
// constexpr` keeps the other dtypes' conversions (inline PTX) out of the instantiation, so
// that tests can build the templates for the host.
template <int DT>
static __device__ __forceinline__ float dsc_load_float(const void *data, long long index) {
  static_assert(DT == DSC_DT_F32 || DT == DSC_DT_F16 || DT == DSC_DT_BF16,
                "dsc_load_float: DT must be 1 (f32), 2 (f16) or 3 (bf16)");
  if constexpr (DT == DSC_DT_F32) {
    return static_cast<const float *>(data)[index];
  } else if constexpr (DT == DSC_DT_F16) {
    return dsc_f16_to_f32(static_cast<const unsigned short *>(data)[index]);
  } else {
    return dsc_bf16_to_f32(static_cast<const unsigned short *>(data)[index]);
  }
}

template <int DT>
static __device__ __forceinline__ void dsc_store_float(void *data, long long index, float value) {
  static_assert(DT == DSC_DT_F32 || DT == DSC_DT_F16 || DT == DSC_DT_BF16,
                "dsc_store_float: DT must be 1 (f32), 2 (f16) or 3 (bf16)");
  if constexpr (DT == DSC_DT_F32)
    static_cast<float *>(data)[index] = value;
  else if constexpr (DT == DSC_DT_F16)
    static_cast<unsigned short *>(data)[index] = dsc_f32_to_f16(value);
  else
    static_cast<unsigned short *>(data)[index] = dsc_f32_to_bf16(value);
}

// Half `index` (0 low, 1 high: little endian) of a 32-bit word of two f16/bf16 values of
// dtype DT, as f32. Shifts, not a short pointer into the word, which the host compilers of
// the emulation tests may assume does not alias it.
template <int DT>
static __device__ __forceinline__ float dsc_half_of_word(unsigned int word, int index) {
  const unsigned short bits = static_cast<unsigned short>(index ? word >> 16 : word & 0xffffu);
  return dsc_load_float<DT>(&bits, 0);
}

// Element `index` of an array of dtype DT, as an address (a row's start for the
// functions above).
template <int DT>
static __device__ __forceinline__ void *dsc_element_address(void *data, long long index) {
  return static_cast<char *>(data) + index * (DT == DSC_DT_F32 ? 4 : 2);
}

// ---- the session's KV cache -------------------------------------------------------------

// The element of a KV cache of dtype KV (a plan's cache_dtype; the attention kernels'
// KV_DTYPE constant, 1 f32 when absent): f16 and bf16 as their bits. Keys and values are
// rounded to it when they are written and widened when they are read, so that attention
// sees them as stored, as the CPU reference does.
template <int KV> struct dsc_kv_element { typedef unsigned short type; };
template <> struct dsc_kv_element<DSC_DT_F32> { typedef float type; };

// `value` as a cache of dtype KV holds it.
template <int KV> static __device__ __forceinline__ float dsc_kv_rounded(float value) {
  if constexpr (KV == DSC_DT_F32) {
    return value;
  } else {
    unsigned short bits;
    dsc_store_float<KV>(&bits, 0, value);
    return dsc_load_float<KV>(&bits, 0);
  }
}

// Element `index` of a KV cache of dtype KV, read past L1 (__ldcg): another block of the
// same launch may have written it.
template <int KV>
static __device__ __forceinline__ float
dsc_kv_load_coherent(const typename dsc_kv_element<KV>::type *data, long long index) {
  if constexpr (KV == DSC_DT_F32) {
    return __ldcg(data + index);
  } else {
    const unsigned short bits = __ldcg(data + index);
    return dsc_load_float<KV>(&bits, 0);
  }
}

// Element `index` of an integer array of dtype DT (5 i64, 6 i32), widened.
template <int DT>
static __device__ __forceinline__ long long dsc_load_index(const void *data, long long index) {
  static_assert(DT == DSC_DT_I64 || DT == DSC_DT_I32,
                "dsc_load_index: DT must be 5 (i64) or 6 (i32)");
  if constexpr (DT == DSC_DT_I64)
    return static_cast<const long long *>(data)[index];
  else
    return static_cast<const int *>(data)[index];
}

// ---- attention ---------------------------------------------------------------------------

// Whether key `index` of a padding mask of dtype MASK (0 none, 5 i64, 6 i32, 9 u8, 10 bool;
// the attention kernels' MASK_DTYPE) may be attended.
template <int MASK>
static __device__ __forceinline__ bool dsc_mask_on(const void *mask, long long index) {
  static_assert(MASK == 0 || MASK == DSC_DT_I64 || MASK == DSC_DT_I32 || MASK == 9 ||
                    MASK == 10,
                "MASK_DTYPE must be 0, 5, 6, 9 or 10");
  if constexpr (MASK == 0)
    return true;
  else if constexpr (MASK == DSC_DT_I64 || MASK == DSC_DT_I32)
    return dsc_load_index<MASK>(mask, index) != 0;
  else
    return static_cast<const unsigned char *>(mask)[index] != 0;
}

// A paged prefill block's prompt chunk (attention_prefill*.cuh with PAGED): chunk `chunk`
// of `chunks` ([first row, rows] pairs) is the step's rows [first_row, first_row + rows),
// one sequence's at consecutive positions from `past`, whose block table is `table` (the
// first row's, of `paged_rows`' [rows][1 + table_width]: the position, then the table).
static __device__ __forceinline__ void dsc_paged_chunk(const int *chunks, const int *paged_rows,
                                                       int table_width, int chunk,
                                                       long long &first_row, int &rows,
                                                       const int *&table, int &past) {
  first_row = chunks[2 * chunk];
  rows = chunks[2 * chunk + 1];
  table = paged_rows + first_row * (table_width + 1) + 1;
  past = table[-1];
}

// A query row with no key to attend (a padding query), as the CPU reference fills it:
// zeros where the step asks for them (sdpa's NaN guard, `zero`); else the exports' finfo.min
// masks leave every masked score equal, so the row averages the values of every key, or
// (GPT-Neo's doubled mask, `causal_only`) of those at or before `position`. This thread
// writes features first, first + stride, ... before `end` (a block's part of the head) or
// head_dim; COHERENT reads the cache past L1 (another block of the launch may have written
// it).
// The row is of dtype OUT (the step's result: f32, or the plan's half activation dtype).
template <int KV, bool COHERENT, int OUT = DSC_DT_F32>
static __device__ void dsc_unattended_row(void *out_row,
                                          const typename dsc_kv_element<KV>::type *value_base,
                                          int head_dim, int total, int position, bool zero,
                                          bool causal_only, int first, int stride,
                                          int end = 0x7fffffff) {
  if (end > head_dim)
    end = head_dim;
  for (int feature = first; feature < end; feature += stride) {
    float sum = 0.0f;
    int count = 0;
    for (int key = 0; key < total && !zero; ++key)
      if (!causal_only || key <= position) {
        const long long element = static_cast<long long>(key) * head_dim + feature;
        if constexpr (COHERENT)
          sum += dsc_kv_load_coherent<KV>(value_base, element);
        else
          sum += dsc_load_float<KV>(value_base, element);
        ++count;
      }
    dsc_store_float<OUT>(out_row, feature, count > 0 ? sum / static_cast<float>(count) : 0.0f);
  }
}

// A hint that the line holding `address` will be read soon: fetched into L2 without waiting
// for it (PTX prefetch.global.L2). Nothing on the host (the emulation tests).
static __device__ __forceinline__ void dsc_prefetch_l2(const void *address) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
#else
  (void)address;
#endif
}

// Whether every pointer is aligned for 16-byte vector access.
static __device__ __forceinline__ bool dsc_aligned16(const void *a, const void *b = 0,
                                                     const void *c = 0) {
  unsigned long long bits = reinterpret_cast<unsigned long long>(a) |
                            reinterpret_cast<unsigned long long>(b) |
                            reinterpret_cast<unsigned long long>(c);
  return (bits & 15ull) == 0;
}

// ---- tensor cores -----------------------------------------------------------------------

// Two values of dtype DT (2 f16, 3 bf16) in one 32-bit register, `low` in the low half:
// the operand registers of mma.sync hold their lower-indexed element there.
template <int DT> static __device__ __forceinline__ unsigned int dsc_pack_half2(float low,
                                                                              float high) {
  unsigned short bits[2];
  dsc_store_float<DT>(bits, 0, low);
  dsc_store_float<DT>(bits, 1, high);
  return static_cast<unsigned int>(bits[0]) | (static_cast<unsigned int>(bits[1]) << 16);
}

#ifndef __CUDA_ARCH__
// The host emulation's warp-wide product (runtime/test/cuda/EmulatedHalf.h defines it).
template <int DT> void dsc_emulated_mma_m16n8k16(float *d, const unsigned int *a,
                                                 const unsigned int *b);
#endif

// d[16 x 8] += a[16 x 16] · b[16 x 8] over the warp, f16 or bf16 (DT 2 or 3) operands and
// f32 accumulators (PTX mma.sync.aligned.m16n8k16.row.col, sm_80 and later). Every lane of
// the warp calls it. Lane l, with g = l / 4 and t = l % 4, holds (the PTX ISA's fragment
// layouts for this shape):
//   a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
//   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   b[0] = B[2t, 2t+1][g]     b[1] = B[2t+8, 2t+9][g]
//   d[0], d[1] = D[g][2t, 2t+1]   d[2], d[3] = D[g+8][2t, 2t+1]
template <int DT>
static __device__ __forceinline__ void dsc_mma_m16n8k16(float *d, const unsigned int *a,
                                                        const unsigned int *b) {
  static_assert(DT == DSC_DT_F16 || DT == DSC_DT_BF16, "dsc_mma_m16n8k16: DT must be 2 or 3");
#ifdef __CUDA_ARCH__
  if constexpr (DT == DSC_DT_F16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  dsc_emulated_mma_m16n8k16<DT>(d, a, b);
#endif
}

// ---- reductions -----------------------------------------------------------------------

static __device__ __forceinline__ float dsc_warp_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

static __device__ __forceinline__ float dsc_warp_max(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// The sum of `value` over the block, returned to every thread. blockDim.x must be a
// multiple of 32 (at most 1024) and every thread of the block must call it; `scratch`
// holds 32 floats of shared memory, reusable as soon as this returns.
static __device__ __forceinline__ float dsc_block_sum(float value, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  value = dsc_warp_sum(value);
  if (lane == 0)
    scratch[warp] = value;
  __syncthreads();
  float total = lane < warps ? scratch[lane] : 0.0f;
  total = dsc_warp_sum(total);
  // Nobody may overwrite `scratch` (a next reduction) before every warp has read it.
  __syncthreads();
  return total;
}

// Stages the HEAD_DIM_ features of `head` in shared `staged`, RMS-normalised and multiplied
// by `scale` as tfm.rms_norm computes them (Qwen3's and Gemma-3's per-head q/k norms, in the
// attention kernels). Every thread of the block calls it (blockDim.x a multiple of 32); on
// return `staged` is complete for every thread. `scratch` is dsc_block_sum's. It waits for
// the block first, so that a loop over heads may stage into the same buffer again.
template <int HEAD_DIM_>
static __device__ __forceinline__ void
dsc_stage_rms_normalized(const float *head, const float *scale, float epsilon, float *staged,
                         float *scratch) {
  __syncthreads();
  float squares = 0.0f;
  for (int feature = threadIdx.x; feature < HEAD_DIM_; feature += blockDim.x) {
    const float x = head[feature];
    staged[feature] = x;
    squares += x * x;
  }
  const float inverse = 1.0f / sqrtf(dsc_block_sum(squares, scratch) / HEAD_DIM_ + epsilon);
  // Each thread rescales the features it staged, then the block waits for all of them. No
  // scale: the norm's scale comes after the rotation (QK_NORM 3).
  for (int feature = threadIdx.x; feature < HEAD_DIM_; feature += blockDim.x)
    staged[feature] = staged[feature] * inverse * (scale ? scale[feature] : 1.0f);
  __syncthreads();
}

// As dsc_stage_rms_normalized, with the mean of squares taken over `span_features` features
// from `span` (which holds `head`) and the scale indexed from the span's start: a norm over
// all of a token's query or key heads (OLMo-2's q_norm and k_norm, QK_NORM 2).
template <int HEAD_DIM_>
static __device__ __forceinline__ void
dsc_stage_rms_normalized_span(const float *span, int span_features, const float *head,
                              const float *scale, float epsilon, float *staged,
                              float *scratch) {
  __syncthreads();
  float squares = 0.0f;
  for (int feature = threadIdx.x; feature < span_features; feature += blockDim.x) {
    const float x = span[feature];
    squares += x * x;
  }
  const float inverse =
      1.0f / sqrtf(dsc_block_sum(squares, scratch) / span_features + epsilon);
  const float *head_scale = scale + (head - span);
  for (int feature = threadIdx.x; feature < HEAD_DIM_; feature += blockDim.x)
    staged[feature] = head[feature] * inverse * head_scale[feature];
  __syncthreads();
}

// ---- activations ------------------------------------------------------------------------

static __device__ __forceinline__ float dsc_gelu_erf(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

static __device__ __forceinline__ float dsc_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

static __device__ __forceinline__ float dsc_gelu_quick(float x) {
  return x / (1.0f + expf(-1.702f * x));
}

static __device__ __forceinline__ float dsc_silu(float x) { return x / (1.0f + expf(-x)); }

static __device__ __forceinline__ float dsc_relu(float x) { return x > 0.0f ? x : 0.0f; }

static __device__ __forceinline__ float dsc_relu2(float x) { return x > 0.0f ? x * x : 0.0f; }

// `kind` is a DSC_ACT_* code; with a constant code the switch folds away.
static __device__ __forceinline__ float dsc_activate(int kind, float x) {
  switch (kind) {
  case DSC_ACT_GELU_ERF: return dsc_gelu_erf(x);
  case DSC_ACT_GELU_TANH: return dsc_gelu_tanh(x);
  case DSC_ACT_GELU_QUICK: return dsc_gelu_quick(x);
  case DSC_ACT_SILU: return dsc_silu(x);
  case DSC_ACT_RELU: return dsc_relu(x);
  case DSC_ACT_RELU2: return dsc_relu2(x);
  default: return x;
  }
}

// The LM head's logit epilogue (tfm.lm_head `logit_scale`, then `logit_cap`: cap ·
// tanh(s / cap)) from the f32 bits of each: the kernels' LOGIT_SCALE_BITS and
// LOGIT_CAP_BITS, which default to none (1.0f, 0) where the step has none. Constant bits
// fold the code away.
static __device__ __forceinline__ float dsc_logit_epilogue(float value, unsigned int scale_bits,
                                                           unsigned int cap_bits) {
  if (scale_bits != 0x3f800000u)
    value *= __uint_as_float(scale_bits);
  if (cap_bits != 0u) {
    const float cap = __uint_as_float(cap_bits);
    value = cap * tanhf(value / cap);
  }
  return value;
}

// ---- rotary embeddings ------------------------------------------------------------------

// The inverse frequencies of a rotary of ROT_DIM features, a kernel parameter passed by
// value (attention_rotary, and attention_decode when it rotates itself): the launcher
// computes them as the CPU kernel does (ops::rotaryInverseFrequencies), so no pow runs on
// the device, nothing is uploaded, and a captured graph keeps them.
template <int ROT_DIM> struct dsc_rotary_frequencies_of {
  float attention_factor;  // scales the cosines and sines (yarn, longrope); else 1
  float inverse[ROT_DIM > 0 ? ROT_DIM / 2 : 1];
};

// Feature `feature` of `head` after rotation at `position`, with transformers' fp32 angles:
// the cosine and sine of the float angle are taken in double and rounded, which gives the
// correctly rounded float values whatever math flags the kernel was compiled with.
// INTERLEAVED: GPT-J's pairs (2i, 2i + 1), else the half-split rotate_half form.
template <int ROT_DIM, int INTERLEAVED>
static __device__ __forceinline__ float
dsc_rotary_feature(const float *head, int feature, float position,
                   const dsc_rotary_frequencies_of<ROT_DIM> &frequencies) {
  if (ROT_DIM > 0 && feature < ROT_DIM) {
    int pair, first_index, second_index;
    bool is_first;
    if (INTERLEAVED) {
      pair = feature / 2;
      first_index = 2 * pair;
      second_index = 2 * pair + 1;
      is_first = (feature % 2) == 0;
    } else {
      const int half = ROT_DIM / 2;
      pair = feature < half ? feature : feature - half;
      first_index = pair;
      second_index = pair + half;
      is_first = feature < half;
    }
    const float angle = position * frequencies.inverse[pair];
    const float cosine =
        static_cast<float>(cos(static_cast<double>(angle))) * frequencies.attention_factor;
    const float sine =
        static_cast<float>(sin(static_cast<double>(angle))) * frequencies.attention_factor;
    const float first = head[first_index], second = head[second_index];
    return is_first ? first * cosine - second * sine : second * cosine + first * sine;
  }
  return head[feature];
}

// ---- split-KV attention ------------------------------------------------------------------

// Merges a decode step's `splits` partial maxima, sums and unnormalised outputs (slots
// [first_slot, first_slot + splits) of attention_decode's partials) into `out_row`, one
// (head, sequence)'s output; a query with no key to attend gets the CPU reference's average
// of the values (runtime/src/ops/Transformer.cpp), or zeros with UNATTENDED_ZERO (sdpa's NaN
// guard). Every thread of the block calls it; the threads share the features. The partials
// and values are read past L1 (__ldcg): in attention_decode's fused form other blocks
// wrote them (the partials, and the new token's cache row) during this kernel, and only
// the L2 is coherent between SMs.
// The values are a KV cache of dtype KV_ (dsc_kv_element), the output row of dtype OUT_.
// With SINK_ (GPT-OSS's attention sinks: the kernels' SINKS), `*sink` is the head's logit, a
// key without a value that joins the softmax once: here, not in any split's partials. The
// maximum starts at it and the denominator gains exp(sink - maximum); a row with no key to
// attend is then zero (all of its weight on the sink), as the CPU kernels make it. It is
// read where it is used, through the read-only path (__ldg): a value passed in was loaded
// before the attention loop and kept live across it, and the paged decode kernels with
// GROUP_HEADS 4 spilled more (docs/cuda-backend.md, "Attention sinks").
template <int HEAD_DIM_, int CAUSAL_, int UNATTENDED_CAUSAL_, int UNATTENDED_ZERO_,
          int KV_ = DSC_DT_F32, int OUT_ = DSC_DT_F32, bool SINK_ = false>
static __device__ __forceinline__ void
dsc_attention_merge_splits(void *out_row, const float *partial_out, const float *partial_max,
                           const float *partial_sum, long long first_slot, int splits,
                           const typename dsc_kv_element<KV_>::type *value_base, int total,
                           int position, const float *sink = nullptr) {
  float overall_max = SINK_ ? __ldg(sink) : __int_as_float(0xff800000);
  for (int split = 0; split < splits; ++split)
    overall_max = fmaxf(overall_max, __ldcg(partial_max + first_slot + split));

  if (overall_max == __int_as_float(0xff800000)) {
    // No key to attend; for the one new token the causally visible keys are all of them.
    // (A sink of -inf, which weighs nothing, still leaves the row zero.)
    dsc_unattended_row<KV_, true, OUT_>(out_row, value_base, HEAD_DIM_, total, position,
                                  UNATTENDED_ZERO_ || SINK_, UNATTENDED_CAUSAL_ && CAUSAL_,
                                  threadIdx.x, blockDim.x);
    return;
  }

  float denominator = SINK_ ? expf(__ldg(sink) - overall_max) : 0.0f;
  for (int split = 0; split < splits; ++split)
    denominator += expf(__ldcg(partial_max + first_slot + split) - overall_max) *
                   __ldcg(partial_sum + first_slot + split);
  for (int feature = threadIdx.x; feature < HEAD_DIM_; feature += blockDim.x) {
    float numerator = 0.0f;
    for (int split = 0; split < splits; ++split)
      numerator += expf(__ldcg(partial_max + first_slot + split) - overall_max) *
                   __ldcg(partial_out + (first_slot + split) * HEAD_DIM_ + feature);
    dsc_store_float<OUT_>(out_row, feature, numerator / denominator);
  }
}

#endif
