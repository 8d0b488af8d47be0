// The kernels of tfm.linear and tfm.lm_head without a GPU: the rule's slots, constants and
// declines on hand-built plans (codegen/kernels/LinearRules.cpp), and NVRTC compiling the
// templates (gemv, linear_epilogue, convert_activations, dequantize_int8) in a spread of
// specialisations to PTX and to sm_80 and sm_90 cubins (which runs ptxas on them): K that
// is and is not a multiple of the 16-byte vector width, every weight dtype (int8 with every
// scales dtype, per channel and in groups that do and do not split a 16-byte load), every
// activation, with and without bias and residual. NVRTC tests skip where it cannot be
// loaded.
#include "codegen/AttachKernels.h"
#include "codegen/Nvrtc.h"
#include "codegen/kernels/KernelRules.h"

#include "StepAttrs.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

namespace dsc::codegen {
namespace {

using namespace dsc::codegen::test;

// A one-step plan built with the object API; dims < 0 are symbolic.
class PlanBuilder {
public:
  explicit PlanBuilder(const char *dtype = "fp32") {
    plan.options = std::make_unique<dsp::CompileOptionsT>();
    plan.options->dtype = dtype;
    plan.programs.push_back(std::make_unique<dsp::ProgramT>());
    plan.programs[0]->name = "forward";
  }

  int tensor(dsp::DType dtype, std::vector<int64_t> dims,
             dsp::TensorKind kind = dsp::TensorKind::activation) {
    auto t = std::make_unique<dsp::TensorT>();
    t->dtype = dtype;
    t->kind = kind;
    for (int64_t d : dims) {
      auto dim = std::make_unique<dsp::DimT>();
      dim->size = d;
      if (d < 0)
        dim->symbol = "sequence";
      t->shape.push_back(std::move(dim));
    }
    if (kind == dsp::TensorKind::weight)
      t->weight_index = static_cast<int32_t>(plan.tensors.size());
    plan.tensors.push_back(std::move(t));
    return static_cast<int>(plan.tensors.size()) - 1;
  }
  int weight(std::vector<int64_t> dims, dsp::DType dtype = dsp::DType::f32) {
    return tensor(dtype, std::move(dims), dsp::TensorKind::weight);
  }

  dsp::StepT &step(const std::string &op, std::vector<int32_t> inputs,
                   std::vector<int32_t> outputs) {
    auto s = std::make_unique<dsp::StepT>();
    s->op = op;
    s->inputs = std::move(inputs);
    s->outputs = std::move(outputs);
    plan.programs[0]->steps.push_back(std::move(s));
    return *plan.programs[0]->steps.back();
  }



  // Rank 0's section as the writer lays it out: every weight stored in its own dtype except
  // those of `storedAs` (a --dtype int8 plan stores f32 scales and biases in the compute
  // dtype).
  void section(const std::map<int, dsp::DType> &storedAs) {
    auto made = std::make_unique<dsp::WeightSectionT>();
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      auto entry = std::make_unique<dsp::WeightEntryT>();
      auto found = storedAs.find(static_cast<int>(i));
      entry->dtype = found != storedAs.end() ? found->second : plan.tensors[i]->dtype;
      made->weights.push_back(std::move(entry));
    }
    plan.sections.clear();
    plan.sections.push_back(std::move(made));
  }

  bool run(const dsp::StepT &step, std::vector<KernelSpec> &specs, std::string &reason) {
    KernelRule rule = findKernelRule(step.op);
    EXPECT_NE(rule, nullptr) << step.op;
    return rule && rule(RuleInput(plan, step), specs, reason);
  }

