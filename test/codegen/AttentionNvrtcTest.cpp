// NVRTC compiling the four attention templates in a spread of specialisations (head sizes
// 16 to 512, every mask dtype, rotary forms, ALiBi, windows, Gemma-2's logit soft-capping,
// q/k norms, half caches and results, grouped decode blocks) to PTX and to sm_80 and sm_90
// cubins, which runs ptxas on them. Skipped where NVRTC cannot be loaded.
#include "AttentionRuleFixtures.h"

#include "codegen/AttachKernels.h"
#include "codegen/Nvrtc.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsc::codegen {
namespace {

using namespace dsc::codegen::test;

// ---- NVRTC ------------------------------------------------------------------------------

class AttentionNvrtcTest : public ::testing::Test {
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

  // Every kernel the rule lists for `f`, in both cache modes (with sinks where asked).
  void compilesFamily(const Family &f, dsp::DType maskType, bool sinks = false) {
    for (bool session : {false, true}) {
      if (session && !f.causal)
        continue;
      AttentionPlan b;
      AttentionPlan::Options o;
      o.session = session;
      o.maskType = maskType;
      o.sinks = sinks;
      std::vector<KernelSpec> specs;
      std::string reason;
      ASSERT_TRUE(b.run(b.attention(f, o), specs, reason)) << f.name << ": " << reason;
      for (const KernelSpec &spec : specs)
        compiles(spec);
    }
  }

