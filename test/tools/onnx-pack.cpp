// Test helper: turns an ONNX text model into a binary .onnx, optionally moving the
// initializers to an external-data file under a location string of the test's choosing
// (which may be hostile: "../x", "/abs"), so lit can build the external-data cases.
//
//   onnx-pack in.onnxtxt -o out.onnx [--external-data FILE] [--location STRING]
//             [--offset-shift N] [--min-bytes N]
#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace {
[[noreturn]] void fail(const std::string &message) {
  std::cerr << "onnx-pack: " << message << "\n";
  std::exit(2);
}

std::string directoryOf(const std::string &path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}
} // namespace

int main(int argc, char **argv) {
  std::string input, output, externalFile, location;
  long long offsetShift = 0, minBytes = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (++i >= argc)
        fail("missing value after " + arg);
      return argv[i];
    };
    if (arg == "-o") output = value();
    else if (arg == "--external-data") externalFile = value();
    else if (arg == "--location") location = value();
    else if (arg == "--offset-shift") offsetShift = std::stoll(value());
    else if (arg == "--min-bytes") minBytes = std::stoll(value());
    else if (input.empty()) input = arg;
    else fail("unexpected argument " + arg);
  }
  if (input.empty() || output.empty())
    fail("usage: onnx-pack in.onnxtxt -o out.onnx [--external-data FILE] [--location STRING]");

  std::ifstream in(input);
  std::stringstream text;
  text << in.rdbuf();
  onnx::ModelProto model;
  auto status = onnx::OnnxParser::Parse(model, text.str().c_str());
  if (!status.IsOK())
    fail("cannot parse " + input + ": " + status.ErrorMessage());

  if (!externalFile.empty()) {
    if (location.empty())
      location = externalFile;
    std::ofstream data(directoryOf(output) + "/" + externalFile, std::ios::binary);
    long long offset = 0;
    for (auto &tensor : *model.mutable_graph()->mutable_initializer()) {
      // The text parser fills the typed fields; external data is always raw bytes.
      if (!tensor.has_raw_data()) {
        std::string raw;
        auto append = [&raw](const void *p, size_t n) { raw.append((const char *)p, n); };
        for (float v : tensor.float_data()) append(&v, sizeof v);
        for (int64_t v : tensor.int64_data()) append(&v, sizeof v);
        if (tensor.data_type() == onnx::TensorProto::INT32)
          for (int32_t v : tensor.int32_data()) append(&v, sizeof v);
        tensor.clear_float_data();
        tensor.clear_int64_data();
        tensor.clear_int32_data();
        tensor.set_raw_data(raw);
      }
      if (!tensor.has_raw_data() || (long long)tensor.raw_data().size() < minBytes)
        continue;
      const std::string &bytes = tensor.raw_data();
      data.write(bytes.data(), bytes.size());
      tensor.set_data_location(onnx::TensorProto::EXTERNAL);
      auto add = [&](const char *key, const std::string &value) {
        auto *entry = tensor.add_external_data();
        entry->set_key(key);
        entry->set_value(value);
      };
      add("location", location);
      add("offset", std::to_string(offset + offsetShift));
      add("length", std::to_string(bytes.size()));
      offset += bytes.size();
      tensor.clear_raw_data();
    }
  }
  std::ofstream out(output, std::ios::binary);
  if (!model.SerializeToOstream(&out))
    fail("cannot write " + output);
  return 0;
}
