// The int8-activation kernels (DotVnni.cpp for int8 weights, DotInt4Vnni.cpp for int4) against
// their own arithmetic done exactly: x quantized per block of 32 as they quantize it (scale
// max|x| / 127, rounded to nearest even), then the products of the quantized x and the
// weights summed in double. What is left between them is only the f32 sums' rounding, within
// 2 (in + 2) u sum|terms| (u = 2^-24). FastLinearTest's bound (half a quantization step of x
// per input) would not see a systematic error of one code in 128, say a wrong offset of the
// flipped int8 weights or of the int4 codes; this does.
#include "OpTestUtil.h"

#include "ops/fast/FastKernels.h"
#include "ops/fast/QuantizedActivations.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>

namespace dsrt::test {
namespace {

// x as the kernels quantize it: value and scale per input.
std::vector<double> quantizedLikeTheKernels(const float *x, int64_t in) {
  std::vector<double> out(static_cast<size_t>(in));
  for (int64_t b = 0; b < in; b += 32) {
    float maximum = 0;
    for (int64_t k = b; k < b + 32; ++k)
      maximum = std::max(maximum, std::fabs(x[k]));
    const float scale = maximum / 127.0f;
    // A factor that overflows (a block below 127 / FLT_MAX) quantizes to zeros.
    float inverse = maximum > 0 ? 127.0f / maximum : 0.0f;
    if (!(inverse <= FLT_MAX))
      inverse = 0.0f;
    for (int64_t k = b; k < b + 32; ++k)
      out[static_cast<size_t>(k)] = double(std::nearbyint(x[k] * inverse)) * double(scale);
  }
  return out;
}

// The product y = x w^T of `rows` rows: by default fast::linear, which picks the kernel.
using Product = std::function<void(const ops::fast::LinearWeights &, const float *x,
                                   int64_t rows, float *y)>;

void checkAgainstExactQuantization(DType dtype, int64_t rows, int64_t in, int64_t out,
                                   int64_t groups, DType scaleType, bool int8Activations,
                                   const Product &product = nullptr) {
  const std::string name = std::string(dtype == DType::U8 ? "int4" : "int8") + " rows " +
                           std::to_string(rows) + " in " + std::to_string(in) + " groups " +
                           std::to_string(groups) + " scales " + dtypeName(scaleType);
  std::mt19937 rng(static_cast<unsigned>(rows * 7 + in + groups));
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal;
  const int64_t rowBytes = dtype == DType::U8 ? in / 2 : in;
  std::vector<uint8_t> stored(static_cast<size_t>(out * rowBytes));
  for (uint8_t &b : stored)
    b = static_cast<uint8_t>(byte(rng));
  std::vector<float> scales(static_cast<size_t>(out * groups));
  for (float &s : scales)
    s = 0.01f + 0.01f * std::fabs(normal(rng));
  std::vector<uint16_t> narrow(scales.size());
  if (scaleType != DType::F32) {
    convertFloats(DType::F32, scales.data(), scaleType, narrow.data(), out * groups);
    convertFloats(scaleType, narrow.data(), DType::F32, scales.data(), out * groups);
  }
  ops::fast::LinearWeights w;
  w.dtype = dtype;
  w.data = stored.data();
  w.out = out;
  w.in = in;
  w.groups = groups;
  w.int8Activations = int8Activations;
  w.scaleType = scaleType;
  w.scales = scaleType == DType::F32 ? static_cast<const void *>(scales.data()) : narrow.data();
  std::vector<float> x(static_cast<size_t>(rows * in)), y(static_cast<size_t>(rows * out));
  for (float &v : x)
    v = normal(rng);
  if (product)
    product(w, x.data(), rows, y.data());
  else
    ops::fast::linear(x.data(), rows, w, y.data(), [](int64_t, int64_t) {});
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<double> xq = quantizedLikeTheKernels(x.data() + r * in, in);
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < in; ++k) {
        const uint8_t *row = stored.data() + o * rowBytes;
        const int q = dtype == DType::U8 ? ((k % 2 == 0 ? row[k / 2] & 0xF : row[k / 2] >> 4) - 8)
                                         : static_cast<int8_t>(row[k]);
        const double term = xq[static_cast<size_t>(k)] * q * scales[o * groups + k / (in / groups)];
        sum += term;
        magnitude += std::fabs(term);
      }
      ASSERT_NEAR(y[r * out + o], sum, 2.0 * (in + 2) * std::ldexp(1.0, -24) * magnitude + 1e-30)
          << name << ": row " << r << " feature " << o;
    }
  }
}

