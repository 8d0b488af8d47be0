#include "compiler/recognize/ProbeEvaluator.h"

#include "compiler/lowering/RuntimeTypes.h"
#include "compiler/recognize/RecognizeAttention.h"
#include "dialects/onnx/IR/OnnxDialect.h"
#include "dialects/tfm/IR/TfmDialect.h"
#include "frontends/onnx/WeightStore.h"
#include "ops/OpTraits.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"

#include <cstring>
#include <limits>

using namespace mlir;

namespace dsc::probe {
namespace {

std::string kernelName(Operation *op) {
  return isTfm(op) ? op->getName().getStringRef().str() : op->getName().stripDialect().str();
}


// Runs one op with the runtime's kernels. Inputs are null for absent optional inputs;
// data-less inputs give shapes only.
dsrt::Status runKernel(Operation *op, const std::vector<const Info *> &inputs,
                       bool wantValues, std::vector<Info> &results,
                       int64_t maxElements = kMaxKnownElements,
                       dsrt::ops::KvCache *cache = nullptr) {
  std::string name = kernelName(op);
  if (!dsrt::ops::isSupported(name))
    return dsrt::Status::error("no kernel for " + name);
  dsrt::ops::AttrMap attrs;
  if (isTfm(op)) {
    // Exactly the plan step's attributes (compiler/lowering/RuntimeTypes).
    FailureOr<dsrt::ops::AttrMap> step = kernelAttributes(op);
    if (failed(step))
      return dsrt::Status::error("no step attributes");
    attrs = std::move(*step);
    // Not carried by the lowering yet: how rows with nothing to attend are averaged.
    if (auto unattended = op->getAttrOfType<StringAttr>("tfm.unattended"))
      attrs["unattended"] = dsrt::ops::Attr::ofString(unattended.getValue().str());
  } else {
    dsrt::Status status = evaluate::convertAttributes(op, attrs);
    if (!status.isOk())
      return status;
  }
  dsrt::Status status = dsrt::Status::ok();
  // `inputs` are in operand order; steps take tfm ops' optional operands by position, an
  // absent one as null.
  std::vector<const Info *> slots = inputs;
  if (isTfm(op)) {
    slots.clear();
    size_t next = 0;
    for (Value input : stepInputs(op))
      slots.push_back(input ? inputs[next++] : nullptr);
  }
  std::vector<dsrt::TensorRef> refs(slots.size());
  dsrt::ops::Inputs kernelInputs;
  bool allKnown = true;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Info *input = slots[i];
    if (!input || input->isNone) {
      kernelInputs.push_back(nullptr);
      continue;
    }
    refs[i] = {input->dtype, input->shape,
               input->value ? input->value->storage.data() : nullptr};
    allKnown &= input->value != nullptr;
    kernelInputs.push_back(&refs[i]);
  }
  std::vector<dsrt::ops::OutputSpec> specs;
  status = dsrt::ops::inferShapes(name, attrs, kernelInputs, op->getNumResults(), specs);
  if (!status.isOk())
    return status;
  if (specs.size() < op->getNumResults())
    return dsrt::Status::error("the kernel gives fewer results than the op has");
  results.assign(op->getNumResults(), Info());
  bool small = true;
  for (unsigned i = 0; i < op->getNumResults(); ++i) {
    results[i].dtype = specs[i].dtype;
    results[i].shape = specs[i].shape;
    small &= dsrt::elementCount(specs[i].shape) <= maxElements;
  }
  if (!wantValues || !small || (!allKnown && dsrt::ops::readsInputValues(name)))
    return dsrt::Status::ok();
  std::vector<dsrt::TensorRef> outRefs(op->getNumResults());
  dsrt::ops::Outputs outputs;
  for (unsigned i = 0; i < op->getNumResults(); ++i) {
    results[i].value = std::make_shared<dsrt::OwnedTensor>(specs[i].dtype, specs[i].shape);
    outRefs[i] = results[i].value->ref();
    outputs.push_back(&outRefs[i]);
  }
  dsrt::ops::SessionState state;
  state.cache = cache;
  status = dsrt::ops::compute(name, attrs, kernelInputs, outputs, cache ? &state : nullptr);
  if (!status.isOk()) {
    for (Info &result : results)
      result.value.reset();
    return maxElements > kMaxKnownElements ? status : dsrt::Status::ok();
  }
  return dsrt::Status::ok();
}


} // namespace

