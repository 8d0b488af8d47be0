// The weights of a plan as the plan writer streams them (codegen/PlanWriter.h): each rank's
// shard of a plan.weight_tensor (its transforms applied to the model's bytes as they are
// written), and of a plan.weight_concat (its parts' shards one after the other).
#ifndef DSC_COMPILER_LOWERING_EXPORTWEIGHTS_H
#define DSC_COMPILER_LOWERING_EXPORTWEIGHTS_H

#include "codegen/PlanWriter.h"
#include "compiler/lowering/ExportPlan.h"
#include "dialects/plan/IR/PlanDialect.h"

#include <string>
#include <vector>

namespace dsc {

// What int8 quantization lost over the plan (options.verbose prints each weight).
struct QuantizationSummary {
  int64_t weights = 0;
  double maxRelative = 0;
  double sumMeanRelative = 0;
};

// The key under which a weight is stored once: its name and transforms (a weight used with
// different transforms, a shard per use say, is stored once per use).
std::string weightKey(plan::WeightTensorOp op);

// The dtype `op` (a plan.weight_tensor or plan.weight_concat) is stored in: its transforms
// and --dtype's storage rule applied to its source dtype, which `weights` gives for a
// widened half export (null: the IR's). What the plan writer will write, known without
// reading the weight. Errors are emitted on the op.
mlir::FailureOr<dsrt::DType> storedWeightDType(mlir::Operation *op,
                                               const onnx_frontend::WeightStore *weights,
                                               const std::string &weightDtype);

class WeightShards {
public:
  WeightShards(const onnx_frontend::WeightStore &weights, const ExportOptions &options,
               int ranks)
      : weights_(weights), options_(options), ranks_(ranks) {}

  // One shard per rank, each filled from the model when the plan is written. Errors are
  // emitted on the op.
  mlir::FailureOr<std::vector<WeightShard>> of(plan::WeightTensorOp op) const;
  mlir::FailureOr<std::vector<WeightShard>> of(plan::WeightConcatOp op) const;

  // What int8 quantization lost over the weights written so far.
  const QuantizationSummary &quantization() const { return quantization_; }

private:
  // `linearBias`: stored f32 (a linear's bias, or a part of joined ones: every part alike).
  mlir::FailureOr<std::vector<WeightShard>> of(plan::WeightTensorOp op, bool linearBias) const;

  const onnx_frontend::WeightStore &weights_;
  const ExportOptions &options_;
  int ranks_;
  // Updated by the shards' fill functions, which the writer calls later.
  mutable QuantizationSummary quantization_;
};

} // namespace dsc

#endif
