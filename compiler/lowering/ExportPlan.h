// The last step of `dsc compile`: a module of plan programs (after dsc-plan-memory) and the
// import's weights become a .dsp file through codegen/PlanWriter.
#ifndef DSC_COMPILER_LOWERING_EXPORTPLAN_H
#define DSC_COMPILER_LOWERING_EXPORTPLAN_H

#include "frontends/onnx/WeightStore.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace dsc {

// The module attribute (an integer) in which the tp-shard pass records the
// tensor-parallel degree: the plan gets one weight section per rank.
inline constexpr const char kTensorParallelRanksAttr[] = "dsc.tp_ranks";

struct ExportOptions {
  // How float weights are stored: "fp32", "fp16" or "bf16". The programs compute in the
  // dtypes of the model; the runtime converts stored weights when it maps them.
  std::string weightDtype = "fp32";
  int64_t maxBatch = 1;
  int64_t maxSeqLen = 128;
  std::string modelName;
  // Where config.json, generation_config.json and tokenizer.json are looked for ("": none).
  std::string modelDirectory;
  std::string commandLine;
  std::string producer;
};

// Errors are emitted as diagnostics on the module.
mlir::LogicalResult exportPlan(mlir::ModuleOp module,
                               const onnx_frontend::WeightStore &weights,
                               const ExportOptions &options, const std::string &path);

} // namespace dsc

#endif