  dsp::PlanT plan;
};

TEST(LinearRules, FusedLinearWithFp16WeightsGetsAllThreeSlots) {
  PlanBuilder b("fp16");  // f32 weights are stored as f16
  int x = b.tensor(dsp::DType::f32, {2, -1, 768});
  int w = b.weight({3072, 768}), bias = b.weight({3072});
  int residual = b.tensor(dsp::DType::f32, {2, -1, 3072});
  int y = b.tensor(dsp::DType::f32, {2, -1, 3072});
  dsp::StepT &step = b.step("tfm.linear", {x, w, bias, -1, residual}, {y});
  stringAttr(step, "activation", "gelu_tanh");
  stringAttr(step, "parallel", "column");
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(step, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 3u);
  // 3072 features of 96 f16 loads: two warps each (gemvSplits).
  EXPECT_EQ(specs[0].name(), "gemv_K768_WT2_ACT1_HAS_BIAS1_BIAS_DT2_HAS_RESIDUAL1_SPLIT_K2");
  EXPECT_EQ(specs[1].name(), "linear_epilogue_ACT1_HAS_BIAS1_BIAS_DT2_HAS_RESIDUAL1");
  EXPECT_EQ(specs[2].name(), "convert_activations_WT2");
}

TEST(LinearRules, PlainF32LinearNeedsNoConversion) {
  PlanBuilder b;
  int x = b.tensor(dsp::DType::f32, {-1, 64}), w = b.weight({256, 64});
  int y = b.tensor(dsp::DType::f32, {-1, 256});
  dsp::StepT &step = b.step("tfm.linear", {x, w}, {y});
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(step, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name(), "gemv_K64_WT1_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0_SPLIT_K1");
  EXPECT_EQ(specs[1].name(), "linear_epilogue_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0");
}

// The plan's half activations (dsc-activation-dtype): o_proj's f16 input into f16 weights
// needs no conversion (the GEMM takes it as it is) and its gemv reads it (XT); into f32
// weights it is converted (convert_activations with XT); a gated linear's bf16 result is
// written by gemv and the epilogue (OUT_DT).
TEST(LinearRules, HalfActivationsAreCompiledIn) {
  PlanBuilder b("fp16");
  int x = b.tensor(dsp::DType::f16, {1, -1, 512}), w = b.weight({64, 512});
  int residual = b.tensor(dsp::DType::f32, {1, -1, 64}), y = b.tensor(dsp::DType::f32, {1, -1, 64});
  dsp::StepT &oProj = b.step("tfm.linear", {x, w, -1, -1, residual}, {y});
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(oProj, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name(), "gemv_K512_WT2_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL1_SPLIT_K2_XT2");
  EXPECT_EQ(specs[1].name(), "linear_epilogue_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL1");

  PlanBuilder f32("fp32");
  int x32 = f32.tensor(dsp::DType::f16, {-1, 64}), w32 = f32.weight({16, 64});
  int y32 = f32.tensor(dsp::DType::f32, {-1, 16});
  dsp::StepT &intoF32 = f32.step("tfm.linear", {x32, w32}, {y32});
  specs.clear();
  ASSERT_TRUE(f32.run(intoF32, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[2].name(), "convert_activations_WT1_XT2");

  PlanBuilder bf16("bf16");
  int h = bf16.tensor(dsp::DType::f32, {-1, 64}), wgu = bf16.weight({256, 64});
  int gated = bf16.tensor(dsp::DType::bf16, {-1, 128});
  dsp::StepT &gateUp = bf16.step("tfm.linear", {h, wgu}, {gated});
  stringAttr(gateUp, "activation", "silu");
  intAttr(gateUp, "gated", 1);
  specs.clear();
  ASSERT_TRUE(bf16.run(gateUp, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].name(),
            "gemv_K64_WT3_ACT3_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0_GATED1_SPLIT_K1_OUT_DT3");
  EXPECT_EQ(specs[1].name(), "linear_epilogue_ACT3_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0_GATED1_OUT_DT3");
  EXPECT_EQ(specs[2].name(), "convert_activations_WT3");

  // A half result is a gated linear's only; a norm prologue normalises f32 rows.
  int half = bf16.tensor(dsp::DType::bf16, {-1, 256});
  dsp::StepT &plain = bf16.step("tfm.linear", {h, wgu}, {half});
  specs.clear();
  EXPECT_FALSE(bf16.run(plain, specs, reason));
  EXPECT_NE(reason.find("gated linear's only"), std::string::npos) << reason;
  int scale = bf16.weight({128});
  dsp::StepT &normed = bf16.step("tfm.linear", {gated, bf16.weight({64, 128}), -1, -1, -1, scale},
                                 {bf16.tensor(dsp::DType::f32, {-1, 64})});
  stringAttr(normed, "norm", "rms");
  specs.clear();
  EXPECT_FALSE(bf16.run(normed, specs, reason));
  EXPECT_NE(reason.find("normalises f32 rows"), std::string::npos) << reason;
}

TEST(LinearRules, LmHeadIsTheProductAlone) {
  PlanBuilder b("bf16");
  int x = b.tensor(dsp::DType::f32, {4, 1, 64}), w = b.weight({150, 64});
  int y = b.tensor(dsp::DType::f32, {4, 1, 150});
  dsp::StepT &step = b.step("tfm.lm_head", {x, w}, {y});
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(step, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].name(), "gemv_K64_WT3_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0_SPLIT_K1");
  EXPECT_EQ(specs[2].name(), "convert_activations_WT3");
}

// dsc-fuse-logit-epilogue's logit_scale and logit_cap are compiled into both the gemv and
// the epilogue kernel, as f32 bits (0.125f: 0x3e000000, 30.0f: 0x41f00000); a head without
// them keeps its kernels' names; a negative cap is declined.
TEST(LinearRules, LmHeadLogitEpilogueIsCompiledIn) {
  PlanBuilder b;
  int x = b.tensor(dsp::DType::f32, {4, 1, 64}), w = b.weight({150, 64});
  int y = b.tensor(dsp::DType::f32, {4, 1, 150});
  dsp::StepT &step = b.step("tfm.lm_head", {x, w}, {y});
  floatAttr(step, "logit_scale", 0.125f);
  floatAttr(step, "logit_cap", 30.0f);
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(step, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name(), "gemv_K64_WT1_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0_LOGIT_SCALE_BITS"
                             "1040187392_LOGIT_CAP_BITS1106247680_SPLIT_K1");
  EXPECT_EQ(specs[1].name(), "linear_epilogue_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0_LOGIT_SCALE_"
                             "BITS1040187392_LOGIT_CAP_BITS1106247680");
  step.attrs.clear();
  floatAttr(step, "logit_cap", -1.0f);
  specs.clear();
  EXPECT_FALSE(b.run(step, specs, reason));
  EXPECT_NE(reason.find("the cap is negative"), std::string::npos) << reason;
}

TEST(LinearRules, BiasKeepsItsOwnStoredDtype) {
  PlanBuilder b;
  int x = b.tensor(dsp::DType::f32, {-1, 64}), w = b.weight({64, 64}, dsp::DType::bf16);
  int bias = b.weight({64});
  int y = b.tensor(dsp::DType::f32, {-1, 64});
  dsp::StepT &step = b.step("tfm.linear", {x, w, bias}, {y});
  stringAttr(step, "activation", "none");
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(step, specs, reason)) << reason;
  EXPECT_EQ(specs.at(0).name(), "gemv_K64_WT3_ACTm1_HAS_BIAS1_BIAS_DT1_HAS_RESIDUAL0_SPLIT_K1");
}

