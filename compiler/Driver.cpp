#include "compiler/Driver.h"
#include "compiler/Pipeline.h"

#include "codegen/AttachKernels.h"
#include "compiler/Registration.h"
#include "compiler/lowering/ExportPlan.h"
#include "compiler/lowering/ModelInfo.h"
#include "compiler/recognize/RecognitionReport.h"
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>

using namespace mlir;

namespace dsc {
namespace {

enum class Stage { Onnx, Tfm, Plan, Ptx, Cuda, PlanFile };

llvm::cl::OptionCategory category("dsc options");

llvm::cl::list<std::string> positional(llvm::cl::Positional, llvm::cl::desc("[compile] <model.onnx | folder | encoder.onnx decoder.onnx>"),
                                       llvm::cl::cat(category));
llvm::cl::opt<Stage> emit(
    "emit", llvm::cl::desc("Stop after a stage and print its result"), llvm::cl::init(Stage::PlanFile),
    llvm::cl::values(clEnumValN(Stage::Onnx, "onnx", "the imported onnx dialect"),
                     clEnumValN(Stage::Tfm, "tfm", "after transformer recognition"),
                     clEnumValN(Stage::Plan, "plan", "the plan dialect"),
                     clEnumValN(Stage::Ptx, "ptx", "the generated PTX"),
                     clEnumValN(Stage::Cuda, "cuda", "the generated CUDA C++")),
    llvm::cl::cat(category));
llvm::cl::opt<std::string> output("o", llvm::cl::desc("Output file ('-' for stdout)"),
                                  llvm::cl::value_desc("file"), llvm::cl::init("-"),
                                  llvm::cl::cat(category));
llvm::cl::opt<std::string> weightDtype(
    "dtype",
    llvm::cl::desc("How weights are stored in the plan: fp32, fp16, bf16, or int8 (the linear "
                   "layers' weights quantized, the rest in --compute-dtype); default: the "
                   "dtype most of the model's float weights are stored in"),
    llvm::cl::init("fp32"), llvm::cl::cat(category));
llvm::cl::opt<std::string> computeDtype(
    "compute-dtype",
    llvm::cl::desc("With --dtype int8: how embeddings, norms, biases, scales and the LM head "
                   "are stored: fp16 (default), bf16 or fp32"),
    llvm::cl::init(""), llvm::cl::cat(category));
llvm::cl::opt<int64_t> int8GroupSize(
    "int8-group-size",
    llvm::cl::desc("With --dtype int8: inputs per scale group along the input dimension (0, "
                   "the default: one scale per output channel)"),
    llvm::cl::init(0), llvm::cl::cat(category));
llvm::cl::opt<bool> int8MlpExtraGrouping(
    "int8-mlp-extra-grouping",
    llvm::cl::desc("With --dtype int8: halve the group size of the MLP's linear layers"),
    llvm::cl::init(false), llvm::cl::cat(category));
llvm::cl::opt<bool> int8SkipLmHead(
    "int8-skip-lm-head",
    llvm::cl::desc("With --dtype int8: keep the LM head in --compute-dtype"),
    llvm::cl::init(false), llvm::cl::cat(category));
llvm::cl::opt<std::string> kvCacheDtype(
    "kv-cache-dtype",
    llvm::cl::desc("The session's KV cache: auto (the default: the dtype the float weights are "
                   "stored in, fp16 for --dtype int8), fp32, fp16 or bf16"),
    llvm::cl::init("auto"), llvm::cl::cat(category));
llvm::cl::opt<std::string> activationDtype(
    "activation-dtype",
    llvm::cl::desc("The session programs' activations between an attention or a gated MLP "
                   "and the linear layers that read them: auto (the default: the dtype the "
                   "float weights are stored in, fp16 for --dtype int8), fp32, fp16 or bf16"),
    llvm::cl::init("auto"), llvm::cl::cat(category));
llvm::cl::opt<bool> verbose(
    "verbose", llvm::cl::desc("Say more: with --dtype int8, the quantization error per weight"),
    llvm::cl::init(false), llvm::cl::cat(category));
llvm::cl::opt<std::string> arch(
    "arch",
    llvm::cl::desc("GPU architectures to generate kernels for (comma list), or none for a "
                   "CPU-only plan"),
    llvm::cl::init("sm_80,sm_90"), llvm::cl::cat(category));
// Defaults follow the model: a few sequences at once, and as many tokens as its
// config.json gives positions, up to kDefaultMaxSeqLen (the KV cache and the arena grow with
// both; a 128k-position model gets 2048 unless asked for more).
constexpr int64_t kDefaultMaxBatch = 4;
constexpr int64_t kDefaultMaxSeqLen = 2048;
// T5's relative positions have no table to bound them; it was trained on 512 tokens, which
// is also its tokenizer's model_max_length.
constexpr int64_t kDefaultEncoderDecoderSeqLen = 512;
llvm::cl::opt<int64_t> maxBatch("max-batch",
                                llvm::cl::desc("Largest batch the plan accepts (default 4)"),
                                llvm::cl::init(kDefaultMaxBatch), llvm::cl::cat(category));
llvm::cl::opt<int64_t> maxSeqLen(
    "max-seq-len",
    llvm::cl::desc("Largest sequence (and total past + new) length the plan accepts (default: "
                   "the model's positions from config.json, at most 2048)"),
    llvm::cl::init(kDefaultMaxSeqLen), llvm::cl::cat(category));
llvm::cl::opt<onnx_frontend::ModelSyntax> syntax(
    "input-syntax", llvm::cl::desc("How the model file is written"),
    llvm::cl::init(onnx_frontend::ModelSyntax::Detect),
    llvm::cl::values(
        clEnumValN(onnx_frontend::ModelSyntax::Detect, "auto",
                   "text for .onnxtxt/.txt or text starting with '<' or '#', else binary"),
        clEnumValN(onnx_frontend::ModelSyntax::Binary, "binary", "protobuf ModelProto"),
        clEnumValN(onnx_frontend::ModelSyntax::Text, "text", "the ONNX text syntax")),
    llvm::cl::cat(category));

llvm::cl::opt<bool> noRecognize(
    "no-recognize",
    llvm::cl::desc("Skip transformer recognition: every onnx op becomes a generic step"),
    llvm::cl::init(false), llvm::cl::cat(category));

llvm::cl::opt<int64_t> tensorParallel(
    "tp",
    llvm::cl::desc("Tensor-parallel degree: shard the recognised layers over N ranks (one "
                   "weight section per rank)"),
    llvm::cl::init(1), llvm::cl::cat(category));

llvm::cl::opt<bool> serving(
    "serving",
    llvm::cl::desc("Also derive the serving engine's step program: decode whose LM head reads "
                   "only the sampled rows (docs/serving.md); --max-batch then bounds the "
                   "tokens per step"),
    llvm::cl::cat(category));
llvm::cl::opt<bool> noFuse(
    "no-fuse",
    llvm::cl::desc("Skip fusion: every activation, residual add and norm stays its own step"),
    llvm::cl::init(false), llvm::cl::cat(category));

llvm::cl::opt<bool> fuseRemarks(
    "fuse-remarks", llvm::cl::desc("Say why each fusion candidate was not fused"),
    llvm::cl::init(false), llvm::cl::cat(category));

llvm::cl::opt<bool> attentionRemarks(
    "attention-remarks",
    llvm::cl::desc("Say why each softmax was not recognised as attention, and why no "
                   "prefill/decode programs were derived"),
    llvm::cl::init(false), llvm::cl::cat(category));

// "model.onnx: node 'Add_3': error: ..." rather than MLIR's line:column form, which means
// nothing for a protobuf file.
void printDiagnostic(Diagnostic &diagnostic, llvm::raw_ostream &os, bool isNote = false) {
  Location loc = diagnostic.getLocation();
  std::string node;
  if (auto name = dyn_cast<NameLoc>(loc)) {
    node = name.getName().str();
    loc = name.getChildLoc();
  }
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    os << file.getFilename().getValue();
    if (file.getLine() != 0)
      os << ":" << file.getLine() << ":" << file.getColumn();
    os << ": ";
  }
  if (!node.empty())
    os << "node '" << node << "': ";
  switch (diagnostic.getSeverity()) {
  case DiagnosticSeverity::Error: os << "error: "; break;
  case DiagnosticSeverity::Warning: os << "warning: "; break;
  case DiagnosticSeverity::Note: os << "note: "; break;
  case DiagnosticSeverity::Remark: os << "remark: "; break;
  }
  os << diagnostic << "\n";
  for (Diagnostic &note : diagnostic.getNotes())
    printDiagnostic(note, os, /*isNote=*/true);
}

// The model's files: one ONNX file, or an encoder-decoder's two (`model` then holds one of
// them and `decoder` the other; the importer tells which is which from their inputs).
struct ModelFiles {
  std::string model, decoder;
};

bool isFile(const std::string &path) { return llvm::sys::fs::is_regular_file(path); }

// `dsc compile model.onnx`, `dsc compile FOLDER` (an optimum export: model.onnx, or
// encoder_model.onnx with decoder_model_merged.onnx or decoder_model.onnx), or
// `dsc compile encoder.onnx decoder.onnx`.
FailureOr<ModelFiles> findModelFiles(const std::vector<std::string> &args) {
  ModelFiles files;
  if (args.empty() || args.size() > 2) {
    llvm::errs() << "dsc: error: expected one model file, a folder, or an encoder-decoder's "
                    "two model files (see --help)\n";
    return failure();
  }
  if (args.size() == 2) {
    files.model = args[0];
    files.decoder = args[1];
    return files;
  }
  if (!llvm::sys::fs::is_directory(args[0])) {
    files.model = args[0];
    return files;
  }
  auto inFolder = [&](const char *name) {
    llvm::SmallString<256> path(args[0]);
    llvm::sys::path::append(path, name);
    return path.str().str();
  };
  if (isFile(inFolder("model.onnx"))) {
    files.model = inFolder("model.onnx");
    return files;
  }
  // Optimum writes the merged decoder beside the two it merged; the merged one reads the
  // encoder's keys and values from its past inputs after the first step.
  if (isFile(inFolder("encoder_model.onnx"))) {
    for (const char *decoder : {"decoder_model_merged.onnx", "decoder_model.onnx"})
      if (isFile(inFolder(decoder))) {
        files.model = inFolder("encoder_model.onnx");
        files.decoder = inFolder(decoder);
        return files;
      }
  }
  std::vector<std::string> onnxFiles;
  std::error_code error;
  for (llvm::sys::fs::directory_iterator it(args[0], error), end; it != end && !error;
       it.increment(error))
    if (llvm::StringRef(it->path()).ends_with(".onnx") && isFile(it->path()))
      onnxFiles.push_back(it->path());
  std::sort(onnxFiles.begin(), onnxFiles.end());
  if (onnxFiles.size() == 1) {
    files.model = onnxFiles[0];
    return files;
  }
  if (onnxFiles.size() == 2) {
    files.model = onnxFiles[0];
    files.decoder = onnxFiles[1];
    return files;
  }
  llvm::errs() << "dsc: error: " << args[0] << " holds " << onnxFiles.size()
               << " .onnx files; expected model.onnx, encoder_model.onnx with "
                  "decoder_model_merged.onnx, or one encoder and one decoder (name the files "
                  "to compile)\n";
  return failure();
}

void printVersion(llvm::raw_ostream &os) {
  os << "dsc " DSC_VERSION " (MLIR " LLVM_VERSION_STRING ", ONNX opsets 13-23)\n";
}

} // namespace

