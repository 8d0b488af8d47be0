// The CPU backend's other fast kernels (ops/fast) against the reference kernels: the
// activations, the norms and the attention (with its score, softmax and value-sum pieces,
// which must agree bit for bit between a decode row and a prompt tile). The fast linear
// kernels are FastLinearTest.cpp's. Each test states its tolerance. ctest runs the file again
// capped to AVX2 and to the portable kernels (the *Fast* filters in CMakeLists.txt).
#include "OpTestUtil.h"

#include "ops/ThreadPool.h"
#include "ops/fast/FastKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace dsrt::test {
namespace {

// tfm.activation and tfm.gated_act on the fast kernels (exp within 2 ulp, erf within 1.2e-7,
// vectorised) against the reference's libm: within 2e-6 of the result's magnitude plus 1e-7
// (erf's absolute error, times |x| / 2 in GELU, near x = 0), over [-12, 12], the
// saturated tails and the float extremes.
TEST(FastActivations, EqualTheReferenceKernel) {
  std::vector<float> inputs{0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, 80.0f, -80.0f, 100.0f, -100.0f};
  for (int i = -1200; i <= 1200; ++i)
    inputs.push_back(i * 0.01f + 0.003f);
  const int64_t n = static_cast<int64_t>(inputs.size());
  OwnedTensor x = f32({n}, inputs), gate = f32({n}, std::vector<float>(inputs.rbegin(), inputs.rend()));
  for (const char *kind : {"gelu_erf", "gelu_tanh", "gelu_quick", "silu", "relu", "relu2"}) {
    for (const char *op : {"tfm.activation", "tfm.gated_act"}) {
      bool gated = std::string(op) == "tfm.gated_act";
      std::vector<const OwnedTensor *> in{&x};
      if (gated)
        in.push_back(&gate);
      ops::AttrMap attrs{{"kind", ops::Attr::ofString(kind)}};
      std::vector<OwnedTensor> fast, reference;
      ASSERT_TRUE(run(op, in, fast, attrs, 1, nullptr, nullptr, true).isOk());
      ASSERT_TRUE(run(op, in, reference, attrs, 1, nullptr, nullptr, false).isOk());
      std::vector<float> got = values<float>(fast[0]), want = values<float>(reference[0]);
      for (int64_t i = 0; i < n; ++i) {
        float scale = gated ? std::fabs(inputs[n - 1 - i]) : 1.0f;
        ASSERT_NEAR(got[i], want[i], 2e-6 * std::fabs(want[i]) + 1e-7 * scale)
            << op << " " << kind << " at x = " << inputs[i];
      }
    }
  }
}

// tfm.gated_act_packed (the joined gate-up projection's [rows, 2n]) computes what
// tfm.gated_act computes from the two halves, element for element, on both kernel sets;
// an odd width is refused.
TEST(FastActivations, PackedEqualsTheTwoInputForm) {
  const int64_t rows = 3, half = 37;
  std::mt19937 rng(5);
  std::vector<float> joined = values<float>(randomF32({rows, 2 * half}, rng)), gate, up;
  for (int64_t r = 0; r < rows; ++r) {
    gate.insert(gate.end(), joined.begin() + r * 2 * half, joined.begin() + r * 2 * half + half);
    up.insert(up.end(), joined.begin() + r * 2 * half + half, joined.begin() + (r + 1) * 2 * half);
  }
  OwnedTensor x = f32({rows, 2 * half}, joined), g = f32({rows, half}, gate),
              u = f32({rows, half}, up);
  for (const char *kind : {"gelu_erf", "silu", "relu"}) {
    for (bool fastKernels : {true, false}) {
      ops::AttrMap attrs{{"kind", ops::Attr::ofString(kind)}};
      std::vector<OwnedTensor> packed, pair;
      ASSERT_TRUE(run("tfm.gated_act_packed", {&x}, packed, attrs, 1, nullptr, nullptr,
                      fastKernels).isOk());
      ASSERT_TRUE(
          run("tfm.gated_act", {&g, &u}, pair, attrs, 1, nullptr, nullptr, fastKernels).isOk());
      EXPECT_EQ(packed[0].ref().shape, (Shape{rows, half}));
      EXPECT_EQ(values<float>(packed[0]), values<float>(pair[0])) << kind << " " << fastKernels;
    }
  }
  OwnedTensor odd = f32({2, 5}, std::vector<float>(10, 1.0f));
  std::vector<OwnedTensor> out;
  Status status = run("tfm.gated_act_packed", {&odd}, out, {{"kind", ops::Attr::ofString("silu")}});
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("even last dimension"), std::string::npos) << status.message();
}

