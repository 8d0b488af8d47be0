#include "compiler/Driver.h"
#include "compiler/Pipeline.h"
#include "compiler/PublishedCodes.h"

#include "codegen/AttachKernels.h"
#include "compiler/Registration.h"
#include "compiler/lowering/ExportPlan.h"
#include "compiler/lowering/ModelInfo.h"
#include "compiler/recognize/RecognitionReport.h"
#include "dialects/tfm/IR/TfmDialect.h"
#include "frontends/onnx/OnnxImporter.h"
#include "tools/common/CommandLine.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

using namespace mlir;

namespace dsc {
namespace {

enum class Stage { Onnx, Tfm, Plan, Ptx, Cuda, PlanFile };

// The options' values, set by parseCommandLine through the tools' command-line layer
// (tools/common/CommandLine.h). They keep the names and calls of the llvm::cl options they
// replace (getValue, getNumOccurrences), so the driver below reads as it did.
// getNumOccurrences is set for the options the driver asks it of: --dtype and --max-seq-len.
struct StringOption : std::string {
  using std::string::operator=;
  explicit StringOption(const char *initial) : std::string(initial) {}
  const std::string &getValue() const { return *this; }
  unsigned getNumOccurrences() const { return given; }
  bool given = false;
};
template <class T> struct ValueOption {
  explicit ValueOption(T initial) : value(initial) {}
  ValueOption &operator=(T newValue) {
    value = newValue;
    return *this;
  }
  operator T() const { return value; }
  unsigned getNumOccurrences() const { return given; }
  T value;
  bool given = false;
};

std::vector<std::string> positional;
ValueOption<Stage> emit(Stage::PlanFile);
StringOption output("-");
StringOption weightDtype("fp32");
StringOption computeDtype("");
ValueOption<int64_t> int8GroupSize(0);
ValueOption<bool> int8MlpExtraGrouping(false);
ValueOption<bool> int8SkipLmHead(false);
ValueOption<bool> int4LmHead(false);
ValueOption<bool> int8WeightOnly(false);
StringOption kvCacheDtype("auto");
StringOption activationDtype("auto");
ValueOption<bool> verbose(false);
StringOption arch("sm_80,sm_90");
// Defaults follow the model: a few sequences at once, and as many tokens as its
// config.json gives positions, up to kDefaultMaxSeqLen (the KV cache and the arena grow with
// both; a 128k-position model gets 2048 unless asked for more). Without config.json, a
// learned position table the graph reads still bounds it (lowering's PositionTables.h).
constexpr int64_t kDefaultMaxBatch = 4;
constexpr int64_t kDefaultServingTokensPerStep = 256;
constexpr int64_t kDefaultMaxSeqLen = 2048;
// T5's relative positions have no table to bound them; it was trained on 512 tokens, which
// is also its tokenizer's model_max_length.
constexpr int64_t kDefaultEncoderDecoderSeqLen = 512;
ValueOption<int64_t> maxBatch(kDefaultMaxBatch);
ValueOption<int64_t> maxSeqLen(kDefaultMaxSeqLen);
ValueOption<onnx_frontend::ModelSyntax> syntax(onnx_frontend::ModelSyntax::Detect);
ValueOption<bool> noRecognize(false);
ValueOption<int64_t> tensorParallel(1);
// Expert parallelism: a mixture of experts' whole experts placed on the plan's ranks.
ValueOption<int64_t> expertParallel(0);
ValueOption<bool> serving(false);
// 0: the step program (if any) has max-batch rows.
ValueOption<int64_t> maxTokensPerStep(0);
ValueOption<bool> noFuse(false);
ValueOption<bool> fuseRemarks(false);
ValueOption<bool> attentionRemarks(false);

// dsc's command line in the tools' house style (docs/usage.md); exits on --help, --version
// and usage errors.
void parseCommandLine(int argc, char **argv) {
  dstools::CommandLine commandLine(
      "dsc",
      {"dsc compile MODEL -o PLAN [--dtype fp16] [--max-batch N] [OPTIONS]",
       "dsc compile MODEL -o PLAN --dtype int8 [--int8-group-size G] [OPTIONS]",
       "dsc MODEL --emit=onnx|tfm|plan [--no-recognize] [-o FILE]",
       "dsc MODEL --emit=cuda|ptx [--arch sm_80,sm_90] [-o FILE]"},
      "The ahead-of-time compiler for transformer inference. MODEL is a model.onnx, an "
      "optimum export's folder, or an encoder-decoder's two files (ENCODER DECODER); "
      "`compile` before it may be left out.");
  commandLine.version(dstools::versionLine("dsc") +
                      " (MLIR " LLVM_VERSION_STRING ", ONNX opsets 13-23)");
  commandLine.arguments("MODEL", positional,
                        "model.onnx | folder | encoder.onnx decoder.onnx");
  commandLine.text("-o,--output", output, "FILE", "output file ('-' for stdout; the default)");
  std::string emitName, syntaxName;
  commandLine.choice("--emit", emitName, {"onnx", "tfm", "plan", "ptx", "cuda"}, "STAGE",
                     "stop after a stage and print its result: onnx (the imported onnx "
                     "dialect), tfm (after transformer recognition), plan (the plan dialect), "
                     "ptx (the generated PTX) or cuda (the generated CUDA C++)");
  commandLine.text("--dtype", weightDtype, "DTYPE",
                   "how weights are stored in the plan: fp32, fp16, bf16, int8 or int4 (the "
                   "linear layers' weights quantized, the rest in --compute-dtype; int4 "
                   "keeps the LM head int8); default: the dtype most of the model's float "
                   "weights are stored in");
  commandLine.text("--kv-cache-dtype", kvCacheDtype, "DTYPE",
                   "the session's KV cache: auto (the default: the dtype the float weights "
                   "are stored in, fp16 for --dtype int8), fp32, fp16 or bf16");
  commandLine.text("--activation-dtype", activationDtype, "DTYPE",
                   "the session programs' activations between an attention or a gated MLP "
                   "and the linear layers that read them: auto (the default: the dtype the "
                   "float weights are stored in, fp16 for --dtype int8), fp32, fp16 or bf16");
  commandLine.integer("--max-batch", maxBatch.value, "N",
                      "largest batch the plan accepts (default 4)");
  commandLine.integer("--max-seq-len", maxSeqLen.value, "N",
                      "largest sequence (and total past + new) length the plan accepts "
                      "(default: the model's positions from config.json or its position "
                      "table, at most 2048)");
  commandLine.integer("--tp", tensorParallel.value, "N",
                      "tensor-parallel degree: shard the recognised layers over N ranks (one "
                      "weight section per rank)");
  commandLine.integer("--ep", expertParallel.value, "N",
                      "expert parallelism: place each mixture of experts' whole experts on N "
                      "ranks instead of splitting every expert (the other layers are "
                      "tensor-parallel over the same N ranks; --tp, if given, must be N)");
  commandLine.flag("--serving", serving.value,
                   "also derive the serving engine's step program: decode whose LM head reads "
                   "only the sampled rows (docs/serving.md); its rows, the tokens per step, "
                   "are --max-tokens-per-step");
  commandLine.integer("--max-tokens-per-step", maxTokensPerStep.value, "N",
                      "the serving engine's tokens per step (the rows of its step program), "
                      "apart from --max-batch, which bounds the static programs' batch; "
                      "implies --serving (default 256, or --max-batch if more)",
                      1, std::numeric_limits<int32_t>::max());
  commandLine.text("--arch", arch, "LIST",
                   "GPU architectures to generate kernels for (comma list; default "
                   "sm_80,sm_90), or none for a CPU-only plan");
  commandLine.choice("--input-syntax", syntaxName, {"auto", "binary", "text"}, "SYNTAX",
                     "how the model file is written: auto (the default: text for "
                     ".onnxtxt/.txt or text starting with '<' or '#', else binary), binary (a "
                     "protobuf ModelProto) or text (the ONNX text syntax)");
  commandLine.flag("--no-recognize", noRecognize.value,
                   "skip transformer recognition: every onnx op becomes a generic step");
  commandLine.flag("--no-fuse", noFuse.value,
                   "skip fusion: every activation, residual add and norm stays its own step");

  commandLine.group("Quantization (with --dtype int8 or int4)");
  commandLine.text("--compute-dtype", computeDtype, "DTYPE",
                   "how embeddings, norms, biases, scales and the LM head are stored: fp16 "
                   "(default), bf16 or fp32");
  commandLine.integer("--int8-group-size", int8GroupSize.value, "G",
                      "inputs per scale group along the input dimension (0, the default: one "
                      "scale per output channel for int8, 32 for int4)");
  commandLine.flag("--int8-mlp-extra-grouping", int8MlpExtraGrouping.value,
                   "halve the group size of the MLP's linear layers");
  commandLine.flag("--int8-skip-lm-head", int8SkipLmHead.value,
                   "keep the LM head in --compute-dtype");
  commandLine.flag("--int8-weight-only", int8WeightOnly.value,
                   "with --dtype int8: the CPU keeps the activations in f32 (exact) instead "
                   "of quantizing each row to int8 per block of 32 (docs/int8.md)");
  commandLine.flag("--int4-lm-head", int4LmHead.value,
                   "with --dtype int4: the LM head int4 too (default int8; docs/int4.md)");

  commandLine.group("Remarks");
  commandLine.flag("--verbose", verbose.value,
                   "say more: with --dtype int8, the quantization error per weight");
  commandLine.flag("--fuse-remarks", fuseRemarks.value,
                   "say why each fusion candidate was not fused");
  commandLine.flag("--attention-remarks", attentionRemarks.value,
                   "say why each softmax was not recognised as attention, and why no "
                   "prefill/decode programs were derived");
  commandLine.parse(argc, argv);

  if (!emitName.empty())
    emit = emitName == "onnx"   ? Stage::Onnx
           : emitName == "tfm"  ? Stage::Tfm
           : emitName == "plan" ? Stage::Plan
           : emitName == "ptx"  ? Stage::Ptx
                                : Stage::Cuda;
  if (!syntaxName.empty())
    syntax = syntaxName == "binary" ? onnx_frontend::ModelSyntax::Binary
             : syntaxName == "text" ? onnx_frontend::ModelSyntax::Text
                                    : onnx_frontend::ModelSyntax::Detect;
  weightDtype.given = commandLine.given("--dtype");
  maxSeqLen.given = commandLine.given("--max-seq-len");
  tensorParallel.given = commandLine.given("--tp");
  expertParallel.given = commandLine.given("--ep");
  maxTokensPerStep.given = commandLine.given("--max-tokens-per-step");
  arch.given = commandLine.given("--arch");
  if (maxTokensPerStep.given)
    serving = true;
}

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
// encoder_model.onnx with decoder_model_merged.onnx or decoder_model.onnx, or a decoder
// alone as older optimum wrote it: decoder_model_merged.onnx beside decoder_model.onnx and
// decoder_with_past_model.onnx), or `dsc compile encoder.onnx decoder.onnx`.
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
  // A decoder alone: the merged one holds both of the others (with and without a cache).
  for (const char *decoder : {"decoder_model_merged.onnx", "decoder_model.onnx"})
    if (isFile(inFolder(decoder))) {
      files.model = inFolder(decoder);
      return files;
    }
  std::vector<std::string> onnxFiles;
  std::error_code error;
  for (llvm::sys::fs::directory_iterator it(args[0], error), end; it != end && !error;
       it.increment(error))
    if (llvm::StringRef(it->path()).ends_with(".onnx") && isFile(it->path()))
      onnxFiles.push_back(it->path());
  std::sort(onnxFiles.begin(), onnxFiles.end());
  // The Hub's transformers.js layout (onnx-community/*): config and tokenizer at the top, the
  // exports in onnx/ (model.onnx and its quantized variants, which a file name picks).
  if (onnxFiles.empty() && llvm::sys::path::filename(args[0]) != "onnx" &&
      llvm::sys::fs::is_directory(inFolder("onnx")))
    return findModelFiles({inFolder("onnx")});
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
               << " .onnx files; expected model.onnx, decoder_model_merged.onnx (with "
                  "encoder_model.onnx or alone), or one encoder and one decoder (name the "
                  "files to compile)\n";
  return failure();
}

} // namespace