TEST(LinearRules, DeclinesWithAReason) {
  PlanBuilder b;
  int x = b.tensor(dsp::DType::f32, {-1, -1}), wDynamic = b.weight({64, -1});
  int y = b.tensor(dsp::DType::f32, {-1, 64});
  std::vector<KernelSpec> specs;
  std::string reason;
  EXPECT_FALSE(b.run(b.step("tfm.linear", {x, wDynamic}, {y}), specs, reason));
  EXPECT_NE(reason.find("dynamic"), std::string::npos) << reason;

  int x64 = b.tensor(dsp::DType::f32, {-1, 64}), w8 = b.weight({64, 64}, dsp::DType::i8);
  int scales = b.weight({64});
  EXPECT_FALSE(b.run(b.step("tfm.linear", {x64, w8, -1, scales}, {y}), specs, reason));
  EXPECT_NE(reason.find("int8"), std::string::npos) << reason;

  int w = b.weight({64, 64});
  dsp::StepT &odd = b.step("tfm.linear", {x64, w}, {y});
  stringAttr(odd, "activation", "swish2");
  EXPECT_FALSE(b.run(odd, specs, reason));
  EXPECT_NE(reason.find("swish2"), std::string::npos) << reason;

  int xHalf = b.tensor(dsp::DType::f16, {-1, 64}), yHalf = b.tensor(dsp::DType::f16, {-1, 64});
  EXPECT_FALSE(b.run(b.step("tfm.linear", {xHalf, w}, {yHalf}), specs, reason));
  EXPECT_NE(reason.find("f16"), std::string::npos) << reason;
  EXPECT_TRUE(specs.empty());
}

