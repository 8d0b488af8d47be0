// dsrun: runs a plan on the CPU through libdsrt's C API. Inputs come from TensorProto .pb
// files (the ONNX node-test layout) or from token ids on the command line; outputs are
// printed, written as .pb, or compared with expected .pb files.
#include "dsrt/dsrt.h"
#include "io/TensorProto.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string plan, program = "forward", inputDir, outputDir, expectDir;
  std::vector<std::string> inputFiles;
  std::vector<int64_t> tokens;
  int rank = 0;
  double rtol = 1e-4, atol = 1e-5;
  bool quiet = false;
};

const char *kUsage =
    "usage: dsrun plan.dsp [--program NAME] [--rank R]\n"
    "             [--input FILE.pb]... [--input-dir DIR] [--tokens 1,2,3]\n"
    "             [--output-dir DIR] [--expect-dir DIR [--rtol X] [--atol Y]] [--quiet]\n"
    "  --input       a TensorProto; bound by its name, else in order\n"
    "  --input-dir   input_0.pb, input_1.pb, ... (the ONNX node-test layout)\n"
    "  --tokens      a batch of one: input_ids = the ids; attention_mask = ones and\n"
    "                position_ids = 0..n-1 when the program has them\n"
    "  --output-dir  writes output_0.pb, output_1.pb, ...\n"
    "  --expect-dir  compares each output with output_N.pb there: |a - e| <= atol + rtol*|e|\n"
    "                (exact for integers and bools); exits 1 on a mismatch\n";

[[noreturn]] void die(const std::string &message, int code = 2) {
  std::cerr << "dsrun: error: " << message << "\n";
  std::exit(code);
}

void check(dsrt_status status, const std::string &what) {
  if (status != DSRT_OK)
    die(what + ": " + dsrt_last_error());
}

Options parse(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + arg);
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--program") options.program = value();
    else if (arg == "--rank") options.rank = std::atoi(value().c_str());
    else if (arg == "--input") options.inputFiles.push_back(value());
    else if (arg == "--input-dir") options.inputDir = value();
    else if (arg == "--output-dir") options.outputDir = value();
    else if (arg == "--expect-dir") options.expectDir = value();
    else if (arg == "--rtol") options.rtol = std::atof(value().c_str());
    else if (arg == "--atol") options.atol = std::atof(value().c_str());
    else if (arg == "--quiet") options.quiet = true;
    else if (arg == "--tokens") {
      std::stringstream list(value());
      std::string item;
      while (std::getline(list, item, ','))
        options.tokens.push_back(std::atoll(item.c_str()));
    } else if (!arg.empty() && arg[0] == '-') die("unknown option " + arg + "\n" + kUsage);
    else if (options.plan.empty()) options.plan = arg;
    else die("more than one plan given");
  }
  if (options.plan.empty())
    die(std::string("no plan given\n") + kUsage);
  return options;
}

std::vector<dsrt::io::NamedTensor> loadInputs(const Options &options) {
  std::vector<std::string> files = options.inputFiles;
  if (!options.inputDir.empty())
    for (int i = 0;; ++i) {
      std::string path = options.inputDir + "/input_" + std::to_string(i) + ".pb";
      if (!std::filesystem::exists(path))
        break;
      files.push_back(path);
    }
  std::vector<dsrt::io::NamedTensor> inputs;
  for (const std::string &file : files) {
    dsrt::io::NamedTensor tensor;
    dsrt::Status status = dsrt::io::readTensorProto(file, tensor);
    if (!status.isOk())
      die(status.message());
    inputs.push_back(std::move(tensor));
  }
  return inputs;
}

double valueAt(const dsrt::TensorRef &t, int64_t i) {
  const uint8_t *p = static_cast<const uint8_t *>(t.data);
  auto get = [&](auto v) {
    std::memcpy(&v, p + i * sizeof v, sizeof v);
    return static_cast<double>(v);
  };
  switch (t.dtype) {
  case dsrt::DType::F32: return get(float());
  case dsrt::DType::F64: return get(double());
  case dsrt::DType::F16: { uint16_t b; std::memcpy(&b, p + 2 * i, 2); return dsrt::halfToFloat(b); }
  case dsrt::DType::BF16: { uint16_t b; std::memcpy(&b, p + 2 * i, 2); return dsrt::bfloat16ToFloat(b); }
  case dsrt::DType::I64: return get(int64_t());
  case dsrt::DType::I32: return get(int32_t());
  case dsrt::DType::I16: return get(int16_t());
  case dsrt::DType::I8: return get(int8_t());
  case dsrt::DType::U8: case dsrt::DType::Bool: return get(uint8_t());
  case dsrt::DType::U16: return get(uint16_t());
  case dsrt::DType::U32: return get(uint32_t());
  case dsrt::DType::U64: return get(uint64_t());
  default: return 0;
  }
}

void print(const std::string &name, const dsrt::TensorRef &t) {
  std::cout << name << ": " << dsrt::dtypeName(t.dtype) << " " << dsrt::shapeString(t.shape);
  int64_t n = t.elements();
  std::cout << " [";
  for (int64_t i = 0; i < std::min<int64_t>(n, 8); ++i)
    std::cout << (i ? ", " : "") << valueAt(t, i);
  std::cout << (n > 8 ? ", ...]" : "]") << "\n";
}

