// The launcher's tile-GEMM path (LinearOps.cpp: gemm_dequant, the last kernel of int8 and
// int4 steps with f16/bf16 scales) against the recording StepContext: what it launches with
// which parameters for 9 to DSRT_CUDA_TILE_GEMM_ROWS rows, the scratch it asks for (none for
// the weight), the residual's three cases, the threshold and its override, and that plans
// without the slot keep dequantize + cuBLASLt. The arithmetic is LinearTileGemmEmulationTest's.
#include "LinearRecording.h"

#include <cstdlib>

namespace dsrt::test {
namespace {

// int8Step with the tile GEMM as LinearRules.cpp appends it for f16/bf16 scales.
RecordingContext tileStep(int64_t rows, int64_t n, int64_t k, int64_t groups, DType scaleType,
                          bool bias, bool residual, int64_t activation) {
  RecordingContext context = int8Step(rows, n, k, groups, scaleType, bias, residual, activation);
  context.kernels.push_back({{"WT", 8},
                             {"SDT", static_cast<int64_t>(scaleType)},
                             {"GS", groups == 1 ? 0 : k / groups},
                             {"TILE_M", 64},
                             {"TILE_N", 64}});
  context.paramSizes.push_back(
      {kPtr, kPtr, kPtr, kPtr, kPtr, kInt, kInt, kInt, kInt, kPtr, kPtr, kInt});
  return context;
}

// Unsets DSRT_CUDA_TILE_GEMM_ROWS, or sets it, for a scope.
struct TileRows {
  explicit TileRows(const char *value) {
    if (value)
      setenv("DSRT_CUDA_TILE_GEMM_ROWS", value, 1);
    else
      unsetenv("DSRT_CUDA_TILE_GEMM_ROWS");
  }
  ~TileRows() { unsetenv("DSRT_CUDA_TILE_GEMM_ROWS"); }
};

TEST(LinearTileGemmOpsTest, PrefillConvertsThenTileGemmThenEpilogue) {
  TileRows rows(nullptr);
  RecordingContext context = tileStep(40, 256, 128, 4, DType::BF16, true, false, 0);
  context.residentBlocks = 5;
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_TRUE(context.gemms.empty());
  // The activations in bf16, and nothing for the weight.
  ASSERT_EQ(context.scratchRequests, (std::vector<size_t>{40 * 128 * 2}));
  ASSERT_EQ(context.launches.size(), 3u);
  const Launch &convert = context.launches[0];
  EXPECT_EQ(convert.slot, 3u);
  const DevicePtr converted = convert.args[1];
  const Launch &tile = context.launches[1];
  EXPECT_EQ(tile.slot, 4u);
  // x, q, scales, y, no addend, m, n, k, ldc, no split-K (4 steps of 32); 1 x 4 tiles of
  // 64 x 64, 128 threads.
  EXPECT_EQ(tile.args, (std::vector<uint64_t>{converted, kW, kScales, kY, 0, 40, 256, 128, 256,
                                              0, 0, 1}));
  EXPECT_EQ(tile.grid.x, 4u);
  EXPECT_EQ(tile.block.x, 128u);
  EXPECT_EQ(tile.sharedBytes, 0u);
  EXPECT_EQ(context.launches[2].slot, 1u);
  EXPECT_EQ(context.launches[2].args, (std::vector<uint64_t>{kY, kBias, 0, kY, 40 * 256, 256}));
}

// The tiles a wave holds: blocks stride over the rest.
TEST(LinearTileGemmOpsTest, GridIsAtMostOneWave) {
  TileRows rows(nullptr);
  RecordingContext context = tileStep(500, 64 * 400, 64, 1, DType::F16, false, false, -1);
  context.residentBlocks = 2;
  ASSERT_TRUE(run(context).isOk());
  ASSERT_EQ(context.launches.size(), 2u);  // the conversion, the tile GEMM
  EXPECT_EQ(context.launches[1].grid.x, 132u * 2);  // of 8 x 400 tiles
  ASSERT_FALSE(context.occupancyQueries.empty());
  EXPECT_EQ(context.occupancyQueries.back(), std::make_tuple(size_t(4), 128u, 0u));
}

TEST(LinearTileGemmOpsTest, TheResidualInEachCase) {
  TileRows rows(nullptr);
  // Elsewhere, no activation: the tile GEMM adds it (its addend), no epilogue.
  RecordingContext plain = tileStep(20, 64, 64, 1, DType::F16, false, true, -1);
  ASSERT_TRUE(run(plain).isOk());
  ASSERT_EQ(plain.launches.size(), 2u);
  EXPECT_EQ(plain.launches[1].args,
            (std::vector<uint64_t>{plain.launches[0].args[1], kW, kScales, kY, kResidual, 20, 64,
                                   64, 64, 0, 0, 1}));

  // The output itself, no activation: the addend is the output (read, then written, by one
  // thread); a bias still takes the epilogue, without the residual.
  RecordingContext inPlace = tileStep(20, 64, 64, 1, DType::F16, true, true, -1);
  inPlace.inputs[4]->data = kY;
  ASSERT_TRUE(run(inPlace).isOk());
  ASSERT_EQ(inPlace.launches.size(), 3u);
  EXPECT_EQ(inPlace.launches[1].args[3], kY);
  EXPECT_EQ(inPlace.launches[1].args[4], kY);
  EXPECT_EQ(inPlace.launches[2].args, (std::vector<uint64_t>{kY, kBias, 0, kY, 20 * 64, 64}));

  // The output itself after an activation: the product into scratch, the epilogue reads the
  // residual from the output.
  RecordingContext activated = tileStep(20, 64, 64, 1, DType::F16, true, true, 3);
  activated.inputs[4]->data = kY;
  ASSERT_TRUE(run(activated).isOk());
  ASSERT_EQ(activated.scratchRequests, (std::vector<size_t>{20 * 64 * 2, 20 * 64 * 4}));
  ASSERT_EQ(activated.launches.size(), 3u);
  const DevicePtr product = activated.launches[1].args[3];
  EXPECT_NE(product, kY);
  EXPECT_EQ(activated.launches[1].args[4], 0u);
  EXPECT_EQ(activated.launches[2].args,
            (std::vector<uint64_t>{product, kBias, kY, kY, 20 * 64, 64}));
}

// A prompt whose tiles fill little of a wave splits k: 20 x 64 is one tile, 4096 inputs 128
// steps, so 16 parts of 8 steps (the most) within the 132 x 4 blocks of a wave, their partial
// products in scratch and one arrival counter per tile. Fewer steps split less: 1024 inputs,
// 32 steps, 4 parts of 8; and a tile grid that fills the wave not at all.
TEST(LinearTileGemmOpsTest, SplitKForFewTiles) {
  TileRows rows(nullptr);
  RecordingContext deep = tileStep(20, 64, 4096, 1, DType::F16, false, false, -1);
  ASSERT_TRUE(run(deep).isOk());
  ASSERT_EQ(deep.launches.size(), 2u);
  const Launch &tile = deep.launches[1];
  ASSERT_EQ(deep.scratchRequests, (std::vector<size_t>{20 * 4096 * 2, 16 * 20 * 64 * 4}));
  EXPECT_EQ(tile.args[9], deep.nextScratch - 16 * 20 * 64 * 4);
  EXPECT_EQ(tile.args[10], RecordingContext::kCounters);
  EXPECT_EQ(tile.args[11], 16u);
  EXPECT_EQ(tile.grid.x, 16u);
  EXPECT_EQ(deep.counterRequests, std::vector<size_t>{1});

  RecordingContext shorter = tileStep(20, 64, 1024, 1, DType::F16, false, false, -1);
  ASSERT_TRUE(run(shorter).isOk());
  EXPECT_EQ(shorter.launches[1].args[11], 4u);

  RecordingContext wide = tileStep(500, 64 * 80, 4096, 1, DType::F16, false, false, -1);
  ASSERT_TRUE(run(wide).isOk());  // 8 x 80 tiles, more than the wave
  EXPECT_EQ(wide.launches[1].args[11], 1u);
  EXPECT_TRUE(wide.counterRequests.empty());
}

// Above the threshold, with the threshold at 0, and for a plan without the slot: dequantize
// + GEMM as before.
TEST(LinearTileGemmOpsTest, ThresholdAndOlderPlansKeepTheGemm) {
  auto gemms = [](RecordingContext context) {
    EXPECT_TRUE(run(context).isOk());
    for (const Launch &launch : context.launches)
      EXPECT_NE(launch.slot, 4u);
    return context.gemms.size();
  };
  {
    TileRows rows(nullptr);
    EXPECT_EQ(gemms(tileStep(513, 64, 64, 1, DType::F16, false, false, -1)), 1u);
    EXPECT_EQ(gemms(int8Step(40, 64, 64, 1, DType::F16, false, false, -1)), 1u);
  }
  {
    TileRows rows("0");
    EXPECT_EQ(gemms(tileStep(40, 64, 64, 1, DType::F16, false, false, -1)), 1u);
  }
  {
    TileRows rows("1024");
    RecordingContext context = tileStep(1000, 64, 64, 1, DType::F16, false, false, -1);
    ASSERT_TRUE(run(context).isOk());
    EXPECT_TRUE(context.gemms.empty());
  }
}

TEST(LinearTileGemmOpsTest, MismatchedTileKernelsAreErrors) {
  TileRows rows(nullptr);
  RecordingContext groups = tileStep(20, 64, 128, 4, DType::F16, false, false, -1);
  groups.kernels.back()["GS"] = 64;
  Status status = run(groups);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("tile GEMM was generated for group size 64"),
            std::string::npos)
      << status.message();
  EXPECT_TRUE(groups.launches.empty());
}

} // namespace
} // namespace dsrt::test
