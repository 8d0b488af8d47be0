#include "compiler/lowering/ExportPlan.h"
#include "compiler/lowering/ExportWeights.h"

#include "codegen/AttachKernels.h"
#include "codegen/PlanWriter.h"
#include "codegen/WeightTransforms.h"
#include "compiler/lowering/ModelInfo.h"
#include "compiler/lowering/PlanView.h"
#include "compiler/lowering/ShapeBounds.h"
#include "dialects/plan/IR/PlanDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/ToolOutputFile.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"

#include <cstring>
#include <functional>

#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace dsc {
namespace {

constexpr uint64_t kSlotAlignment = 64;

// The plan's dtype numbering is the runtime's (schemas/plan.fbs).
dsp::DType planDType(Type type) { return static_cast<dsp::DType>(runtimeDType(type)); }

// Bytes of a dense attribute in the plan's layout: little-endian, one byte per bool.
std::vector<uint8_t> denseBytes(DenseElementsAttr value) {
  return tensorFromAttr(value).storage;
}

// The plan header the module describes. With a writer, the plan file's: each weight is
// registered with its shards, and each step's kernels are the ones its attributes name.
// Without one, the same header with each weight's stored dtype only (no bytes read): what
// dsc-select-kernels' rules see.
class Exporter {
public:
  Exporter(ModuleOp module, const onnx_frontend::WeightStore *weights,
           const ExportOptions &options, dsp::PlanT &plan, PlanWriter *writer)
      : module_(module), weights_(weights), options_(options), writer_(writer), plan_(plan) {
    if (writer)
      weightShards_.emplace(*weights, options_, writer->ranks());
  }

  LogicalResult run();
  const QuantizationSummary &quantization() const { return weightShards_->quantization(); }
  // Without a writer: each weight's stored dtype, by weight_index.
  const std::vector<dsrt::DType> &weightDTypes() const { return weightDTypes_; }
  // Each step's plan.exec.
  const std::map<const dsp::StepT *, plan::ExecOp> &stepOps() const { return stepOps_; }
  // The kernels the module's attributes chose (dsc-select-kernels).
  const codegen::PlanKernelChoices &kernelChoices() const { return kernelChoices_; }

private:
  LogicalResult exportProgram(Block &body, dsp::ProgramT &program);
  FailureOr<int> tensorFor(Value value);
  int addTensor(std::unique_ptr<dsp::TensorT> tensor) {
    plan_.tensors.push_back(std::move(tensor));
    return static_cast<int>(plan_.tensors.size()) - 1;
  }
  std::unique_ptr<dsp::TensorT> describe(Value value, StringRef name);
  LogicalResult addSlots(Operation *op, std::optional<ArrayAttr> bounds,
                         std::optional<ArrayRef<int64_t>> offsets, std::vector<int> &outputs);
  FailureOr<std::unique_ptr<dsp::AttrT>> convertAttr(Operation *op, NamedAttribute attr);
  using ShardsFn = std::function<FailureOr<std::vector<dsc::WeightShard>>()>;
  // The tensor of `op`'s result: weight `key` of the plan, made by `shards` the first time.
  FailureOr<int> weightTensor(Operation *op, StringRef name, const std::string &key,
                              const ShardsFn &shards);

