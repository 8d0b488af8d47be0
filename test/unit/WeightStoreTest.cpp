// The weight store hands out the bytes of each initializer from where they live.
#include "frontends/onnx/OnnxImporter.h"
#include "frontends/onnx/WeightStore.h"

#include "dialects/onnx/IR/OnnxDialect.h"

#include "mlir/IR/MLIRContext.h"

#include "llvm/Support/MemoryBuffer.h"

#include "onnx/onnx_pb.h"

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

// ONNX's 4-bit integers (a QDQ export's codes) come two to a byte, the first low, in raw_data
// or one byte per int32_data value: both give the same packed bytes, an odd count rounds up,
// and data of the wrong size is refused with the sizes.
TEST(WeightStoreTest, FourBitIntegersStayPacked) {
  using dsc::onnx_frontend::kOnnxInt4;
  const uint8_t packed[] = {0x21, 0x43, 0x65, 0x87, 0x09};  // 9 codes
  ::onnx::TensorProto raw, typed, short_;
  for (auto *tensor : {&raw, &typed, &short_}) {
    tensor->set_data_type(kOnnxInt4);
    tensor->add_dims(3);
    tensor->add_dims(3);
  }
  raw.set_raw_data(std::string(reinterpret_cast<const char *>(packed), sizeof packed));
  for (uint8_t byte : packed)
    typed.add_int32_data(byte);
  short_.set_raw_data(std::string(reinterpret_cast<const char *>(packed), 4));
  dsc::onnx_frontend::WeightStore store(".");
  std::string error;
  ASSERT_TRUE(store.add(raw, "raw", error)) << error;
  ASSERT_TRUE(store.add(typed, "typed", error)) << error;
  for (const char *name : {"raw", "typed"}) {
    const auto *record = store.lookup(name);
    ASSERT_NE(record, nullptr);
    ASSERT_EQ(record->bytes.size(), sizeof packed) << name;
    EXPECT_EQ(0, std::memcmp(record->bytes.data(), packed, sizeof packed)) << name;
  }
  EXPECT_FALSE(store.add(short_, "short", error));
  EXPECT_NE(error.find("holds 4 bytes of raw data, but its shape and type need 5"),
            std::string::npos)
      << error;
}

} // namespace
