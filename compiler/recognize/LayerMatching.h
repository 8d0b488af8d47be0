// Shared by the files of dsc-recognize-layers (RecognizeLayers.cpp and the pattern files):
// the probes' shapes and the types they prove, the matching helpers, and the pattern base
// that records why a pattern declines an op for the report.
#ifndef DSC_COMPILER_RECOGNIZE_LAYERMATCHING_H
#define DSC_COMPILER_RECOGNIZE_LAYERMATCHING_H

#include "compiler/lowering/SymbolicDims.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <optional>
#include <string>

namespace dsc::layers {

using mlir::Operation;
using mlir::Value;

//===----------------------------------------------------------------------===//
// Shapes at probes, and the types they prove (LayerProbes.cpp).
//===----------------------------------------------------------------------===//

using ProbeShapes =
    llvm::DenseMap<Value, llvm::SmallVector<llvm::SmallVector<int64_t>, 6>>;
// Values seen at a probe with more than one new token, and at one with cached tokens: for
// a value seen only at the others, a dimension of 1 may be the new tokens and one of 0 the
// cached ones.
struct ProbeCoverage {
  llvm::DenseSet<Value> multiToken, withPast;
};

// Shapes of every value at each probe the function runs at (a probe it cannot run at, or a
// value whose shape depends on input values, contributes nothing).
ProbeShapes probeShapes(mlir::func::FuncOp func, ProbeCoverage &coverage);
// Refines the result types of the onnx ops (If branches included) to what the probes prove.
void refineTypes(mlir::func::FuncOp func, const ProbeShapes &shapes,
                 const ProbeCoverage &coverage);
void syncFunctionType(mlir::func::FuncOp func);

//===----------------------------------------------------------------------===//
// Matching helpers (LayerMatching.cpp).
//===----------------------------------------------------------------------===//

template <typename OpTy> OpTy defining(Value value) {
  return value ? value.getDefiningOp<OpTy>() : OpTy();
}
// A one-element constant (any rank), as a double.
std::optional<double> scalarConstant(Value value);
bool near(std::optional<double> value, double expected, double tolerance = 1e-6);
mlir::RankedTensorType rankedFloat(Value value);
// A float-to-float Cast (the fp32 round trips exporters put around norms) looked through.
Value throughCast(Value value);
// The users of `value`, which must all be in `group`.
bool usedOnlyBy(Value value, const llvm::SmallPtrSetImpl<Operation *> &group);
// Axes of a Reduce op (operand or default), normalised against `rank`.
std::optional<llvm::SmallVector<int64_t>> reduceAxes(Value axes, int64_t rank);
// A ReduceMean over the last dimension only, keeping it.
bool isLastAxisMean(onnx::ReduceMeanOp mean);
// The other operand of a binary op, when one of them is `value`.
Value otherOperand(Operation *op, Value value);
Operation *singleUser(Value value);
// A weight as a tfm.weight (optionally transposed [in, out] -> [out, in]), created next to
// the onnx weight (and reused when it already exists).
Value tfmWeight(mlir::PatternRewriter &rewriter, onnx::WeightOp weight, bool transpose);
// A 1-D weight of `size` elements (a norm's scale or bias, a linear bias).
onnx::WeightOp vectorWeight(Value value, int64_t size);
bool isScalarConstant(Value value);
// The value is a graph output, possibly through a float Cast (GPT-J's logits) or a
// monotonic cap, cap * tanh(x / cap) (Gemma-2's final_logit_softcapping).
bool returnsValue(Value value);
// A float elementwise op (Add, Sub, Mul, Div, Pow, Neg, Sqrt, Erf, Tanh, Sigmoid, float Casts).
bool isElementwise(Operation *op);
// The elements of a small integer value that constants and static dimensions decide
// (TorchScript's chunk: Slice bounds from Gather(Shape(x), -1) / 2), computed with the
// runtime's kernels; none when anything it reads is unknown.
std::optional<llvm::SmallVector<int64_t>> staticIntegers(Value value);

//===----------------------------------------------------------------------===//
// Base: patterns record why they decline an op, for the report.
//===----------------------------------------------------------------------===//

using DeclineLog = llvm::DenseMap<Operation *, std::string>;

template <typename OpTy> struct RecognitionPattern : mlir::OpRewritePattern<OpTy> {
  RecognitionPattern(mlir::MLIRContext *context, DeclineLog &log)
      : mlir::OpRewritePattern<OpTy>(context), log(log) {}

  mlir::LogicalResult decline(mlir::PatternRewriter &rewriter, Operation *op,
                              const llvm::Twine &reason) const {
    std::string text = reason.str();
    log[op] = text;
    return rewriter.notifyMatchFailure(op, text);
  }
  void recognised(Operation *op) const { log.erase(op); }

  DeclineLog &log;
};

//===----------------------------------------------------------------------===//
// The patterns, one file each kind.
//===----------------------------------------------------------------------===//

// The Gemms between two reshapes that the probes show to restore the flattened input's
// leading dimensions (GPT-2's Conv1D), each with its two reshapes. Found before any pattern
// rewrites: the probes' shapes are keyed by the values as imported, and a value that a
// pattern creates later has none, or, at an address an erased value had, that value's (so
// that the outcome would depend on where the allocator put it).
using LiftableGemms = llvm::DenseMap<Operation *, std::pair<Operation *, Operation *>>;
LiftableGemms liftableGemms(mlir::func::FuncOp func, const ProbeShapes &shapes);
// Gather on a 2-D weight -> tfm.embedding; MatMul/Gemm on a weight (GPT-2's Conv1D
// included) -> tfm.linear or tfm.lm_head (LinearPatterns.cpp).
void populateLinearPatterns(mlir::RewritePatternSet &patterns, DeclineLog &log,
                            const LiftableGemms &liftable);
// LayerNormalization and the decomposed layer and RMS norms (NormPatterns.cpp).
// `missingEpsilon`: the epsilon of a decomposed norm whose export has none (RecognizeLayers'
// missing-norm-epsilon); `withoutEpsilon` counts the norms that took it.
void populateNormPatterns(mlir::RewritePatternSet &patterns, DeclineLog &log,
                          double missingEpsilon, int &withoutEpsilon);
// Activations (the elementwise subgraph around Erf/Tanh/Sigmoid, Relu, Gelu) and gated
// activations (ActivationPatterns.cpp).
void populateActivationPatterns(mlir::RewritePatternSet &patterns, DeclineLog &log);
// Residual adds (ResidualPatterns.cpp).
void populateResidualPatterns(mlir::RewritePatternSet &patterns);

} // namespace dsc::layers

#endif
