// The kernels of tfm.linear and tfm.lm_head without a GPU: the rule's slots, constants and
// declines on hand-built plans (codegen/kernels/LinearRules.cpp), and NVRTC compiling the
// templates (gemv, linear_epilogue, convert_activations) in a spread of specialisations to
// PTX and to sm_80 and sm_90 cubins (which runs ptxas on them): K that is and is not a
// multiple of the 16-byte vector width, every weight dtype, every activation, with and
// without bias and residual. NVRTC tests skip where it cannot be loaded.
#include "codegen/AttachKernels.h"
#include "codegen/Nvrtc.h"
#include "codegen/kernels/KernelRules.h"

#include <gtest/gtest.h>

#include <string>

namespace dsc::codegen {
namespace {

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

  static void stringAttr(dsp::StepT &step, const std::string &name, const std::string &value) {
    auto a = std::make_unique<dsp::AttrT>();
    a->name = name;
    a->kind = dsp::AttrKind::string_;
    a->s = value;
    step.attrs.push_back(std::move(a));
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
  PlanBuilder::stringAttr(step, "activation", "gelu_tanh");
  PlanBuilder::stringAttr(step, "parallel", "column");
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(step, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].name(), "gemv_K768_WT2_ACT1_HAS_BIAS1_BIAS_DT2_HAS_RESIDUAL1");
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
  EXPECT_EQ(specs[0].name(), "gemv_K64_WT1_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0");
  EXPECT_EQ(specs[1].name(), "linear_epilogue_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0");
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
  EXPECT_EQ(specs[0].name(), "gemv_K64_WT3_ACTm1_HAS_BIAS0_BIAS_DT1_HAS_RESIDUAL0");
  EXPECT_EQ(specs[2].name(), "convert_activations_WT3");
}

TEST(LinearRules, BiasKeepsItsOwnStoredDtype) {
  PlanBuilder b;
  int x = b.tensor(dsp::DType::f32, {-1, 64}), w = b.weight({64, 64}, dsp::DType::bf16);
  int bias = b.weight({64});
  int y = b.tensor(dsp::DType::f32, {-1, 64});
  dsp::StepT &step = b.step("tfm.linear", {x, w, bias}, {y});
  PlanBuilder::stringAttr(step, "activation", "none");
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(step, specs, reason)) << reason;
  EXPECT_EQ(specs.at(0).name(), "gemv_K64_WT3_ACTm1_HAS_BIAS1_BIAS_DT1_HAS_RESIDUAL0");
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
  PlanBuilder::stringAttr(odd, "activation", "swish2");
  EXPECT_FALSE(b.run(odd, specs, reason));
  EXPECT_NE(reason.find("swish2"), std::string::npos) << reason;

  int xHalf = b.tensor(dsp::DType::f16, {-1, 64}), yHalf = b.tensor(dsp::DType::f16, {-1, 64});
  EXPECT_FALSE(b.run(b.step("tfm.linear", {xHalf, w}, {yHalf}), specs, reason));
  EXPECT_NE(reason.find("f16"), std::string::npos) << reason;
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
  // large for 8 rows to be staged. Each activation (-1..4) appears twice.
  const int64_t ks[] = {64, 768, 2050, 4100};
  int variant = 0;
  for (int64_t k : ks)
    for (int64_t wt : {1, 2, 3}) {
      int64_t act = variant % 6 - 1, hasBias = variant % 2, hasResidual = (variant / 2) % 2;
      int64_t biasType = hasBias ? (variant % 3) + 1 : 1;
      compiles({"gemv",
                {{"K", k},
                 {"WT", wt},
                 {"ACT", act},
                 {"HAS_BIAS", hasBias},
                 {"BIAS_DT", biasType},
                 {"HAS_RESIDUAL", hasResidual}}});
      ++variant;
    }
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
}

TEST_F(LinearNvrtcTest, ConversionRefusesF32Weights) {
  std::string source, ptx, error;
  ASSERT_TRUE(specialiseKernel({"convert_activations", {{"WT", 1}}}, source).isOk());
  EXPECT_FALSE(nvrtc->compile(source, "convert_activations_WT1", kKernelPtxArch, ptx, error));
  EXPECT_NE(error.find("f16 or bf16"), std::string::npos) << error;
}

} // namespace
} // namespace dsc::codegen
