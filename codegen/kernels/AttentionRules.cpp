// The rule of tfm.attention (docs/transformer-ops.md): which of the attention templates a
// step launches, specialised on what shapes their code. Slots, in the order of the launcher
// (runtime/src/cuda/ops/AttentionOps.cpp):
//   0 attention_rotary   rotary on the new queries and keys, keys and values placed where
//                        the attention reads them (the session's cache or the presents)
//   1 attention_prefill  flash-style attention for any number of new tokens (or
//                        attention_prefill_mma, the same on the tensor cores, where the
//                        session cache is f16 or bf16; same parameters)
//   2 attention_decode   session cache only: split-KV attention for one new token, which
//                        rotates and caches that token itself (FUSED_ROTARY) and merges its
//                        splits in the last block of each (head, sequence) (FUSED_COMBINE):
//                        a decode step launches it alone; with GQA each block attends for
//                        the query heads of one KV head (GROUP_HEADS)
// (Plans from before FUSED_COMBINE have a slot 3, attention_combine, which merged the
// splits in a second launch; the launcher still runs them.)
// The serving plan's `step` program (dsc --serving; the engine's, docs/serving.md) adds the
// paged cache's two, which a session with the engine's block pool runs instead:
//   3 attention_rotary (PAGED)  every row's new key and value into its block's slot
//   4 attention_decode (PAGED)  each row's query rotated, attended over its sequence's
//                               positions through its block table
//   5 attention_prefill (PAGED) the step's prompt chunks, a tile of a chunk's rows sharing
//                               each key and value tile read through the table (or
//                               attention_prefill_mma, as slot 1); slot 3 is then PAGED 2,
//                               which also writes the rotated queries
// Only there: the paged session runs no other program, and other plans keep their kernels.
// They are slots 3 to 5 of a six-kernel step (3 and 4 of a five-kernel one, from before
// the paged prefill); a four-kernel one is the old combine's.
// A cached cross-attention (`cross`, an encoder-decoder's session programs) has slots 0 and
// 1 only: its keys are the encoder's, which the decoder's lengths do not describe. So has a
// cached step with a bias.
// Input 7, when present, is a bias computed in the graph (T5's relative positions), which
// only the prefill kernel adds (BIAS). Inputs 8 and 9, when present, are the scales of q/k
// norms, which attention_rotary and attention_decode apply to each head before the
// rotation: per head (Qwen3's, Gemma-3's: QK_NORM 1) or over all heads (OLMo-2's: 2); per
// head with the scales after the rotation (HunYuan-Dense's: 3). A session cache of f16 or
// bf16 (the step's cache_dtype) is KV_DTYPE of the three kernels that write and read it.
// Scale, rotary base, head counts and offsets (which differ between tensor-parallel ranks
// of one plan) are kernel parameters, not constants. Gemma-2's logit soft-capping is a
// constant of the prefill and decode kernels, SOFTCAP_BITS (the cap's f32 bits), present
// only when the step sets `softcap`: the kernels of every other step keep the names,
// constants, parameters and code they had before it existed, so plans written before it
// still run (the launcher expects no SOFTCAP_BITS where the step has no `softcap`).
// Input 10, when present, is GPT-OSS's attention sinks (a logit per head in each row's
// softmax): SINKS 1 on the prefill and decode kernels (and their paged copies), after their
// other constants, the kernels then taking the sinks as their last parameter.
#include "codegen/kernels/KernelRules.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dsc::codegen {
namespace {

using dsrt::DType;

// Warps per block of the prefill and decode kernels.
constexpr int64_t kAttentionWarps = 4;
// Keys per split of the decode kernel: one chunk of 32 per warp, so that a short cache
// still spreads over many blocks.
constexpr int64_t kDecodeSplitKeys = 128;
// The largest head the kernels keep in registers and shared memory without spilling
// (Gemma-4's full-attention layers: 512).
constexpr int64_t kMaxHeadDim = 512;
// Static shared memory of one block may not exceed 48 KiB.
constexpr int64_t kMaxSharedBytes = 48 * 1024;
// The decode kernel's query heads per block (GROUP_HEADS) keep at most this many f32
// output accumulators per thread (GROUP_HEADS × ceil(head_dim / 32)), and at most 4 heads,
// whose scores, weights, maxima and sums are registers too: ptxas (CUDA 13, sm_90) then
// gives 62-72 registers and no spills (8 heads of 128: 128 registers and spills).
constexpr int64_t kMaxDecodeAccumulators = 16;
constexpr int64_t kMaxDecodeGroupHeads = 4;

struct PrefillTiles {
  int64_t queries, keys;
};

// Query rows and keys per prefill tile: as many keys as keep the Q, K and V tiles in
// shared memory under 48 KiB, and at most 16 f32 accumulators per thread.
PrefillTiles prefillTiles(int64_t headDim) {
  if (headDim <= 64)
    return {16, 64};
  if (headDim <= 128)
    return {16, 32};
  if (headDim <= 256)
    return {8, 16};
  // One query row per warp (16 accumulators of 512 features), and 8 keys: 40 KiB.
  return {4, 8};
}

// attention_prefill_mma.cuh: 16 query rows per warp, each lane keeping its block's
// head_dim / parts / 2 f32 output accumulators, at most 128. Heads over 256 (Gemma-4's 512)
// split their output features over 2 blocks, each forming the whole Q·Kᵀ.
struct MmaPrefillShape {
  PrefillTiles tiles;
  int64_t featureParts;
  int64_t sharedBytes;  // its q, k and v tiles
};
constexpr int64_t kMaxMmaHeadDim = 512;
constexpr int64_t kMaxMmaPartFeatures = 256;
// Its tiles over 48 KiB go in dynamic shared memory, at most this much: what an sm_86 or
// sm_89 block may have (99 KiB; an A100's 163 and an H100's 227 are more), so that every GPU
// the plans target runs them.
constexpr int64_t kMaxMmaSharedBytes = 99 * 1024;

// q [Q_TILE] and k [K_TILE] rows of head_dim / 2 + 4 words (f16 or bf16 pairs), and v
// [K_TILE] rows of the block's features / 2 + 4.
int64_t mmaPrefillSharedBytes(int64_t headDim, int64_t featureParts, PrefillTiles tiles) {
  return 4 * ((headDim / 2 + 4) * (tiles.queries + tiles.keys) +
              (headDim / featureParts / 2 + 4) * tiles.keys);
}

// 64 query rows (4 warps); 64 keys per tile up to heads of 64 (32 score accumulators beside
// the outputs), else 32, else 16 where 32 would pass kMaxMmaSharedBytes (heads of 512).
MmaPrefillShape mmaPrefillShape(int64_t headDim) {
  MmaPrefillShape shape;
  shape.featureParts = (headDim + kMaxMmaPartFeatures - 1) / kMaxMmaPartFeatures;
  shape.tiles = {16 * kAttentionWarps, headDim <= 64 ? 64 : 32};
  shape.sharedBytes = mmaPrefillSharedBytes(headDim, shape.featureParts, shape.tiles);
  if (shape.sharedBytes > kMaxMmaSharedBytes) {
    shape.tiles.keys = 16;
    shape.sharedBytes = mmaPrefillSharedBytes(headDim, shape.featureParts, shape.tiles);
  }
  return shape;
}

// attention_decode.cuh's static shared memory for GROUP_HEADS query heads: their rows,
// each warp's maxima, sums and outputs, the new key and value, and the q/k norms' staging.
int64_t decodeSharedBytes(int64_t headDim, int64_t groupHeads) {
  return 4 * (groupHeads * headDim + 2 * groupHeads * kAttentionWarps +
              groupHeads * kAttentionWarps * headDim + 4 * headDim + 32) + 4;
}

// Query heads per decode block: a whole group where it fits, else the group in runs of
// equal length (ceil(group / runs)), so that a block reads each key and value once for all
// of them. 1 (one head per block, no constant) without GQA.
int64_t decodeGroupHeads(int64_t group, int64_t headDim) {
  const int64_t features = (headDim + 31) / 32;
  int64_t most =
      std::clamp<int64_t>(kMaxDecodeAccumulators / features, 1, kMaxDecodeGroupHeads);
  while (most > 1 && decodeSharedBytes(headDim, most) > kMaxSharedBytes)
    --most;
  const int64_t runs = (group + most - 1) / most;
  return (group + runs - 1) / runs;
}

int64_t prefillSharedBytes(int64_t headDim, PrefillTiles tiles) {
  // attention_prefill.cuh: q [Q_TILE][D], k [K_TILE][D + 1], v [K_TILE][D], f32.
  return 4 * (tiles.queries * headDim + tiles.keys * (headDim + 1) + tiles.keys * headDim);
}

bool isF32(const dsp::TensorT *tensor) {
  return tensor && static_cast<DType>(tensor->dtype) == DType::F32;
}

std::string dtypeOf(const dsp::TensorT *tensor) {
  return tensor ? dsrt::dtypeName(static_cast<DType>(tensor->dtype)) : "absent";
}

// Whether `step` is one of the serving plan's `step` program (dsc-derive-step-program),
// the one the engine runs over its paged cache.
bool inServingStep(const RuleInput &in) {
  for (const auto &program : in.plan().programs)
    if (program && program->name == "step")
      for (const auto &step : program->steps)
        if (step.get() == &in.step())
          return true;
  return false;
}

bool attentionRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *query = in.input(0), *key = in.input(1), *value = in.input(2);
  const dsp::TensorT *mask = in.input(3), *pastKey = in.input(4), *pastValue = in.input(5);
  const dsp::TensorT *positions = in.input(6), *bias = in.input(7);
  if (!query || !key || !value) {
    reason = "needs query, key and value";
    return false;
  }
  // GPT-OSS's attention sinks (input 10): f32, a logit per head of the model (each rank
  // reads its own, as the CPU kernel does).
  const dsp::TensorT *sinks = in.input(10);
  if (sinks && (!isF32(sinks) || sinks->shape.size() != 1)) {
    reason = "the sinks are " + dtypeOf(sinks) + " of rank " +
             std::to_string(sinks->shape.size()) + "; the kernels take f32 [heads]";
    return false;
  }
  if (!isF32(query) || !isF32(key) || !isF32(value)) {
    reason = "query, key and value are " + dtypeOf(query) + ", " + dtypeOf(key) + " and " +
             dtypeOf(value) + "; the kernels take f32 activations";
    return false;
  }
  if (!pastKey != !pastValue) {
    reason = "has only one of the past key and value";
    return false;
  }
  if (bias && !isF32(bias)) {
    reason = "the bias is " + dtypeOf(bias) + "; the kernels take an f32 bias";
    return false;
  }
  if (pastKey && (!isF32(pastKey) || !isF32(pastValue))) {
    reason = "the past key and value are not f32";
    return false;
  }
  // The result may be the plan's half activation dtype (output_dtype): the kernels that
  // write it round into it (OUT_DT), in the session programs only (dsc-activation-dtype).
  const DType outputType =
      in.output(0) ? static_cast<DType>(in.output(0)->dtype) : DType::Undefined;
  const bool halfOutput = outputType == DType::F16 || outputType == DType::BF16;
  for (size_t output = halfOutput ? 1 : 0; output < in.outputCount(); ++output)
    if (!isF32(in.output(output))) {
      reason = "output " + std::to_string(output) + " is " + dtypeOf(in.output(output)) +
               ", not f32";
      return false;
    }

