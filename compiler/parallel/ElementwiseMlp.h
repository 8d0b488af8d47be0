// MLPs whose activation stayed a graph of elementwise onnx ops (Apertus's xIELU, which no
// tfm.activation kind names): linear -> elementwise ops of its output and scalar constants
// only -> linear. Column- then row-parallel, each rank computes the same function of its
// features, as for a recognised activation.
#ifndef DSC_COMPILER_PARALLEL_ELEMENTWISEMLP_H
#define DSC_COMPILER_PARALLEL_ELEMENTWISEMLP_H

#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/SmallVector.h"

#include <vector>

namespace dsc::parallel {

struct ElementwiseMlp {
  tfm::LinearOp up, down;
  // The ops between them, in program order; every result has the up projection's
  // features as its last dimension.
  llvm::SmallVector<mlir::Operation *> ops;
};

// Every such MLP of `func` whose projections are replicated and not quantized.
std::vector<ElementwiseMlp> findElementwiseMlps(mlir::func::FuncOp func);

} // namespace dsc::parallel

#endif
