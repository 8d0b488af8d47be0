// The rule of tfm.attention (codegen/kernels/AttentionRules.cpp) for a step with attention
// sinks (input 10, GPT-OSS's): SINKS 1 on the kernels that attend (the prefill kernel, on the
// CUDA or the tensor cores, and the decode kernel), last of their constants, and on the
// serving step's paged decode and prefill before their PAGED; attention_rotary keeps its
// name; sinks the kernels cannot read are declined with a reason. NVRTC compiles the
// specialisations in AttentionNvrtcTest.cpp (SinksKernelsCompile).
#include "AttentionRuleFixtures.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsc::codegen {
namespace {

using namespace dsc::codegen::test;

// GPT-OSS's layers at the fixtures' scale: GQA 4/2, rotary, a sliding and a full layer.
const Family kGptOss[] = {
    {"gptoss-sliding", 4, 2, 16, 1, 0, 4, 16, 0, "all"},
    {"gptoss-full", 4, 2, 16, 1, 0, 0, 16, 0, "all"},
};

std::vector<KernelSpec> specsOf(const Family &f, AttentionPlan::Options o,
                                const char *program = "forward") {
  AttentionPlan b;
  b.plan.programs[0]->name = program;
  std::vector<KernelSpec> specs;
  std::string reason;
  EXPECT_TRUE(b.run(b.attention(f, o), specs, reason)) << f.name << ": " << reason;
  return specs;
}

TEST(AttentionSinksRule, SinksIsTheLastConstantOfTheKernelsThatAttend) {
  for (const Family &f : kGptOss)
    for (bool session : {false, true})
      for (dsp::DType cache : {dsp::DType::f32, dsp::DType::f16, dsp::DType::bf16}) {
        if (!session && cache != dsp::DType::f32)
          continue;
        AttentionPlan::Options o;
        o.session = session;
        o.cacheType = cache;
        o.sinks = true;
        const std::vector<KernelSpec> with = specsOf(f, o);
        o.sinks = false;
        const std::vector<KernelSpec> without = specsOf(f, o);
        ASSERT_EQ(with.size(), session ? 3u : 2u) << f.name;
        ASSERT_EQ(with.size(), without.size()) << f.name;
        // The rotary kernel does not attend: the same kernel as without sinks.
        EXPECT_EQ(with[0].name(), without[0].name()) << f.name;
        for (size_t slot = 1; slot < with.size(); ++slot) {
          SCOPED_TRACE(std::string(f.name) + " slot " + std::to_string(slot));
          EXPECT_EQ(with[slot].kind, without[slot].kind);
          ASSERT_FALSE(with[slot].constants.empty());
          EXPECT_EQ(with[slot].constants.back(), (std::pair<std::string, int64_t>("SINKS", 1)));
          // Everything before it as without sinks.
          std::vector<std::pair<std::string, int64_t>> before(with[slot].constants.begin(),
                                                              with[slot].constants.end() - 1);
          EXPECT_EQ(before, without[slot].constants);
        }
        // A half cache's prefill is the tensor cores', sinks or not.
        if (session && cache != dsp::DType::f32) {
          EXPECT_EQ(with[1].kind, "attention_prefill_mma");
        }
      }
}

TEST(AttentionSinksRule, TheServingStepsPagedKernelsHaveSinksBeforePaged) {
  for (const Family &f : kGptOss) {
    AttentionPlan::Options o;
    o.session = true;
    o.sinks = true;
    const std::vector<KernelSpec> specs = specsOf(f, o, "step");
    ASSERT_EQ(specs.size(), 6u) << f.name;
    EXPECT_EQ(constantsOf(specs[3]).count("SINKS"), 0u) << f.name;  // the paged write
    for (size_t slot : {4, 5}) {
      const auto &constants = specs[slot].constants;
      ASSERT_GE(constants.size(), 2u);
      EXPECT_EQ(constants[constants.size() - 2].first, "SINKS") << f.name << " slot " << slot;
      EXPECT_EQ(constants.back().first, "PAGED") << f.name << " slot " << slot;
    }
  }
}

TEST(AttentionSinksRule, SinksTheKernelsCannotReadAreDeclined) {
  for (bool rank2 : {false, true}) {
    AttentionPlan b;
    AttentionPlan::Options o;
    o.session = true;
    o.sinks = true;
    o.sinksType = rank2 ? dsp::DType::f32 : dsp::DType::f16;
    o.sinksRank2 = rank2;
    std::vector<KernelSpec> specs;
    std::string reason;
    EXPECT_FALSE(b.run(b.attention(kGptOss[0], o), specs, reason));
    EXPECT_NE(reason.find("the kernels take f32 [heads]"), std::string::npos) << reason;
    EXPECT_NE(reason.find("the sinks are"), std::string::npos) << reason;
  }
}

} // namespace
} // namespace dsc::codegen
