// dsc-recognize-moe: see Passes.td.
//
// The structure (which linears are an expert, which column of which tensor weights it) is
// read off the graph; what the routing computes is proven on a probe, as attention's mask
// is: the ops from the router's logits to the routing weights run on random logits, and
// must give what softmax or sigmoid, top-k and (or not) renormalisation give. So the
// spelling of the router (TopK then Softmax of the chosen logits, as GPT-OSS writes it, or
// Softmax then TopK; a scatter or a one-hot product into the dense weights) does not matter.
#include "compiler/recognize/AttentionMatch.h"
#include "compiler/recognize/DeadOps.h"
#include "compiler/recognize/LayerMatching.h"
#include "compiler/recognize/MoeActivation.h"
#include "compiler/recognize/Passes.h"
#include "compiler/recognize/ProbeEvaluator.h"
#include "compiler/recognize/RecognitionReport.h"
#include "ops/MoeRouting.h"

#include "mlir/IR/Builders.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <functional>

#include <algorithm>
#include <cmath>
#include <random>

namespace dsc {
#define GEN_PASS_DEF_RECOGNIZEMOE
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

using layers::defining;
using probe::Info;
using probe::ProbeEvaluator;

// One expert's term of the sum: down(act(gate(x)) * up(x)) * routing[..., e:e+1]. The
// gated activation is a tfm.gated_act, or (GPT-OSS) elementwise ops with clamps, `glu`,
// whose gate and up rewrite() proves on the probe (until then `gate` and `up` are the
// region's two linears in the order found).
struct ExpertTerm {
  onnx::MulOp product;
  int64_t expert = -1;
  tfm::LinearOp gate, up, down;
  tfm::GatedActOp act;
  std::optional<moe::GluRegion> glu;
  moe::ClampedSwiglu clamped;
  SmallVector<Operation *, 2> column;  // the Slice, or the Gather and its Unsqueeze
  Value x, routing;
};

// A single-column view of the last axis of a value: Slice [e, e + 1) or Gather(e) then
// Unsqueeze(-1). Sets `routing`, `expert` and `column`.
bool matchColumn(Value value, ExpertTerm &term) {
  if (auto slice = defining<onnx::SliceOp>(value)) {
    auto type = dyn_cast<RankedTensorType>(slice.getData().getType());
    if (!type || !slice.getAxes())
      return false;
    auto starts = layers::staticIntegers(slice.getStarts());
    auto ends = layers::staticIntegers(slice.getEnds());
    auto axes = layers::staticIntegers(slice.getAxes());
    std::optional<SmallVector<int64_t>> steps =
        slice.getSteps() && !isa<NoneType>(slice.getSteps().getType())
            ? layers::staticIntegers(slice.getSteps())
            : std::optional<SmallVector<int64_t>>(SmallVector<int64_t>{1});
    if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1 ||
        axes->size() != 1 || steps->size() != 1 || (*steps)[0] != 1)
      return false;
    int64_t rank = type.getRank(), axis = (*axes)[0] < 0 ? (*axes)[0] + rank : (*axes)[0];
    if (axis != rank - 1 || (*ends)[0] != (*starts)[0] + 1 || (*starts)[0] < 0)
      return false;
    term.routing = slice.getData();
    term.expert = (*starts)[0];
    term.column = {slice};
    return true;
  }
  if (auto unsqueeze = defining<onnx::UnsqueezeOp>(value)) {
    auto gather = defining<onnx::GatherOp>(unsqueeze.getData());
    auto type = gather ? dyn_cast<RankedTensorType>(gather.getData().getType()) : nullptr;
    if (!type)
      return false;
    int64_t rank = type.getRank();
    int64_t axis = gather.getAxis() < 0 ? gather.getAxis() + rank : gather.getAxis();
    auto index = layers::staticIntegers(gather.getIndices());
    auto axes = layers::staticIntegers(unsqueeze.getAxes());
    auto indexType = dyn_cast<RankedTensorType>(gather.getIndices().getType());
    if (axis != rank - 1 || !index || index->size() != 1 || !indexType ||
        indexType.getRank() != 0 || (*index)[0] < 0 || !axes || axes->size() != 1 ||
        ((*axes)[0] != rank - 1 && (*axes)[0] != -1))
      return false;
    term.routing = gather.getData();
    term.expert = (*index)[0];
    term.column = {gather, unsqueeze};
    return true;
  }
  return false;
}

