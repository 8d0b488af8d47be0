// The generic path's kernels without a GPU (codegen/kernels/generic_*.cuh and their
// launchers in runtime/src/cuda/ops): round trips, in which a one-step plan goes through its
// rule, the spec's template compiled for the host (GenericHostKernels.inc, the
// specialisations in GenericHostSpecs.inc) runs with the launcher's own grid and arguments
// on a fake StepContext whose "device" memory is host memory, and the result must equal the
// host reference (ops::compute) bit for bit, or within a stated tolerance. The rules'
// declines and the NVRTC builds are GenericRulesTest.cpp.
#include "GenericRoundTrip.h"

namespace dsc::codegen {
namespace {

// ---- round trips ----------------------------------------------------------------------------

TEST(GenericRoundTrip, BinaryArithmeticBroadcasts) {
  auto specs = roundTrip("Add", {device(ramp({2, 3, 4})), device(ramp({3, 1}))}, {});
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name(), "generic_binary_OP1_DT1_DT_B1_RANK3");
  roundTrip("Sub", {device(i64({2, 3}, {1, 2, 3, 4, 5, INT64_MIN})), device(i64({}, {7}))}, {});
  roundTrip("Mul",
            {device(i32({4}, {INT32_MAX, -3, 65536, 7})), device(i32({4}, {2, 5, 65536, -1}))},
            {});
  roundTrip("Div", {device(ramp({3, 4})), device(f32({4}, {2.0f, -0.5f, 0.0f, 3.0f}))}, {});
  roundTrip("Max", {device(f32({2, 3}, {1, kNaN, -2, 4, 5, 6})), device(f32({3}, {0, 1, kNaN}))},
            {});
  roundTrip("Min", {device(i64({3}, {5, -5, 0})), device(i64({3}, {4, -6, 0}))}, {});
}

TEST(GenericRoundTrip, ModPowAndComparisons) {
  OwnedTensor a = f32({6}, {5.5f, -5.5f, 5.5f, -5.5f, 4.0f, -4.0f});
  OwnedTensor b = f32({6}, {2.0f, 2.0f, -2.0f, -2.0f, 2.0f, 2.0f});
  roundTrip("Mod", {device(a), device(b)}, {});
  roundTrip("Mod", {device(a), device(b)}, {intAttr("fmod", 1)});
  roundTrip("Pow",
            {device(f32({4}, {2.0f, -2.0f, 0.5f, 9.0f})),
             device(f32({4}, {3.0f, 2.0f, -1.5f, 0.5f}))},
            {});
  roundTrip("Pow", {device(i64({5}, {2, -3, 7, 1, -1})), device(i64({5}, {10, 3, -1, -5, -3}))},
            {});
  roundTrip("Pow", {device(i32({3}, {2, 10, -3})), device(f32({3}, {40.0f, 0.5f, kNaN}))}, {});
  roundTrip("Equal", {device(i64({2, 2}, {1, 2, 3, 4})), device(i64({2}, {1, 4}))}, {});
  for (const char *op : {"Less", "LessOrEqual", "Greater"})
    roundTrip(op, {device(f32({3}, {1, kNaN, -1})), device(f32({3}, {2, 0, -1}))}, {});
  roundTrip("GreaterOrEqual", {device(i32({2, 2}, {1, 2, 3, 4})), device(i32({1, 2}, {2, 3}))}, {});
  roundTrip("And", {device(boolean({2, 2}, {0, 1, 1, 1})), device(boolean({2}, {1, 0}))}, {});
  roundTrip("Or", {device(boolean({2, 2}, {0, 1, 0, 0})), device(boolean({2}, {1, 0}))}, {});
  roundTrip("Equal", {device(boolean({3}, {0, 1, 1})), device(boolean({3}, {0, 0, 1}))}, {});
}

TEST(GenericRoundTrip, WhereBroadcastsThreeOperands) {
  roundTrip("Where",
            {device(boolean({1, 4}, {1, 0, 0, 1})), device(ramp({3, 4})), device(f32({}, {-9.0f}))},
            {});
  roundTrip("Where",
            {device(boolean({2, 1, 1}, {1, 0})), device(i64({3, 1}, {1, 2, 3})),
             device(i64({1, 2}, {-1, -2}))},
            {});
}

TEST(GenericRoundTrip, UnaryOps) {
  OwnedTensor x = f32({10}, {-2.5f, -1.0f, -0.0f, 0.0f, 0.3f, 1.0f, 2.75f, 30.0f, kNaN, -kInf});
  for (const char *op : {"Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Erf",
                         "Sigmoid", "Relu", "Sin", "Cos", "Floor", "IsNaN", "Gelu"})
    roundTrip(op, {device(x)}, {});
  roundTrip("Gelu", {device(x)}, {stringAttr("approximate", "tanh")});
  roundTrip("Neg", {device(i64({3}, {INT64_MIN, -4, 9}))}, {});
  roundTrip("Abs", {device(i32({3}, {INT32_MIN, -4, 9}))}, {});
  roundTrip("Relu", {device(i64({3}, {-1, 0, 9}))}, {});
  roundTrip("Not", {device(boolean({3}, {0, 1, 2}))}, {});
}

TEST(GenericRoundTrip, CastFollowsTheHostsRoundingAndSaturation) {
  // Halfway cases, overflow, subnormals, NaN, out-of-range integers.
  OwnedTensor x = f32({14}, {1.0f, -3.7f, 65504.0f, 65520.0f, 1e10f, -1e10f, 6e-8f, 3e-8f, kNaN,
                             kInf, -kInf, 300.5f, 255.9f, -0.75f});
  for (DType to : {DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool})
    roundTrip("Cast", {device(x)}, {typeAttr("to", to)});
  OwnedTensor big = i64({8}, {0, 2049, 2051, -65521, (int64_t(1) << 53) + 1, 16777217, INT64_MIN,
                              INT64_MAX});
  for (DType to : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8, DType::Bool})
    roundTrip("Cast", {device(big)}, {typeAttr("to", to)});
  OwnedTensor half = make<uint16_t>(DType::F16, {5}, {0x3c00, 0x7e00, 0x0001, 0xfbff, 0x7c00});
  roundTrip("Cast", {device(half)}, {typeAttr("to", DType::F32)});
  roundTrip("Cast", {device(half)}, {typeAttr("to", DType::BF16)});
  OwnedTensor bf = make<uint16_t>(DType::BF16, {4}, {0x3fc0, 0xc2f7, 0x7f80, 0xdf00});
  roundTrip("Cast", {device(bf)}, {typeAttr("to", DType::I64)});
  roundTrip("Cast", {device(boolean({3}, {0, 1, 7}))}, {typeAttr("to", DType::F32)});
  roundTrip("Cast", {device(boolean({3}, {0, 1, 7}))}, {typeAttr("to", DType::I64)});
  roundTrip("Cast", {device(make<uint8_t>(DType::U8, {3}, {0, 128, 255}))},
            {typeAttr("to", DType::F32)});
  roundTrip("Cast", {device(i32({3}, {-1, 0, INT32_MAX}))}, {typeAttr("to", DType::I64)});
  // The same dtype is a copy.
  auto specs = roundTrip("Cast", {device(x)}, {typeAttr("to", DType::F32)});
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].kind, "generic_copy");
}