// tfm.layer_norm and tfm.rms_norm on the fast kernels (fp32, vectorised, rows over the
// pool) against the reference (fp64 sums): rows of 768 and of 37 (a vector tail), offset
// from zero so that the mean matters, with and without bias and the residual form. With
// u = 2^-24, the fp32 mean is off by at most δm = (n + 1)·u·max|x|; the sum of squares by a
// relative (n + 3)·u plus n·δm²/S (S the exact sum of squares about the mean), which moves
// 1/σ by at most half that plus 3u: ε. An output then moves by at most
// |scale|/σ·(δm + |x - mean|·(ε + 4u)) plus 2u of its magnitude and the bias's.
TEST(FastNorm, EqualsTheReferenceKernel) {
  const double u = std::ldexp(1.0, -24);
  for (int64_t n : {768, 37}) {
    for (const char *op : {"tfm.layer_norm", "tfm.rms_norm"}) {
      for (int variant = 0; variant < 3; ++variant) {  // plain, with bias, residual form
        bool rms = std::string(op) == "tfm.rms_norm";
        if (rms && variant == 1)
          continue;  // an RMS norm has no bias
        const int64_t rows = 5;
        std::mt19937 rng(static_cast<unsigned>(n + variant * 7 + (rms ? 100 : 0)));
        std::vector<float> xs = values<float>(randomF32({rows, n}, rng));
        for (int64_t i = 0; i < rows * n; ++i)
          xs[i] += 3.0f + float(i / n);  // a row mean of 3 to 7
        OwnedTensor x = f32({rows, n}, xs), scale = randomF32({n}, rng),
                    bias = randomF32({n}, rng), residual = randomF32({rows, n}, rng);
        std::vector<const OwnedTensor *> in{&x, &scale};
        if (!rms)
          in.push_back(variant == 1 ? &bias : nullptr);
        if (variant == 2)
          in.push_back(&residual);
        ops::AttrMap attrs{{"epsilon", ops::Attr::ofFloat(1e-5f)}};
        std::vector<OwnedTensor> fast, reference;
        size_t results = variant == 2 ? 2 : 1;
        Status status = run(op, in, fast, attrs, results, nullptr, nullptr, true);
        ASSERT_TRUE(status.isOk()) << op << ": " << status.message();
        status = run(op, in, reference, attrs, results, nullptr, nullptr, false);
        ASSERT_TRUE(status.isOk()) << op << ": " << status.message();
        ASSERT_EQ(fast.size(), reference.size());
        std::vector<float> source = xs;
        if (variant == 2) {
          std::vector<float> r = values<float>(residual);
          for (size_t i = 0; i < source.size(); ++i)
            source[i] += r[i];  // what both kernels normalise, rounded as they round it
          EXPECT_EQ(values<float>(fast[1]), values<float>(reference[1])) << "the sum";
        }
        std::vector<float> got = values<float>(fast[0]), want = values<float>(reference[0]);
        std::vector<float> scales = values<float>(scale), biases = values<float>(bias);
        for (int64_t r = 0; r < rows; ++r) {
          const float *row = source.data() + r * n;
          double mean = 0, maximum = 0, squares = 0;
          for (int64_t i = 0; i < n; ++i) {
            mean += rms ? 0.0 : row[i] / double(n);
            maximum = std::max(maximum, std::fabs(double(row[i])));
          }
          for (int64_t i = 0; i < n; ++i)
            squares += (row[i] - mean) * (row[i] - mean);
          double inverse = 1.0 / std::sqrt(squares / n + 1e-5);
          double deltaMean = rms ? 0.0 : (n + 1) * u * maximum;
          double epsilon = 0.5 * ((n + 3) * u + n * deltaMean * deltaMean / squares) + 3 * u;
          for (int64_t i = 0; i < n; ++i) {
            double b = variant == 1 ? std::fabs(biases[i]) : 0.0;
            double bound = std::fabs(scales[i]) * inverse *
                               (deltaMean + std::fabs(row[i] - mean) * (epsilon + 4 * u)) +
                           2 * u * (std::fabs(want[r * n + i]) + b) + 1e-30;
            ASSERT_NEAR(got[r * n + i], want[r * n + i], bound)
                << op << " n " << n << " variant " << variant << " row " << r << " i " << i;
          }
        }
      }
    }
  }
}