  const int64_t heads = in.intAttr("num_heads", 0);
  const int64_t kvHeads = in.intAttr("num_kv_heads", heads);
  const int64_t headDim = in.intAttr("head_dim", 0);
  if (heads <= 0 || kvHeads <= 0 || heads % kvHeads != 0) {
    reason = "needs num_heads a positive multiple of num_kv_heads";
    return false;
  }
  if (headDim <= 0 || headDim > kMaxHeadDim) {
    reason = "head_dim " + std::to_string(headDim) + " is outside the kernels' [1, " +
             std::to_string(kMaxHeadDim) + "]";
    return false;
  }
  const int64_t rotaryDim = in.intAttr("rotary_dim", 0);
  if (rotaryDim < 0 || rotaryDim > headDim || rotaryDim % 2 != 0) {
    reason = "rotary_dim must be even and at most head_dim";
    return false;
  }
  const int64_t window = in.intAttr("window", 0);
  if (window < 0 || window > INT32_MAX) {
    reason = "window must be in [0, 2^31)";
    return false;
  }
  const float softcap = in.floatAttr("softcap", 0.0f);
  if (!(softcap >= 0) || !std::isfinite(softcap)) {
    reason = "softcap must be finite and >= 0 (0 = off), not " + std::to_string(softcap);
    return false;
  }
  const bool causal = in.intAttr("causal", 0) != 0;
  const bool alibi = in.intAttr("alibi", 0) != 0;
  const bool interleaved = in.intAttr("rotary_interleaved", 0) != 0;
  const std::string unattended = in.stringAttr("unattended", "all");
  if (unattended != "all" && unattended != "causal" && unattended != "zero") {
    reason = "unattended must be 'all', 'causal' or 'zero', not '" + unattended + "'";
    return false;
  }