// Returns whether `actual` matches `expected` within the tolerances.
bool compare(const std::string &name, const dsrt::TensorRef &actual,
             const dsrt::TensorRef &expected, const Options &options) {
  if (actual.dtype != expected.dtype || actual.shape != expected.shape) {
    std::cout << name << ": MISMATCH: got " << dsrt::dtypeName(actual.dtype) << " "
              << dsrt::shapeString(actual.shape) << ", expected "
              << dsrt::dtypeName(expected.dtype) << " " << dsrt::shapeString(expected.shape)
              << "\n";
    return false;
  }
  bool exact = !dsrt::isFloat(actual.dtype);
  double worst = 0, worstAllowed = 0;
  int64_t bad = 0, firstBad = -1;
  for (int64_t i = 0; i < actual.elements(); ++i) {
    double a = valueAt(actual, i), e = valueAt(expected, i);
    if (std::isnan(a) && std::isnan(e))
      continue;
    double diff = std::fabs(a - e), allowed = exact ? 0 : options.atol + options.rtol * std::fabs(e);
    if (!(diff <= allowed) || (std::isinf(e) && a != e)) {
      if (firstBad < 0)
        firstBad = i;
      ++bad;
    }
    if (diff > worst || std::isnan(diff)) {
      worst = diff;
      worstAllowed = allowed;
    }
  }
  std::cout << name << ": " << (bad ? "MISMATCH" : "ok") << " (max abs diff " << worst;
  if (bad)
    std::cout << ", " << bad << " elements out of tolerance, first at " << firstBad
              << ": got " << valueAt(actual, firstBad) << ", expected "
              << valueAt(expected, firstBad) << ", allowed " << worstAllowed;
  std::cout << ")\n";
  return bad == 0;
}

} // namespace

int main(int argc, char **argv) {
  Options options = parse(argc, argv);
  dsrt_plan *plan = nullptr;
  check(dsrt_plan_open(options.plan.c_str(), &plan), "cannot open the plan");
  dsrt_session *session = nullptr;
  check(dsrt_session_create(plan, options.rank, DSRT_DEVICE_CPU, &session),
        "cannot create a session");
  const char *program = options.program.c_str();
  size_t inputCount = 0, outputCount = 0;
  check(dsrt_plan_io_count(plan, program, 0, &inputCount), "program");
  check(dsrt_plan_io_count(plan, program, 1, &outputCount), "program");

  std::vector<std::string> inputNames;
  for (size_t i = 0; i < inputCount; ++i) {
    dsrt_tensor info;
    check(dsrt_plan_io_info(plan, program, 0, i, &info), "input");
    inputNames.push_back(info.name);
  }
  auto indexOf = [&](const std::string &name) -> long {
    auto it = std::find(inputNames.begin(), inputNames.end(), name);
    return it == inputNames.end() ? -1 : it - inputNames.begin();
  };

  std::vector<dsrt::io::NamedTensor> inputs = loadInputs(options);
  if (!options.tokens.empty()) {
    int64_t n = options.tokens.size();
    auto add = [&](const std::string &name, auto fill) {
      dsrt::io::NamedTensor t{name, dsrt::OwnedTensor(dsrt::DType::I64, {1, n})};
      for (int64_t i = 0; i < n; ++i)
        reinterpret_cast<int64_t *>(t.tensor.storage.data())[i] = fill(i);
      inputs.push_back(std::move(t));
    };
    add("input_ids", [&](int64_t i) { return options.tokens[i]; });
    if (indexOf("attention_mask") >= 0)
      add("attention_mask", [](int64_t) { return int64_t(1); });
    if (indexOf("position_ids") >= 0)
      add("position_ids", [](int64_t i) { return i; });
  }
  std::vector<bool> bound(inputCount, false);
  for (size_t k = 0; k < inputs.size(); ++k) {
    long index = indexOf(inputs[k].name);
    if (index < 0 && inputs[k].name.empty() && k < inputCount)
      index = static_cast<long>(k);
    if (index < 0)
      die("the program '" + options.program + "' has no input named '" + inputs[k].name + "'");
    const dsrt::OwnedTensor &t = inputs[k].tensor;
    check(dsrt_session_set_input(session, program, index, static_cast<dsrt_dtype>(t.dtype),
                                 t.shape.data(), t.shape.size(), t.storage.data()),
          "input '" + inputNames[index] + "'");
    bound[index] = true;
  }
  for (size_t i = 0; i < inputCount; ++i)
    if (!bound[i])
      die("no value for input '" + inputNames[i] + "'");

  check(dsrt_session_run(session, program), "run failed");

  bool allMatch = true;
  for (size_t o = 0; o < outputCount; ++o) {
    dsrt_tensor out;
    check(dsrt_session_get_output(session, program, o, &out), "output");
    dsrt::TensorRef ref{static_cast<dsrt::DType>(out.dtype),
                        dsrt::Shape(out.shape, out.shape + out.rank), const_cast<void *>(out.data)};
    if (!options.quiet && options.expectDir.empty())
      print(out.name, ref);
    if (!options.outputDir.empty()) {
      dsrt::Status status = dsrt::io::writeTensorProto(
          options.outputDir + "/output_" + std::to_string(o) + ".pb", out.name, ref);
      if (!status.isOk())
        die(status.message());
    }
    if (!options.expectDir.empty()) {
      dsrt::io::NamedTensor expected;
      dsrt::Status status = dsrt::io::readTensorProto(
          options.expectDir + "/output_" + std::to_string(o) + ".pb", expected);
      if (!status.isOk())
        die(status.message());
      allMatch &= compare(out.name, ref, expected.tensor.ref(), options);
    }
  }
  dsrt_session_destroy(session);
  dsrt_plan_close(plan);
  return allMatch ? 0 : 1;
}
