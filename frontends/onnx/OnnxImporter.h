// Imports an ONNX model (binary protobuf or the ONNX text syntax, with external data) into
// the onnx dialect: one func.func @main whose arguments and results are the graph's inputs
// and outputs, named and with their symbolic dimensions as argument/result attributes.
#ifndef DSC_FRONTENDS_ONNX_ONNXIMPORTER_H
#define DSC_FRONTENDS_ONNX_ONNXIMPORTER_H

#include "frontends/onnx/WeightStore.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"

#include <memory>

namespace dsc::onnx_frontend {

struct ImportedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::shared_ptr<WeightStore> weights;
};

enum class ModelSyntax { Detect, Binary, Text };

// Errors are reported through the context's diagnostic engine, located at the model file
// (and the node, where there is one); the result is then a failure.
mlir::FailureOr<ImportedModel> importModelFile(mlir::MLIRContext &context,
                                               llvm::StringRef path,
                                               ModelSyntax syntax = ModelSyntax::Detect);

// `modelPath` names the model in messages; external data is looked up beside it.
mlir::FailureOr<ImportedModel> importModelBuffer(mlir::MLIRContext &context,
                                                 llvm::StringRef bytes,
                                                 llvm::StringRef modelPath,
                                                 ModelSyntax syntax = ModelSyntax::Detect);

// An encoder-decoder (T5, BART) exported as two models: optimum's encoder_model.onnx and
// decoder_model_merged.onnx, or a user's torch.onnx.export of each. Which is which follows
// from their inputs, not their names: the decoder takes the encoder's hidden states (a
// floating-point [batch, sequence, hidden] input). The encoder becomes func.func @encode and
// the decoder @main, in one module; their initializers are kept apart under the prefixes
// "encoder/" and "decoder/" (exporters reuse names across the two files).
mlir::FailureOr<ImportedModel> importEncoderDecoder(mlir::MLIRContext &context,
                                                   llvm::StringRef firstPath,
                                                   llvm::StringRef secondPath,
                                                   ModelSyntax syntax = ModelSyntax::Detect);

// Loads the dialects the imported IR uses.
void loadImportDialects(mlir::MLIRContext &context);

} // namespace dsc::onnx_frontend

#endif