TEST(GenericRoundTrip, ReshapeAndItsKinAreContiguousCopies) {
  auto specs = roundTrip("Reshape", {device(ramp({2, 3, 4})), host(i64({2}, {6, -1}))}, {});
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name(), "generic_copy_ES4_RANK1");
  // The shape input may live on the device too: the output's shape says all.
  roundTrip("Reshape", {device(i64({2, 3}, {1, 2, 3, 4, 5, 6})), device(i64({1}, {6}))}, {});
  roundTrip("Unsqueeze", {device(ramp({2, 3})), host(i64({1}, {1}))}, {});
  roundTrip("Squeeze", {device(boolean({1, 3}, {1, 0, 1})), host(i64({1}, {0}))}, {});
  roundTrip("Flatten", {device(ramp({2, 3, 4}))}, {intAttr("axis", 2)});
  roundTrip("Identity", {device(i64({2}, {7, 8}))}, {});
}

TEST(GenericRoundTrip, TransposeAndExpand) {
  roundTrip("Transpose", {device(ramp({2, 3, 4}))}, {intsAttr("perm", {2, 0, 1})});
  roundTrip("Transpose", {device(i64({2, 3}, {1, 2, 3, 4, 5, 6}))}, {});
  roundTrip("Expand", {device(ramp({3, 1})), host(i64({3}, {2, 3, 4}))}, {});
  roundTrip("Expand", {device(i64({3}, {1, 2, 3})), device(i64({2}, {2, 1}))}, {});
}