  ModuleOp module_;
  const onnx_frontend::WeightStore *weights_;
  const ExportOptions &options_;
  PlanWriter *writer_;
  dsp::PlanT &plan_;
  DenseMap<Value, int> tensors_;
  llvm::StringMap<int32_t> weightIndex_;
  std::optional<WeightShards> weightShards_;
  std::vector<dsrt::DType> weightDTypes_;
  std::map<const dsp::StepT *, plan::ExecOp> stepOps_;
  codegen::PlanKernelChoices kernelChoices_;
};

codegen::KernelSpec kernelSpec(plan::KernelAttr kernel) {
  codegen::KernelSpec spec{kernel.getKind().str(), {}};
  for (auto [name, value] : llvm::zip(kernel.getNames(), kernel.getValues()))
    spec.constants.push_back({name.getValue().str(), value});
  return spec;
}

std::unique_ptr<dsp::TensorT> Exporter::describe(Value value, StringRef name) {
  auto tensor = std::make_unique<dsp::TensorT>();
  tensor->name = name.str();
  tensor->dtype = planDType(value.getType());
  if (auto ranked = dyn_cast<RankedTensorType>(value.getType()))
    for (int64_t dim : ranked.getShape()) {
      auto d = std::make_unique<dsp::DimT>();
      d->size = ShapedType::isDynamic(dim) ? -1 : dim;
      tensor->shape.push_back(std::move(d));
    }
  return tensor;
}

FailureOr<int> Exporter::tensorFor(Value value) {
  if (isa<NoneType>(value.getType()))
    return -1;
  auto it = tensors_.find(value);
  if (it == tensors_.end())
    return emitError(value.getLoc(), "a step reads a value that the plan does not define");
  return it->second;
}

FailureOr<int> Exporter::weightTensor(Operation *op, StringRef name, const std::string &key,
                                      const ShardsFn &shards) {
  auto [it, inserted] = weightIndex_.try_emplace(key, -1);
  if (inserted && !writer_) {
    FailureOr<dsrt::DType> stored = storedWeightDType(op, weights_, options_.weightDtype);
    if (failed(stored))
      return failure();
    it->second = static_cast<int32_t>(weightDTypes_.size());
    weightDTypes_.push_back(*stored);
  } else if (inserted) {
    FailureOr<std::vector<dsc::WeightShard>> made = shards();
    if (failed(made))
      return failure();
    dsrt::Status status = writer_->addWeight(key, std::move(*made), it->second);
    if (!status.isOk())
      return op->emitOpError() << status.message();
  }
  auto tensor = describe(op->getResult(0), name);
  tensor->kind = dsp::TensorKind::weight;
  tensor->weight_index = it->second;
  return addTensor(std::move(tensor));
}

FailureOr<std::unique_ptr<dsp::AttrT>> Exporter::convertAttr(Operation *op, NamedAttribute attr) {
  auto out = std::make_unique<dsp::AttrT>();
  out->name = attr.getName().str();
  Attribute value = attr.getValue();
  if (auto integer = dyn_cast<IntegerAttr>(value)) {
    out->kind = dsp::AttrKind::int_;
    out->i = integer.getValue().getSExtValue();
  } else if (auto real = dyn_cast<FloatAttr>(value)) {
    out->kind = dsp::AttrKind::float_;
    out->f = static_cast<float>(real.getValueAsDouble());
  } else if (auto text = dyn_cast<StringAttr>(value)) {
    out->kind = dsp::AttrKind::string_;
    out->s = text.str();
  } else if (auto type = dyn_cast<TypeAttr>(value)) {
    out->kind = dsp::AttrKind::type;
    out->type = planDType(type.getValue());
  } else if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
    out->kind = dsp::AttrKind::tensor;
    out->tensor_dtype = planDType(dense.getType());
    out->tensor_shape.assign(dense.getType().getShape().begin(), dense.getType().getShape().end());
    out->tensor_data = denseBytes(dense);
  } else if (auto array = dyn_cast<ArrayAttr>(value)) {
    bool floats = !array.empty() && isa<FloatAttr>(array[0]);
    out->kind = floats ? dsp::AttrKind::floats : dsp::AttrKind::ints;
    for (Attribute element : array) {
      if (auto integer = dyn_cast<IntegerAttr>(element); integer && !floats)
        out->ints.push_back(integer.getValue().getSExtValue());
      else if (auto real = dyn_cast<FloatAttr>(element); real && floats)
        out->floats.push_back(static_cast<float>(real.getValueAsDouble()));
      else
        return op->emitOpError() << "attribute '" << attr.getName().str()
                                 << "' mixes kinds and cannot be stored in a plan";
    }
  } else {
    return op->emitOpError() << "attribute '" << attr.getName().str()
                             << "' cannot be stored in a plan";
  }
  return out;
}