// tfm.attention on the fast kernels (vectorised query-key products and probability-value
// sums) against the reference: left padding, grouped heads, head_dim 40 (a vector tail),
// with rotary, ALiBi and a window. The products differ by summation order only: each score
// by at most δ = 2·D·u·scale·D·max|q|·max|k| (rotation can grow an element by √2, counted
// twice), and softmax weights that move by at most 2δ in total move an output by at most
// 2δ·max|v|. The exponentials (2 ulp each) move the normalised weights by at most 2^-21
// relative: another 2^-21·max|v|, doubled for the sum's rounding. The sum over S keys of
// weights (summing to 1) times values, in another order, moves an output by at most
// 2·S·u·max|v|.
TEST(FastAttention, EqualsTheReferenceKernel) {
  const int64_t B = 2, S = 9, H = 4, KH = 2, D = 40;
  for (int variant = 0; variant < 4; ++variant) {
    ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(H)},
                          {"num_kv_heads", ops::Attr::ofInt(KH)},
                          {"head_dim", ops::Attr::ofInt(D)},
                          {"scale", ops::Attr::ofFloat(1.0f / std::sqrt(float(D)))},
                          {"causal", ops::Attr::ofInt(1)}};
    if (variant == 1) {
      attrs["rotary_dim"] = ops::Attr::ofInt(D);
      attrs["rotary_base"] = ops::Attr::ofFloat(10000.0f);
    } else if (variant == 2) {
      attrs["alibi"] = ops::Attr::ofInt(1);
    } else if (variant == 3) {
      attrs["window"] = ops::Attr::ofInt(3);
    }
    std::mt19937 rng(variant + 11);
    OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, KH * D}, rng),
                v = randomF32({B, S, KH * D}, rng);
    std::vector<int64_t> maskValues(B * S, 1), positionValues(B * S);
    maskValues[S] = maskValues[S + 1] = 0;  // row 1: two tokens of left padding
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0, seen = 0; s < S; ++s)
        positionValues[b * S + s] = maskValues[b * S + s] ? seen++ : 1;
    OwnedTensor mask = i64({B, S}, maskValues), positions = i64({B, S}, positionValues);
    std::vector<OwnedTensor> fast, reference;
    std::vector<const OwnedTensor *> in{&q, &k, &v, &mask, nullptr, nullptr, &positions};
    ASSERT_TRUE(run("tfm.attention", in, fast, attrs, 1, nullptr, nullptr, true).isOk());
    ASSERT_TRUE(run("tfm.attention", in, reference, attrs, 1, nullptr, nullptr, false).isOk());
    auto maxAbs = [](const OwnedTensor &t) {
      double m = 0;
      for (float x : values<float>(t))
        m = std::max(m, double(std::fabs(x)));
      return m;
    };
    double delta = 2.0 * D * std::ldexp(1.0, -24) / std::sqrt(double(D)) * D * 2 * maxAbs(q) *
                   maxAbs(k);
    double bound = 2 * delta * maxAbs(v) + std::ldexp(1.0, -20) * maxAbs(v) +
                   2.0 * S * std::ldexp(1.0, -24) * maxAbs(v) + 1e-30;
    std::vector<float> got = values<float>(fast[0]), want = values<float>(reference[0]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], bound) << "variant " << variant << " element " << i;
  }
}