TEST(GenericRoundTrip, SliceWithStepsClampingAndNegativeIndices) {
  OwnedTensor x = ramp({4, 5, 6});
  roundTrip("Slice", {device(x), host(i64({2}, {1, -1})), host(i64({2}, {100, -6})),
                      host(i64({2}, {0, 2})), host(i64({2}, {2, -2}))},
            {});
  roundTrip("Slice", {device(x), host(i32({1}, {-3})), host(i32({1}, {INT32_MAX}))}, {});
  // gpt2's position slice: the last `total` columns of an i64 mask.
  roundTrip("Slice", {device(i64({2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})), host(i64({1}, {-3})),
                      host(i64({1}, {INT64_MAX})), host(i64({1}, {1}))},
            {});
}

// Concat launches a strided copy per input; Split writes all its parts in one launch.
TEST(GenericRoundTrip, ConcatCopiesEachPartAndSplitLaunchesOnce) {
  roundTrip("Concat", {device(ramp({2, 1, 3})), device(ramp({2, 4, 3})), device(ramp({2, 2, 3}))},
            {intAttr("axis", 1)});
  EXPECT_EQ(lastLaunches, 3);
  roundTrip("Concat", {device(i64({1, 2}, {1, 2})), device(i64({1, 1}, {3}))},
            {intAttr("axis", -1)});
  auto specs = roundTrip("Split", {device(ramp({2, 6, 3})), host(i64({3}, {1, 3, 2}))},
                         {intAttr("axis", 1)}, 3);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name(), "generic_split_ES4_PARTS3");
  EXPECT_EQ(lastLaunches, 1);
  // GPT-2's fused QKV: the last axis, one row per token.
  roundTrip("Split", {device(ramp({1, 4, 12})), host(i64({3}, {4, 4, 4}))},
            {intAttr("axis", 2)}, 3);
  std::vector<uint16_t> halves(28);
  for (size_t i = 0; i < halves.size(); ++i)
    halves[i] = static_cast<uint16_t>(0x3c00 + 7 * i);
  roundTrip("Split", {device(make<uint16_t>(DType::F16, {2, 2, 7, 1}, halves))},
            {intAttr("axis", 2)}, 3);
  roundTrip("Split", {device(i64({3, 2}, {1, 2, 3, 4, 5, 6})), host(i64({2}, {1, 2}))},
            {intAttr("axis", 0)}, 2);
}

TEST(GenericRoundTrip, GatherWrapsNegativeIndices) {
  roundTrip("Gather", {device(ramp({5, 3})), device(i64({2, 2}, {0, -1, 4, -5}))}, {});
  roundTrip("Gather",
            {device(i64({2, 4}, {10, 11, 12, 13, 20, 21, 22, 23})), device(i32({3}, {-4, 3, 1}))},
            {intAttr("axis", 1)});
  roundTrip("Gather", {device(ramp({5, 3})), device(i64({}, {-2}))}, {});
}

TEST(GenericRoundTrip, CumSumOverTheAxisWithItsAttributes) {
  OwnedTensor mask = f32({2, 5}, {0, 0, 1, 1, 1, 1, 1, 1, 0, 1});
  roundTrip("CumSum", {device(mask), host(i64({}, {1}))}, {});
  roundTrip("CumSum", {device(mask), host(i32({}, {0}))},
            {intAttr("exclusive", 1), intAttr("reverse", 1)});
  roundTrip("CumSum", {device(i64({2, 3}, {1, INT64_MAX, 1, 4, 5, 6})), host(i64({}, {-1}))}, {});
  roundTrip("CumSum", {device(i32({3, 2}, {1, 2, 3, 4, INT32_MAX, 6})), host(i64({}, {0}))},
            {intAttr("exclusive", 1)});
}

