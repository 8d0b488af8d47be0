// What tfm.attention's launchers share (AttentionOps.cpp: the dense cache, I/O mode and
// cross-attention; AttentionPagedOps.cpp: the serving engine's paged cache;
// AttentionDecodeOps.cpp: the split-KV decode kernel both run): the step's heads, the checks
// of the plan's kernel constants, and a one-token-per-row step as the dense launcher read it.
#ifndef DSRT_CUDA_OPS_ATTENTIONLAUNCH_H
#define DSRT_CUDA_OPS_ATTENTIONLAUNCH_H

#include "cuda/GpuOps.h"

#include <cstdint>
#include <vector>

namespace dsrt::cuda::attention {

// Threads per block of attention_rotary (each block loops over one head's features).
constexpr unsigned kRotaryBlock = 128;
constexpr int64_t kMaxGridX = 2147483647, kMaxGridYZ = 65535;

// The step's heads as the CPU kernel reads them (runtime/src/ops/Transformer.cpp,
// readAttentionConfig): the model's, and this rank's share under tensor parallelism.
struct Heads {
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  int64_t globalHeads = 0, globalKvHeads = 0, headOffset = 0, kvHeadOffset = 0;
};

Status readHeads(StepContext &context, Heads &h);

// The kernels were shaped for the step's attributes and dtypes; a plan whose kernels say
// otherwise was not made by the rule. -1: the kernel must have no such constant.
Status checkConstant(StepContext &context, size_t slot, const char *name, int64_t expected);

// `absent`: the value when the kernel has no such constant (-1: it must have one).
Status positiveConstant(StepContext &context, size_t slot, const char *name, int64_t limit,
                        int64_t &out, int64_t absent = -1);

// The kernels' rotary frequencies parameter (dsc_rotary_frequencies) from the step.
Status rotaryFrequencies(StepContext &context, std::vector<float> &frequencies);

// The q/k norms' kind (the kernels' QK_NORM: 1 per head, 2 over all heads, 3 per head after
// the rotation) and epsilon, from their scales (inputs 8 and 9) and the step's attributes.
Status readQkNorms(StepContext &context, const DeviceTensor *queryNorm,
                   const DeviceTensor *keyNorm, const Heads &h, int64_t &qkNormKind,
                   float &qkNormEpsilon);

// The sinks (input 10, GPT-OSS's attention sinks) as the kernels read them: f32 [heads] or,
// under tensor parallelism, the model's [global heads], of which `rankSinks` points at the
// rank's first (the CPU kernel's readSinks). 0 without sinks.
Status readSinks(StepContext &context, const DeviceTensor *sinks, const Heads &h,
                 DevicePtr &rankSinks);

// A step that attends one new token per row (a decode step over the dense cache, or any
// step over the paged one) as the dense launcher read and checked it: its attributes,
// inputs and the constants of slots 0 and 1. The constants a decode kernel must have are the
// expected values (-1: absent).
struct TokenStep {
  Heads h;
  int64_t batch = 0, cacheLayer = -1;
  DType cacheType = DType::F32;
  bool packed = false, rotary = false, interleaved = false, causal = false, alibi = false;
  int64_t rotaryDim = 0, window = 0, positionType = 0, maskType = 0;
  int64_t softcapBits = -1, qkNormKind = -1, kvDtype = -1, outDtype = -1;
  int64_t unattendedCausal = 0, unattendedZero = -1;
  float scale = 1.0f, qkNormEpsilon = 0.0f;
  std::vector<float> frequencies;  // dsc_rotary_frequencies: the factor, then the table
  DevicePtr query = 0, key = 0, value = 0, positions = 0, out = 0, mask = 0;
  DevicePtr queryNorm = 0, keyNorm = 0;
  DevicePtr sinks = 0;  // readSinks': the kernels' SINKS parameter where nonzero
};

// Where attention_decode reads the keys and values: [batch (or blocks), KH, rows, D] at
// these strides, `keys` positions a sequence may have; the dense cache's lengths, or the
// paged cache's rows (DevicePagedRows: PAGED's three parameters).
struct DecodeCache {
  DevicePtr keys = 0, values = 0, lengths = 0;
  long long batchStride = 0, headStride = 0;
  int64_t rows = 0;
  const DevicePagedRows *paged = nullptr;
};

// The split-KV decode kernel of `slot` over `cache` (grid sized for all of its rows, so a
// captured graph stays right), merged in its last block (FUSED_COMBINE) or, in plans from
// before it, by attention_combine in `combineSlot` (AttentionDecodeOps.cpp).
Status launchDecode(StepContext &context, size_t slot, TokenStep &step, DecodeCache &cache,
                    bool fusedCombine, size_t combineSlot);

// Slots 3 to 5 (AttentionRules.cpp): every row's key and value written into its block,
// then each prompt chunk's attention through the paged prefill (slot 5, where the plan has
// it) and each other row's through the paged decode kernel, over its sequence through its
// block table.
Status runPagedAttention(StepContext &context, TokenStep &step);

} // namespace dsrt::cuda::attention

#endif
