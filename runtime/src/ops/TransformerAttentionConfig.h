// tfm.attention's step as the CPU kernels read it (docs/transformer-ops.md): its heads,
// masks, rotary, norms and cache mode from the attributes and the inputs' shapes, checked
// once (TransformerAttentionConfig.cpp), and what TransformerAttention.cpp computes from it.
#ifndef DSRT_OPS_TRANSFORMERATTENTIONCONFIG_H
#define DSRT_OPS_TRANSFORMERATTENTIONCONFIG_H

#include "ops/Kernel.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace dsrt::ops::attention {

enum AttentionInput {
  kQuery, kKey, kValue, kMask, kPastKey, kPastValue, kPositions, kBias,
  kQueryNormScale, kKeyNormScale, kSinks
};

struct AttentionConfig {
  // This rank's query and KV heads (all of them without tensor parallelism).
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  // The model's heads, and the global index of this rank's first query and KV head: they
  // map a local query head to its KV head (GQA groups) and to its ALiBi slope.
  int64_t globalHeads = 0, globalKvHeads = 0, headOffset = 0, kvHeadOffset = 0;
  float scale = 1;
  // Gemma-2's attn_logit_softcapping: scores become softcap * tanh(scores / softcap) before
  // the bias and the mask; 0 = off.
  float softcap = 0;
  bool causal = false, alibi = false;
  int64_t window = 0, rotaryDim = 0, cacheLayer = -1;
  // The session's cache holds keys and values rounded to this (f32, f16 or bf16).
  DType cacheDType = DType::F32;
  std::vector<float> inverseFrequency;  // rotaryDim / 2
  float attentionFactor = 1;            // scales the cosines and sines (yarn, longrope)
  bool interleaved = false;
  bool unattendedCausal = false;
  bool unattendedZero = false;  // sdpa's guard: a row with no key gives zeros
  // KernelContext::rowInvariant: prompt rows attend in f32 as a lone token does (no AMX).
  bool rowInvariant = false;
  // Shapes of this call. `keys` new keys and values: as many as the queries, or a
  // cross-attention's other sequence.
  int64_t batch = 0, fresh = 0, keys = 0, past = 0, total = 0;
  // The heads the key and value inputs hold, and the first of this rank's among them: all
  // of the model's where they come from a graph input under tensor parallelism.
  int64_t keyHeads = 0, keyHeadOffset = 0;
  bool sessionCache = false;
  int64_t pastHeads = 0, pastHeadOffset = 0;
  // Query, key and value are one tensor, each row the queries, keys and values of a token
  // (a joined projection's output).
  bool packed = false;
  // Qwen3's and Gemma-3's q/k norms: each head of the queries and new keys RMS-normalised
  // (scales inputs 8 and 9) before the rotary embedding.
  bool qkNorm = false;
  float qkNormEpsilon = 0;
  // HunYuan-Dense's: the scales multiply each head after it is rotated (qk_norm_after_rotary).
  bool qkNormAfterRotary = false;
  // GPT-OSS's attention sinks (input 10): one logit per local head that joins every row's
  // softmax as a key with no value, so the row's maximum starts at it and its sum at 1.
  // Empty: none.
  std::vector<float> sinks;
};

// The online softmax's state of a row of local head h before its first key: with a sink,
// the maximum is the sink and the sum exp(sink - sink) = 1; without, -inf and 0.
inline float initialMaximum(const AttentionConfig &c, int64_t h) {
  return c.sinks.empty() ? -std::numeric_limits<float>::infinity() : c.sinks[h];
}
inline float initialSum(const AttentionConfig &c) { return c.sinks.empty() ? 0.0f : 1.0f; }

// A query-key product's score as every fast kernel finishes it (the decode rows and the
// prompt tiles, which must agree bit for bit): the scale, soft-capping, then ALiBi's term at
// the key's position; added terms (a mask, a bias) follow, one by one.
inline float finishScore(const AttentionConfig &c, float dot, float slope, float keyPosition) {
  float score = dot * c.scale;
  if (c.softcap > 0)
    score = c.softcap * std::tanh(score / c.softcap);
  if (c.alibi)
    score += slope * keyPosition;
  return score;
}

inline bool broadcastsToScores(const Shape &m, const AttentionConfig &c) {
  return m.size() == 4 && (m[0] == 1 || m[0] == c.batch) &&
         (m[1] == 1 || m[1] == c.heads || m[1] == c.globalHeads) && m[2] == c.fresh &&
         m[3] == c.total;
}