void ProbeEvaluator::runOp(Operation *op) {
  if (op->hasTrait<OpTrait::IsTerminator>())
    return;
  if (auto constant = dyn_cast<onnx::ConstantOp>(op)) {
    auto value = std::make_shared<dsrt::OwnedTensor>();
    if (!evaluate::toTensor(cast<ElementsAttr>(constant.getValue()), *value).isOk())
      return;
    Info info{value->dtype, value->shape, false, value};
    define(constant.getResult(), std::move(info));
    return;
  }
  // A weight's values are read (when small enough) only where the IR's type is the stored
  // tensor's: an onnx weight, or a tfm weight without transforms to apply.
  auto defineWeight = [&](Value result, llvm::StringRef name, bool valuesApply) {
    auto type = cast<RankedTensorType>(result.getType());
    Info info;
    info.dtype = evaluate::toDType(type.getElementType());
    info.shape.assign(type.getShape().begin(), type.getShape().end());
    if (weights_ && valuesApply && dsrt::elementCount(info.shape) <= maxElements_) {
      const onnx_frontend::WeightRecord *record = weights_->lookup(name);
      // A half weight that dsc-widen-half-precision declared f32 is read widened.
      const dsrt::DType stored =
          record ? evaluate::storedWeightDType(*record, info.dtype) : info.dtype;
      const int64_t count = dsrt::elementCount(info.shape);
      // A MatMulNBits weight's values are its codes, dequantized.
      std::vector<uint8_t> decoded;
      llvm::ArrayRef<uint8_t> bytes =
          record ? onnx_frontend::weightValues(*record, decoded) : llvm::ArrayRef<uint8_t>();
      if (record && info.dtype == dsrt::DType::F32 && stored != dsrt::DType::F32 &&
          bytes.size() == size_t(count) * dsrt::dtypeSize(stored)) {
        info.value = std::make_shared<dsrt::OwnedTensor>(info.dtype, info.shape);
        if (!dsrt::convertFloats(stored, bytes.data(), dsrt::DType::F32,
                                 info.value->storage.data(), count))
          info.value.reset();
      } else if (record && bytes.size() == size_t(count) * dsrt::dtypeSize(info.dtype)) {
        info.value = std::make_shared<dsrt::OwnedTensor>(info.dtype, info.shape);
        if (!bytes.empty())
          std::memcpy(info.value->storage.data(), bytes.data(), bytes.size());
      }
    }
    define(result, std::move(info));
  };
  if (auto weight = dyn_cast<onnx::WeightOp>(op)) {
    defineWeight(weight.getResult(), weight.getName(), /*valuesApply=*/true);
    return;
  }
  if (auto weight = dyn_cast<tfm::WeightOp>(op)) {
    ArrayAttr transforms = weight.getTransformsAttr();
    defineWeight(weight.getResult(), weight.getName(), !transforms || transforms.empty());
    return;
  }
  if (isa<onnx::NoValueOp>(op)) {
    Info info;
    info.isNone = true;
    define(op->getResult(0), std::move(info));
    return;
  }
  if (auto branch = dyn_cast<onnx::IfOp>(op)) {
    // Both branches run (the condition is data); the If takes the first branch whose
    // results are all known. Attention inside a branch is recognised branch by branch.
    const Info *cond = lookup(branch.getCond());
    SmallVector<Region *> regions = {&branch.getThenBranch(), &branch.getElseBranch()};
    if (cond && cond->value && cond->value->storage.size() == 1)
      regions = {cond->value->storage[0] ? regions[0] : regions[1]};
    for (Region *region : regions)
      runBlock(region->front());
    for (Region *region : regions) {
      Operation *yield = region->front().getTerminator();
      bool complete = llvm::all_of(yield->getOperands(), [&](Value v) { return lookup(v); });
      if (!complete)
        continue;
      for (auto [result, yielded] : llvm::zip(branch.getResults(), yield->getOperands()))
        define(result, *lookup(yielded));
      return;
    }
    return;
  }
  std::vector<const Info *> inputs;
  for (Value operand : op->getOperands()) {
    const Info *info = lookup(operand);
    if (!info)
      return;  // an unknown operand leaves the results unknown (the first failure says why)
    inputs.push_back(info);
  }
  std::vector<Info> results;
  dsrt::Status status =
      runKernel(op, inputs, /*wantValues=*/true, results, maxElements_, cache_);
  if (status.isOk()) {
    for (auto [result, info] : llvm::zip(op->getResults(), results))
      define(result, std::move(info));
    return;
  }
  failed(op, status.message());
  // A recognised tfm op without a kernel: its result keeps the leading dimensions of its
  // first operand (linear, norms, activations, embedding, residual all do).
  if (!isTfm(op) || op->getNumResults() != 1 || inputs.empty() || !inputs[0])
    return;
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!type)
    return;
  Info info;
  info.dtype = evaluate::toDType(type.getElementType());
  for (int64_t d = 0; d < type.getRank(); ++d) {
    if (!type.isDynamicDim(d))
      info.shape.push_back(type.getDimSize(d));
    else if (d < int64_t(inputs[0]->shape.size()))
      info.shape.push_back(inputs[0]->shape[d]);
    else
      return;
  }
  define(op->getResult(0), std::move(info));
}


