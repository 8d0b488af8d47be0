// tfm.attention's CPU kernel (docs/transformer-ops.md): grouped-query heads, causal,
// padding, window and ALiBi masks, rotary embeddings, Gemma-2's logit soft-capping, Qwen3's
// and Gemma-3's per-head q/k norms, and its two KV-cache modes (the export's past/present
// pairs, or the session's cache written in place). What it reads of the step:
// TransformerAttentionConfig.h.
#include "ops/FloatAccess.h"
#include "ops/Kernel.h"
#include "ops/ThreadPool.h"
#include "ops/TransformerAttentionConfig.h"
#include "ops/TransformerCommon.h"
#include "ops/TypeDispatch.h"
#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>

namespace dsrt::ops {
namespace attention {

// transformers' get_slopes (BLOOM's build_alibi_tensor): a geometric sequence per power of
// two of heads, interleaved with the next power's for the rest.
std::vector<float> alibiSlopes(int64_t heads) {
  int64_t closest = 1;
  while (closest * 2 <= heads)
    closest *= 2;
  std::vector<float> slopes;
  float base = std::pow(2.0f, -std::pow(2.0f, -(std::log2(float(closest)) - 3)));
  for (int64_t i = 1; i <= closest; ++i)
    slopes.push_back(std::pow(base, float(i)));
  if (closest != heads) {
    float extra = std::pow(2.0f, -std::pow(2.0f, -(std::log2(float(2 * closest)) - 3)));
    for (int64_t i = 0; i < heads - closest; ++i)
      slopes.push_back(std::pow(extra, float(1 + 2 * i)));
  }
  return slopes;
}

} // namespace attention

namespace {

using namespace attention;

// Rotates the first rotaryDim features of each head of `x` ([tokens, heads * d]) in place,
// at `positions[token]`. The angles are computed in fp32 as transformers does.
void applyRotary(float *x, int64_t tokens, int64_t heads, const AttentionConfig &c,
                 const std::vector<int64_t> &positions) {
  int64_t half = c.rotaryDim / 2;
  const std::vector<float> &inverseFrequency = c.inverseFrequency;
  for (int64_t t = 0; t < tokens; ++t) {
    float position = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      float angle = position * inverseFrequency[i];
      float cosine = std::cos(angle) * c.attentionFactor,
            sine = std::sin(angle) * c.attentionFactor;
      for (int64_t h = 0; h < heads; ++h) {
        float *head = x + (t * heads + h) * c.headDim;
        int64_t a = c.interleaved ? 2 * i : i, b = c.interleaved ? 2 * i + 1 : i + half;
        float first = head[a], second = head[b];
        head[a] = first * cosine - second * sine;
        head[b] = second * cosine + first * sine;
      }
    }
  }
}

} // namespace

