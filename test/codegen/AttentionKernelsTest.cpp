// The kernels of tfm.attention without a GPU: the rule (codegen/kernels/AttentionRules.cpp)
// on hand-built plan steps carrying each fixture family's attribute set, in both cache
// modes, and what it must decline (AttentionNvrtcTest.cpp compiles what it lists).
#include "AttentionRuleFixtures.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>

namespace dsc::codegen {
namespace {

using namespace dsc::codegen::test;

TEST(AttentionRule, EveryFixtureFamilyInIoModeGetsRotaryAndPrefill) {
  for (const Family &f : kFamilies) {
    AttentionPlan b;
    AttentionPlan::Options o;
    o.pastInputs = f.causal != 0;  // the encoder has no past
    std::vector<KernelSpec> specs;
    std::string reason;
    ASSERT_TRUE(b.run(b.attention(f, o), specs, reason)) << f.name << ": " << reason;
    ASSERT_EQ(specs.size(), 2u) << f.name;
    EXPECT_EQ(specs[0].kind, "attention_rotary") << f.name;
    EXPECT_EQ(specs[1].kind, "attention_prefill") << f.name;
    auto rotary = constantsOf(specs[0]), prefill = constantsOf(specs[1]);
    EXPECT_EQ(rotary["HEAD_DIM"], 16) << f.name;
    EXPECT_EQ(rotary["ROTARY_DIM"], f.rotaryDim) << f.name;
    EXPECT_EQ(rotary["ROTARY_INTERLEAVED"], f.interleaved) << f.name;
    EXPECT_EQ(rotary["POS_DTYPE"], f.rotaryDim > 0 ? 5 : 0) << f.name;
    EXPECT_EQ(prefill["CAUSAL"], f.causal) << f.name;
    EXPECT_EQ(prefill["ALIBI"], f.alibi) << f.name;
    EXPECT_EQ(prefill["WINDOW"], f.window) << f.name;
    EXPECT_EQ(prefill["MASK_DTYPE"], 5) << f.name;
    EXPECT_EQ(prefill["UNATTENDED_CAUSAL"], std::string(f.unattended) == "causal" ? 1 : 0)
        << f.name;
    for (const KernelSpec &spec : specs)
      EXPECT_NE(kernelTemplateSource(spec.kind), nullptr) << spec.kind;
  }
}

TEST(AttentionRule, EveryDecoderFamilyWithTheSessionCacheAlsoGetsSplitKvDecode) {
  for (const Family &f : kFamilies) {
    if (!f.causal)
      continue;
    AttentionPlan b;
    AttentionPlan::Options o;
    o.session = true;
    std::vector<KernelSpec> specs;
    std::string reason;
    ASSERT_TRUE(b.run(b.attention(f, o), specs, reason)) << f.name << ": " << reason;
    // The decode kernel merges its own splits (FUSED_COMBINE): no attention_combine.
    ASSERT_EQ(specs.size(), 3u) << f.name;
    EXPECT_EQ(specs[2].kind, "attention_decode") << f.name;
    auto decode = constantsOf(specs[2]);
    EXPECT_EQ(decode["WINDOW"], f.window) << f.name;
    EXPECT_EQ(decode["ALIBI"], f.alibi) << f.name;
    EXPECT_EQ(decode["FUSED_ROTARY"], 1) << f.name;
    EXPECT_EQ(decode["FUSED_COMBINE"], 1) << f.name;
    EXPECT_EQ(decode["SPLIT_KEYS"] % (decode["WARPS"] * 32), 0) << f.name;
    EXPECT_EQ(decode["UNATTENDED_CAUSAL"], std::string(f.unattended) == "causal" ? 1 : 0);
    EXPECT_EQ(decode.count("UNATTENDED_ZERO"), std::string(f.unattended) == "zero" ? 1u : 0u);
  }
}

TEST(AttentionRule, SoftcapIsAConstantOfThePrefillAndDecodeKernelsOnly) {
  for (const Family &f : kGemma2) {
    for (bool session : {false, true}) {
      AttentionPlan b;
      AttentionPlan::Options o;
      o.session = session;
      std::vector<KernelSpec> specs;
      std::string reason;
      ASSERT_TRUE(b.run(b.attention(f, o), specs, reason)) << f.name << ": " << reason;
      ASSERT_EQ(specs.size(), session ? 3u : 2u) << f.name;
      EXPECT_EQ(constantsOf(specs[0]).count("SOFTCAP_BITS"), 0u) << f.name;  // rotary
      EXPECT_EQ(constantsOf(specs[1])["SOFTCAP_BITS"], kSoftcap50Bits) << f.name;
      EXPECT_EQ(constantsOf(specs[1])["WINDOW"], f.window) << f.name;
      if (session) {
        EXPECT_EQ(constantsOf(specs[2])["SOFTCAP_BITS"], kSoftcap50Bits) << f.name;
      }
    }
  }
  // The same layer without the cap shares the rotary kernel, not the others.
  AttentionPlan b;
  AttentionPlan::Options o;
  o.session = true;
  Family plain = kGemma2[1];
  plain.softcap = 0;
  std::vector<KernelSpec> capped, uncapped;
  std::string reason;
  ASSERT_TRUE(b.run(b.attention(kGemma2[1], o), capped, reason)) << reason;
  ASSERT_TRUE(b.run(b.attention(plain, o), uncapped, reason)) << reason;
  EXPECT_EQ(capped[0].name(), uncapped[0].name());
  EXPECT_NE(capped[1].name(), uncapped[1].name());
  EXPECT_NE(capped[2].name(), uncapped[2].name());
}

TEST(AttentionRule, StepsWithoutSoftcapKeepTheirKernelNames) {
  // The names (and so the specialised sources' #defines) of kernels compiled before
  // soft-capping existed: plans and cached kernels made then stay valid.
  AttentionPlan b;
  AttentionPlan::Options o;
  o.session = true;
  std::vector<KernelSpec> specs;
  std::string reason;
  ASSERT_TRUE(b.run(b.attention(kFamilies[0], o), specs, reason)) << reason;
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[1].name(), "attention_prefill_HEAD_DIM16_WARPS4_Q_TILE16_K_TILE64_CAUSAL1_"
                             "WINDOW0_ALIBI0_MASK_DTYPE5_UNATTENDED_CAUSAL0");
  // The decode kernel's name gained the FUSED_ROTARY constants when it started rotating
  // its token itself, and the FUSED_COMBINE ones when it started merging its splits; plans
  // from before keep their kernels, which the launcher runs with attention_rotary first
  // or attention_combine after (it reads the constants, not the name).
  EXPECT_EQ(specs[2].name(), "attention_decode_HEAD_DIM16_WARPS4_SPLIT_KEYS128_CAUSAL1_"
                             "WINDOW0_ALIBI0_MASK_DTYPE5_FUSED_ROTARY1_ROTARY_DIM0_"
                             "ROTARY_INTERLEAVED0_POS_DTYPE0_FUSED_COMBINE1_"
                             "UNATTENDED_CAUSAL0");
  for (const Family &f : kFamilies) {
    std::vector<KernelSpec> familySpecs;
    ASSERT_TRUE(b.run(b.attention(f, o), familySpecs, reason)) << f.name << ": " << reason;
    for (const KernelSpec &spec : familySpecs)
      EXPECT_EQ(constantsOf(spec).count("SOFTCAP_BITS"), 0u) << f.name << " " << spec.name();
  }
}


TEST(AttentionRule, QkNormIsAConstantOfTheRotatingKernelsOnly) {
  for (bool session : {false, true}) {
    AttentionPlan b;
    AttentionPlan::Options o;
    o.session = session;
    std::vector<KernelSpec> specs, plain;
    std::string reason;
    ASSERT_TRUE(b.run(b.attention(kQwen3, o), specs, reason)) << reason;
    ASSERT_EQ(specs.size(), session ? 3u : 2u);
    EXPECT_EQ(specs[0].constants.back().first, "QK_NORM");
    EXPECT_EQ(specs[0].constants.back().second, 1);
    EXPECT_EQ(constantsOf(specs[1]).count("QK_NORM"), 0u);
    if (session) {
      // Before GROUP_HEADS, which a GQA step's decode kernel has last.
      const auto &decode = specs[2].constants;
      ASSERT_GE(decode.size(), 2u);
      EXPECT_EQ(decode.back().first, "GROUP_HEADS");
      EXPECT_EQ(decode[decode.size() - 2].first, "QK_NORM");
      EXPECT_EQ(constantsOf(specs[2])["FUSED_ROTARY"], 1);
    }
    // The same layer without the norms shares the prefill kernel, not the rotating ones.
    Family unnormalised = kQwen3;
    unnormalised.qkNorm = 0;
    ASSERT_TRUE(b.run(b.attention(unnormalised, o), plain, reason)) << reason;
    EXPECT_NE(specs[0].name(), plain[0].name());
    EXPECT_EQ(specs[1].name(), plain[1].name());
    if (session) {
      EXPECT_NE(specs[2].name(), plain[2].name());
    }
  }
}

// OLMo-2's q/k norms over all heads (scales [heads * d] and [kv_heads * d]) are QK_NORM 2
// of the same kernels, and HunYuan-Dense's after its rotary (qk_norm_after_rotary, scales
// [d]) QK_NORM 3. The rule declines norms over all heads under tensor parallelism
// (rank_heads: they would span the ranks), and after the rotary (only a head's own scale
// can follow its rotation).
TEST(AttentionRule, AllHeadsAndAfterRotaryQkNormsAreQkNorm2And3) {
  AttentionPlan::Options o;
  o.session = true;
  std::vector<KernelSpec> specs;
  std::string reason;
  for (int kind : {2, 3}) {
    AttentionPlan b;
    Family f = kQwen3;
    f.qkNorm = kind;
    specs.clear();
    ASSERT_TRUE(b.run(b.attention(f, o), specs, reason)) << reason;
    ASSERT_EQ(specs.size(), 3u);
    EXPECT_EQ(constantsOf(specs[0])["QK_NORM"], kind);
    EXPECT_EQ(constantsOf(specs[1]).count("QK_NORM"), 0u);
    EXPECT_EQ(constantsOf(specs[2])["QK_NORM"], kind);
  }
  const struct {
    const char *attribute;
    std::vector<int64_t> ints;
    const char *reason;
  } declines[] = {{"rank_heads", {4, 4}, "span the tensor-parallel ranks"},
                  {"qk_norm_after_rotary", {}, "after the rotary need scales of [16]"}};
  for (const auto &decline : declines) {
    AttentionPlan plan;
    Family olmo2 = kQwen3;
    olmo2.qkNorm = 2;
    dsp::StepT &step = plan.attention(olmo2, o);
    if (decline.ints.empty()) {
      intAttr(step, decline.attribute, 1);
    } else {
      auto attr = std::make_unique<dsp::AttrT>();
      attr->name = decline.attribute;
      attr->kind = dsp::AttrKind::ints;
      attr->ints = decline.ints;
      step.attrs.push_back(std::move(attr));
    }
    specs.clear();
    EXPECT_FALSE(plan.run(step, specs, reason)) << decline.attribute;
    EXPECT_NE(reason.find(decline.reason), std::string::npos) << reason;
  }
}

// A half session cache (cache_dtype) is KV_DTYPE, last, of the three kernels that write or
// read it; an I/O-mode step (presents, f32) has none, whatever the attribute says.
TEST(AttentionRule, HalfCacheIsAConstantOfTheSessionKernels) {
  for (dsp::DType cacheType : {dsp::DType::f16, dsp::DType::bf16}) {
    for (bool session : {false, true}) {
      AttentionPlan b;
      AttentionPlan::Options o, f32;
      o.session = f32.session = session;
      o.cacheType = cacheType;
      std::vector<KernelSpec> specs, plain;
      std::string reason;
      ASSERT_TRUE(b.run(b.attention(kQwen3, o), specs, reason)) << reason;
      ASSERT_TRUE(b.run(b.attention(kQwen3, f32), plain, reason)) << reason;
      ASSERT_EQ(specs.size(), session ? 3u : 2u);
      for (size_t slot = 0; slot < specs.size(); ++slot) {
        if (!session) {
          EXPECT_EQ(constantsOf(specs[slot]).count("KV_DTYPE"), 0u);
          EXPECT_EQ(specs[slot].name(), plain[slot].name());
          continue;
        }
        // The decode kernel of a GQA step has GROUP_HEADS after it.
        const auto &constants = specs[slot].constants;
        const size_t last = constants.size() - (slot == 2 ? 2 : 1);
        EXPECT_EQ(constants[last].first, "KV_DTYPE") << slot;
        EXPECT_EQ(constants[last].second, static_cast<int64_t>(cacheType));
        EXPECT_EQ(constantsOf(plain[slot]).count("KV_DTYPE"), 0u);
      }
    }
  }
  AttentionPlan b;
  AttentionPlan::Options o;
  o.session = true;
  o.cacheType = dsp::DType::i64;
  std::vector<KernelSpec> specs;
  std::string reason;
  EXPECT_FALSE(b.run(b.attention(kQwen3, o), specs, reason));
  EXPECT_NE(reason.find("cache_dtype"), std::string::npos) << reason;
}

// A half session cache runs prefill on the tensor cores (attention_prefill_mma: 16 query
// rows per warp, heads that are a multiple of 16 up to 512, no ALiBi); everything else keeps
// attention_prefill, whose parameters it shares. Heads over 128 take their tiles in dynamic
// shared memory (SHARED_BYTES, under an sm_86's 99 KiB), and heads over 256 split their
// output features over blocks (FEATURE_PARTS), so that a lane keeps at most 128 outputs.
TEST(AttentionRule, HalfCachePrefillRunsOnTheTensorCores) {
  struct Case {
    int64_t headDim, alibi;
    dsp::DType cacheType;
    bool session;
    const char *kind;
  };
  const Case cases[] = {{16, 0, dsp::DType::f16, true, "attention_prefill_mma"},
                        {64, 0, dsp::DType::bf16, true, "attention_prefill_mma"},
                        {80, 0, dsp::DType::f16, true, "attention_prefill_mma"},
                        {128, 0, dsp::DType::bf16, true, "attention_prefill_mma"},
                        {192, 0, dsp::DType::f16, true, "attention_prefill_mma"},
                        {256, 0, dsp::DType::f16, true, "attention_prefill_mma"},
                        {320, 0, dsp::DType::bf16, true, "attention_prefill_mma"},
                        {512, 0, dsp::DType::f16, true, "attention_prefill_mma"},
                        {40, 0, dsp::DType::f16, true, "attention_prefill"},   // not 16k
                        {264, 0, dsp::DType::f16, true, "attention_prefill"},  // not 16k
                        {64, 1, dsp::DType::f16, true, "attention_prefill"},   // ALiBi
                        {256, 1, dsp::DType::bf16, true, "attention_prefill"}, // ALiBi
                        {64, 0, dsp::DType::f32, true, "attention_prefill"},   // f32 cache
                        {64, 0, dsp::DType::f16, false, "attention_prefill"}}; // I/O mode
  for (const Case &c : cases) {
    Family f{"case", 8, 2, c.headDim, 1, c.alibi, 0, c.alibi ? 0 : c.headDim, 0, "all"};
    AttentionPlan b;
    AttentionPlan::Options o;
    o.session = c.session;
    o.cacheType = c.cacheType;
    std::vector<KernelSpec> specs;
    std::string reason;
    ASSERT_TRUE(b.run(b.attention(f, o), specs, reason)) << c.headDim << ": " << reason;
    EXPECT_EQ(specs.at(1).kind, c.kind) << c.headDim << " alibi " << c.alibi;
    if (specs[1].kind != "attention_prefill_mma")
      continue;
    auto prefill = constantsOf(specs[1]);
    EXPECT_EQ(prefill["Q_TILE"], 16 * prefill["WARPS"]);
    EXPECT_EQ(prefill["K_TILE"] % 16, 0);
    EXPECT_EQ(prefill["KV_DTYPE"], static_cast<int64_t>(c.cacheType));
    const int64_t parts = prefill.count("FEATURE_PARTS") ? prefill["FEATURE_PARTS"] : 1;
    EXPECT_EQ(parts, c.headDim > 256 ? 2 : 1) << c.headDim;
    EXPECT_EQ(c.headDim % parts, 0);
    EXPECT_EQ(c.headDim / parts % 8, 0) << c.headDim;
    EXPECT_LE(c.headDim / parts, 256) << "more than 128 accumulators a lane: " << c.headDim;
    // attention_prefill_mma.cuh: q and k tiles of head_dim / 2 + 4 words per row, v tiles
    // of the block's features / 2 + 4.
    const int64_t bytes =
        4 * ((c.headDim / 2 + 4) * (prefill["Q_TILE"] + prefill["K_TILE"]) +
             (c.headDim / parts / 2 + 4) * prefill["K_TILE"]);
    if (bytes <= 48 * 1024) {
      EXPECT_EQ(prefill.count("SHARED_BYTES"), 0u) << c.headDim;
    } else {
      EXPECT_EQ(prefill["SHARED_BYTES"], bytes) << c.headDim;
      EXPECT_LE(bytes, 99 * 1024) << c.headDim;
    }
  }
}

// The plan's half activation dtype as the result (dsc-activation-dtype): the kernels that
// write it (the prefill kernel, either of them, and the decode kernel's merge) round into it
// (OUT_DT, last); I/O mode's result must stay f32.
TEST(AttentionRule, HalfResultIsWrittenByPrefillAndDecode) {
  for (int64_t headDim : {64, 256}) {
    Family f{"half", 8, 2, headDim, 1, 0, 0, headDim, 0, "all"};
    AttentionPlan b;
    AttentionPlan::Options o;
    o.session = true;
    o.cacheType = dsp::DType::bf16;
    o.outputType = dsp::DType::bf16;
    std::vector<KernelSpec> specs;
    std::string reason;
    ASSERT_TRUE(b.run(b.attention(f, o), specs, reason)) << reason;
    ASSERT_EQ(specs.size(), 3u);
    EXPECT_EQ(specs[1].kind, "attention_prefill_mma");
    for (size_t slot : {1, 2}) {
      EXPECT_EQ(specs[slot].constants.back().first, "OUT_DT") << slot;
      EXPECT_EQ(specs[slot].constants.back().second, static_cast<int64_t>(dsp::DType::bf16));
    }
    EXPECT_EQ(constantsOf(specs[0]).count("OUT_DT"), 0u);
  }
  Family f{"io", 8, 2, 64, 1, 0, 0, 64, 0, "all"};
  AttentionPlan b;
  AttentionPlan::Options io;
  io.outputType = dsp::DType::f16;
  std::vector<KernelSpec> specs;
  std::string reason;
  EXPECT_FALSE(b.run(b.attention(f, io), specs, reason));
  EXPECT_NE(reason.find("session's KV cache"), std::string::npos) << reason;
}

TEST(AttentionRule, TilesKeepSharedMemoryUnder48KiB) {
  for (int64_t headDim : {16, 40, 64, 80, 96, 128, 160, 256, 384, 512}) {
    Family f{"wide", 8, 8, headDim, 1, 0, 0, 0, 0, "all"};
    AttentionPlan b;
    std::vector<KernelSpec> specs;
    std::string reason;
    ASSERT_TRUE(b.run(b.attention(f, {}), specs, reason)) << headDim << ": " << reason;
    auto prefill = constantsOf(specs.at(1));
    int64_t bytes = 4 * (prefill["Q_TILE"] * headDim + prefill["K_TILE"] * (headDim + 1) +
                         prefill["K_TILE"] * headDim);
    EXPECT_LE(bytes, 48 * 1024) << headDim;
    EXPECT_EQ(prefill["Q_TILE"] % prefill["WARPS"], 0) << headDim;
  }
}

TEST(AttentionRule, EqualAttributesGiveEqualSpecs) {
  // Two layers of one model share their kernels (the plan deduplicates by name).
  AttentionPlan b;
  std::vector<KernelSpec> first, second;
  std::string reason;
  AttentionPlan::Options o;
  o.session = true;
  ASSERT_TRUE(b.run(b.attention(kFamilies[2], o), first, reason)) << reason;
  ASSERT_TRUE(b.run(b.attention(kFamilies[2], o), second, reason)) << reason;
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_EQ(first[i].name(), second[i].name());
  // GPT-Neo's local and global layers differ only in the window.
  std::vector<KernelSpec> local, global;
  ASSERT_TRUE(b.run(b.attention(kFamilies[5], o), local, reason)) << reason;
  ASSERT_TRUE(b.run(b.attention(kFamilies[6], o), global, reason)) << reason;
  EXPECT_EQ(local[0].name(), global[0].name());
  EXPECT_NE(local[1].name(), global[1].name());
}

TEST(AttentionRule, DeclinesWhatTheKernelsDoNotCover) {
  const Family &gpt2 = kFamilies[0];
  auto declines = [](AttentionPlan &b, const dsp::StepT &step, const std::string &needle) {
    std::vector<KernelSpec> specs;
    std::string reason;
    EXPECT_FALSE(b.run(step, specs, reason)) << needle;
    EXPECT_NE(reason.find(needle), std::string::npos) << reason;
    EXPECT_TRUE(specs.empty()) << needle;
  };
  {
    AttentionPlan b;
    AttentionPlan::Options o;
    o.additiveMask = true;
    declines(b, b.attention(gpt2, o), "additive");
  }
  {
    AttentionPlan b;
    AttentionPlan::Options o;
    o.activations = dsp::DType::f16;
    declines(b, b.attention(gpt2, o), "f16");
  }
  {
    AttentionPlan b;
    AttentionPlan::Options o;
    o.maskType = dsp::DType::i8;
    declines(b, b.attention(gpt2, o), "i8");
  }
  {
    AttentionPlan b;
    Family huge = gpt2;
    huge.headDim = 1024;
    declines(b, b.attention(huge, {}), "head_dim 1024");
  }
  {
    AttentionPlan b;
    AttentionPlan::Options o;
    o.mask = false;
    declines(b, b.attention(kFamilies[3], o), "ALiBi");  // bloom without a mask
  }
  {
    AttentionPlan b;
    AttentionPlan::Options o;
    o.positions = false;
    declines(b, b.attention(kFamilies[2], o), "positions");  // llama without positions
  }
  {
    AttentionPlan b;
    AttentionPlan::Options o;
    o.session = true;
    o.mask = false;
    declines(b, b.attention(gpt2, o), "padding mask");
  }
  {
    AttentionPlan b;
    Family odd = gpt2;
    odd.unattended = "none";
    declines(b, b.attention(odd, {}), "unattended");
  }
  {
    AttentionPlan b;
    Family odd = gpt2;
    odd.rotaryDim = 7;
    declines(b, b.attention(odd, {}), "rotary_dim");
  }
  {
    AttentionPlan b;
    dsp::StepT &step = b.attention(gpt2, {});
    step.inputs[5] = -1;  // a past key without its value
    declines(b, step, "past");
  }
  {
    AttentionPlan b;
    dsp::StepT &step = b.attention(kQwen3, {});
    step.inputs[9] = b.tensor(dsp::DType::f32, {32});  // a key norm of 32 features, not 16
    declines(b, step, "q/k norms");
  }
  {
    AttentionPlan b;
    dsp::StepT &step = b.attention(kQwen3, {});
    step.inputs[8] = -1;  // a key norm without the query's
    declines(b, step, "q/k norms");
  }
  for (float bad : {-50.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    AttentionPlan b;
    Family capped = kGemma2[0];
    capped.softcap = bad;
    declines(b, b.attention(capped, {}), "softcap");
  }
}

// GQA and MQA: the decode kernel attends for the query heads of one KV head in one block
// (GROUP_HEADS, last), a whole group where its accumulators (GROUP_HEADS × ceil(d / 32) per
// thread, at most 16) and at most 4 heads allow, else the group in equal runs; without GQA
// the constant is absent and the kernel keeps its name.
TEST(AttentionRule, DecodeBlocksAttendForTheQueryHeadsOfOneKvHead) {
  struct Case {
    int64_t heads, kvHeads, headDim, groupHeads;
  };
  const Case cases[] = {
      {4, 2, 16, 2},    // the llama fixture: a whole group
      {32, 8, 128, 4},  // Llama-3-8B: a whole group of 4 heads of 128
      {8, 1, 128, 4},   // MQA, 8 heads of 128: two runs of 4
      {28, 4, 128, 4},  // Qwen2.5-7B: groups of 7 in runs of 4 and 3
      {12, 1, 64, 4},   // 12 heads of 64: three runs of 4
      {71, 1, 64, 4},   // Falcon-7B: 18 runs, the last of 3
      {16, 1, 256, 2},  // heads of 256: 2 at most (16 accumulators)
      {8, 1, 512, 0},   // heads of 512 (Gemma-4): one per block (16 accumulators), no constant
      {6, 1, 64, 3},    // 6 heads: two runs of 3, not 4 and 2
      {4, 4, 16, 0},    // no GQA: no constant
  };
  for (const Case &c : cases) {
    Family f{"gqa", c.heads, c.kvHeads, c.headDim, 1, 0, 0, c.headDim, 0, "all"};
    AttentionPlan b;
    AttentionPlan::Options o;
    o.session = true;
    std::vector<KernelSpec> specs;
    std::string reason;
    ASSERT_TRUE(b.run(b.attention(f, o), specs, reason)) << reason;
    ASSERT_EQ(specs.size(), 3u);
    const auto constants = constantsOf(specs[2]);
    if (c.groupHeads == 0) {
      EXPECT_EQ(constants.count("GROUP_HEADS"), 0u) << c.heads << "/" << c.kvHeads;
      continue;
    }
    EXPECT_EQ(specs[2].constants.back().first, "GROUP_HEADS");
    EXPECT_EQ(specs[2].constants.back().second, c.groupHeads)
        << c.heads << "/" << c.kvHeads << " heads of " << c.headDim;
    // The prefill and rotary kernels do not change.
    EXPECT_EQ(constantsOf(specs[0]).count("GROUP_HEADS"), 0u);
    EXPECT_EQ(constantsOf(specs[1]).count("GROUP_HEADS"), 0u);
  }
}

} // namespace
} // namespace dsc::codegen
