// The ONNX backend node tests (Debian's libonnx-testdata) through the importer and the
// evaluator: every test whose model uses only ops, opsets and types the importer supports
// runs, and each output must match the reference. Floats compare as ONNX's backend test
// runner does, |actual - expected| <= atol + rtol * |expected|, with rtol = 1e-3 and
// atol = 1e-5; NaN equals NaN; integers and bools compare exactly.
//
//   dsc-node-conformance [--data DIR] [--excluded FILE] [--filter TEXT] [--verbose]
//
// Exit status 1 when any test that is not excluded fails.
#include "TensorFiles.h"
#include "compiler/evaluate/Evaluator.h"
#include "frontends/onnx/OnnxImporter.h"
#include "frontends/onnx/OpTable.h"
#include "frontends/onnx/TensorConversion.h"
#include "frontends/onnx/WeightStore.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

namespace fs = std::filesystem;
using dsrt::DType;

namespace {

using dsc::conformance::readTensorFile;

constexpr double kRelativeTolerance = 1e-3;
constexpr double kAbsoluteTolerance = 1e-5;

struct Options {
  std::string dataDir = "/usr/include/onnx/backend/test/data/node";
  std::string excludedFile;
  std::string filter;
  bool verbose = false;
};

// Parses `test_name  # reason` lines.
std::map<std::string, std::string> readExclusions(const std::string &path) {
  std::map<std::string, std::string> excluded;
  if (path.empty())
    return excluded;
  std::ifstream file(path);
  if (!file) {
    std::cerr << "cannot read the exclusion file " << path << "\n";
    std::exit(2);
  }
  for (std::string line; std::getline(file, line);) {
    size_t hash = line.find('#');
    std::string reason = hash == std::string::npos ? "" : line.substr(hash + 1);
    std::istringstream words(line.substr(0, hash));
    std::string name;
    if (words >> name) {
      reason.erase(0, reason.find_first_not_of(' '));
      excluded[name] = reason.empty() ? "no reason given" : reason;
    }
  }
  return excluded;
}

double elementAsDouble(const dsrt::OwnedTensor &t, size_t i) {
  const uint8_t *p = t.storage.data() + i * dsrt::dtypeSize(t.dtype);
  auto read = [p](auto tag) {
    decltype(tag) value;
    std::memcpy(&value, p, sizeof value);
    return value;
  };
  switch (t.dtype) {
  case DType::F32: return read(float{});
  case DType::F64: return read(double{});
  case DType::F16: return dsrt::halfToFloat(read(uint16_t{}));
  case DType::BF16: return dsrt::bfloat16ToFloat(read(uint16_t{}));
  default: return 0;
  }
}

// Empty when `actual` matches `expected`, else what differs.
std::string compareTensors(const dsrt::OwnedTensor &actual, const dsrt::OwnedTensor &expected) {
  std::ostringstream why;
  if (actual.dtype != expected.dtype || actual.shape != expected.shape) {
    why << "got " << dsrt::dtypeName(actual.dtype) << " " << dsrt::shapeString(actual.shape)
        << ", expected " << dsrt::dtypeName(expected.dtype) << " "
        << dsrt::shapeString(expected.shape);
    return why.str();
  }
  if (!dsrt::isFloat(actual.dtype)) {
    if (actual.storage != expected.storage) {
      size_t size = dsrt::dtypeSize(actual.dtype);
      for (size_t i = 0; i < actual.storage.size(); ++i)
        if (actual.storage[i] != expected.storage[i]) {
          why << "element " << i / size << " differs (exact comparison)";
          break;
        }
    }
    return why.str();
  }
  size_t count = actual.storage.size() / dsrt::dtypeSize(actual.dtype);
  int mismatches = 0;
  for (size_t i = 0; i < count; ++i) {
    double a = elementAsDouble(actual, i), e = elementAsDouble(expected, i);
    bool equal = (std::isnan(a) && std::isnan(e)) || a == e ||
                 std::fabs(a - e) <= kAbsoluteTolerance + kRelativeTolerance * std::fabs(e);
    if (!equal && mismatches++ < 3)
      why << (mismatches > 1 ? "; " : "") << "element " << i << ": got " << a << ", expected "
          << e;
  }
  if (mismatches > 3)
    why << " (" << mismatches << " mismatches)";
  return why.str();
}

// Why the importer is expected to refuse the model (an op, opset or type it does not
// support), or empty when it should import.
std::string unsupportedReason(mlir::MLIRContext &context, const onnx::ModelProto &model) {
  int64_t opset = 0;
  std::map<std::string, int64_t> opsets;
  for (const auto &entry : model.opset_import())
    opsets[entry.domain() == "ai.onnx" ? "" : entry.domain()] = entry.version();
  opset = opsets.count("") ? opsets[""] : 0;
  if (opset < dsc::onnx_frontend::kMinOpset || opset > dsc::onnx_frontend::kMaxOpset)
    return "opset " + std::to_string(opset) + " (supported: 13 to 20)";
  std::string reason;
  std::function<void(const onnx::GraphProto &)> visit = [&](const onnx::GraphProto &graph) {
    for (const auto &node : graph.node()) {
      std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
      int64_t version = opsets.count(domain) ? opsets[domain] : 0;
      if (reason.empty() && !dsc::onnx_frontend::lookupOp(domain, node.op_type(), version))
        reason = "op " + (domain.empty() ? "" : domain + ".") + node.op_type();
      for (const auto &attr : node.attribute())
        if (attr.has_g())
          visit(attr.g());
    }
  };
  visit(model.graph());
  if (!reason.empty())
    return reason;
  auto checkType = [&](const onnx::ValueInfoProto &info) {
    if (!info.type().has_tensor_type())
      return std::string("non-tensor type");
    int32_t element = info.type().tensor_type().elem_type();
    if (!dsc::onnx_frontend::convertElementType(context, element))
      return "type " + dsc::onnx_frontend::onnxTypeName(element);
    return std::string();
  };
  for (const auto &info : model.graph().input())
    if (std::string why = checkType(info); !why.empty())
      return why;
  for (const auto &info : model.graph().output())
    if (std::string why = checkType(info); !why.empty())
      return why;
  return "";
}

DType declaredDType(mlir::Type type) {
  auto tensor = mlir::dyn_cast<mlir::TensorType>(type);
  return tensor ? dsc::evaluate::toDType(tensor.getElementType()) : DType::Undefined;
}

onnx::OperatorSetIdProto *defaultOpset(onnx::ModelProto &model) {
  for (auto &entry : *model.mutable_opset_import())
    if (entry.domain().empty() || entry.domain() == "ai.onnx")
      return &entry;
  return nullptr;
}

// True when every default-domain op of the model has the same definition (the same ONNX
// schema version) at opset `target` as at the model's opset: the model then means the same
// at `target`, so tests written for an older opset also exercise the importer's opsets.
bool unchangedUpTo(const onnx::ModelProto &model, int64_t opset, int64_t target) {
  bool unchanged = true;
  std::function<void(const onnx::GraphProto &)> visit = [&](const onnx::GraphProto &graph) {
    for (const auto &node : graph.node()) {
      if (!node.domain().empty() && node.domain() != "ai.onnx") {
        unchanged = false;
        continue;
      }
      const auto *before = onnx::OpSchemaRegistry::Schema(node.op_type(), int(opset));
      const auto *after = onnx::OpSchemaRegistry::Schema(node.op_type(), int(target));
      if (!before || !after || before->SinceVersion() != after->SinceVersion())
        unchanged = false;
      for (const auto &attr : node.attribute())
        if (attr.has_g())
          visit(attr.g());
    }
  };
  visit(model.graph());
  return unchanged;
}

// Runs one test directory; empty when it passes, else why it fails. `upgraded`: the model
// was moved to a newer opset in memory (see unchangedUpTo) and is imported from `model`.
std::string runTest(mlir::MLIRContext &context, const fs::path &dir,
                    const onnx::ModelProto &model, bool upgraded) {
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diagnostic) {
    diagnostics += diagnostic.str() + " ";
    return mlir::success();
  });
  std::string path = (dir / "model.onnx").string();
  auto imported = upgraded ? dsc::onnx_frontend::importModelBuffer(
                                 context, model.SerializeAsString(), path,
                                 dsc::onnx_frontend::ModelSyntax::Binary)
                           : dsc::onnx_frontend::importModelFile(context, path);
  if (mlir::failed(imported))
    return "import failed: " + diagnostics;
  auto main = imported->module->lookupSymbol<mlir::func::FuncOp>("main");
  if (!main)
    return "the import has no @main";
  std::vector<fs::path> dataSets;
  for (const auto &entry : fs::directory_iterator(dir))
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0)
      dataSets.push_back(entry.path());
  std::sort(dataSets.begin(), dataSets.end());
  if (dataSets.empty())
    return "no test_data_set_* folder";
  for (const fs::path &dataSet : dataSets) {
    std::vector<dsrt::OwnedTensor> inputs, expected, outputs;
    std::string error;
    for (unsigned i = 0; i < main.getNumArguments(); ++i) {
      inputs.emplace_back();
      if (!readTensorFile(dataSet / ("input_" + std::to_string(i) + ".pb"),
                      declaredDType(main.getArgumentTypes()[i]), inputs.back(), error))
        return error;
    }
    for (unsigned i = 0; i < main.getNumResults(); ++i) {
      expected.emplace_back();
      if (!readTensorFile(dataSet / ("output_" + std::to_string(i) + ".pb"),
                      declaredDType(main.getResultTypes()[i]), expected.back(), error))
        return error;
    }
    dsrt::Status status =
        dsc::evaluate::evaluateFunction(main, imported->weights.get(), inputs, outputs);
    if (!status.isOk())
      return dataSet.filename().string() + ": " + status.message();
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::string why = compareTensors(outputs[i], expected[i]);
      if (!why.empty())
        return dataSet.filename().string() + " output " + std::to_string(i) + ": " + why;
    }
  }
  return "";
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << arg << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--data") options.dataDir = value();
    else if (arg == "--excluded") options.excludedFile = value();
    else if (arg == "--filter") options.filter = value();
    else if (arg == "--verbose") options.verbose = true;
    else {
      std::cerr << "unknown argument " << arg << "\n";
      return 2;
    }
  }
  std::map<std::string, std::string> excluded = readExclusions(options.excludedFile);
  std::vector<fs::path> tests;
  std::error_code error;
  for (const auto &entry : fs::directory_iterator(options.dataDir, error))
    if (entry.is_directory() &&
        entry.path().filename().string().find(options.filter) != std::string::npos)
      tests.push_back(entry.path());
  if (error || tests.empty()) {
    std::cerr << "no node tests under " << options.dataDir << "\n";
    return 2;
  }
  std::sort(tests.begin(), tests.end());

  mlir::MLIRContext context;
  dsc::onnx_frontend::loadImportDialects(context);
  int ran = 0, passed = 0, failed = 0, skippedExcluded = 0, unsupported = 0, upgraded = 0;
  std::map<std::string, int> unsupportedReasons;
  std::vector<std::string> excludedButPassing;
  for (const fs::path &dir : tests) {
    std::string name = dir.filename().string();
    onnx::ModelProto model;
    std::ifstream file(dir / "model.onnx", std::ios::binary);
    if (!file || !model.ParseFromIstream(&file)) {
      std::cout << "FAIL     " << name << ": model.onnx cannot be parsed\n";
      ++failed;
      continue;
    }
    onnx::OperatorSetIdProto *opset = defaultOpset(model);
    bool upgrade = opset && opset->version() > 0 &&
                   opset->version() < dsc::onnx_frontend::kMinOpset &&
                   unchangedUpTo(model, opset->version(), dsc::onnx_frontend::kMinOpset);
    if (upgrade)
      opset->set_version(dsc::onnx_frontend::kMinOpset);
    std::string reason = unsupportedReason(context, model);
    if (!reason.empty()) {
      ++unsupported;
      std::string kind = reason.substr(0, reason.find(' '));
      ++unsupportedReasons[kind == "op"      ? "unsupported op"
                           : kind == "opset" ? "opset outside 13 to 20"
                                             : reason];
      if (options.verbose)
        std::cout << "SKIP     " << name << ": " << reason << "\n";
      continue;
    }
    auto exclusion = excluded.find(name);
    std::string why = runTest(context, dir, model, upgrade);
    upgraded += upgrade;
    if (exclusion != excluded.end()) {
      ++skippedExcluded;
      std::cout << "EXCLUDED " << name << ": " << exclusion->second << "\n";
      if (why.empty())
        excludedButPassing.push_back(name);
      continue;
    }
    ++ran;
    if (why.empty()) {
      ++passed;
      if (options.verbose)
        std::cout << "PASS     " << name << "\n";
    } else {
      ++failed;
      std::cout << "FAIL     " << name << ": " << why << "\n";
    }
  }
  std::cout << "\nONNX node conformance (rtol " << kRelativeTolerance << ", atol "
            << kAbsoluteTolerance << ", NaN == NaN, integers exact):\n"
            << "  " << tests.size() << " node tests, " << unsupported
            << " not supported by the importer:";
  for (const auto &[reason, count] : unsupportedReasons)
    std::cout << " " << reason << " (" << count << ")";
  std::cout << "\n  " << upgraded << " tests written for opsets below "
            << dsc::onnx_frontend::kMinOpset << " ran at opset "
            << dsc::onnx_frontend::kMinOpset << " (none of their ops changed in between)";
  std::cout << "\n  ran " << ran << ", passed " << passed << ", failed " << failed
            << ", excluded " << skippedExcluded << "\n";
  for (const std::string &name : excludedButPassing)
    std::cout << "  note: excluded test " << name << " passes; remove it from the list\n";
  return failed > 0 ? 1 : 0;
}
