// What the attention kernel tests share (AttentionKernelsTest.cpp, the rule on hand-built
// steps; AttentionNvrtcTest.cpp, NVRTC compiling what it lists): each fixture family's
// attribute set and a one-step plan builder.
#ifndef DSC_TEST_CODEGEN_ATTENTIONRULEFIXTURES_H
#define DSC_TEST_CODEGEN_ATTENTIONRULEFIXTURES_H

#include "codegen/AttachKernels.h"
#include "codegen/kernels/KernelRules.h"

#include "StepAttrs.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dsc::codegen::test {
// The attribute set of one fixture family's attention (hidden 64, 4 heads of 16), as the
// recogniser writes it (docs/transformer-ops.md).
struct Family {
  const char *name;
  int64_t heads, kvHeads, headDim;
  int64_t causal, alibi, window, rotaryDim, interleaved;
  const char *unattended;
  float softcap = 0;  // Gemma-2's attn_logit_softcapping; 0: no `softcap` attribute
  // q/k norms (inputs 8 and 9): 1 per head (Qwen3's, Gemma-3's), 2 over all heads (OLMo-2's).
  int qkNorm = 0;
};

inline const Family kFamilies[] = {
    {"gpt2", 4, 4, 16, 1, 0, 0, 0, 0, "all"},
    {"opt", 4, 4, 16, 1, 0, 0, 0, 0, "all"},
    {"llama", 4, 2, 16, 1, 0, 0, 16, 0, "all"},      // GQA 4/2, rotate_half
    {"bloom", 4, 4, 16, 1, 1, 0, 0, 0, "all"},       // ALiBi
    {"gptj", 4, 4, 16, 1, 0, 0, 8, 1, "all"},        // interleaved partial rotary
    {"gptneo", 4, 4, 16, 1, 0, 4, 0, 0, "causal"},   // a local layer
    {"gptneo-global", 4, 4, 16, 1, 0, 0, 0, 0, "causal"},
    {"bert", 4, 4, 16, 0, 0, 0, 0, 0, "all"},
};

// Gemma-2 (not a fixture family yet): local layers (window) and global ones, GQA, rotary,
// and a cap of 50 on the attention logits.
inline const Family kGemma2[] = {
    {"gemma2-local", 4, 2, 16, 1, 0, 4, 16, 0, "all", 50.0f},
    {"gemma2-global", 4, 2, 16, 1, 0, 0, 16, 0, "all", 50.0f},
};
// 50.0f's f32 bits.
inline constexpr int64_t kSoftcap50Bits = 0x42480000;

class AttentionPlan {
public:
  AttentionPlan() {
    plan.options = std::make_unique<dsp::CompileOptionsT>();
    plan.options->dtype = "fp32";
    plan.programs.push_back(std::make_unique<dsp::ProgramT>());
  }

  int tensor(dsp::DType dtype, std::vector<int64_t> dims) {
    auto t = std::make_unique<dsp::TensorT>();
    t->dtype = dtype;
    t->kind = dsp::TensorKind::activation;
    for (int64_t d : dims) {
      auto dim = std::make_unique<dsp::DimT>();
      dim->size = d;
      if (d < 0)
        dim->symbol = "sequence";
      t->shape.push_back(std::move(dim));
    }
    plan.tensors.push_back(std::move(t));
    return static_cast<int>(plan.tensors.size()) - 1;
  }


  struct Options {
    bool session = false;  // the session's cache (cache_layer 0) instead of I/O mode
    bool pastInputs = true;  // I/O mode: past key/value inputs and present outputs
    dsp::DType activations = dsp::DType::f32;
    dsp::DType maskType = dsp::DType::i64;
    bool mask = true;
    bool additiveMask = false;
    bool positions = true;
    dsp::DType cacheType = dsp::DType::f32;  // cache_dtype, absent when f32
    dsp::DType outputType = dsp::DType::f32;  // the result's (the plan's activation dtype)
    // Attention sinks (input 10, GPT-OSS's): [heads] of this dtype, of rank 2 with `sinksRank2`.
    bool sinks = false;
    dsp::DType sinksType = dsp::DType::f32;
    bool sinksRank2 = false;
  };

