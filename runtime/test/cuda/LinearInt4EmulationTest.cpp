// int4 linears on the CUDA backend (docs/int4.md, docs/cuda-backend.md "int4 linears"):
// LinearOps.cpp's launcher and the templates (gemv.cuh with WT 9, dequantize_int4.cuh,
// linear_epilogue.cuh, convert_activations.cuh, the norm kernels) specialised as
// LinearRules.cpp specialises them for --dtype int4 plans, run on the host through
// CudaEmulation.h (LinearEmulation.h's checkLinear). Weights are random codes packed as
// MatMulNBits packs them with random positive scales, checked against a double-precision
// reference of (code - 8) * scale and, for f32 rows, against the CPU's reference
// tfm.linear on the same stored tensors (runtime/src/ops/TransformerLinear.cpp).
// Tolerances, relative to Σ|x·w| of each element (+1e-5 absolute): gemv 1e-5 (codes and
// scales are read exactly, f32 sums in another order); the GEMM path rounds its operands to
// the scales' dtype: f16 2e-3 (2 x 2^-11), bf16 1e-2 (2 x 2^-8), f32 1e-5.
#include "LinearEmulation.h"

#include "LinearInt4EmulationFamilies.inc"

namespace dsrt::test {
namespace {

// Groups of 32 (--dtype int4's default), 64 and 128, odd output counts, 1 to 8 rows.
TEST(LinearInt4EmulationTest, GemvInGroupsOf32And64And128) {
  for (int64_t rows : {1, 3, 8}) {
    checkLinear(i4_g32_f16::kernels(), rows, 13, 1e-5);
    checkLinear(i4_g64_bf16::kernels(), rows, 9, 1e-5);
    checkLinear(i4_g128_f32::kernels(), rows, 7, 1e-5);
  }
}

// More than 8 rows: the codes dequantized into scratch in the scales' dtype, then the GEMM
// (here the emulation's host GEMM over the operands the launcher hands cuBLASLt).
TEST(LinearInt4EmulationTest, GemmPathDequantizesIntoTheScalesDtype) {
  checkLinear(i4_g32_f16::kernels(), 9, 13, 2e-3);
  checkLinear(i4_g64_bf16::kernels(), 12, 9, 1e-2);
  checkLinear(i4_g128_f32::kernels(), 11, 7, 1e-5);
  checkLinear(i4_g24_f16::kernels(), 10, 5, 2e-3);
}

// A weight larger than a part of scratch: dequantized and multiplied in parts of 3 and 5
// rows, each part's codes found at its first row's byte offset (rows of in / 2 bytes).
TEST(LinearInt4EmulationTest, GemmPathInParts) {
  checkLinear(i4_g128_f32::kernels(), 11, 7, 1e-5, 0, 3 * 384 * 4);  // 3 parts
  checkLinear(i4_g32_f16::kernels(), 9, 13, 2e-3, 0, 5 * 128 * 2);   // 3 parts
}

// Groups that split a 32-code load take the scalar path (one nibble at a time); one group
// per row applies the scale after the warp's reduction.
TEST(LinearInt4EmulationTest, ScalarPathAndOneGroupPerRow) {
  for (int64_t rows : {1, 6, 8}) {
    checkLinear(i4_g24_f16::kernels(), rows, 5, 1e-5);
    checkLinear(i4_row_bf16::kernels(), rows, 11, 1e-5);
  }
  checkLinear(i4_row_bf16::kernels(), 10, 11, 1e-2);
}

// The epilogues: a gated [gate; up] weight (each half's rows with their own scales), an
// RMS norm prologue (in gemv's staged rows, or the norm kernel before the GEMM), and
// split-K over rows of 1152.
TEST(LinearInt4EmulationTest, GatedNormPrologueAndSplitK) {
  for (int64_t rows : {1, 3, 8}) {
    checkLinear(i4_gated_g32::kernels(), rows, 18, 1e-5);
    checkLinear(i4_rms_g32::kernels(), rows, 15, 1e-5);
    checkLinear(i4_long_split2::kernels(), rows, 6, 1e-5);
  }
  checkLinear(i4_gated_g32::kernels(), 10, 18, 2e-3);
  checkLinear(i4_rms_g32::kernels(), 11, 15, 2e-3);
  checkLinear(i4_long_split2::kernels(), 12, 6, 2e-3);
}

// An int4 LM head's logit scale and cap, in gemv and after the GEMM.
TEST(LinearInt4EmulationTest, LmHeadLogitEpilogue) {
  for (int64_t rows : {1, 5})
    checkLinear(i4_head_cap::kernels(), rows, 21, 1e-5);
  checkLinear(i4_head_cap::kernels(), 12, 21, 2e-3);
}

// The plan's f16 activations: staged and widened (1 and 7 rows of 1600), read as halves
// where they lie (8 rows: 51,200 bytes do not fit the staging), the GEMM's own operand.
TEST(LinearInt4EmulationTest, HalfActivations) {
  for (int64_t rows : {1, 7, 8})
    checkLinear(i4_f16_input::kernels(), rows, 3, 1e-5);
  checkLinear(i4_f16_input::kernels(), 12, 3, 2e-3);
}

// Tensor-parallel ranks of an uneven split run the plan's kernels (specialised for rank 0's
// K) over fewer in-features, in the same groups: 96 and 64 of 128 in groups of 32 (whole
// loads), 192 of 256 in groups of 64, 72 of 96 in groups of 24 (the scalar path), and a
// rank's GEMM path.
TEST(LinearInt4EmulationTest, UnevenTensorParallelShards) {
  for (int64_t rows : {1, 8}) {
    checkLinear(i4_g32_f16::kernels(), rows, 13, 1e-5, 96);
    checkLinear(i4_g32_f16::kernels(), rows, 13, 1e-5, 64);
    checkLinear(i4_g64_bf16::kernels(), rows, 9, 1e-5, 192);
    checkLinear(i4_g24_f16::kernels(), rows, 5, 1e-5, 72);
  }
  checkLinear(i4_g32_f16::kernels(), 10, 13, 2e-3, 96);
}

// Bad steps are refused by name before anything runs.
TEST(LinearInt4EmulationTest, RefusesMismatchedWeightsAndKernels) {
  struct Case {
    Shape weight, scales, input;
    const char *expected;
  };
  const Case cases[] = {
      // 128 in-features are 64 bytes a row, not 128.
      {{4, 128}, {4, 4}, {1, 128}, "the input's last dimension must be 256"},
      // 128 in-features in 5 groups.
      {{4, 64}, {4, 5}, {1, 128}, "groups dividing 128"},
      // 128 in-features in groups of 32 of 128 / 32, but kernels for another group size.
      {{4, 64}, {4, 2}, {1, 128}, "group size 32"},
  };
  for (const Case &c : cases) {
    std::vector<uint8_t> w(static_cast<size_t>(c.weight[0] * c.weight[1]), 0x88);
    std::vector<uint16_t> scales(static_cast<size_t>(c.scales[0] * c.scales[1]), 0x3c00);
    std::vector<float> x(static_cast<size_t>(c.input[1]), 1.0f), residual(4, 0.0f),
        y(4, 0.0f);
    EmulatedLinear step(i4_g32_f16::kernels(), "tfm.linear");
    step.inputs.push_back(DeviceTensor{DType::F32, c.input, address(x.data())});
    step.inputs.push_back(DeviceTensor{DType::U8, c.weight, address(w.data())});
    step.inputs.push_back(std::nullopt);
    step.inputs.push_back(DeviceTensor{DType::F16, c.scales, address(scales.data())});
    step.inputs.push_back(DeviceTensor{DType::F32, {1, 4}, address(residual.data())});
    step.outputs.push_back(DeviceTensor{DType::F32, {1, 4}, address(y.data())});
    std::vector<GpuOpInfo> ops;
    addLinearGpuOps(ops);
    Status status = ops[0].run(step);
    ASSERT_FALSE(status.isOk()) << c.expected;
    EXPECT_NE(status.message().find(c.expected), std::string::npos) << status.message();
    EXPECT_EQ(step.gemvLaunches, 0);
  }
}

} // namespace
} // namespace dsrt::test