// A float term added to the scores (an additive mask, or the bias): the row of query s of
// head h of sequence b, broadcast as its shape says.
struct AddedScores {
  const float *data = nullptr;
  Shape shape;
  int64_t headOffset = 0, localHeads = 0;
  const float *row(int64_t b, int64_t h, int64_t s) const {
    const int64_t heads = shape[1], S = shape[2], T = shape[3];
    // All of the model's heads where the rank has fewer: this rank's start at headOffset.
    const int64_t head = heads == 1 ? 0 : heads == localHeads ? h : headOffset + h;
    return data + (((shape[0] == 1 ? 0 : b) * heads + head) * S + s) * T;
  }
};

// The step's configuration, checked against its inputs.
Status readAttentionConfig(const KernelContext &ctx, AttentionConfig &c);
// tfm.attention's outputs: [batch, new, heads * head_dim] (in output_dtype where the plan
// gives one), and with 3 outputs the present key and value.
Status inferAttention(const KernelContext &ctx, std::vector<OutputSpec> &outputs);

// The queries and the new keys and values of a call, [tokens, heads, head_dim] in f32,
// each head normalised and rotated as the step says, and the positions input's values.
struct QueryKeyValue {
  std::vector<float> q, keys, values;
  std::vector<int64_t> positions;
};
Status prepareQueryKeyValue(const KernelContext &ctx, const AttentionConfig &c,
                            QueryKeyValue &rows);

// BLOOM's ALiBi slope of each of `heads` heads.
std::vector<float> alibiSlopes(int64_t heads);

// A session-cache attention over the serving engine's paged cache (ctx.cache->blockSize >
// 0): each row of the batch one token of the sequence its KvPagedRow names
// (TransformerPagedAttention.cpp).
Status computePagedAttention(const KernelContext &ctx, const AttentionConfig &c,
                             const Outputs &outputs);

// The tiled (flash-style) kernel for prompts (TransformerTiledAttention.cpp,
// docs/cpu-backend.md): one sequence's queries in tiles of up to 64 rows (queries times the
// query heads of one KV head), its keys in tiles of 64, the softmax accumulated online, so no
// [heads, queries, keys] score matrix exists; key tiles past a tile's causal limit or outside
// its window are never read. Threads split the (sequence, KV head, query tile) items.
struct TiledSequence {
  int64_t batch = 0;          // the row of the added scores (mask, bias) this sequence reads
  int64_t queries = 0;        // its new tokens (the rows of q and y)
  int64_t firstPosition = 0;  // the position of query 0; query s is at firstPosition + s
  int64_t keys = 0;           // positions [0, keys) hold its keys and values
  const float *q = nullptr;   // query s, local head h: q + (s * heads + h) * headDim
  float *y = nullptr;         // written as q is laid out
  // Where KV head kh's key (or, with `values`, value) rows from position t are (in the
  // cache's dtype), and how many rows from there are contiguous (the paged cache: to the end
  // of t's block). Valid until the next call for keys (values) on this thread.
  std::function<int64_t(int64_t kh, int64_t t, bool values, const void *&rows)> rows;
  const int64_t *keyAllowed = nullptr;   // per key, 0 where padding masks it; null: none
  const float *alibiPosition = nullptr;  // per key (ALiBi's count of attended tokens); null: t
  // [queries, heads]: set to 1 where a query may attend no key (padding); its row of y is then
  // left for the caller, which fills it as the reference kernel does.
  uint8_t *unattended = nullptr;
};
// Whether tfm.attention runs the tiled kernel for `queries` queries of a sequence: on the
// fast kernels, for more than one query, unless DSRT_TILED_ATTENTION=0.
bool tiledAttentionApplies(const KernelContext &ctx, int64_t queries);
// `outputType` is the attention's output dtype: half where the plan computes in half
// (output_dtype), which lets a bf16 cache's products run on AMX-BF16 tiles.
void tiledAttention(const AttentionConfig &c, DType stored,
                    const std::vector<TiledSequence> &sequences, const std::vector<float> &slopes,
                    const std::vector<AddedScores> &added, DType outputType);
// The tiles the tiled kernel has run in this process (the tests' proof that it ran), and of
// them the tiles run on AMX-BF16 (bf16 caches where the CPU has AMX).
int64_t tiledAttentionTiles();
int64_t tiledAttentionAmxTiles();
// What prompts' attention runs on this machine, for dsbench's report: "tiled; amx-bf16 tiles
// for bf16 caches", "tiled", or "one query at a time" (DSRT_TILED_ATTENTION=0).
const char *tiledAttentionDescription();

} // namespace dsrt::ops::attention

#endif