std::shared_ptr<dsrt::OwnedTensor> evaluateSeeded(const ProbeEvaluator &probe,
                                                  const Seeds &seeds, Value target,
                                                  llvm::SetVector<Operation *> &region,
                                                  std::string &why) {
  for (auto &[value, data] : seeds)
    if (value == target)
      return data;
  Operation *targetOp = target.getDefiningOp();
  if (!targetOp) {
    why = "the target is a function argument that is not seeded";
    return nullptr;
  }
  Block *block = targetOp->getBlock();
  // Ops reachable from the seeds, up to the target.
  llvm::SmallPtrSet<Operation *, 32> forward;
  SmallVector<Value> worklist;
  for (auto &[value, data] : seeds)
    worklist.push_back(value);
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      Operation *inBlock = block->findAncestorOpInBlock(*user);
      if (inBlock != user || !(user == targetOp || user->isBeforeInBlock(targetOp)))
        continue;
      // What reads only the seeds' shapes (the scale 1/sqrt(d) of SDPA exports) keeps its
      // probe value: it is not part of the data path.
      if (isOp(user, "onnx.Shape") || isOp(user, "onnx.Size"))
        continue;
      if (forward.insert(user).second)
        llvm::append_range(worklist, user->getResults());
    }
  }
  // ... that the target depends on.
  llvm::SmallPtrSet<Operation *, 32> needed;
  SmallVector<Operation *> stack = {targetOp};
  while (!stack.empty()) {
    Operation *op = stack.pop_back_val();
    if (!forward.contains(op) || !needed.insert(op).second)
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        stack.push_back(def);
  }
  if (!needed.contains(targetOp)) {
    why = "the target does not depend on the seeds";
    return nullptr;
  }
  llvm::DenseMap<Value, Info> local;
  // The region computes values as large as its seeds (a long probe's scores, heads times
  // queries times 2048 keys and more): those are what it is for, not too large to compute.
  int64_t maxElements = kMaxKnownElements;
  for (auto &[value, data] : seeds) {
    local[value] = Info{data->dtype, data->shape, false, data};
    maxElements = std::max(maxElements, dsrt::elementCount(data->shape));
  }
  for (Operation &op : *block) {
    if (!needed.contains(&op))
      continue;
    region.insert(&op);
    if (op.getNumRegions() != 0) {
      why = "an op with regions lies inside the attention";
      return nullptr;
    }
    std::vector<const Info *> inputs;
    for (Value operand : op.getOperands()) {
      auto it = local.find(operand);
      const Info *info = it != local.end() ? &it->second : probe.lookup(operand);
      if (!info || (!info->isNone && !info->value)) {
        why = "'" + evaluate::describeLocation(op.getLoc()) + "' (" +
              op.getName().getStringRef().str() +
              ") reads a value that is not computable on the probe";
        return nullptr;
      }
      inputs.push_back(info);
    }
    std::vector<Info> results;
    dsrt::Status status = runKernel(&op, inputs, /*wantValues=*/true, results, maxElements);
    if (!status.isOk() || llvm::any_of(results, [](const Info &i) { return !i.value; })) {
      why = "'" + evaluate::describeLocation(op.getLoc()) + "' cannot run on the probe" +
            (status.isOk() ? std::string() : ": " + status.message());
      return nullptr;
    }
    for (auto [result, info] : llvm::zip(op.getResults(), results))
      local[result] = std::move(info);
  }
  return local[target].value;
}