// ---- int8 linears ----------------------------------------------------------------------

TEST(LinearRules, Int8PerChannelLinearGetsTheDequantizationAndConversionSlots) {
  PlanBuilder b("int8");
  b.plan.options->compute_dtype = "fp16";
  int x = b.tensor(dsp::DType::f32, {2, -1, 768});
  int w = b.weight({3072, 768}, dsp::DType::i8), bias = b.weight({3072});
  int scales = b.weight({3072, 1});
  int residual = b.tensor(dsp::DType::f32, {2, -1, 3072});
  int y = b.tensor(dsp::DType::f32, {2, -1, 3072});
  b.section({{bias, dsp::DType::f16}, {scales, dsp::DType::f16}});
  dsp::StepT &step = b.step("tfm.linear", {x, w, bias, scales, residual}, {y});
  stringAttr(step, "activation", "gelu_tanh");
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(step, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 5u);
  EXPECT_EQ(specs[0].name(), "gemv_K768_WT8_SDT2_GS0_ACT1_HAS_BIAS1_BIAS_DT2_HAS_RESIDUAL1_SPLIT_K1");
  EXPECT_EQ(specs[1].name(), "linear_epilogue_ACT1_HAS_BIAS1_BIAS_DT2_HAS_RESIDUAL1");
  EXPECT_EQ(specs[2].name(), "dequantize_int8_SDT2_GS0");
  EXPECT_EQ(specs[3].name(), "convert_activations_WT2");
  // f16 scales: the tile GEMM, last.
  EXPECT_EQ(specs[4].name(), "gemm_dequant_WT8_SDT2_GS0_TILE_M64_TILE_N64");
}

TEST(LinearRules, Int8GroupsGiveTheGroupSize) {
  PlanBuilder b("int8");
  b.plan.options->compute_dtype = "bf16";
  int x = b.tensor(dsp::DType::f32, {-1, 4096});
  int w = b.weight({11008, 4096}, dsp::DType::i8), scales = b.weight({11008, 32});
  int y = b.tensor(dsp::DType::f32, {-1, 11008});
  b.section({{scales, dsp::DType::bf16}});
  dsp::StepT &step = b.step("tfm.linear", {x, w, -1, scales}, {y});
  stringAttr(step, "activation", "silu");
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(step, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 5u);
  EXPECT_EQ(specs[0].name(), "gemv_K4096_WT8_SDT3_GS128_ACT3_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0_SPLIT_K1");
  EXPECT_EQ(specs[2].name(), "dequantize_int8_SDT3_GS128");
  EXPECT_EQ(specs[3].name(), "convert_activations_WT3");
  EXPECT_EQ(specs[4].name(), "gemm_dequant_WT8_SDT3_GS128_TILE_M64_TILE_N64");
}

TEST(LinearRules, Int8PlanBeforeTheWriterStoresFloatsInTheComputeDtype) {
  // dsc attaches kernels before the writer lays out the sections: f32 scales and biases of
  // a --dtype int8 plan are then known to be stored in CompileOptions.compute_dtype.
  PlanBuilder b("int8");
  b.plan.options->compute_dtype = "bf16";
  int x = b.tensor(dsp::DType::f32, {-1, 64});
  int w = b.weight({128, 64}, dsp::DType::i8), bias = b.weight({128});
  int scales = b.weight({128, 2});
  int y = b.tensor(dsp::DType::f32, {-1, 128});
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(b.step("tfm.linear", {x, w, bias, scales}, {y}), specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 5u);
  EXPECT_EQ(specs[0].name(), "gemv_K64_WT8_SDT3_GS32_ACTm1_HAS_BIAS1_BIAS_DT3_HAS_RESIDUAL0_SPLIT_K1");
  EXPECT_EQ(specs[2].name(), "dequantize_int8_SDT3_GS32");
  EXPECT_EQ(specs[4].name(), "gemm_dequant_WT8_SDT3_GS32_TILE_M64_TILE_N64");
}

