// The tile GEMM of int8 and int4 linears (gemm_dequant.cuh: codes dequantized tile by tile
// in shared memory, mma.sync m16n8k16 with f32 accumulators; docs/cuda-backend.md, "int8
// linears", "Prefill") through LinearOps.cpp's launcher on the host emulation of CUDA
// (LinearEmulation.h's checkLinear; dsc_mma_m16n8k16's emulated warp product). Each run is
// checked twice:
// * against the double-precision reference of the dequantized formula, q · scale or
//   (code - 8) · scale, with the GEMM path's tolerances: the operands are rounded to the
//   scales' dtype (x and ŵ once each), 2e-3 · Σ|x·ŵ| for f16 (2 · 2^-11), 1e-2 for bf16
//   (2 · 2^-8), + 1e-5;
// * against today's dequantize + GEMM path on the same stored tensors
//   (DSRT_CUDA_TILE_GEMM_ROWS=0), which multiplies exactly the same rounded operands, so only
//   the f32 summation order may differ: 1e-5 · (Σ|x·ŵ| + 1).
// checkLinear also proves which path ran: gemm_dequant launched once, no GEMM and no
// dequantization on the tile path, and the other way round above the threshold.
#include "LinearEmulation.h"

#include "LinearTileGemmEmulationFamilies.inc"

#include <cstdlib>