int runCompilerDriver(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  parseCommandLine(argc, argv);

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
      weightDtype != "int8" && weightDtype != "int4") {
    llvm::errs() << "dsc: error: --dtype must be fp32, fp16, bf16, int8 or int4, not '"
                 << weightDtype << "'\n";
    return EXIT_FAILURE;
  }
  // int4 (docs/int4.md) quantizes like int8, in 4 bits and in groups (32 by default, as
  // llama.cpp's Q4_0 and ONNX Runtime GenAI's builder); its LM head is int8.
  bool int4 = weightDtype == "int4";
  bool quantized = weightDtype == "int8" || int4;
  // Without --dtype a model quantized by its publisher is int4 (below, once it is read).
  auto refuseQuantizationOptions = [&] {
    if (quantized ||
        (computeDtype.empty() && int8GroupSize == 0 && !int8MlpExtraGrouping && !int8SkipLmHead &&
         !int8WeightOnly))
      return false;
    llvm::errs() << "dsc: error: --compute-dtype and the --int8-* options go with --dtype int8 "
                    "or int4 (";
    if (weightDtype.getNumOccurrences() == 0)
      llvm::errs() << "without --dtype, the plan is " << weightDtype
                   << ": the model has no quantized weights the plan keeps as they are)\n";
    else
      llvm::errs() << "--dtype " << weightDtype << " stores every weight as " << weightDtype
                   << ")\n";
    return true;
  };
  if (weightDtype.getNumOccurrences() != 0 && refuseQuantizationOptions())
    return EXIT_FAILURE;
  if (int4LmHead && !int4) {
    llvm::errs() << "dsc: error: --int4-lm-head goes with --dtype int4, not --dtype "
                 << weightDtype << "\n";
    return EXIT_FAILURE;
  }
  if (int8WeightOnly && int4) {
    llvm::errs() << "dsc: error: --int8-weight-only goes with --dtype int8: an int4 plan's "
                    "layers take int8 activations on the CPU unless DSRT_INT4_ACTIVATIONS=f32 "
                    "(docs/int4.md)\n";
    return EXIT_FAILURE;
  }
  if (int4LmHead && int8SkipLmHead) {
    llvm::errs() << "dsc: error: --int4-lm-head and --int8-skip-lm-head ask for two different "
                    "LM heads\n";
    return EXIT_FAILURE;
  }
  if (int4 && int8GroupSize != 0 && (int8GroupSize < 0 || int8GroupSize % 2 != 0)) {
    llvm::errs() << "dsc: error: --dtype int4 needs an even group size (--int8-group-size: 32, "
                    "64, 128), not "
                 << int8GroupSize << "\n";
    return EXIT_FAILURE;
  }
  int64_t groupSize = int4 && int8GroupSize == 0 ? 32 : int64_t(int8GroupSize);
  // Every float weight that is not quantized is stored in the compute dtype. Without
  // --dtype, the dtype the model was exported in (below, once its weights are read).
  // A quantized plan's float weights: --compute-dtype, fp16 by default.
  auto quantizedFloatDtype = [&](std::string &dtype) {
    dtype = computeDtype.empty() ? "fp16" : computeDtype.getValue();
    if (dtype == "fp32" || dtype == "fp16" || dtype == "bf16")
      return true;
    llvm::errs() << "dsc: error: --compute-dtype must be fp16, bf16 or fp32, not '" << dtype
                 << "'\n";
    return false;
  };
  std::string storedFloatDtype = weightDtype.getValue();
  if (quantized && !quantizedFloatDtype(storedFloatDtype))
    return EXIT_FAILURE;
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
  if (quantized && noRecognize) {
    llvm::errs() << "dsc: error: --dtype " << weightDtype
                 << " quantizes recognised linear layers; it cannot be combined with "
                    "--no-recognize\n";
    return EXIT_FAILURE;
  }
  if (tensorParallel < 1) {
    llvm::errs() << "dsc: error: --tp must be at least 1, not " << tensorParallel << "\n";
    return EXIT_FAILURE;
  }
  if (expertParallel.given) {
    if (expertParallel < 1) {
      llvm::errs() << "dsc: error: --ep must be at least 1, not " << expertParallel << "\n";
      return EXIT_FAILURE;
    }
    if (tensorParallel.given && tensorParallel != expertParallel) {
      llvm::errs() << "dsc: error: --ep " << expertParallel << " places experts on the plan's "
                   << "ranks, which --tp makes " << tensorParallel
                   << ": give the same N to both, or --ep alone\n";
      return EXIT_FAILURE;
    }
    tensorParallel = expertParallel.value;
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
  // config.json, the tokenizer and the chat template: beside the model, or (the Hub's
  // transformers.js layout) in the folder above its onnx/ folder.
  if (llvm::sys::path::filename(modelDirectory) == "onnx") {
    auto holds = [](llvm::StringRef folder, const char *name) {
      llvm::SmallString<256> path(folder);
      llvm::sys::path::append(path, name);
      return isFile(path.str().str());
    };
    std::string above = llvm::sys::path::parent_path(modelDirectory).str();
    if (above.empty())
      above = ".";
    if (!holds(modelDirectory, "config.json") && !holds(modelDirectory, "tokenizer.json") &&
        (holds(above, "config.json") || holds(above, "tokenizer.json")))
      modelDirectory = above;
  }
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
  // A model its publisher quantized to 4 bits (ONNX Runtime's MatMulNBits: docs/ortgenai.md)
  // stays int4 at its own block size, so that its codes are kept as they are; its LM head
  // too when that is 4-bit (below, once recognition has found it).
  bool headBitsFromModel = false;
  if (weightDtype.getNumOccurrences() == 0 && !noRecognize && emit != Stage::Onnx) {
    const PublishedCodes published = publishedCodes(*imported->weights, tensorParallel, llvm::errs());
    if (published.bits != 0) {
      int4 = published.bits == 4;
      quantized = headBitsFromModel = true;
      weightDtype = int4 ? "int4" : "int8";
      if (int8GroupSize == 0)
        groupSize = published.groupSize;
      if (!quantizedFloatDtype(storedFloatDtype))
        return EXIT_FAILURE;
    }
  }
  if (refuseQuantizationOptions())
    return EXIT_FAILURE;
  if (!quantized && weightDtype.getNumOccurrences() == 0) {
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
    pipeline.expertParallel = expertParallel > 1;
    if (quantized) {
      QuantizeWeightsOptions quantize;
      quantize.bits = int4 ? 4 : 8;
      quantize.lmHeadBits = int4LmHead ? 4 : 8;
      quantize.defaultGroupSize = int4 && int8GroupSize == 0;
      quantize.groupSize = groupSize;
      quantize.mlpExtraGrouping = int8MlpExtraGrouping;
      quantize.lmHead = !int8SkipLmHead;
      quantize.int8Activations = !int8WeightOnly;
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
    pipeline.lowering.maxTokensPerStep = maxTokensPerStep;
    pipeline.lowering.fitSeqLen = maxSeqLen.getNumOccurrences() == 0;
    pipeline.kernelArchs = arch;
    pipeline.storedWeightDtype = storedFloatDtype;
    std::optional<double> configuredEpsilon = configuredNormEpsilon(modelDirectory);
    pipeline.missingNormEpsilon = configuredEpsilon.value_or(0.0);

    RecognitionDeclines declines;
    if (failed(recognizeTransformers(*imported->module, imported->weights.get(), pipeline,
                                     &declines)))
      return EXIT_FAILURE;
    const bool hasStepProgram = imported->module->lookupSymbol<func::FuncOp>("step") != nullptr;
    // The serving engine's steps default to a chunk of prompt as large as vLLM's and
    // llama.cpp's CPU defaults take per step: a step of max_batch rows (4) fed a long prompt
    // a few tokens a step, which made time to first token several times llama-server's.
    if (hasStepProgram && !maxTokensPerStep.given) {
      maxTokensPerStep = std::max<int64_t>(maxBatch, kDefaultServingTokensPerStep);
      pipeline.lowering.maxTokensPerStep = maxTokensPerStep;
    }
    if (maxTokensPerStep.given && !hasStepProgram) {
      llvm::errs() << "dsc: error: --max-tokens-per-step bounds the serving engine's step "
                      "program, which only a decoder whose every attention is recognised "
                      "has (it is derived from the decode program); this model has none\n";
      return EXIT_FAILURE;
    }
    // Said here, not when the engine refuses the plan: the cause is the model's, and
    // the plan still runs its forward program.
    const bool encoderDecoder = imported->module->lookupSymbol<func::FuncOp>("encode") != nullptr;
    if (serving && encoderDecoder)
      llvm::errs() << "dsc: warning: --serving: the serving engine serves decoders; an "
                      "encoder-decoder's plan generates in static batches (dsrt_generate, "
                      "dsrun --prompt, dsrt.Session(plan).generate)\n";
    else if (serving && !hasStepProgram)
      llvm::errs() << "dsc: warning: --serving: the plan has no step program, so the serving "
                      "engine cannot run it: the step program is derived from a decoder's "
                      "decode program, which only a decoder whose every attention is "
                      "recognised has (--attention-remarks says why one was not)\n";
    if (headBitsFromModel && pipeline.int8)
      sortPublishedWeights(*imported->module, *imported->weights, groupSize, *pipeline.int8);
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
      if (failed(lowerToPlan(*imported->module, pipeline, imported->weights.get())))
        return EXIT_FAILURE;
      if (auto fitted = (*imported->module)->getAttrOfType<IntegerAttr>("dsc.max_seq_len"))
        maxSeqLen = fitted.getInt();
    }
  }
  // --emit=cuda|ptx runs the whole compilation and prints the plan's kernels.
  if (emit == Stage::PlanFile || emit == Stage::Cuda || emit == Stage::Ptx) {
    ExportOptions options;
    if (emit == Stage::Cuda)
      options.emitKernels = "cuda";
    else if (emit == Stage::Ptx)
      options.emitKernels = "ptx";
    options.weightDtype = storedFloatDtype;
    options.int8 = quantized;
    options.weightBits = int4 ? 4 : 8;
    options.int8GroupSize = groupSize;
    options.int8MlpExtraGrouping = int8MlpExtraGrouping;
    options.verbose = verbose;
    options.maxBatch = maxBatch;
    options.maxSeqLen = maxSeqLen;
    options.maxTokensPerStep = maxTokensPerStep;
    // HuggingFace exports are all called model.onnx; their folder names the model.
    options.modelName = llvm::sys::path::stem(files->model).str();
    if (options.modelName == "model" || llvm::StringRef(options.modelName).starts_with("model_") ||
        options.modelName == "decoder_model_merged" || options.modelName == "decoder_model" ||
        !files->decoder.empty()) {
      // The folder the metadata came from: the model's, or the one above its onnx/.
      llvm::StringRef folder = modelDirectory;
      if (modelDirectory == ".")
        folder = llvm::sys::path::parent_path(files->model);
      if (!folder.empty() && folder != ".")
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
