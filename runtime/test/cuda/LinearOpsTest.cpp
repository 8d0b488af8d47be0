// The tfm.linear / tfm.lm_head launchers (runtime/src/cuda/ops/LinearOps.cpp) without a
// GPU, against a StepContext that records what would be enqueued: which kernel slot runs
// with which parameters (in gemv.cuh / linear_epilogue.cuh / convert_activations.cuh /
// dequantize_int8.cuh order), the GEMM handed to cuBLASLt, and the errors for plans whose
// kernels do not match the step. The kernels' arithmetic is checked by
// LinearEmulationTest.cpp.
#include "LinearRecording.h"

namespace dsrt::test {
namespace {

TEST(LinearOpsTest, DecodeRowsAreOneGemvLaunch) {
  RecordingContext context = linearStep(3, 3072, 768, DType::F16, true, true, 1);
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(context.launches.size(), 1u);
  EXPECT_TRUE(context.gemms.empty());
  const Launch &gemv = context.launches[0];
  EXPECT_EQ(gemv.slot, 0u);
  // No scales: float weights.
  EXPECT_EQ(gemv.args,
            (std::vector<uint64_t>{kX, kW, 0, kBias, kResidual, kY, 3, 3072, 768, 1}));
  // x staged as f32 in shared memory; one warp per feature, so 8 features per block.
  EXPECT_EQ(gemv.sharedBytes, 3u * 768 * 4);
  EXPECT_EQ(gemv.block.x % 32, 0u);
  EXPECT_GE(uint64_t(gemv.grid.x) * (gemv.block.x / 32), std::min<uint64_t>(3072, 132 * 4 * 8));
}

// The gemv grid is one wave of the blocks the multiprocessors hold at once: 3 per
// multiprocessor where the occupancy calculator says 3 (the launch's own block size and
// shared memory asked), 4 where it cannot say; never more blocks than 8-feature groups.
TEST(LinearOpsTest, GemvGridIsOneWaveOfResidentBlocks) {
  for (int resident : {0, 1, 3, 6}) {
    RecordingContext context = linearStep(1, 16384, 2048, DType::F16, false, false, -1);
    context.residentBlocks = resident;
    Status status = run(context);
    ASSERT_TRUE(status.isOk()) << status.message();
    ASSERT_EQ(context.launches.size(), 1u);
    const Launch &gemv = context.launches[0];
    EXPECT_EQ(gemv.grid.x, 132u * (resident > 0 ? resident : 4)) << resident;
    ASSERT_EQ(context.occupancyQueries.size(), 1u);
    EXPECT_EQ(context.occupancyQueries[0],
              std::make_tuple(size_t(0), gemv.block.x, gemv.sharedBytes));
  }
  // A layer narrower than a wave: one block per 8 features.
  RecordingContext narrow = linearStep(1, 64, 2048, DType::F16, false, false, -1);
  narrow.residentBlocks = 3;
  ASSERT_TRUE(run(narrow).isOk());
  EXPECT_EQ(narrow.launches.at(0).grid.x, 8u);
}

TEST(LinearOpsTest, LargeActivationsAreReadFromGlobalMemory) {
  RecordingContext context = linearStep(8, 64, 2050, DType::F32, false, false, -1);
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(context.launches.size(), 1u);
  // 8 x 2050 f32 is more than 48 KiB: not staged, no dynamic shared memory.
  EXPECT_EQ(context.launches[0].args.back(), 0u);
  EXPECT_EQ(context.launches[0].sharedBytes, 0u);
}

TEST(LinearOpsTest, PrefillWithHalfWeightsConvertsThenGemmThenEpilogue) {
  RecordingContext context = linearStep(40, 256, 64, DType::BF16, true, false, 3);
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(context.launches.size(), 2u);
  ASSERT_EQ(context.gemms.size(), 1u);
  ASSERT_EQ(context.scratchRequests, std::vector<size_t>{40 * 64 * 2});
  const Launch &convert = context.launches[0];
  EXPECT_EQ(convert.slot, 2u);
  const DevicePtr converted = convert.args[1];
  EXPECT_EQ(convert.args, (std::vector<uint64_t>{kX, converted, 40 * 64}));
  const GemmDesc &gemm = context.gemms[0];
  EXPECT_EQ(gemm.m, 40);
  EXPECT_EQ(gemm.n, 256);
  EXPECT_EQ(gemm.k, 64);
  EXPECT_EQ(gemm.a, converted);
  EXPECT_EQ(gemm.aType, DType::BF16);
  EXPECT_EQ(gemm.b, kW);
  EXPECT_EQ(gemm.bType, DType::BF16);
  EXPECT_EQ(gemm.c, kY);
  EXPECT_FALSE(gemm.accumulate);
  const Launch &epilogue = context.launches[1];
  EXPECT_EQ(epilogue.slot, 1u);
  EXPECT_EQ(epilogue.args, (std::vector<uint64_t>{kY, kBias, 0, kY, 40 * 256, 256}));
}

TEST(LinearOpsTest, PlainF32PrefillIsTheGemmAlone) {
  RecordingContext context = linearStep(16, 300, 64, DType::F32, false, false, -1);
  context.opName = "tfm.lm_head";
  context.inputs.resize(2);
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_TRUE(context.launches.empty());
  ASSERT_EQ(context.gemms.size(), 1u);
  EXPECT_EQ(context.gemms[0].a, kX);
  EXPECT_EQ(context.gemms[0].aType, DType::F32);
  EXPECT_TRUE(context.scratchRequests.empty());
}

TEST(LinearOpsTest, ResidualThatIsTheOutputIsAccumulatedOnto) {
  // Without an activation: C already holds the residual, the GEMM adds to it.
  RecordingContext plain = linearStep(20, 64, 64, DType::F32, true, true, -1);
  plain.inputs[4]->data = kY;
  Status status = run(plain);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(plain.gemms.size(), 1u);
  EXPECT_TRUE(plain.gemms[0].accumulate);
  EXPECT_EQ(plain.gemms[0].c, kY);
  ASSERT_EQ(plain.launches.size(), 1u);
  EXPECT_EQ(plain.launches[0].args, (std::vector<uint64_t>{kY, kBias, 0, kY, 20 * 64, 64}));

  // With one: the product goes to scratch, the epilogue reads the residual from the output.
  RecordingContext activated = linearStep(20, 64, 64, DType::F32, true, true, 0);
  activated.inputs[4]->data = kY;
  status = run(activated);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(activated.gemms.size(), 1u);
  EXPECT_FALSE(activated.gemms[0].accumulate);
  const DevicePtr product = activated.gemms[0].c;
  EXPECT_NE(product, kY);
  ASSERT_EQ(activated.scratchRequests, std::vector<size_t>{20 * 64 * 4});
  ASSERT_EQ(activated.launches.size(), 1u);
  EXPECT_EQ(activated.launches[0].args,
            (std::vector<uint64_t>{product, kBias, kY, kY, 20 * 64, 64}));
}

TEST(LinearOpsTest, ResidualElsewhereIsTheGemmsAddend) {
  // No bias and no activation (o_proj, down_proj): the GEMM reads the residual as its C and
  // writes the output as its D, so no epilogue runs.
  RecordingContext plain = linearStep(20, 64, 64, DType::F16, false, true, -1);
  Status status = run(plain);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(plain.gemms.size(), 1u);
  EXPECT_TRUE(plain.gemms[0].accumulate);
  EXPECT_EQ(plain.gemms[0].addend, kResidual);
  EXPECT_EQ(plain.gemms[0].c, kY);
  ASSERT_EQ(plain.launches.size(), 1u);  // the activations' conversion only
  EXPECT_EQ(plain.launches[0].slot, 2u);

  // With a bias the epilogue adds both, after the plain product.
  RecordingContext biased = linearStep(20, 64, 64, DType::F32, true, true, -1);
  status = run(biased);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(biased.gemms.size(), 1u);
  EXPECT_FALSE(biased.gemms[0].accumulate);
  EXPECT_EQ(biased.gemms[0].addend, 0u);
  ASSERT_EQ(biased.launches.size(), 1u);
  EXPECT_EQ(biased.launches[0].args,
            (std::vector<uint64_t>{kY, kBias, kResidual, kY, 20 * 64, 64}));
}

TEST(LinearOpsTest, UnevenTensorParallelShardRunsThePlansKernel) {
  // The plan's kernel was specialised for rank 0's 86 in-features; this rank has 85.
  RecordingContext context = linearStep(1, 64, 85, DType::F16, false, false, -1);
  context.kernels[0]["K"] = 86;
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(context.launches.size(), 1u);
  EXPECT_EQ(context.launches[0].args[8], 85u);
}

TEST(LinearOpsTest, MismatchedSpecialisationsAreErrors) {
  RecordingContext wrongType = linearStep(1, 64, 64, DType::F16, false, false, -1);
  wrongType.kernels[0]["WT"] = 3;
  Status status = run(wrongType);
  EXPECT_NE(status.message().find("weight dtype"), std::string::npos) << status.message();

  RecordingContext noBiasKernel = linearStep(1, 64, 64, DType::F32, true, false, -1);
  noBiasKernel.kernels[0]["HAS_BIAS"] = 0;
  status = run(noBiasKernel);
  EXPECT_NE(status.message().find("bias/residual"), std::string::npos) << status.message();

  RecordingContext missingConversion = linearStep(1, 64, 64, DType::BF16, false, false, -1);
  missingConversion.kernels.pop_back();
  status = run(missingConversion);
  EXPECT_NE(status.message().find("kernels for this step"), std::string::npos)
      << status.message();

  RecordingContext overlapping = linearStep(2, 64, 64, DType::F32, false, false, -1);
  overlapping.outputs[0].data = kX + 64;
  status = run(overlapping);
  EXPECT_NE(status.message().find("overlaps"), std::string::npos) << status.message();
  EXPECT_TRUE(overlapping.launches.empty());
}

TEST(LinearOpsTest, Int8DecodeIsOneGemvLaunchWithTheScales) {
  RecordingContext context = int8Step(2, 4096, 4096, 32, DType::F16, true, true, 3);
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(context.launches.size(), 1u);
  EXPECT_TRUE(context.gemms.empty());
  EXPECT_TRUE(context.scratchRequests.empty());
  EXPECT_EQ(context.launches[0].slot, 0u);
  EXPECT_EQ(context.launches[0].args,
            (std::vector<uint64_t>{kX, kW, kScales, kBias, kResidual, kY, 2, 4096, 4096, 1}));
  EXPECT_EQ(context.launches[0].sharedBytes, 2u * 4096 * 4);
}

TEST(LinearOpsTest, Int8PrefillDequantizesThenConvertsThenGemmThenEpilogue) {
  RecordingContext context = int8Step(40, 256, 128, 2, DType::BF16, true, false, 0);
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(context.launches.size(), 3u);
  ASSERT_EQ(context.gemms.size(), 1u);
  // The activations [40, 128] and w^ [256, 128], both bf16.
  ASSERT_EQ(context.scratchRequests, (std::vector<size_t>{40 * 128 * 2, 256 * 128 * 2}));
  const Launch &convert = context.launches[0];
  EXPECT_EQ(convert.slot, 3u);
  const DevicePtr converted = convert.args[1];
  EXPECT_EQ(convert.args, (std::vector<uint64_t>{kX, converted, 40 * 128}));
  const Launch &dequantize = context.launches[1];
  EXPECT_EQ(dequantize.slot, 2u);
  const DevicePtr dequantized = dequantize.args[2];
  EXPECT_NE(converted, dequantized);
  EXPECT_EQ(dequantize.args, (std::vector<uint64_t>{kW, kScales, dequantized, 256, 128}));
  const GemmDesc &gemm = context.gemms[0];
  EXPECT_EQ(gemm.m, 40);
  EXPECT_EQ(gemm.n, 256);
  EXPECT_EQ(gemm.k, 128);
  EXPECT_EQ(gemm.a, converted);
  EXPECT_EQ(gemm.aType, DType::BF16);
  EXPECT_EQ(gemm.b, dequantized);
  EXPECT_EQ(gemm.bType, DType::BF16);
  EXPECT_EQ(gemm.c, kY);
  EXPECT_EQ(gemm.ldc, 256);  // one part: all of C
  EXPECT_EQ(context.launches[2].slot, 1u);
  EXPECT_EQ(context.launches[2].args, (std::vector<uint64_t>{kY, kBias, 0, kY, 40 * 256, 256}));
}

// A weight whose dequantized form exceeds scratchPartBytes() goes in parts of whole 64-row
// blocks: each part's rows of q and of the scales dequantized into one scratch buffer, then
// its GEMM writes those columns of C (ldc = n), accumulating onto the residual in place.
TEST(LinearOpsTest, Int8PrefillInPartsWritesColumnsOfTheOutput) {
  RecordingContext context = int8Step(16, 200, 64, 2, DType::BF16, false, true, -1);
  context.inputs[4]->data = kY;  // the residual is the output: C += x·w^ᵀ
  context.partBytes = 150 * 64 * 2;  // 150 rows, rounded down to 128
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(context.scratchRequests, (std::vector<size_t>{16 * 64 * 2, 128 * 64 * 2}));
  ASSERT_EQ(context.launches.size(), 3u);  // convert, then two parts' dequantization
  ASSERT_EQ(context.gemms.size(), 2u);
  const DevicePtr dequantized = context.launches[1].args[2];
  const int64_t firsts[] = {0, 128}, counts[] = {128, 72};
  for (int part = 0; part < 2; ++part) {
    const Launch &dequantize = context.launches[1 + part];
    EXPECT_EQ(dequantize.slot, 2u);
    EXPECT_EQ(dequantize.args,
              (std::vector<uint64_t>{kW + firsts[part] * 64, kScales + firsts[part] * 2 * 2,
                                     dequantized, static_cast<uint64_t>(counts[part]), 64}));
    const GemmDesc &gemm = context.gemms[part];
    EXPECT_EQ(gemm.m, 16);
    EXPECT_EQ(gemm.n, counts[part]);
    EXPECT_EQ(gemm.k, 64);
    EXPECT_EQ(gemm.b, dequantized);
    EXPECT_EQ(gemm.bType, DType::BF16);
    EXPECT_EQ(gemm.c, kY + firsts[part] * 4);
    EXPECT_EQ(gemm.ldc, 200);
    EXPECT_TRUE(gemm.accumulate);
  }
}

TEST(LinearOpsTest, Int8PrefillWithF32ScalesIsAnF32Gemm) {
  RecordingContext context = int8Step(16, 64, 64, 1, DType::F32, false, false, -1);
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(context.launches.size(), 1u);  // the dequantization; nothing to convert
  EXPECT_EQ(context.launches[0].slot, 2u);
  ASSERT_EQ(context.scratchRequests, std::vector<size_t>{64 * 64 * 4});
  ASSERT_EQ(context.gemms.size(), 1u);
  EXPECT_EQ(context.gemms[0].a, kX);
  EXPECT_EQ(context.gemms[0].aType, DType::F32);
  EXPECT_EQ(context.gemms[0].b, context.launches[0].args[2]);
  EXPECT_EQ(context.gemms[0].bType, DType::F32);
}

TEST(LinearOpsTest, Int8UnevenShardKeepsTheGroupSize) {
  // Rank 0 has 96 in-features in 3 groups of 32; this rank 64 in 2 groups of 32.
  RecordingContext grouped = int8Step(1, 64, 64, 2, DType::F16, false, false, -1);
  grouped.kernels[0]["K"] = 96;
  Status status = run(grouped);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(grouped.launches.at(0).args[8], 64u);

  // One group per row (GS 0) is one group of whatever the rank's row length is.
  RecordingContext perChannel = int8Step(1, 64, 60, 1, DType::F16, false, false, -1);
  perChannel.kernels[0]["K"] = 64;
  status = run(perChannel);
  ASSERT_TRUE(status.isOk()) << status.message();

  // A rank whose groups are not the plan's size is an error, not a misread scale.
  RecordingContext otherGroups = int8Step(1, 64, 64, 4, DType::F16, false, false, -1);
  otherGroups.kernels[0]["GS"] = 32;
  otherGroups.kernels[2]["GS"] = 32;
  status = run(otherGroups);
  EXPECT_NE(status.message().find("group size 32"), std::string::npos) << status.message();
  EXPECT_TRUE(otherGroups.launches.empty());
}

TEST(LinearOpsTest, Int8MismatchesAreErrors) {
  auto message = [](RecordingContext context) {
    Status status = run(context);
    EXPECT_TRUE(context.launches.empty() && context.gemms.empty());
    return status.isOk() ? std::string("ok") : status.message();
  };
  RecordingContext noScales = int8Step(1, 64, 64, 1, DType::F16, false, false, -1);
  noScales.inputs[3].reset();
  EXPECT_NE(message(noScales).find("no scales"), std::string::npos);

  RecordingContext floatWithScales = int8Step(1, 64, 64, 1, DType::F16, false, false, -1);
  floatWithScales.inputs[1]->dtype = DType::F16;
  EXPECT_NE(message(floatWithScales).find("scales beside a f16 weight"), std::string::npos)
      << message(floatWithScales);

  RecordingContext intScales = int8Step(1, 64, 64, 1, DType::F16, false, false, -1);
  intScales.inputs[3]->dtype = DType::I32;
  EXPECT_NE(message(intScales).find("scales must be f32, f16 or bf16"), std::string::npos);

  RecordingContext badGroups = int8Step(1, 64, 64, 1, DType::F16, false, false, -1);
  badGroups.inputs[3]->shape = {64, 3};  // 3 does not divide 64
  EXPECT_NE(message(badGroups).find("groups dividing 64"), std::string::npos);
  badGroups.inputs[3]->shape = {32, 1};  // not one row of scales per output feature
  EXPECT_NE(message(badGroups).find("groups dividing 64"), std::string::npos);

  RecordingContext wrongScaleType = int8Step(1, 64, 64, 2, DType::F16, false, false, -1);
  wrongScaleType.kernels[0]["SDT"] = 3;
  EXPECT_NE(message(wrongScaleType).find("other scales than f16"), std::string::npos)
      << message(wrongScaleType);

  RecordingContext wrongDequantize = int8Step(20, 64, 64, 2, DType::BF16, false, false, -1);
  wrongDequantize.kernels[2]["GS"] = 0;
  EXPECT_NE(message(wrongDequantize).find("group size 0"), std::string::npos)
      << message(wrongDequantize);

  RecordingContext missingConversion = int8Step(20, 64, 64, 2, DType::BF16, false, false, -1);
  missingConversion.kernels.pop_back();
  EXPECT_NE(message(missingConversion).find("kernels for this step"), std::string::npos);

  RecordingContext wrongConversion = int8Step(20, 64, 64, 2, DType::BF16, false, false, -1);
  wrongConversion.kernels[3]["WT"] = 2;
  EXPECT_NE(message(wrongConversion).find("conversion kernel"), std::string::npos);

  RecordingContext floatKernels = int8Step(1, 64, 64, 1, DType::F16, false, false, -1);
  floatKernels.kernels[0]["WT"] = 2;
  EXPECT_NE(message(floatKernels).find("weight dtype"), std::string::npos);

  RecordingContext overScales = int8Step(2, 64, 64, 1, DType::F16, false, false, -1);
  overScales.outputs[0].data = kScales + 64;
  EXPECT_NE(message(overScales).find("overlaps"), std::string::npos);

  // An int8 head's scales are input 3, as a linear's; without them it is refused too.
  RecordingContext head = int8Step(1, 64, 64, 1, DType::F16, false, false, -1);
  head.opName = "tfm.lm_head";
  head.inputs.resize(3);
  EXPECT_NE(message(head).find("no scales"), std::string::npos) << message(head);
}

TEST(LinearOpsTest, Int8LmHeadReadsItsScalesAtPositionThree) {
  RecordingContext head = int8Step(1, 300, 64, 2, DType::F16, false, false, -1);
  head.opName = "tfm.lm_head";
  head.inputs.resize(4);  // hidden, weight, none, scales
  Status status = run(head);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(head.launches.size(), 1u);
  EXPECT_EQ(head.launches[0].args,
            (std::vector<uint64_t>{kX, kW, kScales, 0, 0, kY, 1, 300, 64, 1}));

  RecordingContext prefill = int8Step(12, 300, 64, 2, DType::F16, false, false, -1);
  prefill.opName = "tfm.lm_head";
  prefill.inputs.resize(4);
  status = run(prefill);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(prefill.gemms.size(), 1u);
  EXPECT_EQ(prefill.gemms[0].bType, DType::F16);
  ASSERT_EQ(prefill.launches.size(), 2u);  // the activations converted, then dequantize_int8
  EXPECT_EQ(prefill.launches[1].slot, 2u);
  EXPECT_EQ(prefill.launches[1].args[0], kW);
  EXPECT_EQ(prefill.launches[1].args[1], kScales);
}

TEST(LinearOpsTest, EmptyBatchLaunchesNothing) {
  RecordingContext context = linearStep(0, 64, 64, DType::F32, false, false, -1);
  Status status = run(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_TRUE(context.launches.empty());
  EXPECT_TRUE(context.gemms.empty());
}

} // namespace
} // namespace dsrt::test
