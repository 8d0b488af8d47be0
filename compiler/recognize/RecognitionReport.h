// What recognition made of a model, for `dsc`'s one-line report: the transformer blocks
// (delimited by the residual stream), what each holds, and which onnx ops stayed generic
// with the reason the pattern that looked at them gave.
#ifndef DSC_COMPILER_RECOGNIZE_RECOGNITIONREPORT_H
#define DSC_COMPILER_RECOGNIZE_RECOGNITIONREPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

namespace dsc {

// Filled by dsc-recognize-layers: the ops a pattern declined that are still onnx ops after
// recognition, with the pattern's reason.
// The reason a batched MatMul of two activations (attention's scores and context) is no
// linear layer; the report leaves these to the attention, which runs after the layers.
inline constexpr const char *kProductOfActivations =
    "a product of two activations, not of a weight";

struct RecognitionDeclines {
  struct Entry {
    std::string op;      // "MatMul"
    std::string reason;  // "the right operand is not a weight"
  };
  std::vector<Entry> generic;
};

// dsc-recognize-layers, recording what it declines into `declines` (may be null).
std::unique_ptr<mlir::Pass> createRecognizeLayersWithReport(RecognitionDeclines *declines);

// "dsc: recognised 2/2 blocks: attention, mlp, 2 norms; embedding, final norm, lm head",
// then one line per reason something stayed generic. Reads @main after recognition.
void printRecognitionReport(mlir::ModuleOp module, const RecognitionDeclines &declines,
                            llvm::raw_ostream &os);

} // namespace dsc

#endif