TEST(LinearRules, Int8WithF32ScalesIsAnF32GemmWithoutConversion) {
  PlanBuilder b("int8");
  b.plan.options->compute_dtype = "fp32";
  int x = b.tensor(dsp::DType::f32, {-1, 96});
  int w = b.weight({64, 96}, dsp::DType::i8), scales = b.weight({64, 4});
  int y = b.tensor(dsp::DType::f32, {-1, 64});
  b.section({});
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(b.step("tfm.linear", {x, w, -1, scales}, {y}), specs, reason)) << reason;
  // No tile GEMM either: the tensor cores multiply f16 or bf16.
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].name(), "gemv_K96_WT8_SDT1_GS24_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0_SPLIT_K1");
  EXPECT_EQ(specs[2].name(), "dequantize_int8_SDT1_GS24");
}

TEST(LinearRules, Int8LmHeadHasItsScalesAtTheLinearsPosition) {
  PlanBuilder b("int8");
  b.plan.options->compute_dtype = "fp16";
  int x = b.tensor(dsp::DType::f32, {4, 1, 64}), w = b.weight({300, 64}, dsp::DType::i8);
  int scales = b.weight({300, 2});
  int y = b.tensor(dsp::DType::f32, {4, 1, 300});
  b.section({{scales, dsp::DType::f16}});
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(b.step("tfm.lm_head", {x, w, -1, scales}, {y}), specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 5u);
  EXPECT_EQ(specs[0].name(), "gemv_K64_WT8_SDT2_GS32_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0_SPLIT_K1");
  EXPECT_EQ(specs[2].name(), "dequantize_int8_SDT2_GS32");
  EXPECT_EQ(specs[3].name(), "convert_activations_WT2");
  EXPECT_EQ(specs[4].name(), "gemm_dequant_WT8_SDT2_GS32_TILE_M64_TILE_N64");
}

TEST(LinearRules, Int8DeclinesWithAReason) {
  PlanBuilder b("int8");
  b.plan.options->compute_dtype = "fp16";
  int x = b.tensor(dsp::DType::f32, {-1, 64}), y = b.tensor(dsp::DType::f32, {-1, 64});
  int w8 = b.weight({64, 64}, dsp::DType::i8), wHalf = b.weight({64, 64}, dsp::DType::f16);
  int scales = b.weight({64, 2}, dsp::DType::f16), intScales = b.weight({64, 2}, dsp::DType::i32);
  int oddScales = b.weight({64, 3}, dsp::DType::f16), flatScales = b.weight({64}, dsp::DType::f16);
  std::vector<KernelSpec> specs;
  std::string reason;
  auto declines = [&](const char *op, std::vector<int32_t> inputs, const char *expected) {
    reason.clear();
    EXPECT_FALSE(b.run(b.step(op, std::move(inputs), {y}), specs, reason)) << expected;
    EXPECT_NE(reason.find(expected), std::string::npos) << reason;
  };
  declines("tfm.linear", {x, w8}, "int8 weight has no scales");
  declines("tfm.linear", {x, wHalf, -1, scales}, "scales beside a f16 weight");
  declines("tfm.linear", {x, w8, -1, intScales}, "scales are stored as i32");
  declines("tfm.linear", {x, w8, -1, oddScales}, "groups dividing 64");
  declines("tfm.linear", {x, w8, -1, flatScales}, "groups dividing 64");
  declines("tfm.lm_head", {x, w8}, "int8 weight has no scales");
  EXPECT_TRUE(specs.empty());
}

// ---- NVRTC ------------------------------------------------------------------------------

class LinearNvrtcTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string error;
    nvrtc = Nvrtc::instance(error);
    if (!nvrtc)
      GTEST_SKIP() << error;
  }

  void compiles(const KernelSpec &spec) {
    std::string source, error;
    ASSERT_TRUE(specialiseKernel(spec, source).isOk()) << spec.name();
    CompiledKernel compiled;
    ASSERT_TRUE(compileKernelCached(*nvrtc, source, spec.name(), kKernelPtxArch,
                                    {"sm_80", "sm_90"}, compiled, error))
        << spec.name() << ": " << error;
    EXPECT_NE(compiled.ptx.find(".entry " + spec.kind), std::string::npos) << spec.name();
    ASSERT_EQ(compiled.binaries.size(), 2u) << spec.name();
    for (const auto &[arch, cubin] : compiled.binaries)
      EXPECT_EQ(cubin.compare(0, 4, "\x7f" "ELF"), 0) << spec.name() << " " << arch;
  }

  const Nvrtc *nvrtc = nullptr;
};

TEST_F(LinearNvrtcTest, GemvSpecialisationsCompile) {
  // K = 64 and 768 take the vector path for every dtype; 2050 is not a multiple of 4 or 8
  // (the scalar path); 4100 is a multiple of 4 but not 8 (vector for f32 only) and too
  // large for 8 rows to be staged. Each activation (-1..5) appears at least once.
  // Split-K over 1, 2, 4 and 8 warps per feature in turn (and, every fifth, a gated one).
  const int64_t ks[] = {64, 768, 2050, 4100};
  int variant = 0;
  for (int64_t k : ks)
    for (int64_t wt : {1, 2, 3}) {
      int64_t act = variant % 7 - 1, hasBias = variant % 2, hasResidual = (variant / 2) % 2;
      int64_t biasType = hasBias ? (variant % 3) + 1 : 1;
      KernelSpec spec{"gemv",
                      {{"K", k},
                       {"WT", wt},
                       {"ACT", act},
                       {"HAS_BIAS", hasBias},
                       {"BIAS_DT", biasType},
                       {"HAS_RESIDUAL", hasResidual}}};
      if (variant % 5 == 4 && act != -1 && !hasResidual)
        spec.constants.push_back({"GATED", 1});
      spec.constants.push_back({"SPLIT_K", int64_t(1) << (variant % 4)});
      compiles(spec);
      ++variant;
    }
}

TEST_F(LinearNvrtcTest, Int8GemvAndDequantizationSpecialisationsCompile) {
  // {K, GS}: per channel, groups of 16 and 128 (the vector path), 24 (splits a 16-byte load:
  // the scalar path), and K = 4100, not a multiple of 16 (scalar). Every scales dtype.
  const std::pair<int64_t, int64_t> shapes[] = {{64, 0}, {4096, 128}, {768, 16}, {96, 24},
                                                {4100, 0}, {4100, 20}};
  int variant = 0;
  for (auto [k, gs] : shapes)
    for (int64_t sdt : {1, 2, 3}) {
      int64_t act = variant % 7 - 1, hasBias = variant % 2, hasResidual = (variant / 2) % 2;
      compiles({"gemv",
                {{"K", k},
                 {"WT", 8},
                 {"SDT", sdt},
                 {"GS", gs},
                 {"ACT", act},
                 {"HAS_BIAS", hasBias},
                 {"BIAS_DT", hasBias ? sdt : 1},
                 {"HAS_RESIDUAL", hasResidual}}});
      compiles({"dequantize_int8", {{"SDT", sdt}, {"GS", gs}}});
      ++variant;
    }
}

