// tp-shard's sharder, private to compiler/parallel: what TpShard.cpp (the pass and the
// attentions) and ShardFeedForward.cpp (the MLPs and the LM heads) share.
#ifndef DSC_COMPILER_PARALLEL_SHARDER_H
#define DSC_COMPILER_PARALLEL_SHARDER_H

#include "compiler/parallel/ProjectionTrace.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace dsc::parallel {

// n split into `ranks` consecutive parts, the remainder going to the lowest ranks (so
// rank 0's part, the IR's, is the largest).
llvm::SmallVector<int64_t> evenSizes(int64_t n, int64_t ranks);

llvm::SmallVector<int64_t> offsetsOf(llvm::ArrayRef<int64_t> sizes);

llvm::SmallVector<int64_t> scaled(llvm::ArrayRef<int64_t> values, int64_t factor);

mlir::RankedTensorType withDim(mlir::Type type, int64_t axis, int64_t size);

// Each rank's query and KV heads.
struct HeadSplit {
  llvm::SmallVector<int64_t> heads, headOffsets, kvHeads, kvOffsets;
  bool kvReplicated = false;
};

class Sharder {
public:
  Sharder(mlir::func::FuncOp func, int64_t ranks, bool expertParallel = false)
      : func_(func), ranks_(ranks), expertParallel_(expertParallel), b_(func.getContext()) {}

  // Shards what it can: every attention, or none where one cannot be sharded (with a
  // warning); the MLPs and LM heads either way. Fails only on errors already emitted.
  mlir::LogicalResult run();

private:
  struct AttentionPlan {
    tfm::AttentionOp op;
    HeadSplit split;
    Projection parts[3];  // Q, K, V
    tfm::LinearOp output;
  };

  std::string planAttention(tfm::AttentionOp attention, AttentionPlan &plan);
  mlir::LogicalResult shardAttention(AttentionPlan &plan);
  mlir::FailureOr<mlir::Value> columnParallel(tfm::LinearOp linear, mlir::Value input,
                                              llvm::ArrayRef<mlir::Attribute> select,
                                              llvm::ArrayRef<int64_t> offsets,
                                              llvm::ArrayRef<int64_t> sizes);
  mlir::LogicalResult rowParallel(tfm::LinearOp linear, llvm::ArrayRef<int64_t> offsets,
                                  llvm::ArrayRef<int64_t> sizes,
                                  mlir::Operation *unflatten = nullptr);
  mlir::LogicalResult shardGlobalNorm(tfm::RmsNormOp norm, llvm::ArrayRef<int64_t> offsets,
                                      llvm::ArrayRef<int64_t> sizes, int64_t features);
  mlir::LogicalResult shardMlps();
  mlir::LogicalResult shardElementwiseMlps();
  mlir::LogicalResult shardLmHeads();
  mlir::LogicalResult shardMoes();
  mlir::LogicalResult placeExperts(tfm::MoeOp moe);
  mlir::LogicalResult shardSharedExpert(tfm::MoeOp moe);
  mlir::FailureOr<mlir::Value> shardEachPart(mlir::Value stack, int64_t axis,
                                             llvm::ArrayRef<int64_t> offsets,
                                             llvm::ArrayRef<int64_t> sizes);
  int64_t sharedWidth(tfm::MoeOp moe) const;
  void reduceAfter(tfm::MoeOp moe);
  void eraseDead();

  mlir::Attribute shard(int64_t axis, llvm::ArrayRef<int64_t> offsets,
                        llvm::ArrayRef<int64_t> sizes) {
    return tfm::ShardAttr::get(b_.getContext(), axis, offsets, sizes, 1);
  }

  mlir::func::FuncOp func_;
  int64_t ranks_;
  bool expertParallel_;
  // The unfused Q/K/V projections sharded so far: attentions that share keys and values
  // (Gemma-4's KV-shared layers) shard them once.
  llvm::DenseSet<mlir::Operation *> shardedProjections_;
  llvm::DenseSet<mlir::Operation *> retypedHeadOps_;
  mlir::Builder b_;
};

} // namespace dsc::parallel

#endif