namespace attention {

Status prepareQueryKeyValue(const KernelContext &ctx, const AttentionConfig &c,
                            QueryKeyValue &rows) {
  const int64_t B = c.batch, S = c.fresh, SK = c.keys, H = c.heads, KH = c.kvHeads,
                D = c.headDim;
  std::vector<float> &q = rows.q, &kNew = rows.keys, &vNew = rows.values;
  if (c.packed) {
    // Each token's row: its queries, keys and values. On the pool: a serving step's 256
    // rows are megabytes, which one thread copied while the others waited.
    FloatView packed(*ctx.input(kQuery));
    const int64_t width = (H + 2 * KH) * D;
    q.resize(B * S * H * D);
    kNew.resize(B * S * KH * D);
    vNew.resize(B * S * KH * D);
    parallelFor(B * S, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, width)),
                [&](int64_t begin, int64_t end) {
                  for (int64_t token = begin; token < end; ++token) {
                    const float *row = packed.data() + token * width;
                    std::copy(row, row + H * D, &q[token * H * D]);
                    std::copy(row + H * D, row + (H + KH) * D, &kNew[token * KH * D]);
                    std::copy(row + (H + KH) * D, row + width, &vNew[token * KH * D]);
                  }
                });
  } else {
    FloatView query(*ctx.input(kQuery)), k(*ctx.input(kKey)), v(*ctx.input(kValue));
    q.assign(query.data(), query.data() + B * S * H * D);
    kNew.assign(k.data(), k.data() + B * SK * c.keyHeads * D);
    vNew.assign(v.data(), v.data() + B * SK * c.keyHeads * D);
  }
  std::vector<int64_t> &positions = rows.positions;
  positions.clear();  // `rows` may hold a previous call's
  if (ctx.input(kPositions))
    DSRT_RETURN_IF_ERROR(readIndexValues(ctx, kPositions, "positions", positions));
  if (c.qkNorm) {
    // Each head's features as one row, as the unfused tfm.rms_norm of [.., heads, D] does;
    // or each token's heads as one, as OLMo-2's norm over [.., heads * D].
    // After the rotary, the scales come last (below): the norm's own scale is ones.
    std::vector<float> ones(c.qkNormAfterRotary ? D : 0, 1.0f);
    const TensorRef unitScale{DType::F32, Shape{D}, ones.data()};
    auto normalizeHeads = [&](std::vector<float> &x, int which) {
      const TensorRef &scale = c.qkNormAfterRotary ? unitScale : *ctx.input(which);
      const int64_t width = scale.shape[0];
      std::vector<float> normalized(x.size());
      normalizeRows(x.data(), static_cast<int64_t>(x.size()) / width, width, FloatView(scale),
                    nullptr, true, c.qkNormEpsilon, ctx.fastKernels, normalized.data());
      x.swap(normalized);
    };
    normalizeHeads(q, kQueryNormScale);
    normalizeHeads(kNew, kKeyNormScale);
  }
  if (c.rotaryDim > 0) {
    applyRotary(q.data(), B * S, H, c, positions);
    applyRotary(kNew.data(), B * S, c.keyHeads, c, positions);
  }
  if (c.qkNormAfterRotary) {
    auto scaleHeads = [&](std::vector<float> &x, int which) {
      FloatView scale(*ctx.input(which));
      for (size_t i = 0; i < x.size(); ++i)
        x[i] *= scale[static_cast<int64_t>(i % D)];
    };
    scaleHeads(q, kQueryNormScale);
    scaleHeads(kNew, kKeyNormScale);
  }

  return Status::ok();
}

} // namespace attention