TEST(GenericRoundTrip, ReductionsKeepTheHostsOrder) {
  OwnedTensor x = ramp({3, 4, 5}, 1000.0f);
  roundTrip("ReduceSum", {device(x), host(i64({1}, {1}))}, {intAttr("keepdims", 0)});
  roundTrip("ReduceSum", {device(x), host(i64({2}, {0, -1}))}, {});
  // Axes on the device: the launcher reads them off the shapes (keepdims).
  roundTrip("ReduceMean", {device(i64({2, 2, 3}, {1, 2, 3, 4, 5, 6, -7, 8, 9, 10, 11, 12})),
                           device(i64({2}, {0, 2}))},
            {});
  roundTrip("ReduceMean", {device(ramp({4, 6}))}, {});
  roundTrip("ReduceMax", {device(f32({2, 3}, {1, kNaN, 3, -1, -2, -kInf}))},
            {intAttr("keepdims", 0)});
  roundTrip("ReduceMax", {device(i32({2, 3}, {1, -9, 3, -1, -2, -3})), host(i64({1}, {1}))}, {});
  roundTrip("ReduceSum", {device(x)}, {intAttr("noop_with_empty_axes", 1)});
}

TEST(GenericRoundTrip, AStepWithoutKernelsAsksForTheFallback) {
  // A declined rule or a CPU-only plan leaves the step without kernels: the launcher must
  // launch the absent slot (the session then runs the host reference), not fail otherwise.
  OwnedTensor a = i64({2}, {6, 7}), b = i64({2}, {2, 0}), out(DType::I64, {2});
  for (const char *op : {"Div", "Reshape", "Gather", "CumSum", "ReduceSum", "Cast"}) {
    HostStepContext context;
    context.opName = op;
    context.inputs = {cuda::DeviceTensor{a.dtype, a.shape, 0},
                      cuda::DeviceTensor{b.dtype, b.shape, 0}};
    context.outputs = {cuda::DeviceTensor{out.dtype, out.shape, 0}};
    cuda::GpuOpFn launcher = genericLauncher(op);
    ASSERT_NE(launcher, nullptr) << op;
    EXPECT_FALSE(launcher(context).isOk()) << op;
    EXPECT_TRUE(context.missingKernel) << op;
    EXPECT_EQ(context.launches, 0) << op;
  }
}

TEST(GenericRoundTrip, SoftmaxOverTheLastAxis) {
  // The block's sums run in another order than the host's: within float rounding.
  constexpr double kTolerance = 1e-6;
  roundTrip("Softmax", {device(ramp({3, 37}))}, {}, 1, kTolerance);
  roundTrip("LogSoftmax", {device(ramp({2, 700}, 30.0f))}, {}, 1, kTolerance);
  // A -inf logit gets 0; a NaN makes its row NaN, as on the host.
  roundTrip("Softmax", {device(f32({2, 3}, {1, -kInf, 2, kNaN, 1, 0}))}, {intAttr("axis", 1)}, 1,
            kTolerance);
}

// MatMul's tiles cover M, N and K that are not multiples of 16, batch dimensions that
// broadcast on either side, and 1-D operands; within float rounding of the host's sum (the
// kernel fuses each multiply-add, the host may not).
TEST(GenericRoundTrip, MatMulBroadcastsBatchesAndTilesAnySize) {
  auto specs = roundTrip("MatMul", {device(ramp({2, 3, 17, 33})), device(ramp({2, 1, 33, 19}))},
                         {}, 1, 1e-5);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name(), "generic_matmul_BATCH_RANK2");
  // T5's attention scores: [b, h, s, d] x [b, h, d, s].
  roundTrip("MatMul", {device(ramp({1, 2, 5, 8})), device(ramp({1, 2, 8, 5}))}, {}, 1, 1e-5);
  // A weight the recognisers left generic: [b, s, k] x [k, n], the weight broadcast.
  roundTrip("MatMul", {device(ramp({3, 4, 40})), host(ramp({40, 24}))}, {}, 1, 1e-5);
  roundTrip("MatMul", {device(ramp({20})), device(ramp({4, 20, 3}))}, {}, 1, 1e-5);
  roundTrip("MatMul", {device(ramp({5, 20})), device(ramp({20}))}, {}, 1, 1e-5);
  roundTrip("MatMul", {device(ramp({6, 0})), device(ramp({0, 7}))}, {}, 1, 1e-5);
}

