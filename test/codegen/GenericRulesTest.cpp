// The generic path's kernel rules without a GPU (codegen/kernels/GenericRules.cpp): their
// specs and their declines, with the reasons, on hand-built plans; and NVRTC compiling every
// generic_* template in a spread of specialisations to PTX and to sm_80 and sm_90 cubins
// (ptxas), skipped where NVRTC cannot be loaded. The templates' host round trips are
// GenericKernelsTest.cpp.
#include "codegen/AttachKernels.h"
#include "codegen/Nvrtc.h"
#include "codegen/kernels/KernelRules.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace dsc::codegen {
namespace {

// ---- rules: specs and declines ---------------------------------------------------------------

class RulePlan {
public:
  RulePlan() {
    plan.options = std::make_unique<dsp::CompileOptionsT>();
    plan.options->dtype = "fp16";
    plan.programs.push_back(std::make_unique<dsp::ProgramT>());
  }
  int tensor(dsp::DType dtype, std::vector<int64_t> dims,
             dsp::TensorKind kind = dsp::TensorKind::activation) {
    auto t = std::make_unique<dsp::TensorT>();
    t->dtype = dtype;
    t->kind = kind;
    for (int64_t d : dims) {
      auto dim = std::make_unique<dsp::DimT>();
      dim->size = d;
      t->shape.push_back(std::move(dim));
    }
    if (kind == dsp::TensorKind::weight)
      t->weight_index = 0;
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
  bool run(const dsp::StepT &step, std::vector<KernelSpec> &specs, std::string &reason) {
    KernelRule rule = findKernelRule(step.op);
    EXPECT_NE(rule, nullptr) << step.op;
    return rule && rule(RuleInput(plan, step), specs, reason);
  }
  dsp::PlanT plan;
};

TEST(GenericRules, SliceNeedsItsStartsOnTheHost) {
  RulePlan p;
  int x = p.tensor(dsp::DType::i64, {2, 9});
  int mask = p.tensor(dsp::DType::i64, {2, 9}, dsp::TensorKind::input);
  // ends from Shape -> Gather over constants: host-known; starts from a program input: not.
  int shape = p.tensor(dsp::DType::i64, {2});
  int index = p.tensor(dsp::DType::i64, {1}, dsp::TensorKind::constant);
  int ends = p.tensor(dsp::DType::i64, {1});
  int axes = p.tensor(dsp::DType::i64, {1}, dsp::TensorKind::constant);
  int y = p.tensor(dsp::DType::i64, {2, 3});
  p.step("Shape", {mask}, {shape});
  p.step("Gather", {shape, index}, {ends});
  int starts = p.tensor(dsp::DType::i64, {1});
  p.step("ReduceMax", {mask}, {starts});  // computed from device data
  dsp::StepT &good = p.step("Slice", {x, axes, ends, axes}, {y});
  dsp::StepT &bad = p.step("Slice", {x, starts, ends, axes}, {y});
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(p.run(good, specs, reason)) << reason;
  EXPECT_EQ(specs.at(0).name(), "generic_copy_ES8_RANK2");
  specs.clear();
  EXPECT_FALSE(p.run(bad, specs, reason));
  EXPECT_EQ(reason, "input 1 (starts, ends, axes or steps) is not known on the host");
}

TEST(GenericRules, DeclinesWhatTheKernelsDoNotDoExactly) {
  RulePlan p;
  std::vector<KernelSpec> specs;
  std::string reason;
  int a = p.tensor(dsp::DType::i64, {4}), b = p.tensor(dsp::DType::i64, {4});
  int c = p.tensor(dsp::DType::i64, {4});
  EXPECT_FALSE(p.run(p.step("Div", {a, b}, {c}), specs, reason));
  EXPECT_NE(reason.find("division by zero"), std::string::npos) << reason;

  // fp16-stored weights reach generic steps converted to their f32 tensor dtype.
  int table = p.tensor(dsp::DType::f32, {300, 64}, dsp::TensorKind::weight);
  int rows = p.tensor(dsp::DType::f32, {4, 64});
  ASSERT_TRUE(p.run(p.step("Gather", {table, a}, {rows}), specs, reason)) << reason;
  EXPECT_EQ(specs.back().name(), "generic_gather_ES4_IDX5");
  int halfRows = p.tensor(dsp::DType::f16, {4, 64});
  EXPECT_FALSE(p.run(p.step("Gather", {table, a}, {halfRows}), specs, reason));
  EXPECT_EQ(reason, "the input is held as f32 on the device, the output is f16");

  int x = p.tensor(dsp::DType::f32, {4, 8}), y = p.tensor(dsp::DType::f32, {4, 8});
  dsp::StepT &softmax = p.step("Softmax", {x}, {y});
  auto axis = std::make_unique<dsp::AttrT>();
  axis->name = "axis";
  axis->i = 0;
  softmax.attrs.push_back(std::move(axis));
  EXPECT_FALSE(p.run(softmax, specs, reason));
  EXPECT_NE(reason.find("last axis"), std::string::npos) << reason;
  EXPECT_TRUE(p.run(p.step("LogSoftmax", {x}, {y}), specs, reason)) << reason;
  EXPECT_EQ(specs.back().name(), "generic_softmax_LOG1_BLOCK256");

  int integers = p.tensor(dsp::DType::i64, {2, 2});
  EXPECT_FALSE(p.run(p.step("MatMul", {integers, integers}, {integers}), specs, reason));
  EXPECT_EQ(reason, "the kernel takes f32, not i64");
  int matrix = p.tensor(dsp::DType::f32, {3, 3});
  int stacked = p.tensor(dsp::DType::f32, {2, 1, 2, 1, 2, 3, 3});
  EXPECT_FALSE(p.run(p.step("MatMul", {matrix, stacked}, {stacked}), specs, reason));
  EXPECT_NE(reason.find("rank 7"), std::string::npos) << reason;

  int big = p.tensor(dsp::DType::f32, {1, 2, 1, 2, 1, 2, 2});
  EXPECT_FALSE(p.run(p.step("Add", {big, big}, {big}), specs, reason));
  EXPECT_NE(reason.find("rank 7"), std::string::npos) << reason;

  int d = p.tensor(dsp::DType::f64, {4});
  EXPECT_FALSE(p.run(p.step("Cast", {d}, {x}), specs, reason));
  EXPECT_EQ(reason, "no kernel casting f64 to f32");

  int dyn = p.tensor(dsp::DType::f32, {}, dsp::TensorKind::dynamic);
  EXPECT_FALSE(p.run(p.step("Transpose", {dyn}, {dyn}), specs, reason));
  EXPECT_NE(reason.find("dynamic"), std::string::npos) << reason;

  int flags = p.tensor(dsp::DType::bool_, {4});
  EXPECT_FALSE(p.run(p.step("Add", {flags, flags}, {flags}), specs, reason));
  EXPECT_EQ(reason, "no bool kernel for Add");

  // Reduction axes on the device are fine with keepdims, not without.
  int axes = p.tensor(dsp::DType::i64, {1}, dsp::TensorKind::input);
  int reduced = p.tensor(dsp::DType::f32, {4});
  dsp::StepT &dropDims = p.step("ReduceSum", {x, axes}, {reduced});
  auto keepdims = std::make_unique<dsp::AttrT>();
  keepdims->name = "keepdims";
  keepdims->i = 0;
  dropDims.attrs.push_back(std::move(keepdims));
  EXPECT_FALSE(p.run(dropDims, specs, reason));
  EXPECT_EQ(reason, "the axes are not known on the host and keepdims is 0");
}


// The router's ops: TopK and OneHot have kernels for what a router computes; NonZero (a
// shape only the data gives) and ScatterElements (an index out of range must be an error)
// stay on the host reference, with their reasons in the plan.
TEST(GenericRules, RoutingOpsKernelsAndDeclines) {
  RulePlan p;
  std::vector<KernelSpec> specs;
  std::string reason;
  int probs = p.tensor(dsp::DType::f32, {6, 8}), k = p.tensor(dsp::DType::i64, {1});
  int top = p.tensor(dsp::DType::f32, {6, 2}), chosen = p.tensor(dsp::DType::i64, {6, 2});
  ASSERT_TRUE(p.run(p.step("TopK", {probs, k}, {top, chosen}), specs, reason)) << reason;
  EXPECT_EQ(specs.back().name(), "generic_topk_DT1_LARGEST1");
  int half = p.tensor(dsp::DType::f16, {6, 8}), halfTop = p.tensor(dsp::DType::f16, {6, 2});
  EXPECT_FALSE(p.run(p.step("TopK", {half, k}, {halfTop, chosen}), specs, reason));
  EXPECT_EQ(reason, "no kernel for f16");

  int depth = p.tensor(dsp::DType::i64, {}), onOff = p.tensor(dsp::DType::i64, {2});
  int mask = p.tensor(dsp::DType::i64, {6, 2, 8});
  ASSERT_TRUE(p.run(p.step("OneHot", {chosen, depth, onOff}, {mask}), specs, reason)) << reason;
  EXPECT_EQ(specs.back().name(), "generic_onehot_ES8_IDX5");
  int floatIndices = p.tensor(dsp::DType::f32, {6, 2});
  EXPECT_FALSE(p.run(p.step("OneHot", {floatIndices, depth, onOff}, {mask}), specs, reason));
  EXPECT_EQ(reason, "indices are f32, not i64 or i32");

  int rows = p.tensor(dsp::DType::i64, {}, dsp::TensorKind::dynamic);
  EXPECT_FALSE(p.run(p.step("NonZero", {mask}, {rows}), specs, reason));
  EXPECT_NE(reason.find("count of non-zero"), std::string::npos) << reason;
  int data = p.tensor(dsp::DType::f32, {6, 8});
  EXPECT_FALSE(p.run(p.step("ScatterElements", {data, chosen, top}, {data}), specs, reason));
  EXPECT_NE(reason.find("out of range must be an error"), std::string::npos) << reason;
}
// ---- NVRTC ----------------------------------------------------------------------------------

class GenericNvrtcTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string error;
    nvrtc = Nvrtc::instance(error);
    if (!nvrtc)
      GTEST_SKIP() << error;
  }
  const Nvrtc *nvrtc = nullptr;
};