// `mul` as an expert's term; empty `why` when it is one.
std::optional<ExpertTerm> matchTerm(onnx::MulOp mul) {
  for (int side = 0; side < 2; ++side) {
    Value output = mul->getOperand(side), other = mul->getOperand(1 - side);
    ExpertTerm term;
    term.product = mul;
    term.down = defining<tfm::LinearOp>(output);
    if (!term.down || !matchColumn(other, term))
      continue;
    term.act = defining<tfm::GatedActOp>(term.down.getInput());
    if (term.act) {
      term.gate = defining<tfm::LinearOp>(term.act.getGate());
      term.up = defining<tfm::LinearOp>(term.act.getUp());
    } else {
      std::string unused;
      FailureOr<moe::GluRegion> glu = moe::matchGluRegion(term.down.getInput(), unused);
      if (failed(glu))
        continue;
      term.glu = std::move(*glu);
      term.gate = term.glu->first;
      term.up = term.glu->second;
    }
    if (!term.gate || !term.up || term.gate.getInput() != term.up.getInput())
      continue;
    term.x = term.gate.getInput();
    return term;
  }
  return std::nullopt;
}

struct Routing {
  int64_t topK = 0;
  tfm::RouterScoring scoring = tfm::RouterScoring::softmax;
  bool normalize = false;
};

// What the ops from `logits` to `routing` compute, proven on random logits (two draws, one
// with a wide spread so that renormalisation shows); a reason when it is none of the
// router forms.
FailureOr<Routing> proveRouting(const ProbeEvaluator &probe, Value logits, Value routing,
                                int64_t experts, std::string &why) {
  const Info *info = probe.lookup(logits);
  if (!info || info->shape.empty() || info->shape.back() != experts) {
    why = "the probe does not know the router logits' shape";
    return failure();
  }
  // A graph whose probe routes no token (a static dimension of 0) proves nothing.
  if (experts < 1 || dsrt::elementCount(info->shape) < experts) {
    why = "the probe routes no token";
    return failure();
  }
  std::mt19937 random(44);
  std::optional<Routing> proven;
  for (float spread : {1.0f, 4.0f}) {
    auto seed = std::make_shared<dsrt::OwnedTensor>(dsrt::DType::F32, info->shape);
    std::normal_distribution<float> normal(0.0f, spread);
    float *data = reinterpret_cast<float *>(seed->storage.data());
    const int64_t n = dsrt::elementCount(info->shape), rows = n / experts;
    for (int64_t i = 0; i < n; ++i)
      data[i] = normal(random);
    llvm::SetVector<Operation *> region;
    auto out = probe::evaluateSeeded(probe, {{logits, seed}}, routing, region, why);
    if (!out)
      return failure();
    if (out->dtype != dsrt::DType::F32 || dsrt::elementCount(out->shape) != n) {
      why = "the routing weights are not f32 of the router logits' shape";
      return failure();
    }
    const float *got = reinterpret_cast<const float *>(out->storage.data());
    int64_t k = std::count_if(got, got + experts, [](float v) { return v != 0.0f; });
    if (k < 1) {
      why = "the routing weights of a token are all zero";
      return failure();
    }
    std::optional<Routing> match;
    std::vector<float> scores;
    std::vector<int64_t> order;
    std::vector<std::pair<int64_t, float>> chosen;
    for (auto scoring : {tfm::RouterScoring::softmax, tfm::RouterScoring::sigmoid})
      for (bool normalize : {true, false}) {
        bool all = true;
        for (int64_t r = 0; r < rows && all; ++r) {
          // What tfm.moe's kernel routes: its chosen experts' weights, zero elsewhere.
          dsrt::ops::routeToken(data + r * experts, experts, k,
                                scoring == tfm::RouterScoring::sigmoid, normalize, scores,
                                order, chosen);
          std::vector<float> want(experts, 0.0f);
          for (auto [expert, weight] : chosen)
            want[expert] = weight;
          for (int64_t e = 0; e < experts && all; ++e)
            all = std::abs(want[e] - got[r * experts + e]) <= 1e-5f + 1e-4f * std::abs(want[e]);
        }
        if (all && !match)
          match = Routing{k, scoring, normalize};
      }
    if (!match) {
      why = "the routing is none of softmax or sigmoid, then top-" + std::to_string(k) +
            ", renormalised or not";
      return failure();
    }
    if (proven && (proven->topK != match->topK || proven->scoring != match->scoring ||
                   proven->normalize != match->normalize)) {
      why = "the routing computes different things on two probes";
      return failure();
    }
    proven = match;
  }
  return *proven;
}