// The same over a half session cache (cache_dtype f16 and bf16): the fast kernels read the
// cache's rows as stored (the products and the weighted sum widen them), the reference
// widens them first; both write the new keys and values rounded, bit for bit the same, and
// both attend the same stored values, so the bound above holds (with |k| and |v| those of
// the cache, which rounding keeps within 2^-8 of the f32 ones: the bound takes 2 max|x|).
TEST(FastAttention, EqualsTheReferenceOverAHalfCache) {
  const int64_t B = 2, P = 5, S = 3, T = P + S, H = 4, KH = 2, D = 40, capacity = 12;
  for (DType cacheType : {DType::F16, DType::BF16}) {
    ops::AttrMap attrs = {{"num_heads", ops::Attr::ofInt(H)},
                          {"num_kv_heads", ops::Attr::ofInt(KH)},
                          {"head_dim", ops::Attr::ofInt(D)},
                          {"scale", ops::Attr::ofFloat(1.0f / std::sqrt(float(D)))},
                          {"causal", ops::Attr::ofInt(1)},
                          {"rotary_dim", ops::Attr::ofInt(D)},
                          {"rotary_base", ops::Attr::ofFloat(10000.0f)},
                          {"cache_layer", ops::Attr::ofInt(0)},
                          {"cache_dtype", ops::Attr::ofType(cacheType)}};
    std::mt19937 rng(cacheType == DType::F16 ? 5 : 6);
    OwnedTensor q = randomF32({B, S, H * D}, rng), k = randomF32({B, S, KH * D}, rng),
                v = randomF32({B, S, KH * D}, rng);
    // The cache's earlier rows, random and already rounded; row 1 has one token of padding.
    OwnedTensor past = randomF32({2, B, KH, capacity, D}, rng);
    std::vector<uint16_t> stored(past.storage.size() / sizeof(float));
    ASSERT_TRUE(convertFloats(DType::F32, past.storage.data(), cacheType, stored.data(),
                              static_cast<int64_t>(stored.size())));
    std::vector<int64_t> maskValues(B * T, 1), positionValues(B * S);
    maskValues[T] = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        positionValues[b * S + s] = P + s - b;
    OwnedTensor mask = i64({B, T}, maskValues), positions = i64({B, S}, positionValues);
    std::vector<const OwnedTensor *> in{&q, &k, &v, &mask, nullptr, nullptr, &positions};
    std::vector<uint16_t> caches[2] = {stored, stored};
    std::vector<OwnedTensor> outputs[2];
    const size_t half = stored.size() / 2;
    for (int fast = 0; fast < 2; ++fast) {
      ops::KvCache cache;
      cache.layers.push_back({cacheType, B, KH, capacity, D, caches[fast].data(),
                              caches[fast].data() + half});
      Status status = run("tfm.attention", in, outputs[fast], attrs, 1, &cache, nullptr, fast);
      ASSERT_TRUE(status.isOk()) << status.message();
    }
    EXPECT_EQ(caches[0], caches[1]) << "both write the new keys and values rounded alike";
    EXPECT_NE(caches[0], stored) << "the new keys and values were written";
    auto maxAbs = [](const OwnedTensor &t) {
      double m = 0;
      for (float x : values<float>(t))
        m = std::max(m, double(std::fabs(x)));
      return m;
    };
    const double qMax = maxAbs(q), kvMax = 2 * std::max({maxAbs(k), maxAbs(v), maxAbs(past)});
    double delta = 2.0 * D * std::ldexp(1.0, -24) / std::sqrt(double(D)) * D * 2 * qMax * kvMax;
    double bound = 2 * delta * kvMax + std::ldexp(1.0, -20) * kvMax +
                   2.0 * T * std::ldexp(1.0, -24) * kvMax + 1e-30;
    std::vector<float> got = values<float>(outputs[1][0]), want = values<float>(outputs[0][0]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], bound) << dtypeName(cacheType) << " element " << i;
  }
}