LogicalResult Exporter::addSlots(Operation *op, std::optional<ArrayAttr> bounds,
                                 std::optional<ArrayRef<int64_t>> offsets,
                                 std::vector<int> &outputs) {
  if (!bounds || !offsets)
    return op->emitOpError("has no memory plan; run dsc-plan-memory first");
  for (auto [index, result] : llvm::enumerate(op->getResults())) {
    auto bound = cast<DenseI64ArrayAttr>((*bounds)[index]).asArrayRef();
    std::string name;
    if (auto source = op->getAttrOfType<StringAttr>("source"); source && !source.empty())
      name = source.str() + (op->getNumResults() > 1 ? ":" + std::to_string(index) : "");
    auto tensor = describe(result, name);
    if (!isa<RankedTensorType>(result.getType())) {
      tensor->kind = dsp::TensorKind::dynamic;
      int id = addTensor(std::move(tensor));
      tensors_[result] = id;
      outputs.push_back(id);
      continue;
    }
    tensor->kind = dsp::TensorKind::activation;
    tensor->max_shape.assign(bound.begin(), bound.end());
    uint64_t elements = 1;
    for (int64_t dim : bound)
      elements *= static_cast<uint64_t>(dim);
    uint64_t bytes = elements * dsrt::dtypeSize(static_cast<dsrt::DType>(tensor->dtype));
    tensor->arena_offset = static_cast<uint64_t>((*offsets)[index]);
    tensor->arena_bytes = std::max<uint64_t>(kSlotAlignment,
                                             (bytes + kSlotAlignment - 1) / kSlotAlignment *
                                                 kSlotAlignment);
    int id = addTensor(std::move(tensor));
    tensors_[result] = id;
    outputs.push_back(id);
  }
  return success();
}

LogicalResult Exporter::exportProgram(Block &body, dsp::ProgramT &program) {
  for (Operation &op : body) {
    if (auto input = dyn_cast<plan::InputOp>(op)) {
      auto tensor = describe(input.getValue(), input.getName());
      tensor->kind = dsp::TensorKind::input;
      if (auto dims = input.getDims())
        for (auto [d, symbol] : llvm::enumerate(dims->getAsValueRange<StringAttr>()))
          if (!symbol.empty())
            tensor->shape[d]->symbol = symbol.str();
      if (auto bound = input.getMaxShape())
        tensor->max_shape.assign(bound->begin(), bound->end());
      int id = addTensor(std::move(tensor));
      tensors_[input.getValue()] = id;
      program.inputs.push_back(id);
    } else if (auto constant = dyn_cast<plan::ConstantOp>(op)) {
      auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!dense)
        return constant.emitOpError("holds a constant that is not dense");
      auto tensor = describe(constant.getOutput(), "");
      tensor->kind = dsp::TensorKind::constant;
      tensor->constant_data = denseBytes(dense);
      tensors_[constant.getOutput()] = addTensor(std::move(tensor));
    } else if (auto weight = dyn_cast<plan::WeightTensorOp>(op)) {
      // A part of joined weights only is no weight of the plan by itself.
      if (!weight->use_empty() &&
          llvm::all_of(weight->getUsers(), [](Operation *user) {
            return isa<plan::WeightConcatOp>(user);
          }))
        continue;
      FailureOr<int> id = weightTensor(weight, weight.getName(), weightKey(weight),
                                       [&] { return weightShards_->of(weight); });
      if (failed(id))
        return failure();
      tensors_[weight.getOutput()] = *id;
    } else if (auto concat = dyn_cast<plan::WeightConcatOp>(op)) {
      // "q+k+v [q's key, k's key, v's key]", listed like a weight with its transforms.
      std::string name, parts;
      for (Value part : concat.getParts()) {
        auto weight = part.getDefiningOp<plan::WeightTensorOp>();
        parts += (parts.empty() ? "" : ", ") + weightKey(weight);
        // GPT-2's c_attn under TP: three parts of one weight are named once.
        if (name != weight.getName() && !StringRef(name).ends_with("+" + weight.getName().str()))
          name += (name.empty() ? "" : "+") + weight.getName().str();
      }
      std::string key = name + " [" + parts + "]";
      FailureOr<int> id = weightTensor(concat, name, key, [&] { return weightShards_->of(concat); });
      if (failed(id))
        return failure();
      tensors_[concat.getOutput()] = *id;
    } else if (isa<plan::NoneOp>(op)) {
      continue;
    } else if (auto exec = dyn_cast<plan::ExecOp>(op)) {
      auto step = std::make_unique<dsp::StepT>();
      step->op = exec.getOp().str();
      if (exec.getSource())
        step->location = exec.getSource()->str();
      for (Value input : exec.getInputs()) {
        FailureOr<int> id = tensorFor(input);
        if (failed(id))
          return failure();
        step->inputs.push_back(*id);
      }
      for (NamedAttribute attr : exec.getAttrs()) {
        auto converted = convertAttr(exec, attr);
        if (failed(converted))
          return failure();
        step->attrs.push_back(std::move(*converted));
      }
      if (failed(addSlots(exec, exec.getMaxShapes(), exec.getArenaOffsets(), step->outputs)))
        return failure();
      stepOps_[step.get()] = exec;
      if (auto kernels = exec.getKernels()) {
        codegen::KernelChoice &choice = kernelChoices_.steps[step.get()];
        for (auto kernel : kernels->getAsRange<plan::KernelAttr>())
          choice.kernels.push_back(kernelSpec(kernel));
      } else if (auto decline = exec.getKernelDecline()) {
        codegen::KernelChoice &choice = kernelChoices_.steps[step.get()];
        choice.declined = true;
        choice.reason = decline->str();
      }
      program.steps.push_back(std::move(step));
    } else if (auto branch = dyn_cast<plan::IfOp>(op)) {
      auto step = std::make_unique<dsp::StepT>();
      step->op = "If";
      FailureOr<int> cond = tensorFor(branch.getCond());
      if (failed(cond))
        return failure();
      step->inputs.push_back(*cond);
      if (failed(addSlots(branch, branch.getMaxShapes(), branch.getArenaOffsets(), step->outputs)))
        return failure();
      for (Region *region : {&branch.getThenBranch(), &branch.getElseBranch()}) {
        auto sub = std::make_unique<dsp::ProgramT>();
        dsp::ProgramT *subProgram = sub.get();
        step->branches.push_back(static_cast<int>(plan_.programs.size()));
        plan_.programs.push_back(std::move(sub));
        if (failed(exportProgram(region->front(), *subProgram)))
          return failure();
      }
      program.steps.push_back(std::move(step));
    } else if (auto yield = dyn_cast<plan::YieldOp>(op)) {
      for (Value value : yield.getOutputs()) {
        FailureOr<int> id = tensorFor(value);
        if (failed(id))
          return failure();
        program.branch_outputs.push_back(*id);
      }
    } else if (auto ret = dyn_cast<plan::ReturnOp>(op)) {
      for (auto [index, value] : llvm::enumerate(ret.getOutputs())) {
        FailureOr<int> id = tensorFor(value);
        if (failed(id))
          return failure();
        program.outputs.push_back(*id);
        // Outputs carry the model's names; other tensors keep theirs.
        dsp::TensorT &tensor = *plan_.tensors[*id];
        if (ret.getNames() && (tensor.kind == dsp::TensorKind::activation ||
                               tensor.kind == dsp::TensorKind::dynamic))
          tensor.name = cast<StringAttr>((*ret.getNames())[index]).str();
      }
    } else {
      return op.emitOpError("cannot be stored in a plan");
    }
  }
  return success();
}

