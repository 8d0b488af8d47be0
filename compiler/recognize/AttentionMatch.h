// Shared by the files of dsc-recognize-attention: the probe's sizes, the candidate a
// softmax proposes, the matcher that proves it (AttentionStructure.cpp follows the graph,
// AttentionProofs.cpp and AttentionMaskProofs.cpp prove on the probe), the probe's inputs
// (AttentionProbe.cpp) and the rewrite into tfm.attention (AttentionRewrite.cpp).
//
// Structure only proposes: which values are Q, K, V, the past inputs, the presents and the
// output. Semantics are proven by running the graph's own ops on a probe with the
// runtime's kernels and comparing with what tfm.attention would compute from the proposed
// operands, so every exporter variant of masks, scales, rotary and head plumbing is
// covered by one matcher, and anything that does not compute the same numbers is declined.
#ifndef DSC_COMPILER_RECOGNIZE_ATTENTIONMATCH_H
#define DSC_COMPILER_RECOGNIZE_ATTENTIONMATCH_H

#include "compiler/recognize/ProbeEvaluator.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dsc::attention {

using namespace mlir;
using namespace probe;

// The probe: large enough that a left-padded row, the causal triangle, a local window of
// up to 11 tokens and the rotary frequencies are all visible, small enough to be free.
constexpr int64_t kProbeBatch = 2;
constexpr int64_t kProbePast = 5;
constexpr int64_t kProbeNew = 7;
constexpr int64_t kProbePadding = 2;  // leading masked tokens of every row but the first
// Additive bias at or below this is a masked position (exp underflows to 0 in fp32).
constexpr float kMaskedBelow = -1e4f;
constexpr double kTolerance = 1e-4;

using namespace probe;

//===----------------------------------------------------------------------===//
// Numbers (AttentionProbe.cpp).
//===----------------------------------------------------------------------===//

std::vector<float> floats(const dsrt::OwnedTensor &tensor);
std::vector<int64_t> integers(const dsrt::OwnedTensor &tensor);
std::shared_ptr<dsrt::OwnedTensor> randomTensor(dsrt::Shape shape, uint64_t seed);

// What a graph output computes before the Cast that gives it the half type the export
// declares (dsc-widen-half-precision widens the graph inside its interface): the Cast's
// f32 input when `output` is such a Cast, read by nothing but the terminator; else null.
Value interfaceCastInput(Value output);

// A graph input of a half type as the graph reads it: the f32 Cast that
// dsc-widen-half-precision put where it enters, when that is its only reader but shape
// reads; else `input`.
Value widenedInput(Value input);
std::shared_ptr<dsrt::OwnedTensor> filledTensor(dsrt::Shape shape, float value);
bool close(double actual, double expected);
// BLOOM's build_alibi_tensor slopes.
std::vector<double> alibiSlopes(int64_t heads);

struct Rotary {
  int64_t dim = 0;
  double base = 10000;
  bool interleaved = false;
  std::vector<float> invFreq;  // as transformers computes them, in fp32
  // invFreq was measured and no base reproduces it (llama3, linear, yarn scaling).
  bool explicitTable = false;
  // yarn's and longrope's attention factor: cos and sin, so the rotated features, are
  // scaled by it (the pass-through features of a partial rotary are not).
  float attentionFactor = 1;

  void setBase(double newBase) {
    base = newBase;
    explicitTable = false;
    invFreq.clear();
    for (int64_t i = 0; i < dim / 2; ++i)
      invFreq.push_back(1.0f / std::pow(float(base), float(2 * i) / float(dim)));
  }
  std::pair<int64_t, int64_t> pair(int64_t i) const {
    return interleaved ? std::pair{2 * i, 2 * i + 1} : std::pair{i, i + dim / 2};
  }
  // Rotates one head vector in place at `position`.
  void apply(float *x, int64_t position) const {
    for (int64_t i = 0; i < dim / 2; ++i) {
      auto [a, b] = pair(i);
      float angle = float(position) * invFreq[i];
      float c = std::cos(angle) * attentionFactor, s = std::sin(angle) * attentionFactor;
      float xa = x[a], xb = x[b];
      x[a] = xa * c - xb * s;
      x[b] = xb * c + xa * s;
    }
  }
};


//===----------------------------------------------------------------------===//
// The matcher.
//===----------------------------------------------------------------------===//