uint32_t bitsOf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// The attention's one score arithmetic (DotKernels.h's keyScoresBy): a decode row's scores
// (keyScores, which reduces sixteen keys at once on AVX-512) and a prompt tile's (scoreTile,
// the queries in the lanes) must agree bit for bit, or a request's tokens would depend on how
// the engine cut its prompt into steps. Keys as stored (f32, f16, bf16) against the same
// keys widened; widths with and without a scalar tail; runs of keys with and without a whole
// sixteen; 16 and 48 queries; one key all zeros against negative queries (the sum's -0 is
// +0). Both are also within the f32 bound of the float64 dot: D·2^-24·Σ|q·k|.
// ops::fast::addTo (the linear epilogue's bias and residual) is each sum rounded once, in
// the scalar loops' order: y + x, and (y + x) + z, equal bit for bit at every length around
// the vectors' widths, the tail included, leaving what follows y alone.
TEST(FastLinearKernels, AddToEqualsTheScalarSumsBitForBit) {
  std::mt19937 random(5);
  std::uniform_real_distribution<float> value(-1e3f, 1e3f);
  for (bool second : {false, true})
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 31, 33, 100, 768}) {
      std::vector<float> y(static_cast<size_t>(n + 1)), x(static_cast<size_t>(n)),
          z(static_cast<size_t>(n));
      for (float &v : y)
        v = value(random);
      for (float &v : x)
        v = value(random) * 1e-3f;  // sums that round
      for (float &v : z)
        v = value(random);
      std::vector<float> expected(y);
      for (int64_t i = 0; i < n; ++i)
        expected[i] = second ? (y[i] + x[i]) + z[i] : y[i] + x[i];
      if (second)
        ops::fast::addTo(y.data(), x.data(), z.data(), n);
      else
        ops::fast::addTo(y.data(), x.data(), n);
      for (int64_t i = 0; i <= n; ++i)
        ASSERT_EQ(std::memcmp(&y[i], &expected[i], sizeof(float)), 0)
            << (second ? "y + x + z" : "y + x") << ", n " << n << ", element " << i << ": "
            << y[i] << " vs " << expected[i];
    }
}

TEST(FastLinearKernels, PromptTileScoresEqualDecodeRowScoresBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  int compared = 0;
  for (DType keyType : {DType::F32, DType::F16, DType::BF16})
    for (int64_t width : {64, 128, 80, 96, 72, 8, 200})
      for (int64_t count : {1, 15, 16, 17, 40})
        for (int64_t queries : {16, 48}) {
          std::vector<float> keyValues(static_cast<size_t>(count * width));
          for (float &v : keyValues)
            v = normal(rng);
          std::fill(keyValues.begin(), keyValues.begin() + width, 0.0f);
          std::vector<uint8_t> keys(static_cast<size_t>(count * width) * dtypeSize(keyType));
          ASSERT_TRUE(convertFloats(DType::F32, keyValues.data(), keyType, keys.data(),
                                    count * width));
          std::vector<float> widened(keyValues.size());
          ASSERT_TRUE(convertFloats(keyType, keys.data(), DType::F32, widened.data(),
                                    count * width));
          std::vector<float> queryRows(static_cast<size_t>(queries * width)),
              queriesT(queryRows.size());
          for (float &v : queryRows)
            v = -std::fabs(normal(rng));
          for (int64_t r = 0; r < queries; ++r)
            for (int64_t d = 0; d < width; ++d)
              queriesT[d * queries + r] = queryRows[r * width + d];
          std::vector<float> tile(static_cast<size_t>(count * queries), 1.0f);
          ops::fast::scoreTile(widened.data(), count, width, queriesT.data(), queries,
                               tile.data());
          std::vector<float> row(static_cast<size_t>(count), 1.0f);
          for (int64_t r = 0; r < queries; ++r) {
            const float *query = queryRows.data() + r * width;
            ops::fast::keyScores(query, keys.data(), keyType, count, width, row.data());
            for (int64_t t = 0; t < count; ++t) {
              ASSERT_EQ(bitsOf(tile[t * queries + r]), bitsOf(row[t]))
                  << dtypeName(keyType) << " width " << width << " key " << t << " of "
                  << count << ", query " << r << ": " << tile[t * queries + r] << " against "
                  << row[t];
              double exact = 0, magnitude = 0;
              for (int64_t d = 0; d < width; ++d) {
                exact += double(query[d]) * widened[t * width + d];
                magnitude += std::fabs(double(query[d]) * widened[t * width + d]);
              }
              ASSERT_NEAR(row[t], exact, double(width) * std::ldexp(1.0, -24) * magnitude)
                  << dtypeName(keyType) << " width " << width << " key " << t;
              ++compared;
            }
          }
        }
  EXPECT_GT(compared, 0);
}

