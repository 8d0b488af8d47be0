// tfm.linear's CUDA launcher (runtime/src/cuda/ops/LinearOps.cpp) and its kernel templates
// (codegen/kernels/gemv.cuh, linear_epilogue.cuh, convert_activations.cuh,
// dequantize_int8.cuh) run on the host through the attention test's emulation of CUDA's
// threads, barriers and warp shuffles (CudaEmulation.h), against a double-precision
// reference computed here from the same stored (f32 or bf16, or int8 with scales) weights.
// cuBLASLt is replaced by a host GEMM over the operands the launcher hands it, so the prefill
// path checks the dequantization, conversion and epilogue kernels and the launcher's wiring,
// not cuBLASLt. f16 weights are left out: gemv unpacks them with PTX (inline asm). f16
// scales (and f16 dequantized weights and activations on the int8 GEMM path) are in: the
// kernels read and write them through dsc_load_float / dsc_store_float, whose f16
// instances are replaced here by the runtime's conversions (both exact f16 -> f32 and
// round-to-nearest-even f32 -> f16, as PTX's cvt).
// Tolerance: |gpu − ref| <= 1e-5 + 1e-5·Σ|x·w| per element (f32 sums in another order;
// scales are read exactly, so int8's gemv has the same bound). On the GEMM path the
// operands are rounded to the GEMM dtype: bf16-converted activations (and bf16 dequantized
// int8 weights) 1e-2 relative, 2 x bf16's unit roundoff 2^-8 ≈ 7.8e-3; f16 2e-3, 2 x 2^-11
// ≈ 1e-3; f32 scales 1e-5 (w^ = q·s rounded once in f32).
#include "LinearEmulation.h"

// The families: each template specialisation the tests run.
#include "LinearEmulationFamilies.inc"