struct Candidate {
  // Structure.
  Operation *softmax = nullptr;
  Operation *scores = nullptr;   // MatMul(Q, K^T)
  Operation *context = nullptr;  // MatMul(P, V)
  Value root;                    // [b, s, heads * d], or [b * s, heads * d] when flatRoot
  bool flatRoot = false;         // merged straight into rows (GPT-2's Conv1D under dynamo)
  bool headsRoot = false;        // [b, s, heads, d], gated before the merge (HrmText)
  Value restoredProjection;      // and then: Reshape(linear(rows)) back to [b, s, out]
  Value querySource, keySource, valueSource;  // [b, s, n * d] or [b, s, n, d]
  int64_t queryRank = 3, keyRank = 3, valueRank = 3;  // of the sources, on the probe
  // A source [b, n, s, d]: heads split off a fused projection after the heads were moved
  // first (GPT-NeoX's query_key_value under transformers 5).
  bool queryHeadsFirst = false, keyHeadsFirst = false, valueHeadsFirst = false;
  Value pastKey, pastValue;
  Value presentKey, presentValue;
  Value attentionMask, positionIds;  // the graph inputs, when the function has them
  // A cross-attention: keys and values projected from another sequence (an encoder's
  // output) of `crossLength` tokens on the probe, masked by `crossMask` (the encoder's
  // padding mask) rather than by attentionMask.
  bool cross = false;
  int64_t crossLength = 0;
  Value crossMask;
  // An additive bias computed in the graph outside the attention (T5's relative position
  // bias), [b or 1, heads or 1, seq, total] on the probe.
  Value bias;
  // Where the score chain ends (the softmax's operand) and the probabilities the product
  // with V reads (the softmax's result), unless the softmax has sinks (GPT-OSS,
  // AttentionSinks.cpp): it then reads Concat(logits, a column of one logit per head) less
  // the row's maximum, and `probs` is the Slice that drops that column. `sinks`: those
  // logits, one per head; empty without.
  Value logits, probs;
  std::vector<float> sinks;
  std::string declined;              // set when a later check refutes the match
  // Proven semantics.
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  double scale = 1;
  bool causal = false, alibi = false, padding = false;
  int64_t window = 0;
  // Queries with no key to attend (left padding under a causal mask) average the values
  // of every key ("all") or of the causally visible ones ("causal"), as the export does.
  std::string unattended = "all";
  bool nanGuard = false;  // sdpa's Where(IsNaN(P), 0, P) after the softmax
  bool chainHasTanh = false;  // the score chain may cap the scores (Gemma-2)
  double softcap = 0;         // scores become softcap * tanh(scores / softcap); 0: none
  std::optional<Rotary> rotary;
  // The relative rounding of the rotary's table where it is a half model's rounded one
  // (proveQuery), which the keys' proof allows too; 0 for an exact one.
  double rotaryTableRounding = 0;
  // RMS norms over each head that come after the rotary (NanoChat's and HunYuan-Dense's q
  // and k norms). The rotation keeps each head's mean square: with one scale for every
  // feature such a norm is the same norm before the rotation, which the proofs apply to
  // the source and the rewrite places on it (dsc-fuse-qk-norm then moves it into the
  // attention). With a scale per feature (`normsAfterRotary`, both norms), the heads are
  // normalised, rotated, then scaled: the attention's qk_norm_after_rotary.
  tfm::RmsNormOp queryNorm, keyNorm;
  bool normsAfterRotary = false;
  // An attention factor that the query's scale absorbed (a whole head rotated): the keys'
  // new rows against their cached ones reveal it (AttentionProofs.cpp).
  double absorbedFactor = 1;
  // Rotated at past + t, computed inside the graph (no position_ids input).
  bool impliedPositions = false;
  llvm::SetVector<Operation *> region;
  // onnx.Shape ops that read values of the region (the export measured its key length on
  // the heads it built): the rewrite computes their results from the attention's sources,
  // so that the region dies whole and tp-shard sees no other user of the projections.
  struct ShapeRead {
    Operation *shape;
    enum Dim { Batch, Queries, Keys, Constant };
    SmallVector<std::pair<Dim, int64_t>> dims;  // the dimensions the Shape returns
  };
  SmallVector<ShapeRead> shapeReads;
  // Values of the region that ops outside it read: allowed only where each such op is in
  // another recognised attention's region (Gemma-4's KV-shared layers attend to an earlier
  // layer's keys and values, built once), which recognizeInFunction checks once every
  // softmax is matched. `sharedWhy` says what is refused when one is not.
  SmallVector<Operation *> sharedReaders;
  std::string sharedWhy;
};