namespace dsrt::test {
namespace {

// Sets DSRT_CUDA_TILE_GEMM_ROWS for a scope (null: unset), and restores what it was.
class TileRowsScope {
public:
  explicit TileRowsScope(const char *value) {
    if (const char *old = std::getenv(kName))
      saved_ = old, hadValue_ = true;
    if (value)
      setenv(kName, value, 1);
    else
      unsetenv(kName);
  }
  ~TileRowsScope() {
    if (hadValue_)
      setenv(kName, saved_.c_str(), 1);
    else
      unsetenv(kName);
  }

private:
  static constexpr const char *kName = "DSRT_CUDA_TILE_GEMM_ROWS";
  std::string saved_;
  bool hadValue_ = false;
};

// The tile path and the dequantize + GEMM path over the same random tensors (checkLinear
// seeds from rows, n and k), each against the double reference, then against each other.
void checkBothPaths(const LinearKernels &kernels, int64_t rows, int64_t n, double tolerance,
                    int64_t kRun = 0) {
  ASSERT_TRUE(hasTileGemm(kernels));
  LinearRun tile, dequantized;
  {
    TileRowsScope scope(nullptr);  // the default threshold, 512 rows
    checkLinear(kernels, rows, n, tolerance, kRun, 0, nullptr, false, &tile);
  }
  {
    TileRowsScope scope("0");
    checkLinear(kernels, rows, n, tolerance, kRun, 0, nullptr, false, &dequantized);
  }
  ASSERT_EQ(tile.y.size(), dequantized.y.size());
  ASSERT_FALSE(tile.y.empty());
  int bad = 0;
  for (size_t i = 0; i < tile.y.size(); ++i)
    if (!(std::fabs(double(tile.y[i]) - dequantized.y[i]) <=
          1e-5 * (tile.magnitude[i] + 1) + 1e-5) &&
        bad++ < 5)
      ADD_FAILURE() << "rows " << rows << " n " << n << " output " << i << ": tile GEMM "
                    << tile.y[i] << ", dequantize + GEMM " << dequantized.y[i];
}

// int8 per channel and in groups (16-code pieces with one scale; groups of 24, which split
// them), rows that fill no tile (9, 17, 33, 40 of 64), odd feature counts.
TEST(LinearTileGemmEmulationTest, Int8PerChannelAndGroups) {
  for (int64_t rows : {9, 17, 33, 40}) {
    checkBothPaths(t8_channel_f16::kernels(), rows, 13, 2e-3);
    checkBothPaths(t8_g32_bf16::kernels(), rows, 9, 1e-2);
  }
  checkBothPaths(t8_g24_f16::kernels(), 11, 7, 2e-3);
  checkBothPaths(t8_g24_f16::kernels(), 26, 7, 2e-3);
}

// int4 in groups of 32, 64 and 128 and one group per row, f16 and bf16 scales.
TEST(LinearTileGemmEmulationTest, Int4GroupsOf32And64And128AndPerRow) {
  for (int64_t rows : {9, 23, 40}) {
    checkBothPaths(t4_g32_f16::kernels(), rows, 13, 2e-3);
    checkBothPaths(t4_g64_bf16::kernels(), rows, 9, 1e-2);
    checkBothPaths(t4_row_bf16::kernels(), rows, 11, 1e-2);
  }
  checkBothPaths(t4_g128_f16::kernels(), 19, 7, 2e-3);
  checkBothPaths(t4_g24_f16::kernels(), 12, 5, 2e-3);
}

// More than one tile each way: 70 rows (two row tiles, the second of 6 rows) by 97 features
// (a 64-wide tile and a 33-wide one); the emulation runs 3 blocks, which stride over the 4
// tiles.
TEST(LinearTileGemmEmulationTest, SeveralTilesEachWay) {
  checkBothPaths(t8_channel_f16::kernels(), 70, 97, 2e-3);
  checkBothPaths(t4_g32_f16::kernels(), 70, 97, 2e-3);
}

// The epilogues after the tile GEMM: a gated [gate; up] pair (int8 in groups of 16; int4
// after an RMS prologue, whose second kernel writes the operand), a layer-norm prologue with a
// residual, an LM head's logit scale and cap, and the plan's f16 activations as the operand.
TEST(LinearTileGemmEmulationTest, GatedNormLogitsAndHalfInput) {
  for (int64_t rows : {10, 27}) {
    checkBothPaths(t8_gated_g16::kernels(), rows, 26, 1e-2);
    checkBothPaths(t4_gated_g32::kernels(), rows, 18, 2e-3);
    checkBothPaths(t8_layer_g32::kernels(), rows, 15, 2e-3);
    checkBothPaths(t4_head_cap::kernels(), rows, 21, 1e-2);
    checkBothPaths(t4_f16_input::kernels(), rows, 11, 2e-3);
  }
}

// Tensor-parallel ranks of uneven splits run rank 0's kernels over fewer in-features: 80 of
// 128 per channel (a half step of 32 at the end), 96 of 128 in groups of 32 (int4), and 72 of
// 96 in groups of 24, int8 and int4, which are no multiple of 16 and take the element path.
TEST(LinearTileGemmEmulationTest, UnevenTensorParallelShards) {
  checkBothPaths(t8_channel_f16::kernels(), 21, 13, 2e-3, 80);
  checkBothPaths(t4_g32_f16::kernels(), 21, 13, 2e-3, 96);
  checkBothPaths(t8_g24_f16::kernels(), 15, 7, 2e-3, 72);
  checkBothPaths(t4_g24_f16::kernels(), 15, 5, 2e-3, 72);
}

// Split-K where the tiles fill less than the emulated wave (2 SMs x 4 blocks): 36 steps of 32
// in 4 parts of 9 (one tile) or 2 of 18 (70 x 97: four tiles), 33 steps in parts of 9, 9, 9
// and 6 (k = 1040 has a half step), and a rank's 576 of 1152 inputs in 2 parts. The last part
// to arrive adds the partial products; checkLinear checks that the counters are left at 0.
TEST(LinearTileGemmEmulationTest, SplitKOverLongRows) {
  for (int64_t rows : {9, 20})
    checkBothPaths(t4_long_g32::kernels(), rows, 13, 2e-3);
  checkBothPaths(t4_long_g32::kernels(), 70, 97, 2e-3);
  checkBothPaths(t8_long_channel::kernels(), 17, 11, 1e-2);
  checkBothPaths(t4_long_g32::kernels(), 12, 13, 2e-3, 576);
}

// The threshold: up to DSRT_CUDA_TILE_GEMM_ROWS rows the tile GEMM, above it dequantize +
// GEMM (checkLinear counts the launches of each), and decode's gemv up to 8 rows either way.
TEST(LinearTileGemmEmulationTest, ThresholdChoosesThePath) {
  TileRowsScope scope("16");
  checkLinear(t4_g32_f16::kernels(), 16, 13, 2e-3);  // the tile GEMM
  checkLinear(t4_g32_f16::kernels(), 17, 13, 2e-3);  // dequantize + GEMM
  checkLinear(t8_channel_f16::kernels(), 8, 13, 1e-5);  // gemv
  EXPECT_EQ(tileGemmRowsFromEnvironment(), 16);
}

// A tile GEMM generated for other scales or groups than the step's is refused by name
// before anything runs.
TEST(LinearTileGemmEmulationTest, RefusesAMismatchedTileKernel) {
  struct Case {
    const char *constant;
    int64_t value;
    const char *expected;
  };
  const Case cases[] = {
      {"GS", 64, "the tile GEMM was generated for group size 64"},
      {"SDT", 3, "the tile GEMM was generated for other scales than f16"},
      {"WT", 8, "the tile GEMM was generated for another weight dtype than u8"},
      {"TILE_M", 128, "the tile GEMM's tile is not 64 x 64"},
  };
  for (const Case &c : cases) {
    LinearKernels kernels = t4_g32_f16::kernels();
    kernels.constants[kernels.count - 1][c.constant] = c.value;
    std::vector<uint8_t> w(4 * 64, 0x88);
    std::vector<uint16_t> scales(4 * 4, 0x3c00);
    std::vector<float> x(16 * 128, 1.0f), residual(16 * 4, 0.0f), y(16 * 4, 0.0f);
    EmulatedLinear step(kernels, "tfm.linear");
    step.inputs.push_back(DeviceTensor{DType::F32, {16, 128}, address(x.data())});
    step.inputs.push_back(DeviceTensor{DType::U8, {4, 64}, address(w.data())});
    step.inputs.push_back(std::nullopt);
    step.inputs.push_back(DeviceTensor{DType::F16, {4, 4}, address(scales.data())});
    step.inputs.push_back(DeviceTensor{DType::F32, {16, 4}, address(residual.data())});
    step.outputs.push_back(DeviceTensor{DType::F32, {16, 4}, address(y.data())});
    std::vector<GpuOpInfo> ops;
    addLinearGpuOps(ops);
    Status status = ops[0].run(step);
    ASSERT_FALSE(status.isOk()) << c.expected;
    EXPECT_NE(status.message().find(c.expected), std::string::npos) << status.message();
    for (int launches : step.launchesPerSlot)
      EXPECT_EQ(launches, 0);
  }
}

} // namespace
} // namespace dsrt::test
