#include "compiler/Driver.h"

#include "compiler/Registration.h"
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace mlir;

namespace dsc {
namespace {

enum class Stage { Onnx, Tfm, Plan, Ptx, Cuda, PlanFile };

llvm::cl::OptionCategory category("dsc options");

llvm::cl::list<std::string> positional(llvm::cl::Positional, llvm::cl::desc("[compile] <model.onnx>"),
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
llvm::cl::opt<onnx_frontend::ModelSyntax> syntax(
    "input-syntax", llvm::cl::desc("How the model file is written"),
    llvm::cl::init(onnx_frontend::ModelSyntax::Detect),
    llvm::cl::values(
        clEnumValN(onnx_frontend::ModelSyntax::Detect, "auto",
                   "text for .onnxtxt/.txt or text starting with '<' or '#', else binary"),
        clEnumValN(onnx_frontend::ModelSyntax::Binary, "binary", "protobuf ModelProto"),
        clEnumValN(onnx_frontend::ModelSyntax::Text, "text", "the ONNX text syntax")),
    llvm::cl::cat(category));

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

void printVersion(llvm::raw_ostream &os) {
  os << "dsc " DSC_VERSION " (MLIR " LLVM_VERSION_STRING ", ONNX opsets 13-20)\n";
}

} // namespace

int runCompilerDriver(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  llvm::cl::HideUnrelatedOptions(category);
  llvm::cl::SetVersionPrinter(printVersion);
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "dsc: ahead-of-time compiler for transformer inference\n\n"
      "  dsc [compile] model.onnx --emit=onnx [-o out.mlir]\n");

  std::vector<std::string> args(positional.begin(), positional.end());
  if (!args.empty() && args.front() == "compile")
    args.erase(args.begin());
  if (args.size() != 1) {
    llvm::errs() << "dsc: error: expected exactly one model file (see --help)\n";
    return EXIT_FAILURE;
  }
  if (emit != Stage::Onnx) {
    llvm::errs() << "dsc: error: this build stops after import; only --emit=onnx is "
                    "available (recognition, plans and kernels are not implemented yet)\n";
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

  auto imported = onnx_frontend::importModelFile(context, args.front(), syntax);
  if (failed(imported))
    return EXIT_FAILURE;

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
