#ifndef DSC_COMPILER_RECOGNIZE_PASSES_TD
#define DSC_COMPILER_RECOGNIZE_PASSES_TD

include "mlir/Pass/PassBase.td"

// Recognition (DESIGN.md §3.3): onnx subgraphs of the HuggingFace exports become tfm ops.
// What no pattern claims stays in the onnx dialect for the generic path.

def RecognizeLayers : Pass<"dsc-recognize-layers", "mlir::ModuleOp"> {
  let summary = "Recognise embeddings, norms, linear layers, activations, residual adds and "
                "the LM head";
  let dependentDialects = ["dsc::onnx::OnnxDialect", "dsc::tfm::TfmDialect"];
}

def RecognizeAttention : Pass<"dsc-recognize-attention", "mlir::ModuleOp"> {
  let summary = "Recognise attention (masks, ALiBi, windows, rotary, GQA, past/present KV)";
  let dependentDialects = ["dsc::onnx::OnnxDialect", "dsc::tfm::TfmDialect"];
}

#endif