  int64_t maskType = 0;
  if (mask) {
    auto type = static_cast<DType>(mask->dtype);
    if (dsrt::isFloat(type)) {
      reason = "additive float masks are not implemented by the GPU kernels";
      return false;
    }
    if (type != DType::I64 && type != DType::I32 && type != DType::U8 && type != DType::Bool) {
      reason = std::string("the padding mask is ") + dsrt::dtypeName(type) +
               ", not i64, i32, u8 or bool";
      return false;
    }
    maskType = static_cast<int64_t>(type);
  }
  if (alibi && !mask) {
    reason = "ALiBi needs the padding mask (key positions count attended tokens)";
    return false;
  }
  int64_t positionType = 0;
  if (rotaryDim > 0) {
    auto type = positions ? static_cast<DType>(positions->dtype) : DType::Undefined;
    if (type != DType::I64 && type != DType::I32) {
      reason = "rotary embeddings need i64 or i32 positions, not " + dtypeOf(positions);
      return false;
    }
    positionType = static_cast<int64_t>(type);
  }

  // As the CPU kernel decides it: no past inputs, a cache layer and one output.
  const bool sessionCache = !pastKey && in.intAttr("cache_layer", -1) >= 0 &&
                            in.outputCount() == 1;
  if (sessionCache && !mask) {
    reason = "the session's KV cache needs the padding mask";
    return false;
  }
  if (!sessionCache && in.outputCount() != 1 && in.outputCount() != 3) {
    reason = "has 1 output, or 3 with the present key and value";
    return false;
  }
  // The session cache's dtype (cache_dtype, f32 when absent): a half one is compiled into
  // every kernel that writes or reads it (KV_DTYPE, last), so that an f32 cache's kernels
  // keep their names.
  DType cacheType = DType::F32;
  if (const dsp::AttrT *attr = in.attr("cache_dtype")) {
    cacheType = attr->kind == dsp::AttrKind::type ? static_cast<DType>(attr->type)
                                                  : DType::Undefined;
    if (cacheType != DType::F32 && cacheType != DType::F16 && cacheType != DType::BF16) {
      reason = "cache_dtype must be a type: f32, f16 or bf16";
      return false;
    }
  }
  const int64_t kvDtype =
      sessionCache && cacheType != DType::F32 ? static_cast<int64_t>(cacheType) : 0;
  // A half result: its kernels are the session's (the decode kernel's merge writes it).
  if (halfOutput && (!sessionCache || in.intAttr("cross", 0) != 0 || bias)) {
    reason = "a " + dtypeOf(in.output(0)) +
             " result needs the session's KV cache, and no cross-attention or bias";
    return false;
  }