std::shared_ptr<dsrt::OwnedTensor> ProbeEvaluator::weightAsF32(llvm::StringRef name) const {
  const onnx_frontend::WeightRecord *record = weights_ ? weights_->lookup(name) : nullptr;
  if (!record || record->coding)
    return nullptr;
  const dsrt::DType stored = evaluate::storedWeightDType(*record, dsrt::DType::F32);
  dsrt::Shape shape(record->dims.begin(), record->dims.end());
  const int64_t count = dsrt::elementCount(shape);
  if (stored == dsrt::DType::Undefined ||
      record->bytes.size() != size_t(count) * dsrt::dtypeSize(stored))
    return nullptr;
  auto tensor = std::make_shared<dsrt::OwnedTensor>(dsrt::DType::F32, shape);
  if (!dsrt::convertFloats(stored, record->bytes.data(), dsrt::DType::F32,
                           tensor->storage.data(), count))
    return nullptr;
  return tensor;
}

} // namespace dsc::probe

namespace dsc {

using probe::Info;
using probe::ProbeEvaluator;

dsrt::Status runWithKernels(func::FuncOp func, const onnx_frontend::WeightStore *weights,
                            const std::vector<dsrt::OwnedTensor> &inputs,
                            std::vector<dsrt::OwnedTensor> &outputs, dsrt::ops::KvCache *cache) {
  if (inputs.size() != func.getNumArguments())
    return dsrt::Status::error("expected " + std::to_string(func.getNumArguments()) +
                               " inputs");
  ProbeEvaluator evaluator(weights, std::numeric_limits<int64_t>::max(), cache);
  for (auto [argument, input] : llvm::zip(func.getArguments(), inputs)) {
    auto tensor = std::make_shared<dsrt::OwnedTensor>(input);
    evaluator.define(argument, Info{tensor->dtype, tensor->shape, false, tensor});
  }
  evaluator.runBlock(func.getBody().front());
  outputs.clear();
  for (Value result : func.getBody().front().getTerminator()->getOperands()) {
    const Info *info = evaluator.lookup(result);
    if (!info || !info->value)
      return dsrt::Status::error("an output was not computed" +
                                 (evaluator.firstFailure.empty()
                                      ? std::string()
                                      : ": " + evaluator.firstFailure));
    outputs.push_back(*info->value);
  }
  return dsrt::Status::ok();
}

} // namespace dsc