// The prompt tiles' softmax (columnMaxima, softmaxColumns, a row per lane) against a decode
// row's steps (TransformerPagedAttention.cpp: std::max from the initial maximum, s - max,
// exponentiate over the row's range, the sum in key order from the initial sum, each weight
// divided by it), bit for bit: rows of 1 to 70 keys (exponentiate's tail at every offset),
// masked keys (-inf) in the tile, an initial maximum and sum (a sink's) in some rows.
TEST(FastLinearKernels, PromptTileSoftmaxEqualsDecodeRowSoftmaxBitForBit) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal;
  const float negativeInfinity = -std::numeric_limits<float>::infinity();
  const int64_t ld = 32;
  int compared = 0;
  for (int64_t keys : {1, 7, 16, 33, 70}) {
    std::vector<float> scores(static_cast<size_t>(keys * ld));
    for (float &v : scores)
      v = 4.0f * normal(rng);
    // Row r sees keys [begin, end): the others are masked.
    std::vector<int64_t> begin(ld), end(ld);
    std::vector<float> maximum(ld, negativeInfinity), sum(ld, 0.0f);
    for (int64_t r = 0; r < ld; ++r) {
      begin[r] = static_cast<int64_t>(rng() % keys);
      end[r] = begin[r] + 1 + static_cast<int64_t>(rng() % (keys - begin[r]));
      for (int64_t j = 0; j < keys; ++j)
        if (j < begin[r] || j >= end[r])
          scores[j * ld + r] = negativeInfinity;
      if (r % 3 == 0)
        maximum[r] = normal(rng);
    }
    const std::vector<float> initialMaximum = maximum;
    std::vector<float> tile = scores;
    ops::fast::columnMaxima(tile.data(), keys, ld, maximum.data());
    for (int64_t r = 0; r < ld; r += 3)
      sum[r] = std::exp(initialMaximum[r] - maximum[r]);
    const std::vector<float> initialSum = sum;
    ops::fast::softmaxColumns(tile.data(), keys, ld, maximum.data(), sum.data());
    for (int64_t r = 0; r < ld; ++r) {
      std::vector<float> row;
      float top = initialMaximum[r];
      for (int64_t j = begin[r]; j < end[r]; ++j) {
        row.push_back(scores[j * ld + r]);
        top = std::max(top, row.back());
      }
      ASSERT_EQ(bitsOf(maximum[r]), bitsOf(top)) << keys << " keys, row " << r;
      for (float &v : row)
        v -= top;
      ops::fast::exponentiate(row.data(), static_cast<int64_t>(row.size()));
      float total = initialSum[r];
      for (float v : row)
        total += v;
      ASSERT_EQ(bitsOf(sum[r]), bitsOf(total)) << keys << " keys, row " << r;
      for (int64_t j = 0; j < keys; ++j) {
        const bool seen = j >= begin[r] && j < end[r];
        const float want = seen ? row[j - begin[r]] / total : 0.0f;
        ASSERT_EQ(bitsOf(tile[j * ld + r]), bitsOf(want))
            << keys << " keys, row " << r << ", key " << j << ": " << tile[j * ld + r]
            << " against " << want;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0);
}

// weightedSumHeads (a paged block's value slices of every head in one call, two heads' chains
// interleaved) gives each head weightedSum's bits, continuing from out's values: stored f32,
// f16 and bf16; widths of whole 64-float blocks (paired) and others (head by head); odd and
// even head counts.
TEST(FastLinearKernels, HeadsValueSumsAreEachHeadsBitForBit) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  int compared = 0;
  for (DType stored : {DType::F32, DType::F16, DType::BF16})
    for (int64_t width : {64, 128, 40, 80})
      for (int64_t heads : {1, 2, 3, 5})
        for (int64_t count : {1, 7, 16}) {
          const size_t rowElements = static_cast<size_t>(count * width);
          std::vector<std::vector<float>> weights(heads), start(heads);
          std::vector<std::vector<uint8_t>> rows(heads);
          std::vector<const float *> weightPtrs;
          std::vector<const void *> rowPtrs;
          for (int64_t h = 0; h < heads; ++h) {
            weights[h].resize(static_cast<size_t>(count));
            for (float &v : weights[h])
              v = std::fabs(normal(rng));
            std::vector<float> wide(rowElements);
            for (float &v : wide)
              v = normal(rng);
            rows[h].resize(rowElements * dtypeSize(stored));
            ASSERT_TRUE(convertFloats(DType::F32, wide.data(), stored, rows[h].data(),
                                      static_cast<int64_t>(rowElements)));
            start[h].resize(static_cast<size_t>(width));
            for (float &v : start[h])
              v = normal(rng);
            weightPtrs.push_back(weights[h].data());
            rowPtrs.push_back(rows[h].data());
          }
          std::vector<std::vector<float>> together = start, alone = start;
          std::vector<float *> outPtrs;
          for (auto &out : together)
            outPtrs.push_back(out.data());
          ops::fast::weightedSumHeads(weightPtrs.data(), rowPtrs.data(), stored, heads, count,
                                      width, outPtrs.data());
          for (int64_t h = 0; h < heads; ++h) {
            ops::fast::weightedSum(weights[h].data(), rows[h].data(), stored, count, width,
                                   alone[h].data(), true);
            for (int64_t d = 0; d < width; ++d) {
              ASSERT_EQ(bitsOf(together[h][d]), bitsOf(alone[h][d]))
                  << dtypeName(stored) << " width " << width << " heads " << heads << " head "
                  << h << " count " << count << " element " << d;
              ++compared;
            }
          }
        }
  EXPECT_GT(compared, 0);
}

