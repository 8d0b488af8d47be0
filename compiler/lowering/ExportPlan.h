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
// The module attribute (i64 array) in which the tp-shard pass records each rank's shard of a
// vocabulary-parallel LM head when it added the prefill_greedy/decode_greedy programs.
inline constexpr const char kVocabShardSizesAttr[] = "dsc.tp_vocab_sizes";

struct ExportOptions {
  // How float weights are stored: "fp32", "fp16" or "bf16". The programs compute in the
  // dtypes of the model; the runtime converts stored weights when it maps them.
  std::string weightDtype = "fp32";
  // --dtype int8 (docs/int8.md): the linear weights the quantize pass marked are int8 and
  // every other float weight is stored as `weightDtype` (the compute dtype). Recorded in
  // the plan's options.
  bool int8 = false;
  // With `int8`: 4 for --dtype int4 (docs/int4.md: the linears int4, the LM head int8).
  int weightBits = 8;
  int64_t int8GroupSize = 0;
  bool int8MlpExtraGrouping = false;
  // Print what quantization lost, weight by weight (dsc --verbose); a summary is printed
  // for any int8 plan.
  bool verbose = false;
  int64_t maxBatch = 1;
  int64_t maxSeqLen = 128;
  // The rows of @step, where the plan has one and they differ from maxBatch (0: maxBatch).
  int64_t maxTokensPerStep = 0;
  std::string modelName;
  // Where config.json, generation_config.json and tokenizer.json are looked for ("": none).
  std::string modelDirectory;
  std::string commandLine;
  std::string producer;
  // "" writes the plan to `path`; "cuda" or "ptx" writes each generated kernel's
  // specialised source or PTX there instead ('-': stdout). The kernels and the
  // architectures they are built for are what dsc-select-kernels recorded in the module.
  std::string emitKernels;
};


// Errors are emitted as diagnostics on the module.
mlir::LogicalResult exportPlan(mlir::ModuleOp module,
                               const onnx_frontend::WeightStore &weights,
                               const ExportOptions &options, const std::string &path);

} // namespace dsc

#endif
