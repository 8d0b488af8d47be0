#include "compiler/Pipeline.h"

#include "compiler/fuse/Passes.h"
#include "compiler/parallel/Passes.h"
#include "compiler/recognize/Passes.h"
#include "compiler/recognize/RecognitionReport.h"
#include "compiler/recognize/RecognizeAttention.h"
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;

namespace dsc {

void addRecognizePasses(OpPassManager &pm, const onnx_frontend::WeightStore *weights,
                        const PipelineOptions &options, RecognitionDeclines *declines) {
  if (options.recognize) {
    // First: the recognisers reason about f32 graphs (a half export is widened inside its
    // interface).
    pm.addPass(createWidenHalfPrecision());
  }
  pm.addPass(createFoldConstants());
  if (!options.recognize)
    return;
  // The layers first (embeddings, norms, linears, activations), then attention, proven on a
  // probe that may read the model's weights: its Q/K/V path then stops at the recognised
  // projections and at norms over each head (Qwen3's q/k norm), and it finds learned
  // position tables as tfm.embedding. Then the prefill and decode programs of a decoder
  // whose every attention was recognised.
  pm.addPass(createRecognizeLayersWithReport(declines, options.missingNormEpsilon));
  // Mixture-of-experts blocks, from the experts' gated MLPs the layers found.
  pm.addPass(createRecognizeMoeWithReport(declines));
  pm.addPass(createRecognizeAttentionWithWeights(weights, options.attentionRemarks,
                                                 options.lowering.maxSeqLen));
  DeriveCacheProgramsOptions derive;
  derive.report = options.attentionRemarks;
  pm.addPass(createDeriveCachePrograms(derive));
  // On the derived programs, whose cache is the session's: the export's repeated K/V heads
  // (Falcon's new architecture) cached once per group.
  pm.addPass(createNarrowRepeatedKv());
  if (options.stepProgram)
    pm.addPass(createDeriveStepProgram());
}

void addShardAndQuantizePasses(OpPassManager &pm, const PipelineOptions &options) {
  // Before sharding and quantizing, which then see a projection per part; with fusion only,
  // which joins the parts again.
  if (options.fuse) {
    UnpackQkvOptions unpack;
    unpack.remarks = options.fuseRemarks;
    pm.addPass(createUnpackQkv(unpack));
  }
  // After the prefill/decode derivation, so that every program is sharded the same way.
  if (options.tensorParallel > 1) {
    TpShardOptions shard;
    shard.ranks = options.tensorParallel;
    shard.expertParallel = options.expertParallel;
    pm.addPass(createTpShard(shard));
  }
  // After sharding: the plan writer quantizes each rank's part, so no group straddles two
  // ranks.
  if (options.int8)
    pm.addPass(createQuantizeWeights(*options.int8));
  if (options.kvCacheDtype != "f32") {
    KvCacheDtypeOptions cache;
    cache.dtype = options.kvCacheDtype;
    pm.addPass(createKvCacheDtype(cache));
  }
}

void addLowerToPlanPasses(OpPassManager &pm, const PipelineOptions &options,
                          const onnx_frontend::WeightStore *weights) {
  // After tp-shard: no fusion across its collectives.
  if (options.fuse)
    addFusePasses(pm, options.fuseRemarks);
  // After fusion, which makes the gated linears whose results it narrows.
  if (options.activationDtype != "f32") {
    ActivationDtypeOptions activations;
    activations.dtype = options.activationDtype;
    pm.addPass(createActivationDtype(activations));
  }
  pm.addPass(createLowerOnnxToPlan(options.lowering));
  pm.addPass(createPlanMemory());
  // Last: the rules read the plan as it will be stored, slots and all.
  SelectKernelsOptions kernels;
  kernels.arch = options.kernelArchs;
  kernels.weightDtype = options.storedWeightDtype;
  pm.addPass(createSelectKernelsWithWeights(weights, kernels));
}

namespace {

LogicalResult runPasses(ModuleOp module, function_ref<void(OpPassManager &)> build) {
  PassManager pm(module.getContext());
  pm.enableVerifier(true);
  build(pm);
  return pm.run(module);
}

} // namespace

LogicalResult recognizeTransformers(ModuleOp module, const onnx_frontend::WeightStore *weights,
                                    const PipelineOptions &options,
                                    RecognitionDeclines *declines) {
  return runPasses(module, [&](OpPassManager &pm) {
    addRecognizePasses(pm, weights, options, declines);
  });
}

LogicalResult shardAndQuantize(ModuleOp module, const PipelineOptions &options) {
  return runPasses(module, [&](OpPassManager &pm) { addShardAndQuantizePasses(pm, options); });
}

LogicalResult lowerToPlan(ModuleOp module, const PipelineOptions &options,
                          const onnx_frontend::WeightStore *weights) {
  return runPasses(module,
                   [&](OpPassManager &pm) { addLowerToPlanPasses(pm, options, weights); });
}

namespace {

// dsc compile's options that shape the pipeline, under the names dsc gives them.
struct CompilePipelineOptions : PassPipelineOptions<CompilePipelineOptions> {
  Option<bool> recognize{*this, "recognize", llvm::cl::desc("Recognise transformer blocks"),
                         llvm::cl::init(true)};
  Option<bool> fuse{*this, "fuse", llvm::cl::desc("Run the fusion passes"),
                    llvm::cl::init(true)};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("Tensor-parallel ranks"), llvm::cl::init(1)};
  Option<bool> ep{*this, "ep",
                  llvm::cl::desc("Place mixtures of experts whole on the tp ranks (dsc --ep)"),
                  llvm::cl::init(false)};
  Option<std::string> dtype{*this, "dtype",
                            llvm::cl::desc("Weights: fp32, fp16, bf16, int8 or int4"),
                            llvm::cl::init("fp32")};
  Option<std::string> computeDtype{
      *this, "compute-dtype",
      llvm::cl::desc("With dtype=int8 or int4: how the other float weights are stored"),
      llvm::cl::init("fp16")};
  Option<int64_t> int8GroupSize{
      *this, "int8-group-size",
      llvm::cl::desc("With dtype=int8 or int4: inputs per scale group (int4: 0 means 32)"),
      llvm::cl::init(0)};
  Option<bool> int4LmHead{*this, "int4-lm-head",
                          llvm::cl::desc("With dtype=int4: the LM head int4 too"),
                          llvm::cl::init(false)};
  Option<bool> int8WeightOnly{
      *this, "int8-weight-only",
      llvm::cl::desc("With dtype=int8: the CPU keeps the activations in f32"),
      llvm::cl::init(false)};
  Option<std::string> kvCacheDtype{
      *this, "kv-cache-dtype",
      llvm::cl::desc("The KV cache: auto (as the float weights are stored), fp32, fp16, bf16"),
      llvm::cl::init("auto")};
  Option<std::string> activationDtype{
      *this, "activation-dtype",
      llvm::cl::desc("The session programs' activations: auto (as the float weights are "
                     "stored), fp32, fp16, bf16"),
      llvm::cl::init("auto")};
  Option<bool> serving{*this, "serving", llvm::cl::desc("Derive the serving engine's @step"),
                       llvm::cl::init(false)};
  Option<int64_t> maxBatch{*this, "max-batch", llvm::cl::desc("Largest batch"),
                           llvm::cl::init(1)};
  Option<int64_t> maxSeqLen{*this, "max-seq-len", llvm::cl::desc("Longest sequence"),
                            llvm::cl::init(128)};
  Option<int64_t> maxTokensPerStep{
      *this, "max-tokens-per-step",
      llvm::cl::desc("The rows of @step (with serving); 0: max-batch"), llvm::cl::init(0)};
  Option<std::string> arch{*this, "arch",
                           llvm::cl::desc("GPU architectures (comma list), or none"),
                           llvm::cl::init("sm_80,sm_90")};
  Option<std::string> weights{
      *this, "weights",
      llvm::cl::desc("The ONNX model whose weights recognition probes and kernel selection "
                     "read, as dsc does (the IR is that model's import: dsc --emit=onnx)"),
      llvm::cl::init("")};
};

// The weights of `path`'s model, imported once per process (dsc-opt runs one pipeline).
FailureOr<const onnx_frontend::WeightStore *> weightsOf(const std::string &path,
                                                        std::string &error) {
  static MLIRContext context;
  static llvm::StringMap<std::shared_ptr<onnx_frontend::WeightStore>> loaded;
  auto found = loaded.find(path);
  if (found != loaded.end())
    return found->second.get();
  onnx_frontend::loadImportDialects(context);
  llvm::raw_string_ostream messages(error);
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
    messages << diagnostic.str() << "\n";
    return success();
  });
  FailureOr<onnx_frontend::ImportedModel> imported = onnx_frontend::importModelFile(context, path);
  if (failed(imported))
    return failure();
  return (loaded[path] = imported->weights).get();
}

