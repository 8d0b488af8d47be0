#include "compiler/recognize/RecognitionReport.h"

#include "llvm/ADT/DenseSet.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"


#include <algorithm>

using namespace mlir;

namespace dsc {
namespace {

// One transformer layer as the residual stream delimits it: it closes at the first
// residual add after a linear layer that follows its MLP activation.
struct Layer {
  int attention = 0, genericAttention = 0;
  int activations = 0, genericActivations = 0;
  int norms = 0, genericNorms = 0;
  int linears = 0, genericLinears = 0;
  int moe = 0;  // mixture-of-experts MLPs (tfm.moe)
  bool sawMlp = false, sawDown = false;

  void absorb(const Layer &other) {
    attention += other.attention;
    genericAttention += other.genericAttention;
    activations += other.activations;
    genericActivations += other.genericActivations;
    norms += other.norms;
    genericNorms += other.genericNorms;
    linears += other.linears;
    genericLinears += other.genericLinears;
    moe += other.moe;
  }

  bool recognised() const {
    return attention > 0 && genericAttention == 0 && activations > 0 &&
           genericActivations == 0 && genericNorms == 0 && genericLinears == 0 && norms > 0;
  }
};

bool isGenericActivation(Operation *op) {
  // Exp: an activation written out in elementwise ops (Apertus's xIELU, ELU forms).
  return isa<onnx::ErfOp, onnx::TanhOp, onnx::SigmoidOp, onnx::ReluOp, onnx::GeluOp,
             onnx::ExpOp>(op);
}

bool onWeight(Operation *op) {
  return op->getNumOperands() >= 2 && op->getOperand(1).getDefiningOp<onnx::WeightOp>();
}

// A decomposed norm that stayed generic: its variance, ReduceMean(Pow(.., 2)).
bool isGenericNorm(Operation *op) {
  if (isa<onnx::LayerNormalizationOp>(op))
    return true;
  auto mean = dyn_cast<onnx::ReduceMeanOp>(op);
  return mean && mean.getData().getDefiningOp<onnx::PowOp>();
}

// A mixture-of-experts router's softmax (top-k of its probabilities, or of the logits
// before it): no attention, generic or not.
bool isRoutingSoftmax(Operation *op) {
  if (!isa<onnx::SoftmaxOp>(op))
    return false;
  Operation *input = op->getOperand(0).getDefiningOp();
  return (input && isa<onnx::TopKOp>(input)) ||
         llvm::any_of(op->getResult(0).getUsers(),
                      [](Operation *user) { return isa<onnx::TopKOp>(user); });
}

bool feedsResidual(Value value) {
  return llvm::any_of(value.getUsers(),
                      [](Operation *user) { return isa<tfm::ResidualAddOp, onnx::AddOp>(user); });
}

// The ops of the function in program order; of an onnx.If (Optimum's merged decoder) only
// the then-branch, since both branches hold the same layers.
void collect(Block &block, std::vector<Operation *> &ops) {
  for (Operation &op : block) {
    if (auto branch = dyn_cast<onnx::IfOp>(op)) {
      collect(branch.getThenBranch().front(), ops);
      continue;
    }
    ops.push_back(&op);
  }
}

// The report of one function: a decoder-only model's or an encoder's @main, or an
// encoder-decoder's @encode ("encoder") and @main ("decoder").
void reportFunction(func::FuncOp main, llvm::StringRef part, bool crossAttention,
                    const RecognitionDeclines &declines, llvm::raw_ostream &os) {
  std::string dsc = part.empty() ? "dsc: " : ("dsc: " + part + ": ").str();
  std::vector<Operation *> ops;
  collect(main.getBody().front(), ops);

  // A decoder with cross-attention has two attentions per block.
  int attentionAnchors = 0;
  for (Operation *op : ops)
    attentionAnchors += isa<tfm::AttentionOp, onnx::SoftmaxOp>(op) && !isRoutingSoftmax(op);
  if (crossAttention)
    attentionAnchors /= 2;

  std::vector<Layer> layers(1);
  bool embedding = false, lmHead = false;
  int embeddingNorms = 0, finalNorms = 0;
  Operation *lastCloser = nullptr;
  // Post-norm models (BERT) normalise each residual add and nothing else reads it; in
  // pre-norm models only the last residual add (before the final norm) is read by a norm
  // alone.
  auto onlyNormed = [](Operation *add) {
    return llvm::all_of(add->getResult(0).getUsers(), [](Operation *user) {
      return isa<tfm::LayerNormOp, tfm::RmsNormOp, onnx::ShapeOp>(user);
    });
  };
  std::vector<Operation *> residuals;
  for (Operation *op : ops)
    if (isa<tfm::ResidualAddOp>(op))
      residuals.push_back(op);
  bool postNorm = residuals.size() > 1 &&
                  std::any_of(residuals.begin(), residuals.end() - 1, onlyNormed);
  auto tail = [&] { return static_cast<int>(layers.size()) > attentionAnchors; };
  for (Operation *op : ops) {
    Layer &layer = layers.back();
    if (isa<tfm::EmbeddingOp>(op)) {
      embedding = true;
    } else if (isa<tfm::LmHeadOp>(op)) {
      lmHead = true;
    } else if (isa<tfm::LayerNormOp, tfm::RmsNormOp>(op)) {
      // A post-norm (BERT) normalises the residual add that closed the previous layer, and
      // nothing else reads that add.
      Operation *input = op->getOperand(0).getDefiningOp();
      if (postNorm && input && input == lastCloser && layers.size() > 1 && onlyNormed(input))
        ++layers[layers.size() - 2].norms;
      else if (tail())
        ++finalNorms;
      else if (layers.size() == 1 && layer.attention + layer.genericAttention == 0 &&
               feedsResidual(op->getResult(0)))
        ++embeddingNorms;
      else
        ++layer.norms;
    } else if (isGenericNorm(op)) {
      ++layer.genericNorms;
    } else if (isa<tfm::AttentionOp>(op)) {
      ++layer.attention;
    } else if (isa<onnx::SoftmaxOp>(op) && !isRoutingSoftmax(op)) {
      ++layer.genericAttention;
    } else if (isa<tfm::ActivationOp, tfm::GatedActOp>(op)) {
      ++layer.activations;
      layer.sawMlp = true;
    } else if (isa<tfm::MoeOp>(op)) {
      // The experts' MLPs, activation and linears inside.
      ++layer.activations;
      ++layer.moe;
      layer.sawMlp = layer.sawDown = true;
    } else if (isGenericActivation(op)) {
      ++layer.genericActivations;
      layer.sawMlp = true;
    } else if (isa<tfm::LinearOp>(op)) {
      ++layer.linears;
      layer.sawDown |= layer.sawMlp;
    } else if (isa<onnx::MatMulOp, onnx::GemmOp>(op) && onWeight(op)) {
      ++layer.genericLinears;
      layer.sawDown |= layer.sawMlp;
    } else if (isa<tfm::ResidualAddOp, onnx::AddOp>(op) && layer.sawDown && !tail()) {
      if (layer.attention + layer.genericAttention == 0 && layers.size() > 1) {
        // A gated side path added to the stream after the MLP (Gemma-4's per-layer input:
        // linear -> activation -> product -> linear) is still the previous layer's.
        layers[layers.size() - 2].absorb(layer);
        layer = Layer();
        continue;
      }
      lastCloser = op;
      layers.emplace_back();
    }
  }
  if (!tail())
    layers.emplace_back(); // the last layer never closed: its MLP was not found
  layers.pop_back();

  int recognised = 0, minNorms = 1 << 30, maxNorms = 0, withMoe = 0;
  for (const Layer &layer : layers) {
    if (!layer.recognised())
      continue;
    ++recognised;
    withMoe += layer.moe > 0;
    minNorms = std::min(minNorms, layer.norms);
    maxNorms = std::max(maxNorms, layer.norms);
  }
  os << dsc << "recognised " << recognised << "/" << attentionAnchors << " blocks";
  if (recognised > 0) {
    os << ": attention, "
       << (withMoe == 0 ? "mlp" : withMoe == recognised ? "moe" : "mlp or moe") << ", ";
    if (minNorms == maxNorms)
      os << minNorms << (minNorms == 1 ? " norm" : " norms");
    else
      os << minNorms << "-" << maxNorms << " norms";
  }
  std::vector<std::string> extras;
  if (embedding)
    extras.push_back("embedding");
  if (embeddingNorms)
    extras.push_back("embedding norm");
  if (finalNorms)
    extras.push_back("final norm");
  if (lmHead)
    extras.push_back("lm head");
  for (size_t i = 0; i < extras.size(); ++i)
    os << (i == 0 ? "; " : ", ") << extras[i];
  os << "\n";

  // Per block, what kept it from being recognised whole.
  std::vector<std::string> partial;
  for (auto [index, layer] : llvm::enumerate(layers)) {
    if (layer.recognised())
      continue;
    std::vector<std::string> generic;
    if (layer.genericAttention || !layer.attention)
      generic.push_back("attention");
    if (layer.genericActivations || !layer.activations)
      generic.push_back("mlp activation");
    if (layer.genericNorms || !layer.norms)
      generic.push_back("norms");
    if (layer.genericLinears)
      generic.push_back(std::to_string(layer.genericLinears) + " linear");
    std::string text = "block " + std::to_string(index) + ":";
    for (auto [i, part] : llvm::enumerate(generic))
      text += (i ? ", " : " ") + part;
    partial.push_back(text);
  }
  if (!partial.empty()) {
    os << dsc << "generic parts:";
    for (auto [i, text] : llvm::enumerate(partial))
      os << (i ? "; " : " ") << text;
    os << "\n";
  }

  // What stayed generic: unrecognised attention, then the patterns' reasons.
  // (op, reason) -> count, in the order first seen.
  std::vector<std::pair<std::pair<std::string, std::string>, int>> reasons;
  auto count = [&](std::string op, std::string reason, int n) {
    for (auto &[key, total] : reasons)
      if (key.first == op && key.second == reason) {
        total += n;
        return;
      }
    reasons.push_back({{std::move(op), std::move(reason)}, n});
  };
  int softmaxes = 0;
  for (Operation *op : ops)
    softmaxes += isa<onnx::SoftmaxOp>(op) && !isRoutingSoftmax(op);
  if (softmaxes)
    count("Softmax", "attention not recognised", softmaxes);
  llvm::DenseSet<const void *> live;
  main.walk([&](Operation *op) { live.insert(op); });
  for (const RecognitionDeclines::Entry &entry : declines.generic)
    if (entry.reason != kProductOfActivations && entry.reason != kLogitCap &&
        (!entry.where || live.contains(entry.where)))
      count(entry.op, entry.reason, 1);
  // An export without dynamic axes: the probes cannot tell a batch from a sequence from a
  // head, and the graph's reshapes hold the one shape it was traced at.
  if (softmaxes) {
    std::string shapes;
    bool allStatic = main.getNumArguments() > 0;
    for (BlockArgument argument : main.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(argument.getType());
      allStatic &= type && type.hasStaticShape();
      if (!allStatic)
        break;
      auto name = main.getArgAttrOfType<StringAttr>(argument.getArgNumber(), "onnx.name");
      shapes += (shapes.empty() ? "" : ", ") +
                (name ? name.str() : "#" + std::to_string(argument.getArgNumber())) + " [";
      for (auto [i, dim] : llvm::enumerate(type.getShape()))
        shapes += (i ? ", " : "") + std::to_string(dim);
      shapes += "]";
    }
    if (allStatic)
      os << dsc << "the model's inputs have static shapes (" << shapes
         << "): its attention cannot be recognised, and the plan runs those shapes only. "
            "Export with dynamic batch and sequence axes (torch.onnx.export's dynamic_shapes "
            "or dynamic_axes) for KV-cache generation\n";
  }
  if (reasons.empty())
    return;
  os << dsc << "left generic:";
  bool first = true;
  for (auto &[key, total] : reasons) {
    os << (first ? " " : "; ") << total << " " << key.first << " (" << key.second << ")";
    first = false;
  }
  os << "\n";
}

} // namespace

void printRecognitionReport(ModuleOp module, const RecognitionDeclines &declines,
                            llvm::raw_ostream &os) {
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return;
  auto encode = module.lookupSymbol<func::FuncOp>("encode");
  if (encode)
    reportFunction(encode, "encoder", false, declines, os);
  reportFunction(main, encode ? "decoder" : "", encode != nullptr, declines, os);
}

} // namespace dsc