LogicalResult Exporter::run() {
  plan_.producer = options_.producer;
  plan_.model_name = options_.modelName;
  plan_.options = std::make_unique<dsp::CompileOptionsT>();
  plan_.options->dtype = !options_.int8 ? options_.weightDtype
                         : options_.weightBits == 4 ? "int4"
                                                    : "int8";
  if (options_.int8) {
    plan_.options->compute_dtype = options_.weightDtype;
    plan_.options->int8_group_size = static_cast<int32_t>(options_.int8GroupSize);
    plan_.options->int8_mlp_extra_grouping = options_.int8MlpExtraGrouping;
  }
  plan_.options->tp = writer_ ? writer_->ranks() : 1;
  plan_.options->command_line = options_.commandLine;
  plan_.limits = std::make_unique<dsp::LimitsT>();
  plan_.limits->max_batch = options_.maxBatch;
  plan_.limits->max_seq_len = options_.maxSeqLen;
  plan_.limits->max_tokens_per_step = options_.maxTokensPerStep;
  plan_.arena_alignment = kSlotAlignment;
  for (auto arena : module_.getOps<plan::ArenaOp>())
    if (arena.getSymName() == "arena")
      plan_.arena_bytes = arena.getSize();

  // Top-level programs first, so that their indices do not depend on If branches.
  SmallVector<std::pair<plan::ProgramOp, dsp::ProgramT *>> programs;
  for (auto program : module_.getOps<plan::ProgramOp>()) {
    auto lowered = std::make_unique<dsp::ProgramT>();
    lowered->name = program.getSymName().str();
    programs.push_back({program, lowered.get()});
    plan_.programs.push_back(std::move(lowered));
  }
  if (programs.empty())
    return module_.emitError("has no plan.program to store");
  for (auto [program, lowered] : programs)
    if (failed(exportProgram(program.getRegion().front(), *lowered)))
      return failure();
  if (failed(describeModel(plan_, options_.modelDirectory, options_.maxSeqLen,
                           module_.getLoc())))
    return failure();
  if (auto vocabSizes = module_->getAttrOfType<DenseI64ArrayAttr>(kVocabShardSizesAttr))
    describeVocabularyShards(plan_, vocabSizes.asArrayRef());
  if (auto sampling =
          module_->getAttrOfType<plan::KernelAttr>(plan::PlanDialect::kSamplingKernelAttr))
    kernelChoices_.sampling = kernelSpec(sampling);
  return success();
}

