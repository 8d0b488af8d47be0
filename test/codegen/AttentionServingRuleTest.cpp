// The rule of tfm.attention (codegen/kernels/AttentionRules.cpp) in a serving plan's `step`
// program: slots 3 to 5, the paged write (PAGED 2: it writes the rotated queries too), the
// paged decode kernel and the paged prefill, which is slot 1's kernel (CUDA cores or tensor
// cores) without a mask; and none of them in any other program.
#include "AttentionRuleFixtures.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace dsc::codegen {
namespace {

using namespace dsc::codegen::test;

// The session step of `family` in a program named `program`.
bool runInProgram(const Family &f, const char *program, dsp::DType cacheType,
                  std::vector<KernelSpec> &specs, std::string &reason) {
  AttentionPlan b;
  b.plan.programs[0]->name = program;
  AttentionPlan::Options o;
  o.session = true;
  o.cacheType = cacheType;
  return b.run(b.attention(f, o), specs, reason);
}

TEST(AttentionServingRule, TheStepProgramCarriesThePagedPrefill) {
  int onTensorCores = 0;
  for (const Family &f : kFamilies) {
    if (!f.causal)
      continue;
    for (dsp::DType cache : {dsp::DType::f32, dsp::DType::f16, dsp::DType::bf16}) {
      std::vector<KernelSpec> specs;
      std::string reason;
      ASSERT_TRUE(runInProgram(f, "step", cache, specs, reason)) << f.name << ": " << reason;
      ASSERT_EQ(specs.size(), 6u) << f.name;
      EXPECT_EQ(specs[3].kind, "attention_rotary") << f.name;
      EXPECT_EQ(specs[4].kind, "attention_decode") << f.name;
      // Slot 1's kernel, on the tensor cores where a half cache put slot 1 there.
      EXPECT_EQ(specs[5].kind, specs[1].kind) << f.name;
      onTensorCores += specs[5].kind == "attention_prefill_mma";
      auto write = constantsOf(specs[3]), decode = constantsOf(specs[4]);
      auto prefill = constantsOf(specs[5]), dense = constantsOf(specs[1]);
      EXPECT_EQ(write["PAGED"], 2) << f.name;
      EXPECT_EQ(decode["PAGED"], 1) << f.name;
      EXPECT_EQ(decode["MASK_DTYPE"], 0) << f.name;
      EXPECT_EQ(prefill["PAGED"], 1) << f.name;
      EXPECT_EQ(prefill["MASK_DTYPE"], 0) << f.name;
      // PAGED last in each, as the templates' parameters follow.
      for (size_t slot = 3; slot < 6; ++slot)
        EXPECT_EQ(specs[slot].constants.back().first, "PAGED") << f.name << " slot " << slot;
      // Everything else as slot 1's.
      prefill.erase("PAGED");
      prefill["MASK_DTYPE"] = dense["MASK_DTYPE"];
      EXPECT_EQ(prefill, dense) << f.name;
    }
  }
  EXPECT_GT(onTensorCores, 0);
}

TEST(AttentionServingRule, OtherProgramsKeepTheirKernels) {
  for (const char *program : {"decode", "prefill"}) {
    std::vector<KernelSpec> specs;
    std::string reason;
    ASSERT_TRUE(runInProgram(kFamilies[0], program, dsp::DType::f32, specs, reason)) << reason;
    EXPECT_EQ(specs.size(), 3u) << program;
  }
}

} // namespace
} // namespace dsc::codegen
