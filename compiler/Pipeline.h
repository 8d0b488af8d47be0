// The stages of docs/design.md §3 after import, as the dsc driver runs them: one definition that
// the driver and the importer's fuzz harness (fuzz/FuzzOnnxImporter.cpp) share, so that the
// fuzzer exercises the pipeline users run, not a copy of it.
#ifndef DSC_COMPILER_PIPELINE_H
#define DSC_COMPILER_PIPELINE_H

#include "compiler/lowering/Passes.h"
#include "compiler/quantize/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/LLVM.h"

#include <optional>
#include <string>

namespace dsc {
namespace onnx_frontend {
class WeightStore;
}
struct RecognitionDeclines;

struct PipelineOptions {
  bool recognize = true;
  bool attentionRemarks = false;
  int64_t tensorParallel = 1;
  // dsc --ep: mixtures of experts placed whole on the tensorParallel ranks.
  bool expertParallel = false;
  std::optional<QuantizeWeightsOptions> int8;  // set: quantize the recognised linears
  std::string kvCacheDtype = "f32";  // the session's KV cache: f32, f16 or bf16
  // The session programs' half activations (dsc-activation-dtype): f32, f16 or bf16.
  std::string activationDtype = "f32";
  // The epsilon of a decomposed norm the export left without one (dsc-recognize-layers'
  // missing-norm-epsilon): the driver gives config.json's.
  double missingNormEpsilon = 0.0;
  // The serving engine's @step (dsc-derive-step-program; dsc --serving).
  bool stepProgram = false;
  bool fuse = true;
  bool fuseRemarks = false;
  LowerOnnxToPlanOptions lowering;
  // Kernel selection (dsc-select-kernels): the GPU architectures ("none": a CPU-only plan)
  // and how float weights are stored (dsc --dtype, or int8's --compute-dtype).
  std::string kernelArchs = "sm_80,sm_90";
  std::string storedWeightDtype = "fp32";
};

// The three stages' passes, for dsc (which reports between them) and for the one named
// pipeline dsc-opt runs, `dsc-compile` (registerCompilePipeline).
void addRecognizePasses(mlir::OpPassManager &pm, const onnx_frontend::WeightStore *weights,
                        const PipelineOptions &options, RecognitionDeclines *declines);
void addShardAndQuantizePasses(mlir::OpPassManager &pm, const PipelineOptions &options);
void addLowerToPlanPasses(mlir::OpPassManager &pm, const PipelineOptions &options,
                          const onnx_frontend::WeightStore *weights);
void registerCompilePipeline();

// Constant folding, then (unless options.recognize is off) the layers, attention and the
// prefill/decode programs. `declines` (may be null) collects what recognition turned down.
mlir::LogicalResult recognizeTransformers(mlir::ModuleOp module,
                                          const onnx_frontend::WeightStore *weights,
                                          const PipelineOptions &options,
                                          RecognitionDeclines *declines);

// Tensor-parallel sharding, int8 quantization and the KV cache's dtype, each only when
// asked for.
mlir::LogicalResult shardAndQuantize(mlir::ModuleOp module, const PipelineOptions &options);

// Fusion, lowering to the plan dialect, the memory plan and kernel selection. `weights`
// gives a widened half export's stored dtypes to kernel selection.
mlir::LogicalResult lowerToPlan(mlir::ModuleOp module, const PipelineOptions &options,
                                const onnx_frontend::WeightStore *weights);

} // namespace dsc

#endif
