// The model's walk over a program: where the CUDA executor places each step, and what each
// placed step's launcher issues on the stream (RooflineModel.h says what for).
#include "RooflineModel.h"

#include "PlanAccess.h"
#include "plan/PlanViews.h"

#include <algorithm>
#include <cstdlib>

namespace dsrt::roofline {
namespace {

using namespace plan_access;

// CudaSession.cpp's isCollective: the ops that run without a generated kernel.
bool isCollective(std::string_view op) { return op == "tfm.all_reduce" || op == "tfm.all_gather"; }

// A session-cache attention (CudaExecutor.cpp's isSessionAttention, AttentionOps.cpp's
// `sessionCache`): no past inputs, a cache layer, one output.
bool isSessionAttention(const dsp::Step &step) {
  return str(step.op()) == "tfm.attention" && inputAt(step, 4) < 0 &&
         intAttr(step, "cache_layer", -1) >= 0 && length(step.outputs()) == 1;
}

// The inputs whose values (not shapes) the reference kernels' shape functions read
// (readIndexValues in runtime/src/ops/{Movement,Shape,Reduce}.cpp). Held on the device,
// they leave the output shapes unknown on the host, and the executor falls back.
std::vector<uint32_t> valueShapedInputs(std::string_view op) {
  if (op == "Reshape" || op == "Expand" || op == "Tile" || op == "Split" || op == "Squeeze" ||
      op == "Unsqueeze" || op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax")
    return {1};
  if (op == "Slice")
    return {1, 2, 3, 4};
  if (op == "ConstantOfShape")
    return {0};
  return {};
}

// Launchers that only relabel their input's bytes (GenericOps.cpp's runContiguousCopy and
// the ops that forward to it): no launch when the output is the input's buffer.
bool isContiguousCopy(const dsp::Plan &plan, const dsp::Step &step) {
  if (isView(plan, step))
    return true;
  std::string op = str(step.op());
  return op == "Dropout" || ((op == "Max" || op == "Min") && length(step.inputs()) == 1);
}

class Walker {
public:
  Walker(const dsp::Plan &plan, const dsp::WeightSection &section, const Workload &workload,
         const std::vector<KvLayer> &cache, int64_t newTokens)
      : plan_(plan), section_(section), workload_(workload), cache_(cache),
        newTokens_(newTokens), hostKnown_(length(plan.tensors()), 0) {
    maxBatch_ = plan.limits() ? plan.limits()->max_batch() : 0;
    for (uint32_t i = 0; i < length(plan.tensors()); ++i)
      hostKnown_[i] = plan.tensors()->Get(i)->kind() == dsp::TensorKind::constant;
  }

  // Adds the program's steps to `out` in order (an If's branch counts as the If's).
  void walk(const dsp::Program &program, ProgramCost &out, int depth = 0) {
    for (uint32_t s = 0; s < length(program.steps()); ++s) {
      const dsp::Step &step = *program.steps()->Get(s);
      StepCost cost = str(step.op()) == "If" ? ifCost(step, out, depth) : stepCost(step);
      if (isSessionAttention(step)) {
        int64_t layer = intAttr(step, "cache_layer", -1);
        if (layer < static_cast<int64_t>(cache_.size()))
          out.kvBytes += 2 * static_cast<uint64_t>(cache_[layer].kvHeads * cache_[layer].headDim *
                                                   workload_.context * workload_.batch *
                                                   cache_[layer].elementBytes);
      }
      uint64_t ops = cost.kernels + cost.gemms + cost.copies + cost.collectives;
      if (ops && cost.placement != Placement::If)  // an If's are its branch's steps'
        out.launchesByOp[str(step.op())] += ops;
      out.kernels += cost.kernels;
      out.gemms += cost.gemms;
      out.copies += cost.copies;
      out.collectives += cost.collectives;
      if (depth == 0) {
        out.host += cost.placement == Placement::Host;
        out.device += cost.placement == Placement::Device;
        out.fallback += cost.placement == Placement::Fallback;
        out.sharedViews += cost.sharedView;
        out.steps.push_back(cost);
      }
    }
  }

private:
  const dsp::Tensor &tensor(int32_t index) const { return *plan_.tensors()->Get(index); }
  // A weight's dtype as the plan stores it (WeightEntry), else the tensor's.
  dsp::DType storedDType(int32_t index) const {
    const dsp::WeightEntry *weight = weightEntry(index);
    return weight ? weight->dtype() : tensor(index).dtype();
  }

  const dsp::WeightEntry *weightEntry(int32_t index) const {
    if (index < 0 || tensor(index).kind() != dsp::TensorKind::weight)
      return nullptr;
    int32_t w = tensor(index).weight_index();
    return w >= 0 && static_cast<uint32_t>(w) < length(section_.weights())
               ? section_.weights()->Get(w)
               : nullptr;
  }

  int64_t kernelConstant(const dsp::Step &step, uint32_t slot, std::string_view name,
                         int64_t fallback) const {
    if (slot >= length(step.kernels()))
      return fallback;
    int32_t kernel = step.kernels()->Get(slot);
    if (kernel < 0 || static_cast<uint32_t>(kernel) >= length(plan_.kernels()))
      return fallback;
    const auto *constants = plan_.kernels()->Get(kernel)->constants();
    for (uint32_t i = 0; i < length(constants); ++i)
      if (constants->Get(i)->name() && constants->Get(i)->name()->string_view() == name)
        return constants->Get(i)->i();
    return fallback;
  }

  // The rows (all dimensions but the last) a tensor has in this workload. The plan bounds
  // them (max_shape, at max_batch x max_seq_len) but does not name them; a bound of at most
  // max_batch rows is one row per sequence (decode, or prefill's last-position LM head).
  int64_t rowsOf(int32_t index) const {
    const int64_t everyToken = workload_.batch * newTokens_;
    const auto *max = tensor(index).max_shape();
    if (length(max) == 0)
      return everyToken;
    int64_t bound = 1;
    for (uint32_t d = 0; d + 1 < max->size(); ++d)
      bound *= max->Get(d);
    return std::min(bound, bound <= maxBatch_ ? workload_.batch : everyToken);
  }

  // CudaSession::deviceView hands a launcher the arena slot of an activation computed on
  // the device, and a separate upload of one the host computed.
  bool sameDeviceBuffer(int32_t a, int32_t b) const {
    if (a < 0 || b < 0)
      return false;
    if (a == b)
      return true;
    const dsp::Tensor &x = tensor(a), &y = tensor(b);
    return x.kind() == dsp::TensorKind::activation && y.kind() == dsp::TensorKind::activation &&
           !hostKnown_[a] && !hostKnown_[b] && x.arena_offset() == y.arena_offset();
  }

  // CudaExecutor.cpp's runStep: the host when every input whose values it reads is known
  // there; else the launcher, unless the op has none, the plan no kernel for it
  // (compilePrograms' fallbackOnly) or the shapes need a device value; else the fallback.
  StepCost stepCost(const dsp::Step &step) {
    const std::string op = str(step.op());
    const bool readsValues = op != "Shape" && op != "Size";  // ops::readsInputValues
    bool allHost = true;
    for (uint32_t i = 0; i < length(step.inputs()); ++i) {
      int32_t in = step.inputs()->Get(i);
      if (in >= 0 && readsValues && !hostKnown_[in])
        allHost = false;
    }
    StepCost cost;
    for (uint32_t o = 0; o < length(step.outputs()); ++o)
      hostKnown_[step.outputs()->Get(o)] = allHost;
    if (allHost)
      return cost;
    cost.placement = Placement::Fallback;
    if (!hasGpuLauncher(op) || (length(step.kernels()) == 0 && !isCollective(op)))
      return cost;
    for (uint32_t i : valueShapedInputs(op)) {
      int32_t in = inputAt(step, i);
      if (in >= 0 && !hostKnown_[in])
        return cost;
    }
    cost.placement = Placement::Device;
    launches(step, op, cost);
    return cost;
  }

  // Whether the step is a cross-attention: its padding mask is the encoder's, which the
  // model table names (the keys' length has no symbol of its own in the plan).
  bool otherSequenceKeys(const dsp::Step &step) const {
    const int32_t mask = inputAt(step, 3);
    const dsp::ModelInfo *model = plan_.model();
    return mask >= 0 && model && model->cross_mask() && model->cross_mask()->size() > 0 &&
           str(tensor(mask).name()) == str(model->cross_mask());
  }

  // The launchers' rules, each from the file named.
  void launches(const dsp::Step &step, const std::string &op, StepCost &cost) const {
    const uint32_t outputs = length(step.outputs());
    if (op == "tfm.linear" || op == "tfm.lm_head")
      return linearLaunches(step, op == "tfm.linear", cost);
    if (op == "tfm.attention") {
      // AttentionOps.cpp: attention_rotary (it places the keys and values), then one new
      // token over the session's cache takes the split-KV attention_decode (with
      // attention_combine after it in plans from before FUSED_COMBINE), anything else
      // attention_prefill.
      const int32_t query = inputAt(step, 0);
      const auto *queryMax = query >= 0 ? tensor(query).max_shape() : nullptr;
      int64_t fresh = length(queryMax) >= 2 && queryMax->Get(1) == 1 ? 1 : newTokens_;
      if (workload_.batch == 0 || fresh == 0)
        return;
      // A serving plan's step program runs only in the engine, over the paged cache: its
      // paged attention_rotary writes every row's key and value, then its paged
      // attention_decode attends (slots 3 and 4; AttentionPagedOps.cpp), as in a decode-only
      // step; a step with prompt chunks adds the paged prefill (slot 5), not modelled.
      const size_t kernelCount = length(step.kernels());
      if ((kernelCount == 5 || kernelCount == 6) && kernelConstant(step, 4, "PAGED", 0) == 1) {
        cost.kernels = 2;
        return;
      }
      const bool mergesItself = length(step.kernels()) == 3 &&
                                kernelConstant(step, 2, "FUSED_COMBINE", 0) == 1;
      bool splitKv = isSessionAttention(step) && fresh == 1 &&
                     (length(step.kernels()) >= 4 || mergesItself);
      // With FUSED_ROTARY (every plan's since it exists) the decode kernel rotates and
      // caches its token itself, else attention_rotary first; with FUSED_COMBINE it merges
      // its splits itself, else attention_combine after it.
      if (splitKv) {
        cost.kernels = (kernelConstant(step, 2, "FUSED_ROTARY", 0) == 1 ? 1 : 2) +
                       (mergesItself ? 0 : 1);
        return;
      }
      // A cross-attention (keys of another length than the queries) places its keys and
      // copies its queries in two launches of attention_rotary. One of the session
      // programs (`cross`) places the encoder's keys in prefill only: its decode steps copy
      // their query and attend.
      if (intAttr(step, "cross", 0) != 0) {
        const bool decodeProgram = length(queryMax) >= 2 && queryMax->Get(1) == 1;
        cost.kernels = decodeProgram ? 2 : 3;
        return;
      }
      cost.kernels = otherSequenceKeys(step) ? 3 : 2;
      return;
    }
    if (op == "tfm.moe") {
      // MoeOps.cpp: each of its kernels once (routing, the experts' gate-up and down, the
      // weighted sum, and a shared expert's gate-up and down).
      cost.kernels = length(step.kernels());
      return;
    }
    if (op == "tfm.all_reduce") {
      // CollectiveOps.cpp: a copy into the output (the sum is in place there), then NCCL.
      cost.copies = 1;
      cost.collectives = intAttr(step, "ranks", 1) > 1 ? 1 : 0;
      return;
    }
    if (op == "tfm.all_gather") {
      // CollectiveOps.cpp: NCCL into scratch (one rank: a copy), then one strided copy per
      // rank that interleaves the parts along the axis.
      int64_t ranks = std::max<int64_t>(intAttr(step, "ranks", 1), 1);
      cost.collectives = ranks > 1 ? 1 : 0;
      cost.copies = static_cast<uint32_t>(ranks) + (ranks > 1 ? 0 : 1);
      return;
    }
    if (isContiguousCopy(plan_, step)) {
      // GenericOps.cpp's runContiguousCopy: nothing when dsc-plan-memory gave the output
      // its input's slot, or the session the program input's buffer (CudaExecutor.cpp's
      // runStep), else one generic_copy.
      const int32_t input = inputAt(step, 0);
      cost.sharedView =
          sameDeviceBuffer(input, outputs ? step.outputs()->Get(0) : -1) ||
          (viewsProgramInput(plan_, step) && input >= 0 && !hostKnown_[input]);
      cost.kernels = cost.sharedView ? 0 : 1;
      return;
    }
    if (op == "Concat") {  // GenericOps.cpp: one generic_copy per input
      for (uint32_t i = 0; i < length(step.inputs()); ++i)
        cost.kernels += step.inputs()->Get(i) >= 0;
      return;
    }
    if (op == "Split") {  // GenericOps.cpp: one generic_split, else a generic_copy per output
      cost.kernels = kernelConstant(step, 0, "PARTS", -1) > 0 ? 1 : outputs;
      return;
    }
    // TransformerOps.cpp (embedding, norms, activation, gated_act(_packed), residual_add) and every
    // other generic launcher: kernel slot 0, once.
    cost.kernels = 1;
  }

  // LinearOps.cpp: up to 8 rows one gemv (kernel slot 0; the epilogue is fused into it).
  // More rows: the activations converted for an f16/bf16 GEMM, cuBLASLt (an int8 or int4
  // weight dequantized first, in parts of at most 64 MiB: one dequantize_int8 or
  // dequantize_int4 and one GEMM per part), then linear_epilogue unless the GEMM already wrote the finished output, itself
  // or with cuBLASLt's epilogue. (A gated linear's kernel has an ACT, so its epilogue is
  // counted with the activations.) int8 and int4 weights with f16/bf16 scales take the tile
  // GEMM (gemm_dequant, their last kernel) from 9 to DSRT_CUDA_TILE_GEMM_ROWS rows (512; 0:
  // never), as LinearOps.cpp's tileGemmRows() reads it: no dequantization, no cuBLASLt, the
  // residual added by the kernel where no activation comes before it.
  void linearLaunches(const dsp::Step &step, bool isLinear, StepCost &cost) const {
    constexpr int64_t kGemvMaxRows = 8;
    constexpr int64_t kScratchPartBytes = int64_t(64) << 20;
    const dsp::WeightEntry *weight = weightEntry(inputAt(step, 1));
    if (!weight || length(weight->shape()) != 2 || length(step.outputs()) == 0)
      return;
    // An int4 weight (u8 codes beside scales) packs two inputs to a byte.
    const bool int4 = weight->dtype() == dsp::DType::u8 && weightEntry(inputAt(step, 3));
    const int64_t n = weight->shape()->Get(0), k = weight->shape()->Get(1) * (int4 ? 2 : 1);
    const int64_t rows = rowsOf(step.outputs()->Get(0));
    if (rows == 0 || n == 0)
      return;
    // A norm prologue (gemv's NORM) runs inside gemv where gemv stages the rows (with 32
    // floats of reduction after them, in 48 KiB), else as the norm kernel first.
    // (LinearOps.cpp: with the 128 bytes of the norm's reduction and the 512 that split-K's
    // partial sums may take.)
    constexpr int64_t kGemvMaxStagedBytes = 48 * 1024, kNormReductionBytes = 128,
                      kSplitSumsBytes = 512;
    const bool norm = isLinear && kernelConstant(step, 0, "NORM", 0) != 0;
    const bool staged = rows <= kGemvMaxRows && rows * k * 4 + kNormReductionBytes +
                                                        kSplitSumsBytes <= kGemvMaxStagedBytes;
    cost.kernels = norm && !staged ? 1 : 0;
    if (rows <= kGemvMaxRows) {
      cost.kernels += 1;
      return;
    }
    const dsp::WeightEntry *scales = weightEntry(inputAt(step, 3));
    // int8 and int4 weights are dequantized (dequantize_int8 / dequantize_int4) into the
    // scales' dtype first.
    const bool int8 = (weight->dtype() == dsp::DType::i8 || int4) && scales;
    const dsp::DType operand = int8 ? scales->dtype() : weight->dtype();
    // convert_activations, unless the norm prologue's second kernel writes the GEMM's
    // operand itself (its OUT_DT; it is the step's last kernel), or the input already is of
    // the operand's dtype (f32, or the plan's half activations: dsc-activation-dtype).
    const uint32_t kernelCount = length(step.kernels());
    const bool tileKernel = int8 && kernelCount > 0 &&
                            kernelConstant(step, kernelCount - 1, "TILE_N", 0) != 0;
    const uint32_t lastNorm = kernelCount - (tileKernel ? 1 : 0);
    const bool normWritesOperand =
        norm && lastNorm > 0 && kernelConstant(step, lastNorm - 1, "OUT_DT", -1) != -1;
    const int32_t input = inputAt(step, 0);
    const dsp::DType inputType = input >= 0 ? tensor(input).dtype() : dsp::DType::f32;
    cost.kernels += operand != inputType && !normWritesOperand;
    const bool tilePath = tileKernel && rows <= tileGemmRows();
    if (tilePath) {
      cost.kernels += 1;  // gemm_dequant
    } else if (int8) {
      int64_t rowBytes = std::max<int64_t>(k * dtypeSize(planDType(operand)), 1);
      int64_t partRows = std::max<int64_t>(1, kScratchPartBytes / rowBytes);
      if (partRows < n && partRows >= 64)
        partRows -= partRows % 64;
      partRows = std::min(partRows, n);
      uint32_t parts = static_cast<uint32_t>((n + partRows - 1) / partRows);
      cost.kernels += parts;  // dequantize_int8
      cost.gemms += parts;
    } else {
      cost.gemms += 1;
    }
    const int32_t biasInput = isLinear ? inputAt(step, 2) : -1;
    const bool bias = biasInput >= 0;
    const int64_t act = kernelConstant(step, 0, "ACT", -1);
    const bool activation = act != -1;
    // A residual alone is the GEMM's C (in place, or cuBLASLt's C ≠ D); with an activation
    // the epilogue adds it. The LM head's logit scale or cap is the epilogue's too.
    const bool logits = kernelConstant(step, 1, "LOGIT_SCALE_BITS", 0x3f800000) != 0x3f800000 ||
                        kernelConstant(step, 1, "LOGIT_CAP_BITS", 0) != 0;
    // cuBLASLt's own epilogue takes an f32 bias (its product's type) and ReLU or tanh-GELU
    // (ACT 4, 1), not beside a residual and an activation both, not a gated pair; a half
    // bias is counted as declined (cublasLt.h: the bias has D's type).
    const bool residual = isLinear && inputAt(step, 4) >= 0;
    const bool gated = kernelConstant(step, 0, "GATED", 0) != 0;
    const bool cublasEpilogue = !gated && !logits && (act == -1 || act == 1 || act == 4) &&
                                !(activation && residual) &&
                                (!bias || storedDType(biasInput) == dsp::DType::f32);
    cost.kernels += (bias || activation || logits) && (tilePath || !cublasEpilogue);
  }

  static int64_t tileGemmRows() {
    const char *value = std::getenv("DSRT_CUDA_TILE_GEMM_ROWS");
    if (!value || !*value)
      return 512;
    char *end = nullptr;
    const long long rows = std::strtoll(value, &end, 10);
    return end && *end == '\0' && rows >= 0 ? rows : 512;
  }

  // CudaExecutor.cpp's runIf runs one branch; which one depends on a value, so the larger
  // is counted. Its outputs are known on the host when the branch's are.
  StepCost ifCost(const dsp::Step &step, ProgramCost &out, int depth) {
    StepCost cost;
    cost.placement = Placement::If;
    out.branchEstimated = true;
    std::vector<char> before = hostKnown_, chosen = hostKnown_;
    const dsp::Program *chosenBranch = nullptr;
    ProgramCost chosenCost;
    for (uint32_t b = 0; b < length(step.branches()) && depth < 16; ++b) {
      int32_t index = step.branches()->Get(b);
      if (index < 0 || static_cast<uint32_t>(index) >= length(plan_.programs()))
        continue;
      const dsp::Program &branch = *plan_.programs()->Get(index);
      hostKnown_ = before;
      ProgramCost part;
      walk(branch, part, depth + 1);
      if (!chosenBranch || part.streamOps() > chosenCost.streamOps()) {
        chosenBranch = &branch;
        chosen = hostKnown_;
        chosenCost = std::move(part);
      }
    }
    cost.kernels = static_cast<uint32_t>(chosenCost.kernels);
    cost.gemms = static_cast<uint32_t>(chosenCost.gemms);
    cost.copies = static_cast<uint32_t>(chosenCost.copies);
    cost.collectives = static_cast<uint32_t>(chosenCost.collectives);
    out.kvBytes += chosenCost.kvBytes;
    for (const auto &[op, count] : chosenCost.launchesByOp)
      out.launchesByOp[op] += count;
    hostKnown_ = chosen;
    if (chosenBranch)
      for (uint32_t o = 0; o < length(step.outputs()) && o < length(chosenBranch->branch_outputs()); ++o)
        hostKnown_[step.outputs()->Get(o)] = chosen[chosenBranch->branch_outputs()->Get(o)];
    return cost;
  }

  const dsp::Plan &plan_;
  const dsp::WeightSection &section_;
  Workload workload_;
  const std::vector<KvLayer> &cache_;
  int64_t newTokens_ = 1;
  int64_t maxBatch_ = 0;
  std::vector<char> hostKnown_;
};

} // namespace

bool hasGpuLauncher(std::string_view op) {
  // The ops GpuOpRegistry.cpp's table lists (each family's add*GpuOps); the CUDA tests
  // compare this with findGpuOp for every op of the fixture plans.
  static constexpr std::string_view kOps[] = {
      "tfm.all_reduce", "tfm.all_gather", "tfm.attention", "tfm.linear", "tfm.lm_head",
      "tfm.embedding", "tfm.layer_norm", "tfm.rms_norm", "tfm.activation", "tfm.gated_act",
      "tfm.gated_act_packed", "tfm.residual_add",
      "tfm.moe",  // MoeOps.cpp
      // GenericOps.cpp: unary, binary, Where, Cast, copies, scans, softmax, reductions;
      // GenericMatMul.cpp; GenericIndexing.cpp (TopK and OneHot too)
      "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Erf", "Sigmoid", "Relu", "Sin",
      "Cos", "Floor", "Not", "IsNaN", "Gelu", "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max",
      "Min", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Where",
      "Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose",
      "Expand", "Slice", "Concat", "Split", "Gather", "CumSum", "Softmax", "LogSoftmax",
      "ReduceSum", "ReduceMean", "ReduceMax", "MatMul", "GatherND",
      "GatherElements", "TopK", "OneHot"};
  return std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps);
}

Status modelProgram(const dsp::Plan &plan, const std::string &program, const Workload &workload,
                    ProgramCost &out) {
  out = ProgramCost();
  out.name = program;
  const int64_t maxBatch = plan.limits() ? plan.limits()->max_batch() : 0;
  const int64_t maxSeq = plan.limits() ? plan.limits()->max_seq_len() : 0;
  if (workload.batch < 1 || (maxBatch > 0 && workload.batch > maxBatch))
    return Status::error("batch " + std::to_string(workload.batch) +
                         " is outside the plan's limits [1, " + std::to_string(maxBatch) + "]");
  if (workload.context < 0 || (maxSeq > 0 && workload.context > maxSeq))
    return Status::error("context " + std::to_string(workload.context) +
                         " is outside the plan's limits [0, " + std::to_string(maxSeq) + "]");
  const dsp::WeightSection *section = nullptr;
  for (uint32_t r = 0; r < length(plan.sections()); ++r)
    if (plan.sections()->Get(r)->rank() == workload.rank)
      section = plan.sections()->Get(r);
  if (!section)
    return Status::error("rank " + std::to_string(workload.rank) + " is outside the plan: it has " +
                         std::to_string(length(plan.sections())) + " rank(s)");
  const dsp::Program *found = nullptr;
  for (uint32_t p = 0; p < length(plan.programs()); ++p)
    if (str(plan.programs()->Get(p)->name()) == program)
      found = plan.programs()->Get(p);
  if (!found || program.empty())
    return Status::error("the plan has no program '" + program + "'");

  // One new token per sequence where the ids input is bounded to one column (decode).
  out.newTokens = std::max<int64_t>(workload.context, 1);
  std::string ids = plan.model() ? str(plan.model()->input_ids()) : std::string();
  for (uint32_t i = 0; i < length(found->inputs()); ++i) {
    const dsp::Tensor &input = *plan.tensors()->Get(found->inputs()->Get(i));
    if (!ids.empty() && str(input.name()) == ids && length(input.max_shape()) >= 2 &&
        input.max_shape()->Get(1) == 1)
      out.newTokens = 1;
  }

  std::vector<KvLayer> cache;
  DSRT_RETURN_IF_ERROR(kvCacheLayers(plan, workload.rank, cache));
  Walker walker(plan, *section, workload, cache, out.newTokens);
  walker.walk(*found, out);
  size_t attentionSteps = 0;
  for (uint32_t s = 0; s < length(found->steps()); ++s)
    attentionSteps += str(found->steps()->Get(s)->op()) == "tfm.attention";
  // Layers that share an earlier layer's cache (Gemma-4's) have an attention of their own.
  out.layers = std::max(cache.size(), attentionSteps);
  return programWeightBytes(plan, workload.rank, program, out.weightBytes,
                            workload.batch * out.newTokens);
}

double predictedSeconds(const ProgramCost &cost, double bytesPerSecond, double launchSeconds) {
  return static_cast<double>(cost.totalBytes()) / bytesPerSecond +
         static_cast<double>(cost.streamOps()) * launchSeconds;
}

} // namespace dsrt::roofline