TEST_F(GenericNvrtcTest, EveryTemplateCompilesForSm80AndSm90) {
  std::vector<KernelSpec> specs;
  for (int64_t op = 1; op <= 17; ++op)
    if (op != 14)
      specs.push_back({"generic_unary", {{"OP", op}, {"DT", 1}}});
  specs.push_back({"generic_unary", {{"OP", 14}, {"DT", 10}}});
  specs.push_back({"generic_unary", {{"OP", 1}, {"DT", 5}}});
  specs.push_back({"generic_unary", {{"OP", 2}, {"DT", 6}}});
  for (int64_t op : {1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13})
    specs.push_back({"generic_binary", {{"OP", op}, {"DT", 1}, {"DT_B", 1}, {"RANK", 4}}});
  for (int64_t op : {1, 2, 3, 7, 8, 9, 10, 11, 12, 13})
    specs.push_back({"generic_binary", {{"OP", op}, {"DT", 5}, {"DT_B", 5}, {"RANK", 2}}});
  for (int64_t a : {1, 5, 6})
    for (int64_t b : {1, 5, 6})
      specs.push_back({"generic_binary", {{"OP", 5}, {"DT", a}, {"DT_B", b}, {"RANK", 1}}});
  specs.push_back(
      {"generic_binary", {{"OP", 6}, {"DT", 1}, {"DT_B", 1}, {"RANK", 0}, {"FMOD", 1}}});
  for (int64_t op : {9, 14, 15})
    specs.push_back({"generic_binary", {{"OP", op}, {"DT", 10}, {"DT_B", 10}, {"RANK", 6}}});
  for (int64_t es : {1, 2, 4, 8}) {
    specs.push_back({"generic_copy", {{"ES", es}, {"RANK", 6}}});
    specs.push_back({"generic_where", {{"ES", es}, {"RANK", 3}}});
    specs.push_back({"generic_gather", {{"ES", es}, {"IDX", es == 4 ? 6 : 5}}});
  }
  specs.push_back({"generic_copy", {{"ES", 4}, {"RANK", 1}}});
  for (int64_t from : {1, 2, 3, 5, 6, 9, 10})
    for (int64_t to : {1, 2, 3, 5, 6, 9, 10})
      if (from != to)
        specs.push_back({"generic_cast", {{"FROM", from}, {"TO", to}}});
  for (int64_t dt : {1, 5, 6})
    for (int64_t flags : {0, 1, 2, 3})
      specs.push_back({"generic_cumsum",
                       {{"DT", dt}, {"EXCLUSIVE", flags & 1}, {"REVERSE", flags >> 1}}});
  for (int64_t log : {0, 1})
    specs.push_back({"generic_softmax", {{"LOG", log}, {"BLOCK", 256}}});
  for (int64_t op : {1, 2, 3})
    for (int64_t dt : {1, 5, 6})
      specs.push_back({"generic_reduce", {{"OP", op}, {"DT", dt}, {"RANK", 3}}});
  for (int64_t parts : {1, 3, 8})
    specs.push_back({"generic_split", {{"ES", parts == 3 ? 2 : 4}, {"PARTS", parts}}});
  for (int64_t es : {1, 2, 4, 8}) {
    specs.push_back({"generic_gather_nd", {{"ES", es}}});
    specs.push_back({"generic_gather_elements", {{"ES", es}, {"IDX", 5}, {"RANK", 2}}});
  }
  specs.push_back({"generic_gather_elements", {{"ES", 4}, {"IDX", 6}, {"RANK", 6}}});
  for (int64_t batchRank : {0, 2, 4})
    specs.push_back({"generic_matmul", {{"BATCH_RANK", batchRank}}});
  for (int64_t dt : {1, 5, 6})
    for (int64_t largest : {0, 1})
      specs.push_back({"generic_topk", {{"DT", dt}, {"LARGEST", largest}}});
  for (int64_t es : {1, 2, 4, 8})
    for (int64_t idx : {5, 6})
      specs.push_back({"generic_onehot", {{"ES", es}, {"IDX", idx}}});

  std::set<std::string> kinds;
  for (const KernelSpec &spec : specs) {
    std::string source, error;
    ASSERT_TRUE(specialiseKernel(spec, source).isOk()) << spec.kind;
    CompiledKernel compiled;
    ASSERT_TRUE(compileKernelCached(*nvrtc, source, spec.name(), "compute_80",
                                    {"sm_80", "sm_90"}, compiled, error))
        << spec.name() << ":\n" << error;
    EXPECT_NE(compiled.ptx.find(".entry " + spec.kind), std::string::npos) << spec.name();
    ASSERT_EQ(compiled.binaries.size(), 2u) << spec.name();
    EXPECT_FALSE(compiled.binaries[0].second.empty()) << spec.name();
    EXPECT_FALSE(compiled.binaries[1].second.empty()) << spec.name();
    kinds.insert(spec.kind);
  }
  // Every generic_* template is covered.
  for (const std::string &kind : kernelTemplateKinds()) {
    if (kind.rfind("generic_", 0) == 0) {
      EXPECT_TRUE(kinds.count(kind)) << kind << " has no specialisation here";
    }
  }
}

} // namespace
} // namespace dsc::codegen