namespace {

Status computeAttention(const KernelContext &ctx, const Outputs &outputs) {
  AttentionConfig c;
  DSRT_RETURN_IF_ERROR(readAttentionConfig(ctx, c));
  if (c.sessionCache && ctx.cache && ctx.cache->blockSize > 0)
    return computePagedAttention(ctx, c, outputs);
  const int64_t B = c.batch, S = c.fresh, SK = c.keys, P = c.past, T = c.total, H = c.heads,
                KH = c.kvHeads, D = c.headDim, group = c.globalHeads / c.globalKvHeads;
  // Reused by the calls on this thread: a prompt chunk's rows are megabytes, which a fresh
  // vector would take from the OS (and fault in) at every layer. A reference, so that the
  // lambdas the pool runs read this thread's rows, not their own thread's.
  thread_local QueryKeyValue reused;
  QueryKeyValue &rows = reused;
  DSRT_RETURN_IF_ERROR(prepareQueryKeyValue(ctx, c, rows));
  const std::vector<float> &q = rows.q, &kNew = rows.keys, &vNew = rows.values;
  // Keys and values of every attended position, [B, KH, T, D]: in the session's cache, or
  // assembled from the past inputs and the new tokens.
  std::vector<float> kAllStorage, vAllStorage;
  const float *kAll = nullptr, *vAll = nullptr;
  // What the fast kernels read the keys and values from, in their stored dtype: kAll/vAll,
  // or a half cache itself (not widened: the dot products and the weighted sum widen).
  DType storedType = DType::F32;
  const void *storedKeys = nullptr, *storedValues = nullptr;
  int64_t batchStride = KH * T * D, headStride = T * D;
  auto placeNew = [&](float *keys, float *values, int64_t bStride, int64_t hStride) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < SK; ++s)
        for (int64_t h = 0; h < KH; ++h) {
          const int64_t from = ((b * SK + s) * c.keyHeads + c.keyHeadOffset + h) * D;
          const float *ks = &kNew[from];
          const float *vs = &vNew[from];
          std::copy(ks, ks + D, keys + b * bStride + h * hStride + (P + s) * D);
          std::copy(vs, vs + D, values + b * bStride + h * hStride + (P + s) * D);
        }
  };
  if (c.sessionCache) {
    if (!ctx.cache || c.cacheLayer >= static_cast<int64_t>(ctx.cache->layers.size()))
      return ctx.error("needs the session's KV cache layer ", c.cacheLayer,
                       ", which this caller does not provide");
    const KvCacheLayer &layer = ctx.cache->layers[c.cacheLayer];
    if (layer.dtype != c.cacheDType || layer.kvHeads != KH || layer.headDim != D)
      return ctx.error("KV cache layer ", c.cacheLayer, " (", dtypeName(layer.dtype), " [",
                       layer.kvHeads, " heads, ", layer.headDim,
                       "]) does not match the attention (", dtypeName(c.cacheDType), " [", KH,
                       " heads, ", D, "])");
    if (B > layer.batch || T > layer.capacity)
      return ctx.error("batch ", B, " with ", T, " tokens does not fit the KV cache (batch ",
                       layer.batch, ", ", layer.capacity, " tokens)");
    const int64_t cacheBatchStride = KH * layer.capacity * D, cacheHeadStride = layer.capacity * D;
    if (c.cacheDType == DType::F32) {
      auto *keys = static_cast<float *>(layer.key), *values = static_cast<float *>(layer.value);
      batchStride = cacheBatchStride;
      headStride = cacheHeadStride;
      placeNew(keys, values, batchStride, headStride);
      kAll = keys;
      vAll = values;
    } else {
      // A half cache: the new keys and values are rounded into it, and every attended one
      // is read back widened, so that attention sees them as stored (as the GPU kernels do).
      const size_t element = dtypeSize(c.cacheDType);
      auto row = [&](void *base, int64_t b, int64_t h, int64_t t) {
        return static_cast<char *>(base) +
               static_cast<size_t>(b * cacheBatchStride + h * cacheHeadStride + t * D) * element;
      };
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < SK; ++s)
          for (int64_t h = 0; h < KH; ++h) {
            const int64_t from = ((b * SK + s) * c.keyHeads + c.keyHeadOffset + h) * D;
            convertFloats(DType::F32, &kNew[from], c.cacheDType, row(layer.key, b, h, P + s), D);
            convertFloats(DType::F32, &vNew[from], c.cacheDType, row(layer.value, b, h, P + s),
                          D);
          }
      if (ctx.fastKernels) {
        storedType = c.cacheDType;
        storedKeys = layer.key;
        storedValues = layer.value;
        batchStride = cacheBatchStride;
        headStride = cacheHeadStride;
      } else {
        kAllStorage.resize(B * KH * T * D);
        vAllStorage.resize(B * KH * T * D);
        for (int64_t bh = 0; bh < B * KH; ++bh)
          for (int which = 0; which < 2; ++which)
            convertFloats(c.cacheDType, row(which == 0 ? layer.key : layer.value, bh / KH, bh % KH, 0),
                          DType::F32, (which == 0 ? kAllStorage : vAllStorage).data() + bh * T * D,
                          T * D);
        kAll = kAllStorage.data();
        vAll = vAllStorage.data();
      }
    }
  } else {
    kAllStorage.resize(B * KH * T * D);
    vAllStorage.resize(B * KH * T * D);
    if (P > 0) {
      FloatView pk(*ctx.input(kPastKey)), pv(*ctx.input(kPastValue));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < KH; ++h) {
          int64_t from = (b * c.pastHeads + c.pastHeadOffset + h) * P * D;
          int64_t to = (b * KH + h) * T * D;
          std::copy(pk.data() + from, pk.data() + from + P * D, kAllStorage.data() + to);
          std::copy(pv.data() + from, pv.data() + from + P * D, vAllStorage.data() + to);
        }
    }
    placeNew(kAllStorage.data(), vAllStorage.data(), batchStride, headStride);
    kAll = kAllStorage.data();
    vAll = vAllStorage.data();
  }

  // Which keys each row may attend, and the additive terms (an additive mask, the bias).
  const TensorRef *mask = ctx.input(kMask);
  std::vector<int64_t> padding;
  std::optional<FloatView> additive, biasValues;
  std::vector<AddedScores> added;
  auto add = [&](const TensorRef &term, std::optional<FloatView> &view) {
    view.emplace(term);
    added.push_back({view->data(), term.shape, c.headOffset, H});
  };
  if (mask && !isFloat(mask->dtype)) {
    if (mask->dtype == DType::Bool) {
      padding.resize(B * T);
      for (int64_t i = 0; i < B * T; ++i)
        padding[i] = static_cast<const uint8_t *>(mask->data)[i] != 0;
    } else {
      DSRT_RETURN_IF_ERROR(readIndexValues(ctx, kMask, "mask", padding));
    }
  } else if (mask) {
    add(*mask, additive);
  }
  if (const TensorRef *bias = ctx.input(kBias))
    add(*bias, biasValues);
  std::vector<float> slopes;
  if (c.alibi) {
    std::vector<float> all = alibiSlopes(c.globalHeads);
    slopes.assign(all.begin() + c.headOffset, all.begin() + c.headOffset + H);
  }
  // ALiBi's key position counts the attended tokens before it (cumsum of the mask - 1).
  std::vector<float> keyPosition;
  if (c.alibi) {
    keyPosition.resize(B * T);
    for (int64_t b = 0; b < B; ++b) {
      int64_t count = 0;
      for (int64_t t = 0; t < T; ++t) {
        bool on = padding[b * T + t] != 0;
        count += on;
        keyPosition[b * T + t] = on ? float(count - 1) : 0.0f;
      }
    }
  }

  FloatOutput out(*outputs[0]);
  float *y = out.data();
  // A prompt on the fast kernels: the tiled kernel (TransformerTiledAttention.cpp). The rows
  // it leaves (queries that may attend no key) run the loop below.
  const bool tiled = tiledAttentionApplies(ctx, S);
  std::vector<uint8_t> unattended(tiled ? B * S * H : 0, 0);
  if (tiled) {
    const char *keyBase = static_cast<const char *>(kAll ? kAll : storedKeys),
               *valueBase = static_cast<const char *>(vAll ? vAll : storedValues);
    const size_t element = dtypeSize(storedType);
    std::vector<TiledSequence> sequences(B);
    for (int64_t b = 0; b < B; ++b) {
      TiledSequence &seq = sequences[b];
      seq.batch = b;
      seq.queries = S;
      seq.firstPosition = P;
      seq.keys = T;
      seq.q = &q[b * S * H * D];
      seq.y = y + b * S * H * D;
      seq.rows = [=](int64_t kh, int64_t t, bool values, const void *&rows) {
        const size_t offset = static_cast<size_t>(b * batchStride + kh * headStride + t * D) * element;
        rows = (values ? valueBase : keyBase) + offset;
        return T - t;
      };
      seq.keyAllowed = padding.empty() ? nullptr : &padding[b * T];
      seq.alibiPosition = c.alibi ? &keyPosition[b * T] : nullptr;
      seq.unattended = &unattended[b * S * H];
    }
    tiledAttention(c, storedType, sequences, slopes, added, outputs[0]->dtype);
  }
  parallelFor(B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(T), dots(ctx.fastKernels ? T : 0);
    std::vector<char> allowed(T), visible(T);
    std::vector<const float *> addedRows(added.size());
    std::vector<float> paddingSum(D), widened(D);
    int64_t paddingHead = -1, paddingSummed = 0;
    for (int64_t bh = begin; bh < end; ++bh) {
      int64_t b = bh / H, h = bh % H, kh = (c.headOffset + h) / group - c.kvHeadOffset;
      // f32 rows (kAll/vAll), or, on the fast path over a half cache, its rows as stored.
      const float *keys = kAll ? kAll + b * batchStride + kh * headStride : nullptr;
      const float *values = vAll ? vAll + b * batchStride + kh * headStride : nullptr;
      const size_t storedOffset =
          static_cast<size_t>(b * batchStride + kh * headStride) * dtypeSize(storedType);
      const void *keyRowsStored =
          keys ? static_cast<const void *>(keys)
               : static_cast<const char *>(storedKeys) + storedOffset;
      const void *valueRowsStored =
          values ? static_cast<const void *>(values)
                 : static_cast<const char *>(storedValues) + storedOffset;
      for (int64_t s = 0; s < S; ++s) {
        if (tiled && !unattended[(b * S + s) * H + h])
          continue;
        const float *query = &q[((b * S + s) * H + h) * D];
        for (size_t i = 0; i < added.size(); ++i)
          addedRows[i] = added[i].row(b, h, s);
        int64_t position = P + s;
        // A sink joins the maximum; its term exp(sink - maximum) joins the sum below.
        float maximum = initialMaximum(c, h);
        bool any = false;
        // Keys past `limit` are never attended.
        const int64_t limit = c.causal ? std::min(T, position + 1) : T;
        if (ctx.fastKernels)
          // Every query-key product in one pass over the keys (the paged kernel's products).
          fast::keyScores(query, keyRowsStored, storedType, limit, D, dots.data());
        for (int64_t t = 0; t < T; ++t) {
          bool causalOk = !c.causal || t <= position;
          // Within `window` of the query on either side (before it only, when causal).
          bool windowOk = c.window == 0 || std::abs(position - t) < c.window;
          bool paddingOk = padding.empty() || padding[b * T + t] != 0;
          visible[t] = causalOk;
          allowed[t] = causalOk && windowOk && paddingOk;
          if (!allowed[t])
            continue;  // its score is never read
          float dot = 0;
          if (ctx.fastKernels) {
            dot = dots[t];
          } else {
            for (int64_t d = 0; d < D; ++d)
              dot += query[d] * keys[t * D + d];
          }
          float score = finishScore(c, dot, c.alibi ? slopes[h] : 0.0f,
                                    c.alibi ? keyPosition[b * T + t] : 0.0f);
          for (const float *row : addedRows)
            score += row[t];
          scores[t] = score;
          if (allowed[t]) {
            any = true;
            maximum = std::max(maximum, score);
          }
        }
        float *row = y + ((b * S + s) * H + h) * D;
        std::fill(row, row + D, 0.0f);
        // The row stays zero, as sdpa's NaN guard leaves it, or as a sink leaves it: every
        // masked score lies far below the sink, whose weight is then 1 and its value none.
        if (!any && (c.unattendedZero || !c.sinks.empty()))
          continue;
        if (!any) {
          // No key to attend (a padding query): transformers' finfo.min masks leave every
          // masked score equal, so the row averages the values; GPT-Neo's doubled mask
          // leaves only the causally visible ones equal.
          // The averaged keys are a prefix [0, count) that grows with the query's position:
          // its sum is carried from one padding query of this head to the next, adding the
          // values in the same order as summing each from zero (recomputed per query over a
          // half cache, the padding rows of a left-padded batch of 16 GPT-2 prompts cost 30 s).
          const int64_t count = c.unattendedCausal && c.causal ? std::min(T, position + 1) : T;
          if (paddingHead != bh || count < paddingSummed) {
            std::fill(paddingSum.begin(), paddingSum.end(), 0.0f);
            paddingHead = bh;
            paddingSummed = 0;
          }
          for (int64_t t = paddingSummed; t < count; ++t) {
            const float *value = values ? values + t * D : widened.data();
            if (!values)
              convertFloats(storedType,
                            static_cast<const char *>(valueRowsStored) +
                                static_cast<size_t>(t * D) * dtypeSize(storedType),
                            DType::F32, widened.data(), D);
            for (int64_t d = 0; d < D; ++d)
              paddingSum[d] += value[d];
          }
          paddingSummed = count;
          for (int64_t d = 0; d < D && count > 0; ++d)
            row[d] = paddingSum[d] / float(count);
          continue;
        }
        float sum = c.sinks.empty() ? 0.0f : std::exp(c.sinks[h] - maximum);
        if (ctx.fastKernels) {
          // The exponentials vectorised (within 2 ulp of libm's).
          for (int64_t t = 0; t < T; ++t)
            scores[t] = allowed[t] ? scores[t] - maximum : 0.0f;
          fast::exponentiate(scores.data(), T);
          for (int64_t t = 0; t < T; ++t) {
            scores[t] = allowed[t] ? scores[t] : 0.0f;
            sum += scores[t];
          }
        } else {
          for (int64_t t = 0; t < T; ++t) {
            scores[t] = allowed[t] ? std::exp(scores[t] - maximum) : 0.0f;
            sum += scores[t];
          }
        }
        if (ctx.fastKernels) {
          for (int64_t t = 0; t < limit; ++t)
            scores[t] /= sum;
          fast::weightedSum(scores.data(), valueRowsStored, storedType, limit, D, row);
          continue;
        }
        for (int64_t t = 0; t < T; ++t) {
          if (scores[t] == 0.0f)
            continue;
          float weight = scores[t] / sum;
          for (int64_t d = 0; d < D; ++d)
            row[d] += weight * values[t * D + d];
        }
      }
    }
  });
  out.finish();
  if (outputs.size() == 3) {
    for (int which = 0; which < 2; ++which) {
      const float *all = which == 0 ? kAll : vAll;
      std::vector<float> present(B * KH * T * D);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < KH; ++h)
          std::copy(all + b * batchStride + h * headStride,
                    all + b * batchStride + h * headStride + T * D,
                    present.data() + (b * KH + h) * T * D);
      storeFloats(present, *outputs[1 + which]);
    }
  }
  return Status::ok();
}

} // namespace

void addAttentionKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"tfm.attention", 3, 11, 3, 1, 3, inferAttention, computeAttention});
}

} // namespace dsrt::ops