TEST(QuantizedActivations, KernelsComputeTheirQuantizationExactly) {
  int checked = 0;
  for (DType scaleType : {DType::F32, DType::F16, DType::BF16})
    for (int64_t rows : {1, 2, 3, 5, 33})
      for (auto [in, groups] : {std::pair<int64_t, int64_t>{256, 1}, {256, 4}, {768, 6},
                                {224, 7}, {256, 2}, {256, 8}, {224, 1}, {96, 1},
                                {32, 1}}) {
        // int8 weights as --dtype int8 makes them, and as an int4 plan's LM head (asking
        // for int8 activations; groups of 32 included).
        for (bool asked : {false, true}) {
          ops::fast::LinearWeights shape;
          shape.dtype = DType::I8;
          shape.in = in;
          shape.groups = groups;
          shape.int8Activations = asked;
          if (ops::fast::int8QuantizesActivations(shape, rows)) {
            checkAgainstExactQuantization(DType::I8, rows, in, 37, groups, scaleType, asked);
            ++checked;
          }
        }
        if (ops::fast::int4QuantizesActivations(in / groups, rows)) {
          checkAgainstExactQuantization(DType::U8, rows, in, 37, groups, scaleType, false);
          ++checked;
        }
      }
  if (checked == 0)
    GTEST_SKIP() << "no int8-activation kernel here (no AVX-512 VNNI, or turned off)";
}

// A product of many rows from x packed in tiles (Linear.cpp takes one from 8 rows of x),
// called directly: int8 weights and int4 ones (unpacked to int8 rows), row tiles whole and
// partial, one and two of them at a time, panels of 16 and 32 outputs, ranges of 1 to 5
// panels, groups of one block and of several, every scale dtype, rows of 1 to 24 blocks.
using TiledGemm = void (*)(const ops::fast::Int8AmxOperands &, const ops::fast::LinearWeights &,
                           int64_t, int64_t, float *, int64_t, int8_t *);
void checkTiledProduct(TiledGemm gemm) {
  const Product tiled = [gemm](const ops::fast::LinearWeights &w, const float *x, int64_t rows,
                               float *y) {
    ops::fast::Int8Activations quantized;
    ops::fast::quantizeInt8Activations(x, rows, w, quantized);
    ops::fast::Int8AmxPacked packed;
    ops::fast::packInt8ActivationsForAmx(quantized, w.in, packed);
    // As Linear.cpp gives it: on a cache line, 32 (AMX) or 48 (VNNI) weight rows.
    std::vector<int8_t> storage(static_cast<size_t>(48 * w.in + 64));
    int8_t *scratch = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
    // Two ranges, as two threads would take them: [0, 32) and [32, 48).
    gemm(packed.operands, w, 0, 32, y, w.out, scratch);
    gemm(packed.operands, w, 32, w.out, y, w.out, scratch);
  };
  for (DType dtype : {DType::I8, DType::U8})
    for (DType scaleType : {DType::F32, DType::F16, DType::BF16})
      for (int64_t rows : {1, 8, 16, 17, 33, 70})
        // Rows of 1, 2, 3, 5, 7, 8 and 24 blocks: the AMX kernel keeps four blocks' products
        // in flight, and each count leaves its loop at another of the four.
        for (auto [in, groups] : {std::pair<int64_t, int64_t>{256, 1}, {256, 8}, {768, 6},
                                  {224, 7}, {32, 1}, {64, 2}, {96, 1}, {160, 5}}) {
          ops::fast::LinearWeights shape;
          shape.dtype = dtype;
          shape.in = in;
          shape.groups = groups;
          ASSERT_TRUE(ops::fast::gemmInt8AmxTakes(shape));
          checkAgainstExactQuantization(dtype, rows, in, 48, groups, scaleType, true, tiled);
          // 112 outputs: the second range holds 5 panels, so one call unpacks int4 rows
          // several times into the same scratch, the last time a lone panel of 16.
          if (rows == 17 || rows == 33)
            checkAgainstExactQuantization(dtype, rows, in, 112, groups, scaleType, true, tiled);
        }
}

TEST(QuantizedActivations, AmxInt8ComputesTheQuantizationExactly) {
  if (!ops::fast::int8AmxAvailable())
    GTEST_SKIP() << "no AMX-INT8 here";
  checkTiledProduct(ops::fast::gemmInt8Amx);
}

// The same x tiles through AVX-512 VNNI (GemmInt8Vnni.cpp), which CPUs without AMX take.
TEST(QuantizedActivations, VnniTilesComputeTheQuantizationExactly) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw"))
    GTEST_SKIP() << "no AVX-512 VNNI here";
  checkTiledProduct(ops::fast::gemmInt8Vnni);
}

