// Parses a model (binary protobuf or ONNX text syntax) and runs the graph import.
#include "frontends/onnx/OnnxImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "frontends/onnx/GraphImporter.h"
#include "frontends/onnx/ImportAttrs.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "onnx/defs/parser.h"

#include <google/protobuf/io/coded_stream.h>

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"

#include <climits>
#include <tuple>

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

namespace {

struct ParsedFile {
  std::string path;
  std::unique_ptr<ModelProto> model;
  bool takesHiddenStates = false;
};

FailureOr<ParsedFile> parseModelFile(MLIRContext &context, llvm::StringRef path,
                                     ModelSyntax syntax) {
  Location fileLoc = FileLineColLoc::get(&context, path, 0, 0);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return emitError(fileLoc) << "cannot read the model: " << buffer.getError().message();
  bool text = syntax == ModelSyntax::Text ||
              (syntax == ModelSyntax::Detect && looksLikeText(path, (*buffer)->getBuffer()));
  auto model = parseModel((*buffer)->getBuffer(), text, fileLoc);
  if (failed(model))
    return failure();
  ParsedFile parsed;
  parsed.path = path.str();
  parsed.model = std::move(*model);
  llvm::StringSet<> initializers;
  for (const auto &tensor : parsed.model->graph().initializer())
    initializers.insert(tensor.name());
  for (const auto &input : parsed.model->graph().input()) {
    if (initializers.contains(input.name()) || !input.type().has_tensor_type())
      continue;
    const auto &tensor = input.type().tensor_type();
    int32_t type = tensor.elem_type();
    bool floating = type == TensorProto::FLOAT || type == TensorProto::FLOAT16 ||
                    type == TensorProto::BFLOAT16 || type == TensorProto::DOUBLE;
    parsed.takesHiddenStates |= floating && tensor.has_shape() && tensor.shape().dim_size() == 3;
  }
  return parsed;
}

} // namespace

FailureOr<ImportedModel> importEncoderDecoder(MLIRContext &context, llvm::StringRef firstPath,
                                              llvm::StringRef secondPath, ModelSyntax syntax) {
  loadImportDialects(context);
  FailureOr<ParsedFile> first = parseModelFile(context, firstPath, syntax);
  if (failed(first))
    return failure();
  FailureOr<ParsedFile> second = parseModelFile(context, secondPath, syntax);
  if (failed(second))
    return failure();
  if (first->takesHiddenStates == second->takesHiddenStates)
    return emitError(FileLineColLoc::get(&context, secondPath, 0, 0))
           << "cannot tell the encoder from the decoder: "
           << (first->takesHiddenStates ? "both" : "neither") << " of " << firstPath << " and "
           << secondPath
           << " take a floating-point [batch, sequence, hidden] input (the decoder takes the "
              "encoder's hidden states, the encoder only token ids and a mask)";
  ParsedFile &encoder = first->takesHiddenStates ? *second : *first;
  ParsedFile &decoder = first->takesHiddenStates ? *first : *second;

  ImportedModel imported;
  imported.module = ModuleOp::create(FileLineColLoc::get(&context, decoder.path, 0, 0));
  for (auto [file, function, prefix] :
       {std::tuple<ParsedFile *, const char *, const char *>{&encoder, "encode", "encoder/"},
        {&decoder, "main", "decoder/"}}) {
    llvm::SmallString<256> directory(file->path);
    llvm::sys::path::remove_filename(directory);
    if (directory.empty())
      directory = ".";
    if (!imported.weights)
      imported.weights = std::make_shared<WeightStore>(std::string(directory));
    imported.weights->setModelDirectory(std::string(directory));
    const ModelProto &proto = *file->model;
    imported.weights->adoptModel(std::move(file->model));
    GraphImporter importer(context, file->path, *imported.weights, prefix);
    if (failed(importer.importModel(proto, *imported.module, function)))
      return failure();
  }
  // What made it the decoder, for the passes that size its inputs: its encoder output's
  // length is the encoder's, not its own tokens'.
  auto decoderFunc = (*imported.module).lookupSymbol<func::FuncOp>("main");
  for (BlockArgument argument : decoderFunc.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(argument.getType());
    if (type && type.getRank() == 3 && isa<FloatType>(type.getElementType()))
      decoderFunc.setArgAttr(argument.getArgNumber(), kCrossStatesAttr,
                             UnitAttr::get(&context));
  }
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