// A decode row's weights times the values over a paged cache's blocks (weightedSum run after
// run, accumulating) equal one chain over all the keys (a contiguous cache's one call) and a
// prompt tile's multiplyTile (the weights read transposed, accumulating tile after tile), bit
// for bit; widths with and without a scalar tail, runs of 1, 13 and 16 keys.
TEST(FastLinearKernels, ValueSumsAreOneChainWhateverTheRuns) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  int compared = 0;
  for (int64_t width : {64, 72, 8, 200})
    for (int64_t run : {1, 13, 16}) {
      const int64_t count = 70, ld = 16;
      std::vector<float> weights(static_cast<size_t>(count)), values(count * width);
      for (float &v : weights)
        v = std::fabs(normal(rng));
      for (float &v : values)
        v = normal(rng);
      std::vector<float> whole(static_cast<size_t>(width)), runs(whole.size(), 0.0f);
      ops::fast::weightedSum(weights.data(), values.data(), count, width, whole.data());
      for (int64_t t = 0; t < count; t += run)
        ops::fast::weightedSum(weights.data() + t, values.data() + t * width,
                               std::min(run, count - t), width, runs.data(), true);
      // The weights as a [keys, ld] tile whose lane 3 is this row.
      std::vector<float> tile(static_cast<size_t>(count * ld), 0.5f);
      for (int64_t t = 0; t < count; ++t)
        tile[t * ld + 3] = weights[t];
      std::vector<float> tiled(static_cast<size_t>(4 * width));
      for (int64_t t0 = 0; t0 < count; t0 += 64)
        ops::fast::multiplyTile(tile.data() + t0 * ld, 1, ld, values.data() + t0 * width, width,
                                4, std::min<int64_t>(64, count - t0), width, tiled.data(), width,
                                t0 > 0);
      for (int64_t d = 0; d < width; ++d) {
        ASSERT_EQ(bitsOf(runs[d]), bitsOf(whole[d])) << "width " << width << " runs " << run;
        ASSERT_EQ(bitsOf(tiled[3 * width + d]), bitsOf(whole[d]))
            << "width " << width << " element " << d;
        ++compared;
      }
    }
  EXPECT_GT(compared, 0);
}