// `value` without Reshapes that change nothing: the router's Reshape(x, [-1, hidden]) of the
// rows the experts already read as [tokens, hidden] (Qwen-MoE's router).
Value throughIdentityReshapes(Value value) {
  while (auto reshape = defining<onnx::ReshapeOp>(value)) {
    auto in = dyn_cast<RankedTensorType>(reshape.getData().getType());
    auto target = layers::staticIntegers(reshape.getShape());
    if (!in || in != reshape.getReshaped().getType() || in.getRank() != 2 || !target ||
        target->size() != 2 || (*target)[0] != -1 || (*target)[1] != in.getDimSize(1))
      break;
    value = reshape.getData();
  }
  return value;
}

// The router: the one tfm.linear over the experts' input whose result the routing weights
// are computed from, with [.., experts] features.
tfm::LinearOp findRouter(Value routing, Value x, int64_t experts, std::string &why) {
  SmallVector<Value> stack = {routing};
  llvm::SmallPtrSet<Operation *, 16> seen;
  tfm::LinearOp router;
  while (!stack.empty()) {
    Operation *op = stack.pop_back_val().getDefiningOp();
    if (!op || !seen.insert(op).second)
      continue;
    if (auto linear = dyn_cast<tfm::LinearOp>(op)) {
      auto type = cast<RankedTensorType>(linear.getOutput().getType());
      if (throughIdentityReshapes(linear.getInput()) != x || type.getShape().back() != experts) {
        why = "the routing reads a linear layer that is not a router over the experts' input";
        return {};
      }
      if (router && router != linear) {
        why = "the routing reads two linear layers";
        return {};
      }
      router = linear;
      continue;
    }
    if (isa<onnx::ShapeOp, onnx::SizeOp>(op) || !probe::isOnnx(op))
      continue;
    for (Value operand : op->getOperands())
      stack.push_back(operand);
  }
  if (!router)
    why = "no router: the routing weights read no linear layer of the experts' input";
  return router;
}

LogicalResult plainLinear(tfm::LinearOp linear, bool &hasBias, std::string &why);

// A shared expert added to the experts' sum (Qwen2-MoE): Add(sum, Mul(Sigmoid(gate(x)),
// down(act(gate_s(x)) * up_s(x)))), every value read once.
struct SharedExpert {
  Operation *add = nullptr;
  tfm::LinearOp gate, up, down, scalarGate;
  tfm::GatedActOp act;
};

std::optional<SharedExpert> matchShared(Operation *sum, Value x) {
  if (!sum->getResult(0).hasOneUse())
    return std::nullopt;
  Operation *add = *sum->getResult(0).getUsers().begin();
  if (!isa<onnx::AddOp>(add))
    return std::nullopt;
  auto mul = defining<onnx::MulOp>(layers::otherOperand(add, sum->getResult(0)));
  if (!mul || !mul->getResult(0).hasOneUse())
    return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    auto sigmoid = defining<onnx::SigmoidOp>(mul->getOperand(side));
    SharedExpert shared;
    shared.add = add;
    shared.down = defining<tfm::LinearOp>(mul->getOperand(1 - side));
    shared.scalarGate = sigmoid ? defining<tfm::LinearOp>(sigmoid->getOperand(0)) : tfm::LinearOp();
    if (!shared.down || !shared.scalarGate || !sigmoid->getResult(0).hasOneUse())
      continue;
    shared.act = defining<tfm::GatedActOp>(shared.down.getInput());
    shared.gate = shared.act ? defining<tfm::LinearOp>(shared.act.getGate()) : tfm::LinearOp();
    shared.up = shared.act ? defining<tfm::LinearOp>(shared.act.getUp()) : tfm::LinearOp();
    if (!shared.gate || !shared.up || throughIdentityReshapes(shared.gate.getInput()) != x ||
        throughIdentityReshapes(shared.up.getInput()) != x ||
        throughIdentityReshapes(shared.scalarGate.getInput()) != x)
      continue;
    auto gateType = cast<RankedTensorType>(shared.scalarGate.getWeight().getType());
    if (gateType.getDimSize(0) != 1)
      continue;
    bool bias = false;
    std::string unused;
    bool plain = true;
    for (tfm::LinearOp linear : {shared.gate, shared.up, shared.down, shared.scalarGate})
      plain &= succeeded(plainLinear(linear, bias, unused)) && !bias &&
               linear->getResult(0).hasOneUse();
    if (plain && shared.act->getResult(0).hasOneUse())
      return shared;
  }
  return std::nullopt;
}

