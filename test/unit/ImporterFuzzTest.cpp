// Corrupted models never crash the importer: every truncation and byte flip of a fixture
// either imports or fails with an error message. CI also runs this under ASan/UBSan.
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

#include <string>

namespace {

struct Outcome {
  int imported = 0;
  int refused = 0;
};

class ImporterFuzzTest : public ::testing::TestWithParam<const char *> {
protected:
  std::string modelPath() const {
    return std::string(DSC_MODELS_DIR) + "/" + GetParam() + "/model.onnx";
  }

  // Imports `bytes` as if it were the fixture (external data is found beside it).
  void importOnce(const std::string &bytes, Outcome &outcome, const std::string &what) {
    mlir::MLIRContext context;
    std::string errors;
    mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diagnostic) {
      errors += diagnostic.str() + "\n";
      return mlir::success();
    });
    auto imported = dsc::onnx_frontend::importModelBuffer(
        context, bytes, modelPath(), dsc::onnx_frontend::ModelSyntax::Binary);
    if (mlir::succeeded(imported)) {
      ++outcome.imported;
      return;
    }
    ++outcome.refused;
    EXPECT_FALSE(errors.empty()) << what << ": the import failed without saying why";
  }
};

TEST_P(ImporterFuzzTest, TruncationsAndByteFlipsFailCleanly) {
  auto buffer = llvm::MemoryBuffer::getFile(modelPath());
  ASSERT_TRUE(bool(buffer)) << modelPath();
  const std::string original = (*buffer)->getBuffer().str();
  ASSERT_GT(original.size(), 1000u);

  Outcome outcome;
  importOnce(original, outcome, "the original");
  ASSERT_EQ(outcome.imported, 1) << "the unmodified fixture must import";

  // The graph structure sits at both ends of an exported file (weights in the middle), so
  // the first and last 2 KiB are probed densely and the rest evenly.
  std::vector<size_t> offsets;
  for (size_t i = 0; i < 2048 && i < original.size(); i += 16) {
    offsets.push_back(i);
    offsets.push_back(original.size() - 1 - i);
  }
  for (size_t i = 0; i < 200; ++i)
    offsets.push_back(original.size() * i / 200);

  for (size_t offset : offsets) {
    importOnce(original.substr(0, offset), outcome,
               "truncated to " + std::to_string(offset) + " bytes");
    for (unsigned char mask : {0xffu, 0x01u, 0x80u}) {
      std::string flipped = original;
      flipped[offset] = static_cast<char>(flipped[offset] ^ mask);
      importOnce(flipped, outcome, "byte " + std::to_string(offset) + " xor " +
                                       std::to_string(mask));
    }
  }
  // Most corruptions must be caught; a flip inside weight bytes legitimately imports.
  EXPECT_GT(outcome.refused, static_cast<int>(offsets.size()));
  std::cout << GetParam() << ": " << outcome.imported << " imported, " << outcome.refused
            << " refused with an error\n";
}

// gpt2-merged has If subgraphs; llama-op17 keeps its weights in external data.
INSTANTIATE_TEST_SUITE_P(Fixtures, ImporterFuzzTest,
                         ::testing::Values("gpt2-op14", "gpt2-merged", "llama-op17", "bert-op17",
                                           "llama3-dynamo23"),
                         [](const auto &info) {
                           std::string name = info.param;
                           for (char &c : name)
                             if (c == '-')
                               c = '_';
                           return name;
                         });

} // namespace