int runCompilerDriver(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  llvm::cl::HideUnrelatedOptions(category);
  llvm::cl::SetVersionPrinter(printVersion);
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "dsc: ahead-of-time compiler for transformer inference\n\n"
      "  dsc compile model.onnx|FOLDER|ENCODER DECODER -o model.dsp [--dtype fp16]\n"
      "                 [--max-batch N] [--max-seq-len N] [--kv-cache-dtype fp16]\n"
      "                                    [--tp N]\n"
      "  dsc compile model.onnx -o model.dsp --dtype int8 [--int8-group-size G]\n"
      "                 [--int8-mlp-extra-grouping] [--int8-skip-lm-head]\n"
      "                 [--compute-dtype fp16|bf16] [--verbose]\n"
      "  dsc model.onnx --emit=onnx|tfm|plan [--no-recognize] [-o out.mlir]\n"
      "  dsc model.onnx --emit=cuda|ptx [--arch sm_80,sm_90] [-o kernels.cu]\n");

  std::vector<std::string> args(positional.begin(), positional.end());
  if (!args.empty() && args.front() == "compile")
    args.erase(args.begin());
  FailureOr<ModelFiles> files = findModelFiles(args);
  if (failed(files))
    return EXIT_FAILURE;
  std::vector<std::string> archs;
  if (dsrt::Status status = codegen::parseArchList(arch, archs); !status.isOk()) {
    llvm::errs() << "dsc: error: " << status.message() << "\n";
    return EXIT_FAILURE;
  }
  if ((emit == Stage::Ptx || emit == Stage::Cuda) && archs.empty()) {
    llvm::errs() << "dsc: error: --emit=" << (emit == Stage::Ptx ? "ptx" : "cuda")
                 << " needs GPU architectures, not --arch none\n";
    return EXIT_FAILURE;
  }
  if (weightDtype != "fp32" && weightDtype != "fp16" && weightDtype != "bf16" &&
      weightDtype != "int8") {
    llvm::errs() << "dsc: error: --dtype must be fp32, fp16, bf16 or int8, not '" << weightDtype
                 << "'\n";
    return EXIT_FAILURE;
  }
  const bool int8 = weightDtype == "int8";
  if (!int8 &&
      (!computeDtype.empty() || int8GroupSize != 0 || int8MlpExtraGrouping || int8SkipLmHead)) {
    llvm::errs() << "dsc: error: --compute-dtype and the --int8-* options go with --dtype int8 "
                    "(--dtype "
                 << weightDtype << " stores every weight as " << weightDtype << ")\n";
    return EXIT_FAILURE;
  }
  // Every float weight that is not quantized is stored in the compute dtype. Without
  // --dtype, the dtype the model was exported in (below, once its weights are read).
  std::string storedFloatDtype = int8 ? (computeDtype.empty() ? "fp16" : computeDtype.getValue())
                                      : weightDtype.getValue();
  if (storedFloatDtype != "fp32" && storedFloatDtype != "fp16" && storedFloatDtype != "bf16") {
    llvm::errs() << "dsc: error: --compute-dtype must be fp16, bf16 or fp32, not '"
                 << storedFloatDtype << "'\n";
    return EXIT_FAILURE;
  }
  if (kvCacheDtype != "auto" && kvCacheDtype != "fp32" && kvCacheDtype != "fp16" &&
      kvCacheDtype != "bf16") {
    llvm::errs() << "dsc: error: --kv-cache-dtype must be auto, fp32, fp16 or bf16, not '"
                 << kvCacheDtype << "'\n";
    return EXIT_FAILURE;
  }
  if (activationDtype != "auto" && activationDtype != "fp32" && activationDtype != "fp16" &&
      activationDtype != "bf16") {
    llvm::errs() << "dsc: error: --activation-dtype must be auto, fp32, fp16 or bf16, not '"
                 << activationDtype << "'\n";
    return EXIT_FAILURE;
  }
  if (int8GroupSize < 0) {
    llvm::errs() << "dsc: error: --int8-group-size must be positive, or 0 for one group per "
                    "output channel, not "
                 << int8GroupSize << "\n";
    return EXIT_FAILURE;
  }
  if (int8 && noRecognize) {
    llvm::errs() << "dsc: error: --dtype int8 quantizes recognised linear layers; it cannot be "
                    "combined with --no-recognize\n";
    return EXIT_FAILURE;
  }
  if (tensorParallel < 1) {
    llvm::errs() << "dsc: error: --tp must be at least 1, not " << tensorParallel << "\n";
    return EXIT_FAILURE;
  }
  if (tensorParallel > 1 && noRecognize) {
    llvm::errs() << "dsc: error: --tp shards recognised layers; it cannot be combined with "
                    "--no-recognize\n";
    return EXIT_FAILURE;
  }
  if (emit == Stage::PlanFile && output == "-") {
    llvm::errs() << "dsc: error: writing a plan needs an output file: -o model.dsp\n";
    return EXIT_FAILURE;
  }

  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  ScopedDiagnosticHandler handler(&context, [](Diagnostic &diagnostic) {
    printDiagnostic(diagnostic, llvm::errs());
    return success();
  });

  std::string modelDirectory = llvm::sys::path::parent_path(files->model).str();
  if (modelDirectory.empty())
    modelDirectory = ".";
  if (maxSeqLen.getNumOccurrences() == 0) {
    if (std::optional<int64_t> positions = configuredPositions(modelDirectory))
      maxSeqLen = std::min(*positions, kDefaultMaxSeqLen);
    else if (!files->decoder.empty())
      maxSeqLen = kDefaultEncoderDecoderSeqLen;
  }

  auto imported = files->decoder.empty()
                      ? onnx_frontend::importModelFile(context, files->model, syntax)
                      : onnx_frontend::importEncoderDecoder(context, files->model,
                                                            files->decoder, syntax);
  if (failed(imported))
    return EXIT_FAILURE;
  // Defaults follow the model: a model exported in f16 or bf16 keeps its weights so
  // (--dtype says otherwise), and the cache of a model stored in half precision is half
  // too, as transformers' (torch_dtype), vLLM's and TensorRT-LLM's are.
  if (!int8 && weightDtype.getNumOccurrences() == 0) {
    int32_t exported = imported->weights->dominantFloatType();
    storedFloatDtype = exported == 10 ? "fp16" : exported == 16 ? "bf16" : "fp32";
  }
  const std::string cacheDtype =
      kvCacheDtype == "auto" ? storedFloatDtype : kvCacheDtype.getValue();
  const std::string activations =
      activationDtype == "auto" ? storedFloatDtype : activationDtype.getValue();
  auto mlirDtype = [](const std::string &name) -> std::string {
    return name == "fp16" ? "f16" : name == "bf16" ? "bf16" : "f32";
  };

  if (emit != Stage::Onnx) {
    PipelineOptions pipeline;
    pipeline.recognize = !noRecognize;
    pipeline.attentionRemarks = attentionRemarks;
    pipeline.tensorParallel = tensorParallel;
    if (int8) {
      QuantizeWeightsOptions quantize;
      quantize.groupSize = int8GroupSize;
      quantize.mlpExtraGrouping = int8MlpExtraGrouping;
      quantize.lmHead = !int8SkipLmHead;
      quantize.remarks = verbose;
      pipeline.int8 = quantize;
    }
    pipeline.kvCacheDtype = mlirDtype(cacheDtype);
    pipeline.activationDtype = mlirDtype(activations);
    pipeline.fuse = !noFuse;
    pipeline.stepProgram = serving;
    pipeline.fuseRemarks = fuseRemarks;
    pipeline.lowering.maxBatch = maxBatch;
    pipeline.lowering.maxSeqLen = maxSeqLen;
    pipeline.lowering.fitSeqLen = maxSeqLen.getNumOccurrences() == 0;
    std::optional<double> configuredEpsilon = configuredNormEpsilon(modelDirectory);
    pipeline.missingNormEpsilon = configuredEpsilon.value_or(0.0);

    RecognitionDeclines declines;
    if (failed(recognizeTransformers(*imported->module, imported->weights.get(), pipeline,
                                     &declines)))
      return EXIT_FAILURE;
    // The report describes recognition, so it is read before sharding and lowering.
    if (!noRecognize)
      printRecognitionReport(*imported->module, declines, llvm::errs());
    if (declines.normsWithoutEpsilon > 0) {
      llvm::errs() << "dsc: note: " << declines.normsWithoutEpsilon
                   << " norm(s) of the export have no epsilon (torch's dynamo exporter drops "
                      "an Add of 1e-8 or less): ";
      if (configuredEpsilon)
        llvm::errs() << "they use config.json's, " << llvm::format("%g", *configuredEpsilon)
                     << "\n";
      else
        llvm::errs() << "they use none, as the graph says, and a row of zeros gives NaN "
                        "(config.json beside the model would give its epsilon)\n";
    }
    if (failed(shardAndQuantize(*imported->module, pipeline)))
      return EXIT_FAILURE;
    // --emit=tfm shows the IR before lowering.
    if (emit != Stage::Tfm) {
      if (failed(lowerToPlan(*imported->module, pipeline)))
        return EXIT_FAILURE;
      if (auto fitted = (*imported->module)->getAttrOfType<IntegerAttr>("dsc.max_seq_len"))
        maxSeqLen = fitted.getInt();
    }
  }
  // --emit=cuda|ptx runs the whole compilation and prints the plan's kernels.
  if (emit == Stage::PlanFile || emit == Stage::Cuda || emit == Stage::Ptx) {
    ExportOptions options;
    options.arch = arch;
    if (emit == Stage::Cuda)
      options.emitKernels = "cuda";
    else if (emit == Stage::Ptx)
      options.emitKernels = "ptx";
    options.weightDtype = storedFloatDtype;
    options.int8 = int8;
    options.int8GroupSize = int8GroupSize;
    options.int8MlpExtraGrouping = int8MlpExtraGrouping;
    options.verbose = verbose;
    options.maxBatch = maxBatch;
    options.maxSeqLen = maxSeqLen;
    // HuggingFace exports are all called model.onnx; their folder names the model.
    options.modelName = llvm::sys::path::stem(files->model).str();
    if (options.modelName == "model" || !files->decoder.empty()) {
      llvm::StringRef folder = llvm::sys::path::parent_path(files->model);
      if (!folder.empty())
        options.modelName = llvm::sys::path::filename(folder).str();
    }
    options.modelDirectory = modelDirectory;
    options.producer = "dsc " DSC_VERSION;
    for (int i = 0; i < argc; ++i)
      options.commandLine += (i ? " " : "") + std::string(argv[i]);
    return failed(exportPlan(*imported->module, *imported->weights, options, output))
               ? EXIT_FAILURE
               : EXIT_SUCCESS;
  }

  std::string error;
  auto out = openOutputFile(output, &error);
  if (!out) {
    llvm::errs() << "dsc: error: " << error << "\n";
    return EXIT_FAILURE;
  }
  imported->module->print(out->os());
  out->os() << "\n";
  out->keep();
  return EXIT_SUCCESS;
}

} // namespace dsc