  // q/k norms: scales at inputs 8 and 9, f32 [head_dim] per head (Qwen3's, Gemma-3's:
  // QK_NORM 1), or [heads * head_dim] and [kv_heads * head_dim] over all of a token's query
  // or key heads (OLMo-2's: QK_NORM 2).
  const dsp::TensorT *queryNorm = in.input(8), *keyNorm = in.input(9);
  const bool qkNorm = queryNorm || keyNorm;
  int64_t qkNormKind = 0;
  if (qkNorm) {
    const int64_t partHeads[2] = {heads, kvHeads};
    bool perHead = true, overAll = true;
    for (int part = 0; part < 2; ++part) {
      const dsp::TensorT *scale = part == 0 ? queryNorm : keyNorm;
      const int64_t size = isF32(scale) && scale->shape.size() == 1 ? in.staticDim(*scale, 0) : -1;
      perHead &= size == headDim;
      overAll &= size == partHeads[part] * headDim;
    }
    if (!perHead && !overAll) {
      reason = "the q/k norms need f32 scales [" + std::to_string(headDim) + "] each, or [" +
               std::to_string(heads * headDim) + "] and [" + std::to_string(kvHeads * headDim) +
               "]";
      return false;
    }
    qkNormKind = perHead ? 1 : 2;
    // Scales after the rotation (HunYuan-Dense's): per head only, QK_NORM 3.
    if (in.intAttr("qk_norm_after_rotary", 0) != 0) {
      if (!perHead) {
        reason = "q/k norms after the rotary need scales of [" + std::to_string(headDim) + "]";
        return false;
      }
      qkNormKind = 3;
    }
    if (qkNormKind == 2 && in.attr("rank_heads")) {
      reason = "q/k norms over all heads span the tensor-parallel ranks";
      return false;
    }
    const float epsilon = in.floatAttr("qk_norm_epsilon", -1.0f);
    if (!(epsilon >= 0) || !std::isfinite(epsilon)) {
      reason = "the q/k norms need a finite qk_norm_epsilon >= 0";
      return false;
    }
  }