// Linear.cpp quantizes a product's x straight into its tiles, sixteen rows at a time
// (quantizeInt8Tiles); the dot kernels quantize it row by row (quantizeInt8ActivationRows).
// A row's products agree between them, whatever its batch, only if both give the same codes,
// scales and surpluses bit for bit: here against the rows packed one by one
// (packInt8ActivationsForAmx), with blocks of zeros, of one large value, of subnormals and
// of ties, whole and partial row tiles, and tiles quantized in two ranges.
TEST(QuantizedActivations, TilesQuantizeAsRowsDo) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw"))
    GTEST_SKIP() << "no AVX-512 VNNI here";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int64_t rows : {1, 5, 16, 17, 40})
    for (int64_t in : {32, 64, 96, 800}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " in " + std::to_string(in));
      std::vector<float> x(static_cast<size_t>(rows * in));
      for (float &v : x)
        v = normal(rng);
      for (int64_t r = 0; r < rows; ++r) {
        float *row = x.data() + r * in;
        const int64_t b = (r % (in / 32)) * 32;  // a special block in each row
        switch (r % 5) {
        case 0: std::fill(row + b, row + b + 32, 0.0f); break;
        case 1: row[b + 7] = 3e4f; break;
        case 2: for (int64_t k = b; k < b + 32; ++k) row[k] *= 1e-40f; break;
        case 3:  // x * 127 / max lands halfway between codes: rounding to even decides
          for (int64_t k = b; k < b + 32; ++k)
            row[k] = static_cast<float>((k - b) % 8) + 0.5f;
          row[b] = -127.0f;
          break;
        default: break;
        }
      }
      ops::fast::LinearWeights shape;
      shape.dtype = DType::I8;
      shape.in = in;
      ops::fast::Int8Activations quantized;
      ops::fast::quantizeInt8Activations(x.data(), rows, shape, quantized);
      ops::fast::Int8AmxPacked byRows, byTiles;
      ops::fast::packInt8ActivationsForAmx(quantized, in, byRows);
      ops::fast::prepareInt8AmxPacking(rows, in, byTiles);
      const int64_t tiles = byTiles.operands.paddedRows / 16, split = tiles / 2;
      ops::fast::quantizeInt8Tiles(x.data(), rows, in, 0, split, byTiles);
      ops::fast::quantizeInt8Tiles(x.data(), rows, in, split, tiles, byTiles);
      ASSERT_EQ(byTiles.operands.paddedRows, byRows.operands.paddedRows);
      const int64_t bytes = byRows.operands.paddedRows * in;
      EXPECT_TRUE(std::equal(byRows.operands.tiles, byRows.operands.tiles + bytes,
                             byTiles.operands.tiles));
      EXPECT_EQ(byTiles.surpluses, byRows.surpluses);
      ASSERT_EQ(byTiles.scales.size(), byRows.scales.size());
      for (size_t i = 0; i < byRows.scales.size(); ++i)
        ASSERT_EQ(std::memcmp(&byTiles.scales[i], &byRows.scales[i], sizeof(float)), 0)
            << "scale " << i << ": " << byTiles.scales[i] << " against " << byRows.scales[i];
    }
}

// The VNNI tiles take lanes of 16 outputs for products of more than 16 rows and lanes of 16
// rows up to 16: each row's result must not depend on which, bit for bit (the engine's batch
// invariance: a request's rows share steps with any number of others).
TEST(QuantizedActivations, VnniTilesGiveEachRowItsResultAlone) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw"))
    GTEST_SKIP() << "no AVX-512 VNNI here";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> byte(0, 255);
  for (DType dtype : {DType::I8, DType::U8})
    for (auto [in, groups] : {std::pair<int64_t, int64_t>{256, 1}, {768, 6}, {96, 1}}) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " in " + std::to_string(in));
      const int64_t rows = 37, out = 48;
      std::vector<uint8_t> stored(static_cast<size_t>(out * (dtype == DType::U8 ? in / 2 : in)));
      for (uint8_t &b : stored)
        b = static_cast<uint8_t>(byte(rng));
      std::vector<float> scales(static_cast<size_t>(out * groups)), x(static_cast<size_t>(rows * in));
      for (float &s : scales)
        s = 0.01f + 0.01f * std::fabs(normal(rng));
      for (float &v : x)
        v = normal(rng);
      ops::fast::LinearWeights w;
      w.dtype = dtype;
      w.data = stored.data();
      w.out = out;
      w.in = in;
      w.scales = scales.data();
      w.groups = groups;
      std::vector<int8_t> storage(static_cast<size_t>(48 * in + 64));
      int8_t *scratch = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
      auto product = [&](const float *rowsOfX, int64_t count, float *y) {
        ops::fast::Int8AmxPacked packed;
        ops::fast::prepareInt8AmxPacking(count, in, packed);
        ops::fast::quantizeInt8Tiles(rowsOfX, count, in, 0, packed.operands.paddedRows / 16,
                                     packed);
        ops::fast::gemmInt8Vnni(packed.operands, w, 0, out, y, out, scratch);
      };
      std::vector<float> together(static_cast<size_t>(rows * out)), alone(static_cast<size_t>(out));
      product(x.data(), rows, together.data());
      for (int64_t r = 0; r < rows; ++r) {
        product(x.data() + r * in, 1, alone.data());
        ASSERT_EQ(std::memcmp(alone.data(), together.data() + r * out, out * sizeof(float)), 0)
            << "row " << r;
      }
    }
}

} // namespace
} // namespace dsrt::test
