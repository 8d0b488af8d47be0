// Internal to dsrt_ops: the tiled attention's products on AMX-BF16 tiles (AttentionAmx.cpp,
// compiled for AMX-BF16; TransformerTiledAttention.cpp drives it). Pointers
// and sizes only: no standard-library code is instantiated with AMX's or AVX-512's flags,
// where the linker could pick it for a CPU without them.
//
// One key tile is kAmxKeys keys. Rows (queries times grouped heads) are padded to a multiple
// of 16, the head dimension D is a multiple of 32 (AMX's bf16 depth per tile).
#ifndef DSRT_OPS_FAST_ATTENTIONAMX_H
#define DSRT_OPS_FAST_ATTENTIONAMX_H

#include <cstdint>

namespace dsrt::ops::fast::amx {

constexpr int64_t kAmxKeys = 64;

// Whether the CPU has AMX-BF16 (and AVX-512 BF16) and Linux lets this process use the tile
// state (arch_prctl's ARCH_REQ_XCOMP_PERM, asked once).
bool available();

// Loads the one tile configuration (8 tiles of 16 rows x 64 bytes) on the calling thread.
// Other code on the thread (oneDNN's kernels) configures tiles too, so each work item calls
// it before its products, and release() after them.
void configure();
void release();

// The keys of a tile as AMX's B operand: pairs[d2 * 64 + j] holds key j's inputs 2 d2 and
// 2 d2 + 1 (bf16 each). keyRows[j] is key j's row (bf16 [D]); keys from `count` on are 0.
void packKeys(const uint16_t *const *keyRows, int64_t count, int64_t D, uint32_t *pairs);
// The values likewise: pairs[j2 * D + d] holds value rows 2 j2 and 2 j2 + 1 at d.
void packValues(const uint16_t *const *valueRows, int64_t count, int64_t D, uint32_t *pairs);

// scores[r * 64 + j] = queries[r, :] . key j: queries bf16 [ld, D], ld a multiple of 16.
void scoreTile(const uint16_t *queries, int64_t ld, int64_t D, const uint32_t *keyPairs,
               float *scores);

// One online-softmax step over the tile for rows [0, rows): key j of row r is seen where bit
// j of allowed[r] is set (its causal limit, window, padding and the tile's end); its score
// becomes e^(s - m) rounded to bf16 in probabilities[r * 64 + j] (0 where not seen), with m
// the row's new maximum; sum[r] is rescaled and adds the row's weights, and the row of acc
// ([ld, D]) is rescaled where the maximum rose. Rows with no key seen are left as they were
// (their probabilities 0).
void softmaxTile(float *scores, int64_t rows, const uint64_t *allowed, float *maximum,
                 float *sum, float *acc, int64_t D, uint16_t *probabilities);

// acc[r, :] += probabilities[r, :] . values, for the ld rows.
void accumulateTile(const uint16_t *probabilities, int64_t ld, const uint32_t *valuePairs,
                    int64_t D, float *acc);

// to[i] = from[i] * scale, rounded to bf16 (nearest even).
void roundScaled(const float *from, int64_t count, float scale, uint16_t *to);

} // namespace dsrt::ops::fast::amx

#endif
