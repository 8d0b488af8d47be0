// Kernel generation without a GPU: spec names, the transformer rules' decisions and
// decline reasons on hand-built plans, template specialisation, and NVRTC compiling to PTX
// (skipped where NVRTC cannot be loaded).
#include "codegen/AttachKernels.h"
#include "codegen/Nvrtc.h"
#include "codegen/kernels/KernelRules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

namespace dsc::codegen {
namespace {

// A one-step plan built with the object API; dims < 0 are symbolic.
class PlanBuilder {
public:
  PlanBuilder() {
    plan.options = std::make_unique<dsp::CompileOptionsT>();
    plan.options->dtype = "fp32";
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

  dsp::PlanT plan;
};

bool runRule(const dsp::PlanT &plan, const dsp::StepT &step, std::vector<KernelSpec> &specs,
             std::string &reason) {
  KernelRule rule = findKernelRule(step.op);
  EXPECT_NE(rule, nullptr) << step.op;
  if (!rule)
    return false;
  return rule(RuleInput(plan, step), specs, reason);
}

int64_t constant(const KernelSpec &spec, const std::string &name) {
  for (const auto &[n, v] : spec.constants)
    if (n == name)
      return v;
  ADD_FAILURE() << spec.kind << " has no constant " << name;
  return -1;
}

TEST(KernelSpec, NameListsKindAndConstantsInOrder) {
  KernelSpec spec{"layer_norm", {{"HIDDEN", 768}, {"SCALE_DT", 2}, {"OFFSET", -3}}};
  EXPECT_EQ(spec.name(), "layer_norm_HIDDEN768_SCALE_DT2_OFFSETm3");
}

TEST(KernelSpec, DistinctSpecsGetDistinctNames) {
  std::set<std::string> names;
  std::vector<KernelSpec> specs;
  for (int64_t hidden : {64, 640, 6, 4})
    for (int64_t dtype : {1, 2, 3})
      for (int64_t residual : {0, 1})
        specs.push_back({"rms_norm", {{"HIDDEN", hidden}, {"SCALE_DT", dtype}, {"RESIDUAL", residual}}});
  specs.push_back({"activation", {{"ACT", 1}, {"GATED", 0}}});
  specs.push_back({"activation", {{"ACT", 10}}});
  for (const KernelSpec &spec : specs)
    EXPECT_TRUE(names.insert(spec.name()).second) << "duplicate name " << spec.name();
}

TEST(KernelTemplates, EveryRuleKindHasATemplate) {
  std::vector<std::string> kinds = kernelTemplateKinds();
  for (const char *kind : {"embedding", "layer_norm", "rms_norm", "activation", "residual_add"})
    EXPECT_NE(std::find(kinds.begin(), kinds.end(), kind), kinds.end()) << kind;
  // The shared header is embedded but is not a template.
  EXPECT_NE(kernelTemplateSource("dsc_common"), nullptr);
  EXPECT_EQ(std::find(kinds.begin(), kinds.end(), "dsc_common"), kinds.end());
  EXPECT_EQ(kernelTemplateSource("no_such_kernel"), nullptr);
}

TEST(KernelTemplates, SpecialisationPrependsDefinesInOrder) {
  std::string source;
  ASSERT_TRUE(specialiseKernel({"activation", {{"ACT", 3}, {"GATED", 1}}}, source).isOk());
  EXPECT_EQ(source.rfind("#define ACT 3\n#define GATED 1\n", 0), 0u) << source.substr(0, 80);
  EXPECT_NE(source.find("extern \"C\" __global__ void activation("), std::string::npos);
  EXPECT_FALSE(specialiseKernel({"no_such_kernel", {}}, source).isOk());
}

TEST(TransformerRules, LayerNormWithFp16WeightsAndResidual) {
  PlanBuilder b;
  b.plan.options->dtype = "fp16";  // f32 weights are stored as f16
  int x = b.tensor(dsp::DType::f32, {-1, 768});
  int scale = b.tensor(dsp::DType::f32, {768}, dsp::TensorKind::weight);
  int bias = b.tensor(dsp::DType::f32, {768}, dsp::TensorKind::weight);
  int residual = b.tensor(dsp::DType::f32, {-1, 768});
  int y = b.tensor(dsp::DType::f32, {-1, 768}), sum = b.tensor(dsp::DType::f32, {-1, 768});
  dsp::StepT &step = b.step("tfm.layer_norm", {x, scale, bias, residual}, {y, sum});
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(runRule(b.plan, step, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].kind, "layer_norm");
  EXPECT_EQ(constant(specs[0], "HIDDEN"), 768);
  EXPECT_EQ(constant(specs[0], "SCALE_DT"), 2);
  EXPECT_EQ(constant(specs[0], "BIAS_DT"), 2);
  EXPECT_EQ(constant(specs[0], "RESIDUAL"), 1);
  int64_t block = constant(specs[0], "BLOCK");
  EXPECT_EQ(block % 32, 0);
  EXPECT_LE((768 + block - 1) / block, 8);
}

TEST(TransformerRules, RmsNormWithoutResidualAndBf16Scale) {
  PlanBuilder b;
  b.plan.options->dtype = "bf16";
  int x = b.tensor(dsp::DType::f32, {2, -1, 64});
  int scale = b.tensor(dsp::DType::f32, {64}, dsp::TensorKind::weight);
  int y = b.tensor(dsp::DType::f32, {2, -1, 64});
  dsp::StepT &step = b.step("tfm.rms_norm", {x, scale}, {y});
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(runRule(b.plan, step, specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name(), "rms_norm_HIDDEN64_SCALE_DT3_RESIDUAL0_BLOCK32");
}

TEST(TransformerRules, NormDeclinesADynamicHiddenSize) {
  PlanBuilder b;
  int x = b.tensor(dsp::DType::f32, {4, -1});
  int scale = b.tensor(dsp::DType::f32, {-1}, dsp::TensorKind::weight);
  int y = b.tensor(dsp::DType::f32, {4, -1});
  dsp::StepT &step = b.step("tfm.layer_norm", {x, scale}, {y});
  std::vector<KernelSpec> specs;
  std::string reason;
  EXPECT_FALSE(runRule(b.plan, step, specs, reason));
  EXPECT_EQ(reason, "the hidden size is dynamic");
  EXPECT_TRUE(specs.empty());
}

TEST(TransformerRules, ElementwiseDeclinesNonF32Activations) {
  PlanBuilder b;
  int a = b.tensor(dsp::DType::f16, {8, 64}), c = b.tensor(dsp::DType::f16, {8, 64});
  int y = b.tensor(dsp::DType::f16, {8, 64});
  dsp::StepT &step = b.step("tfm.residual_add", {a, c}, {y});
  std::vector<KernelSpec> specs;
  std::string reason;
  EXPECT_FALSE(runRule(b.plan, step, specs, reason));
  EXPECT_NE(reason.find("f16"), std::string::npos) << reason;
}

TEST(TransformerRules, ActivationKindsAndUnknownKind) {
  PlanBuilder b;
  int a = b.tensor(dsp::DType::f32, {8, 64}), g = b.tensor(dsp::DType::f32, {8, 64});
  int y = b.tensor(dsp::DType::f32, {8, 64});
  dsp::StepT &gated = b.step("tfm.gated_act", {a, g}, {y});
  PlanBuilder::stringAttr(gated, "kind", "silu");
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(runRule(b.plan, gated, specs, reason)) << reason;
  EXPECT_EQ(specs.at(0).name(), "activation_ACT3_GATED1");

  dsp::StepT &odd = b.step("tfm.activation", {a}, {y});
  PlanBuilder::stringAttr(odd, "kind", "swish2");
  specs.clear();
  EXPECT_FALSE(runRule(b.plan, odd, specs, reason));
  EXPECT_NE(reason.find("swish2"), std::string::npos) << reason;
}

TEST(TransformerRules, EmbeddingTakesTheTablesStoredDtype) {
  PlanBuilder b;
  b.plan.options->dtype = "fp16";
  int ids = b.tensor(dsp::DType::i64, {1, -1});
  int table = b.tensor(dsp::DType::f32, {300, 64}, dsp::TensorKind::weight);
  int y = b.tensor(dsp::DType::f32, {1, -1, 64});
  dsp::StepT &step = b.step("tfm.embedding", {ids, table}, {y});
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(runRule(b.plan, step, specs, reason)) << reason;
  EXPECT_EQ(constant(specs.at(0), "TABLE_DT"), 2);
  EXPECT_EQ(constant(specs.at(0), "ID_DT"), 5);
  EXPECT_EQ(constant(specs.at(0), "HIDDEN"), 64);
}

// tfm.moe (moeRule): x [tokens, 64], logits [tokens, 8], 8 experts of [2 * 32, 64] and
// [64, 32] in `weight` (i8/u8 with f16 scales [rows, 4] and [rows, 2]), optional biases and
// shared expert.
struct MoeStep {
  PlanBuilder b;
  dsp::StepT *step = nullptr;
  MoeStep(dsp::DType weight, bool biases = false, bool shared = false,
          dsp::DType input = dsp::DType::f32) {
    const bool quantized = weight == dsp::DType::i8 || weight == dsp::DType::u8;
    const int64_t packed = weight == dsp::DType::u8 ? 2 : 1;
    auto w = [&](std::vector<int64_t> dims, dsp::DType type) {
      return b.tensor(type, std::move(dims), dsp::TensorKind::weight);
    };
    std::vector<int32_t> inputs = {b.tensor(input, {-1, 64}), b.tensor(dsp::DType::f32, {-1, 8}),
                                   w({8 * 64, 64 / packed}, weight),
                                   w({8 * 64, 32 / packed}, weight), -1, -1, -1, -1, -1, -1, -1};
    if (biases) {
      inputs[4] = w({8 * 64}, dsp::DType::f32);
      inputs[5] = w({8 * 64}, dsp::DType::f32);
    }
    if (shared) {
      inputs[6] = w({2 * 16, 64}, dsp::DType::f32);
      inputs[7] = w({64, 16}, dsp::DType::f32);
      inputs[8] = w({1, 64}, dsp::DType::bf16);
    }
    if (quantized) {
      inputs[9] = w({8 * 64, 4}, dsp::DType::f16);
      inputs[10] = w({8 * 64, 2}, dsp::DType::f16);
    }
    step = &b.step("tfm.moe", inputs, {b.tensor(dsp::DType::f32, {-1, 64})});
    addAttr(*step, "top_k", dsp::AttrKind::int_, 2);
    addAttr(*step, "normalize", dsp::AttrKind::int_, 1);
    PlanBuilder::stringAttr(*step, "scoring", "softmax");
    PlanBuilder::stringAttr(*step, "activation", "silu");
  }
  static void addAttr(dsp::StepT &step, const std::string &name, dsp::AttrKind kind,
                      int64_t i = 0, float f = 0) {
    auto a = std::make_unique<dsp::AttrT>();
    a->name = name;
    a->kind = kind;
    a->i = i;
    a->f = f;
    step.attrs.push_back(std::move(a));
  }
  bool run(std::vector<KernelSpec> &specs, std::string &reason) {
    return runRule(b.plan, *step, specs, reason);
  }
};

std::vector<std::string> kindsOf(const std::vector<KernelSpec> &specs) {
  std::vector<std::string> kinds;
  for (const KernelSpec &spec : specs)
    kinds.push_back(spec.kind);
  return kinds;
}

TEST(TransformerRules, MoeKernelsInTheirSlots) {
  MoeStep moe(dsp::DType::f32);
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(moe.run(specs, reason)) << reason;
  EXPECT_EQ(kindsOf(specs), (std::vector<std::string>{"moe_route", "moe_experts", "moe_experts",
                                                       "moe_combine"}));
  EXPECT_EQ(constant(specs[0], "EXPERTS"), 8);
  EXPECT_EQ(constant(specs[0], "TOP_K"), 2);
  EXPECT_EQ(constant(specs[0], "NORMALIZE"), 1);
  EXPECT_EQ(constant(specs[0], "SIGMOID"), 0);
  EXPECT_EQ(constant(specs[1], "GATE_UP"), 1);
  EXPECT_EQ(constant(specs[1], "ACT"), 3);
  EXPECT_EQ(constant(specs[2], "GATE_UP"), 0);
  EXPECT_EQ(constant(specs[2], "HIDDEN"), 64);
  EXPECT_EQ(constant(specs[1], "WT"), 1);
  EXPECT_EQ(constant(specs[3], "SHARED"), 0);
}

TEST(TransformerRules, MoeClampedSwigluBiasesSharedExpertAndQuantizedExperts) {
  MoeStep gptOss(dsp::DType::bf16, /*biases=*/true);
  MoeStep::addAttr(*gptOss.step, "swiglu_alpha", dsp::AttrKind::float_, 0, 1.702f);
  MoeStep::addAttr(*gptOss.step, "swiglu_limit", dsp::AttrKind::float_, 0, 7.0f);
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(gptOss.run(specs, reason)) << reason;
  EXPECT_EQ(constant(specs[1], "CLAMPED"), 1);
  EXPECT_EQ(constant(specs[1], "LIMIT_BITS"), 0x40e00000);  // 7.0f
  EXPECT_EQ(constant(specs[1], "BIAS_DT"), 1);
  EXPECT_EQ(constant(specs[2], "BIAS_DT"), 1);
  EXPECT_EQ(constant(specs[2], "CLAMPED"), 0);  // down has no activation
  EXPECT_EQ(constant(specs[1], "WT"), 3);

  MoeStep qwen2(dsp::DType::f32, false, /*shared=*/true);
  specs.clear();
  ASSERT_TRUE(qwen2.run(specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 6u);
  EXPECT_EQ(constant(specs[3], "SHARED"), 1);
  EXPECT_EQ(constant(specs[3], "SHARED_GATE_DT"), 3);
  EXPECT_EQ(constant(specs[4], "SHARED"), 1);
  EXPECT_EQ(constant(specs[4], "GATE_UP"), 1);
  EXPECT_EQ(constant(specs[5], "GATE_UP"), 0);

  for (dsp::DType weight : {dsp::DType::i8, dsp::DType::u8}) {
    MoeStep quantized(weight);
    specs.clear();
    ASSERT_TRUE(quantized.run(specs, reason)) << reason;
    EXPECT_EQ(constant(specs[1], "WT"), static_cast<int64_t>(weight));
    EXPECT_EQ(constant(specs[1], "SDT"), 2);
    EXPECT_EQ(constant(specs[2], "SDT"), 2);
  }
}

TEST(TransformerRules, MoeDeclinesWithReasons) {
  auto declines = [](MoeStep &moe, const std::string &expected) {
    std::vector<KernelSpec> specs;
    std::string reason;
    EXPECT_FALSE(moe.run(specs, reason)) << expected;
    EXPECT_NE(reason.find(expected), std::string::npos) << reason;
    EXPECT_TRUE(specs.empty());
  };
  MoeStep half(dsp::DType::f32, false, false, dsp::DType::f16);
  declines(half, "the input is f16");
  MoeStep wide(dsp::DType::f32);
  wide.step->attrs[0]->i = 17;  // top_k
  declines(wide, "top_k 17 is not in [1, 8]");
  MoeStep unscaled(dsp::DType::i8);
  unscaled.step->inputs[9] = -1;
  declines(unscaled, "gate_up is quantized without scales");
  MoeStep scoring(dsp::DType::f32);
  scoring.step->attrs[2]->s = "sparsemax";
  declines(scoring, "unknown scoring 'sparsemax'");
}

TEST(AttachKernels, ParsesArchLists) {
  std::vector<std::string> archs;
  ASSERT_TRUE(parseArchList("sm_80,sm_90,sm_80", archs).isOk());
  EXPECT_EQ(archs, (std::vector<std::string>{"sm_80", "sm_90"}));
  ASSERT_TRUE(parseArchList("none", archs).isOk());
  EXPECT_TRUE(archs.empty());
  EXPECT_FALSE(parseArchList("sm80", archs).isOk());
  EXPECT_FALSE(parseArchList("sm_80,", archs).isOk());
}

TEST(AttachKernels, DeduplicatesSpecsAndCountsDeclines) {
  PlanBuilder b;
  int x = b.tensor(dsp::DType::f32, {4, 64}), scale = b.tensor(dsp::DType::f32, {64},
                                                                 dsp::TensorKind::weight);
  int y1 = b.tensor(dsp::DType::f32, {4, 64}), y2 = b.tensor(dsp::DType::f32, {4, 64});
  int dynamic = b.tensor(dsp::DType::f32, {4, -1});
  b.step("tfm.rms_norm", {x, scale}, {y1});
  b.step("tfm.rms_norm", {y1, scale}, {y2});
  b.step("tfm.rms_norm", {dynamic, scale}, {y2});
  b.step("Shape", {x}, {y2});  // no rule: neither counted nor declined
  AttachKernelsOptions options;
  options.archs = {"sm_80"};
  options.compile = false;
  AttachKernelsReport report;
  ASSERT_TRUE(attachKernels(b.plan, options, report).isOk());
  EXPECT_EQ(report.steps, 3);
  EXPECT_EQ(report.stepsWithKernels, 2);
  EXPECT_EQ(report.declined, 1);
  ASSERT_EQ(b.plan.kernels.size(), 1u);
  EXPECT_EQ(b.plan.kernels[0]->kind, "rms_norm");
  EXPECT_EQ(b.plan.kernels[0]->entry, "rms_norm");
  EXPECT_EQ(b.plan.programs[0]->steps[0]->kernels, std::vector<int32_t>{0});
  EXPECT_EQ(b.plan.programs[0]->steps[1]->kernels, std::vector<int32_t>{0});
  EXPECT_TRUE(b.plan.programs[0]->steps[2]->kernels.empty());
  ASSERT_EQ(report.declines.size(), 1u);
  EXPECT_EQ(report.declines[0], "tfm.rms_norm: the hidden size is dynamic");

  // --arch none: a CPU-only plan, whatever was attached before.
  options.archs.clear();
  ASSERT_TRUE(attachKernels(b.plan, options, report).isOk());
  EXPECT_TRUE(b.plan.kernels.empty());
  EXPECT_TRUE(b.plan.programs[0]->steps[0]->kernels.empty());
}

// NVRTC, where it can be loaded (the CUDA toolkit or its NVRTC library alone).
class NvrtcTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string error;
    nvrtc = Nvrtc::instance(error);
    if (!nvrtc)
      GTEST_SKIP() << error;
  }
  const Nvrtc *nvrtc = nullptr;
};

TEST_F(NvrtcTest, CompilesATinyKernelToPtx) {
  std::string ptx, error;
  const char *source = "#include \"dsc_common.cuh\"\n"
                       "extern \"C\" __global__ void tiny(float *x, const unsigned short *h) {\n"
                       "  x[threadIdx.x] = dsc_f16_to_f32(h[threadIdx.x]);\n"
                       "}\n";
  ASSERT_TRUE(nvrtc->compile(source, "tiny", "compute_80", ptx, error)) << error;
  EXPECT_NE(ptx.find(".entry tiny"), std::string::npos) << ptx.substr(0, 400);
  EXPECT_NE(ptx.find(".target sm_80"), std::string::npos);
  EXPECT_EQ(ptx.find('\0'), std::string::npos);
  std::string cubin;
  ASSERT_TRUE(nvrtc->compile(source, "tiny", "sm_90", cubin, error)) << error;
  EXPECT_EQ(cubin.compare(0, 4, "\x7f" "ELF"), 0);
}

TEST_F(NvrtcTest, ReportsTheCompilerLog) {
  std::string ptx, error;
  EXPECT_FALSE(nvrtc->compile("extern \"C\" __global__ void broken() { undeclared(); }",
                              "broken", "compute_80", ptx, error));
  EXPECT_NE(error.find("undeclared"), std::string::npos) << error;
}

// The MoE templates in the specialisations the fixtures do not reach: 128 experts routed by
// sigmoid, top 8; GPT-OSS's clamped bf16 experts with biases; int4 experts with bf16 scales;
// a shared expert and its combine.
TEST_F(NvrtcTest, MoeSpecialisationsCompile) {
  std::vector<KernelSpec> specs = {
      {"moe_route", {{"EXPERTS", 128}, {"TOP_K", 8}, {"SIGMOID", 1}, {"NORMALIZE", 0},
                     {"BLOCK", 256}}},
      {"moe_experts", {{"GATE_UP", 1}, {"HIDDEN", 2880}, {"WT", 3}, {"SDT", 0}, {"ACT", 3},
                       {"CLAMPED", 1}, {"ALPHA_BITS", 0x3fd9db23}, {"LIMIT_BITS", 0x40e00000},
                       {"BIAS_DT", 1}, {"SHARED", 0}, {"BLOCK", 256}, {"ROWS", 4}}},
      {"moe_experts", {{"GATE_UP", 0}, {"HIDDEN", 2048}, {"WT", 9}, {"SDT", 3}, {"ACT", -1},
                       {"CLAMPED", 0}, {"BIAS_DT", 0}, {"SHARED", 0}, {"BLOCK", 256},
                       {"ROWS", 4}}},
      {"moe_experts", {{"GATE_UP", 1}, {"HIDDEN", 2048}, {"WT", 2}, {"SDT", 0}, {"ACT", 3},
                       {"CLAMPED", 0}, {"BIAS_DT", 0}, {"SHARED", 1}, {"BLOCK", 256},
                       {"ROWS", 4}}},
      {"moe_combine", {{"HIDDEN", 2048}, {"TOP_K", 8}, {"SHARED", 1}, {"BLOCK", 256},
                       {"SHARED_GATE_DT", 2}}}};
  for (const KernelSpec &spec : specs) {
    std::string source, error;
    ASSERT_TRUE(specialiseKernel(spec, source).isOk()) << spec.name();
    CompiledKernel compiled;
    ASSERT_TRUE(compileKernelCached(*nvrtc, source, spec.name(), "compute_80",
                                    {"sm_80", "sm_90"}, compiled, error))
        << spec.name() << ": " << error;
    EXPECT_NE(compiled.ptx.find(".entry " + spec.kind), std::string::npos) << spec.name();
    ASSERT_EQ(compiled.binaries.size(), 2u) << spec.name();
  }
}

TEST_F(NvrtcTest, EveryTransformerSpecialisationCompilesAndIsCached) {
  // A private cache folder: the second round must be served from it.
  std::string cache = ::testing::TempDir() + "dsc-kernel-cache-test";
  std::filesystem::remove_all(cache);
  ASSERT_EQ(setenv("DSC_CACHE_DIR", cache.c_str(), 1), 0);
  std::vector<KernelSpec> specs = {
      {"embedding", {{"HIDDEN", 64}, {"TABLE_DT", 3}, {"ID_DT", 6}, {"BLOCK", 64}}},
      // Gemma's sqrt(hidden) scale, and a negative one (bits past INT32_MAX).
      {"embedding",
       {{"HIDDEN", 64}, {"TABLE_DT", 3}, {"ID_DT", 6}, {"BLOCK", 64}, {"SCALE_BITS", 1085605514}}},
      {"embedding",
       {{"HIDDEN", 64}, {"TABLE_DT", 1}, {"ID_DT", 5}, {"BLOCK", 64}, {"SCALE_BITS", 3212836864}}},
      {"layer_norm",
       {{"HIDDEN", 100}, {"SCALE_DT", 2}, {"BIAS_DT", 0}, {"RESIDUAL", 1}, {"BLOCK", 32}}},
      {"rms_norm", {{"HIDDEN", 4096}, {"SCALE_DT", 1}, {"RESIDUAL", 0}, {"BLOCK", 512}}},
      {"activation", {{"ACT", 0}, {"GATED", 1}}},
      {"residual_add", {}}};
  for (int round = 0; round < 2; ++round) {
    for (const KernelSpec &spec : specs) {
      std::string source, error;
      ASSERT_TRUE(specialiseKernel(spec, source).isOk());
      CompiledKernel compiled;
      ASSERT_TRUE(compileKernelCached(*nvrtc, source, spec.name(), "compute_80",
                                      {"sm_80", "sm_90"}, compiled, error))
          << error;
      EXPECT_NE(compiled.ptx.find(".entry " + spec.kind), std::string::npos) << spec.name();
      ASSERT_EQ(compiled.binaries.size(), 2u);
      EXPECT_EQ(compiled.binaries[1].first, "sm_90");
      EXPECT_FALSE(compiled.binaries[1].second.empty());
    }
    // PTX and two cubins per kernel, each its own entry (temporary files renamed away).
    size_t entries = 0;
    for (const auto &entry : std::filesystem::directory_iterator(cache)) {
      EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
      ++entries;
    }
    EXPECT_EQ(entries, specs.size() * 3) << "round " << round;
  }
  unsetenv("DSC_CACHE_DIR");
}

} // namespace
} // namespace dsc::codegen
