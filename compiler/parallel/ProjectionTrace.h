// Where an attention's Q, K and V come from (compiler/parallel): the projection each
// operand reads, through the export's reshapes, splits, slices and gathers, and for one part
// of a fused projection (GPT-2's [q|k|v] columns, BLOOM's and GPT-NeoX's per-head [q, k, v]
// rows) the weight rows that part takes. tp-shard makes each part column-parallel from it;
// dsc-unpack-qkv makes each part a projection of its own.
#ifndef DSC_COMPILER_PARALLEL_PROJECTIONTRACE_H
#define DSC_COMPILER_PARALLEL_PROJECTIONTRACE_H

#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/IR/Value.h"
#include "mlir/Support/LLVM.h"

#include "llvm/ADT/SmallVector.h"

#include <string>

namespace dsc::parallel {

// Where a Q, K or V operand comes from: a projection, or one part of a fused one.
struct Projection {
  tfm::LinearOp linear;
  llvm::SmallVector<mlir::Attribute> select;  // transforms selecting this part of a fused weight
  bool fused = false;
  // An unfused projection reached through scalar arithmetic (OPT scales its query):
  // those ops stay, with the shard's type.
  llvm::SmallVector<mlir::Operation *> scalarOps;
  // An unfused projection reached through reshapes and a per-head norm (Qwen3's q/k
  // norm): those ops stay, retyped for the rank's heads.
  llvm::SmallVector<mlir::Operation *> headOps;
  // An RMS norm over every head of an unfused projection's part, straight after it
  // (OLMo-2's q_norm and k_norm over [heads * head_dim]): its statistic spans the ranks.
  mlir::Operation *globalNorm = nullptr;
  // A fused projection's part that the export normalises per head (Persimmon's q/k layer
  // norm over head_dim): the part's own projection is normalised the same way.
  mlir::Operation *headNorm = nullptr;
  // Keys or values read from a graph input that holds every KV head (a cross-attention's
  // cache in optimum's merged decoder): not sharded; each rank reads its own heads.
  bool allHeads = false;
  // The values read the keys' projection (Gemma-4's attention_k_eq_v layers): sharding the
  // keys shards it; only the value's own ops after the shared ones are retyped.
  bool sharesKeyProjection = false;
};

// A constant of one element (a scale, a bound): the same on every rank.
bool isScalarConstant(mlir::Value value);

// Where `operand`, part `part` (0 query, 1 key, 2 value) of `attention`, comes from, in
// `out`; empty, or why it cannot be said.
std::string traceProjection(mlir::Value operand, tfm::AttentionOp attention, int part,
                            Projection &out);

// The keys' and the values' projections, as traceProjection says them, where the two may
// also share one unfused projection and the views of it before their paths part (the
// values then have sharesKeyProjection).
std::string traceKeysAndValues(mlir::Value keys, mlir::Value values,
                               tfm::AttentionOp attention, Projection &keyOut,
                               Projection &valueOut);

// A tfm.weight: `weight`'s transforms followed by `extra`; failure when `weight` is not one.
mlir::FailureOr<mlir::Value> transformedWeight(mlir::Value weight,
                                               mlir::ArrayRef<mlir::Attribute> extra);

// `type` with the rank's heads where it had `heads` heads: [.., heads * d] or a per-head
// view [.., heads, d] / [b, heads, s, d]. Other types are kept.
mlir::Type withLocalHeads(mlir::Type type, int64_t heads, int64_t local, int64_t headDim);

// `part`, [.., heads * head_dim] (a fused projection's part, taken apart), normalised per
// head as `headNorm` normalises the export's view of it: viewed [.., heads, head_dim],
// normalised over head_dim, flattened again. Built before `before`.
mlir::Value normalisedPerHead(mlir::Value part, mlir::Operation *headNorm, int64_t headDim,
                              mlir::Operation *before);

// The [.., in] value a flattened projection (GPT-2's Reshape-Gemm-Reshape) reads.
mlir::Value unflattenedInput(tfm::LinearOp linear);

// One use that computes with `value`, and any number that read only the dimensions sharding
// its heads keeps (they follow it to the rank's shard).
bool hasOneDataUse(mlir::Value value, int64_t heads, int64_t headDim);

} // namespace dsc::parallel

#endif