  const Nvrtc *nvrtc = nullptr;
};

TEST_F(AttentionNvrtcTest, EveryFixtureFamilysKernelsCompile) {
  for (const Family &f : kFamilies)
    compilesFamily(f, dsp::DType::i64);
}

TEST_F(AttentionNvrtcTest, SoftcappedKernelsCompile) {
  // Gemma-2's layers (head 16 here), and its real head size, 256, with a cap of 30.
  for (const Family &f : kGemma2)
    compilesFamily(f, dsp::DType::i64);
  compilesFamily({"gemma2-256", 8, 4, 256, 1, 0, 4096, 256, 0, "all", 30.0f}, dsp::DType::i64);
  compilesFamily({"softcap-alibi", 8, 8, 64, 1, 1, 0, 0, 0, "causal", 5.0f}, dsp::DType::bool_);
}

TEST_F(AttentionNvrtcTest, QkNormKernelsCompile) {
  // Qwen3's (head 128, GQA 16/8) and Gemma-3's (head 256, a window) per-head q/k norms.
  compilesFamily(kQwen3, dsp::DType::i64);
  compilesFamily({"qwen3-128", 16, 8, 128, 1, 0, 0, 128, 0, "all", 0, true}, dsp::DType::i64);
  compilesFamily({"gemma3-256", 8, 4, 256, 1, 0, 1024, 256, 0, "all", 0, true},
                 dsp::DType::i64);
  // OLMo-2's over all heads (head 128, 32 heads: QK_NORM 2).
  compilesFamily({"olmo2-128", 32, 32, 128, 1, 0, 0, 128, 0, "all", 0, 2}, dsp::DType::i64);
  // HunYuan-Dense's after its rotary (head 128, GQA 32/8: QK_NORM 3).
  compilesFamily({"hunyuan-128", 32, 8, 128, 1, 0, 0, 128, 0, "all", 0, 3}, dsp::DType::i64);
}

TEST_F(AttentionNvrtcTest, HalfCacheKernelsCompile) {
  // An f16 cache under Llama-3's head of 128 (GQA 4:1), a bf16 one under BLOOM's ALiBi and
  // Qwen3's q/k norms.
  const struct {
    Family family;
    dsp::DType cacheType;
  } cases[] = {{{"llama-128", 32, 8, 128, 1, 0, 0, 128, 0, "all"}, dsp::DType::f16},
               // The tensor cores' prefill: Phi-2's heads of 80 with a bf16 cache, Gemma-2's
               // window and cap over heads of 64.
               {{"phi2-80", 32, 32, 80, 1, 0, 0, 32, 0, "all"}, dsp::DType::bf16},
               {{"gemma2-64", 8, 4, 64, 1, 0, 4, 64, 0, "all", 50.0f}, dsp::DType::f16},
               {{"bloom-64", 8, 8, 64, 1, 1, 0, 0, 0, "all"}, dsp::DType::bf16},
               // Wide heads on the tensor cores, in dynamic shared memory: Gemma-3's 256
               // with a window, Gemma-4's 512 in two blocks per query tile.
               {{"gemma3-256", 8, 4, 256, 1, 0, 512, 256, 0, "all", 0, 1}, dsp::DType::bf16},
               {{"gemma4-512", 8, 1, 512, 1, 0, 0, 128, 0, "all", 0, 1}, dsp::DType::f16},
               {kQwen3, dsp::DType::bf16}};
  // Each also with its result in the cache's dtype (the plan's half activations: OUT_DT).
  for (const auto &c : cases)
    for (bool halfResult : {false, true}) {
      AttentionPlan b;
      AttentionPlan::Options o;
      o.session = true;
      o.cacheType = c.cacheType;
      if (halfResult)
        o.outputType = c.cacheType;
      std::vector<KernelSpec> specs;
      std::string reason;
      ASSERT_TRUE(b.run(b.attention(c.family, o), specs, reason))
          << c.family.name << ": " << reason;
      ASSERT_EQ(specs.size(), 3u);
      for (const KernelSpec &spec : specs)
        compiles(spec);
    }
}

TEST_F(AttentionNvrtcTest, HeadSizesAndMaskDtypesCompile) {
  const dsp::DType masks[] = {dsp::DType::i32, dsp::DType::bool_, dsp::DType::u8,
                              dsp::DType::i64};
  int variant = 0;
  for (int64_t headDim : {40, 64, 80, 128, 256, 512}) {
    // Rotary forms, ALiBi and windows spread over the sizes.
    Family f{"sized", 8, variant % 2 ? 2 : 8, headDim, 1, variant % 3 == 1 ? 1 : 0,
             variant % 3 == 2 ? 16 : 0, variant % 3 == 0 ? headDim / 2 : 0, variant % 2,
             variant % 2 ? "causal" : "all"};
    compilesFamily(f, masks[variant % 4]);
    ++variant;
  }
}

TEST_F(AttentionNvrtcTest, GroupedDecodeKernelsCompile) {
  // The decode kernel with the most query heads per block (GROUP_HEADS 4 of 128), an MQA
  // group in runs (Falcon-7B's 71 heads of 64), heads of 256 with ALiBi and a cap, and
  // Qwen3's q/k norms over GQA 16/2.
  compilesFamily({"mqa-128", 8, 1, 128, 1, 0, 0, 128, 0, "all"}, dsp::DType::i64);
  compilesFamily({"falcon-7b", 71, 1, 64, 1, 0, 0, 64, 0, "all"}, dsp::DType::i64);
  compilesFamily({"mqa-256", 16, 1, 256, 1, 1, 0, 0, 0, "all", 30.0f}, dsp::DType::bool_);
  compilesFamily({"qwen3-gqa8", 16, 2, 128, 1, 0, 0, 128, 0, "all", 0, 1}, dsp::DType::i64);
}

TEST_F(AttentionNvrtcTest, SinksKernelsCompile) {
  // GPT-OSS's real attention (64 heads of 64 over 8 KV heads: GROUP_HEADS 4), its sliding
  // layers (a window of 128), and the serving step's paged kernels over a bf16 cache (the
  // tensor cores' prefill).
  compilesFamily({"gptoss-full", 64, 8, 64, 1, 0, 0, 64, 0, "all"}, dsp::DType::i64, true);
  compilesFamily({"gptoss-sliding", 64, 8, 64, 1, 0, 128, 64, 0, "all"}, dsp::DType::i64, true);
  AttentionPlan b;
  b.plan.programs[0]->name = "step";
  AttentionPlan::Options o;
  o.session = true;
  o.cacheType = dsp::DType::bf16;
  o.sinks = true;
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(b.attention({"gptoss-paged", 64, 8, 64, 1, 0, 128, 64, 0, "all"}, o), specs,
                    reason))
      << reason;
  ASSERT_EQ(specs.size(), 6u);
  EXPECT_EQ(specs[5].kind, "attention_prefill_mma");
  for (const KernelSpec &spec : specs)
    compiles(spec);
}

} // namespace
} // namespace dsc::codegen