struct MoeBlock {
  Value x, routing;
  SmallVector<ExpertTerm, 0> terms;
  Operation *root = nullptr;  // the last Add of the sum
  SmallVector<Operation *> adds;
};

// The Adds that sum exactly the block's terms, each read once; the root is the last.
LogicalResult collectSum(MoeBlock &block, std::string &why) {
  llvm::SmallPtrSet<Operation *, 16> leaves;
  for (ExpertTerm &term : block.terms)
    leaves.insert(term.product);
  // Whether `value` is a term or a sum of terms only (through single-use Adds).
  std::function<bool(Value)> onlyTerms = [&](Value value) {
    Operation *def = value.getDefiningOp();
    if (!def)
      return false;
    if (leaves.contains(def))
      return true;
    return isa<onnx::AddOp>(def) && def->getResult(0).hasOneUse() &&
           onlyTerms(def->getOperand(0)) && onlyTerms(def->getOperand(1));
  };
  // Up through the Adds whose other operand is more terms: an Add of something else (a
  // shared expert) is after the sum.
  Operation *top = block.terms.front().product;
  while (top->getResult(0).hasOneUse()) {
    Operation *user = *top->getResult(0).getUsers().begin();
    if (!isa<onnx::AddOp>(user) || !onlyTerms(layers::otherOperand(user, top->getResult(0))))
      break;
    top = user;
  }
  if (!isa<onnx::AddOp>(top)) {
    why = "the experts' terms are not summed by Adds";
    return failure();
  }
  SmallVector<Operation *> stack = {top};
  llvm::SmallPtrSet<Operation *, 16> reached;
  while (!stack.empty()) {
    Operation *op = stack.pop_back_val();
    if (leaves.contains(op)) {
      reached.insert(op);
      continue;
    }
    if (!isa<onnx::AddOp>(op) || (op != top && !op->getResult(0).hasOneUse())) {
      why = "the sum of the experts' terms adds something else";
      return failure();
    }
    block.adds.push_back(op);
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!def) {
        why = "the sum of the experts' terms adds a graph input";
        return failure();
      }
      stack.push_back(def);
    }
  }
  if (reached.size() != leaves.size()) {
    why = "the experts' terms are not summed together";
    return failure();
  }
  block.root = top;
  return success();
}

// The weight of a linear, with no bias, epilogue or norm (recognition has fused nothing yet).
LogicalResult plainLinear(tfm::LinearOp linear, bool &hasBias, std::string &why) {
  if (linear.getScales() || linear.getResidual() || linear.getNorm() || linear.getActivation()) {
    why = "an expert's linear layer is already fused or quantized";
    return failure();
  }
  if (!linear.getWeight().getDefiningOp<tfm::WeightOp>()) {
    why = "an expert's weight is not a model tensor";
    return failure();
  }
  hasBias = static_cast<bool>(linear.getBias());
  return success();
}

struct RecognizeMoePass : impl::RecognizeMoeBase<RecognizeMoePass> {
  using RecognizeMoeBase::RecognizeMoeBase;
  RecognizeMoePass() = default;
  explicit RecognizeMoePass(RecognitionDeclines *sink) : sink(sink) {}

