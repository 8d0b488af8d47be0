// dsc-recognize-attention: see Passes.td.
//
// Structure only proposes: which values are Q, K, V, the past inputs, the presents and the
// output. Semantics are proven by running the graph's own ops on a probe with the
// runtime's kernels and comparing with what tfm.attention would compute from the proposed
// operands, so every exporter variant of masks, scales, rotary and head plumbing is
// covered by one matcher, and anything that does not compute the same numbers is declined.
#include "compiler/recognize/Passes.h"
#include "compiler/recognize/AttentionMatch.h"
#include "compiler/recognize/DeadOps.h"
#include "compiler/recognize/RecognizeAttention.h"
#include "compiler/lowering/PositionTables.h"
#include "compiler/lowering/SymbolicDims.h"

#include "frontends/onnx/WeightStore.h"

#include <map>

namespace dsc {
#define GEN_PASS_DEF_RECOGNIZEATTENTION
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

using namespace attention;

// `value` before the Reshapes that view it (each attention's rewrite flattens the heads it
// reads with a Reshape of its own).
Value viewedSource(Value value) {
  while (Operation *def = value.getDefiningOp()) {
    if (!isOp(def, "onnx.Reshape"))
      break;
    value = def->getOperand(0);
  }
  return value;
}

// Attentions that read the same keys and values (Gemma-4's KV-shared layers attend to an
// earlier layer's) and store them alike (the same rotation, norm and heads) share that
// layer's cache: each writes the same keys at the same positions, and the session holds
// them once. The layers are then numbered again without gaps, in order of first use.
void shareCacheLayers(func::FuncOp func) {
  llvm::DenseMap<Block *, SmallVector<tfm::AttentionOp>> byBlock;
  func.walk([&](tfm::AttentionOp op) {
    if (op.getCacheLayer())
      byBlock[op->getBlock()].push_back(op);
  });
  auto storesAlike = [](tfm::AttentionOp a, tfm::AttentionOp b) {
    return a.getCausal() && b.getCausal() &&
           viewedSource(a.getKey()) == viewedSource(b.getKey()) &&
           viewedSource(a.getValue()) == viewedSource(b.getValue()) &&
           a.getPast() == b.getPast() && a.getPositions() == b.getPositions() &&
           a.getKeyNormScale() == b.getKeyNormScale() &&
           a.getQkNormEpsilonAttr() == b.getQkNormEpsilonAttr() &&
           a.getQkNormAfterRotary() == b.getQkNormAfterRotary() &&
           a.getNumKvHeads() == b.getNumKvHeads() && a.getHeadDim() == b.getHeadDim() &&
           a.getRotaryAttr() == b.getRotaryAttr() && a.getCacheDtypeAttr() == b.getCacheDtypeAttr() &&
           !a.getPackedQkv() && !b.getPackedQkv();
  };
  Builder builder(func.getContext());
  for (auto &[block, attentions] : byBlock) {
    for (size_t i = 0; i < attentions.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (storesAlike(attentions[j], attentions[i])) {
          attentions[i].setCacheLayerAttr(attentions[j].getCacheLayerAttr());
          break;
        }
    std::map<uint64_t, int64_t> renumbered;
    for (tfm::AttentionOp op : attentions)
      renumbered.try_emplace(*op.getCacheLayer(), static_cast<int64_t>(renumbered.size()));
    for (tfm::AttentionOp op : attentions)
      op.setCacheLayerAttr(builder.getI64IntegerAttr(renumbered[*op.getCacheLayer()]));
  }
}

void recognizeInFunction(func::FuncOp func, const onnx_frontend::WeightStore *weights,
                         bool reportDeclines, int64_t longestSequence) {
  std::string why;
  SmallVector<Operation *> softmaxes;
  func.walk([&](Operation *op) {
    if (isOp(op, "onnx.Softmax"))
      softmaxes.push_back(op);
  });
  if (softmaxes.empty())
    return;
  llvm::DenseSet<Value> tainted = activations(func);
  llvm::DenseMap<Operation *, int64_t> layerOf;
  llvm::DenseMap<Block *, int64_t> layers;
  for (Operation *softmax : softmaxes)
    layerOf[softmax] = layers[softmax->getBlock()]++;

  // Match everything first: the probe's values stay valid while nothing is rewritten. A
  // softmax the first probe cannot reach (Optimum's merged decoder: the branch without a
  // cache runs only without cached tokens) gets a second probe with none.
  std::vector<std::pair<Candidate, int64_t>> matched;
  llvm::DenseMap<Operation *, std::string> reasons;
  SmallVector<ImpliedTable> impliedTables;
  SmallVector<LengthBranch> branches;
  Value maskArgument;
  SmallVector<Operation *> pending = softmaxes;
  const InputDims inputDims = InputDims::of(func);
  const bool hasPast = inputDims.hasPast();
  for (int64_t past : {kProbePast, int64_t(0)}) {
    ProbeEvaluator probe(weights);
    Value attentionMask, positionIds, crossMask;
    if (failed(setUpProbe(func, past, probe, attentionMask, positionIds, why,
                          /*lengthen=*/false, &crossMask))) {
      if (reportDeclines)
        func.emitRemark() << "attention not recognised: " << why;
      return;
    }
    probe.runBlock(func.getBody().front());
    // The tokens the probe holds before the new ones: `past` in an export with a cache,
    // whose own padding mask then says where positions start (an optimum decoder without
    // one, whose only mask is the encoder's, counts them from its past's shape: those stay
    // as they are); none in an export without a cache.
    if (past == kProbePast)
      branches = lengthBranches(func, probe, (hasPast ? past : 0) + kProbeNew);
    if (past == kProbePast && !positionIds && (attentionMask || !hasPast))
      impliedTables = tablesAtImpliedPositions(func, probe, hasPast ? past : 0);
    if (!positionIds && hasPast) {
      // Optimum's merged decoder also has a branch without a cache (its first step, which
      // one of the probes runs), whose positions count the new tokens alone: lookups that
      // read the length of no past input, nor of the mask, are at 0 + t + offset.
      SmallVector<Value> otherLengths;
      for (BlockArgument argument : func.getArguments())
        if (inputDims.kindOf(argument.getArgNumber()) == InputKind::PastKV)
          otherLengths.push_back(argument);
      if (attentionMask)
        otherLengths.push_back(attentionMask);
      for (const ImpliedTable &table : tablesAtImpliedPositions(func, probe, 0, otherLengths))
        if (llvm::none_of(impliedTables,
                          [&](const ImpliedTable &known) { return known.lookup == table.lookup; }))
          impliedTables.push_back(table);
    }
    SmallVector<Operation *> unreached;
    maskArgument = attentionMask;
    for (Operation *softmax : pending) {
      Candidate candidate;
      Matcher matcher(probe, attentionMask, positionIds, tainted, crossMask);
      std::string reason = matcher.match(softmax, candidate);
      if (reason.empty()) {
        candidate.attentionMask = attentionMask;
        candidate.positionIds = positionIds;
        matched.push_back({std::move(candidate), layerOf[softmax]});
        reasons.erase(softmax);
        continue;
      }
      if (!reasons.count(softmax) || probe.lookup(softmax->getResult(0)))
        reasons[softmax] = reason;
      if (!probe.lookup(softmax->getResult(0)))
        unreached.push_back(softmax);
    }
    pending = unreached;
    if (pending.empty())
      break;
  }
  // The small probe sees windows shorter than its 12 keys only: a self-attention is probed
  // again with many tokens (cached ones, or, in a graph without a cache, new ones), and its
  // queries must see exactly the keys the window (or its absence) says: an encoder's local
  // window of 128 (ModernBERT's) shows on no short probe. Masks sliced from a buffer of the
  // model's length run on the longest probe that fits. A plan that holds more than 2048
  // keys (--max-seq-len) is probed at its limit first: Mistral-v0.1's window of 4096 would
  // pass for none on 2048 keys, and be wrong past them.
  SmallVector<Candidate *> unchecked;
  for (auto &[candidate, layer] : matched)
    if (!candidate.cross)
      unchecked.push_back(&candidate);
  SmallVector<int64_t> longPasts = {2041, 505, 121, 57};
  // At most 2^17 keys: the probe's scores are batch x heads x new x keys floats (470 MB for
  // 64 heads), and no model's window is longer.
  constexpr int64_t kLongestProbe = int64_t(1) << 17;
  const int64_t longest = std::min(longestSequence, kLongestProbe);
  if (hasPast && longest - kProbeNew > longPasts.front())
    longPasts.insert(longPasts.begin(), longest - kProbeNew);
  for (int64_t past : longPasts) {
    if (unchecked.empty())
      break;
    // The mask of a long probe ([batch, 1, new, keys]) is computed even past 2^20 elements.
    const int64_t maskElements = 2 * kProbeBatch * kProbeNew * (past + kProbeNew);
    ProbeEvaluator probe(weights, std::max(kMaxKnownElements, maskElements));
    Value attentionMask, positionIds;
    if (failed(setUpProbe(func, past, probe, attentionMask, positionIds, why,
                          /*lengthen=*/true)))
      continue;
    probe.runBlock(func.getBody().front());
    SmallVector<Candidate *> later;
    for (Candidate *c : unchecked) {
      std::optional<bool> windowHolds = checkLongWindow(probe, *c);
      if (!windowHolds) {
        later.push_back(c);
        continue;
      }
      if (!*windowHolds)
        c->declined = "mask: on a probe " + std::to_string(past) +
                      " tokens longer, the queries' keys are not those of " +
                      (c->window ? "a window of " + std::to_string(c->window)
                       : c->causal ? std::string("a causal mask without a window")
                                   : std::string("the padding mask without a window"));
    }
    unchecked = later;
  }
  {
    ProbeEvaluator probe(weights);
    Value attentionMask, positionIds;
    if (!matched.empty() &&
        succeeded(setUpProbe(func, 0, probe, attentionMask, positionIds, why))) {
      probe.runBlock(func.getBody().front());
      for (auto &[candidate, layer] : matched)
        classifyUnattended(probe, attentionMask, candidate);
    }
  }
  // A value of one attention's region that something outside it reads must be read by
  // another recognised attention, whose rewrite then lets it die: both attentions are
  // rebuilt from the sources, and the one rewritten last leaves the shared ops unused.
  // Declining one attention can strand another's shared reader: repeat until none changes.
  for (bool changed = true; changed;) {
    changed = false;
    for (auto &[candidate, layer] : matched) {
      if (!candidate.declined.empty() || candidate.sharedReaders.empty())
        continue;
      bool covered = llvm::all_of(candidate.sharedReaders, [&](Operation *reader) {
        return llvm::any_of(matched, [&](auto &other) {
          return &other.first != &candidate && other.first.declined.empty() &&
                 other.first.region.contains(reader);
        });
      });
      if (!covered) {
        candidate.declined = candidate.sharedWhy;
        changed = true;
      }
    }
  }
  // An attention that reads a value the export chose by the sequence's length (LongRoPE's
  // rotary tables) was proven on the probe's branch: the plan holds only lengths that take
  // it (the lowering bounds --max-seq-len by them, saying why), and where dsc cannot read
  // which lengths those are, the attention is declined.
  int64_t longestByBranches = 0;
  for (const LengthBranch &branch : branches)
    for (Candidate *reader : candidatesReading(branch, matched)) {
      if (!reader->declined.empty())
        continue;
      if (!branch.unread.empty()) {
        reader->declined = "it reads a value an If chooses by the sequence's length, and " +
                           branch.unread;
        continue;
      }
      longestByBranches = longestByBranches ? std::min(longestByBranches, branch.longest)
                                            : branch.longest;
    }
  if (longestByBranches > 0)
    func->setAttr(kLongestByLengthBranchesAttr,
                  IntegerAttr::get(IntegerType::get(func.getContext(), 64), longestByBranches));
  for (auto &[candidate, layer] : matched)
    if (!candidate.declined.empty())
      reasons[candidate.softmax] = candidate.declined;
  if (reportDeclines)
    for (Operation *softmax : softmaxes)
      if (reasons.count(softmax))
        softmax->emitRemark() << "attention not recognised: " << reasons[softmax];
  // A Shape op two candidates recorded (a value in both regions) is recomputed by the
  // first rewrite only, which erases it.
  llvm::DenseSet<Operation *> claimedShapeReads;
  for (auto &[candidate, layer] : matched) {
    if (!candidate.declined.empty())
      continue;
    llvm::erase_if(candidate.shapeReads, [&](const Candidate::ShapeRead &read) {
      return !claimedShapeReads.insert(read.shape).second;
    });
    std::string reason =
        rewrite(candidate, layer, candidate.attentionMask, candidate.positionIds);
    if (!reason.empty() && reportDeclines)
      candidate.softmax->emitRemark() << "attention not recognised: " << reason;
  }
  takeImpliedPositions(func, impliedTables, maskArgument);
  if (!matched.empty() || !impliedTables.empty())
    eraseDeadOps(func);
  shareCacheLayers(func);
}

struct RecognizeAttentionPass : impl::RecognizeAttentionBase<RecognizeAttentionPass> {
  using RecognizeAttentionBase::RecognizeAttentionBase;
  RecognizeAttentionPass(const onnx_frontend::WeightStore *weights, bool report,
                         int64_t longest)
      : weights_(weights) {
    reportDeclines = report;
    longestSequence = longest;
  }

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      recognizeInFunction(func, weights_, reportDeclines, longestSequence);
  }

  const onnx_frontend::WeightStore *weights_ = nullptr;
};

} // namespace

std::unique_ptr<Pass> createRecognizeAttentionWithWeights(const onnx_frontend::WeightStore *weights,
                                                          bool reportDeclines,
                                                          int64_t longestSequence) {
  return std::make_unique<RecognizeAttentionPass>(weights, reportDeclines, longestSequence);
}

} // namespace dsc