namespace dsrt::test {
namespace {

TEST(LinearEmulationTest, F32GemvWithGeluBiasAndResidual) {
  for (int64_t rows : {1, 3, 8})
    checkLinear(f32_gelu::kernels(), rows, 40, 1e-5);
}

// The LM head's logit scale and cap, in gemv (up to 8 rows) and in the epilogue kernel
// after the GEMM (more). The cap of 2 bends the larger logits (|z · 0.5| up to ~5 here).
TEST(LinearEmulationTest, LmHeadLogitEpilogueInGemvAndAfterTheGemm) {
  for (int64_t rows : {1, 5, 20})
    checkLinear(f32_logit_cap::kernels(), rows, 48, 1e-5);
  checkLinear(bf16_logit_scale::kernels(), 2, 40, 1e-5);
  // The GEMM's activations are rounded to bf16: 2^-8 relative each (as above).
  checkLinear(bf16_logit_scale::kernels(), 12, 40, 1e-2);
}

// The plan's half activations (dsc-activation-dtype): an f16 input staged and widened (1
// and 7 rows), read as halves where it is not (8 rows of 1600), and taken by the GEMM as
// its operand (12 rows: no conversion), into f16 weights and into int8 weights with f16
// scales; a bf16 input converted for f32 weights; a gated
// linear's bf16 result from gemv and from the epilogue. The GEMM path's tolerance is the
// bf16 operand rounding's of Bf16GemmPathConvertsTheActivations where the GEMM multiplies
// in bf16; otherwise as f32's (the input is exact in its own dtype).
TEST(LinearEmulationTest, HalfActivationsInAndOut) {
  for (int64_t rows : {1, 7, 8, 12})
    checkLinear(f16_input::kernels(), rows, 6, 1e-5);
  for (int64_t rows : {1, 9})
    checkLinear(bf16_input_f32_weights::kernels(), rows, 10, 1e-5);
  // int8: the dequantized f16 weights round each weight too (2^-11 relative, as
  // ResidualAloneIsTheGemmsAddend's).
  for (int64_t rows : {1, 8})
    checkLinear(i8_f16_input::kernels(), rows, 6, 1e-5);
  checkLinear(i8_f16_input::kernels(), 12, 6, 2e-3);
  for (int64_t rows : {1, 3, 8})
    checkLinear(bf16_gated_output::kernels(), rows, 24, 1e-5);
  checkLinear(bf16_gated_output::kernels(), 11, 24, 1e-2);
}

TEST(LinearEmulationTest, F32GemmPathEpilogue) {
  checkLinear(f32_gelu::kernels(), 11, 24, 1e-5);
}

TEST(LinearEmulationTest, Bf16ScalarGemvWithSiluAndBf16Bias) {
  for (int64_t rows : {1, 5})
    checkLinear(bf16_silu::kernels(), rows, 24, 1e-5);
}

TEST(LinearEmulationTest, Bf16GemmPathConvertsTheActivations) {
  // The activations are rounded to bf16 for the GEMM: 2^-8 relative each.
  checkLinear(bf16_silu::kernels(), 9, 16, 1e-2);
  checkLinear(bf16_plain::kernels(), 12, 16, 1e-2);
}

TEST(LinearEmulationTest, Bf16VectorGemvPlain) {
  for (int64_t rows : {1, 2, 8})
    checkLinear(bf16_plain::kernels(), rows, 20, 1e-5);
}

// int8 gemv: scales are read exactly, so the bound is the f32 sums' order alone.
TEST(LinearEmulationTest, Int8GemvPerChannelF16Scales) {
  for (int64_t rows : {1, 2, 5, 8})
    checkLinear(i8_channel_f16::kernels(), rows, 24, 1e-5);
}

TEST(LinearEmulationTest, Int8GemvGroup16Bf16Scales) {
  for (int64_t rows : {1, 3, 8})
    checkLinear(i8_group16_bf16::kernels(), rows, 20, 1e-5);
}

TEST(LinearEmulationTest, Int8GemvGroup64F32Scales) {
  for (int64_t rows : {1, 4, 8})
    checkLinear(i8_group64_f32::kernels(), rows, 18, 1e-5);
}

TEST(LinearEmulationTest, Int8GemvGroup24TakesTheScalarPath) {
  for (int64_t rows : {1, 6, 8})
    checkLinear(i8_group24_f16::kernels(), rows, 18, 1e-5);
}

// Rows of 1104 in-features: each lane sums several 16-byte loads.
TEST(LinearEmulationTest, LongRowsLoopOverSeveralLoadsPerLane) {
  for (int64_t rows : {1, 8}) {
    checkLinear(i8_long_group48_f16::kernels(), rows, 6, 1e-5);
    checkLinear(i8_long_channel_bf16::kernels(), rows, 6, 1e-5);
    checkLinear(f32_long::kernels(), rows, 6, 1e-5);
  }
  checkLinear(i8_long_group48_f16::kernels(), 9, 6, 2e-3);  // the GEMM path
}

// A residual without a bias or an activation is the GEMM's addend (cuBLASLt's C, the output
// its D), with no epilogue: whole, and in 3 parts of 2 rows, each GEMM adding its columns of
// the residual (the addend offset as C's columns are).
TEST(LinearEmulationTest, ResidualAloneIsTheGemmsAddend) {
  checkLinear(i8_long_group48_f16::kernels(), 12, 6, 2e-3);
  checkLinear(i8_long_group48_f16::kernels(), 12, 6, 2e-3, 0, 2 * 1104 * 2);
}

// A rank of an uneven split: fewer in-features than the kernels' K, the same group size
// (per channel: one group of the rank's row; 40 is not a multiple of 16, the scalar path).
TEST(LinearEmulationTest, Int8GemvOnAnUnevenShard) {
  checkLinear(i8_group16_bf16::kernels(), 2, 12, 1e-5, 48);
  checkLinear(i8_channel_f16::kernels(), 3, 12, 1e-5, 40);
  checkLinear(i8_group16_bf16::kernels(), 10, 12, 1e-2, 48);  // the GEMM path
}

// Gated: each warp reads a gate row and its up row (gemv), or the epilogue gates the joined
// product (GEMM path); the output is half as wide as the weight.
TEST(LinearEmulationTest, GatedGemvMultipliesTheHalves) {
  for (int64_t rows : {1, 3, 8}) {
    checkLinear(f32_gated_silu::kernels(), rows, 40, 1e-5);
    checkLinear(bf16_gated_gelu::kernels(), rows, 24, 1e-5);
    checkLinear(i8_gated_group16::kernels(), rows, 20, 1e-5);
  }
}

TEST(LinearEmulationTest, GatedGemmPathGatesInTheEpilogue) {
  checkLinear(f32_gated_silu::kernels(), 11, 40, 1e-5);
  checkLinear(bf16_gated_gelu::kernels(), 9, 24, 1e-2);   // bf16 activations: 2 x 2^-8
  checkLinear(i8_gated_group16::kernels(), 10, 20, 1e-2);  // bf16 dequantized weight
}

// A gated step whose kernels are not gated (a plan written before the fusion, read by a
// runtime that knows it) is refused, not run with the wrong output width.
TEST(LinearEmulationTest, GatedStepNeedsGatedKernels) {
  const int64_t k = 1104;  // f32_long's K: no bias, no residual, as this step
  std::vector<float> x(k, 0.5f), w(8 * k, 0.25f), y(4, 0.0f);
  EmulatedLinear step(f32_long::kernels(), "tfm.linear");
  step.attrs_["gated"] = ops::Attr::ofInt(1);
  step.attrs_["activation"] = ops::Attr::ofString("silu");
  step.inputs.push_back(DeviceTensor{DType::F32, {1, k}, address(x.data())});
  step.inputs.push_back(DeviceTensor{DType::F32, {8, k}, address(w.data())});
  step.inputs.push_back(std::nullopt);
  step.outputs.push_back(DeviceTensor{DType::F32, {1, 4}, address(y.data())});
  std::vector<GpuOpInfo> ops;
  addLinearGpuOps(ops);
  Status status = ops[0].run(step);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("gated"), std::string::npos) << status.message();
  EXPECT_EQ(step.gemvLaunches, 0);
}

// Kernels generated for another logit cap than the step's (or for none) are refused before
// anything runs: the cap is compiled in.
TEST(LinearEmulationTest, LogitCapNeedsKernelsWithThatCap) {
  const int64_t k = 64;  // f32_logit_cap's K: no bias, no residual
  std::vector<float> x(k, 0.5f), w(8 * k, 0.25f), y(8, 0.0f);
  for (float cap : {0.0f, 30.0f}) {
    EmulatedLinear step(f32_logit_cap::kernels(), "tfm.lm_head");
    if (cap == 0.0f)
      step.attrs_.erase("logit_cap");
    else
      step.attrs_["logit_cap"] = ops::Attr::ofFloat(cap);
    step.inputs.push_back(DeviceTensor{DType::F32, {1, k}, address(x.data())});
    step.inputs.push_back(DeviceTensor{DType::F32, {8, k}, address(w.data())});
    step.outputs.push_back(DeviceTensor{DType::F32, {1, 8}, address(y.data())});
    std::vector<GpuOpInfo> ops;
    addLinearGpuOps(ops);
    Status status = ops[0].run(step);
    ASSERT_FALSE(status.isOk()) << cap;
    EXPECT_NE(status.message().find("another logit scale or cap"), std::string::npos)
        << status.message();
    EXPECT_EQ(step.gemvLaunches, 0);
  }
}

// The GEMM path: w^ = q·scale in the scales' dtype, the activations converted to it.
TEST(LinearEmulationTest, Int8GemmPathDequantizesInTheScalesDtype) {
  checkLinear(i8_group64_f32::kernels(), 11, 20, 1e-5);   // f32: w^ rounded once in f32
  checkLinear(i8_channel_f16::kernels(), 9, 16, 2e-3);    // f16: 2 x 2^-11
  checkLinear(i8_group24_f16::kernels(), 10, 12, 2e-3);
  checkLinear(i8_group16_bf16::kernels(), 12, 16, 1e-2);  // bf16: 2 x 2^-8
}

// A weight larger than a part of scratch is dequantized and multiplied in parts, each
// GEMM writing its columns of the output (ldc = n): 3 and 5 rows per part (no 64-row
// block fits), the last part shorter.
// cuBLASLt's epilogue, where its heuristic has one: a bias and tanh-GELU (bf16, after the
// layer-norm prologue's operand kernel), a bias beside a residual (f32: the residual is the
// GEMM's addend), a bias alone (a bf16 input into f32 weights), and an int8 weight in 4
// parts, each GEMM with its slice of the bias (ReLU). An activation beside a residual
// (f32_gelu) and SiLU stay in the epilogue kernel. Tolerances as the same families' GEMM
// paths above (bf16 operands 1e-2, f32 1e-5).
TEST(LinearEmulationTest, CublasEpilogueTakesTheBiasAndActivation) {
  checkLinear(bf16_layer_gelu::kernels(), 12, 24, 1e-2, 0, 0, nullptr, true);
  checkLinear(f32_split8::kernels(), 10, 24, 1e-5, 0, 0, nullptr, true);
  checkLinear(bf16_input_f32_weights::kernels(), 9, 10, 1e-5, 0, 0, nullptr, true);
  checkLinear(i8_relu_bias::kernels(), 12, 200, 1e-2, 0, 64 * 64 * 2, nullptr, true);
  checkLinear(f32_gelu::kernels(), 11, 24, 1e-5, 0, 0, nullptr, true);
  checkLinear(bf16_silu::kernels(), 12, 24, 1e-2, 0, 0, nullptr, true);
}

TEST(LinearEmulationTest, Int8GemmPathInParts) {
  checkLinear(i8_group64_f32::kernels(), 11, 20, 1e-5, 0, 3 * 128 * 4);  // 7 parts
  checkLinear(i8_channel_f16::kernels(), 9, 16, 2e-3, 0, 5 * 64 * 2);    // 4 parts
}

// A norm prologue against the rows normalised in double: gemv normalising its staged rows
// (1, 3 and 8 rows), and the norm kernel into scratch before the GEMM (11 rows) or before a
// gemv whose rows are too long to stage (8 rows of 1600); before an f16/bf16 GEMM the
// norm's second kernel writes the GEMM's operand (bf16 at 10 rows, int8's bf16 at 12).
TEST(LinearEmulationTest, NormPrologueInGemvAndApart) {
  for (int64_t rows : {1, 3, 8, 11})
    checkLinear(f32_rms::kernels(), rows, 40, 1e-5);
  for (int64_t rows : {1, 8})
    checkLinear(bf16_layer_gelu::kernels(), rows, 24, 1e-5);
  checkLinear(bf16_layer_gelu::kernels(), 10, 24, 1e-2);  // bf16-converted activations
  // A plan's from before the operand norm kernel: the f32 norm, then the conversion.
  checkLinear(bf16_layer_gelu_before::kernels(), 10, 24, 1e-2);
  for (int64_t rows : {2, 12})
    checkLinear(i8_gated_layer::kernels(), rows, 32, rows <= 8 ? 1e-5 : 1e-2);
  for (int64_t rows : {1, 8})
    checkLinear(f32_rms_long::kernels(), rows, 24, 1e-5);
}

// Split-K: each feature's SPLIT_K warps sum their parts of the row and meet in shared
// memory; the emulated device has 2 multiprocessors, so the grid is ceil(features *
// SPLIT_K / 8) blocks, at most 8. The sums are in another order: the same 1e-5 bound.
TEST(LinearEmulationTest, SplitKForNarrowLayers) {
  struct Case {
    LinearKernels (*kernels)();
    int64_t n;
    unsigned grid;
  };
  const Case cases[] = {
      {f32_split8::kernels, 8, 8},          // 8 warps per feature
      {f32_split8::kernels, 3, 3},          // fewer features than a block holds
      {i8_split2::kernels, 24, 6},          // 2
      {f32_gated_split4::kernels, 16, 4},   // gated: 8 features of [gate; up], 4 each
      {f32_rms_long::kernels, 24, 6},       // 2, after a norm prologue's staged rows
      {f32_gelu::kernels, 40, 5},           // SPLIT_K 1: one warp each
      {bf16_plain::kernels, 20, 3},         // a plan's gemv from before split-K
  };
  for (const Case &c : cases)
    for (int64_t rows : {1, 3, 8}) {
      unsigned grid = 0;
      checkLinear(c.kernels(), rows, c.n, 1e-5, 0, 0, &grid);
      EXPECT_EQ(grid, c.grid) << "n " << c.n << ", rows " << rows;
    }
}

} // namespace
} // namespace dsrt::test
