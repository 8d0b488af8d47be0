// libFuzzer harnesses of the ONNX importer (fuzz-onnx-importer), of the whole compile
// pipeline after it (fuzz-onnx-compile, built with DSC_FUZZ_COMPILE) (issue 19), and of the
// whole path a user takes (fuzz-onnx-generate, DSC_FUZZ_GENERATE, issue 46): the compiled
// plan is written, opened and generated from (fuzz/RunCompiledPlan.h). Any model either
// imports (compiles, runs) or fails with an error message, never a signal, an assertion or
// a failure nobody explains. Two harnesses, because recognition's
// probes make a compilation some thirty times slower than an import. Inputs are binary
// ModelProtos; the custom mutator keeps them ModelProtos (fuzz/ProtoMutator.h). Seeds: the
// fixtures under test/models, whole exports, and the one-op models of the importer's tests in
// ONNX's text syntax, which are small and fast and which the mutator turns into binary ones
// (fuzz/run.sh).
#include "compiler/Pipeline.h"
#include "compiler/Registration.h"
#include "frontends/onnx/OnnxImporter.h"
#include "fuzz/ProtoMutator.h"
#ifdef DSC_FUZZ_GENERATE
#include "compiler/lowering/ExportPlan.h"
#include "fuzz/GraphInterfaceMutator.h"
#include "fuzz/RunCompiledPlan.h"
#endif

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <unistd.h>

namespace {

// Where the model "is": a folder of its own with nothing in it, so that external data a
// mutated model names is looked for there and not found (or refused for leaving it).
std::string modelPath;
// Where fuzz-onnx-generate writes the plan it then runs, beside the model.
std::string planPath;

[[noreturn]] void unexplainedFailure(const char *stage) {
  std::fprintf(stderr, "fuzz: %s failed without an error message\n", stage);
  std::abort();
}

} // namespace

// LLVM's allocators poison and unpoison their slabs under ASan (llvm/Support/Compiler.h), but
// Debian's LLVM is built without it: a slab that an inline function poisons here is handed
// out by the library's uninstrumented copy, and ASan reports a use-after-poison inside
// MLIRContext's constructor. User poisoning is off for this reason alone.
extern "C" const char *__asan_default_options() { return "allow_user_poisoning=0"; }

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  char folder[] = "/tmp/dsc-fuzz-model-XXXXXX";
  if (!mkdtemp(folder)) {
    std::perror("mkdtemp");
    std::abort();
  }
  modelPath = std::string(folder) + "/model.onnx";
#ifdef DSC_FUZZ_GENERATE
  // A mutated model may ask for an arena of gigabytes, which the session would allocate
  // (and libFuzzer call running out of memory): sessions here refuse more than 1 GiB.
  setenv("DSRT_MAX_ARENA_BYTES", "1073741824", 0);
#endif
  planPath = std::string(folder) + "/plan.dsp";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::DialectRegistry registry;
  dsc::registerAllDialects(registry);
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  context.printOpOnDiagnostic(false);
  bool reported = false;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diagnostic) {
    reported |= diagnostic.getSeverity() == mlir::DiagnosticSeverity::Error;
    return mlir::success();
  });

  auto imported = dsc::onnx_frontend::importModelBuffer(
      context, llvm::StringRef(reinterpret_cast<const char *>(data), size), modelPath,
      dsc::onnx_frontend::ModelSyntax::Detect);
  if (mlir::failed(imported)) {
    if (!reported)
      unexplainedFailure("the import");
    return 0;
  }
#ifdef DSC_FUZZ_COMPILE
  // The input's hash chooses among the options that change the pipeline's path, so that
  // sharding and quantization see the same models as the rest.
  const size_t hash = std::hash<std::string_view>()(
      std::string_view(reinterpret_cast<const char *>(data), size));
  dsc::PipelineOptions options;
  options.tensorParallel = hash % 3 == 0 ? 2 : 1;
  if (hash % 5 == 0)
    options.int8 = dsc::QuantizeWeightsOptions();
  // A half session cache for three inputs in seven (dsc --kv-cache-dtype).
  if (hash % 7 < 3)
    options.kvCacheDtype = hash % 2 ? "f16" : "bf16";
  options.lowering.maxBatch = 2;
  options.lowering.maxSeqLen = 16;
#ifdef DSC_FUZZ_GENERATE
  // A CPU-only plan (no NVRTC), as `dsc compile --arch none` writes it.
  options.kernelArchs = "none";
#endif
  mlir::ModuleOp module = *imported->module;
  if (mlir::failed(dsc::recognizeTransformers(module, imported->weights.get(), options, nullptr))) {
    if (!reported)
      unexplainedFailure("recognition");
    return 0;
  }
  if (mlir::failed(dsc::shardAndQuantize(module, options))) {
    if (!reported)
      unexplainedFailure("sharding or quantization");
    return 0;
  }
  if (mlir::failed(dsc::lowerToPlan(module, options, imported->weights.get()))) {
    if (!reported)
      unexplainedFailure("lowering");
    return 0;
  }
#ifdef DSC_FUZZ_GENERATE
  dsc::ExportOptions exportOptions;
  exportOptions.maxBatch = options.lowering.maxBatch;
  exportOptions.maxSeqLen = options.lowering.maxSeqLen;
  if (auto fitted = module->getAttrOfType<mlir::IntegerAttr>("dsc.max_seq_len"))
    exportOptions.maxSeqLen = fitted.getInt();
  exportOptions.producer = "fuzz-onnx-generate";
  exportOptions.int8 = options.int8.has_value();
  if (options.int8)
    exportOptions.int8GroupSize = options.int8->groupSize;
  if (mlir::failed(dsc::exportPlan(module, *imported->weights, exportOptions, planPath))) {
    if (!reported)
      unexplainedFailure("writing the plan");
    return 0;
  }
  dsc::fuzz::runCompiledPlan(planPath.c_str(), hash);
#endif
#else
  if (mlir::failed(mlir::verify(*imported->module)) && !reported)
    unexplainedFailure("verifying the imported module");
#endif
  return 0;
}

// A ModelProto in, a ModelProto with one field changed out. Input that does not parse (libFuzzer's
// own mutations, a truncated seed) gets libFuzzer's byte mutations instead.
extern "C" __attribute__((weak)) size_t LLVMFuzzerMutate(uint8_t *data, size_t size,
                                                     size_t maxSize);

// A binary ModelProto, or one in the text syntax (the seeds of the importer's op tests).
bool parseModel(const uint8_t *data, size_t size, onnx::ModelProto &model) {
  if (model.ParseFromArray(data, static_cast<int>(size)))
    return true;
  model.Clear();
  if (size == 0 || (data[0] != '<' && data[0] != '#'))
    return false;
  std::string text(reinterpret_cast<const char *>(data), size);
  try {
    onnx::OnnxParser parser(text.c_str());
    return parser.Parse(model).IsOK();
  } catch (const std::exception &) {
    return false;
  }
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize,
                                          unsigned int seed) {
  onnx::ModelProto model;
  if (!parseModel(data, size, model))
    return LLVMFuzzerMutate(data, size, maxSize);
  std::mt19937_64 random(seed);
  const int mutations = 1 + static_cast<int>(random() % 3);
  for (int i = 0; i < mutations; ++i) {
#ifdef DSC_FUZZ_GENERATE
    if (random() % 2 && dsc::fuzz::mutateGraphInterface(model, random))
      continue;
#endif
    dsc::fuzz::mutateMessage(model, random);
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes) || bytes.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, bytes.data(), bytes.size());
  return bytes.size();
}
