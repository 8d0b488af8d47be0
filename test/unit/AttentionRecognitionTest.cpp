// Attention recognition on every fixture family, checked numerically before and
// independently of the lowering to a plan: the recognised @main (tfm.attention in I/O cache
// mode, every other op generic) is run with the runtime's kernels and compared with the
// export's reference outputs (PyTorch, test_data_set_N), presents included; the derived
// @prefill + @decode (session cache) are compared with @main run on the whole sequence.
// Tolerance: 1e-4 absolute + 1e-4 relative, as the fixtures' own checks.
#include "compiler/Registration.h"
#include "compiler/lowering/Passes.h"
#include "compiler/recognize/Passes.h"
#include "compiler/recognize/RecognizeAttention.h"
#include "dialects/tfm/IR/TfmDialect.h"
#include "frontends/onnx/OnnxImporter.h"
#include "io/TensorProto.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

constexpr double kTolerance = 1e-4;

struct Compiled {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::shared_ptr<dsc::onnx_frontend::WeightStore> weights;
};

class AttentionRecognitionTest : public ::testing::TestWithParam<std::string> {
protected:
  AttentionRecognitionTest() : context_(registry()) { context_.printOpOnDiagnostic(false); }

  static mlir::DialectRegistry registry() {
    mlir::DialectRegistry registry;
    dsc::registerAllDialects(registry);
    return registry;
  }

  Compiled compile(const std::string &model, bool layersFirst = false) {
    auto imported = dsc::onnx_frontend::importModelFile(
        context_, std::string(DSC_MODELS_DIR) + "/" + model + "/model.onnx",
        dsc::onnx_frontend::ModelSyntax::Detect);
    EXPECT_TRUE(mlir::succeeded(imported));
    if (mlir::failed(imported))
      return {};
    mlir::PassManager pm(&context_);
    pm.addPass(dsc::createFoldConstants());
    if (layersFirst)
      pm.addPass(dsc::createRecognizeLayers());
    pm.addPass(dsc::createRecognizeAttentionWithWeights(imported->weights.get()));
    pm.addPass(dsc::createDeriveCachePrograms());
    EXPECT_TRUE(mlir::succeeded(pm.run(*imported->module)));
    return {std::move(imported->module), imported->weights};
  }

  mlir::MLIRContext context_;
};

int64_t count(mlir::func::FuncOp func, llvm::StringRef name) {
  int64_t n = 0;
  func.walk([&](mlir::Operation *op) { n += op->getName().getStringRef() == name; });
  return n;
}

std::vector<float> floatsOf(const dsrt::OwnedTensor &t) {
  std::vector<float> out(dsrt::elementCount(t.shape));
  std::memcpy(out.data(), t.storage.data(), out.size() * sizeof(float));
  return out;
}

// Largest |actual - expected| beyond tolerance, or 0 when everything is within it.
// `skip(i)` leaves out elements nobody uses (logits of padding tokens).
template <typename Skip>
double worstExcess(const dsrt::OwnedTensor &actual, const dsrt::OwnedTensor &expected,
                   Skip skip) {
  std::vector<float> a = floatsOf(actual), e = floatsOf(expected);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (skip(i))
      continue;
    double error = std::abs(double(a[i]) - e[i]);
    if (!(error <= kTolerance + kTolerance * std::abs(e[i])))
      worst = std::max(worst, std::isnan(error) ? 1e30 : error);
  }
  return worst;
}

TEST_P(AttentionRecognitionTest, ForwardMatchesTheExport) {
  const std::string model = GetParam();
  Compiled compiled = compile(model);
  ASSERT_TRUE(compiled.module);
  auto main = compiled.module->lookupSymbol<mlir::func::FuncOp>("main");
  ASSERT_TRUE(main);
  EXPECT_EQ(count(main, "onnx.Softmax"), 0) << "every attention is recognised";
  // Optimum's merged decoder has each layer in both branches of its If.
  EXPECT_EQ(count(main, "tfm.attention"), model == "gpt2-merged" ? 4 : 2) << "one per layer";

  fs::path dir = fs::path(DSC_MODELS_DIR) / model;
  int sets = 0;
  for (int n = 0; fs::exists(dir / ("test_data_set_" + std::to_string(n))); ++n, ++sets) {
    fs::path set = dir / ("test_data_set_" + std::to_string(n));
    std::vector<dsrt::OwnedTensor> inputs, expected, outputs;
    std::vector<std::string> names;
    for (int i = 0; fs::exists(set / ("input_" + std::to_string(i) + ".pb")); ++i) {
      dsrt::io::NamedTensor tensor;
      ASSERT_TRUE(
          dsrt::io::readTensorProto(set / ("input_" + std::to_string(i) + ".pb"), tensor).isOk());
      inputs.push_back(std::move(tensor.tensor));
    }
    for (int i = 0; fs::exists(set / ("output_" + std::to_string(i) + ".pb")); ++i) {
      dsrt::io::NamedTensor tensor;
      ASSERT_TRUE(
          dsrt::io::readTensorProto(set / ("output_" + std::to_string(i) + ".pb"), tensor)
              .isOk());
      names.push_back(tensor.name);
      expected.push_back(std::move(tensor.tensor));
    }
    dsrt::Status status = dsc::runWithKernels(main, compiled.weights.get(), inputs, outputs);
    ASSERT_TRUE(status.isOk()) << status.message();
    ASSERT_EQ(outputs.size(), expected.size());
    for (size_t o = 0; o < outputs.size(); ++o) {
      ASSERT_EQ(outputs[o].shape, expected[o].shape) << names[o];
      EXPECT_EQ(worstExcess(outputs[o], expected[o], [](size_t) { return false; }), 0.0)
          << model << " " << set.filename().string() << " " << names[o];
    }
  }
  EXPECT_GT(sets, 0);
}

