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
// linear layer; the report leaves these to the attention's line.
inline constexpr const char *kProductOfActivations =
    "a product of two activations, not of a weight";

// The Tanh of cap * tanh(logits / cap) after the LM head: part of the head, not generic.
inline constexpr const char *kLogitCap = "the cap of the LM head's logits";

struct RecognitionDeclines {
  struct Entry {
    std::string op;      // "MatMul"
    std::string reason;  // "the right operand is not a weight"
    // The op itself, compared (never dereferenced) with the ops left after recognition:
    // the attention, which runs after the layers, absorbs ops they declined.
    const void *where = nullptr;
  };
  std::vector<Entry> generic;
  // Decomposed norms whose export has no epsilon (their variance goes straight into Sqrt).
  int normsWithoutEpsilon = 0;
};

// dsc-recognize-layers, recording what it declines into `declines` (may be null), with
// its missing-norm-epsilon option.
std::unique_ptr<mlir::Pass> createRecognizeLayersWithReport(RecognitionDeclines *declines,
                                                           double missingNormEpsilon = 0.0);

// dsc-recognize-moe, recording the expert sums it declines into `declines` (may be null).
std::unique_ptr<mlir::Pass> createRecognizeMoeWithReport(RecognitionDeclines *declines);

// "dsc: recognised 2/2 blocks: attention, mlp, 2 norms; embedding, final norm, lm head",
// then one line per reason something stayed generic. Reads @main after recognition.
void printRecognitionReport(mlir::ModuleOp module, const RecognitionDeclines &declines,
                            llvm::raw_ostream &os);

} // namespace dsc

#endif