// GatherND: whole rows, single elements and, with batch_dims, a tuple per batch; negative
// indices count from the end, as on the host.
TEST(GenericRoundTrip, GatherNDPicksSlicesAndElements) {
  auto specs = roundTrip("GatherND", {device(ramp({3, 4, 5})), device(i64({2, 1}, {2, -3}))}, {});
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name(), "generic_gather_nd_ES4");
  roundTrip("GatherND", {device(ramp({3, 4, 5})), device(i64({2, 2, 3}, {0, 1, 2, 2, 3, 4,
                                                                         1, -1, 0, 0, 0, 0}))},
            {});
  roundTrip("GatherND", {device(i64({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})),
                         device(i64({2, 1}, {2, 0}))},
            {intAttr("batch_dims", 1)});
}

// GatherElements along either axis, indices narrower than data off the axis, negative
// indices, and RoBERTa's form: position ids looked up along axis 1.
TEST(GenericRoundTrip, GatherElementsReplacesTheAxisCoordinate) {
  auto specs = roundTrip("GatherElements",
                         {device(ramp({3, 4})), device(i64({2, 4}, {0, 2, -1, 1, 2, 0, 1, 1}))},
                         {intAttr("axis", 0)});
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name(), "generic_gather_elements_ES4_IDX5_RANK2");
  roundTrip("GatherElements", {device(ramp({3, 4})), device(i64({3, 2}, {3, 0, -4, 1, 2, 2}))},
            {intAttr("axis", 1)});
  roundTrip("GatherElements",
            {device(i64({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})),
             device(i32({2, 2, 2}, {0, 2, 1, -1, 2, 0, 0, 1}))},
            {intAttr("axis", 1)});
}

// TopK as a router writes it (the top 2 of 8 experts per token), along an inner axis, the
// smallest, integers; equal values keep the lower index first and NaN ranks above every
// number, as on the host. K is the outputs' size along the axis.
TEST(GenericRoundTrip, TopKPicksInTheHostsOrder) {
  auto specs = roundTrip("TopK", {device(ramp({5, 8})), host(i64({1}, {2}))}, {}, 2);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name(), "generic_topk_DT1_LARGEST1");
  roundTrip("TopK", {device(f32({2, 4}, {1, 3, 3, kNaN, 5, -1, 5, kNaN})), host(i64({1}, {3}))},
            {}, 2);
  roundTrip("TopK", {device(f32({3, 4, 2}, {1, 1, 2, 2, 0, 0, 1, 1, 9, 8, 7, 6, 5, 4, 3, 2, 1,
                                            -kInf, kInf, 1, 1, 2, 2, 3})),
                     host(i64({1}, {2}))},
            {intAttr("axis", 1), intAttr("largest", 0)}, 2);
  roundTrip("TopK", {device(i64({2, 3}, {4, INT64_MIN, 4, 0, -1, 7})), host(i64({1}, {3}))}, {},
            2);
  roundTrip("TopK", {device(i32({3, 2}, {1, 4, 1, 2, 0, 4})), host(i64({1}, {1}))},
            {intAttr("axis", 0), intAttr("largest", 0)}, 2);
  roundTrip("TopK", {device(ramp({2, 3})), host(i64({1}, {0}))}, {}, 2);
}

// OneHot of the chosen experts (i64 indices, i64 values: torch's one_hot), at the last and an
// inner axis, with negative and out-of-range indices, which set nothing.
TEST(GenericRoundTrip, OneHotMarksEachIndexAlongTheDepth) {
  auto specs = roundTrip("OneHot", {device(i64({3, 2}, {0, 3, -1, 2, 4, -5})),
                                    host(i64({}, {4})), device(i64({2}, {0, 1}))},
                         {});
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name(), "generic_onehot_ES8_IDX5");
  roundTrip("OneHot", {device(i32({2, 2}, {1, -2, 0, 7})), host(i64({}, {3})),
                       device(f32({2}, {-0.5f, 2.0f}))},
            {intAttr("axis", 1)});
  roundTrip("OneHot", {device(i64({3}, {2, 0, 1})), host(f32({1}, {3.0f})),
                       device(boolean({2}, {0, 1}))},
            {intAttr("axis", 0)});
}

} // namespace
} // namespace dsc::codegen