dsrt::OwnedTensor int64Tensor(dsrt::Shape shape, const std::vector<int64_t> &values) {
  dsrt::OwnedTensor tensor(dsrt::DType::I64, shape);
  std::memcpy(tensor.storage.data(), values.data(), values.size() * sizeof(int64_t));
  return tensor;
}

// Columns [from, to) of a [rows, cols] matrix.
std::vector<int64_t> columns(const std::vector<int64_t> &m, int64_t rows, int64_t cols,
                             int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = from; c < to; ++c)
      out.push_back(m[r * cols + c]);
  return out;
}

// The inputs of `func` by name; an input not given is an empty past ([b, kv_heads, 0, d]).
std::vector<dsrt::OwnedTensor> inputsByName(mlir::func::FuncOp func,
                                            const std::map<std::string, dsrt::OwnedTensor> &given,
                                            int64_t batch) {
  std::vector<dsrt::OwnedTensor> inputs;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<mlir::StringAttr>(i, "onnx.name").getValue().str();
    auto it = given.find(name);
    if (it != given.end()) {
      inputs.push_back(it->second);
      continue;
    }
    auto type = mlir::cast<mlir::RankedTensorType>(func.getArgumentTypes()[i]);
    if (type.getElementType().isInteger(1)) {
      // The merged decoder's use_cache_branch: false, the branch without a cache.
      dsrt::OwnedTensor flag(dsrt::DType::Bool, dsrt::Shape(type.getShape().begin(),
                                                            type.getShape().end()));
      inputs.push_back(std::move(flag));
      continue;
    }
    inputs.emplace_back(dsrt::DType::F32,
                        dsrt::Shape{batch, type.getDimSize(1), 0, type.getDimSize(3)});
  }
  return inputs;
}

int64_t logitsIndex(mlir::func::FuncOp func) {
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttrOfType<mlir::StringAttr>(i, "onnx.name").getValue() == "logits")
      return i;
  return -1;
}

