// The weight store hands out the bytes of each initializer from where they live.
#include "frontends/onnx/OnnxImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/IR/MLIRContext.h"

#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

namespace {

TEST(WeightStoreTest, ExternalDataIsMappedNotCopied) {
  std::string directory = std::string(DSC_MODELS_DIR) + "/llama-op17";
  mlir::MLIRContext context;
  auto imported = dsc::onnx_frontend::importModelFile(context, directory + "/model.onnx");
  ASSERT_TRUE(mlir::succeeded(imported));
  auto data = llvm::MemoryBuffer::getFile(directory + "/model.onnx_data");
  ASSERT_TRUE(bool(data));

  // Every weight handle resolves; the external ones cover the data file exactly once and
  // their bytes are the file's bytes at the recorded offset.
  size_t handles = 0, externalBytes = 0;
  std::set<uint64_t> offsets;
  imported->module->walk([&](dsc::onnx::WeightOp weight) {
    ++handles;
    const auto *record = imported->weights->lookup(weight.getName());
    ASSERT_NE(record, nullptr) << weight.getName().str();
    EXPECT_EQ(record->bytes.size(),
              weight.getType().getNumElements() *
                  (weight.getType().getElementTypeBitWidth() / 8));
    if (record->externalFile.empty())
      return;
    EXPECT_EQ(record->externalFile, "model.onnx_data");
    EXPECT_TRUE(offsets.insert(record->externalOffset).second);
    externalBytes += record->bytes.size();
    ASSERT_LE(record->externalOffset + record->bytes.size(), (*data)->getBufferSize());
    EXPECT_EQ(0, std::memcmp(record->bytes.data(),
                             (*data)->getBufferStart() + record->externalOffset,
                             record->bytes.size()));
  });
  EXPECT_GT(handles, 10u);
  EXPECT_GT(externalBytes, 0u);
  EXPECT_LE(externalBytes, (*data)->getBufferSize());
}

TEST(WeightStoreTest, InlineInitializersKeepTheirBytes) {
  mlir::MLIRContext context;
  const char *text = R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, float[2] w = {1.5, -2.25}) => (float[2] y) {
      y = Add(x, w)
    })";
  auto imported = dsc::onnx_frontend::importModelBuffer(context, text, "inline.onnxtxt");
  ASSERT_TRUE(mlir::succeeded(imported));
  const auto *record = imported->weights->lookup("w");
  ASSERT_NE(record, nullptr);
  ASSERT_EQ(record->bytes.size(), 2 * sizeof(float));
  float values[2];
  std::memcpy(values, record->bytes.data(), sizeof values);
  EXPECT_EQ(values[0], 1.5f);
  EXPECT_EQ(values[1], -2.25f);
}

} // namespace