TEST_F(LinearNvrtcTest, Int8KernelsRefuseNonFloatScales) {
  std::string source, ptx, error;
  ASSERT_TRUE(specialiseKernel({"dequantize_int8", {{"SDT", 6}, {"GS", 0}}}, source).isOk());
  EXPECT_FALSE(nvrtc->compile(source, "dequantize_int8_SDT6_GS0", kKernelPtxArch, ptx, error));
  EXPECT_NE(error.find("SDT must be"), std::string::npos) << error;
  ASSERT_TRUE(specialiseKernel({"gemv",
                                {{"K", 64},
                                 {"WT", 8},
                                 {"SDT", 8},
                                 {"GS", 0},
                                 {"ACT", -1},
                                 {"HAS_BIAS", 0},
                                 {"BIAS_DT", 1},
                                 {"HAS_RESIDUAL", 0}}},
                               source)
                  .isOk());
  EXPECT_FALSE(nvrtc->compile(source, "gemv_SDT8", kKernelPtxArch, ptx, error));
  EXPECT_NE(error.find("int8 weights need SDT"), std::string::npos) << error;
}

TEST_F(LinearNvrtcTest, TileGemmSpecialisationsCompile) {
  // int8 and int4, f16 and bf16 scales, per channel and in groups whose 16-code pieces share
  // a scale (16, 32, 128) or not (24); sm_80 and sm_90 cubins through ptxas. f32 scales are
  // refused: the tensor cores multiply halves.
  for (int64_t wt : {8, 9})
    for (int64_t sdt : {2, 3})
      for (int64_t gs : {0, 16, 24, 32, 128})
        compiles({"gemm_dequant",
                  {{"WT", wt}, {"SDT", sdt}, {"GS", gs}, {"TILE_M", 64}, {"TILE_N", 64}}});
  std::string source, ptx, error;
  ASSERT_TRUE(specialiseKernel({"gemm_dequant",
                                {{"WT", 8}, {"SDT", 1}, {"GS", 0}, {"TILE_M", 64}, {"TILE_N", 64}}},
                               source)
                  .isOk());
  EXPECT_FALSE(nvrtc->compile(source, "gemm_dequant_SDT1", kKernelPtxArch, ptx, error));
  EXPECT_NE(error.find("SDT must be 2 (f16) or 3 (bf16)"), std::string::npos) << error;
}

TEST_F(LinearNvrtcTest, EpilogueAndConversionSpecialisationsCompile) {
  for (int64_t act = -1; act <= 4; ++act)
    compiles({"linear_epilogue",
              {{"ACT", act},
               {"HAS_BIAS", act % 2 == 0 ? 1 : 0},
               {"BIAS_DT", act + 2 > 3 ? 1 : act + 2},
               {"HAS_RESIDUAL", act > 1 ? 1 : 0}}});
  compiles({"convert_activations", {{"WT", 2}}});
  compiles({"convert_activations", {{"WT", 3}}});
  // The plan's half activations: converted from them, read by gemv, written by both.
  compiles({"convert_activations", {{"WT", 1}, {"XT", 2}}});
  compiles({"convert_activations", {{"WT", 2}, {"XT", 3}}});
  compiles({"linear_epilogue",
            {{"ACT", 3}, {"HAS_BIAS", 0}, {"BIAS_DT", 1}, {"HAS_RESIDUAL", 0}, {"GATED", 1},
             {"OUT_DT", 2}}});
  for (int64_t wt : {1, 2, 8}) {
    KernelSpec gemv{"gemv", {{"K", 1024}, {"WT", wt}}};
    if (wt == 8)
      gemv.constants.insert(gemv.constants.end(), {{"SDT", 2}, {"GS", 0}});
    gemv.constants.insert(gemv.constants.end(), {{"ACT", -1},
                                                 {"HAS_BIAS", 0},
                                                 {"BIAS_DT", 1},
                                                 {"HAS_RESIDUAL", 1},
                                                 {"SPLIT_K", 2},
                                                 {"XT", wt == 1 ? 3 : 2}});
    compiles(gemv);
  }
  compiles({"gemv",
            {{"K", 256}, {"WT", 3}, {"ACT", 3}, {"HAS_BIAS", 0}, {"BIAS_DT", 1},
             {"HAS_RESIDUAL", 0}, {"GATED", 1}, {"SPLIT_K", 1}, {"OUT_DT", 3}}});
  // An LM head's logit epilogue: a scale alone, a scale and a cap, a negative scale (bits
  // past INT32_MAX).
  for (auto [scale, cap] : {std::pair<int64_t, int64_t>{1040187392, -1},
                            {1065353216 + 1, 1106247680}, {3212836864, 1106247680}}) {
    KernelSpec gemv{"gemv",
                    {{"K", 768},
                     {"WT", 3},
                     {"ACT", -1},
                     {"HAS_BIAS", 0},
                     {"BIAS_DT", 1},
                     {"HAS_RESIDUAL", 0},
                     {"LOGIT_SCALE_BITS", scale}}};
    KernelSpec epilogue{"linear_epilogue",
                        {{"ACT", -1},
                         {"HAS_BIAS", 0},
                         {"BIAS_DT", 1},
                         {"HAS_RESIDUAL", 0},
                         {"LOGIT_SCALE_BITS", scale}}};
    if (cap >= 0) {
      gemv.constants.push_back({"LOGIT_CAP_BITS", cap});
      epilogue.constants.push_back({"LOGIT_CAP_BITS", cap});
    }
    gemv.constants.push_back({"SPLIT_K", 1});
    compiles(gemv);
    compiles(epilogue);
  }
}