  const PrefillTiles tiles = prefillTiles(headDim);
  if (prefillSharedBytes(headDim, tiles) > kMaxSharedBytes) {
    reason = "the prefill tiles of head_dim " + std::to_string(headDim) +
             " do not fit 48 KiB of shared memory";
    return false;
  }

  kernels.push_back({"attention_rotary",
                     {{"HEAD_DIM", headDim},
                      {"ROTARY_DIM", rotaryDim},
                      {"ROTARY_INTERLEAVED", rotaryDim > 0 && interleaved ? 1 : 0},
                      {"POS_DTYPE", positionType}}});
  // Query, key and value in one joined tensor: last, and only when packed.
  if (in.intAttr("packed_qkv", 0) != 0)
    kernels.back().constants.push_back({"PACKED_QKV", 1});
  // Per-head q/k norms before the rotation: last, and only where the step has them.
  if (qkNorm)
    kernels.back().constants.push_back({"QK_NORM", qkNormKind});
  if (kvDtype != 0)
    kernels.back().constants.push_back({"KV_DTYPE", kvDtype});
  const int64_t unattendedCausal = unattended == "causal" ? 1 : 0;
  // On the tensor cores where the cache is half, the head fits and the step has neither
  // ALiBi nor a bias: attention_prefill_mma (its file says what it rounds). A cached
  // cross-attention keeps attention_prefill, which also runs its one-token decode steps.
  const MmaPrefillShape mma = mmaPrefillShape(headDim);
  const bool tensorCores = kvDtype != 0 && headDim % 16 == 0 && headDim <= kMaxMmaHeadDim &&
                           headDim % mma.featureParts == 0 &&
                           headDim / mma.featureParts % 8 == 0 && !alibi && !bias &&
                           in.intAttr("cross", 0) == 0 &&
                           mma.sharedBytes <= kMaxMmaSharedBytes;
  const PrefillTiles prefill = tensorCores ? mma.tiles : tiles;
  kernels.push_back({tensorCores ? "attention_prefill_mma" : "attention_prefill",
                     {{"HEAD_DIM", headDim},
                      {"WARPS", kAttentionWarps},
                      {"Q_TILE", prefill.queries},
                      {"K_TILE", prefill.keys},
                      {"CAUSAL", causal ? 1 : 0},
                      {"WINDOW", window},
                      {"ALIBI", alibi ? 1 : 0},
                      {"MASK_DTYPE", maskType},
                      {"UNATTENDED_CAUSAL", unattendedCausal}}});
  // Only where they are needed, so that the kernels of heads up to 128 keep their names:
  // the blocks per query tile, and the tiles' dynamic shared memory, which the launcher gives.
  if (tensorCores && mma.featureParts > 1)
    kernels.back().constants.push_back({"FEATURE_PARTS", mma.featureParts});
  if (tensorCores && mma.sharedBytes > kMaxSharedBytes)
    kernels.back().constants.push_back({"SHARED_BYTES", mma.sharedBytes});
  // The cap's bits (a positive finite float's: in (0, 0x7f800000)), last, and only when set.
  int64_t softcapBits = 0;
  if (softcap > 0) {
    uint32_t bits = 0;
    std::memcpy(&bits, &softcap, sizeof bits);
    softcapBits = bits;
    kernels.back().constants.push_back({"SOFTCAP_BITS", softcapBits});
  }
  // Zeros at rows with no key (sdpa's NaN guard), last, and only when asked for, so that
  // every other kernel keeps its constants and name.
  const bool unattendedZero = unattended == "zero";
  if (unattendedZero)
    kernels.back().constants.push_back({"UNATTENDED_ZERO", 1});
  // A bias computed in the graph (T5's relative positions), last, and only when present:
  // the kernel then takes four more parameters.
  if (bias)
    kernels.back().constants.push_back({"BIAS", 1});
  if (kvDtype != 0)
    kernels.back().constants.push_back({"KV_DTYPE", kvDtype});
  // The plan's half activation dtype as the result: last, and only then, so that every
  // other kernel keeps its constants and name.
  if (halfOutput)
    kernels.back().constants.push_back({"OUT_DT", static_cast<int64_t>(outputType)});
  // Attention sinks: each row's softmax starts at the head's sink (the kernels' `sinks`
  // parameter, last). Last, and only where the step has them, so that every other plan
  // keeps its kernels.
  if (sinks)
    kernels.back().constants.push_back({"SINKS", 1});
  // A cached cross-attention (`cross`: the encoder's keys, written by prefill) runs the
  // prefill kernel for its decode steps too: the decode kernel reads the decoder's lengths.
  // So does a cached step with a bias (T5's relative positions, computed for the step by
  // its session program), which only the prefill kernel adds.
  if (sessionCache && in.intAttr("cross", 0) == 0 && !bias) {
    kernels.push_back({"attention_decode",
                       {{"HEAD_DIM", headDim},
                        {"WARPS", kAttentionWarps},
                        {"SPLIT_KEYS", kDecodeSplitKeys},
                        {"CAUSAL", causal ? 1 : 0},
                        {"WINDOW", window},
                        {"ALIBI", alibi ? 1 : 0},
                        {"MASK_DTYPE", maskType}}});
    if (softcapBits != 0)
      kernels.back().constants.push_back({"SOFTCAP_BITS", softcapBits});
    // The decode step's rotary (attention_rotary's work for its one token) in the decode
    // kernel: last, so that a plan's kernels say whether the launcher may skip
    // attention_rotary for a decode step.
    kernels.back().constants.push_back({"FUSED_ROTARY", 1});
    kernels.back().constants.push_back({"ROTARY_DIM", rotaryDim});
    kernels.back().constants.push_back(
        {"ROTARY_INTERLEAVED", rotaryDim > 0 && interleaved ? 1 : 0});
    kernels.back().constants.push_back({"POS_DTYPE", positionType});
    // The splits merged by the decode kernel's last block of each (head, sequence), not by
    // a second kernel: last, so that a plan's kernels say which launches a decode step takes.
    kernels.back().constants.push_back({"FUSED_COMBINE", 1});
    kernels.back().constants.push_back({"UNATTENDED_CAUSAL", unattendedCausal});
    if (unattendedZero)
      kernels.back().constants.push_back({"UNATTENDED_ZERO", 1});
    if (qkNorm)
      kernels.back().constants.push_back({"QK_NORM", qkNormKind});
    if (kvDtype != 0)
      kernels.back().constants.push_back({"KV_DTYPE", kvDtype});
    // GQA/MQA: the query heads of a KV head share each block's reads of the cache (last,
    // and only when more than one, so that other kernels keep their names).
    const int64_t groupHeads = decodeGroupHeads(heads / kvHeads, headDim);
    if (groupHeads > 1)
      kernels.back().constants.push_back({"GROUP_HEADS", groupHeads});
    if (halfOutput)
      kernels.back().constants.push_back({"OUT_DT", static_cast<int64_t>(outputType)});
    // The sinks join the merge of the splits, once (before the paged copies' PAGED, which
    // they then share with slots 1 and 2).
    if (sinks)
      kernels.back().constants.push_back({"SINKS", 1});
    // The engine's paged cache (slots 3 to 5): slots 0, 2 and 1 with PAGED last, the
    // prefill on the tensor cores or the CUDA cores as slot 1 is. The decode and prefill
    // kernels read no mask there (each row's position bounds its keys). The write kernel is
    // PAGED 2 beside the prefill: it also writes the rotated queries the prefill kernel
    // reads (the decode kernel rotates its rows' own).
    if (inServingStep(in)) {
      KernelSpec pagedWrite = kernels[0], pagedPrefill = kernels[1], pagedDecode = kernels.back();
      pagedWrite.constants.push_back({"PAGED", 2});
      for (KernelSpec *spec : {&pagedDecode, &pagedPrefill})
        for (auto &[name, value] : spec->constants)
          if (name == "MASK_DTYPE")
            value = 0;
      pagedDecode.constants.push_back({"PAGED", 1});
      pagedPrefill.constants.push_back({"PAGED", 1});
      kernels.push_back(std::move(pagedWrite));
      kernels.push_back(std::move(pagedDecode));
      kernels.push_back(std::move(pagedPrefill));
    }
  }
  return true;
}

} // namespace

void addAttentionKernelRules(std::vector<KernelRuleEntry> &rules) {
  rules.push_back({"tfm.attention", attentionRule});
}

} // namespace dsc::codegen