// A pipeline that cannot be built fails when it runs, with the reason.
struct FailPass : PassWrapper<FailPass, OperationPass<ModuleOp>> {
  explicit FailPass(std::string message) : message_(std::move(message)) {}
  StringRef getArgument() const override { return "dsc-compile-failed"; }
  void runOnOperation() override {
    getOperation().emitError() << message_;
    signalPassFailure();
  }
  std::string message_;
};

} // namespace

void registerCompilePipeline() {
  PassPipelineRegistration<CompilePipelineOptions>(
      "dsc-compile",
      "dsc compile's whole pipeline from the onnx dialect to a plan with its kernels chosen "
      "(recognition, session programs, sharding, quantization, fusion, lowering, memory plan, "
      "kernel selection); weights=model.onnx gives recognition and kernel selection that "
      "model's weights, as dsc does",
      [](OpPassManager &pm, const CompilePipelineOptions &cli) {
        PipelineOptions options;
        options.recognize = cli.recognize;
        options.fuse = cli.fuse;
        options.tensorParallel = cli.tp;
        options.expertParallel = cli.ep;
        const bool quantized = cli.dtype == "int8" || cli.dtype == "int4";
        if (quantized) {
          QuantizeWeightsOptions quantize;
          quantize.bits = cli.dtype == "int4" ? 4 : 8;
          quantize.lmHeadBits = cli.int4LmHead ? 4 : 8;
          quantize.int8Activations = !cli.int8WeightOnly;
          quantize.defaultGroupSize = cli.dtype == "int4" && cli.int8GroupSize == 0;
          quantize.groupSize =
              cli.dtype == "int4" && cli.int8GroupSize == 0 ? 32 : int64_t(cli.int8GroupSize);
          options.int8 = quantize;
        }
        // As dsc resolves its options (compiler/Driver.cpp), except that the stored dtype
        // is dtype's, not the export's when dtype is not given.
        options.storedWeightDtype = quantized ? cli.computeDtype : cli.dtype;
        auto resolve = [&](const std::string &name) {
          std::string dtype = name == "auto" ? options.storedWeightDtype : name;
          return dtype == "fp16" ? "f16" : dtype == "bf16" ? "bf16" : "f32";
        };
        options.kvCacheDtype = resolve(cli.kvCacheDtype);
        options.activationDtype = resolve(cli.activationDtype);
        options.stepProgram = cli.serving;
        options.lowering.maxBatch = cli.maxBatch;
        options.lowering.maxSeqLen = cli.maxSeqLen;
        options.lowering.maxTokensPerStep = cli.maxTokensPerStep;
        options.kernelArchs = cli.arch;
        const onnx_frontend::WeightStore *weights = nullptr;
        if (!cli.weights.empty()) {
          std::string error;
          FailureOr<const onnx_frontend::WeightStore *> store = weightsOf(cli.weights, error);
          if (failed(store)) {
            pm.addPass(std::make_unique<FailPass>("dsc-compile: cannot read the weights of " +
                                                  cli.weights + ": " + error));
            return;
          }
          weights = *store;
        }
        addRecognizePasses(pm, weights, options, /*declines=*/nullptr);
        addShardAndQuantizePasses(pm, options);
        addLowerToPlanPasses(pm, options, weights);
      });
}

} // namespace dsc