// The decode attention reads an int8 KV cache's codes and scales as they are
// (keyScoresInt8, weightedSumInt8); the prompt chunks' kernel reads the same rows widened to
// f32 (widenRows: q * scale). A request's tokens must not depend on which read its cached
// positions (a preempted request recomputes its generated tokens as a prompt), so both must
// give the widened rows' results bit for bit, on every ISA (ctest's -avx2 and -portable).
TEST(FastLinearKernels, Int8KvReadsEqualTheWidenedRowsBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> code(-127, 127);
  int compared = 0;
  for (int64_t width : {64, 128, 80, 96, 16, 48})  // whole vectors (FastKernels.h)
    for (int64_t count : {1, 15, 16, 17, 40}) {
      const int64_t groups = width % 32 == 0 ? width / 32 : 1;
      std::vector<int8_t> codes(static_cast<size_t>(count * width));
      std::vector<float> scales(static_cast<size_t>(count * groups)), query(width),
          weights(static_cast<size_t>(count));
      for (int8_t &q : codes)
        q = static_cast<int8_t>(code(rng));
      for (float &v : scales)
        v = std::fabs(normal(rng)) / 127.0f;
      scales[0] = 0.0f;  // a row of zeros quantizes to scale 0
      for (float &v : query)
        v = normal(rng);
      for (float &v : weights)
        v = std::fabs(normal(rng));
      ops::fast::LinearWeights asRows;
      asRows.dtype = DType::I8;
      asRows.data = codes.data();
      asRows.out = count;
      asRows.in = width;
      asRows.scales = scales.data();
      asRows.scaleType = DType::F32;
      asRows.groups = groups;
      std::vector<float> widened(static_cast<size_t>(count * width));
      ops::fast::widenRows(asRows, 0, count, widened.data());
      std::vector<float> wantScores(static_cast<size_t>(count)), gotScores(wantScores.size(), 1);
      ops::fast::keyScores(query.data(), widened.data(), DType::F32, count, width,
                           wantScores.data());
      ops::fast::keyScoresInt8(query.data(), codes.data(), scales.data(), groups, count, width,
                               gotScores.data());
      std::vector<float> wantSum(static_cast<size_t>(width)), gotSum(wantSum.size(), 1);
      ops::fast::weightedSum(weights.data(), widened.data(), count, width, wantSum.data());
      ops::fast::weightedSumInt8(weights.data(), codes.data(), scales.data(), groups, count,
                                 width, gotSum.data());
      for (int64_t t = 0; t < count; ++t, ++compared)
        ASSERT_EQ(std::memcmp(&gotScores[t], &wantScores[t], sizeof(float)), 0)
            << "width " << width << " key " << t << " of " << count << ": " << gotScores[t]
            << " against " << wantScores[t];
      for (int64_t d = 0; d < width; ++d, ++compared)
        ASSERT_EQ(std::memcmp(&gotSum[d], &wantSum[d], sizeof(float)), 0)
            << "width " << width << " value " << d << " over " << count << " rows: "
            << gotSum[d] << " against " << wantSum[d];
    }
  EXPECT_GT(compared, 0);
}

} // namespace
} // namespace dsrt::test
