// The launcher of tfm.attention (docs/transformer-ops.md) on the kernels that
// codegen/kernels/AttentionRules.cpp lists, in its slot order:
//   0 attention_rotary, 1 attention_prefill (or attention_prefill_mma, the tensor cores'
//   over a half session cache: the same parameters and constants), and with the session's
//   cache 2 attention_decode, and in plans from before its FUSED_COMBINE 3 attention_combine.
// attention_rotary writes the rotated queries into the output buffer, which the attention
// kernels read and then overwrite (into f32 scratch where the output is half, the plan's
// activation dtype: the kernels' OUT_DT), and places the keys and values: in the session's cache
// at [past, past + s), or in the presents (I/O mode, after a copy of the past), or in
// scratch memory when the step has neither. One new token over the session's cache takes
// the split-KV decode kernels, anything else the flash-style prefill kernel.
//
// With the session's cache the kernels read {past, total, maskWidth} from the device
// (StepContext::sequenceLengths), and the decode grid is sized for the cache's capacity, so
// a captured decode graph stays right when it is replayed with longer sequences. Nothing
// here reads device data on the host.
//
// A cross-attention (keys and values of another sequence: an encoder's output, or the
// cache of its keys and values, which under tensor parallelism holds every KV head) runs
// in I/O mode: attention_rotary places the keys in one launch and copies the queries in
// another, and attention_prefill reads the s_kv keys as io_past + fresh with
// io_past = s_kv - fresh. A bias computed in the graph (input 7, T5's relative positions)
// is added by the prefill kernel (BIAS). q/k norms (inputs 8 and 9: per head, Qwen3's and
// Gemma-3's, or over all heads, OLMo-2's) are applied where the heads are rotated:
// attention_rotary and, for a decode step, attention_decode (QK_NORM 1 or 2; 3: per head,
// the scales after the rotation). A session cache of f16 or bf16 (cache_dtype, the layer's
// dtype) is the kernels' KV_DTYPE: they round keys and values into it.
// What the launchers share (heads, constant checks, q/k norms, the split-KV decode launch) is
// AttentionLaunch.cpp; the serving engine's paged cache is AttentionPagedOps.cpp.
#include "cuda/GpuOps.h"
#include "cuda/ops/AttentionLaunch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace dsrt::cuda {
namespace {

using namespace attention;

enum AttentionInput {
  kQuery, kKey, kValue, kMask, kPastKey, kPastValue, kPositions, kBias,
  kQueryNormScale, kKeyNormScale, kSinks
};
enum AttentionSlot { kRotarySlot, kPrefillSlot, kDecodeSlot, kCombineSlot };

bool isIndexType(DType dtype) { return dtype == DType::I64 || dtype == DType::I32; }

bool isPaddingMaskType(DType dtype) {
  return dtype == DType::I64 || dtype == DType::I32 || dtype == DType::U8 ||
         dtype == DType::Bool;
}

Status runAttention(StepContext &context) {
  if (context.kernelCount() < 2)
    return context.error("the plan has ", context.kernelCount(),
                         " kernels for this step, the launcher needs 2 or 4");
  Heads h;
  DSRT_RETURN_IF_ERROR(readHeads(context, h));
  const ops::AttrMap &attrs = context.attrs();
  int64_t causal = 0, alibi = 0, window = 0, rotaryDim = 0, interleaved = 0, cacheLayer = -1;
  float scale = 1.0f, softcap = 0.0f;
  std::string unattended;
  DSRT_RETURN_IF_ERROR(ops::getFloat(attrs, "scale", 1.0f, scale));
  DSRT_RETURN_IF_ERROR(ops::getFloat(attrs, "softcap", 0.0f, softcap));
  if (!(softcap >= 0) || !std::isfinite(softcap))
    return context.error("softcap must be finite and >= 0 (0 = off), not ", softcap);
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "causal", 0, causal));
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "alibi", 0, alibi));
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "window", 0, window));
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "rotary_dim", 0, rotaryDim));
  std::vector<float> frequencies;
  DSRT_RETURN_IF_ERROR(rotaryFrequencies(context, frequencies));
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "rotary_interleaved", 0, interleaved));
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "cache_layer", -1, cacheLayer));
  DSRT_RETURN_IF_ERROR(ops::getString(attrs, "unattended", "all", unattended));
  int64_t packed = 0, crossKeys = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "packed_qkv", 0, packed));
  // An encoder-decoder's cross-attention in the session programs: the encoder's keys in a
  // cache layer of their own, written by prefill (all of them) and read by decode (which
  // adds none), under the encoder's padding mask.
  DSRT_RETURN_IF_ERROR(ops::getInt(attrs, "cross", 0, crossKeys));
  const int64_t D = h.headDim, H = h.heads, KH = h.kvHeads;

  const DeviceTensor *query = context.input(kQuery), *key = context.input(kKey),
                     *value = context.input(kValue);
  if (!query || !key || !value)
    return context.error("needs query, key and value");
  if (query->dtype != DType::F32 || key->dtype != DType::F32 || value->dtype != DType::F32)
    return context.error("the kernels take f32 query, key and value");
  // Packed: one joined tensor, each token's row its queries, keys and values.
  const int64_t queryWidth = packed ? (H + 2 * KH) * D : H * D;
  if (query->shape.size() != 3 || query->shape[2] != queryWidth)
    return context.error("query must be [batch, sequence, ", queryWidth, "]");
  if (packed && (key->shape != query->shape || value->shape != query->shape ||
                 key->data != query->data || value->data != query->data))
    return context.error("packed query, key and value must be one tensor");
  const int64_t B = query->shape[0], S = query->shape[1];
  const int64_t SK = key->shape.size() == 3 ? key->shape[1] : S;
  // Keys and values that hold every KV head (read from a graph input under tensor
  // parallelism): this rank's are among them at kvHeadOffset.
  const bool allKvHeads = !packed && key->shape.size() == 3 && h.globalKvHeads != KH &&
                          key->shape[2] == h.globalKvHeads * D;
  const int64_t keyHeads = allKvHeads ? h.globalKvHeads : KH;
  const Shape kvShape{B, SK, keyHeads * D};
  if (!packed && (key->shape != kvShape || value->shape != kvShape))
    return context.error("key and value must be [", B, ", ", SK, ", ", keyHeads * D, "]");
  const bool cross = SK != S || allKvHeads || crossKeys != 0;
  const DeviceTensor &out = context.output(0);
  // f32, or the plan's half activation dtype (the kernels' OUT_DT; session programs only).
  const bool halfOutput = out.dtype == DType::F16 || out.dtype == DType::BF16;
  if ((out.dtype != DType::F32 && !halfOutput) || out.shape != Shape{B, S, H * D})
    return context.error("the output must be f32, f16 or bf16 [", B, ", ", S, ", ", H * D, "]");
  if (B > kMaxGridYZ)
    return context.error("a batch of ", B, " exceeds the grid's limit of ", kMaxGridYZ);

  const DeviceTensor *mask = context.inputCount() > kMask ? context.input(kMask) : nullptr;
  const DeviceTensor *pastKey =
      context.inputCount() > kPastKey ? context.input(kPastKey) : nullptr;
  const DeviceTensor *pastValue =
      context.inputCount() > kPastValue ? context.input(kPastValue) : nullptr;
  const DeviceTensor *positions =
      context.inputCount() > kPositions ? context.input(kPositions) : nullptr;
  const DeviceTensor *bias = context.inputCount() > kBias ? context.input(kBias) : nullptr;
  const DeviceTensor *queryNorm =
      context.inputCount() > kQueryNormScale ? context.input(kQueryNormScale) : nullptr;
  const DeviceTensor *keyNorm =
      context.inputCount() > kKeyNormScale ? context.input(kKeyNormScale) : nullptr;
  // GPT-OSS's attention sinks: the prefill and decode kernels' SINKS, their last parameter.
  const DeviceTensor *sinks = context.inputCount() > kSinks ? context.input(kSinks) : nullptr;
  DevicePtr sinkData = 0;
  DSRT_RETURN_IF_ERROR(readSinks(context, sinks, h, sinkData));
  const int64_t sinksConstant = sinks ? 1 : -1;
  const bool qkNorm = queryNorm || keyNorm;
  float qkNormEpsilon = 0.0f;
  int64_t qkNormKind = -1;
  if (qkNorm)
    DSRT_RETURN_IF_ERROR(readQkNorms(context, queryNorm, keyNorm, h, qkNormKind, qkNormEpsilon));
  if (cross && (causal || window > 0 || rotaryDim > 0 || pastKey ||
                (cacheLayer >= 0 && !crossKeys) || (allKvHeads && context.outputCount() != 1)))
    return context.error(SK, " keys of ", allKvHeads ? "every head" : "another sequence",
                         " for ", S, " queries: a cross-attention has no causal mask, window, ",
                         "rotary, past or cache (but the encoder's keys, `cross`)",
                         allKvHeads ? ", nor presents" : "");
  if (!pastKey != !pastValue)
    return context.error("past key and past value must be given together");
  if (mask && !isPaddingMaskType(mask->dtype))
    return context.error("the kernels take a padding mask of i64, i32, u8 or bool, not ",
                         dtypeName(mask->dtype));
  if (mask && (mask->shape.size() != 2 || mask->shape[0] != B))
    return context.error("the padding mask must be [", B, ", keys]");
  if (rotaryDim > 0 && (!positions || !isIndexType(positions->dtype) ||
                        positions->shape != Shape{B, S}))
    return context.error("rotary embeddings need i64 or i32 positions [", B, ", ", S, "]");

  // The kernels' code was shaped by these.
  const bool rotary = rotaryDim > 0;
  DSRT_RETURN_IF_ERROR(checkConstant(context, kRotarySlot, "HEAD_DIM", D));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kRotarySlot, "ROTARY_DIM", rotaryDim));
  DSRT_RETURN_IF_ERROR(
      checkConstant(context, kRotarySlot, "ROTARY_INTERLEAVED", rotary && interleaved ? 1 : 0));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kRotarySlot, "POS_DTYPE",
                                     rotary ? static_cast<int64_t>(positions->dtype) : 0));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kRotarySlot, "PACKED_QKV", packed ? 1 : -1));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kRotarySlot, "QK_NORM", qkNormKind));
  const int64_t maskType = mask ? static_cast<int64_t>(mask->dtype) : 0;
  const int64_t unattendedCausal = unattended == "causal" ? 1 : 0;
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPrefillSlot, "HEAD_DIM", D));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPrefillSlot, "CAUSAL", causal ? 1 : 0));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPrefillSlot, "WINDOW", window));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPrefillSlot, "ALIBI", alibi ? 1 : 0));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPrefillSlot, "MASK_DTYPE", maskType));
  DSRT_RETURN_IF_ERROR(
      checkConstant(context, kPrefillSlot, "UNATTENDED_CAUSAL", unattendedCausal));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPrefillSlot, "SINKS", sinksConstant));
  // Gemma-2's soft-capping is compiled in: the cap's f32 bits, and no constant (-1 here)
  // in the kernels of a step without it.
  int64_t softcapBits = -1;
  if (softcap > 0) {
    uint32_t bits = 0;
    std::memcpy(&bits, &softcap, sizeof bits);
    softcapBits = bits;
  }
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPrefillSlot, "SOFTCAP_BITS", softcapBits));
  // Zeros at rows with no key: a constant only kernels that give them have (-1: absent).
  const int64_t unattendedZero = unattended == "zero" ? 1 : -1;
  DSRT_RETURN_IF_ERROR(
      checkConstant(context, kPrefillSlot, "UNATTENDED_ZERO", unattendedZero));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPrefillSlot, "BIAS", bias ? 1 : -1));
  int64_t warps = 0, queryTile = 0, featureParts = 0, prefillShared = 0;
  DSRT_RETURN_IF_ERROR(positiveConstant(context, kPrefillSlot, "WARPS", 32, warps));
  DSRT_RETURN_IF_ERROR(positiveConstant(context, kPrefillSlot, "Q_TILE", 1024, queryTile));
  // The tensor cores' prefill of wide heads: blocks per query tile, each writing its part of
  // the features (so the rotated queries go to scratch, not into the output that the other
  // block is writing), and the tiles' dynamic shared memory. 1 and 0 where absent.
  DSRT_RETURN_IF_ERROR(
      positiveConstant(context, kPrefillSlot, "FEATURE_PARTS", 16, featureParts, 1));
  if (D % featureParts != 0)
    return context.error("kernel ", kPrefillSlot, "'s FEATURE_PARTS ", featureParts,
                         " does not divide head_dim ", D);
  prefillShared = context.kernelConstant(kPrefillSlot, "SHARED_BYTES", 0);
  if (prefillShared < 0 || prefillShared > (int64_t(1) << 20))
    return context.error("kernel ", kPrefillSlot, "'s SHARED_BYTES constant is ", prefillShared);

  // Where the keys and values of every attended position live, [batch, KH, rows, D].
  DevicePtr keys = 0, values = 0, lengths = 0, pastKeyData = 0, pastValueData = 0;
  int64_t kvBatchStride = 0, kvHeadStride = 0, kvRows = 0, rowsPerSequence = 0;
  int64_t ioPast = 0, pastHeads = KH, pastHeadOffset = 0;
  const bool sessionCache = !pastKey && cacheLayer >= 0 && context.outputCount() == 1;
  // A half cache (cache_dtype) is compiled into the kernels that write and read it
  // (KV_DTYPE: 2 f16, 3 bf16; absent for f32 and for I/O mode's presents).
  DType cacheType = DType::F32;
  if (Status status = ops::kvCacheDType(attrs, cacheType); !status)
    return context.error(status.message());
  const int64_t kvDtypeConstant =
      sessionCache && cacheType != DType::F32 ? static_cast<int64_t>(cacheType) : -1;
  DSRT_RETURN_IF_ERROR(checkConstant(context, kRotarySlot, "KV_DTYPE", kvDtypeConstant));
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPrefillSlot, "KV_DTYPE", kvDtypeConstant));
  const int64_t outDtypeConstant = halfOutput ? static_cast<int64_t>(out.dtype) : -1;
  DSRT_RETURN_IF_ERROR(checkConstant(context, kPrefillSlot, "OUT_DT", outDtypeConstant));
  if (halfOutput && (!sessionCache || crossKeys || bias))
    return context.error("a ", dtypeName(out.dtype), " output needs the session's KV cache, "
                         "and no cross-attention or bias");
  // A step of one token per row over the session's cache: the decode kernel's, dense or
  // paged (AttentionLaunch.h).
  TokenStep token;
  if (sessionCache) {
    token.h = h;
    token.batch = B;
    token.cacheLayer = cacheLayer;
    token.cacheType = cacheType;
    token.packed = packed != 0;
    token.rotary = rotary;
    token.interleaved = interleaved != 0;
    token.causal = causal != 0;
    token.alibi = alibi != 0;
    token.rotaryDim = rotaryDim;
    token.window = window;
    token.positionType = rotary ? static_cast<int64_t>(positions->dtype) : 0;
    token.maskType = maskType;
    token.softcapBits = softcapBits;
    token.qkNormKind = qkNormKind;
    token.kvDtype = kvDtypeConstant;
    token.outDtype = outDtypeConstant;
    token.unattendedCausal = unattendedCausal;
    token.unattendedZero = unattendedZero;
    token.scale = scale;
    token.qkNormEpsilon = qkNormEpsilon;
    token.frequencies = frequencies;
    token.query = query->data;
    token.key = packed ? query->data + static_cast<DevicePtr>(H * D) * sizeof(float) : key->data;
    token.value =
        packed ? query->data + static_cast<DevicePtr>((H + KH) * D) * sizeof(float) : value->data;
    token.positions = rotary ? positions->data : 0;
    token.out = out.data;
    token.mask = mask ? mask->data : 0;
    token.queryNorm = qkNorm ? queryNorm->data : 0;
    token.keyNorm = qkNorm ? keyNorm->data : 0;
    token.sinks = sinkData;
  }
  if (sessionCache && context.pagedRows()) {
    // The engine's block pool: AttentionPagedOps.cpp.
    if (crossKeys || bias || S != 1)
      return context.error("the paged KV cache takes one new token per row of a "
                           "self-attention without a bias, not ", S, " tokens",
                           crossKeys ? " of a cross-attention" : "", bias ? " with a bias" : "");
    return runPagedAttention(context, token);
  }
  if (sessionCache) {
    const DeviceKvLayer *layer = context.kvLayer(cacheLayer);
    if (!layer)
      return context.error("needs the session's KV cache layer ", cacheLayer);
    if (layer->dtype != cacheType || layer->kvHeads != KH || layer->headDim != D ||
        layer->capacity <= 0 || layer->capacity > INT32_MAX)
      return context.error("KV cache layer ", cacheLayer, " (", dtypeName(layer->dtype), " [",
                           layer->kvHeads, " heads, ", layer->headDim,
                           "]) does not match the attention (", dtypeName(cacheType), " [", KH,
                           " heads, ", D, "])");
    if (B > layer->batch)
      return context.error("batch ", B, " does not fit the KV cache's ", layer->batch);
    if (!mask)
      return context.error("with the session's KV cache needs the padding mask");
    keys = layer->key;
    values = layer->value;
    kvRows = layer->capacity;
    kvHeadStride = kvRows * D;
    kvBatchStride = KH * kvHeadStride;
    rowsPerSequence = S;
    if (crossKeys) {
      // The encoder's keys: as many as its mask is wide, the SK new ones last (all of them
      // in prefill, none in decode). The sequence lengths on the device are the decoder's
      // tokens', so the kernels take these as I/O mode's arguments (lengths 0): known here,
      // which a captured graph would not replay (CudaSession captures no program with one).
      if (context.capturing())
        return context.error("a cross-attention's cached keys cannot be captured in a graph");
      // All of them at once, or none; a decode step's empty keys may be of every head
      // (tp-shard leaves them whole).
      if ((allKvHeads && SK != 0) || (SK != 0 && SK != mask->shape[1]) ||
          mask->shape[1] > layer->capacity)
        return context.error("the encoder's ", mask->shape[1], " keys (", SK,
                             " new: all or none) do not fit KV cache layer ", cacheLayer,
                             " of ", layer->capacity);
      ioPast = mask->shape[1] - SK;
      rowsPerSequence = std::max(S, SK);
    } else {
      lengths = context.sequenceLengths();
      if (lengths == 0)
        return context.error("the session gave no sequence lengths for its KV cache");
      if (!context.capturing()) {
        // The device holds the same values; checking them here gives a message, not a
        // kernel reading out of bounds.
        const int32_t *host = context.hostSequenceLengths();
        if (host && (host[kTotal] != host[kPast] + S || host[kTotal] > layer->capacity ||
                     host[kMaskWidth] < host[kTotal] || host[kMaskWidth] != mask->shape[1]))
          return context.error("sequence lengths {past ", host[kPast], ", total ", host[kTotal],
                               ", mask width ", host[kMaskWidth], "} do not fit ", S,
                               " new tokens, a mask of width ", mask->shape[1],
                               " and a cache of ", layer->capacity);
      }
    }
  } else {
    const int64_t outputs = static_cast<int64_t>(context.outputCount());
    if (outputs != 1 && outputs != 3)
      return context.error("has 1 output, or 3 with the present key and value");
    if (pastKey) {
      const Shape &p = pastKey->shape;
      bool sharded = p.size() == 4 && p[1] == h.globalKvHeads && h.globalKvHeads != KH;
      if (pastKey->dtype != DType::F32 || pastValue->dtype != DType::F32 || p.size() != 4 ||
          p[0] != B || (p[1] != KH && !sharded) || p[3] != D || pastValue->shape != p)
        return context.error("past key/value must be f32 [", B, ", ", KH, ", past, ", D, "]");
      ioPast = p[2];
      pastHeads = p[1];
      pastHeadOffset = sharded ? h.kvHeadOffset : 0;
      pastKeyData = pastKey->data;
      pastValueData = pastValue->data;
    }
    const int64_t T = ioPast + SK;
    if (T > INT32_MAX)
      return context.error(T, " keys exceed the kernels' int range");
    if (mask && mask->shape[1] != T)
      return context.error("the padding mask must be [", B, ", ", T, "]");
    kvRows = T;
    kvHeadStride = T * D;
    kvBatchStride = keyHeads * kvHeadStride;
    rowsPerSequence = T;
    if (outputs == 3) {
      const DeviceTensor &presentKey = context.output(1), &presentValue = context.output(2);
      const Shape presentShape{B, KH, T, D};
      if (presentKey.dtype != DType::F32 || presentValue.dtype != DType::F32 ||
          presentKey.shape != presentShape || presentValue.shape != presentShape)
        return context.error("the presents must be f32 [", B, ", ", KH, ", ", T, ", ", D, "]");
      keys = presentKey.data;
      values = presentValue.data;
    } else {
      // No presents to keep: the keys and values of this call live for this step only.
      size_t bytes = static_cast<size_t>(B * keyHeads * T * D) * sizeof(float);
      DevicePtr storage = 0;
      if (bytes > 0) {
        DSRT_RETURN_IF_ERROR(context.scratch(2 * bytes, storage));
      }
      keys = storage;
      values = storage + bytes;
    }
  }
  // The bias's strides: 0 where it broadcasts; its heads are this rank's or every head.
  long long biasBatchStride = 0, biasHeadStride = 0, biasRowStride = 0;
  DevicePtr biasData = 0;
  if (bias) {
    const Shape &m = bias->shape;
    // Every attended position's: the mask's width with the session's cache (whose rows
    // are its capacity), the presents' rows otherwise.
    const int64_t T = sessionCache ? mask->shape[1] : kvRows;
    if (bias->dtype != DType::F32 || m.size() != 4 || (m[0] != 1 && m[0] != B) ||
        (m[1] != 1 && m[1] != H && m[1] != h.globalHeads) || m[2] != S || m[3] != T)
      return context.error("the bias must be f32 broadcasting to [", B, ", ", H, ", ", S,
                           ", ", T, "]");
    biasRowStride = T;
    biasHeadStride = m[1] == 1 ? 0 : S * T;
    biasBatchStride = m[0] == 1 ? 0 : m[1] * S * T;
    const int64_t firstHead = m[1] == h.globalHeads && m[1] != H ? h.headOffset : 0;
    biasData = bias->data + static_cast<DevicePtr>(firstHead * biasHeadStride) * sizeof(float);
  }
  if (B == 0 || S == 0)
    return Status::ok();
  if (B * std::max(rowsPerSequence, S) > kMaxGridX)
    return context.error(B * rowsPerSequence, " rows exceed the grid's limit");

  // Kernel parameters, typed as the templates declare them.
  DevicePtr queryData = query->data, keyData = key->data, valueData = value->data;
  if (packed) {
    keyData = queryData + static_cast<DevicePtr>(H * D) * sizeof(float);
    valueData = queryData + static_cast<DevicePtr>((H + KH) * D) * sizeof(float);
  }
  DevicePtr positionData = rotary ? positions->data : 0, maskData = mask ? mask->data : 0;
  DevicePtr outData = out.data;
  // Where attention_rotary writes the rotated queries for the prefill kernel: the output
  // itself when it is f32 (the kernel reads each row before it writes it), f32 scratch when
  // the output is half (OUT_DT) or blocks share its rows (FEATURE_PARTS): the kernel's last
  // parameter.
  DevicePtr queryRows = outData;
  int ioPastArg = static_cast<int>(ioPast), fresh = static_cast<int>(S);
  int capacity = static_cast<int>(kvRows);
  long long batchStride = kvBatchStride, headStride = kvHeadStride;
  int headsArg = static_cast<int>(H);
  int pastHeadsArg = static_cast<int>(pastHeads), pastOffsetArg = static_cast<int>(pastHeadOffset);
  int headOffset = static_cast<int>(h.headOffset), kvHeadOffset = static_cast<int>(h.kvHeadOffset);
  int group = static_cast<int>(h.globalHeads / h.globalKvHeads);
  int globalHeads = static_cast<int>(h.globalHeads);
  float scaleArg = scale;
  // QK_NORM's parameters, last in both kernels that take them (other kernels ignore them).
  DevicePtr queryNormData = qkNorm ? queryNorm->data : 0, keyNormData = qkNorm ? keyNorm->data : 0;

  // attention_rotary over `rows` rows of each sequence, `tokens` of them new, for `qHeads`
  // query heads and `kHeads` key heads (0: that part is not touched). The kernel skips rows
  // at or past `rowLimit` (the key storage's rows, where it writes keys).
  auto place = [&](int64_t rows, int64_t tokens, int64_t qHeads, int64_t kHeads,
                   int64_t rowLimit) -> Status {
    int rowsValue = static_cast<int>(rows), freshValue = static_cast<int>(tokens);
    int qHeadsValue = static_cast<int>(qHeads), kHeadsValue = static_cast<int>(kHeads);
    int limit = static_cast<int>(rowLimit);
    void *args[] = {&queryData,  &keyData,     &valueData,     &positionData, &queryRows,
                    &keys,       &values,      &pastKeyData,   &pastValueData, &lengths,
                    &ioPastArg,  &freshValue,  &rowsValue,     &batchStride,  &headStride,
                    &limit,      &qHeadsValue, &kHeadsValue,   &pastHeadsArg, &pastOffsetArg,
                    frequencies.data(), &queryNormData, &keyNormData, &qkNormEpsilon};
    Dim3 grid, block;
    grid.x = static_cast<unsigned>(B * rows);
    // A block per head: the kernel strides over heads along y.
    grid.y = static_cast<unsigned>(
        std::min<int64_t>(std::max<int64_t>({qHeads, kHeads, 1}), kMaxGridYZ));
    block.x = kRotaryBlock;
    return context.launch(kRotarySlot, grid, block, 0, args);
  };
  // A decode step whose decode kernel rotates and caches its token itself (FUSED_ROTARY, in
  // plans since it exists) launches no attention_rotary.
  // Plans since FUSED_COMBINE merge the splits in the decode kernel (3 kernels), older ones
  // in attention_combine (4).
  // A serving plan's step program has the paged kernels after these (5 kernels, 6 with the
  // paged prefill).
  const bool fusedCombine = (context.kernelCount() == 3 || context.kernelCount() >= 5) &&
                            context.kernelConstant(kDecodeSlot, "FUSED_COMBINE", 0) == 1;
  const bool decodeStep = sessionCache && !crossKeys && !bias && S == 1 &&
                          (context.kernelCount() >= 4 || fusedCombine);
  const bool fusedRotary =
      decodeStep && context.kernelConstant(kDecodeSlot, "FUSED_ROTARY", 0) == 1;
  const bool separateQueries = halfOutput || featureParts > 1;
  if (separateQueries && !decodeStep)
    DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(B * S * H * D) * sizeof(float),
                                         queryRows));
  if (fusedRotary) {
    // Nothing to place here: attention_decode does it.
  } else if (cross) {
    // The keys of every head the inputs hold (a cached cross-attention's decode step has
    // none: prefill wrote them), then the queries, every row of both new.
    ioPastArg = 0;
    if (SK > 0)
      DSRT_RETURN_IF_ERROR(place(SK, SK, 0, keyHeads, kvRows));
    DSRT_RETURN_IF_ERROR(place(S, S, H, 0, S));
    ioPastArg = static_cast<int>(ioPast + SK - S);
    if (allKvHeads && !crossKeys)
      kvHeadOffset = 0;  // the kernel's KV head index is then the model's
  } else {
    DSRT_RETURN_IF_ERROR(place(rowsPerSequence, S, H, KH, kvRows));
  }

  const unsigned attentionBlock = static_cast<unsigned>(warps * 32);
  if (decodeStep) {
    if (fusedRotary) {
      DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "ROTARY_DIM", rotaryDim));
      DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "ROTARY_INTERLEAVED",
                                         rotary && interleaved ? 1 : 0));
      DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "POS_DTYPE",
                                         rotary ? static_cast<int64_t>(positions->dtype) : 0));
    }
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "HEAD_DIM", D));
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "WARPS", warps));
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "CAUSAL", causal ? 1 : 0));
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "WINDOW", window));
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "ALIBI", alibi ? 1 : 0));
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "MASK_DTYPE", maskType));
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "SOFTCAP_BITS", softcapBits));
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "QK_NORM", qkNormKind));
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "KV_DTYPE", kvDtypeConstant));
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "OUT_DT", outDtypeConstant));
    if (halfOutput && !fusedCombine)
      return context.error("a ", dtypeName(out.dtype), " output needs the decode kernel's "
                           "merge (FUSED_COMBINE)");
    // The merge's constants: the decode kernel's own when it merges, else the combine's.
    const size_t mergeSlot = fusedCombine ? kDecodeSlot : kCombineSlot;
    if (fusedCombine && !fusedRotary)
      return context.error("kernel ", kDecodeSlot, " merges its splits (FUSED_COMBINE) but "
                           "does not rotate its token (FUSED_ROTARY), which it requires");
    DSRT_RETURN_IF_ERROR(checkConstant(context, mergeSlot, "HEAD_DIM", D));
    DSRT_RETURN_IF_ERROR(checkConstant(context, mergeSlot, "CAUSAL", causal ? 1 : 0));
    DSRT_RETURN_IF_ERROR(
        checkConstant(context, mergeSlot, "UNATTENDED_CAUSAL", unattendedCausal));
    DSRT_RETURN_IF_ERROR(checkConstant(context, mergeSlot, "UNATTENDED_ZERO", unattendedZero));
    // The sinks join the decode kernel's own merge; attention_combine (plans from before
    // FUSED_COMBINE, which had no sinks) has none.
    DSRT_RETURN_IF_ERROR(checkConstant(context, kDecodeSlot, "SINKS", sinksConstant));
    if (sinks && !fusedCombine)
      return context.error("attention sinks need the decode kernel's merge (FUSED_COMBINE)");
    DecodeCache cache{keys, values, lengths, kvBatchStride, kvHeadStride, kvRows, nullptr};
    return launchDecode(context, kDecodeSlot, token, cache, fusedCombine, kCombineSlot);
  }

  // The parameters the kernel has: BIAS's four, and OUT_DT's query rows, only with them.
  std::vector<void *> args = {&outData,   &keys,       &values,      &batchStride,
                              &headStride, &capacity,  &maskData,    &lengths,
                              &ioPastArg, &fresh,      &headsArg,    &headOffset,
                              &kvHeadOffset, &group,   &globalHeads, &scaleArg};
  if (bias)
    args.insert(args.end(), {&biasData, &biasBatchStride, &biasHeadStride, &biasRowStride});
  if (separateQueries)
    args.push_back(&queryRows);
  if (sinks)
    args.push_back(&sinkData);
  Dim3 grid, block;
  grid.x = static_cast<unsigned>((S + queryTile - 1) / queryTile * featureParts);
  grid.y = static_cast<unsigned>(H);
  grid.z = static_cast<unsigned>(B);
  block.x = attentionBlock;
  return context.launch(kPrefillSlot, grid, block, static_cast<uint32_t>(prefillShared),
                        args.data());
}

} // namespace

void addAttentionGpuOps(std::vector<GpuOpInfo> &ops) {
  ops.push_back({"tfm.attention", runAttention});
}

} // namespace dsrt::cuda