class Matcher {
public:
  Matcher(const ProbeEvaluator &probe, Value attentionMask, Value positionIds,
          const llvm::DenseSet<Value> &tainted, Value crossMask = Value())
      : probe_(probe), attentionMask_(attentionMask), positionIds_(positionIds),
        crossMask_(crossMask), tainted_(tainted) {}

  // Empty on success, else the reason.
  std::string match(Operation *softmax, Candidate &c);

private:
  const dsrt::Shape *shapeOf(Value v) const {
    const Info *info = probe_.lookup(v);
    return info && !info->isNone ? &info->shape : nullptr;
  }
  bool isTainted(Value v) const { return tainted_.contains(v); }
  bool foldsOneHeadIntoBatch(Value value);
  std::string findSources(Value from, int64_t exactHeads, int64_t maxHeads, bool allowPast,
                          Value &source, Value &past, int64_t &sourceHeads, bool &headsFirst,
                          tfm::RmsNormOp *postRotaryNorm = nullptr);
  // Whether `norm` may be taken into the attention from after what precedes it on the Q/K
  // path (see Candidate::queryNorm): an RMS norm alone, with a known scale of [head_dim],
  // of heads that are not a mere view of the projection (those are where the heads enter,
  // as Qwen3's). AttentionHeadNorms.cpp.
  bool isMovableHeadNorm(tfm::RmsNormOp norm) const;
  bool hasUniformScale(tfm::RmsNormOp norm) const;
  std::vector<float> headNormScale(tfm::RmsNormOp norm) const;
  // What such a norm computes before the rotation, in place on each `d` consecutive values
  // of `x` (without the scale when it comes after the rotation).
  void applyHeadNorm(const Candidate &c, tfm::RmsNormOp norm, std::vector<float> &x,
                     int64_t d) const;
  // Multiplies (or divides) `count` rotated values, heads of `d`, by the scale of a norm
  // after the rotation; nothing otherwise.
  void scaleRotatedHeads(const Candidate &c, tfm::RmsNormOp norm, float *x, size_t count,
                         int64_t d, bool divide) const;
  std::string matchOnce(Operation *softmax, Candidate &c);
  // Sets the candidate's logits and probs, and its sinks where the softmax has them; the
  // reason where it has something like them that is not (AttentionSinks.cpp).
  std::string peelSinks(Candidate &c);
  bool movePostRotaryNorms_ = true;
  std::string proveQuery(Candidate &c, double &qscale);
  // The rotation's inverse frequencies, read off the graph for a layout and dim; none when
  // the query does not turn as `shape`'s pairs would.
  struct Frequencies {
    std::vector<double> inverse;
    double attentionFactor = 1;  // the rotated features' amplitude against qscale's
  };
  std::optional<Frequencies> measureFrequencies(const Candidate &c, const Rotary &shape,
                                                double qscale, const std::vector<int64_t> &pos);
  std::string proveKeyValue(Candidate &c, bool isKey, double &kscale);
  std::string proveScores(Candidate &c, double &chainScale);
  std::string proveSoftcap(Candidate &c, const std::vector<char> &attended,
                           const std::vector<float> &bias, double &chainScale);
  std::string proveOutput(Candidate &c);
  void recordShapeRead(Candidate &c, Operation *shape);
  // The bias at attended positions, neither zero nor ALiBi: a value computed outside the
  // attention that equals it there.
  std::string proveBias(Candidate &c, const std::vector<char> &attended,
                        const std::vector<float> &bias);
  bool isAlibi(const Candidate &c, const std::vector<char> &attended,
               const std::vector<float> &bias, const std::vector<int64_t> &padding);
  std::vector<int64_t> positions() const;

  const ProbeEvaluator &probe_;
  Value attentionMask_, positionIds_, crossMask_;
  std::vector<int64_t> impliedPositions_;  // past + t, while the query is tried at them
  const llvm::DenseSet<Value> &tainted_;
  int64_t batch_ = kProbeBatch, fresh_ = kProbeNew, total_ = 0, past_ = 0;
  int64_t heads_ = 0, headDim_ = 0;
};

// A source's values in [b, s, n, d] order, the order the proofs index; a heads-first
// source holds them as [b, n, s, d].
std::vector<float> headsLast(std::vector<float> x, bool headsFirst, int64_t B, int64_t N,
                             int64_t S, int64_t D);
// The relative rounding of a rotary table stored in the half type of a half model's export
// (dsc-widen-half-precision's dsc.half_export): 2^-11 for f16, 2^-8 for bf16; 0 otherwise.
double halfTableRounding(const Candidate &c);
// What the export computes at rows with nothing to attend; none when the probe has no
// such row (AttentionMaskProofs.cpp).
std::optional<std::string> unattendedRule(const Candidate &c, const std::vector<float> &bias,
                                          const std::vector<int64_t> &padding, int64_t B,
                                          int64_t S, int64_t T, int64_t P);