// @prefill on the first n - 1 tokens and @decode on the last one, with the session's KV
// cache, against @main on all n tokens at once (an empty past where it has one). Row 1 is
// left-padded by two tokens; logits of padding tokens are not compared.
TEST_P(AttentionRecognitionTest, PrefillAndDecodeMatchForward) {
  const std::string model = GetParam();
  Compiled compiled = compile(model);
  ASSERT_TRUE(compiled.module);
  auto main = compiled.module->lookupSymbol<mlir::func::FuncOp>("main");
  auto prefill = compiled.module->lookupSymbol<mlir::func::FuncOp>("prefill");
  auto decode = compiled.module->lookupSymbol<mlir::func::FuncOp>("decode");
  if (model.rfind("bert", 0) == 0) {
    // An encoder has no cache. (The merged decoder's come from its branch without one.)
    EXPECT_FALSE(prefill) << "no cache programs for " << model;
    return;
  }
  ASSERT_TRUE(prefill && decode) << "every decoder fixture gets cache programs";
  EXPECT_EQ(prefill.getNumResults(), 1u);

  const int64_t B = 2, N = 7, padding = 2;
  std::vector<int64_t> ids, mask, positions;
  for (int64_t b = 0; b < B; ++b) {
    int64_t seen = 0;
    for (int64_t t = 0; t < N; ++t) {
      ids.push_back((b * 37 + t * 11) % 250 + 1);
      bool attend = !(b == 1 && t < padding);
      mask.push_back(attend);
      seen += attend;
      positions.push_back(attend ? seen - 1 : 1);
    }
  }
  auto given = [&](int64_t from, int64_t to, int64_t maskTo) {
    std::map<std::string, dsrt::OwnedTensor> inputs;
    inputs["input_ids"] = int64Tensor({B, to - from}, columns(ids, B, N, from, to));
    inputs["attention_mask"] = int64Tensor({B, maskTo}, columns(mask, B, N, 0, maskTo));
    inputs["position_ids"] = int64Tensor({B, to - from}, columns(positions, B, N, from, to));
    return inputs;
  };
  std::vector<dsrt::OwnedTensor> reference, first, last;
  dsrt::Status status = dsc::runWithKernels(main, compiled.weights.get(),
                                            inputsByName(main, given(0, N, N), B), reference);
  ASSERT_TRUE(status.isOk()) << status.message();
  const dsrt::OwnedTensor &logits = reference[logitsIndex(main)];
  const int64_t V = logits.shape[2];

  // One cache layer per attention: [B, kv_heads, capacity, d], zero at first.
  dsrt::ops::KvCache cache;
  std::vector<std::vector<float>> storage;
  prefill.walk([&](dsc::tfm::AttentionOp op) {
    int64_t layer = *op.getCacheLayer(), kvHeads = op.getNumKvHeads(), d = op.getHeadDim();
    if (int64_t(cache.layers.size()) <= layer)
      cache.layers.resize(layer + 1);
    storage.emplace_back(B * kvHeads * 16 * d);
    storage.emplace_back(B * kvHeads * 16 * d);
    cache.layers[layer] = {dsrt::DType::F32, B, kvHeads, 16, d,
                           storage[storage.size() - 2].data(), storage.back().data()};
  });
  status = dsc::runWithKernels(prefill, compiled.weights.get(),
                               inputsByName(prefill, given(0, N - 1, N - 1), B), first, &cache);
  ASSERT_TRUE(status.isOk()) << status.message();
  status = dsc::runWithKernels(decode, compiled.weights.get(),
                               inputsByName(decode, given(N - 1, N, N), B), last, &cache);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(first[0].shape, (dsrt::Shape{B, N - 1, V}));
  ASSERT_EQ(last[0].shape, (dsrt::Shape{B, 1, V}));

  std::vector<float> expected = floatsOf(logits), prefilled = floatsOf(first[0]),
                     decoded = floatsOf(last[0]);
  // Optimum's merged decoder takes no position_ids and counts a left-padded row's padding
  // as positions; its session programs take the generator's (check_generation.py compares
  // those with transformers). Its padded row has no reference here.
  const bool exportCountsPadding = count(main, "onnx.If") > 0;
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < N; ++t) {
      if (!mask[b * N + t] || (exportCountsPadding && b == 1))
        continue;
      for (int64_t v = 0; v < V; ++v) {
        float e = expected[(b * N + t) * V + v];
        float a = t < N - 1 ? prefilled[(b * (N - 1) + t) * V + v] : decoded[b * V + v];
        double error = std::abs(double(a) - e);
        if (!(error <= kTolerance + kTolerance * std::abs(e)))
          worst = std::max(worst, error);
      }
    }
  EXPECT_EQ(worst, 0.0) << model;
}

// The projections may already be tfm.linear (dsc-recognize-layers ran first): the same
// attentions are recognised, with the same attributes.
TEST_P(AttentionRecognitionTest, SameAttentionAfterLayerRecognition) {
  const std::string model = GetParam();
  auto attributes = [&](bool layersFirst) {
    Compiled compiled = compile(model, layersFirst);
    std::vector<std::string> printed;
    if (!compiled.module)
      return printed;
    compiled.module->lookupSymbol<mlir::func::FuncOp>("main").walk(
        [&](dsc::tfm::AttentionOp op) {
          std::string text;
          llvm::raw_string_ostream os(text);
          os << op->getAttrDictionary() << " past " << op.getPast().size() << " present "
             << op.getPresent().size() << " mask " << bool(op.getMask()) << " positions "
             << bool(op.getPositions());
          printed.push_back(text);
        });
    return printed;
  };
  std::vector<std::string> alone = attributes(false), after = attributes(true);
  EXPECT_FALSE(alone.empty());
  EXPECT_EQ(alone, after);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AttentionRecognitionTest,
                         ::testing::Values("gpt2-op14", "gpt2-op17", "gpt2-optimum", "gpt2-merged",
                                           "opt-op14",
                                           "opt-op17", "llama-op14", "llama-op17", "llama-op18",
                                           "bloom-op14", "bloom-op17", "gptj-op14", "gptj-op17",
                                           "gptneo-op14", "gptneo-op17", "bert-op14",
                                           "bert-op17"),
                         [](const auto &info) {
                           std::string name = info.param;
                           for (char &c : name)
                             if (c == '-')
                               c = '_';
                           return name;
                         });

} // namespace