  void decline(Operation *at, const std::string &why) {
    if (reportDeclines)
      at->emitRemark() << "mixture of experts not recognised: " << why;
    if (sink)
      sink->generic.push_back({"MoE", why, at});
  }

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      runOnFunction(func);
  }

  void runOnFunction(func::FuncOp func) {
    // Terms grouped by (input, routing weights), in program order.
    llvm::MapVector<std::pair<Value, Value>, MoeBlock> blocks;
    func.walk([&](onnx::MulOp mul) {
      if (std::optional<ExpertTerm> term = matchTerm(mul)) {
        MoeBlock &block = blocks[{term->x, term->routing}];
        block.x = term->x;
        block.routing = term->routing;
        block.terms.push_back(*term);
      }
    });
    if (blocks.empty())
      return;
    ProbeEvaluator probe(nullptr);
    Value mask, positions;
    std::string why;
    if (failed(attention::setUpProbe(func, 0, probe, mask, positions, why))) {
      for (auto &[key, block] : blocks)
        decline(block.terms.front().product, "no probe: " + why);
      return;
    }
    probe.runBlock(func.getBody().front());
    for (auto &[key, block] : blocks) {
      why.clear();
      if (failed(rewrite(probe, block, why)))
        decline(block.root ? block.root : block.terms.front().product.getOperation(), why);
    }
    eraseDeadOps(func);
  }

  LogicalResult rewrite(const ProbeEvaluator &probe, MoeBlock &block, std::string &why) {
    auto routingType = dyn_cast<RankedTensorType>(block.routing.getType());
    auto xType = dyn_cast<RankedTensorType>(block.x.getType());
    if (!routingType || !xType || routingType.getRank() != xType.getRank() ||
        routingType.isDynamicDim(routingType.getRank() - 1)) {
      why = "the routing weights are not [.., experts] beside the input";
      return failure();
    }
    const int64_t experts = routingType.getShape().back();
    if (failed(collectSum(block, why)))
      return failure();
    // Every expert exactly once.
    SmallVector<ExpertTerm *> byExpert(experts, nullptr);
    for (ExpertTerm &term : block.terms) {
      if (term.expert >= experts || byExpert[term.expert]) {
        why = "expert " + std::to_string(term.expert) + " is outside the " +
              std::to_string(experts) + " experts or summed twice";
        return failure();
      }
      byExpert[term.expert] = &term;
    }
    if (llvm::is_contained(byExpert, nullptr)) {
      why = "the sum leaves out some of the " + std::to_string(experts) + " experts";
      return failure();
    }
    // GPT-OSS's clamped SwiGLU: which linear is the gate, alpha and limit, proven per expert.
    for (ExpertTerm *term : byExpert) {
      if (bool(term->glu) != bool(byExpert.front()->glu)) {
        why = "the experts' activations differ";
        return failure();
      }
      if (!term->glu)
        continue;
      FailureOr<moe::ClampedSwiglu> clamped =
          moe::proveClampedSwiglu(probe, *term->glu, term->down.getInput(), why);
      if (failed(clamped))
        return failure();
      term->clamped = *clamped;
      if (!clamped->gateIsFirst)
        std::swap(term->gate, term->up);
      const moe::ClampedSwiglu &reference = byExpert.front()->clamped;
      if (clamped->alpha != reference.alpha || clamped->limit != reference.limit) {
        why = "the experts' clamped SwiGLUs have different alphas or limits";
        return failure();
      }
    }
    // One shape, one activation, biases on all or none.
    ExpertTerm &first = *byExpert.front();
    auto gateType = cast<RankedTensorType>(first.gate.getWeight().getType());
    auto downType = cast<RankedTensorType>(first.down.getWeight().getType());
    bool firstBias = false;
    for (ExpertTerm *term : byExpert) {
      bool biases[3];
      int index = 0;
      for (tfm::LinearOp linear : {term->gate, term->up, term->down})
        if (failed(plainLinear(linear, biases[index++], why)))
          return failure();
      if (term->gate.getWeight().getType() != gateType ||
          term->up.getWeight().getType() != gateType ||
          term->down.getWeight().getType() != downType) {
        why = "the experts' weights have unequal shapes or types";
        return failure();
      }
      if (term->act && term->act.getKind() != first.act.getKind()) {
        why = "the experts' activations differ";
        return failure();
      }
      if (term == byExpert.front())
        firstBias = biases[0];
      if (biases[0] != firstBias || biases[1] != firstBias || biases[2] != firstBias) {
        why = "some experts' linear layers have biases and some not";
        return failure();
      }
      // The expert's values are read by its term only (matchGluRegion checked a clamped
      // activation's).
      SmallVector<Operation *, 4> own = {term->down.getOperation()};
      if (term->act)
        own.append({term->gate.getOperation(), term->up.getOperation(),
                    term->act.getOperation()});
      for (Operation *op : own)
        if (!op->getResult(0).hasOneUse()) {
          why = "an expert's intermediate value has other readers";
          return failure();
        }
    }
    const int64_t inter = gateType.getDimSize(0), hidden = gateType.getDimSize(1);
    if (downType.getDimSize(0) != hidden || downType.getDimSize(1) != inter ||
        xType.getShape().back() != hidden) {
      why = "an expert's down projection does not return to the hidden size";
      return failure();
    }
    tfm::LinearOp router = findRouter(block.routing, block.x, experts, why);
    if (!router)
      return failure();
    FailureOr<Routing> routing =
        proveRouting(probe, router.getOutput(), block.routing, experts, why);
    if (failed(routing))
      return failure();

    // A shared expert joins the op, which then replaces the Add that adds it.
    std::optional<SharedExpert> shared = matchShared(block.root, block.x);
    Operation *replaced = shared ? shared->add : block.root;
    OpBuilder builder(replaced);
    Location loc = replaced->getLoc();
    auto stack = [&](auto part, int64_t rows, int64_t cols, Type element, bool vector) {
      SmallVector<Value> parts;
      for (ExpertTerm *term : byExpert)
        part(*term, parts);
      SmallVector<int64_t> shape = vector ? SmallVector<int64_t>{rows}
                                          : SmallVector<int64_t>{rows, cols};
      return tfm::ConcatWeightsOp::create(builder, loc, RankedTensorType::get(shape, element),
                                          parts)
          .getResult();
    };
    Type element = gateType.getElementType();
    Value gateUp = stack([](ExpertTerm &t, SmallVector<Value> &parts) {
      parts.append({t.gate.getWeight(), t.up.getWeight()});
    }, experts * 2 * inter, hidden, element, false);
    Value down = stack([](ExpertTerm &t, SmallVector<Value> &parts) {
      parts.push_back(t.down.getWeight());
    }, experts * hidden, inter, element, false);
    Value gateUpBias, downBias;
    if (firstBias) {
      auto biasElement = cast<RankedTensorType>(first.gate.getBias().getType()).getElementType();
      for (ExpertTerm *term : byExpert)
        for (tfm::LinearOp linear : {term->gate, term->up, term->down})
          if (!linear.getBias().getDefiningOp<tfm::WeightOp>() ||
              cast<RankedTensorType>(linear.getBias().getType()).getElementType() != biasElement) {
            why = "an expert's bias is not a model tensor of the others' type";
            return failure();
          }
      gateUpBias = stack([](ExpertTerm &t, SmallVector<Value> &parts) {
        parts.append({t.gate.getBias(), t.up.getBias()});
      }, experts * 2 * inter, 0, biasElement, true);
      downBias = stack([](ExpertTerm &t, SmallVector<Value> &parts) {
        parts.push_back(t.down.getBias());
      }, experts * hidden, 0, biasElement, true);
    }
    Value sharedGateUp, sharedDown, sharedGate;
    if (shared) {
      auto sharedType = cast<RankedTensorType>(shared->gate.getWeight().getType());
      auto weightsOf = [&](std::initializer_list<tfm::LinearOp> linears) {
        SmallVector<Value> parts;
        for (tfm::LinearOp linear : linears)
          parts.push_back(linear.getWeight());
        return parts;
      };
      sharedGateUp = tfm::ConcatWeightsOp::create(
          builder, loc,
          RankedTensorType::get({2 * sharedType.getDimSize(0), hidden},
                                sharedType.getElementType()),
          weightsOf({shared->gate, shared->up}));
      sharedDown = shared->down.getWeight();
      sharedGate = shared->scalarGate.getWeight();
    }
    Value result = replaced->getResult(0);
    auto resultType = dyn_cast<RankedTensorType>(result.getType());
    if (!resultType || resultType.getShape() != xType.getShape() ||
        resultType.getElementType() != xType.getElementType()) {
      why = "the sum of the experts is not of the input's type";
      return failure();
    }
    auto moe = tfm::MoeOp::create(
        builder, loc, xType, block.x, router.getOutput(), gateUp, down, gateUpBias, downBias,
        sharedGateUp, sharedDown, sharedGate, /*gate_up_scales=*/Value(),
        /*down_scales=*/Value(),
        builder.getI64IntegerAttr(routing->topK),
        tfm::RouterScoringAttr::get(builder.getContext(), routing->scoring),
        routing->normalize ? builder.getUnitAttr() : UnitAttr(),
        tfm::ActivationKindAttr::get(builder.getContext(), first.glu ? tfm::ActivationKind::silu
                                                                      : first.act.getKind()),
        /*rank_experts=*/nullptr, /*rank_expert_offsets=*/nullptr,
        first.glu ? builder.getF32FloatAttr(first.clamped.alpha) : FloatAttr(),
        first.glu ? builder.getF32FloatAttr(first.clamped.limit) : FloatAttr(),
        /*down_bias_rank=*/nullptr);
    result.replaceAllUsesWith(moe.getOutput());
    return success();
  }

  RecognitionDeclines *sink = nullptr;
};

} // namespace

std::unique_ptr<Pass> createRecognizeMoeWithReport(RecognitionDeclines *declines) {
  return std::make_unique<RecognizeMoePass>(declines);
}

} // namespace dsc