TEST_F(LinearNvrtcTest, ConversionRefusesF32Weights) {
  // f32 activations into f32 weights need no conversion; only a half input (XT) may be
  // converted to f32.
  std::string source, ptx, error;
  ASSERT_TRUE(specialiseKernel({"convert_activations", {{"WT", 1}}}, source).isOk());
  EXPECT_FALSE(nvrtc->compile(source, "convert_activations_WT1", kKernelPtxArch, ptx, error));
  EXPECT_NE(error.find("f16 or bf16"), std::string::npos) << error;
}

} // namespace
// Split-K for the reference grid (4 blocks of 8 warps on each of an H100's 132
// multiprocessors, 528 blocks): a layer whose features fill fewer blocks gets 2, 4 or 8
// warps per feature while each warp keeps 32 16-byte loads of its row. GPT-2 124M's shapes
// in f16, and its LM head; Llama-3-8B's down projection in int8; a gated linear counts its
// output features, half its rows.
TEST(LinearRules, SplitKFollowsTheLayersShape) {
  struct Case {
    int64_t out, in;
    dsp::DType weight;  // the plan's stored dtype
    bool gated;
    int64_t splits;
  };
  const Case cases[] = {
      {768, 3072, dsp::DType::f16, false, 8},     // MLP down: 96 blocks of 384 loads
      {768, 768, dsp::DType::f16, false, 2},      // attention out: 96 loads allow 2
      {2304, 768, dsp::DType::f16, false, 2},     // QKV: 288 blocks
      {3072, 768, dsp::DType::f16, false, 2},     // MLP up
      {50257, 768, dsp::DType::f16, false, 1},    // LM head: the grid is full
      {4096, 14336, dsp::DType::i8, false, 2},    // 512 blocks of 896 loads
      {768, 64, dsp::DType::f32, false, 1},       // 16 loads: too short to split
      {2 * 768, 3072, dsp::DType::f16, true, 8},  // gated: 768 features
  };
  for (const Case &c : cases) {
    PlanBuilder b;
    int x = b.tensor(dsp::DType::f32, {1, c.in});
    int w = b.weight({c.out, c.in}, c.weight);
    int scales = c.weight == dsp::DType::i8 ? b.weight({c.out, 1}) : -1;
    int y = b.tensor(dsp::DType::f32, {1, c.gated ? c.out / 2 : c.out});
    dsp::StepT &step = b.step("tfm.linear", {x, w, -1, scales}, {y});
    if (c.gated) {
      stringAttr(step, "activation", "silu");
      intAttr(step, "gated", 1);
    }
    std::vector<KernelSpec> specs;
    std::string reason;
    ASSERT_TRUE(b.run(step, specs, reason)) << reason;
    int64_t splits = -1;
    for (const auto &[name, value] : specs.at(0).constants)
      if (name == "SPLIT_K")
        splits = value;
    EXPECT_EQ(splits, c.splits) << c.out << "x" << c.in;
  }
}

} // namespace dsc::codegen
