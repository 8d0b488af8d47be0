// Parses a model (binary protobuf or ONNX text syntax) and runs the graph import.
#include "frontends/onnx/OnnxImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "frontends/onnx/GraphImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "onnx/defs/parser.h"

#include <google/protobuf/io/coded_stream.h>

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <climits>

using namespace mlir;

namespace dsc::onnx_frontend {
namespace {

bool looksLikeText(llvm::StringRef path, llvm::StringRef bytes) {
  if (path.ends_with(".onnxtxt") || path.ends_with(".txt"))
    return true;
  llvm::StringRef start = bytes.ltrim();
  return start.starts_with("<") || start.starts_with("#");
}

FailureOr<std::unique_ptr<ModelProto>> parseModel(llvm::StringRef bytes, bool text,
                                                  Location loc) {
  auto model = std::make_unique<ModelProto>();
  if (text) {
    std::string source = bytes.str();
    try {
      ::onnx::OnnxParser parser(source.c_str());
      auto status = parser.Parse(*model);
      if (!status.IsOK())
        return emitError(loc) << "ONNX text syntax error: " << status.ErrorMessage();
      if (!parser.EndOfInput())
        return emitError(loc) << "ONNX text syntax error: unexpected text after the model";
    } catch (const std::exception &e) {
      return emitError(loc) << "ONNX text syntax error: " << e.what();
    }
    return model;
  }
  if (bytes.size() > INT_MAX)
    return emitError(loc) << "the model file is larger than 2 GiB; store its weights as "
                             "external data";
  google::protobuf::io::CodedInputStream stream(
      reinterpret_cast<const uint8_t *>(bytes.data()), static_cast<int>(bytes.size()));
  stream.SetTotalBytesLimit(INT_MAX);
  if (!model->ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage())
    return emitError(loc) << "not a valid ONNX model: the protobuf cannot be parsed";
  if (!model->has_graph())
    return emitError(loc) << "not a valid ONNX model: it has no graph";
  return model;
}

} // namespace

void loadImportDialects(MLIRContext &context) {
  context.loadDialect<onnx::OnnxDialect, func::FuncDialect>();
}

FailureOr<ImportedModel> importModelBuffer(MLIRContext &context, llvm::StringRef bytes,
                                           llvm::StringRef modelPath, ModelSyntax syntax) {
  loadImportDialects(context);
  Location fileLoc = FileLineColLoc::get(&context, modelPath, 0, 0);
  bool text = syntax == ModelSyntax::Text ||
              (syntax == ModelSyntax::Detect && looksLikeText(modelPath, bytes));
  auto model = parseModel(bytes, text, fileLoc);
  if (failed(model))
    return failure();

  llvm::SmallString<256> directory(modelPath);
  llvm::sys::path::remove_filename(directory);
  if (directory.empty())
    directory = ".";
  ImportedModel imported;
  imported.weights = std::make_shared<WeightStore>(std::string(directory));
  const ModelProto &proto = **model;
  imported.weights->adoptModel(std::move(*model));
  imported.module = ModuleOp::create(fileLoc);
  GraphImporter importer(context, modelPath, *imported.weights);
  if (failed(importer.importModel(proto, *imported.module)))
    return failure();
  return imported;
}

FailureOr<ImportedModel> importModelFile(MLIRContext &context, llvm::StringRef path,
                                         ModelSyntax syntax) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return emitError(FileLineColLoc::get(&context, path, 0, 0))
           << "cannot read the model: " << buffer.getError().message();
  return importModelBuffer(context, (*buffer)->getBuffer(), path, syntax);
}

} // namespace dsc::onnx_frontend
