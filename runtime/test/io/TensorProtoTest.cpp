// The runtime's protobuf-free TensorProto reader agrees with ONNX's own protobuf classes on
// the ONNX node-test data, and what it writes ONNX reads back.
#include "io/TensorProto.h"

#include "onnx/onnx_pb.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

const char *kNodeTests = "/usr/include/onnx/backend/test/data/node";

std::string slurp(const std::filesystem::path &path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

// The element values ONNX's protobuf holds, as raw little-endian bytes of `dtype`.
std::string onnxBytes(const onnx::TensorProto &proto, dsrt::DType dtype) {
  if (proto.has_raw_data())
    return proto.raw_data();
  std::string out;
  size_t size = dsrt::dtypeSize(dtype);
  auto append = [&](auto value) {
    uint64_t bits = 0;
    std::memcpy(&bits, &value, std::min(sizeof value, sizeof bits));
    out.append(reinterpret_cast<const char *>(&bits), size);
  };
  for (float v : proto.float_data()) append(v);
  for (double v : proto.double_data()) append(v);
  for (int64_t v : proto.int64_data()) append(v);
  for (uint64_t v : proto.uint64_data()) append(v);
  for (int32_t v : proto.int32_data()) append(v);
  return out;
}

TEST(TensorProtoTest, AgreesWithOnnxOnNodeTestData) {
  if (!std::filesystem::exists(kNodeTests))
    GTEST_SKIP() << "libonnx-testdata is not installed";
  int compared = 0, unsupported = 0;
  for (const auto &entry : std::filesystem::recursive_directory_iterator(kNodeTests)) {
    if (entry.path().extension() != ".pb")
      continue;
    // Sequence and optional tests store SequenceProto/OptionalProto, which protobuf may
    // also parse as a (meaningless) TensorProto.
    std::string test = entry.path().parent_path().parent_path().filename().string();
    if (test.find("seq") != std::string::npos || test.find("opt") != std::string::npos)
      continue;
    std::string bytes = slurp(entry.path());
    onnx::TensorProto proto;
    if (!proto.ParseFromString(bytes))
      continue;  // sequences and optionals are stored as other messages
    dsrt::io::NamedTensor ours;
    dsrt::Status status = dsrt::io::parseTensorProto(bytes, ours);
    if (proto.data_type() == onnx::TensorProto::STRING ||
        dsrt::io::dtypeFromOnnx(proto.data_type()) == dsrt::DType::Undefined) {
      EXPECT_FALSE(status.isOk()) << entry.path();
      ++unsupported;
      continue;
    }
    ASSERT_TRUE(status.isOk()) << entry.path() << ": " << status.message();
    EXPECT_EQ(ours.name, proto.name()) << entry.path();
    ASSERT_EQ(ours.tensor.shape, dsrt::Shape(proto.dims().begin(), proto.dims().end()))
        << entry.path();
    std::string expected = onnxBytes(proto, ours.tensor.dtype);
    ASSERT_EQ(expected.size(), ours.tensor.storage.size()) << entry.path();
    if (!expected.empty())  // memcmp of empty (possibly null) buffers is undefined
      EXPECT_EQ(0, std::memcmp(expected.data(), ours.tensor.storage.data(), expected.size()))
          << entry.path();
    ++compared;
  }
  EXPECT_GT(compared, 1000);
  std::cout << compared << " TensorProto files agree, " << unsupported << " refused\n";
}

TEST(TensorProtoTest, WrittenFilesReadBackInOnnx) {
  dsrt::OwnedTensor tensor(dsrt::DType::F16, {2, 3});
  for (size_t i = 0; i < 6; ++i)
    reinterpret_cast<uint16_t *>(tensor.storage.data())[i] = dsrt::floatToHalf(i * 0.5f);
  std::string bytes = dsrt::io::serializeTensorProto("logits", tensor.ref());
  onnx::TensorProto proto;
  ASSERT_TRUE(proto.ParseFromString(bytes));
  EXPECT_EQ(proto.name(), "logits");
  EXPECT_EQ(proto.data_type(), onnx::TensorProto::FLOAT16);
  EXPECT_EQ(std::vector<int64_t>(proto.dims().begin(), proto.dims().end()),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(proto.raw_data(), std::string(tensor.storage.begin(), tensor.storage.end()));
}

TEST(TensorProtoTest, MalformedInputIsRefused) {
  dsrt::OwnedTensor tensor(dsrt::DType::F32, {4});
  std::string bytes = dsrt::io::serializeTensorProto("x", tensor.ref());
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    dsrt::io::NamedTensor out;
    EXPECT_FALSE(dsrt::io::parseTensorProto(bytes.substr(0, cut), out).isOk()) << cut;
  }
  // Dims that claim far more elements than there are bytes.
  std::string huge;
  huge += '\x08';  // dims, varint
  huge += "\xff\xff\xff\xff\x0f";
  huge += '\x10';
  huge += '\x01';  // FLOAT
  dsrt::io::NamedTensor out;
  EXPECT_FALSE(dsrt::io::parseTensorProto(huge, out).isOk());
}

} // namespace