// On a probe with nothing cached: the rule at rows with nothing to attend.
void classifyUnattended(const ProbeEvaluator &probe, Value attentionMask, Candidate &c);
// On a probe with many tokens: whether the unpadded first row's queries attend exactly the
// keys the candidate's window (or its absence) says, or those of a longer window this probe
// shows (which then becomes the candidate's); nullopt when this probe cannot tell.
std::optional<bool> checkLongWindow(const ProbeEvaluator &probe, Candidate &c);

//===----------------------------------------------------------------------===//
// The probe's inputs (AttentionProbe.cpp).
//===----------------------------------------------------------------------===//

llvm::StringRef argName(func::FuncOp func, unsigned index);
// Fills the probe's graph inputs: shapes from the symbolic dimensions, values for the
// integer inputs (a left-padded attention mask, positions as transformers' generate
// computes them, token ids), none for float inputs (the past).
// An encoder-decoder's decoder: the encoder's padding mask gets padding at the end of
// every row but the first (as the generator right-pads the encoder's prompts), and
// `crossMask` is that input.
LogicalResult setUpProbe(func::FuncOp func, int64_t past, ProbeEvaluator &probe,
                         Value &attentionMask, Value &positionIds, std::string &why,
                         bool lengthen = false, Value *crossMask = nullptr);
// Activations: what the token ids and the float inputs flow into, through data (not
// through Shape/Size, which read only shapes). Masks and rotary tables are not tainted.
llvm::DenseSet<Value> activations(func::FuncOp func);

//===----------------------------------------------------------------------===//
// Branches chosen by the sequence's length (LengthBranches.cpp).
//===----------------------------------------------------------------------===//

// An onnx.If whose condition compares lengths with a constant: ONNX Runtime GenAI's LongRoPE
// exports (Phi-3 128k, Phi-3.5, Phi-4-mini) pick the short or the long rotary table by the
// mask's width. The probes take one branch, so what they prove holds for the lengths that
// take it: up to `longest` tokens in all, or, where `unread` says why, no bound dsc reads.
struct LengthBranch {
  onnx::IfOp op;
  int64_t longest = 0;
  std::string unread;
};
// The function's length branches, measured on `probe`, which holds `tokens` in all.
SmallVector<LengthBranch> lengthBranches(func::FuncOp func, const ProbeEvaluator &probe,
                                         int64_t tokens);
// The matched candidates whose regions read the branch's results.
SmallVector<Candidate *> candidatesReading(const LengthBranch &branch,
                                          MutableArrayRef<std::pair<Candidate, int64_t>> matched);

//===----------------------------------------------------------------------===//
// The rewrite (AttentionRewrite.cpp).
//===----------------------------------------------------------------------===//

// Replaces a proven candidate with tfm.attention; empty on success, else why not.
std::string rewrite(Candidate &c, int64_t layer, Value attentionMask, Value positionIds);
// A lookup of a position table (GPT-2's wpe, BART's learned positions, Marian's sinusoids)
// at positions the graph computes: on the probe every row's indices are cached + t + offset
// (BART's offset is 2). `lookup` is a tfm.embedding, or an onnx.Gather of a table along axis
// 0 at 1-D indices (one row of positions for the whole batch).
struct ImpliedTable {
  Operation *lookup;
  int64_t offset;
  // Users that would not take [batch, new, features] where they took the probe's shape (a
  // Reshape back to the indices' shape, in the GroupQueryAttention the importer writes
  // out): the lookup is rewritten only if none outlives the attention rewrites.
  SmallVector<Operation *> shapeBoundUsers;
};
// The lookups at implied positions, for a probe holding `cached` tokens before the new ones;
// none whose positions read the length of one of `skipLengthsOf` (a merged decoder's past
// inputs, when probing its branch without a cache).
SmallVector<ImpliedTable> tablesAtImpliedPositions(func::FuncOp func, const ProbeEvaluator &probe,
                                                   int64_t cached,
                                                   ArrayRef<Value> skipLengthsOf = {});
// The tables' indices become the implied positions (plus the offset), which the session
// programs take as their position_ids input.
void takeImpliedPositions(func::FuncOp func, llvm::ArrayRef<ImpliedTable> tables, Value mask);

} // namespace dsc::attention

#endif