  // A tfm.attention step of `family` with symbolic batch and sequence.
  dsp::StepT &attention(const Family &f, const Options &o) {
    const int64_t batch = -1, sequence = -1, past = -1;
    int q = tensor(o.activations, {batch, sequence, f.heads * f.headDim});
    int k = tensor(o.activations, {batch, sequence, f.kvHeads * f.headDim});
    int v = tensor(o.activations, {batch, sequence, f.kvHeads * f.headDim});
    int mask = -1;
    if (o.additiveMask)
      mask = tensor(dsp::DType::f32, {batch, 1, sequence, -1});
    else if (o.mask)
      mask = tensor(o.maskType, {batch, -1});
    int pastKey = -1, pastValue = -1;
    const bool io = !o.session && o.pastInputs;
    if (io) {
      pastKey = tensor(o.activations, {batch, f.kvHeads, past, f.headDim});
      pastValue = tensor(o.activations, {batch, f.kvHeads, past, f.headDim});
    }
    int positions = o.positions ? tensor(dsp::DType::i64, {batch, sequence}) : -1;
    std::vector<int32_t> outputs{tensor(o.outputType == dsp::DType::f32 ? o.activations
                                                                         : o.outputType,
                                        {batch, sequence, f.heads * f.headDim})};
    if (io) {
      outputs.push_back(tensor(o.activations, {batch, f.kvHeads, -1, f.headDim}));
      outputs.push_back(tensor(o.activations, {batch, f.kvHeads, -1, f.headDim}));
    }
    auto s = std::make_unique<dsp::StepT>();
    s->op = "tfm.attention";
    s->inputs = {q, k, v, mask, pastKey, pastValue, positions};
    if (f.qkNorm)
      s->inputs.insert(s->inputs.end(),
                       {-1, tensor(dsp::DType::f32, {f.qkNorm == 2 ? f.heads * f.headDim : f.headDim}),
                        tensor(dsp::DType::f32, {f.qkNorm == 2 ? f.kvHeads * f.headDim : f.headDim})});
    if (o.sinks) {
      s->inputs.resize(10, -1);
      s->inputs.push_back(
          o.sinksRank2 ? tensor(o.sinksType, {1, f.heads}) : tensor(o.sinksType, {f.heads}));
    }
    s->outputs = outputs;
    intAttr(*s, "num_heads", f.heads);
    intAttr(*s, "num_kv_heads", f.kvHeads);
    intAttr(*s, "head_dim", f.headDim);
    floatAttr(*s, "scale", 0.25f);
    intAttr(*s, "causal", f.causal);
    intAttr(*s, "alibi", f.alibi);
    intAttr(*s, "window", f.window);
    intAttr(*s, "rotary_dim", f.rotaryDim);
    floatAttr(*s, "rotary_base", 10000.0f);
    intAttr(*s, "rotary_interleaved", f.interleaved);
    intAttr(*s, "cache_layer", o.session ? 0 : -1);
    stringAttr(*s, "unattended", f.unattended);
    if (f.softcap != 0)
      floatAttr(*s, "softcap", f.softcap);
    if (f.qkNorm)
      floatAttr(*s, "qk_norm_epsilon", 1e-6f);
    if (f.qkNorm == 3)
      intAttr(*s, "qk_norm_after_rotary", 1);
    if (o.cacheType != dsp::DType::f32)
      typeAttr(*s, "cache_dtype", o.cacheType);
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

inline std::map<std::string, int64_t> constantsOf(const KernelSpec &spec) {
  return {spec.constants.begin(), spec.constants.end()};
}


// Qwen3's layers: GQA, rotary, and per-head q/k norms, which the kernels that rotate apply
// (attention_rotary and the decode kernel), as their last constant.
inline const Family kQwen3{"qwen3", 4, 2, 16, 1, 0, 0, 16, 0, "all", 0, true};

} // namespace dsc::codegen::test

#endif