// Compiles the kernels that kernel selection chose (for the module's plan.kernel_archs),
// or prints them (--emit=cuda|ptx).
LogicalResult attachPlanKernels(ModuleOp module, const ExportOptions &options,
                                const Exporter &exporter, PlanWriter &writer, bool &printed,
                                const std::string &path) {
  dsp::PlanT &plan = writer.plan();
  printed = false;
  codegen::AttachKernelsOptions attach;
  if (auto archs = module->getAttrOfType<ArrayAttr>(plan::PlanDialect::kKernelArchsAttr))
    for (auto arch : archs.getAsValueRange<StringAttr>())
      attach.archs.push_back(arch.str());
  if (!options.emitKernels.empty() && attach.archs.empty())
    return module.emitError() << "--emit=" << options.emitKernels
                              << " needs GPU architectures, not --arch none";
  attach.compile = options.emitKernels != "cuda";
  codegen::AttachKernelsReport report;
  dsrt::Status status = codegen::emitKernels(plan, exporter.kernelChoices(), attach, report);
  if (!status.isOk())
    return module.emitError() << status.message();
  for (const std::string &warning : report.warnings)
    llvm::errs() << "dsc: warning: " << warning << "\n";
  if (options.emitKernels.empty())
    return success();

  std::string error;
  auto out = openOutputFile(path, &error);
  if (!out)
    return module.emitError() << error;
  llvm::raw_ostream &os = out->os();
  os << "// " << report.kernels << " kernels for " << report.stepsWithKernels << " of "
     << report.steps << " steps with a kernel rule (" << report.declined << " declined)\n";
  for (const std::string &decline : report.declines)
    os << "// declined: " << decline << "\n";
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const dsp::KernelT &kernel = *plan.kernels[i];
    os << "\n// ---- kernel " << kernel.name << " (entry " << kernel.entry << ")\n";
    if (options.emitKernels == "cuda")
      os << report.sources[i];
    else
      os << llvm::StringRef(reinterpret_cast<const char *>(kernel.ptx.data()),
                            kernel.ptx.size());
  }
  out->keep();
  printed = true;
  return success();
}

} // namespace

LogicalResult exportPlan(ModuleOp module, const onnx_frontend::WeightStore &weights,
                         const ExportOptions &options, const std::string &path) {
  // The tensor-parallel degree the tp-shard pass recorded (one rank without it).
  int ranks = 1;
  if (auto tp = module->getAttrOfType<IntegerAttr>(kTensorParallelRanksAttr))
    ranks = static_cast<int>(tp.getInt());
  PlanWriter writer(ranks);
  Exporter exporter(module, &weights, options, writer.plan(), &writer);
  if (failed(exporter.run()))
    return failure();
  bool printed = false;
  if (failed(attachPlanKernels(module, options, exporter, writer, printed, path)))
    return failure();
  if (printed)
    return success();
  dsrt::Status status = writer.write(path);
  if (!status.isOk())
    return module.emitError() << status.message();
  const QuantizationSummary &quantization = exporter.quantization();
  if (quantization.weights > 0)
    llvm::errs() << llvm::format(
        "dsc: %s: %lld weights quantized; max error %.3f%% of a group's max |w|, mean "
        "%.3f%% of |w| (--verbose: per weight)\n",
        options.weightBits == 4 ? "int4" : "int8", static_cast<long long>(quantization.weights),
        100 * quantization.maxRelative,
        100 * quantization.sumMeanRelative / quantization.weights);
  return success();
}

LogicalResult describePlan(ModuleOp module, const onnx_frontend::WeightStore *weights,
                           const std::string &weightDtype, PlanView &view) {
  ExportOptions options;
  options.weightDtype = weightDtype;
  view.plan = dsp::PlanT();
  Exporter exporter(module, weights, options, view.plan, /*writer=*/nullptr);
  if (failed(exporter.run()))
    return failure();
  view.weightDTypes = exporter.weightDTypes();
  view.steps.clear();
  for (auto [step, exec] : exporter.stepOps())
    view.steps[step] = exec;
  return success();
}

} // namespace dsc
