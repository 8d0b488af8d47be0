// dsc-derive-cache-programs: see Passes.td. The pieces a session program is made of are
// SessionPrograms.h's; here, whether a program can be derived, and the derivation.
#include "compiler/recognize/Passes.h"
#include "compiler/recognize/DeadOps.h"
#include "compiler/recognize/ImpliedPositions.h"
#include "compiler/recognize/SessionPrograms.h"
#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/BitVector.h"

#include <map>
#include <tuple>

namespace dsc {
#define GEN_PASS_DEF_DERIVECACHEPROGRAMS
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

using namespace session;

llvm::StringRef resultName(func::FuncOp func, unsigned index) {
  auto name = func.getResultAttrOfType<StringAttr>(index, "onnx.name");
  return name ? name.getValue() : "";
}

// The same attention without past operands and present results: the step reads and
// writes the session's cache layer in place.
tfm::AttentionOp toSessionMode(tfm::AttentionOp op) {
  OpBuilder builder(op);
  auto session = tfm::AttentionOp::create(
      builder, op.getLoc(), op.getOutput().getType(), TypeRange(), op.getQuery(), op.getKey(),
      op.getValue(), op.getMask(), ValueRange(), op.getPositions(), op.getBias(),
      op.getQueryNormScale(), op.getKeyNormScale(), op.getSinks(), op.getNumHeadsAttr(),
      op.getNumKvHeadsAttr(), op.getHeadDimAttr(), op.getScaleAttr(), op.getCausalAttr(),
      op.getAlibiAttr(), op.getWindowAttr(), op.getRotaryAttr(), op.getCacheLayerAttr(),
      op.getSoftcapAttr(), op.getPackedQkvAttr(), op.getQkNormEpsilonAttr(),
      op.getCacheDtypeAttr(), op.getQkNormAfterRotaryAttr());
  session->setDiscardableAttrs(op->getDiscardableAttrDictionary());
  op.getOutput().replaceAllUsesWith(session.getOutput());
  op.erase();
  return session;
}

// Empty when @main is a decoder whose every attention can use the session cache, for the
// `decode` program or the prefill one (whose first step has nothing cached: a bias traced
// for the new tokens alone is right there).
std::string whyNotDecoder(func::FuncOp main, int64_t &logitsIndex, bool decode) {
  int64_t attentions = 0;
  std::string why;
  // Once: finding it walks every attention.
  const BlockArgument paddingMask = paddingMaskArgument(main);
  main.walk([&](Operation *op) {
    if (!why.empty())
      return;
    if (op->getName().getStringRef() == "onnx.Softmax") {
      why = "a softmax was not recognised as attention";
      return;
    }
    if (op != main && op->getNumRegions() != 0) {
      why = "the graph has control flow ('" + op->getName().getStringRef().str() + "')";
      return;
    }
    auto attention = dyn_cast<tfm::AttentionOp>(op);
    if (!attention)
      return;
    ++attentions;
    auto mask = dyn_cast_or_null<BlockArgument>(attention.getMask());
    if (isCrossAttention(attention)) {
      // Its keys go into a cache layer of their own, written by prefill from the encoder's
      // output; the encoder's padding mask says how many it holds.
      if (attention.getCausal())
        why = "a cross-attention is causal";
      else if (!attention.getPast().empty())
        why = "a cross-attention reads cached keys";
      else if (attention.getBias())
        why = "a cross-attention adds a bias";
      else if (!mask)
        why = "a cross-attention has no padding mask of the encoder's tokens (the session "
              "cache needs its width)";
      else if (!attention.getCacheLayer())
        why = "an attention has no cache layer";
      return;
    }
    // An export of the ids alone (no mask, nothing cached) attends every token it is given:
    // its session programs take a mask of their own (addPaddingMask).
    // Optimum's T5 decoder takes no mask of its own even with its cache; the session's
    // programs get one too.
    bool idsAlone = !attention.getMask() && !paddingMask;
    // A bias (T5's relative positions) must be one that a cached step can compute for its
    // positions (biasAtSessionPositions).
    SmallVector<Operation *> biasReads;
    if (!attention.getCausal())
      why = "an attention is not causal";
    // With past inputs the bias follows their length (replacePastShapes gives it the
    // session's); without, the token count's (biasAtSessionPositions).
    else if (attention.getBias() && !attention.getPast().empty() &&
             !computedFromLengthsAlone(attention.getBias()))
      why = "an attention adds a bias computed from values, not from lengths alone";
    else if (attention.getBias() && attention.getPast().empty() &&
             !computedFromLengthsAlone(attention.getBias()))
      why = "an attention adds a bias computed from values, not from lengths alone";
    else if (decode && attention.getBias() && attention.getPast().empty() &&
             !(why = biasLengthReads(main, attention.getBias(), biasReads)).empty())
      ;
    else if (idsAlone)
      ;
    else if (!mask || mask != paddingMask)
      why = "an attention has no padding mask of its tokens (the session cache needs it to "
            "know how many tokens it holds)";
    else if (!attention.getCacheLayer())
      why = "an attention has no cache layer";
  });
  if (!why.empty())
    return why;
  if (attentions == 0)
    return "no attention was recognised";
  // Without past inputs, whatever else reads the mask was traced for no cached tokens; only
  // positions computed from it (OPT) can be mended (keepNewTokenPositions). With them, the
  // export computes right for any past length, which the session programs give it through
  // the past's shape.
  bool hasPast = false;
  main.walk([&](tfm::AttentionOp op) { hasPast |= !op.getPast().empty(); });
  if (!hasPast && !maskPositionEmbeddings(main))
    return "attention_mask is also read outside the attention, for more than positions "
           "(which would need a past length the session cache does not give)";
  logitsIndex = -1;
  for (unsigned i = 0; i < main.getNumResults(); ++i)
    if (resultName(main, i) == "logits")
      logitsIndex = i;
  if (logitsIndex < 0)
    return "the graph has no logits output";
  return "";
}

// @main cloned as `name` with the session cache: past inputs and present outputs gone,
// only the logits returned.
FailureOr<func::FuncOp> deriveSessionProgram(func::FuncOp main, llvm::StringRef name,
                                             int64_t logitsIndex, std::string &why) {
  auto derived = cast<func::FuncOp>(main->clone());
  derived.setSymName(name);
  auto ret = cast<func::ReturnOp>(derived.getBody().front().getTerminator());
  llvm::DenseSet<Value> pastInputs;
  SmallVector<tfm::AttentionOp> attentions;
  derived.walk([&](tfm::AttentionOp op) { attentions.push_back(op); });
  for (tfm::AttentionOp op : attentions)
    for (Value past : op.getPast()) {
      // A past of a half type enters through dsc-widen-half-precision's Cast; its shape is
      // read on the input itself.
      if (auto cast = past.getDefiningOp<onnx::CastOp>();
          cast && isa<BlockArgument>(cast.getInput()))
        past = cast.getInput();
      pastInputs.insert(past);
    }
  {
    OpBuilder builder(ret);
    // The generator takes f32 logits: those of a half export (dsc-widen-half-precision's
    // f32 graph) leave before the Cast to the export's type, unrounded.
    Value logits = ret.getOperand(logitsIndex);
    if (auto cast = logits.getDefiningOp<onnx::CastOp>()) {
      Type from = getElementTypeOrSelf(cast.getInput().getType());
      if (from.isF32() && (cast.getTo().isF16() || cast.getTo().isBF16()) &&
          logits.hasOneUse()) {
        logits = cast.getInput();
        SmallVector<Type> results(derived.getFunctionType().getResults());
        results[logitsIndex] = logits.getType();
        derived.setFunctionType(
            builder.getFunctionType(derived.getFunctionType().getInputs(), results));
      }
    }
    func::ReturnOp::create(builder, ret.getLoc(), ValueRange{logits});
    ret.erase();
  }
  // The Casts that gave the presents the export's half type (dsc-widen-half-precision)
  // went with the outputs.
  eraseDeadOps(derived);
  for (tfm::AttentionOp op : attentions) {
    if (llvm::any_of(op.getPresent(), [](Value v) { return !v.use_empty(); })) {
      why = "a present key/value is used inside the graph";
      derived.erase();
      return failure();
    }
    // The step's `cross` (RuntimeTypes): its cache layer holds the encoder's keys.
    if (isCrossAttention(op))
      op->setAttr("tfm.cross_keys", UnitAttr::get(op.getContext()));
    toSessionMode(op);
  }
  eraseDeadOps(derived);
  // The past's shape reads become the mask's width less the new tokens': the mask first.
  addPaddingMask(derived);
  if (failed(replacePastShapes(derived, pastInputs, why))) {
    derived.erase();
    return failure();
  }
  if (pastInputs.empty() && failed(keepNewTokenPositions(derived, why))) {
    derived.erase();
    return failure();
  }
  if (name == "decode" && pastInputs.empty() && failed(biasAtSessionPositions(derived, why))) {
    derived.erase();
    return failure();
  }
  takePositionsAsInput(derived);
  eraseDeadOps(derived);
  if (pastInputs.empty() && failed(readNewTokensOffIds(derived, why))) {
    derived.erase();
    return failure();
  }
  if (name == "decode")
    emptyCrossKeys(derived);
  eraseDeadOps(derived);
  llvm::BitVector dropResults(derived.getNumResults(), true);
  dropResults.reset(logitsIndex);
  if (failed(derived.eraseResults(dropResults))) {
    why = "the outputs cannot be removed";
    derived.erase();
    return failure();
  }
  llvm::BitVector dropArgs(derived.getNumArguments());
  // What nothing reads leaves the interface: a decode step's encoder output, and the past
  // inputs and use_cache_branch of optimum's merged decoder, derived from its branch
  // without a cache.
  for (BlockArgument argument : derived.getArguments())
    if (argument.use_empty())
      dropArgs.set(argument.getArgNumber());
  for (BlockArgument argument : derived.getArguments()) {
    bool isPast = llvm::any_of(pastInputs, [&](Value past) {
      auto pastArg = dyn_cast<BlockArgument>(past);
      return pastArg && pastArg.getArgNumber() == argument.getArgNumber();
    });
    if (!isPast)
      continue;
    if (!argument.use_empty()) {
      why = "the past input '" + argName(derived, argument.getArgNumber()).str() +
            "' is still read outside the attention";
      derived.erase();
      return failure();
    }
    dropArgs.set(argument.getArgNumber());
  }
  if (failed(derived.eraseArguments(dropArgs))) {
    why = "the past inputs cannot be removed";
    derived.erase();
    return failure();
  }
  // With the session cache the padding mask covers the cached and the new tokens, even
  // where the export (without a cache) named its width like the new tokens'.
  if (BlockArgument argument = paddingMaskArgument(derived)) {
    auto dims = derived.getArgAttrOfType<ArrayAttr>(argument.getArgNumber(), "onnx.dims");
    if (dims && dims.size() == 2) {
      Builder builder(derived.getContext());
      derived.setArgAttr(argument.getArgNumber(), "onnx.dims",
                         builder.getStrArrayAttr(
                             {cast<StringAttr>(dims[0]).getValue(), "past_sequence + sequence"}));
    }
  }
  if (name == "prefill")
    lastPositionLogits(derived);
  return derived;
}

// Optimum's merged decoder runs one of two branches (an onnx.If on its use_cache_branch
// input): with the export's cache, or without one for the first step. The session programs
// come from the branch without a cache, as from an export without one, and where that
// cannot give a decode step (T5's bias reads the shape of a mask the branch builds for its
// own tokens) decode comes from the branch with the cache, as from an export with one: a
// clone of @main (detached, the caller erases it) with the chosen branch in place of the
// If. Null when @main has no such If.
func::FuncOp withCacheBranch(func::FuncOp main, bool cached) {
  SmallVector<onnx::IfOp> ifs;
  main.walk([&](onnx::IfOp op) { ifs.push_back(op); });
  if (ifs.size() != 1 || ifs.front()->getParentOp() != main.getOperation() ||
      !isa<BlockArgument>(ifs.front().getCond()))
    return {};
  // Which branch has attentions, none of them with past inputs, while the other's read them.
  auto reads = [](Region &region, bool &any, bool &past) {
    region.walk([&](tfm::AttentionOp op) {
      any = true;
      past |= !op.getPast().empty();
    });
  };
  bool thenAny = false, thenPast = false, elseAny = false, elsePast = false;
  reads(ifs.front().getThenBranch(), thenAny, thenPast);
  reads(ifs.front().getElseBranch(), elseAny, elsePast);
  int fresh = thenAny && !thenPast && elsePast ? 0 : elseAny && !elsePast && thenPast ? 1 : -1;
  if (fresh < 0)
    return {};
  auto clone = cast<func::FuncOp>(main->clone());
  onnx::IfOp branchOp;
  clone.walk([&](onnx::IfOp op) { branchOp = op; });
  const bool takeThen = (fresh == 0) != cached;
  Block &branch = (takeThen ? branchOp.getThenBranch() : branchOp.getElseBranch()).front();
  Operation *yield = branch.getTerminator();
  SmallVector<Value> results(yield->getOperands());
  branchOp->getBlock()->getOperations().splice(branchOp->getIterator(), branch.getOperations(),
                                                branch.begin(), yield->getIterator());
  branchOp->replaceAllUsesWith(results);
  branchOp->erase();
  return clone;
}

// Whether two session programs use each cache layer for one attention of the same form
// (heads, head size, self or cross), as a request's prefill and decode steps share them.
bool sameCacheLayers(func::FuncOp prefill, func::FuncOp decode) {
  auto layers = [](func::FuncOp func) {
    std::map<int64_t, std::tuple<int64_t, int64_t, bool>> byLayer;
    func.walk([&](tfm::AttentionOp op) {
      if (op.getCacheLayer())
        byLayer[*op.getCacheLayer()] = {op.getNumKvHeads(), op.getHeadDim(),
                                        op->hasAttr("tfm.cross_keys")};
    });
    return byLayer;
  };
  return layers(prefill) == layers(decode);
}

struct DeriveCacheProgramsPass : impl::DeriveCacheProgramsBase<DeriveCacheProgramsPass> {
  using DeriveCacheProgramsBase::DeriveCacheProgramsBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || module.lookupSymbol("prefill") || module.lookupSymbol("decode"))
      return;
    // Where each program may come from, in order: @main, or a merged decoder's branches.
    func::FuncOp fresh = withCacheBranch(main, /*cached=*/false);
    func::FuncOp cached = fresh ? withCacheBranch(main, /*cached=*/true) : func::FuncOp();
    std::string why;
    SmallVector<func::FuncOp> derived;
    for (llvm::StringRef name : {"prefill", "decode"}) {
      SmallVector<func::FuncOp> bases = {fresh ? fresh : main};
      if (name == "decode" && cached)
        bases.push_back(cached);
      std::string first;
      for (func::FuncOp basis : bases) {
        int64_t logitsIndex = -1;
        why = whyNotDecoder(basis, logitsIndex, name == "decode");
        FailureOr<func::FuncOp> program =
            why.empty() ? deriveSessionProgram(basis, name, logitsIndex, why)
                        : FailureOr<func::FuncOp>(failure());
        if (succeeded(program)) {
          derived.push_back(*program);
          why.clear();
          break;
        }
        if (first.empty())
          first = why;
      }
      if (derived.size() != (name == "prefill" ? 1u : 2u)) {
        why = first;
        break;
      }
    }
    // Prefill and decode share the session's cache: each layer the same in both.
    if (derived.size() == 2 && !sameCacheLayers(derived[0], derived[1]))
      why = "prefill and decode would use the session's cache layers differently";
    if (derived.size() == 2 && why.empty()) {
      // After @main, in program order.
      OpBuilder builder(module.getContext());
      builder.setInsertionPointAfter(main);
      for (func::FuncOp program : derived)
        builder.insert(program);
    } else {
      for (func::FuncOp program : derived)
        program.erase();
    }
    if (fresh)
      fresh.erase();
    if (cached)
      cached.erase();
    if (!why.empty() && report)
      main.emitRemark() << "no prefill/decode programs: " << why;
    // The export's own interfaces (`forward`, an encoder-decoder's `encode`) keep the
    // cache in I/O mode: an attention there without past inputs attends only to the tokens
    // it is given and must not touch the session's cache.
    for (auto func : module.getOps<func::FuncOp>())
      if (func.getSymName() != "prefill" && func.getSymName() != "decode")
        func.walk([](tfm::AttentionOp op) {
          if (op.getPast().empty())
            op.removeCacheLayerAttr();
        });
  }
};

} // namespace
} // namespace dsc
